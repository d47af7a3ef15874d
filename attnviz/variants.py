"""The registry: every attention variant (and every size preset) is one record here; nothing else compares names.

A :class:`Variant` says what the sidebar, the pipeline, the diagram, the source panel and the Compare page
need to know about one model: its name and label, the book section, the class, how to build it from an
``AttentionConfig``, which settings apply (and why the others don't), how its heads are laid out, whether it
has weights, dropout and an ``out_proj``, and the path of named tensors it records (its shape path).  Other
modules iterate :data:`VARIANTS` or read a record's fields; they never spell a variant's name.  A new
variant whose class records the stages the others record is one more record; a new stage, a new setting, a GPT
block or a checkpoint family needs more, listed in ``docs/design.md`` ("Adding a variant").  A checkpoint's layer
(:data:`CHECKPOINT`, whose ``build`` loads the file's weights) and a user's module (:data:`USER_MODULE`) are
records too, kept out of :data:`VARIANTS` (the sidebar's choices): ``AttentionConfig.spec`` returns them, and
their ``fixed_settings`` list the settings the file or the module decides, with the reason shown in the sidebar.

Pure Python + torch: no Streamlit, no pipeline import (the pipeline imports this module).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from torch import nn

from attnviz import attention
from attnviz import modern_attention as modern

# head layouts
ONE_HEAD = "one"  # a single head: maps are (b, n, n), recorded as (b, 1, n, n)
PER_HEAD = "per_head"  # num_heads separate modules, outputs concatenated (the wrapper)
BATCHED = "batched"  # one set of projections viewed as (b, h, n, hd) (MultiHeadAttention)

QKV = ("queries", "keys", "values")  # the three projections, in the book's order
# settings only some variants have (``Variant.settings`` lists the ones that apply); rope_base goes with positions
MODERN_SETTINGS = ("num_kv_groups", "latent_dim", "sliding_window_size", "positions", "rope_base")
_NOT_APPLICABLE = {
    "num_kv_groups": "Only grouped-query attention shares K/V heads in groups you choose (MQA has one K/V head; "
                     "the other variants one per head).",
    "latent_dim": "Only multi-head latent attention compresses keys and values into a latent.",
    "sliding_window_size": "Only sliding-window attention limits how far back a query sees.",
    "positions": "This class uses the learned positional embedding of chapter 2 (rotary positions: MHA, GQA, MQA "
                 "and SWA).",
}


@dataclass(frozen=True)
class Variant:
    """One attention variant (or model family): everything the app needs to know about it."""

    name: str  # the URL/setting value, e.g. "mha"
    label: str  # what the sidebar shows
    section: str  # where the book introduces it ("3.6.2"); "" for families outside Chapter 3
    cls: type[nn.Module]  # the class that runs (its source is what the Steps page shows)
    build: Callable[[Any], nn.Module]  # AttentionConfig -> module (call right after torch.manual_seed)
    weights: str | None  # None (no trainable weights), "parameter" (nn.Parameter) or "linear" (nn.Linear)
    heads: str = ONE_HEAD  # ONE_HEAD, PER_HEAD or BATCHED
    dropout: bool = False  # has a dropout layer on the weights
    out_proj: bool = False  # mixes the concatenated heads with a learned output projection
    book_causal: bool = False  # the book's listing masks the future (the "book" preset sets causal to this)
    book_seed: int = 123  # the torch.manual_seed before the book's listing builds it (the "book" preset's seed)
    source_parts: tuple[Callable, ...] = ()  # more code the class runs (shown after the class in the source panel)
    fixed_settings: dict[str, str] = field(default_factory=dict)  # setting -> why it does not apply
    settings: tuple[str, ...] = ()  # the MODERN_SETTINGS that apply ("positions" brings "rope_base")
    kv_groups: int | None = None  # a fixed number of K/V heads (MQA: 1); None: num_kv_groups or one per head
    # the book's constructor takes d_out per head (the wrapper: its output is num_heads × d_out wide), where attnviz's
    # d_out is the total width: the book size gives it its listing's total (Preset.sizes), the sidebar says so
    per_head_d_out: bool = False

    @property
    def multi_head(self) -> bool:
        return self.heads != ONE_HEAD

    @property
    def scaled(self) -> bool:
        """Divides the scores by √dₖ (the simplified version of 3.3 does not)."""
        return self.weights is not None

    def head_count(self, num_heads: int) -> int:
        """Heads in this variant's maps for the sidebar's ``num_heads`` (1 for single-head variants)."""
        return int(num_heads) if self.multi_head else 1

    def out_width(self, d_in: int, d_out: int) -> int:
        """The output width: ``d_out``, or ``d_in`` for a variant without weights."""
        return int(d_out) if self.weights is not None else int(d_in)

    def d_out_help(self, num_heads: int) -> str | None:
        """What d_out means for this class, where the book's constructor reads it otherwise (the sidebar's help)."""
        if not self.per_head_d_out:
            return None
        heads = int(num_heads)
        return (f"d_out is the output's total width, as for every class here: each of the {heads} heads is "
                f"d_out ÷ {heads} wide. The book's {self.cls.__name__} takes d_out per head (its output is "
                "num_heads × d_out wide): the Book toy example runs its listing, d_out = 2 per head with 2 heads, "
                "so d_out is 4 here (MultiHeadAttention's listing: d_out = 2 in all). Exercise 3.2 "
                "(2-dimensional context vectors, still 2 heads): set d_out to 2 at the Book toy example — each "
                "head's d_out is 1, the exercise's answer.")

    def not_applicable(self, setting: str) -> str | None:
        """Why ``setting`` (``d_out``, ``num_heads``, ``dropout``, ``train`` …) does not apply, or None."""
        if setting in self.fixed_settings:
            return self.fixed_settings[setting]
        if setting == "attention" and self.name != USER_MODULE_NAME:
            return ("The book's classes compute one attention, and a checkpoint's are its layers (Layer): only a "
                    "module of yours may compute several.")
        if setting == "d_out" and self.weights is None:
            return "This variant has no weights: its output width is d_in."
        if setting == "num_heads" and not self.multi_head:
            return "Single-head variant: it has one head."
        if setting in ("dropout", "train") and not self.dropout:
            return "This variant has no dropout in the book."
        if setting in MODERN_SETTINGS:
            wanted = "positions" if setting == "rope_base" else setting
            if wanted not in self.settings:
                return _NOT_APPLICABLE[wanted]
        return None

    @property
    def grouped(self) -> bool:
        """Its query heads share K/V heads (GQA, MQA): keys are split into groups, then repeated."""
        return "num_kv_groups" in self.settings or self.kv_groups is not None

    @property
    def shape_path(self) -> tuple[str, ...]:
        """The tensors this variant records, in pipeline order (the shape diagram's nodes)."""
        stages = ["input", *QKV]
        if "latent_dim" in self.settings:
            stages.insert(1, "latent")  # MLA: the latent between the input and the keys/values
        if self.heads == BATCHED:
            stages += ["view", "transpose"]
        if self.grouped:
            stages += ["kv_groups", "kv_repeat"]
        stages += [*attention.MAP_STAGES, "context"]
        if self.multi_head:
            stages.append("concat")
        return (*stages, "output")

    def meaning(self, stage: str) -> str:
        """Symbolic shape of ``stage`` in this variant, as in the code's shape comments (``"b h n n"``)."""
        width = "d_in" if self.weights is None else ("hd" if self.heads == PER_HEAD else "d_out")
        kv_heads = "g" if self.grouped else "h"
        if stage in ("keys", "values") and self.grouped:
            return "b n g·hd"
        modern_meanings = {"latent": "b n latent_dim", "kv_groups": "b g n hd", "kv_repeat": "b h n hd",
                           "rotated_queries": "b h n hd", "rotated_keys": f"b {kv_heads} n hd"}
        if stage in modern_meanings:
            return modern_meanings[stage]
        if stage in attention.MAP_STAGES:
            return "b h n n" if self.heads == BATCHED else "b n n"
        if stage in QKV:
            return f"b n {width}"
        if stage == "context":
            return "b h n hd" if self.heads == BATCHED else f"b n {width}"
        if stage == "output":
            return "b n d_in" if self.weights is None else "b n d_out"
        return ""


def _simplified(c) -> nn.Module:
    return attention.SimplifiedSelfAttention(causal=c.causal)


def _v1(c) -> nn.Module:
    return attention.SelfAttention_v1(c.d_in, c.d_out, causal=c.causal)


def _v2(c) -> nn.Module:
    return attention.SelfAttention_v2(c.d_in, c.d_out, qkv_bias=c.qkv_bias, causal=c.causal)


def _causal(c) -> nn.Module:
    return attention.CausalAttention(c.d_in, c.d_out, c.context_length, c.dropout, c.qkv_bias, causal=c.causal)


def _wrapper(c) -> nn.Module:
    # the book's wrapper takes d_out per head; attnviz's d_out is the total width
    return attention.MultiHeadAttentionWrapper(
        c.d_in, c.d_out // c.num_heads, c.context_length, c.dropout, c.num_heads, c.qkv_bias, causal=c.causal
    )


def _mha(c) -> nn.Module:
    return attention.MultiHeadAttention(c.d_in, c.d_out, c.context_length, c.dropout, c.num_heads, c.qkv_bias,
                                        causal=c.causal, rope_base=c.rotary_base)


def _gqa(c) -> nn.Module:  # also MQA: its record fixes kv_groups to 1
    return modern.GroupedQueryAttention(c.d_in, c.d_out, c.dropout, c.num_heads, c.kv_groups, qkv_bias=c.qkv_bias,
                                        causal=c.causal, rope_base=c.rotary_base)


def _mla(c) -> nn.Module:
    return modern.MultiHeadLatentAttention(c.d_in, c.d_out, c.dropout, c.num_heads, qkv_bias=c.qkv_bias,
                                           latent_dim=c.latent_width, causal=c.causal)


def _swa(c) -> nn.Module:
    return modern.MultiHeadAttentionWithSWA(c.d_in, c.d_out, c.dropout, c.num_heads, qkv_bias=c.qkv_bias,
                                            sliding_window_size=c.window, rope_base=c.rotary_base)


_MODERN_SOURCE = (modern.scaled_dot_product,)
_WINDOW_CAUSAL = "Sliding-window attention always hides the future; its window also hides keys W or more behind."


_SINGLE_HEAD_SOURCE = (attention._single_head, attention._mask_bool)

VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("simplified", "Simplified self-attention (3.3, no weights)", "3.3", attention.SimplifiedSelfAttention,
            _simplified, weights=None,
            fixed_settings={"d_out": "The simplified variant has no weights: its output width is d_in."}),
    Variant("self_attention_v1", "Self-attention v1 (3.4, nn.Parameter)", "3.4.2", attention.SelfAttention_v1,
            _v1, weights="parameter", source_parts=_SINGLE_HEAD_SOURCE),
    Variant("self_attention_v2", "Self-attention v2 (3.4, nn.Linear)", "3.4.2", attention.SelfAttention_v2,
            _v2, weights="linear", source_parts=_SINGLE_HEAD_SOURCE, book_seed=789),
    Variant("causal", "Causal attention (3.5)", "3.5.3", attention.CausalAttention, _causal, weights="linear",
            dropout=True, book_causal=True, source_parts=_SINGLE_HEAD_SOURCE),
    Variant("mha_wrapper", "Multi-head wrapper (3.6.1)", "3.6.1", attention.MultiHeadAttentionWrapper, _wrapper,
            weights="linear", heads=PER_HEAD, dropout=True, book_causal=True, per_head_d_out=True,
            source_parts=(attention.CausalAttention, *_SINGLE_HEAD_SOURCE)),
    Variant("mha", "Multi-head attention (3.6.2)", "3.6.2", attention.MultiHeadAttention, _mha, weights="linear",
            heads=BATCHED, dropout=True, out_proj=True, book_causal=True, settings=("positions",)),
    Variant("gqa", "Grouped-query attention (bonus: Llama 3, Qwen3)", "bonus ch04/04_gqa",
            modern.GroupedQueryAttention, _gqa, weights="linear", heads=BATCHED, dropout=True, out_proj=True,
            book_causal=True, source_parts=_MODERN_SOURCE, settings=("num_kv_groups", "positions")),
    Variant("mqa", "Multi-query attention (bonus: one K/V head)", "bonus ch04/04_gqa", modern.GroupedQueryAttention,
            _gqa, weights="linear", heads=BATCHED, dropout=True, out_proj=True, book_causal=True,
            source_parts=_MODERN_SOURCE, settings=("positions",), kv_groups=1,
            fixed_settings={"num_kv_groups": "Multi-query attention: all heads share one K/V head "
                                             "(GroupedQueryAttention with num_kv_groups = 1)."}),
    Variant("mla", "Multi-head latent attention (bonus: DeepSeek V3)", "bonus ch04/05_mla",
            modern.MultiHeadLatentAttention, _mla, weights="linear", heads=BATCHED, dropout=True, out_proj=True,
            book_causal=True, source_parts=_MODERN_SOURCE, settings=("latent_dim",)),
    Variant("swa", "Sliding-window attention (bonus: Gemma 3, Mistral)", "bonus ch04/06_swa",
            modern.MultiHeadAttentionWithSWA, _swa, weights="linear", heads=BATCHED, dropout=True, out_proj=True,
            book_causal=True, source_parts=_MODERN_SOURCE, settings=("sliding_window_size", "positions"),
            fixed_settings={"causal": _WINDOW_CAUSAL}),
)}
LABELS = {name: v.label for name, v in VARIANTS.items()}  # name -> label, for selectboxes

