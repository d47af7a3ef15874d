"""Pitfall lab, the catalogue: the pitfalls (texts, the correct module, how to build the bug, which detector and
figure) — seven in the book's MultiHeadAttention, four in today's attention (grouped-query, sliding-window,
rotary) and three in a KV cache — and running one of them, or the leak detector, on the correct and the buggy
module (of an app's Trace); with no bug and a user's module, the leak detector on that module itself
(:func:`leak.module_leak`).  A pitfall that cannot run at the lab's sizes (the rotary bugs at an odd head_dim)
says why (:meth:`Pitfall.unavailable`) instead of raising PyTorch's shape error from both versions.  What the page
says the lab runs is the chosen bug's own class with its arguments (:func:`describe`, :func:`setup_for`).

Pure torch: no figures, no Streamlit.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from attnviz.attention import MultiHeadAttention
from attnviz.config import AttentionConfig
from attnviz.labs.pitfalls import modern
from attnviz.labs.pitfalls.bugs import (
    MaskedFillWithoutUnderscore,
    MaskIncludesDiagonal,
    MaskNotSliced,
    ScaleByDOut,
    SoftmaxOverWrongDim,
    ViewWithoutContiguous,
    forgot_eval,
)
from attnviz.labs.pitfalls.detectors import (
    Version,
    detect_cache,
    detect_error,
    detect_kv_groups,
    detect_leak,
    detect_nan,
    detect_nondeterminism,
    detect_rotary,
    detect_row_sums,
    detect_scale,
    detect_window,
)
from attnviz.labs.pitfalls.leak import leak_report, module_leak
from attnviz.labs.pitfalls.workbench import (
    BOOK_CLASS,
    LabSetup,
    build_correct,
    copy_weights,
    lab_inputs,
    lab_setup,
)
from attnviz.rng import seeded
from attnviz.trace import Trace

# --------------------------------------------------------------------------- the catalogue

class PitfallUnavailableError(ValueError):
    """The pitfall cannot run at the lab's sizes; the message says why (:meth:`Pitfall.unavailable`)."""


@dataclass(frozen=True)
class Pitfall:
    key: str
    label: str  # short, for the selector
    title: str
    correct_line: str
    buggy_line: str
    explanation: str
    build: Callable[[nn.Module, LabSetup], nn.Module]  # correct module -> buggy module
    detect: Callable[[nn.Module, torch.Tensor, LabSetup], Version]
    figure: str  # "weights", "row_sums", "entropy", "dropout", "error", "rotary", "cache"
    in_mask: bool = False  # the bug lives in the causal mask (the lab keeps the mask on for it)
    correct: Callable[[LabSetup], nn.Module] = build_correct  # the correct module (the book's MHA unless said)
    head: int = 0  # the head the page draws (the grouped-query bug shows from head 1 on)
    needs: Callable[[LabSetup], str | None] | None = None  # why the setup's sizes cannot run it, or None
    runs: type[nn.Module] = MultiHeadAttention  # the correct module's class (the bug is its one-line subclass)
    map_words: Callable[[LabSetup, int], str] | None = None  # the sentence on the head the map shows, at the setup

    def shown_head(self, setup: LabSetup) -> int:
        """The head the page draws: the pitfall's own, or the last one when the setup has fewer heads."""
        return min(self.head, setup.num_heads - 1)

    def explained(self, setup: LabSetup) -> str:
        """The explanation as the page shows it at the setup's sizes: with the sentence on the head the map shows."""
        if self.map_words is None:
            return self.explanation
        return f"{self.explanation} {self.map_words(setup, self.shown_head(setup))}"

    def unavailable(self, setup: LabSetup) -> str | None:
        """Why neither version can run at the setup's sizes (a sentence for the page), None when they can."""
        return None if self.needs is None else self.needs(setup)

    @property
    def stage(self) -> str:
        """The stage the page draws for both versions: ``dropped`` for the dropout bug, else ``weights``."""
        return "dropped" if self.figure == "dropout" else "weights"

    @property
    def draws_weights(self) -> bool:
        """False when the bug raises: there are no weights to draw, only PyTorch's error."""
        return self.figure not in ("error", "cache")


