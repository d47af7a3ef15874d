"""Compare variants: the same tokens through every registered class, and equivalences measured live.

Pure compute and figure builders (no Streamlit).  Every variant gets the same input embeddings
(the Trace's ``embeddings["input"]``) and the same seed and mask, is created with ``torch.manual_seed(seed)``
right before ``build_module`` (so its weights are the ones the other pages show for that variant)
and runs in eval mode (dropout off) on the CPU.  At the book's toy example, as the sidebar's book size sets it
(:func:`book_listing`), each class is instead seeded and masked as its listing in the book is
(``Variant.book_seed``: 789 for SelfAttention_v2, 123 for the others; ``Variant.book_causal``), as
``config.preset_config`` builds it and the other pages show it when it is picked, so every map is the book's.
The grouped-query, latent and sliding-window variants run the K/V groups, latent width and window W they are given
(the sidebar's, whichever class is picked; a default, said under the map, where a size does not fit the variant:
:func:`set_aside_note`), and the window's map greys the keys it hid; the line under each bonus variant's map gives
the sizes it ran with (:func:`variant_sizes`).

The equivalences are computed, never asserted in text; each reports the max absolute difference:

* ``wrapper_mha`` — a ``MultiHeadAttentionWrapper`` with MHA's weights copied head by head gives
  exactly MHA's context *before* ``out_proj`` (the concatenated heads);
* ``mha_sdpa`` — MHA equals ``torch.nn.functional.scaled_dot_product_attention`` with the same
  projections (``is_causal`` when causal; dropout 0);
* ``mask_routes`` — the book's two masking routes (3.5.1): −∞ before softmax, or softmax, zero the
  future, renormalise;
* ``gqa_mha`` — ``GroupedQueryAttention`` with ``num_kv_groups = num_heads`` and MHA's weights copied gives
  MHA's output (less MHA's ``out_proj`` bias: the book's GQA has none);
* ``swa_mha`` — ``MultiHeadAttentionWithSWA`` with W ≥ n and MHA's weights gives causal MHA's output;
* ``rope_shift`` — with rotary positions, a query/key pair scores the same at positions (i, j) and
  (i + s, j + s): head 0's vectors, every pair, shifted by s = n (in float64).
"""

from __future__ import annotations

import copy
import math
import threading
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
import plotly.graph_objects as go
import torch
import torch.nn.functional as F

from attnviz import attention, modern_attention, rope, variants
from attnviz import weights as core_weights
from attnviz.config import AttentionConfig, InputError
from attnviz.labs import implementations
from attnviz.producers.book import build_module
from attnviz.rng import built_once, seeded
from attnviz.trace import Trace, window_hidden
from attnviz.views import figures, margins
from attnviz.words import amount

MAX_TOKENS = 256  # longer texts are compared on their first MAX_TOKENS tokens
TOLERANCE = 1e-5  # max |Δ| at or below this counts as equal (float32 round-off)
MAP_CHOICES = ("head 0", "mean over heads")
SCALE_NOTE = ("Colour: the attention weight, from 0 (dark) to 1 (yellow), on one scale for every map; grey cells are "
              "masked.")
MAP_WIDTH = 290  # px: a variant's map on the Compare page; as many a row as fit (three beside the sidebar at 1,400)
# a two-line title above a map's key tokens, under the modebar's row: a 14 px line, the smaller <sup> line under it,
# and the gap above the key tokens' axis title
TWO_LINE_TITLE_PX = margins.MODEBAR_PX + 30 + margins.TITLE_GAP_PX


# --------------------------------------------------------------------------- inputs and modules

def compared_inputs(trace: Trace, max_tokens: int = MAX_TOKENS) -> tuple[torch.Tensor, tuple[str, ...]]:
    """The Trace's input embeddings (first ``max_tokens`` rows) as (1, n, d_in), and their tokens."""
    inputs = torch.from_numpy(np.array(trace.embeddings["input"][:max_tokens], dtype=np.float32))  # (n, d_in)
    return inputs.unsqueeze(0), tuple(trace.tokens[:max_tokens])  # (n, d_in) -> (1, n, d_in)


def base_config(config: AttentionConfig, d_out: int, num_heads: int, window: int | None = None,
                kv_heads: int | None = None, latent: int | None = None) -> AttentionConfig:
    """The run's config with the sidebar's d_out and head count (a single-head run's config has 1 head
    and the simplified one d_out = d_in, but the other variants on this page need the real values), and the sidebar's
    sizes of the modern variants, which a run of another class holds none of: ``window``, W for the sliding-window
    variant, ``kv_heads``, the K/V heads (``num_kv_groups``) for the grouped-query one, ``latent``, the latent width
    for the latent one.  None: the run's (MQA's one K/V head is its own, not a K/V heads setting: None)."""
    window = config.sliding_window_size if window is None else int(window)
    if kv_heads is None:
        kv_heads = None if _fixed_kv_groups(config) else config.num_kv_groups
    latent = config.latent_dim if latent is None else int(latent)
    # a user's module is compared with the book's classes, which compute one attention each
    return replace(config, d_out=int(d_out), num_heads=int(num_heads), sliding_window_size=window,
                   num_kv_groups=None if kv_heads is None else int(kv_heads), latent_dim=latent, train=False,
                   device="cpu", module=None, attention=1).validate()