# Roles other modules refer to (by role, never by name)
DEFAULT = "mha"  # the sidebar's default
MHA = "mha"  # the book's MultiHeadAttention: the reference of the Compare page and the benchmark
WRAPPER = "mha_wrapper"  # the book's wrapper: compared with MHA head by head
GQA = "gqa"  # grouped-query: equals MHA on the same weights when num_kv_groups = num_heads
SWA = "swa"  # sliding window: equals causal MHA on the same weights when W ≥ n
MQA = "mqa"  # multi-query: grouped-query with one K/V head
MLA = "mla"  # multi-head latent attention
# the bonus material's variants: the Generate page's random GPTs offer them (ui/generate.py), and
# benchmarks/variants.py times each against MHA
MODERN = (GQA, MQA, MLA, SWA)


def _checkpoint_attention(c) -> nn.Module:
    from attnviz import weights  # the model behind the config's weights ref (loaded once, cached)

    return weights.load(c.checkpoint).trf_blocks[c.layer].att


FROM_CHECKPOINT = "The checkpoint decides this: its sizes are read from the file."  # a size the file decides
_EVAL = "A loaded model runs in eval mode (as at inference): no dropout."
# A checkpoint's layer: the book's MultiHeadAttention inside the book's Chapter 4 GPTModel, sizes from the file.
# Not listed in VARIANTS (the sidebar's and the Compare page's choices): AttentionConfig.spec returns it when
# the ``weights`` setting names a checkpoint.  Its name is MHA's, so the source, diagram and steps are MHA's.
CHECKPOINT = Variant(
    MHA, "MultiHeadAttention of a GPT-2 checkpoint (GPTModel, ch. 4)", "4.5", attention.MultiHeadAttention,
    _checkpoint_attention, weights="linear", heads=BATCHED, dropout=False, out_proj=True, book_causal=True,
    fixed_settings={
        "variant": "A checkpoint's attention is the one its file holds (the book's MultiHeadAttention, or the bonus "
                   "grouped-query or latent attention) inside GPTModel (chapter 4).",
        "preset": FROM_CHECKPOINT, "d_in": FROM_CHECKPOINT, "d_out": FROM_CHECKPOINT, "num_heads": FROM_CHECKPOINT,
        "dropout": _EVAL, "train": _EVAL,
        "seed": "The weights come from the checkpoint: nothing is seeded.",
        "device": "Checkpoints run on the CPU.",
    },
)