def _subclass(cls: type[MultiHeadAttention]) -> Callable[[MultiHeadAttention, LabSetup], nn.Module]:
    def build(correct: MultiHeadAttention, setup: LabSetup) -> nn.Module:
        with seeded(setup.seed):  # the constructor draws weights (replaced right after): hold the RNG
            buggy = cls(setup.d_in, setup.d_out, setup.context_length, setup.dropout, setup.num_heads,
                        causal=correct.causal)
        return copy_weights(correct, buggy).eval()
    return build


def _forgotten_eval(correct: MultiHeadAttention, setup: LabSetup) -> nn.Module:
    buggy = _subclass(MultiHeadAttention)(correct, setup)  # the book's class itself, same weights
    return forgot_eval(buggy)  # ... and nobody calls .eval()


def _arguments(cls: type[nn.Module], setup: LabSetup) -> dict[str, object]:
    """The arguments a class the lab runs is built with at the setup's sizes, by name, in its constructor's order:
    the book's MultiHeadAttention's five (d_in, d_out, context_length, dropout, num_heads) — the rotary and cached
    classes' too —, or a bonus class's own (GQA and SWA take no context_length; num_kv_groups, sliding_window_size)."""
    values = {"d_in": setup.d_in, "d_out": setup.d_out, "context_length": setup.context_length,
              "dropout": setup.dropout, "num_heads": setup.num_heads, "num_kv_groups": setup.num_kv_groups,
              "sliding_window_size": setup.sliding_window_size}
    return {name: values[name] for name in inspect.signature(cls).parameters if name in values}


def _lab_module(cls: type[nn.Module], setup: LabSetup) -> nn.Module:
    """One of the lab's own classes (:mod:`~attnviz.labs.pitfalls.modern`) at the setup's sizes, seeded, eval mode."""
    with seeded(setup.seed):
        module = cls(**_arguments(cls, setup))
    return module.eval()


def _even_head_dim(setup: LabSetup) -> str | None:
    """The rotary bugs' requirement: each rotation turns a pair of a head's dimensions, so head_dim must be even."""
    if setup.head_dim % 2 == 0:
        return None
    return (f"Rotary positions need an even head_dim (it is {setup.head_dim}: d_out {setup.d_out} ÷ num_heads "
            f"{setup.num_heads}): each rotation turns a pair of dimensions, so the rotary bugs cannot run at "
            "these sizes, in the correct code or the buggy one. Choose a d_out and heads whose head_dim is even.")


def _gqa_map(setup: LabSetup, head: int) -> str:
    """Which head the grouped-query bug's map shows and why: head 1 is the first the tiling moves to another group
    (head 0 keeps group 0); with one K/V group no head moves."""
    if setup.num_kv_groups > 1:
        return f"The map shows head {head}, the first head the pairing changes."
    return (f"The map shows head {head}: with 1 K/V group every head uses it, so repeat pairs the heads as "
            "repeat_interleave does and the bug has no effect here.")


def _modern(correct_cls: type[nn.Module], buggy_cls: type[nn.Module]) -> dict:
    """``correct`` and ``build`` for a bug in one of the lab's own classes: the same weights, one line changed."""
    def build(correct: nn.Module, setup: LabSetup) -> nn.Module:
        buggy = _lab_module(buggy_cls, setup)
        buggy.load_state_dict(correct.state_dict())  # the buffers are the class's own (not persistent)
        return buggy
    return {"correct": lambda setup: _lab_module(correct_cls, setup), "build": build, "runs": correct_cls}