def book_listing(base: AttentionConfig) -> bool:
    """Whether ``base`` is the book's toy example as the sidebar's book size sets it for the picked class: the book's
    embedding, its sizes for that class (``variants.Preset.sizes``: the wrapper's listing has 2 heads × 2), and that
    class's listing's seed and mask (``config.preset_config``).  A seed or mask the learner set at that size is their
    own: every variant runs it."""
    if base.embedding != "book" or base.module is not None or base.variant not in variants.VARIANTS:
        return False
    spec = variants.get(base.variant)
    return ((base.d_in, base.d_out, base.num_heads) == _BOOK_SIZE.sizes(spec)
            and base.seed == spec.book_seed and base.causal == spec.book_causal)


_BOOK_SIZE = next(preset for preset in variants.PRESETS.values() if preset.book)


def variant_config(base: AttentionConfig, variant: str) -> AttentionConfig:
    """``base`` normalised for ``variant`` as the sidebar does: 1 head for single-head variants,
    d_out = d_in for the simplified one (it has no weights); at the book's toy example (:func:`book_listing`),
    the sizes, seed and mask of the variant's own listing (the wrapper: 2 heads × 2, where MHA has 2 × 1).  GQA's
    K/V heads and MLA's latent width are ``base``'s where the variant can take them — K/V heads that divide its heads,
    a latent no wider than its d_out —, else the class's defaults (:func:`set_aside_note` says why)."""
    spec = variants.get(variant)
    listing = book_listing(base)
    _, d_out, num_heads = _BOOK_SIZE.sizes(spec) if listing else (base.d_in, base.d_out, base.num_heads)
    num_heads, d_out = spec.head_count(num_heads), spec.out_width(base.d_in, d_out)
    rotary = base.rotary and spec.not_applicable("positions") is None and (d_out // num_heads) % 2 == 0
    kv_groups = base.num_kv_groups if base.num_kv_groups and num_heads % base.num_kv_groups == 0 else None
    latent = base.latent_dim if base.latent_dim and base.latent_dim <= d_out else None
    seed, causal = (spec.book_seed, spec.book_causal) if listing else (base.seed, base.causal)
    return replace(base, variant=variant, num_heads=num_heads, d_out=d_out, num_kv_groups=kv_groups,
                   latent_dim=latent, positions="rotary" if rotary else "learned", seed=seed, causal=causal)


def set_aside_note(base: AttentionConfig, config: AttentionConfig) -> str:
    """Why the variant of ``config`` (:func:`variant_config` of ``base``) runs a default in place of ``base``'s K/V
    groups or latent width, which it cannot take: `` (the sidebar's K/V groups, 5, do not divide its 12 heads: it
    runs the default 4)``; "" where it runs them, or has no such size."""
    if "num_kv_groups" in config.spec.settings and base.num_kv_groups and config.num_kv_groups is None:
        return (f" (the sidebar's K/V groups, {base.num_kv_groups}, do not divide its {config.heads} heads: it runs "
                f"the default {config.kv_groups})")
    if config.latent_width is not None and base.latent_dim and config.latent_dim is None:
        return (f" (the sidebar's latent width, {base.latent_dim}, is wider than its d_out {config.d_out}: it runs "
                f"the default {config.latent_width})")
    return ""


def _fixed_kv_groups(config: AttentionConfig) -> bool:
    """Whether ``config``'s K/V groups are its variant's own (MQA's one) rather than a setting the user chose."""
    spec = variants.VARIANTS.get(config.variant)
    return spec is not None and spec.kv_groups is not None


def seeded_module(config: AttentionConfig, num_tokens: int) -> torch.nn.Module:
    """``torch.manual_seed(seed)`` then the book class, in eval mode.

    The causal-mask buffer only needs ``num_tokens`` rows (64 wrapper heads × a 1024² mask would be
    256 MB); the buffer takes no random numbers, so the weights equal the app's for this seed.
    """
    small = replace(config, context_length=max(1, min(config.context_length, num_tokens)))
    with seeded(config.seed):  # torch's global RNG is shared by every session's thread
        module = build_module(small)
    return module.eval()


@built_once(maxsize=2)  # a module a variant, each up to 2.4 M parameters at GPT-2 small's width
def variant_modules(base: AttentionConfig, mask_rows: int) -> dict[str, torch.nn.Module]:
    """Every variant's :func:`seeded_module` for ``base``, built once a config: the weights depend on the config
    and its seed, not on the text, so a new text compares with the modules the last one built.  ``mask_rows``: the
    longest input they take (the causal-mask buffers' rows)."""
    return {variant: seeded_module(variant_config(base, variant), mask_rows) for variant in variants.VARIANTS}


def run_module(module: torch.nn.Module, inputs: torch.Tensor) -> tuple[attention.Recorder, torch.Tensor]:
    """Forward in inference mode with a Recorder: (recorder, output)."""
    recorder = attention.Recorder()
    with torch.inference_mode():
        output = module(inputs, recorder)  # (1, n, d_in) -> (1, n, d_out)
    return recorder, output


# --------------------------------------------------------------------------- the equivalences

def max_abs_diff(first: torch.Tensor, second: torch.Tensor) -> float:
    """max |first − second| over all elements (shapes must match)."""
    if tuple(first.shape) != tuple(second.shape):
        raise ValueError(f"cannot compare shapes {tuple(first.shape)} and {tuple(second.shape)}")
    return float((first.detach().double() - second.detach().double()).abs().max())


copy_heads_from_mha = implementations.copy_heads_from_mha  # one copy of "wrapper weights from MHA"
wrapper_like = implementations.wrapper_like


def mha_context(mha: attention.MultiHeadAttention, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(MHA's concatenated heads = the input of out_proj, MHA's output), from one forward pass.  ``mha`` may be
    shared by sessions (built once a config): the hook keeps only this thread's input."""
    seen, caller = [], threading.get_ident()

    def keep(module, args):
        if threading.get_ident() == caller:  # another session's forward of the same module is not this one's
            seen.append(args[0].clone())

    hook = mha.out_proj.register_forward_pre_hook(keep)
    try:
        with torch.inference_mode():
            output = mha(inputs)  # (1, n, d_in) -> (1, n, d_out)
    finally:
        hook.remove()
    return seen[0], output  # (1, n, d_out) each


def sdpa_forward(mha: attention.MultiHeadAttention, inputs: torch.Tensor, is_causal: bool) -> torch.Tensor:
    """MHA's projections and out_proj around PyTorch's fused ``scaled_dot_product_attention`` (the one SDPA path,
    :class:`attnviz.labs.implementations.FusedQKVAttention`, in eval mode)."""
    module = implementations.fused_from(mha, use_sdpa=True, causal=is_causal).eval()
    with torch.inference_mode():
        return module(inputs)  # (b, n, d_in) -> (b, n, d_out)


def mask_then_softmax(scaled: torch.Tensor) -> torch.Tensor:
    """Route 1 (the book's 3.5.1, efficient): −∞ above the diagonal, then softmax."""
    num_tokens = scaled.shape[-1]
    mask_bool = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)  # (n, n)
    return torch.softmax(scaled.masked_fill(mask_bool, -torch.inf), dim=-1)  # (..., n, n)


def softmax_then_mask(scaled: torch.Tensor) -> torch.Tensor:
    """Route 2 (the book's 3.5.1, first): softmax, zero the future with tril, renormalise each row."""
    num_tokens = scaled.shape[-1]
    attn_weights = torch.softmax(scaled, dim=-1)  # (..., n, n)
    mask_simple = torch.tril(torch.ones(num_tokens, num_tokens))  # (n, n), 1 on and below the diagonal
    masked_simple = attn_weights * mask_simple  # (..., n, n) * (n, n) -> (..., n, n)
    row_sums = masked_simple.sum(dim=-1, keepdim=True)  # (..., n, 1)
    return masked_simple / row_sums  # (..., n, n) / (..., n, 1) -> (..., n, n)


@dataclass(frozen=True)
class Check:
    """One measured equivalence: ``max_diff`` between the two sides, plus other measured numbers."""

    key: str
    title: str
    max_diff: float
    detail: dict

    @property
    def ok(self) -> bool:
        return math.isfinite(self.max_diff) and self.max_diff <= TOLERANCE

    @property
    def badge(self) -> str:
        """Badge text: "equal" (max |Δ| ≤ TOLERANCE) or "differ", always with the measured number."""
        return f"{'equal' if self.ok else 'differ'} · max |Δ| = {self.max_diff:.2e}"

    @property
    def icon(self) -> str:
        """A green check or a red cross (Material icons: they render without an emoji font)."""
        return ":material/check_circle:" if self.ok else ":material/cancel:"

    @property
    def color(self) -> str:
        return "green" if self.ok else "red"


def check_wrapper_equals_mha(mha: attention.MultiHeadAttention, inputs: torch.Tensor,
                             seeded_wrapper_output: torch.Tensor | None = None,
                             seeds: tuple[int, int] | None = None,
                             wrapper: attention.MultiHeadAttentionWrapper | None = None) -> Check:
    """(a) copied wrapper output vs MHA's context before out_proj (a wrapper with MHA's heads and head width); also
    how far the raw outputs are: with ``seeded_wrapper_output``, the wrapper built from its own seed, against MHA's
    output (``seeds``: the wrapper's and MHA's, which the note names) — or, where the two are not as wide (the book's
    toy example: the wrapper's listing has 2 heads × 2, MHA's 2 × 1), their widths, which the note gives instead.
    ``wrapper``: the copied wrapper already built (:func:`check_modules`), else it is built here."""
    wrapper = copy_heads_from_mha(wrapper_like(mha), mha) if wrapper is None else wrapper
    with torch.inference_mode():
        wrapper_output = wrapper(inputs)  # (1, n, d_in) -> (1, n, h·hd) = (1, n, d_out)
    context, mha_output = mha_context(mha, inputs)  # (1, n, d_out) each
    detail = {"copied_vs_output": max_abs_diff(wrapper_output, mha_output)}
    if seeded_wrapper_output is not None:
        widths = (seeded_wrapper_output.shape[-1], mha_output.shape[-1])
        if widths[0] == widths[1]:
            detail["seeded_vs_output"] = max_abs_diff(seeded_wrapper_output, mha_output)
        else:
            detail["widths"] = widths
        if seeds is not None:
            detail["seeds"] = seeds
    return Check("wrapper_mha", f"Wrapper ({amount(mha.num_heads, 'head')}, weights copied) = MHA before out_proj",
                 max_abs_diff(wrapper_output, context), detail)


def check_mha_equals_sdpa(mha: attention.MultiHeadAttention, inputs: torch.Tensor,
                          fused: torch.nn.Module | None = None) -> Check:
    """(b) the book's MHA vs the same weights around F.scaled_dot_product_attention (``fused``: that module already
    built, :func:`check_modules`; else :func:`sdpa_forward` builds it)."""
    with torch.inference_mode():
        book_output = mha(inputs)  # (1, n, d_in) -> (1, n, d_out)
        fused_output = (sdpa_forward(mha, inputs, is_causal=mha.causal) if fused is None
                        else fused(inputs))  # (1, n, d_in) -> (1, n, d_out)
    flag = "is_causal=True" if mha.causal else "is_causal=False"
    return Check("mha_sdpa", f"MHA = scaled_dot_product_attention ({flag})",
                 max_abs_diff(book_output, fused_output), {})


def check_masking_routes(scaled: torch.Tensor) -> Check:
    """(c) −∞ then softmax vs softmax, zero, renormalise — on MHA's scaled scores."""
    return Check("mask_routes", "Mask with −∞ before softmax = zero after softmax and renormalise",
                 max_abs_diff(mask_then_softmax(scaled), softmax_then_mask(scaled)), {})


def _mha_weights(mha: attention.MultiHeadAttention) -> dict[str, torch.Tensor]:
    """MHA's parameters by name (its mask buffer left out)."""
    return {name: tensor for name, tensor in mha.state_dict().items() if name != "mask"}


def gqa_from_mha(mha: attention.MultiHeadAttention) -> tuple[modern_attention.GroupedQueryAttention, torch.Tensor]:
    """GQA with one K/V head per query head and MHA's weights (eval mode), and MHA's out_proj bias, which the book's
    GQA has none of."""
    with seeded():  # creating it draws random numbers (overwritten right after)
        gqa = modern_attention.GroupedQueryAttention(
            mha.W_query.in_features, mha.d_out, 0.0, mha.num_heads, mha.num_heads,
            qkv_bias=mha.W_query.bias is not None, causal=mha.causal, rope_base=mha.rope_base).eval()
    weights = _mha_weights(mha)
    out_bias = weights.pop("out_proj.bias")  # (d_out,)
    gqa.load_state_dict(weights)
    return gqa, out_bias


def check_gqa_equals_mha(mha: attention.MultiHeadAttention, inputs: torch.Tensor,
                         gqa: tuple[modern_attention.GroupedQueryAttention, torch.Tensor] | None = None) -> Check:
    """GQA with one K/V head per query head and MHA's weights vs MHA (GQA's out_proj has no bias: MHA's is added);
    ``gqa``: :func:`gqa_from_mha` already built (:func:`check_modules`), else built here."""
    gqa, out_bias = gqa_from_mha(mha) if gqa is None else gqa
    with torch.inference_mode():
        gqa_output = gqa(inputs) + out_bias  # (1, n, d_out) + (d_out,)
        mha_output = mha(inputs)  # (1, n, d_out)
    return Check("gqa_mha", f"GQA with num_kv_groups = num_heads = {mha.num_heads} (weights copied) = MHA",
                 max_abs_diff(gqa_output, mha_output), {})


def causal_mha_from(mha: attention.MultiHeadAttention, mask_rows: int) -> attention.MultiHeadAttention:
    """A causal MultiHeadAttention with MHA's weights (eval mode) for inputs of up to ``mask_rows`` tokens."""
    with seeded():  # creating it draws random numbers (overwritten right after)
        causal_mha = attention.MultiHeadAttention(mha.W_query.in_features, mha.d_out, mask_rows, 0.0, mha.num_heads,
                                                  mha.W_query.bias is not None, causal=True, rope_base=mha.rope_base)
    causal_mha.load_state_dict(_mha_weights(mha), strict=False)  # its own mask buffer
    return causal_mha.eval()


def swa_from_mha(mha: attention.MultiHeadAttention, window: int) -> modern_attention.MultiHeadAttentionWithSWA:
    """MultiHeadAttentionWithSWA with a window of ``window`` keys and MHA's weights (eval mode)."""
    with seeded():  # creating it draws random numbers (overwritten right after)
        swa = modern_attention.MultiHeadAttentionWithSWA(
            mha.W_query.in_features, mha.d_out, 0.0, mha.num_heads, mha.W_query.bias is not None,
            sliding_window_size=window, rope_base=mha.rope_base)
    swa.load_state_dict(_mha_weights(mha))
    return swa.eval()


def check_swa_equals_causal_mha(mha: attention.MultiHeadAttention, inputs: torch.Tensor,
                                causal_mha: attention.MultiHeadAttention | None = None,
                                swa: modern_attention.MultiHeadAttentionWithSWA | None = None) -> Check:
    """SWA with W = n (every earlier key) and MHA's weights vs causal MHA; ``causal_mha`` (for n tokens or more) and
    ``swa`` (W = n): :func:`causal_mha_from` and :func:`swa_from_mha` already built, else built here."""
    num_tokens = inputs.shape[1]
    causal_mha = causal_mha_from(mha, num_tokens) if causal_mha is None else causal_mha
    swa = swa_from_mha(mha, num_tokens) if swa is None else swa
    with torch.inference_mode():
        difference = max_abs_diff(swa(inputs), causal_mha(inputs))  # (1, n, d_out) each
    return Check("swa_mha", f"SWA with W = n = {num_tokens} (weights copied) = causal MHA", difference, {})


def check_rope_shift(mha: attention.MultiHeadAttention, inputs: torch.Tensor, rope_base: int) -> Check:
    """Rotary scores of head 0's query/key vectors at positions (i, j) and at (i + s, j + s), s = n: equal."""
    num_tokens, head_dim, shift = inputs.shape[1], mha.head_dim, inputs.shape[1]
    pad = head_dim % 2  # an odd head_dim gets one zero dimension: rotations turn pairs
    with torch.inference_mode():
        queries = mha.W_query(inputs)[..., :head_dim].double().unsqueeze(1)  # (1, n, d_out) -> (1, 1, n, hd)
        keys = mha.W_key(inputs)[..., :head_dim].double().unsqueeze(1)  # (1, 1, n, hd)
    queries, keys = F.pad(queries, (0, pad)), F.pad(keys, (0, pad))  # (1, 1, n, hd + pad) each
    head_dim += pad
    cos, sin = rope.compute_rope_params(head_dim, rope_base, num_tokens + shift, dtype=torch.float64)  # (2n, hd)
    scores = rope.apply_rope(queries, cos, sin) @ rope.apply_rope(keys, cos, sin).transpose(2, 3)  # (1, 1, n, n)
    shifted_cos, shifted_sin = cos[shift:], sin[shift:]  # positions s … s + n − 1
    shifted = (rope.apply_rope(queries, shifted_cos, shifted_sin)
               @ rope.apply_rope(keys, shifted_cos, shifted_sin).transpose(2, 3))  # (1, 1, n, n)
    return Check("rope_shift", f"Rotary: score at (i, j) = score at (i + {shift}, j + {shift})",
                 max_abs_diff(scores, shifted), {"shift": shift, "base": rope_base})


@dataclass(frozen=True)
class CheckModules:
    """The modules the equivalences run beside MHA, each with MHA's weights copied (eval mode): MHA without rotation
    (the wrapper and SDPA have none), the wrapper with its heads, the fused SDPA module, GQA and its added out_proj
    bias, and a causal MHA."""

    plain_mha: attention.MultiHeadAttention
    wrapper: attention.MultiHeadAttentionWrapper
    fused: torch.nn.Module
    gqa: tuple[modern_attention.GroupedQueryAttention, torch.Tensor]
    causal_mha: attention.MultiHeadAttention


@built_once(maxsize=2)  # like variant_modules: the weights depend on the config, not on the text
def check_modules(base: AttentionConfig, mask_rows: int) -> CheckModules:
    """:class:`CheckModules` from the MHA of :func:`variant_modules` (``base``, ``mask_rows``), built once a config:
    a new text only runs them.  Shared and read-only, like the variants' modules."""
    mha = variant_modules(base, mask_rows)[variants.MHA]
    plain_mha = mha
    if mha.rope_base is not None:
        plain_mha = copy.deepcopy(mha)
        plain_mha.rope_base = None
    return CheckModules(plain_mha, copy_heads_from_mha(wrapper_like(plain_mha), plain_mha),
                        implementations.fused_from(plain_mha, use_sdpa=True, causal=plain_mha.causal).eval(),
                        gqa_from_mha(mha), causal_mha_from(mha, mask_rows))


@built_once(maxsize=4)
def swa_module(base: AttentionConfig, mask_rows: int, window: int) -> modern_attention.MultiHeadAttentionWithSWA:
    """:func:`swa_from_mha` of the MHA of :func:`variant_modules` with a window of ``window`` keys (the text's tokens),
    built once a config and length."""
    return swa_from_mha(variant_modules(base, mask_rows)[variants.MHA], window)


CHECK_NOTES = {
    "wrapper_mha": (
        "Head h of the wrapper gets rows h·head_dim … (h+1)·head_dim of MHA's W_query, W_key and W_value; "
        "its concatenated heads are then compared with MHA's context vectors just before `out_proj`."
    ),
    "mha_sdpa": (
        "The same W_query/W_key/W_value and out_proj around PyTorch's fused kernel (eval mode, dropout 0); "
        "SDPA scales by 1/√head_dim, as the book does."
    ),
    "mask_routes": (
        "On MHA's scaled scores, always with the causal mask: masked_fill(−∞) → softmax, versus "
        "softmax → × tril(ones) → ÷ row sums. Both give the future weight 0 and the rest the same share."
    ),
    "gqa_mha": (
        "GroupedQueryAttention with as many K/V heads as query heads: repeat_interleave(1) repeats nothing, so "
        "with MHA's W_query/W_key/W_value/out_proj weights it is MHA (the book's GQA has no out_proj bias: MHA's "
        "is added to its output)."
    ),
    "swa_mha": (
        "A window at least as long as the text hides only the future: MultiHeadAttentionWithSWA with MHA's "
        "weights (same names and shapes) gives causal MHA's output."
    ),
    "rope_shift": (
        "Head 0's query and key vectors, rotated at positions i and j, then at i + s and j + s: rotating both by "
        "the same extra angle leaves their dot product unchanged — the score sees only i − j."
    ),
}


def raw_difference_note(check: Check) -> str:
    """Why the wrapper's own output differs from MHA's output, with the measured numbers."""
    lines = [
        "Compared raw, the two outputs differ, for two reasons:",
        f"* **out_proj** — MHA mixes the concatenated heads with a learned d_out × d_out linear layer; the "
        f"wrapper has none. Even with copied weights: max |Δ| = {check.detail['copied_vs_output']:.3g}.",
    ]
    if "seeded_vs_output" in check.detail:
        wrapper_seed, mha_seed = check.detail.get("seeds", (None, None))
        seeds = ("the seed" if wrapper_seed is None else f"seed {wrapper_seed} as MHA is" if wrapper_seed == mha_seed
                 else f"seed {wrapper_seed} (MHA: seed {mha_seed})")
        lines.append(
            f"* **independent random init** — built from {seeds}, the wrapper's heads are separate "
            "`CausalAttention` modules, each drawing its own (d_in → head_dim) weights in its own order, not "
            "slices of MHA's (d_in → d_out) matrices. The two variants as shown below: "
            f"max |Δ| = {check.detail['seeded_vs_output']:.3g}."
        )
    if "widths" in check.detail:
        wrapper_width, mha_width = check.detail["widths"]
        lines.append(
            f"* **different widths** — the wrapper shown below runs its own listing (the book's "
            f"MultiHeadAttentionWrapper takes d_out per head), so its output is {wrapper_width} wide; MHA's listing "
            f"has d_out = {mha_width} in all. The check above builds a wrapper with MHA's heads and head width; "
            "the two variants as shown have outputs of different widths, so no difference between them is measured."
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- all variants

@dataclass(frozen=True)
class VariantResult:
    variant: str
    config: AttentionConfig
    weights: np.ndarray  # (heads, n, n) softmax weights (before dropout; eval mode anyway)
    output_shape: tuple[int, ...]
    # (heads, n, n) bool: the cells a sliding window's run hid, as Trace.hidden_cells reads them; None without one
    hidden: np.ndarray | None = None
    set_aside: str = ""  # why it runs a default in place of the sidebar's K/V groups or latent (set_aside_note)

    @property
    def label(self) -> str:
        return variants.get(self.variant).label

    @property
    def heads(self) -> int:
        return self.weights.shape[0]

    def attention_map(self, how: str = "head 0") -> np.ndarray:
        """(n, n): head 0's weights, or the mean over heads (rows still sum to 1, masked cells stay 0)."""
        if how == "mean over heads":
            return self.weights.mean(axis=0)
        return self.weights[0]

    def hidden_map(self, how: str = "head 0") -> np.ndarray | None:
        """(n, n) bool: the cells :meth:`attention_map` greys beside the causal triangle — head 0's hidden cells, or
        those every head hides (the mean over heads); None for a run without a window."""
        if self.hidden is None:
            return None
        return self.hidden.all(axis=0) if how == "mean over heads" else self.hidden[0]


@dataclass(frozen=True)
class Comparison:
    tokens: tuple[str, ...]  # the compared tokens (at most MAX_TOKENS)
    total_tokens: int  # tokens in the run
    variants: tuple[VariantResult, ...]
    checks: tuple[Check, ...]
    book_listing: bool = False  # the book's toy example: each class ran its listing's seed and mask (book_listing)

    @property
    def n(self) -> int:
        return len(self.tokens)

    @property
    def truncated(self) -> bool:
        return self.total_tokens > self.n


def compare(inputs: torch.Tensor, tokens: tuple[str, ...], base: AttentionConfig,
            total_tokens: int | None = None) -> Comparison:
    """Run every variant on ``inputs`` (1, n, d_in) and measure the three equivalences."""
    num_tokens = inputs.shape[1]
    modules = variant_modules(base, max(num_tokens, MAX_TOKENS))  # shared: the checks below copy, never change them
    results, outputs, recorders = [], {}, {}
    for variant in variants.VARIANTS:
        recorder, output = run_module(modules[variant], inputs)
        outputs[variant], recorders[variant] = output, recorder
        weights = recorder.steps["weights"][0].float().numpy()  # (h, n, n)
        config = variant_config(base, variant)
        masked = recorder.steps["masked"][0].float().numpy()  # (h, n, n)
        hidden = None if config.window is None else window_hidden(masked)  # (h, n, n)
        results.append(VariantResult(variant, config, weights, tuple(output.shape), hidden,
                                     set_aside_note(base, config)))
    mha, configs = modules[variants.MHA], {result.variant: result.config for result in results}
    built = check_modules(base, max(num_tokens, MAX_TOKENS))
    plain_mha = built.plain_mha
    checks = (
        check_wrapper_equals_mha(plain_mha, inputs, seeded_wrapper_output=outputs[variants.WRAPPER],
                                 seeds=(configs[variants.WRAPPER].seed, configs[variants.MHA].seed),
                                 wrapper=built.wrapper),
        check_mha_equals_sdpa(plain_mha, inputs, fused=built.fused),
        check_masking_routes(recorders[variants.MHA].steps["scaled"]),
        check_gqa_equals_mha(mha, inputs, gqa=built.gqa),
        check_swa_equals_causal_mha(mha, inputs, causal_mha=built.causal_mha,
                                    swa=swa_module(base, max(num_tokens, MAX_TOKENS), num_tokens)),
        check_rope_shift(mha, inputs, base.rope_base),
    )
    return Comparison(tuple(tokens), total_tokens or num_tokens, tuple(results), checks, book_listing(base))


def compare_trace(trace: Trace, base: AttentionConfig, max_tokens: int = MAX_TOKENS) -> Comparison:
    """:func:`compare` on a Trace's input embeddings (its first ``max_tokens`` tokens); ``base`` from
    :func:`base_config` (it must have the Trace's d_in, seed and embedding)."""
    inputs, tokens = compared_inputs(trace, max_tokens)
    return compare(inputs, tokens, base, trace.n)


def variant_title(result: VariantResult, how: str, current: str | None = None) -> str:
    """Heatmap title: the variant's name, ▶ for the sidebar's variant; under it, smaller, which map is drawn and the
    label's note (its book section, or the models that use it), so the first line fits a narrow column."""
    mark = "▶ " if result.variant == current else ""
    which = {"head 0": "head 0", "mean over heads": f"mean of {result.heads} heads"}[how]
    which = "its single head" if result.heads == 1 else which
    name, _, note = result.label.partition(" (")
    note = f" · {note.removesuffix(')')}" if note else ""
    return f"{mark}{name}<br><sup>weights, {which}{note}</sup>"


def seeds_caption(comparison: Comparison) -> str:
    """What the page says of the inputs and seeds its variants ran: the one seed of every variant, or, at the book's
    toy example (:func:`book_listing`), that each class ran its listing's seed and mask, naming the seeds that differ
    from the one most share (a class without weights draws none)."""
    if not comparison.book_listing:
        return f"the same input embeddings and seed {comparison.variants[0].config.seed} for every variant"
    seeded = [result for result in comparison.variants if variants.get(result.variant).weights is not None]
    common = Counter(result.config.seed for result in seeded).most_common(1)[0][0]
    own = [f"{_name(result)}: seed {result.config.seed}" for result in seeded if result.config.seed != common]
    return ("the same input embeddings · the book's toy example: each class seeded and masked as its listing in the "
            f"book ({', '.join([*own, f'the others: seed {common}'])})")


def heads_caption(comparison: Comparison) -> str:
    """What the page says of the heads its multi-head variants ran: "2 heads of 1 for the multi-head ones", and the
    variant whose heads differ (at the book's toy example the wrapper runs its listing's d_out per head: 2 of 2)."""
    def size(result: VariantResult) -> tuple[int, int]:
        return result.config.num_heads, result.config.d_out // result.config.num_heads

    multi = [result for result in comparison.variants if variants.get(result.variant).multi_head]
    heads, head_dim = Counter(size(result) for result in multi).most_common(1)[0][0]
    own = [f"{_name(result)}: {size(result)[0]} of {size(result)[1]}"
           + (", its listing's d_out per head" if variants.get(result.variant).per_head_d_out else "")
           for result in multi if size(result) != (heads, head_dim)]
    return f"{amount(heads, 'head')} of {head_dim} for the multi-head ones" + (f" ({'; '.join(own)})" if own else "")


def _name(result: VariantResult) -> str:
    """The variant's name without its note: "Self-attention v2"."""
    return result.label.partition(" (")[0]


def variant_sizes(result: VariantResult) -> str:
    """The sizes of its own a modern variant ran with, from the config its module was built from: the K/V heads its
    query heads share (GQA, MQA: `` · 4 K/V heads, each shared by 3 query heads``), the latent K and V come from
    (MLA: `` · K/V latent dim 96``) or the window (SWA: `` · window W = 4``; a W at least the compared tokens adds
    that it draws no band; without one `` · no window: every earlier key``); "" for the other variants.  K/V groups
    or a latent width of the sidebar's that the variant cannot take are said after its own
    (:attr:`VariantResult.set_aside`)."""
    config = result.config
    if config.latent_width is not None:
        return f" · K/V latent dim {config.latent_width}{result.set_aside}"
    if config.spec.grouped:
        return f" · {core_weights.kv_sharing(config.heads, config.kv_groups)}{result.set_aside}"
    if "sliding_window_size" in config.spec.settings:
        if config.window is None:
            return " · no window: every earlier key"
        n = result.weights.shape[-1]
        band = f" (no band: W ≥ the {amount(n, 'token')}, so every earlier key is seen)" if config.window >= n else ""
        return f" · window W = {config.window}{band}"
    return ""


def variant_caption(result: VariantResult, causal: bool, seed: bool = False) -> str:
    """The line under a variant's map: its output shape and heads, and a modern variant's own sizes
    (:func:`variant_sizes`); with ``seed``, the seed it ran (a class with
    weights: at the book's toy example each ran its own); and, for a book listing with no mask (3.3, 3.4)
    drawn while the sidebar's Causal mask is on (``causal``: the mask it ran), that the mask is the sidebar's."""
    caption = f"output {result.output_shape} · {amount(result.heads, 'head')}{variant_sizes(result)}"
    spec = variants.get(result.variant)
    if seed and spec.weights is not None:
        caption += f" · seed {result.config.seed}"
    if causal and not spec.book_causal:
        caption += f" · masked by the sidebar's Causal mask (the book's {spec.section} listing has none)"
    return caption


def variant_heatmap(result: VariantResult, tokens, how: str = "head 0", *, causal: bool = True,
                    current: str | None = None, width: int = MAP_WIDTH, show_scale: bool = False) -> go.Figure:
    """:func:`figures.attention_heatmap` of one variant's weights, with its two-line title
    (:func:`variant_title`) placed clear of the key-token ticks, its cells square across ``width`` (the chart's):
    without a colour bar (the page says the one scale of every map: :data:`SCALE_NOTE`), unless ``show_scale``
    (a map beside the user's module's).  Grey: the future where ``causal``, and the keys a sliding window hid
    (:meth:`VariantResult.hidden_map`)."""
    fig = figures.attention_heatmap(result.attention_map(how), tokens, "weights", causal=causal,
                                    title=variant_title(result, how, current), title_px=TWO_LINE_TITLE_PX, width=width,
                                    show_scale=show_scale, hidden=result.hidden_map(how))
    return _two_line_title(fig)


def _two_line_title(fig: go.Figure) -> go.Figure:
    """The two-line title in its 14 px font (the map made room for it under the modebar's row,
    :data:`TWO_LINE_TITLE_PX`)."""
    return fig.update_layout(title=margins.title(fig.layout.title.text, 14))


def module_heatmap(trace: Trace, how: str = "head 0", *, max_tokens: int = MAX_TOKENS,
                   width: int = figures.PAIR_MAP_PX) -> go.Figure:
    """A user module's weights (head 0 of its Trace, first ``max_tokens`` tokens) titled like the variants, grey where
    its own mask hid a key (``Trace.hides_future``, ``Trace.hidden_cells``): a mask that hides nothing is drawn with
    the weights it gave.  ``width``: the chart's, across which its cells are square."""
    weights = trace.steps["weights"][0][:, :max_tokens, :max_tokens]  # (heads, n, n)
    result = VariantResult(variants.MHA, trace.config, weights, tuple(trace.output.shape))
    title = f"{trace.module_run.class_name} (your code)<br><sup>weights, head 0 of {weights.shape[0]}</sup>"
    hidden = trace.hidden_cells()  # (heads, n, n) or None
    if hidden is not None:  # the cells every head hides (the mean over heads), or head 0's
        hidden = (hidden.all(axis=0) if how == "mean over heads" else hidden[0])[:max_tokens, :max_tokens]
    fig = figures.attention_heatmap(result.attention_map(how), trace.tokens[:max_tokens], "weights",
                                    causal=trace.hides_future, title=title, title_px=TWO_LINE_TITLE_PX,
                                    hidden=hidden, width=width)
    return _two_line_title(fig)


def module_vs_mha_rows(trace: Trace, mha: VariantResult) -> list[dict[str, str]]:
    """The user's module and the book's MHA side by side: heads, head width, output shape, hidden cells."""
    def hidden(weights: np.ndarray) -> str:
        return f"{float((weights[0] == 0).mean()):.0%}"

    weights = trace.steps["weights"][0]  # (heads, n, n)
    try:
        head_dim = str(trace.head_vectors(0).head_dim)
    except InputError:  # no queries recorded, or none that split into its heads
        head_dim = "?"
    return [
        {"": "heads", "your module": str(weights.shape[0]), "book's MHA": str(mha.heads)},
        {"": "head_dim", "your module": head_dim, "book's MHA": str(mha.config.d_out // mha.config.num_heads)},
        {"": "output", "your module": str(tuple(trace.output.shape)), "book's MHA": str(mha.output_shape)},
        {"": "zero weights in head 0 (masked)", "your module": hidden(weights), "book's MHA": hidden(mha.weights)},
    ]