def _checkpoint_record(name: str, label: str) -> Variant:
    """:data:`CHECKPOINT` for a checkpoint whose blocks hold the bonus attention ``name`` (the book's
    ``ch04/04_gqa`` or ``05_mla`` GPTModel): that variant's class, source, shape path and K/V heads or latent (the
    settled config holds the file's ``num_kv_groups`` / ``latent_dim``); learned positions, as the book's GPT."""
    bonus = VARIANTS[name]
    return replace(CHECKPOINT, name=name, label=label, cls=bonus.cls, source_parts=bonus.source_parts,
                   settings=tuple(setting for setting in bonus.settings if setting != "positions"),
                   kv_groups=bonus.kv_groups)


# a checkpoint's record by the attention its blocks hold (models.loading reads it from the tensors)
CHECKPOINTS: dict[str, Variant] = {
    MHA: CHECKPOINT,
    GQA: _checkpoint_record(GQA, "GroupedQueryAttention of a checkpoint (GPTModel, bonus ch04/04_gqa)"),
    MQA: _checkpoint_record(MQA, "GroupedQueryAttention with one K/V head of a checkpoint (GPTModel, bonus "
                                 "ch04/04_gqa)"),
    MLA: _checkpoint_record(MLA, "MultiHeadLatentAttention of a checkpoint (GPTModel, bonus ch04/05_mla)"),
}