PITFALLS: dict[str, Pitfall] = {p.key: p for p in (
    Pitfall(
        "masked_fill", "masked_fill (no _)", "1 · masked_fill without the underscore",
        "attn_scores.masked_fill_(mask_bool, -torch.inf)",
        "attn_scores.masked_fill(mask_bool, -torch.inf)",
        "`masked_fill` returns a masked *copy*; the line throws it away, so the scores are never masked and "
        "every token attends to the future. Nothing errors — only a causality check finds it.",
        _subclass(MaskedFillWithoutUnderscore), detect_leak, "weights", in_mask=True,
    ),
    Pitfall(
        "softmax_dim", "softmax dim=-2", "2 · softmax over the wrong dimension",
        "attn_weights = torch.softmax(attn_scores, dim=-1)",
        "attn_weights = torch.softmax(attn_scores, dim=-2)",
        "dim=-2 normalises each key's *column* over the queries. The shapes are the same, so nothing errors; "
        "but a query's weights no longer sum to 1 — and the column sums mix in future queries, so it also leaks.",
        _subclass(SoftmaxOverWrongDim), detect_row_sums, "row_sums",
    ),
    Pitfall(
        "scale_d_out", "÷√d_out", "3 · scaling by √d_out instead of √head_dim",
        "attn_scores = attn_scores / keys.shape[-1]**0.5  # head_dim",
        "attn_scores = attn_scores / self.d_out**0.5  # or a stale d_k from an earlier cell",
        "The dot products are over head_dim features, so their spread grows with √head_dim. Dividing by the "
        "larger √d_out flattens every softmax (higher entropy, more uniform weights). No error, just worse "
        "attention.",
        _subclass(ScaleByDOut), detect_scale, "entropy",
    ),
    Pitfall(
        "mask_diagonal", "triu diagonal=0", "4 · the mask hides the diagonal",
        'self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))',
        'self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=0))',
        "diagonal=0 masks each token's own key too. The first token then has no key left: softmax of a row of "
        "−∞ is 0/0 = NaN, and the NaN reaches its output.",
        _subclass(MaskIncludesDiagonal), detect_nan, "weights", in_mask=True,
    ),
    Pitfall(
        "view_contiguous", "view w/o contiguous", "5 · view after transpose without .contiguous()",
        "context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)",
        "context_vec = context_vec.view(b, num_tokens, self.d_out)",
        "After `.transpose(1, 2)` the tensor is (b, n, h, hd) only in its strides; the memory is still laid "
        "out as (b, h, n, hd). `.view` never copies, so it cannot merge h and hd that are not adjacent in "
        "memory. `.contiguous()` (or `.reshape`) copies first. With one head or one token it happens to work, "
        "which is how the bug survives small tests.",
        _subclass(ViewWithoutContiguous), detect_error, "error",
    ),
    Pitfall(
        "forgot_eval", "eval() forgotten", "6 · dropout left on at inference (model.eval() forgotten)",
        "model.eval()  # before inference: dropout off",
        "# model.eval() never called: a new module is in training mode",
        "`nn.Module` starts in training mode, so dropout zeroes random attention weights (and scales the rest "
        "by 1/(1−p)) on every call: the same text gives different outputs each time.",
        _forgotten_eval, detect_nondeterminism, "dropout",
    ),
    Pitfall(
        "mask_not_sliced", "mask not sliced", "7 · the mask not sliced to the number of tokens",
        "mask_bool = self.mask.bool()[:num_tokens, :num_tokens]",
        "mask_bool = self.mask.bool()",
        "The mask buffer is (context_length, context_length) so one module serves any length; a text shorter "
        "than the context needs its top-left (n, n) corner. Unsliced, it cannot broadcast against (b, h, n, n).",
        _subclass(MaskNotSliced), detect_error, "error", in_mask=True,
    ),
    Pitfall(
        "gqa_repeat", "repeat, not _interleave", "8 · grouped-query: repeat where repeat_interleave belongs",
        modern.GQA_LINE, modern.GQA_BUG,
        "With num_kv_groups K/V heads, query heads 0 … group_size − 1 share group 0, the next ones group 1 … — "
        "`repeat_interleave` copies each group next to itself (0, 0, 1, 1). `repeat` tiles the whole stack "
        "(0, 1, 0, 1), so a head attends with another group's keys. Shapes match and nothing errors; a trained "
        "checkpoint's heads just read the wrong keys.",
        detect=detect_kv_groups, figure="weights", head=1, map_words=_gqa_map, **_modern(modern.GroupedQueryAttention,
                                                                      modern.RepeatNotInterleave),
    ),
    Pitfall(
        "window_off_by_one", "window diff > W", "9 · sliding window: diff > W instead of diff >= W",
        modern.WINDOW_LINE, modern.WINDOW_BUG,
        "A window of W means query i sees W keys: i − W + 1 … i. Key i − W is W behind, so `diff >= W` must hide "
        "it; `diff > W` lets it through and the window is W + 1 wide. The map's band is one cell too wide.",
        detect=detect_window, figure="weights", in_mask=True, **_modern(modern.MultiHeadAttentionWithSWA,
                                                                          modern.WindowOffByOne),
    ),
    Pitfall(
        "rope_queries_only", "rotary on q only", "10 · rotary applied to the queries only",
        modern.ROPE_LINE, modern.ROPE_QUERIES_BUG,
        "Rotary turns q and k by their positions so that q_i·k_j depends on i − j only. Turn only q and the score "
        "depends on where the query is. The lab feeds the first token at every position: with q and k rotated, "
        "each diagonal of the scores is constant; the maps show that input.",
        detect=detect_rotary, figure="rotary", needs=_even_head_dim,
        **_modern(modern.RotaryAttention, modern.RopeOnQueriesOnly),
    ),
    Pitfall(
        "rope_values", "rotary on values", "11 · rotary applied to the values too",
        modern.ROPE_LINE, modern.ROPE_VALUES_BUG,
        "Rotary is for the scores: the values should say what a token is, not where. Rotated values give the "
        "same token a different output at every position. The lab feeds the first token at every position: "
        "correct code gives every position the same output.",
        detect=detect_rotary, figure="rotary", needs=_even_head_dim,
        **_modern(modern.RotaryAttention, modern.RopeOnValues),
    ),
    Pitfall(
        "cache_position", "position never advances", "12 · KV cache: the position never advances",
        modern.ADVANCE_LINE, modern.ADVANCE_BUG,
        "`ptr_current_pos` says where the new tokens sit, so the mask (or the rotary angles) treats them as "
        "positions p, p + 1 …. Never moved on, every cached token is masked as position 0: it sees only the "
        "first key. The prefill is right; the first token after it is not.",
        detect=detect_cache, figure="cache", **_modern(modern.CachedMultiHeadAttention,
                                                        modern.PositionNeverAdvances),
    ),
    Pitfall(
        "cache_reset", "reset forgets position", "13 · KV cache: the reset forgets the position",
        modern.RESET_LINE, modern.RESET_BUG,
        "`reset_cache()` must start a new sequence at position 0. Emptying the cache but keeping "
        "`ptr_current_pos` makes the next prefill use the mask's rows for positions after the first sequence, "
        "where nothing is hidden: the prompt sees its own future. The first sequence is right, so it only shows "
        "in a second one.",
        detect=detect_cache, figure="cache", **_modern(modern.CachedMultiHeadAttention,
                                                        modern.ResetForgetsPosition),
    ),
    Pitfall(
        "cache_too_little", "cache keeps too little", "14 · KV cache: the cache keeps too little",
        modern.KEEP_LINE, modern.KEEP_BUG,
        "A cache cut to the last 4 tokens (a window, to save memory) under attention that looks at every earlier "
        "token: once more than 4 tokens have gone in — a prefill longer than 4 tokens, or a cached step from the "
        "fifth token on — the queries attend to the last 4 keys only, fewer than the whole sequence has, and the "
        "mask takes those 4 for positions 0 … 3. Sliding-window attention may drop keys — only those its window no "
        "longer sees.",
        detect=detect_cache, figure="cache", **_modern(modern.CachedMultiHeadAttention, modern.CacheKeepsTooLittle),
    ),
)}


