"""Pitfall lab: seven classic attention bugs, each one line away from the book's MultiHeadAttention.

Every buggy version is a small subclass of :class:`LabMultiHeadAttention` (the book's forward, line
for line, with the lines the bugs touch as methods) or, for "model.eval() forgotten", the book's
module left in training mode.  Weights are copied from the correct module (``state_dict``), so the
only difference is the bug.  Each bug's effect is *detected by code* — a verdict computed from
tensors or from the exception raised — and :func:`leak_report` (perturb token j, see which outputs
move) is the causality detector shared by the page's leak section and pitfall 1.

Pure compute and Plotly figure builders: no Streamlit here.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import plotly.graph_objects as go
import torch
from torch import nn

from attnviz import figures, pipeline
from attnviz.attention import MultiHeadAttention, Recorder, record
from attnviz.pipeline import RNG_LOCK, AttentionConfig  # one lock for torch's global RNG, shared with run()

MAX_TOKENS = 64  # the lab runs on the first 64 tokens at most (every pitfall runs two modules)
DEFAULT_DROPOUT = 0.1  # GPT_CONFIG_124M's drop_rate, used when the sidebar's p is 0 or does not apply
NOISE_SCALE = 1.0  # std of the perturbation added to token j (the embeddings are ~N(0, 2))
ROW_SUM_TOLERANCE = 1e-4
LEAK_COLOR, STILL_COLOR, PERTURBED_COLOR, AFTER_COLOR = "#d62728", "#7f7f7f", "#ff7f0e", "#1f77b4"


# --------------------------------------------------------------------------- the correct code, with hooks

class LabMultiHeadAttention(MultiHeadAttention):
    """The book's ``MultiHeadAttention.forward`` line for line; the five lines the pitfalls change are
    methods, so a bug is a one-method subclass.  Bitwise equal to the book's class (tested)."""

    def forward(self, x: torch.Tensor, trace: Recorder | None = None) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, n, d_in)
        keys = self.W_key(x)  # (b, n, d_in) -> (b, n, d_out)
        queries = self.W_query(x)  # (b, n, d_out)
        values = self.W_value(x)  # (b, n, d_out)
        record(trace, "queries", queries)
        record(trace, "keys", keys)
        record(trace, "values", values)

        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, n, d_out) -> (b, n, h, hd)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, n, h, hd)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, n, h, hd)
        keys = keys.transpose(1, 2)  # (b, n, h, hd) -> (b, h, n, hd)
        queries = queries.transpose(1, 2)  # (b, h, n, hd)
        values = values.transpose(1, 2)  # (b, h, n, hd)

        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
        record(trace, "scores", attn_scores)
        attn_scores = self.scale(attn_scores, keys)  # (b, h, n, n)
        record(trace, "scaled", attn_scores, copy=self.causal)  # copy: masked in place next
        if self.causal:
            mask_bool = self.mask_bool(num_tokens)  # (n, n)
            self.mask_scores(attn_scores, mask_bool)  # in place -> (b, h, n, n)
        record(trace, "masked", attn_scores)
        attn_weights = self.softmax(attn_scores)  # (b, h, n, n)
        record(trace, "weights", attn_weights)
        attn_weights = self.dropout(attn_weights)  # (b, h, n, n)
        record(trace, "dropped", attn_weights)

        context_vec = (attn_weights @ values).transpose(1, 2)  # (b, h, n, n) @ (b, h, n, hd) -> (b, n, h, hd)
        record(trace, "context", context_vec.transpose(1, 2))  # per head: (b, h, n, hd)
        context_vec = self.merge_heads(context_vec, b, num_tokens)  # (b, n, h, hd) -> (b, n, d_out)
        context_vec = self.out_proj(context_vec)  # (b, n, d_out) -> (b, n, d_out)
        record(trace, "output", context_vec)
        return context_vec

    def scale(self, attn_scores: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return attn_scores / keys.shape[-1] ** 0.5  # ÷√head_dim -> (b, h, n, n)

    def mask_bool(self, num_tokens: int) -> torch.Tensor:
        return self.mask.bool()[:num_tokens, :num_tokens]  # (ctx, ctx) -> (n, n)

    def mask_scores(self, attn_scores: torch.Tensor, mask_bool: torch.Tensor) -> None:
        attn_scores.masked_fill_(mask_bool, -torch.inf)  # in place -> (b, h, n, n)

    def softmax(self, attn_scores: torch.Tensor) -> torch.Tensor:
        return torch.softmax(attn_scores, dim=-1)  # (b, h, n, n), each row sums to 1

    def merge_heads(self, context_vec: torch.Tensor, b: int, num_tokens: int) -> torch.Tensor:
        return context_vec.contiguous().view(b, num_tokens, self.d_out)  # (b, n, h, hd) -> (b, n, d_out)


# --------------------------------------------------------------------------- the seven bugs

class MaskedFillWithoutUnderscore(LabMultiHeadAttention):
    """(1) ``masked_fill`` returns a masked copy that nobody keeps: the scores are never masked."""

    def mask_scores(self, attn_scores: torch.Tensor, mask_bool: torch.Tensor) -> None:
        attn_scores.masked_fill(mask_bool, -torch.inf)  # BUG: a new (b, h, n, n) tensor, thrown away


class SoftmaxOverWrongDim(LabMultiHeadAttention):
    """(2) softmax over the queries (dim=-2): columns sum to 1, rows don't."""

    def softmax(self, attn_scores: torch.Tensor) -> torch.Tensor:
        return torch.softmax(attn_scores, dim=-2)  # BUG: (b, h, n, n), each *column* sums to 1


class ScaleByDOut(LabMultiHeadAttention):
    """(3) ÷√d_out (the whole width, or a stale ``d_k`` from an earlier cell) instead of ÷√head_dim."""

    def scale(self, attn_scores: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return attn_scores / self.d_out ** 0.5  # BUG: ÷√d_out -> (b, h, n, n)


class MaskIncludesDiagonal(LabMultiHeadAttention):
    """(4) ``triu(..., diagonal=0)`` masks the diagonal too: token 0 can see nothing at all."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, causal: bool = True):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias, causal)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=0))  # BUG


class ViewWithoutContiguous(LabMultiHeadAttention):
    """(5) ``.view`` on the transposed context: its memory is not laid out as (b, n, d_out)."""

    def merge_heads(self, context_vec: torch.Tensor, b: int, num_tokens: int) -> torch.Tensor:
        return context_vec.view(b, num_tokens, self.d_out)  # BUG: no .contiguous() -> (b, n, d_out) or error


class MaskNotSliced(LabMultiHeadAttention):
    """(7) the whole (context_length, context_length) mask on an (n, n) score matrix."""

    def mask_bool(self, num_tokens: int) -> torch.Tensor:
        return self.mask.bool()  # BUG: (ctx, ctx), not sliced to (n, n)


def forgot_eval(module: nn.Module) -> nn.Module:
    """(6) The caller never runs ``module.eval()``: a new module is in training mode, dropout active."""
    return module.train()


# --------------------------------------------------------------------------- the lab's set-up

@dataclass(frozen=True)
class LabSetup:
    """The MultiHeadAttention the lab builds from the sidebar's config (see :func:`lab_setup`)."""

    d_in: int
    d_out: int
    num_heads: int
    context_length: int
    dropout: float
    seed: int
    notes: tuple[str, ...] = field(default=())

    @property
    def head_dim(self) -> int:
        return self.d_out // self.num_heads

    def describe(self) -> str:
        return (f"MultiHeadAttention(d_in={self.d_in}, d_out={self.d_out}, context_length={self.context_length}, "
                f"dropout={self.dropout:g}, num_heads={self.num_heads}) · head_dim {self.head_dim} · "
                f"seed {self.seed}")


def lab_heads(d_out: int, wanted: int) -> int:
    """A head count for a single-head variant: ``wanted`` if it divides d_out and is > 1, else the
    divisor > 1 of d_out nearest to it (1 only when d_out is 1) — several heads let bugs 3 and 5 show."""
    if wanted > 1 and d_out % wanted == 0 and wanted <= pipeline.MAX_HEADS:
        return wanted
    options = [d for d in pipeline.divisors(d_out) if 1 < d <= pipeline.MAX_HEADS]
    if not options:
        return 1
    return min(options, key=lambda d: (abs(d - wanted), d))


def lab_setup(config: AttentionConfig, n_tokens: int, wanted_heads: int | None = None) -> LabSetup:
    """The lab's module for ``config``: the book's MultiHeadAttention with the config's sizes and seed.

    Single-head variants get a valid head count (:func:`lab_heads` of ``wanted_heads``, the sidebar's
    Heads); every choice the user did not make is said in ``notes``.
    """
    notes = []
    if n_tokens > MAX_TOKENS:
        notes.append(f"The text has {n_tokens} tokens; the lab uses the first {MAX_TOKENS} for speed.")
    if config.variant == "mha":
        num_heads = config.num_heads
    elif config.variant == "mha_wrapper":
        num_heads = config.num_heads
        notes.append(f"The bugs are shown in MultiHeadAttention (3.6.2), with the wrapper's d_out {config.d_out} "
                     f"and {num_heads} heads.")
    else:
        num_heads = lab_heads(config.d_out, wanted_heads or 1)
        notes.append(f"{pipeline.VARIANTS[config.variant]} has a single head; the lab uses MultiHeadAttention "
                     f"(3.6.2) with d_out {config.d_out} and {num_heads} heads (head_dim {config.d_out // num_heads})"
                     + (", the only valid count" if num_heads == 1 else "") + ".")
    dropout = config.dropout if config.dropout > 0 else DEFAULT_DROPOUT
    if config.dropout <= 0:
        notes.append(f"Dropout p is {DEFAULT_DROPOUT} (GPT-2's drop_rate): with p = 0, forgetting eval() would be "
                     "harmless.")
    return LabSetup(d_in=config.d_in, d_out=config.d_out, num_heads=num_heads, context_length=config.context_length,
                    dropout=float(dropout), seed=config.seed, notes=tuple(notes))


def lab_inputs(input_embeddings: np.ndarray) -> torch.Tensor:
    """The trace's (n, d_in) input embeddings -> (1, min(n, 64), d_in) float32 tensor."""
    values = np.asarray(input_embeddings, dtype=np.float32)[:MAX_TOKENS]  # (n, d_in) -> (≤64, d_in)
    return torch.from_numpy(values.copy()).unsqueeze(0)  # (1, n, d_in)


_HELD = threading.local()


@contextlib.contextmanager
def seeded_rng(seed: int) -> Iterator[None]:
    """Hold the pipeline's RNG lock (re-entrantly) and seed torch's global RNG; restored afterwards."""
    depth = getattr(_HELD, "depth", 0)
    if depth == 0:
        RNG_LOCK.acquire()
    _HELD.depth = depth + 1
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield
    finally:
        _HELD.depth = depth
        if depth == 0:
            RNG_LOCK.release()


def build_correct(setup: LabSetup, causal: bool = True) -> MultiHeadAttention:
    """The book's MultiHeadAttention, seeded like the pipeline (same weights as the trace's ``mha``), eval mode."""
    with seeded_rng(setup.seed):
        module = MultiHeadAttention(setup.d_in, setup.d_out, setup.context_length, setup.dropout, setup.num_heads,
                                    causal=causal)
    return module.eval()


def copy_weights(source: nn.Module, target: nn.Module) -> nn.Module:
    """``target`` with ``source``'s parameters (the mask buffer is each class's own: bug 4 lives there)."""
    state = {name: value for name, value in source.state_dict().items() if name != "mask"}
    missing, unexpected = target.load_state_dict(state, strict=False)
    assert missing == ["mask"] and not unexpected, (missing, unexpected)
    return target


# --------------------------------------------------------------------------- running a version

@dataclass(frozen=True)
class Observation:
    """One forward pass: the recorded maps of every head (h, n, n), the output (n, d_out), or the error."""

    maps: dict[str, np.ndarray]
    output: np.ndarray | None
    error: str | None


def observe(module: nn.Module, inputs: torch.Tensor, seed: int = 0) -> Observation:
    """Run ``module`` once with a Recorder (dropout draws from ``seed``); catch a RuntimeError's text."""
    recorder = Recorder()
    try:
        with seeded_rng(seed), torch.no_grad():
            output = module(inputs, recorder)  # (1, n, d_in) -> (1, n, d_out)
    except RuntimeError as exc:
        return Observation(maps={}, output=None, error=str(exc))
    maps = {name: recorder.steps[name][0].float().numpy().copy()
            for name in ("scores", "scaled", "masked", "weights", "dropped")}  # (h, n, n) each
    return Observation(maps=maps, output=output[0].float().numpy().copy(), error=None)


def _forward(module: nn.Module, inputs: torch.Tensor, seed: int) -> torch.Tensor:
    with seeded_rng(seed), torch.no_grad():
        return module(inputs)  # (1, n, d_in) -> (1, n, d_out)


def _as_batch(inputs) -> torch.Tensor:
    tensor = torch.as_tensor(np.array(inputs, dtype=np.float32) if not torch.is_tensor(inputs) else inputs)
    return tensor if tensor.dim() == 3 else tensor.unsqueeze(0)  # (n, d_in) -> (1, n, d_in)


def positions_text(positions: list[int], limit: int = 24) -> str:
    shown = ", ".join(str(p) for p in positions[:limit])
    return shown + (f", … ({len(positions)} positions)" if len(positions) > limit else "")


# --------------------------------------------------------------------------- the causality leak detector

def leak_report(module_or_factory: nn.Module | Callable[[], nn.Module], inputs, j: int, *, seed: int = 123,
                scale: float = NOISE_SCALE) -> dict:
    """Perturb token ``j``'s input embedding (seeded Gaussian noise) and measure every output's move.

    Returns ``delta`` (n,): max |Δ output| over the features at each position; ``leaked``: positions
    before j whose output changed at all (``delta != 0`` — a causal model moves them by exactly 0);
    ``nan_positions``: positions whose output is NaN (they cannot be compared); ``verdict``: "no leak"
    or "leaks into positions 0, 1, …".  Both runs start from the same RNG state, so active dropout
    draws the same masks and only the perturbation differs.  A module that raises, raises here.
    """
    module = module_or_factory if isinstance(module_or_factory, nn.Module) else module_or_factory()
    batch = _as_batch(inputs)  # (1, n, d_in)
    n = batch.shape[1]
    if not 0 <= j < n:
        raise ValueError(f"j must be a position in 0 … {n - 1}, got {j}.")
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn(batch.shape[-1], generator=generator) * scale  # (d_in,)
    perturbed = batch.clone()  # (1, n, d_in)
    perturbed[0, j] += noise  # only token j changes
    before = _forward(module, batch, seed)  # (1, n, d_out)
    after = _forward(module, perturbed, seed)  # (1, n, d_out)
    delta = (after - before).abs().amax(dim=-1)[0].double().numpy()  # (1, n, d_out) -> (n,)
    nan_positions = [p for p in range(n) if math.isnan(delta[p])]
    leaked = [p for p in range(j) if not math.isnan(delta[p]) and delta[p] != 0]  # exactly 0, not allclose
    nan_before = [p for p in nan_positions if p < j]
    if leaked:
        verdict = f"leaks into positions {positions_text(leaked)}"
    elif j == 0:
        verdict = "no leak (nothing comes before position 0: pick a later token to test)"
    elif nan_before:
        verdict = "no leak among the positions that can be compared"
    else:
        verdict = "no leak"
    if nan_positions:
        verdict += f"; the output is NaN at positions {positions_text(nan_positions)}, which cannot be compared"
    return {"j": j, "delta": delta, "leaked": leaked, "nan_positions": nan_positions, "verdict": verdict}


# --------------------------------------------------------------------------- detectors

@dataclass(frozen=True)
class Version:
    """One version (correct or buggy) of one pitfall: what the detector found, and what to draw."""

    fired: bool  # the detector found the bug's effect
    verdict: str
    observation: Observation
    details: dict = field(default_factory=dict)  # the detector's numbers (row sums, entropy, …)


def _needs_output(observation: Observation) -> Version | None:
    if observation.error is not None:
        return Version(True, f"raised RuntimeError: {observation.error}", observation)
    return None


def detect_leak(module, inputs, setup: LabSetup) -> Version:
    """(1) Perturb the last token: a causal model leaves every earlier output exactly unchanged."""
    observation = observe(module, inputs)
    if (failed := _needs_output(observation)) is not None:
        return failed
    n = inputs.shape[1]
    if n < 2:
        return Version(False, "one token: nothing comes before it, so a leak cannot show (type more text)",
                       observation)
    report = leak_report(module, inputs, n - 1, seed=setup.seed)
    if report["leaked"]:
        verdict = (f"the future leaks: perturbing the last token (position {n - 1}) moves the outputs at positions "
                   f"{positions_text(report['leaked'])}")
    else:
        verdict = f"no leak: perturbing the last token (position {n - 1}) leaves positions 0 … {n - 2} exactly unchanged"
    return Version(bool(report["leaked"]), verdict, observation, {"leak": report})


def detect_row_sums(module, inputs, setup: LabSetup) -> Version:
    """(2) Every row of the weights must sum to 1 (rows = queries)."""
    observation = observe(module, inputs)
    if (failed := _needs_output(observation)) is not None:
        return failed
    weights = observation.maps["weights"].astype(np.float64)  # (h, n, n)
    row_sums, column_sums = weights.sum(axis=-1), weights.sum(axis=-2)  # (h, n) each
    worst = float(np.abs(row_sums - 1).max())
    columns_one = bool(np.allclose(column_sums, 1, atol=ROW_SUM_TOLERANCE))
    fired = worst > ROW_SUM_TOLERANCE
    if fired:
        verdict = (f"rows do not sum to 1: row sums range {row_sums.min():.3f} … {row_sums.max():.3f}"
                   + (" — it is the columns that sum to 1 (softmax ran over the queries)" if columns_one else ""))
    else:
        verdict = f"every row sums to 1 (largest deviation {worst:.1e})"
    return Version(fired, verdict, observation, {"row_sums": row_sums.mean(axis=0), "column_sums": column_sums.mean(0)})


def detect_scale(module, inputs, setup: LabSetup) -> Version:
    """(3) The recorded scaled ÷ scores must be 1/√head_dim; report the weights' entropy too."""
    observation = observe(module, inputs)
    if (failed := _needs_output(observation)) is not None:
        return failed
    scores = observation.maps["scores"].astype(np.float64)  # (h, n, n)
    scaled = observation.maps["scaled"].astype(np.float64)  # (h, n, n)
    usable = np.abs(scores) > 1e-6
    ratio = float(np.median(scaled[usable] / scores[usable])) if usable.any() else 1 / math.sqrt(setup.head_dim)
    expected = 1 / math.sqrt(setup.head_dim)
    entropy = figures.row_entropy(observation.maps["weights"]).mean(axis=0)  # (h, n) -> (n,)
    fired = not math.isclose(ratio, expected, rel_tol=1e-4)
    divisor = 1 / ratio**2
    said = f"scaled ÷ scores = {ratio:.4f} = 1/√{divisor:.4g}"
    if fired:
        verdict = (f"wrong scale: {said}, but head_dim is {setup.head_dim} (1/√{setup.head_dim} = {expected:.4f}); "
                   f"mean entropy of the weights {entropy.mean():.3f} nats")
    elif setup.num_heads == 1:
        verdict = (f"{said} = 1/√head_dim — with 1 head d_out = head_dim, so this bug has no effect here; "
                   f"mean entropy {entropy.mean():.3f} nats")
    else:
        verdict = f"{said} = 1/√head_dim as it should; mean entropy of the weights {entropy.mean():.3f} nats"
    return Version(fired, verdict, observation, {"ratio": ratio, "entropy": entropy})


def detect_nan(module, inputs, setup: LabSetup) -> Version:
    """(4) A query with every key masked gets softmax(all −∞) = 0/0 = NaN."""
    observation = observe(module, inputs)
    if (failed := _needs_output(observation)) is not None:
        return failed
    nan_rows = np.flatnonzero(np.isnan(observation.maps["weights"]).any(axis=(0, 2))).tolist()
    nan_outputs = np.flatnonzero(np.isnan(observation.output).any(axis=-1)).tolist()
    fired = bool(nan_rows or nan_outputs)
    if fired:
        verdict = (f"NaN in the weights of query rows {positions_text(nan_rows)} (every key of the row masked: "
                   f"softmax of all −∞ is 0/0) and in the outputs at positions {positions_text(nan_outputs)}")
    else:
        verdict = "no NaN: every query can see at least itself"
    return Version(fired, verdict, observation, {"nan_rows": nan_rows, "nan_outputs": nan_outputs})


def detect_error(module, inputs, setup: LabSetup) -> Version:
    """(5), (7) Run it: the bug is the RuntimeError PyTorch raises (its real text)."""
    observation = observe(module, inputs)
    if observation.error is not None:
        return Version(True, f"RuntimeError: {observation.error}", observation)
    return Version(False, f"runs: output shape (1, {observation.output.shape[0]}, {observation.output.shape[1]})",
                   observation)


def detect_nondeterminism(module, inputs, setup: LabSetup) -> Version:
    """(6) The same input twice: an eval-mode module gives identical outputs, a training one does not."""
    with seeded_rng(setup.seed):  # one seed, two consecutive calls: dropout draws two different masks
        first = observe_unseeded(module, inputs)
        second = observe_unseeded(module, inputs)
    if (failed := _needs_output(first)) is not None:
        return failed
    call_delta = np.abs(first.output - second.output).max(axis=-1)  # (n, d_out) -> (n,)
    fired = bool((call_delta != 0).any())
    mode = f"module.training is {module.training}"
    if fired:
        verdict = (f"two calls on the same input differ by up to {call_delta.max():.4g} ({mode}: dropout "
                   f"p = {setup.dropout:g} zeroes different weights each call)")
    else:
        verdict = f"two calls on the same input are identical ({mode})"
    return Version(fired, verdict, first, {"call_delta": call_delta, "second": second})


def observe_unseeded(module: nn.Module, inputs: torch.Tensor) -> Observation:
    """Like :func:`observe`, continuing the current RNG stream (call inside :func:`seeded_rng`)."""
    recorder = Recorder()
    try:
        with torch.no_grad():
            output = module(inputs, recorder)  # (1, n, d_in) -> (1, n, d_out)
    except RuntimeError as exc:
        return Observation(maps={}, output=None, error=str(exc))
    maps = {name: recorder.steps[name][0].float().numpy().copy() for name in ("weights", "dropped", "masked")}
    return Observation(maps=maps, output=output[0].float().numpy().copy(), error=None)


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


def _subclass(cls: type[MultiHeadAttention]) -> Callable[[MultiHeadAttention, LabSetup], nn.Module]:
    def build(correct: MultiHeadAttention, setup: LabSetup) -> nn.Module:
        with seeded_rng(setup.seed):  # the constructor draws weights; they are replaced right after
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
        _subclass(MaskedFillWithoutUnderscore), detect_leak, "weights",
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
        _subclass(MaskIncludesDiagonal), detect_nan, "weights",
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
        _subclass(MaskNotSliced), detect_error, "error",
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


def diff_text(key: str) -> str:
    """The one-line difference as a unified-diff snippet."""
    pitfall = PITFALLS[key]
    return f"- {pitfall.correct_line}\n+ {pitfall.buggy_line}"


# --------------------------------------------------------------------------- figures

def weights_figure(observation: Observation, tokens, *, head: int = 0, stage: str = "weights",
                   dropout: float = 0.0) -> go.Figure:
    """One head's weights; cells whose score really was −∞ (masked) are grey — what is drawn is what the
    code did, so an ineffective mask shows as coloured cells above the diagonal.  No title (pages say
    which version it is): at this size a title would collide with the key-token axis on top."""
    values = observation.maps[stage][head].astype(np.float32).copy()  # (n, n)
    values[np.isneginf(observation.maps["masked"][head])] = np.nan  # masked by the code -> grey gap
    fig = figures.attention_heatmap(values, tokens[: values.shape[0]], stage, causal=False, dropout=dropout,
                                    height=420)
    nan_rows, nan_cols = np.nonzero(np.isnan(observation.maps[stage][head]))  # computed NaN, not a masked gap
    if nan_rows.size:
        labels = figures.position_labels(tokens[: values.shape[0]])
        fig.add_trace(go.Scatter(x=[labels[c] for c in nan_cols], y=[labels[r] for r in nan_rows], mode="text",
                                 text=["NaN"] * nan_rows.size, textfont={"color": LEAK_COLOR, "size": 11},
                                 name="NaN", showlegend=False, hoverinfo="skip"))
    fig.update_layout(title={"text": ""}, margin={"t": 20})
    return fig


def _bars(tokens, series: list[tuple[str, np.ndarray, str]], title: str, y_title: str,
          reference: float | None = None) -> go.Figure:
    labels = figures.position_labels(tokens)
    fig = go.Figure([go.Bar(x=labels[: len(values)], y=values, name=name, marker_color=color,
                            text=["0" if value == 0 else "" for value in values], textposition="outside")
                     for name, values, color in series])  # exact zeros would otherwise be invisible
    if reference is not None:
        fig.add_hline(y=reference, line_dash="dot", line_color="black")
    fig.update_layout(title={"text": title, "font": {"size": 13}}, barmode="group", height=320,
                      margin={"l": 10, "r": 10, "t": 50, "b": 10}, legend={"orientation": "h", "y": -0.35},
                      yaxis_title=y_title)
    fig.update_xaxes(type="category", tickangle=-60, tickmode="array", tickvals=labels[: len(series[0][1])],
                     ticktext=[figures.safe_label(t) for t in tokens[: len(series[0][1])]])
    return fig


def row_sums_figure(result: PitfallResult, tokens) -> go.Figure:
    """(2) Row sums of the weights (mean over heads): 1 for the correct code, not for the bug."""
    return _bars(tokens, [("correct: row sums", result.correct.details["row_sums"], AFTER_COLOR),
                          ("bug: row sums", result.buggy.details["row_sums"], LEAK_COLOR),
                          ("bug: column sums", result.buggy.details["column_sums"], STILL_COLOR)],
                 "sum of each query's weights (mean over heads); dotted line = 1", "sum", reference=1.0)


def entropy_figure(result: PitfallResult, tokens) -> go.Figure:
    """(3) Entropy of each query's weights (mean over heads), ÷√head_dim vs ÷√d_out."""
    setup = result.setup
    return _bars(tokens, [(f"÷√head_dim = ÷√{setup.head_dim}", result.correct.details["entropy"], AFTER_COLOR),
                          (f"÷√d_out = ÷√{setup.d_out}", result.buggy.details["entropy"], LEAK_COLOR)],
                 "entropy of each query's weights (nats, mean over heads; higher = flatter)", "nats")


def call_difference_figure(result: PitfallResult, tokens) -> go.Figure:
    """(6) max |output of call 1 − output of call 2| per position."""
    return _bars(tokens, [("correct (eval mode)", result.correct.details["call_delta"], AFTER_COLOR),
                          ("bug (training mode)", result.buggy.details["call_delta"], LEAK_COLOR)],
                 "same input, two calls: max |Δ output| per position (0 = identical)", "max |Δ output|")


def leak_figure(report: dict, tokens) -> go.Figure:
    """|Δ output| per position after perturbing token j: red = moved before j (a leak), grey = exactly 0."""
    delta, j = report["delta"], report["j"]
    leaked = set(report["leaked"])
    labels = figures.position_labels(tokens)[: len(delta)]
    colors = [PERTURBED_COLOR if p == j else LEAK_COLOR if p in leaked else STILL_COLOR if p < j else AFTER_COLOR
              for p in range(len(delta))]
    text = ["NaN" if math.isnan(d) else "0" if d == 0 else f"{d:.2g}" for d in delta]
    shown = np.where(np.isnan(delta), 0.0, delta)
    fig = go.Figure(go.Bar(x=labels, y=shown, marker_color=colors, text=text, textposition="outside",
                           cliponaxis=False, hovertemplate="%{x}<br>max |Δ output| %{text}<extra></extra>"))
    fig.update_layout(
        title={"text": f"perturb token {j} (orange): max |Δ output| at every position — before it, grey = exactly 0, "
                       "red = moved (a leak)", "font": {"size": 13}},
        height=340, margin={"l": 10, "r": 10, "t": 60, "b": 10}, yaxis_title="max |Δ output|", showlegend=False,
    )
    fig.update_xaxes(type="category", tickangle=-60, tickmode="array", tickvals=labels,
                     ticktext=[figures.safe_label(t) for t in tokens[: len(delta)]])
    return fig