def checkpoint_variant(kv_heads: int | None, latent_dim: int | None) -> str:
    """The name of the attention a checkpoint's blocks hold, from what ``attnviz.weights.sizes`` read of them: latent
    with a latent, grouped-query with K/V heads (multi-query with one), else multi-head (the book's sliding-window
    class included: its window is the model run's, ``ModelRun.window``)."""
    if latent_dim is not None:
        return MLA
    if kv_heads is not None:
        return MQA if kv_heads == 1 else GQA
    return MHA


def checkpoint_record(name: str) -> Variant:
    """The record of a checkpoint's layer whose settled ``variant`` is ``name``: :data:`CHECKPOINTS`' (MHA's,
    :data:`CHECKPOINT`, for any other name: a config not settled yet holds the sidebar's variant)."""
    return CHECKPOINTS.get(name, CHECKPOINT)


# the settings a checkpoint's file decides (those CHECKPOINT marks FROM_CHECKPOINT), in the sidebar's order
CHECKPOINT_SIZES = tuple(key for key, why in CHECKPOINT.fixed_settings.items() if why == FROM_CHECKPOINT)


def _listed_module(c) -> nn.Module:
    from attnviz import user_code  # the modules listed on the command line

    return user_code.build_listed(c.module, c)


# A user's own attention module, listed on the command line (attnviz.user_code).  Not listed in VARIANTS:
# AttentionConfig.spec returns it when ``module`` is set; its Trace comes from attnviz.tracing.
USER_MODULE_NAME = "module"  # USER_MODULE's name: no variant of the registry has it
USER_MODULE = Variant(
    USER_MODULE_NAME, "Your own attention module", "", nn.Module, _listed_module, weights="linear", heads=BATCHED,
    dropout=True, out_proj=False, book_causal=True,
    fixed_settings={
        "causal": "Your module decides whether it masks the future.", "device": "Your module runs on the CPU.",
        "embedding": "Text is embedded with seeded tables at your module's input width.",
    },
)