@dataclass(frozen=True)
class PitfallResult:
    key: str
    setup: LabSetup
    n: int
    correct: Version
    buggy: Version


def correct_side(key: str) -> str:
    """What the correct version of ``key`` runs and how it is judged: its class and its detector.  Bugs that share
    both (the three KV-cache bugs; the two that raise in the book's code) have the same correct version, so one run of
    it serves them all (:func:`correct_version`)."""
    pitfall = PITFALLS[key]
    builder = "book" if pitfall.correct is build_correct else "lab"
    return f"{builder}:{pitfall.runs.__name__}:{pitfall.detect.__name__}"


def correct_version(key: str, setup: LabSetup, inputs: torch.Tensor) -> Version:
    """The pitfall's detector on its correct module alone — the same for every bug of one :func:`correct_side`.
    Raises :class:`PitfallUnavailableError` (saying why) when the pitfall cannot run at the setup's sizes."""
    pitfall = PITFALLS[key]
    if (why := pitfall.unavailable(setup)) is not None:
        raise PitfallUnavailableError(why)
    return pitfall.detect(pitfall.correct(setup), inputs, setup)


def run_pitfall(key: str, setup: LabSetup, inputs: torch.Tensor, correct: Version | None = None) -> PitfallResult:
    """Build the correct module and the buggy one (same weights), run the pitfall's detector on both; ``correct``:
    the correct one's :func:`correct_version` already run (for another bug of its :func:`correct_side`), so only the
    buggy one runs.  Raises :class:`PitfallUnavailableError` (saying why) when the pitfall cannot run at the setup's
    sizes."""
    pitfall = PITFALLS[key]
    if (why := pitfall.unavailable(setup)) is not None:
        raise PitfallUnavailableError(why)
    correct_module = pitfall.correct(setup)
    buggy = pitfall.build(correct_module, setup)
    if correct is None:
        correct = pitfall.detect(correct_module, inputs, setup)
    return PitfallResult(key, setup, inputs.shape[1], correct, pitfall.detect(buggy, inputs, setup))


