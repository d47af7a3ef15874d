"""What a KV cache costs: bytes for a whole model (:func:`kv_cache_bytes`), the attention variants side by side,
and presets of real models from their published configs.

The formulas are the book's memory estimators (rasbt/LLMs-from-scratch ``ch04/04_gqa``, ``05_mla``, ``06_swa``):

* a layer with K/V heads caches ``batch × tokens × head_dim × kv_heads × 2 (K and V) × bytes per element``;
* a layer with multi-head latent attention caches one latent per token: ``batch × tokens × latent_dim × bytes``,
  and beside it the rotary key its heads share, ``qk_rope_head_dim`` wide (DeepSeek-V2/V3: 512 + 64);
* a sliding-window layer caches at most ``W`` tokens (``min(context_length, W)``); ``swa_ratio "a:b"`` puts
  ``a`` sliding-window layers before every ``b`` full ones, block after block, and a last partial block gets its
  sliding-window layers first (``n_layers=18, "5:1"`` -> 15 SWA + 3 full, Gemma 3's pattern);
* ``head_dim`` defaults to ⌈emb_dim / n_heads⌉.

:func:`window_schedule` turns a model's windows, layer by layer, into the ``sliding_window_size`` and ``swa_ratio``
that count its layers (the book's ``sliding_window_stride`` K is ``"K:1"``).

The book's estimator scripts take ``n_kv_groups``, the GROUP SIZE (kv heads = n_heads // n_kv_groups), while its
GQA class's ``num_kv_groups`` is the NUMBER of K/V heads.  Here the argument is ``n_kv_heads``: the number of K/V
heads, no ambiguity; the scripts' ``n_kv_groups`` is taken too, as the scripts take it (a group size that divides
``n_heads``), so a call copied from them gives their number.  MLA with a window is allowed too (the latent cached for
at most W tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnviz.words import amount

DTYPE_BYTES = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
DTYPE_NAMES = {"float64": "fp64", "double": "fp64", "float32": "fp32", "float": "fp32", "bfloat16": "bf16",
               "float16": "fp16", "half": "fp16",
               "float8_e4m3fn": "fp8", "float8_e4m3fnuz": "fp8", "float8_e5m2": "fp8", "float8_e5m2fnuz": "fp8"}
# torch's names of those dtypes (``str(torch.float16)`` is "torch.float16"): the same bytes


def dtype_bytes(dtype) -> int:
    """Bytes per element of ``dtype``: one of ``DTYPE_BYTES``, torch's name of one ("float16", "torch.bfloat16"), or
    a ``torch.dtype`` (read by its name: torch is not imported here).  Raises ValueError listing the accepted ones."""
    name = str(dtype).removeprefix("torch.")
    short = name if name in DTYPE_BYTES else DTYPE_NAMES.get(name)
    if short is None:
        raise ValueError(f"dtype must be one of {', '.join(DTYPE_BYTES)} (or torch's float64, float32, bfloat16, "
                         f"float16 …), got {dtype!r}.")
    return DTYPE_BYTES[short]


def _whole(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be a whole number ≥ {minimum}, got {value!r}.")
    return value


def parse_ratio(swa_ratio: str) -> tuple[int, int]:
    """``"a:b"`` -> (a, b): a sliding-window layers for every b full ones (a, b ≥ 0, a + b > 0)."""
    try:
        a_text, b_text = str(swa_ratio).split(":")
        a, b = int(a_text), int(b_text)
    except ValueError:
        raise ValueError(f"swa_ratio must look like 'a:b' (e.g. '5:1'), got {swa_ratio!r}.") from None
    if a < 0 or b < 0 or a + b == 0:
        raise ValueError(f"swa_ratio 'a:b' needs a, b ≥ 0 and a + b > 0, got {swa_ratio!r}.")
    return a, b


def layer_split(n_layers: int, swa_ratio: str) -> tuple[int, int]:
    """(sliding-window layers, full layers) for ``swa_ratio``: whole blocks of a + b, then the rest, SWA first."""
    a, b = parse_ratio(swa_ratio)
    blocks, rest = divmod(n_layers, a + b)
    n_swa = blocks * a + min(a, rest)
    return n_swa, n_layers - n_swa


def window_schedule(windows) -> dict:
    """A model's sliding windows, one per layer (None: a full layer), as :func:`kv_cache_bytes` takes them:
    ``{"sliding_window_size": W, "swa_ratio": "a:b"}``, or {} when no layer has a window.

    The ratio is the shortest ``"a:b"`` whose blocks (a window layers, then b full) give the layers in their order —
    the book's ``sliding_window_stride`` K is ``"K:1"``, every layer with the window ``"1:0"`` — else the layer
    counts themselves, reduced (the bytes count layers, not their order).  Raises ValueError when the window
    layers have different windows: no one window counts them."""
    windows = list(windows)
    sliding = [window is not None for window in windows]
    widths = {int(window) for window in windows if window is not None}
    if not widths:
        return {}
    if len(widths) > 1:
        raise ValueError(f"The layers' sliding windows differ ({', '.join(map(str, sorted(widths)))}): "
                         "kv_cache_bytes takes one window for every sliding-window layer.")
    for period in range(1, len(windows) + 1):
        for a in range(period + 1):
            if [index % period < a for index in range(len(windows))] == sliding:
                return {"sliding_window_size": widths.pop(), "swa_ratio": f"{a}:{period - a}"}
    n_swa = sum(sliding)
    n_full = len(windows) - n_swa
    common = math.gcd(n_swa, n_full)
    return {"sliding_window_size": widths.pop(), "swa_ratio": f"{n_swa // common}:{n_full // common}"}


def kv_cache_bytes(*, context_length: int, emb_dim: int, n_heads: int, n_layers: int, n_kv_heads: int | None = None,
                   head_dim: int | None = None, latent_dim: int | None = None, qk_rope_head_dim: int | None = None,
                   sliding_window_size: int | None = None, swa_ratio: str | None = None, batch_size: int = 1,
                   dtype="bf16", n_kv_groups: int | None = None) -> int:
    """Bytes the KV cache of a whole model holds at ``context_length`` tokens (see the module's formulas).

    ``n_kv_heads``: K/V heads per layer (default ``n_heads``: MHA; 1: MQA; must divide ``n_heads``).
    ``n_kv_groups``: the book's estimator scripts' argument, a GROUP SIZE (query heads per K/V head), taken as they
    take it: ``n_kv_heads = n_heads // n_kv_groups``, refused where it does not divide ``n_heads`` (their check) or
    beside ``n_kv_heads`` (two counts of one thing).
    ``latent_dim``: MLA's cached latent per token and layer (replaces the K/V heads, so it takes no ``n_kv_heads``);
    ``qk_rope_head_dim``: the rotary key MLA caches beside it, one for all heads (DeepSeek's config names it so, and
    the latent ``kv_lora_rank``): DeepSeek-V3 is ``latent_dim=512, qk_rope_head_dim=64``, the same as
    ``latent_dim=576``; without a latent it is refused (an MHA/GQA key's rotary part is inside ``head_dim``).
    ``sliding_window_size``: the window W of the sliding-window layers, ``swa_ratio`` their share (default ``"1:0"``:
    every layer); without a window every layer is full, and a ratio that puts layers in a window is refused.
    ``dtype``: one of ``DTYPE_BYTES``, or torch's name or ``torch.dtype`` (:func:`dtype_bytes`).  Raises ValueError
    on a bad value or a contradiction."""
    context_length = _whole("context_length", context_length)
    emb_dim, n_heads = _whole("emb_dim", emb_dim), _whole("n_heads", n_heads)
    n_layers, batch_size = _whole("n_layers", n_layers), _whole("batch_size", batch_size)
    if latent_dim is not None and n_kv_heads is not None:
        raise ValueError(f"latent_dim and n_kv_heads do not go together: an MLA layer caches one latent per token "
                         f"(latent_dim {latent_dim!r}) instead of K/V heads, so n_kv_heads {n_kv_heads!r} would change "
                         "nothing; leave n_kv_heads out for MLA, or latent_dim out for MHA/GQA/MQA.")
    if qk_rope_head_dim is not None and latent_dim is None:
        raise ValueError(f"qk_rope_head_dim {qk_rope_head_dim!r} is the rotary key MLA caches beside its latent: give "
                         "the latent_dim (DeepSeek's kv_lora_rank) too; for MHA/GQA/MQA leave it out — each K/V "
                         "head's rotary part is inside head_dim.")
    if sliding_window_size is None and swa_ratio is not None and parse_ratio(swa_ratio)[0]:
        raise ValueError(f"swa_ratio {swa_ratio!r} needs a sliding_window_size: the ratio counts the layers that "
                         "keep only the last W tokens, and without W every layer is full; give the window W, or "
                         "leave swa_ratio out.")
    if n_kv_groups is not None:
        n_kv_heads = _kv_heads_of_groups(n_heads, n_kv_groups, n_kv_heads, latent_dim)
    n_kv_heads = n_heads if n_kv_heads is None else _whole("n_kv_heads", n_kv_heads)
    if n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads ({n_kv_heads}) must divide n_heads ({n_heads}): each K/V head serves a "
                         "whole group of query heads.")
    head_dim = math.ceil(emb_dim / n_heads) if head_dim is None else _whole("head_dim", head_dim)
    bytes_per_elem = dtype_bytes(dtype)
    if latent_dim is None:
        per_token = head_dim * n_kv_heads * 2 * bytes_per_elem  # K and V of every K/V head
    else:
        rope_key = 0 if qk_rope_head_dim is None else _whole("qk_rope_head_dim", qk_rope_head_dim)
        per_token = (_whole("latent_dim", latent_dim) + rope_key) * bytes_per_elem  # one latent and its rotary key
    if sliding_window_size is None:
        n_swa, n_full, window = 0, n_layers, context_length
    else:
        n_swa, n_full = layer_split(n_layers, "1:0" if swa_ratio is None else swa_ratio)
        window = min(context_length, _whole("sliding_window_size", sliding_window_size))
    per_full_layer = batch_size * context_length * per_token
    per_swa_layer = batch_size * window * per_token
    return n_full * per_full_layer + n_swa * per_swa_layer


def _kv_heads_of_groups(n_heads: int, n_kv_groups, n_kv_heads, latent_dim) -> int:
    """The K/V heads of the estimator scripts' ``n_kv_groups`` (a group size): ``n_heads // n_kv_groups``; a
    ValueError in words where it does not divide ``n_heads``, or comes with ``n_kv_heads`` or ``latent_dim``."""
    if n_kv_heads is not None:
        raise ValueError(f"n_kv_groups {n_kv_groups!r} and n_kv_heads {n_kv_heads!r} do not go together: n_kv_heads "
                         "counts the K/V heads, while n_kv_groups, as the book's memory estimator scripts take it, is "
                         "a group size (n_kv_heads = n_heads // n_kv_groups); give one of them.")
    if latent_dim is not None:
        raise ValueError(f"latent_dim and n_kv_groups do not go together: an MLA layer caches one latent per token "
                         f"(latent_dim {latent_dim!r}) instead of K/V heads; leave n_kv_groups out for MLA.")
    groups = _whole("n_kv_groups", n_kv_groups)
    if n_heads % groups:
        raise ValueError(f"n_kv_groups ({groups}) must divide n_heads ({n_heads}) exactly: as the book's memory "
                         "estimator scripts take it, n_kv_groups is a group size — query heads per K/V head, "
                         "n_kv_heads = n_heads // n_kv_groups — where attnviz's n_kv_heads counts the K/V heads.")
    return n_heads // groups


def attention_name(*, n_heads: int, n_kv_heads: int | None = None, latent_dim: int | None = None,
                   sliding_window_size: int | None = None, swa_ratio: str | None = None, **_sizes) -> str:
    """A layer's attention by its cache, as the presets' table names it: "MLA" for a latent, else "MHA" (a K/V head
    per head), "MQA" (one for all) or "GQA" (groups), with " + SWA a:b" where layers have a window."""
    kind = "MLA" if latent_dim else (
        "MHA" if n_kv_heads in (None, n_heads) else "MQA" if n_kv_heads == 1 else "GQA")
    return f"{kind} + SWA {swa_ratio or '1:0'}" if sliding_window_size else kind


@dataclass(frozen=True)
class ModelKV:
    """The sizes of one real model that decide its KV cache, and where they come from."""

    name: str
    source: str  # the Hugging Face repo whose config.json the numbers are from
    context_length: int  # max_position_embeddings (n_positions for GPT-2)
    emb_dim: int  # hidden_size (n_embd)
    n_heads: int  # num_attention_heads
    n_layers: int  # num_hidden_layers
    n_kv_heads: int | None = None  # num_key_value_heads
    head_dim: int | None = None  # head_dim, when the config sets it apart from hidden_size / heads
    latent_dim: int | None = None  # MLA: kv_lora_rank + qk_rope_head_dim
    rope_dim: int | None = None  # MLA: qk_rope_head_dim, the rotary key cached beside the latent (part of latent_dim)
    sliding_window_size: int | None = None  # sliding_window
    swa_ratio: str = "1:0"  # sliding : full layers (layer_types)
    dtype: str = "bf16"  # torch_dtype

    @property
    def attention(self) -> str:
        """Its attention by its cache (:func:`attention_name`): "GQA", "MQA + SWA 5:1"."""
        return attention_name(**self.kwargs())

    @property
    def kv_heads_text(self) -> str:
        """The K/V heads a layer caches, in words: "—" for MLA, which caches a latent per token, not per-head K/V."""
        return "—" if self.latent_dim else str(self.n_kv_heads or self.n_heads)

    @property
    def latent_text(self) -> str:
        """MLA's cached width per token and layer, with its rotary key apart ("512 + 64 rope = 576"); "—" without."""
        if not self.latent_dim:
            return "—"
        if self.rope_dim:
            return f"{self.latent_dim - self.rope_dim} + {self.rope_dim} rope = {self.latent_dim}"
        return str(self.latent_dim)

    @property
    def window_text(self) -> str:
        """The sliding window of the layers that have one ("512"); "—" for a model without."""
        return f"{self.sliding_window_size:,}" if self.sliding_window_size else "—"

    def kwargs(self) -> dict:
        """Its sizes as :func:`kv_cache_bytes` takes them (``swa_ratio`` only with a window)."""
        window = {"sliding_window_size": self.sliding_window_size, "swa_ratio": self.swa_ratio} \
            if self.sliding_window_size else {}
        return {"emb_dim": self.emb_dim, "n_heads": self.n_heads, "n_layers": self.n_layers,
                "n_kv_heads": self.n_kv_heads, "head_dim": self.head_dim, "latent_dim": self.latent_dim, **window}

    def variant_settings(self) -> dict[str, dict]:
        """The cost chart's lines at its sizes (:func:`variant_settings`): its K/V heads, latent and window where it
        has them, and what it has not filled in for its context (a window: :func:`default_window`)."""
        return variant_settings(emb_dim=self.emb_dim, n_heads=self.n_heads, n_layers=self.n_layers,
                                head_dim=self.head_dim, n_kv_heads=self.n_kv_heads, latent_dim=self.latent_dim,
                                sliding_window_size=self.sliding_window_size,
                                swa_ratio=self.swa_ratio if self.sliding_window_size else None,
                                context_length=self.context_length)

    def bytes(self, context_length: int | None = None, batch_size: int = 1, dtype: str | None = None) -> int:
        """The cache's bytes at ``context_length`` (default: the model's full context), in the model's dtype."""
        return kv_cache_bytes(context_length=context_length or self.context_length, batch_size=batch_size,
                              dtype=dtype or self.dtype, **self.kwargs())


PRESETS = (
    ModelKV("GPT-2 124M", "openai-community/gpt2", 1024, 768, 12, 12, dtype="fp32"),
    ModelKV("GPT-2 1.5B", "openai-community/gpt2-xl", 1024, 1600, 25, 48, dtype="fp32"),
    ModelKV("Llama 3.2 1B", "meta-llama/Llama-3.2-1B", 131072, 2048, 32, 16, n_kv_heads=8, head_dim=64),
    ModelKV("Qwen3 0.6B", "Qwen/Qwen3-0.6B", 40960, 1024, 16, 28, n_kv_heads=8, head_dim=128),
    ModelKV("Gemma 3 270M", "google/gemma-3-270m", 32768, 640, 4, 18, n_kv_heads=1, head_dim=256,
            sliding_window_size=512, swa_ratio="5:1"),
    ModelKV("DeepSeek-V3 671B", "deepseek-ai/DeepSeek-V3", 163840, 7168, 128, 61, head_dim=128,  # v_head_dim
            latent_dim=512 + 64, rope_dim=64),  # kv_lora_rank + qk_rope_head_dim: no per-head K/V is cached
)


def preset(name: str) -> ModelKV:
    """The preset called ``name``, or a ValueError listing them."""
    for model in PRESETS:
        if model.name == name:
            return model
    raise ValueError(f"No preset {name!r}; presets: {', '.join(m.name for m in PRESETS)}.")


VARIANTS = ("MHA", "GQA", "MQA", "MLA", "SWA", "SWA+GQA")


def grouped_kv_heads(n_heads: int) -> int | None:
    """Grouped-query attention's K/V heads where none are given: the divisor of ``n_heads`` nearest 4 that lies
    strictly between 1 and ``n_heads`` (12 heads: 4, groups of 3; 4 heads: 2; 6 heads: 3), so the heads are grouped,
    neither MHA (a K/V head each) nor MQA (one for all), as the book's GQA examples choose theirs.  None where no
    divisor lies between (1, 2 or 3 heads, a prime count): such heads cannot be grouped."""
    between = [d for d in range(2, n_heads) if n_heads % d == 0]
    return min(between, key=lambda d: (abs(d - 4), d), default=None)


def is_grouped(n_kv_heads: int | None, n_heads: int) -> bool:
    """Whether ``n_kv_heads`` K/V heads group ``n_heads`` query heads: more than 1 (MQA), fewer than ``n_heads``
    (MHA), and dividing them (each K/V head serves a whole group)."""
    return n_kv_heads is not None and 1 < n_kv_heads < n_heads and n_heads % n_kv_heads == 0


def default_kv_heads(n_heads: int) -> int:
    """A GQA run's K/V heads where none are given (``AttentionConfig.kv_groups``): :func:`grouped_kv_heads`, and
    where the heads cannot be grouped (1, 2 or 3 heads, a prime count), 1: every head shares one K/V head, as in MQA
    (the run says so).  The cost chart draws no GQA line for such heads instead (:func:`variant_settings`)."""
    return grouped_kv_heads(n_heads) or 1


def default_latent_dim(d_out: int) -> int:
    """Multi-head latent attention's latent where none is given — a run's (``AttentionConfig.latent_width``) and the
    cost chart's MLA line alike: the book's default ``max(16, d_out // 8)`` (bonus ``ch04/05_mla``'s
    ``MultiHeadLatentAttention``), kept at most d_out (a latent wider than d_out saves nothing).  ``d_out`` is the
    attention's width, heads × head_dim (the book's GPT has d_out = emb_dim; Gemma 3 270M's 4 × 256 = 1,024 is wider
    than its emb_dim of 640)."""
    return min(d_out, max(16, d_out // 8))


DEFAULT_WINDOW = 1024  # the bonus material's window (ch04/06_swa: its estimator's and gpt_with_kv_swa.py's default)


def default_window(context_length: int | None = None) -> int:
    """A sliding window where none is given, for a model of ``context_length`` tokens: the bonus material's 1,024,
    at most a quarter of the context (and at least 1), so that its layers hold fewer tokens than the model's context
    — the bundled model's 256 -> 64, GPT-2's 1,024 -> 256, a context of 4,096 or more -> 1,024.  Without a context:
    1,024."""
    if context_length is None:
        return DEFAULT_WINDOW
    return max(1, min(DEFAULT_WINDOW, int(context_length) // 4))


def variant_settings(*, emb_dim: int, n_heads: int, n_layers: int, head_dim: int | None = None,
                     n_kv_heads: int | None = None, latent_dim: int | None = None,
                     sliding_window_size: int | None = None, swa_ratio: str | None = None,
                     gqa_kv_heads: int | None = None, context_length: int | None = None) -> dict[str, dict]:
    """kv_cache_bytes arguments of MHA, GQA, MQA, MLA, SWA and SWA+GQA at one model's sizes, and the model's own
    attention where none of them is it (a window on MQA or MLA: Gemma 3's "MQA + SWA 5:1", named by
    :func:`attention_name` as the presets' table names it).

    What the sizes leave open is filled in and said by the keys: GQA's K/V heads (``gqa_kv_heads``, the ones chosen
    for the GQA lines, else a model's own ``n_kv_heads``, each only where it groups the heads (:func:`is_grouped`);
    else :func:`grouped_kv_heads`, 12 heads -> 4, 4 heads -> 2; heads that cannot be grouped — 2, 3, a prime count —
    get no GQA and SWA+GQA lines: :func:`gqa_note` says why), MLA's latent (given, else :func:`default_latent_dim` of
    the attention's d_out, heads × head_dim: the latent an MLA run of attnviz has at that width), the window (given,
    as it is; else :func:`default_window` of the model's ``context_length``) and SWA's ratio (given, else Gemma 3's
    "5:1")."""
    head_dim = head_dim or math.ceil(emb_dim / n_heads)
    gqa = next((heads for heads in (gqa_kv_heads, n_kv_heads) if is_grouped(heads, n_heads)), None) \
        or grouped_kv_heads(n_heads)
    base = {"emb_dim": emb_dim, "n_heads": n_heads, "n_layers": n_layers, "head_dim": head_dim}
    window = {"sliding_window_size": sliding_window_size or default_window(context_length),
              "swa_ratio": swa_ratio or "5:1"}
    lines = {
        "MHA": dict(base),
        "GQA": {**base, "n_kv_heads": gqa},
        "MQA": {**base, "n_kv_heads": 1},
        "MLA": {**base, "latent_dim": latent_dim or default_latent_dim(n_heads * head_dim)},
        "SWA": {**base, **window},
        "SWA+GQA": {**base, "n_kv_heads": gqa, **window},
    }
    if gqa is None:
        del lines["GQA"], lines["SWA+GQA"]
    if sliding_window_size and (n_kv_heads == 1 and n_heads > 1 or latent_dim):  # its own: a window on MQA or MLA
        own = {**base, **window, **({"latent_dim": latent_dim} if latent_dim else {"n_kv_heads": n_kv_heads})}
        lines[attention_name(**own)] = own
    return lines


def gqa_note(settings: dict[str, dict], n_heads: int, chosen: int | None = None, source: str = "") -> str | None:
    """Why :func:`variant_settings`' GQA lines are not there, or do not have ``chosen`` K/V heads (``source``'s, in
    words: "the sidebar's GQA", "Gemma 3 270M"): GQA groups the heads, so its K/V heads lie strictly between 1 (MQA)
    and the heads (MHA) and divide them.  None where the GQA lines draw ``chosen``, or nothing was chosen and they
    are there."""
    if "GQA" not in settings:
        return (f"No GQA line: grouped-query attention shares one K/V head among each group of query heads, so it "
                f"has more K/V heads than 1 (MQA) and fewer than the heads (MHA), a count that divides them — and "
                f"{amount(n_heads, 'head')} have no such count.")
    drawn = settings["GQA"]["n_kv_heads"]
    if chosen is None or chosen == drawn:
        return None
    what = ("one K/V head shared by all the heads, which is MQA (the MQA lines)" if chosen == 1 else
            "a K/V head per head, which is MHA (the MHA line)" if chosen == n_heads else
            f"a count that does not divide the {n_heads:,} heads")
    return (f"{source[:1].upper()}{source[1:]} has {amount(chosen, 'K/V head')}: {what}. The GQA lines group the "
            f"{n_heads:,} heads into {amount(drawn, 'K/V head')}, {n_heads // drawn} heads each.")


def latent_note(settings: dict[str, dict], source: str | None = None) -> str | None:
    """Which latent :func:`variant_settings`' MLA line draws and why, and, where it saves nothing, why not: a latent
    as wide as the K and V of every head together (or wider) caches what MHA caches.  ``source``: where a given
    latent comes from, in words ("the sidebar's latent width"); None: the filled-in :func:`default_latent_dim`.
    None without an MLA line."""
    mla, mha = settings.get("MLA"), settings.get("MHA")
    if not mla or not mla.get("latent_dim"):
        return None
    latent = mla["latent_dim"]
    if source is None:
        d_out = mla["n_heads"] * mla["head_dim"]  # the attention's width, which the MHA line caches K and V of
        source = (f"the book's default max(16, d_out // 8) at d_out = {amount(mla['n_heads'], 'head')} × "
                  f"{mla['head_dim']} = {d_out:,}, the latent attnviz's MLA has at that width (bonus ch04/05_mla's "
                  "MultiHeadLatentAttention)")
    note = f"The MLA line caches a latent of {latent:,} numbers per token and layer: {source}."
    if not mha:
        return note
    heads, head_dim = mha["n_heads"], mha["head_dim"]
    kv_width = 2 * heads * head_dim  # K and V of every head, per token and layer
    if latent < kv_width:
        return note
    replaced = f"the K and V it replaces (2 × {amount(heads, 'head')} × {head_dim} = {kv_width:,} numbers per token " \
               "and layer: MHA's cache)"
    return note + (f" It saves nothing here: its latent is as wide as {replaced}." if latent == kv_width
                   else f" It costs more than MHA here: its latent is wider than {replaced}.")


def context_lengths(longest: int = 131072, shortest: int = 256) -> list[int]:
    """Powers of two from ``shortest`` up to ``longest`` (and ``longest`` itself): the chart's x values."""
    lengths, n = [], shortest
    while n < longest:
        lengths.append(n)
        n *= 2
    return [*lengths, longest]


def chart_lengths(settings: dict[str, dict], longest: int = 131072) -> list[int]:
    """The cost chart's x values for :func:`variant_settings`' lines: :func:`context_lengths` up to ``longest``, from
    the power of two at or below a quarter of the narrowest window the lines use (at most 256, at least 1), and each
    window itself — so a window's line is seen to grow up to its window and stop there (the bundled model's window
    of 64 starts the axis at 16, not at 256, where its line would be flat from the start)."""
    windows = sorted({int(kwargs["sliding_window_size"]) for kwargs in settings.values()
                      if kwargs.get("sliding_window_size")})
    shortest = 256
    if windows:
        shortest = min(shortest, 1 << (max(1, windows[0] // 4).bit_length() - 1))  # a power of two ≤ W / 4
    return sorted({*context_lengths(longest, shortest), *(window for window in windows if window < longest)})


def curves(settings: dict[str, dict], lengths: list[int], *, batch_size: int = 1,
           dtype: str = "bf16") -> dict[str, list[int]]:
    """{variant: bytes at each of ``lengths``} for :func:`variant_settings`' (or any) kv_cache_bytes arguments."""
    return {name: [kv_cache_bytes(context_length=n, batch_size=batch_size, dtype=dtype, **kwargs) for n in lengths]
            for name, kwargs in settings.items()}


def windowed_layers(n_layers: int, swa_ratio: str | None) -> str:
    """Which of ``n_layers`` layers ``swa_ratio`` windows, in words, as :func:`layer_split` counts them: "its one
    layer", "both layers", "all 12 layers" where every layer slides (a 5:1 ratio of 2 layers leaves no full layer);
    "5 of 6 layers, 5:1 SWA:full" where some do not."""
    n_swa, n_full = layer_split(n_layers, "1:0" if swa_ratio is None else swa_ratio)
    if n_full == 0:
        return {1: "its one layer", 2: "both layers"}.get(n_layers, f"all {n_layers:,} layers")
    a, b = parse_ratio(swa_ratio)
    return f"{n_swa:,} of {n_layers:,} layers, {a}:{b} SWA:full"


def describe(name: str, kwargs: dict) -> str:
    """A short label of one variant's settings: its K/V heads, latent or window, and with a window the layers that
    slide (:func:`windowed_layers`)."""
    if kwargs.get("latent_dim"):
        what = f"latent {kwargs['latent_dim']}"
    else:
        what = f"{amount(kwargs.get('n_kv_heads') or kwargs['n_heads'], 'K/V head')} × {kwargs['head_dim']}"
    if kwargs.get("sliding_window_size"):
        what += (f", window {kwargs['sliding_window_size']:,} on "
                 f"{windowed_layers(kwargs['n_layers'], kwargs.get('swa_ratio'))}")
    return f"{name} ({what})"


def format_bytes(n: float) -> str:
    """Bytes in decimal units, as the book's estimators print them (GB = 1000³ bytes), two decimals past bytes.

    The number is rounded first, then the unit picked: the smallest unit whose rounded number stays below 1,000
    (999,999,999 bytes is "1.00 GB", not "1,000.00 MB"); GB, the largest, takes any number."""
    whole = round(n)
    if whole < 1000:
        return f"{whole:,} B"
    for unit, size in (("kB", 1000), ("MB", 1000**2)):
        shown = f"{n / size:,.2f}"
        if float(shown.replace(",", "")) < 1000:
            return f"{shown} {unit}"
    return f"{n / 1000**3:,.2f} GB"