def register(variant: Variant) -> Variant:
    """Add (or replace) a record in :data:`VARIANTS`: every module that iterates the registry picks it up (what
    else a variant may need: ``docs/design.md``, "Adding a variant").  Returns the record."""
    VARIANTS[variant.name] = variant
    LABELS[variant.name] = variant.label
    return variant


def get(name: str) -> Variant:
    """The record of ``name``; KeyError naming the known variants when there is none."""
    try:
        return VARIANTS[name]
    except KeyError:
        raise KeyError(f"Unknown variant {name!r}; choose one of {', '.join(VARIANTS)}.") from None


ADDED_MASK = "listing has no causal mask: attnviz adds it"  # in the note in both wordings: what marks it as that note


def added_mask_note(config, *, python: bool = False) -> str | None:
    """The note on the AttentionConfig ``config`` of a book class whose listing has no causal mask (3.3, 3.4:
    ``Variant.book_causal`` False) run with ``causal`` on: the mask is attnviz's addition, and how to run the listing
    as printed.  In the app's words (the sidebar's Causal mask box), or with ``python`` in Python's (``causal=False``,
    and ``seed=789`` for SelfAttention_v2 where the embedding is the book's: its printed numbers), as
    ``producers.book`` writes it into ``trace.notes``.  None otherwise: the mask off, a listing that masks, a class
    that always masks, a checkpoint's layer, a user's module."""
    if config.module is not None or config.checkpoint is not None or not config.causal:
        return None
    spec = config.spec
    if spec.book_causal or spec.not_applicable("causal") is not None:
        return None
    if not python:
        because, to_see = "Causal mask is on", "turn it off to see the listing as printed"
    elif config.embedding != "book":
        because, to_see = "causal=True", "set causal=False to run it as printed"
    else:
        seed = "" if config.seed == spec.book_seed else f" and seed={spec.book_seed} (the listing's torch.manual_seed)"
        because, to_see = "causal=True", f"set causal=False{seed} to get its printed numbers"
    return f"The book's {spec.section} {ADDED_MASK} because {because} — {to_see}."