def leak_bug(setup: LabSetup, bug: str | None) -> str | None:
    """The bug the leak detector runs: ``bug``, or None — the book's code — when there is none or it cannot run at
    the setup's sizes (:meth:`Pitfall.unavailable`)."""
    return None if bug not in PITFALLS or PITFALLS[bug].unavailable(setup) is not None else bug


def leak_check(setup: LabSetup, inputs: torch.Tensor, j: int, *, causal: bool, bug: str | None = None) -> dict:
    """:func:`leak_report` on the correct module or the ``bug`` version, masked as ``causal`` says (the setting of
    :func:`causal_source`; the lab's own classes always mask the future).  A bug that cannot run at the setup's
    sizes runs the book's code instead (:func:`leak_bug`; the report's ``bug`` says which ran).  A version that
    raises gives ``{"error": text}`` instead."""
    bug = leak_bug(setup, bug)
    pitfall = PITFALLS.get(bug)
    own = pitfall is not None and pitfall.correct is not build_correct  # the lab's own class: no causal switch
    correct = pitfall.correct(setup) if own else build_correct(setup, causal=causal)
    module = correct if bug is None else pitfall.build(correct, setup)
    try:
        return {**leak_report(module, inputs, j, seed=setup.seed), "bug": bug}
    except RuntimeError as exc:
        return {"j": j, "bug": bug, "error": str(exc), "verdict": f"cannot run: RuntimeError: {exc}"}


def causal_source(config: AttentionConfig) -> str:
    """Who decides whether the book's code in the leak detector masks the future: the sidebar's causal toggle, or
    the user's module or the variant that decides it (the sidebar's toggle is greyed out then)."""
    if config.module is not None:
        does = "asks for a causal mask" if config.causal else "does not mask the future"  # asks: its code may leak
        return f"{config.module}, which {does}; the sidebar's toggle does not apply to it"
    if (reason := config.spec.not_applicable("causal")) is not None:
        return f"the variant: {reason.rstrip('.')}"
    return "the sidebar's causal toggle"


def leak_subject(config: AttentionConfig, setup: LabSetup, bug: str | None) -> str:
    """What the leak detector reruns for ``bug`` and whether it masks the future, as the page says it: the causal
    mask of :func:`causal_source`, or on in the lab's own classes, which always mask the future; with no bug, a user's
    module itself (:func:`leak.module_leak`).  A bug that cannot run at these sizes: the book's code
    (:func:`leak_bug`)."""
    if bug not in PITFALLS and config.module is not None:  # no bug: the user's module itself (module_leak)
        return f"{config.module} as every page runs it (its own mask; the sidebar's causal toggle does not apply to it)"
    ran = leak_bug(setup, bug)
    if ran is not None and PITFALLS[ran].correct is not build_correct:
        return f"the code with bug {PITFALLS[ran].title} (causal mask on: the lab's own class always masks the future)"
    code = "the book's code" if ran is None else f"the code with bug {PITFALLS[ran].title}"
    instead = f"bug {PITFALLS[bug].label} cannot run at these sizes; " if ran is None and bug in PITFALLS else ""
    return f"{code} ({instead}causal mask {'on' if config.causal else 'off'}, set by {causal_source(config)})"


