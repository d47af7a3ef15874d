"""Pitfall lab, the catalogue: the seven pitfalls (texts, how to build the bug, which detector and figure),
and running one of them, or the leak detector, on the correct and the buggy module (of an app's Trace).

Pure torch: no figures, no Streamlit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from attnviz.attention import MultiHeadAttention
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
    detect_error,
    detect_leak,
    detect_nan,
    detect_nondeterminism,
    detect_row_sums,
    detect_scale,
)
from attnviz.labs.pitfalls.leak import leak_report
from attnviz.labs.pitfalls.workbench import LabSetup, build_correct, copy_weights, lab_inputs, lab_setup
from attnviz.rng import seeded
from attnviz.trace import Trace

# --------------------------------------------------------------------------- the catalogue

@dataclass(frozen=True)
class Pitfall:
    key: str
    label: str  # short, for the selector
    title: str
    correct_line: str
    buggy_line: str
    explanation: str
    build: Callable[[MultiHeadAttention, LabSetup], nn.Module]  # correct module -> buggy module
    detect: Callable[[nn.Module, torch.Tensor, LabSetup], Version]
    figure: str  # "weights", "row_sums", "entropy", "dropout", "error"
    in_mask: bool = False  # the bug lives in the causal mask (the lab keeps the mask on for it)

    @property
    def stage(self) -> str:
        """The stage the page draws for both versions: ``dropped`` for the dropout bug, else ``weights``."""
        return "dropped" if self.figure == "dropout" else "weights"

    @property
    def draws_weights(self) -> bool:
        """False when the bug raises: there are no weights to draw, only PyTorch's error."""
        return self.figure != "error"


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
)}


@dataclass(frozen=True)
class PitfallResult:
    key: str
    setup: LabSetup
    n: int
    correct: Version
    buggy: Version


def run_pitfall(key: str, setup: LabSetup, inputs: torch.Tensor) -> PitfallResult:
    """Build the correct module and the buggy one (same weights), run the pitfall's detector on both."""
    pitfall = PITFALLS[key]
    correct = build_correct(setup)
    buggy = pitfall.build(correct, setup)
    return PitfallResult(key, setup, inputs.shape[1], pitfall.detect(correct, inputs, setup),
                         pitfall.detect(buggy, inputs, setup))


def leak_check(setup: LabSetup, inputs: torch.Tensor, j: int, *, causal: bool, bug: str | None = None) -> dict:
    """:func:`leak_report` on the correct module or the ``bug`` version, with the sidebar's causal setting.
    A version that raises gives ``{"error": text}`` instead."""
    correct = build_correct(setup, causal=causal)
    module = correct if bug is None else PITFALLS[bug].build(correct, setup)
    try:
        return leak_report(module, inputs, j, seed=setup.seed)
    except RuntimeError as exc:
        return {"j": j, "error": str(exc), "verdict": f"cannot run: RuntimeError: {exc}"}


def label(key: str) -> str:
    """A pitfall's label, "no bug" for ``"none"`` (the Pitfall lab's switch)."""
    return PITFALLS[key].label if key in PITFALLS else "no bug"


def diff_text(key: str) -> str:
    """The one-line difference as a unified-diff snippet."""
    pitfall = PITFALLS[key]
    return f"- {pitfall.correct_line}\n+ {pitfall.buggy_line}"


def table() -> dict[str, list[str]]:
    """The seven bugs with the book's line and the buggy line (the page's overview when no bug is on)."""
    return {"bug": [p.title for p in PITFALLS.values()],
            "the book's line": [p.correct_line for p in PITFALLS.values()],
            "the buggy line": [p.buggy_line for p in PITFALLS.values()]}


# --------------------------------------------------------------------------- on an app's Trace

def run_on_trace(trace: Trace, wanted_heads: int, key: str) -> PitfallResult:
    """:func:`run_pitfall` with the lab's module for the trace's config, on its first 64 tokens' inputs."""
    setup = lab_setup(trace.config, trace.n, wanted_heads)
    return run_pitfall(key, setup, lab_inputs(trace.embeddings["input"]))


def leak_on_trace(trace: Trace, wanted_heads: int, bug: str | None, j: int) -> dict:
    """:func:`leak_check` with the lab's module for the trace's config and its causal setting."""
    setup = lab_setup(trace.config, trace.n, wanted_heads)
    return leak_check(setup, lab_inputs(trace.embeddings["input"]), j, causal=trace.config.causal, bug=bug)