def is_added_mask_note(note: str) -> bool:
    """Whether ``note`` (of ``trace.notes``) is :func:`added_mask_note`'s, in either wording."""
    return ADDED_MASK in note


# --------------------------------------------------------------------------- size presets

@dataclass(frozen=True)
class Preset:
    """A model size the sidebar offers: d_in, d_out, num_heads (and the book's journey vectors for "book")."""

    name: str
    label: str
    d_in: int
    d_out: int
    num_heads: int
    book: bool = False  # the book's toy example: its hand-set 3-d embeddings, causal and seed as the book's listing

    @property
    def dims(self) -> tuple[int, int, int]:
        return self.d_in, self.d_out, self.num_heads

    def sizes(self, spec: Variant | None = None) -> tuple[int, int, int]:
        """(d_in, d_out, num_heads) the sidebar holds at this size for the variant ``spec`` (None: a checkpoint's
        layer or a user's module): :attr:`dims`, but at the book's toy example a class whose book constructor takes
        d_out per head (``Variant.per_head_d_out``: the wrapper) gets its listing's total width, num_heads × d_out
        (3.6.1: 2 heads × 2 = 4), so that it runs the book's listing and prints its tensor."""
        if self.book and spec is not None and spec.per_head_d_out:
            return self.d_in, self.d_out * self.num_heads, self.num_heads
        return self.dims

    def holds(self, spec: Variant | None, sizes: tuple[int, int, int]) -> bool:
        """Whether (d_in, d_out, num_heads) ``sizes`` are this size's for the variant ``spec``: :meth:`sizes`, and at
        the book's toy example also the book's exercise for a class that takes d_out per head — exercise 3.2: the
        wrapper's 2 heads of d_out 1 give 2-dimensional context vectors, the preset's own (3, 2, 2) — so the
        sidebar's d_out set to the exercise's answer keeps the book's inputs, seed and mask."""
        sizes = tuple(int(size) for size in sizes)
        return sizes == self.sizes(spec) or (self.book and spec is not None and spec.per_head_d_out
                                             and sizes == self.dims)


# GPT-2 sizes: (d_model, heads); head_dim is 64 in all four.  (A widely copied table says 24 and
# 36 heads for medium and large: 1024/24 and 1280/36 are not even integers.)
PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("gpt2-small", "GPT-2 small (768, 12 heads)", 768, 768, 12),
    Preset("gpt2-medium", "GPT-2 medium (1024, 16 heads)", 1024, 1024, 16),
    Preset("gpt2-large", "GPT-2 large (1280, 20 heads)", 1280, 1280, 20),
    Preset("gpt2-xl", "GPT-2 XL (1600, 25 heads)", 1600, 1600, 25),
    Preset("book", "Book toy example (3 → 2, 2 heads)", 3, 2, 2, book=True),
)}
CUSTOM = "custom"  # the sidebar's choice when the sizes match no preset
PRESET_LABELS = {**{name: p.label for name, p in PRESETS.items()}, CUSTOM: "Custom"}