def label(key: str) -> str:
    """A pitfall's label, "no bug" for ``"none"`` (the Pitfall lab's switch)."""
    return PITFALLS[key].label if key in PITFALLS else "no bug"


def diff_text(key: str) -> str:
    """The one-line difference as a unified-diff snippet."""
    pitfall = PITFALLS[key]
    return f"- {pitfall.correct_line}\n+ {pitfall.buggy_line}"


def table() -> dict[str, list[str]]:
    """The bugs with the correct line and the buggy line (the page's overview when no bug is on)."""
    return {"bug": [p.title for p in PITFALLS.values()],
            "the book's line": [p.correct_line for p in PITFALLS.values()],
            "the buggy line": [p.buggy_line for p in PITFALLS.values()]}


# --------------------------------------------------------------------------- what the page says the lab runs

def runs(bug: str | None) -> type[nn.Module]:
    """The class ``bug``'s correct code is (its bug is a one-line subclass): the book's MultiHeadAttention for bugs
    1–7 and for no bug, one of the lab's own classes for bugs 8–14."""
    return PITFALLS[bug].runs if bug in PITFALLS else MultiHeadAttention


def shown_in(bug: str | None) -> str:
    """The class ``bug`` runs, as the notes name it: "MultiHeadAttention (3.6.2)", or
    "GroupedQueryAttention (the lab's own class)"."""
    cls = runs(bug)
    return BOOK_CLASS if cls is MultiHeadAttention else f"{cls.__name__} (the lab's own class)"


def setup_for(config: AttentionConfig, n_tokens: int, wanted_heads: int | None, bug: str | None) -> LabSetup:
    """:func:`lab_setup` as the page shows it for ``bug``: its notes name the class the bug runs, and say which K/V
    groups the grouped-query bug uses when they are not the sidebar's."""
    setup = lab_setup(config, n_tokens, wanted_heads, shown_in=shown_in(bug))
    if issubclass(runs(bug), modern.GroupedQueryAttention) and setup.kv_groups_note is not None:
        setup = dataclasses.replace(setup, notes=(*setup.notes, setup.kv_groups_note))
    return setup


def describe(setup: LabSetup, bug: str | None) -> str:
    """The class ``bug`` runs with its real arguments, its head_dim and seed (the page's caption):
    "GroupedQueryAttention(d_in=768, …, num_heads=12, num_kv_groups=4) · head_dim 64 · seed 123"."""
    cls = runs(bug)
    arguments = _arguments(cls, setup)
    listed = ", ".join(f"{name}={value:g}" if name == "dropout" else f"{name}={value}"
                       for name, value in arguments.items())
    return f"{cls.__name__}({listed}) · head_dim {setup.head_dim} · seed {setup.seed}"


# --------------------------------------------------------------------------- on an app's Trace

def run_on_trace(trace: Trace, wanted_heads: int, key: str, correct: Version | None = None) -> PitfallResult:
    """:func:`run_pitfall` with the lab's module for the trace's config, on its first 64 tokens' inputs (``correct``:
    :func:`correct_on_trace` already run for another bug of its :func:`correct_side`)."""
    setup = lab_setup(trace.config, trace.n, wanted_heads)
    return run_pitfall(key, setup, lab_inputs(trace.embeddings["input"]), correct)


def correct_on_trace(trace: Trace, wanted_heads: int, key: str) -> Version:
    """:func:`correct_version` with the lab's module for the trace's config, on its first 64 tokens' inputs."""
    setup = lab_setup(trace.config, trace.n, wanted_heads)
    return correct_version(key, setup, lab_inputs(trace.embeddings["input"]))


def leak_on_trace(trace: Trace, wanted_heads: int, bug: str | None, j: int) -> dict:
    """:func:`leak_check` with the lab's module for the trace's config and its causal setting; with no bug and a user's
    module, that module itself (:func:`leak.module_leak`)."""
    inputs = lab_inputs(trace.embeddings["input"])
    if bug is None and trace.config.module is not None:
        return module_leak(trace.config, inputs, j)
    setup = lab_setup(trace.config, trace.n, wanted_heads)
    return leak_check(setup, inputs, j, causal=trace.config.causal, bug=bug)
