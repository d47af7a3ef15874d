"""Pitfall lab, the detectors: run a version once and compute a verdict from its tensors (or its error).

Pure torch + NumPy: no figures, no Streamlit.
"""

from __future__ import annotations

import copy
import inspect
import math
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import nn

from attnviz import checks, stats, tracing
from attnviz.attention import MAP_STAGES, Recorder
from attnviz.kv_cache_rule import kv_cache, kv_prefill, kv_steps
from attnviz.labs.pitfalls.leak import leak_report
from attnviz.labs.pitfalls.workbench import LabSetup, forward_rng
from attnviz.words import amount, listed, plural, window_sees

# --------------------------------------------------------------------------- running a version

@dataclass(frozen=True)
class Observation:
    """One forward pass: the recorded maps of every head (h, n, n), the output (n, d_out), or the error."""

    maps: dict[str, np.ndarray]
    output: np.ndarray | None
    error: str | None


def observe(module: nn.Module, inputs: torch.Tensor, seed: int | None = 0) -> Observation:
    """Run ``module`` once with a Recorder (the book's classes) or traced from the outside (a plain module,
    :func:`attnviz.tracing.record`); catch a RuntimeError's text.  Dropout draws from ``seed``, or with
    ``seed=None`` continues the current RNG stream (inside a seeded section)."""
    parameters = inspect.signature(module.forward).parameters
    if len(parameters) < 2 or "use_cache" in parameters:  # no recorder argument: a plain module
        return observe_traced(module, inputs, seed)
    recorder = Recorder()
    try:
        with forward_rng(module, seed), torch.no_grad():
            output = module(inputs, recorder)  # (1, n, d_in) -> (1, n, d_out)
    except RuntimeError as exc:
        return Observation(maps={}, output=None, error=str(exc))
    maps = {name: recorder.steps[name][0].float().numpy().copy() for name in MAP_STAGES}  # (h, n, n) each
    return Observation(maps=maps, output=output[0].float().numpy().copy(), error=None)


def observe_traced(module: nn.Module, inputs: torch.Tensor, seed: int | None = 0) -> Observation:
    """:func:`observe` for a plain module: its stages as :mod:`attnviz.tracing` finds them."""
    try:
        with forward_rng(module, seed):
            recording = tracing.record(module, inputs)
    except tracing.TraceError as exc:
        return Observation(maps={}, output=None, error=str(exc))
    attention = tracing.combine(recording.attentions)
    found = {name: getattr(attention, name) for name in MAP_STAGES}
    found["scaled"] = found["scaled"] if found["scaled"] is not None else found["masked"]
    found["scores"] = found["scores"] if found["scores"] is not None else found["scaled"]
    maps = {name: value[0].float().numpy().copy() for name, value in found.items()}  # (h, n, n) each
    return Observation(maps=maps, output=recording.output[0].float().numpy().copy(), error=None)


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


def _outputs_at(positions: list[int]) -> str:
    """"the output at position 3", "the outputs at positions 0, 1, 2"."""
    return f"the {plural(len(positions), 'output')} at {listed('position', positions)}"


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
        verdict = (f"the future leaks: perturbing the last token (position {n - 1}) moves "
                   f"{_outputs_at(report['leaked'])}")
    else:
        earlier = listed("position", range(n - 1)) if n <= 3 else f"positions 0 … {n - 2}"  # "positions 0, 1"
        verdict = f"no leak: perturbing the last token (position {n - 1}) leaves {earlier} exactly unchanged"
    return Version(bool(report["leaked"]), verdict, observation, {"leak": report})


def detect_row_sums(module, inputs, setup: LabSetup) -> Version:
    """(2) Every row of the weights must sum to 1 (rows = queries)."""
    observation = observe(module, inputs)
    if (failed := _needs_output(observation)) is not None:
        return failed
    weights = observation.maps["weights"].astype(np.float64)  # (h, n, n)
    row_sums, column_sums = weights.sum(axis=-1), weights.sum(axis=-2)  # (h, n) each
    worst = float(np.abs(row_sums - 1).max())
    columns_one = bool(checks.sums_to_one(torch.as_tensor(column_sums)).all())
    fired = not bool(checks.sums_to_one(torch.as_tensor(row_sums)).all())  # the check's rule: NaN is not 1
    nan = np.isnan(row_sums)  # (h, n)
    if fired and nan.all():
        verdict = "rows do not sum to 1: every row sum is NaN"
    elif fired:
        verdict = (f"rows do not sum to 1: row sums range {np.nanmin(row_sums):.3f} … {np.nanmax(row_sums):.3f}"
                   + (", and some are NaN" if nan.any() else "")
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
    entropy = stats.row_entropy(observation.maps["weights"]).mean(axis=0)  # (h, n) -> (n,)
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
        found = []
        if nan_rows:
            found.append(f"the weights of {listed('query row', nan_rows)} (every key of "
                         f"{'the row' if len(nan_rows) == 1 else 'those rows'} masked: softmax of all −∞ is 0/0)")
        if nan_outputs:
            found.append(_outputs_at(nan_outputs))
        verdict = "NaN in " + " and in ".join(found)
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
    with forward_rng(module, setup.seed):  # one seed, two consecutive calls: dropout draws two different masks
        first = observe(module, inputs, seed=None)
        second = observe(module, inputs, seed=None)
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


def detect_kv_groups(module, inputs, setup: LabSetup) -> Version:
    """(8) Which K/V group each query head attends with: head h must use group h // group_size.  With one K/V group
    every head uses it: nothing to read (one head on one token gives a (1, 1) product no tracing can tell apart)."""
    observation = observe(module, inputs)
    if (failed := _needs_output(observation)) is not None:
        return failed
    if module.num_kv_groups == 1:  # every head uses the one group
        groups = [0] * module.num_heads
    else:
        with torch.no_grad():
            recording = tracing.record(module, inputs)
            used = tracing.combine(recording.attentions).keys[0]  # (h, n, hd): each head's keys, as used
            b, n, _ = inputs.shape
            own = module.W_key(inputs).view(b, n, module.num_kv_groups, module.head_dim)  # (b, n, g, hd)
            own = own.transpose(1, 2)[0]  # (g, n, hd)
        groups = [int((own - head).abs().amax(dim=(-2, -1)).argmin()) for head in used]  # the group each head uses
    wrong = [h for h, g in enumerate(groups) if g != h // module.group_size]
    pairing = ", ".join(f"{h}→{g}" for h, g in enumerate(groups))
    if wrong:
        h = wrong[0]
        verdict = (f"query head {h} attends with K/V group {groups[h]}, not {h // module.group_size} "
                   f"(head // group_size): heads → groups {pairing} — tiled, not grouped")
    elif module.num_kv_groups in (1, module.num_heads):
        verdict = (f"heads → groups {pairing}: with {amount(module.num_kv_groups, 'K/V group')} for "
                   f"{amount(module.num_heads, 'head')}, repeat and repeat_interleave give the same pairing — "
                   "no effect here")
    else:
        verdict = f"heads → groups {pairing}: each group serves {module.group_size} neighbouring heads, as it should"
    return Version(bool(wrong), verdict, observation, {"groups": groups})


def detect_window(module, inputs, setup: LabSetup) -> Version:
    """(9) The hidden cells must be the future and the keys W or more behind: a window of exactly W.

    The correct window of W hides an earlier key only when the text has more than W tokens (key 0 is n − 1 behind
    the last query): with n ≤ W neither version hides one, and the bug cannot show.  From n = W + 1 on, the
    hidden cells are compared with the correct window's, so W = n − 1 (where the bug hides nothing but the
    future, no window at all) is caught too."""
    observation = observe(module, inputs)
    if (failed := _needs_output(observation)) is not None:
        return failed
    window, n = module.sliding_window_size, inputs.shape[1]
    if n - 1 < window:  # the correct window hides no earlier key: key 0 is only n − 1 behind the last query
        verdict = (f"{amount(n, 'token')}: no key is {window} or more behind a query, so a window of {window} "
                   "hides nothing here")
        return Version(False, verdict, observation, {"window": None})
    attention = tracing.combine(tracing.record(module, inputs).attentions)
    found = checks.sliding_window(attention)
    if found == window:
        verdict = f"query i sees {window_sees(window)}: a window of exactly {window}"
        return Version(False, verdict, observation, {"window": found})
    should = f"key i − {window} should be hidden: diff >= W, not diff > W"
    hidden = attention.masked_cells().reshape(-1, n, n)  # (b·h, n, n)
    diff = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # (n, n): how far key j is behind query i
    if found is not None:
        verdict = (f"query i sees {window_sees(found)}: a window of {found}, but sliding_window_size is {window}"
                   + (f" ({should})" if found == window + 1 else ""))
    elif torch.equal(hidden, (diff < 0).expand_as(hidden)):  # only the future hidden: W = n − 1 with diff > W
        verdict = (f"only the future is hidden: query {n - 1} sees key {n - 1 - window}, {window} behind, but "
                   f"sliding_window_size is {window} ({should})")
    else:
        verdict = f"the hidden cells are not a window of {window} (sliding_window_size is {window})"
    return Version(True, verdict, observation, {"window": found})


def detect_rotary(module, inputs, setup: LabSetup) -> Version:
    """(10), (11) One token repeated at every position: with rotary on q and k, a score depends only on the
    offset i − j, and every output is the same (the values carry no position)."""
    repeated = inputs[:, :1].expand(inputs.shape).contiguous()  # (1, n, d_in): token 0 everywhere
    observation = observe(module, repeated)
    if (failed := _needs_output(observation)) is not None:
        return failed
    scores = observation.maps["scores"].astype(np.float64)  # (h, n, n)
    n = scores.shape[-1]
    rows, cols = np.tril_indices(n)  # the visible cells (j ≤ i)
    departure = np.abs(scores[:, rows, cols] - scores[:, rows - cols, 0]).max(axis=0)  # vs the diagonal's first cell
    score_spread = np.zeros(n)  # (n,): each row's largest departure from its diagonals
    np.maximum.at(score_spread, rows, departure)
    output_spread = np.abs(observation.output - observation.output[:1]).max(axis=-1)  # (n,)
    scale = max(1.0, float(np.abs(scores).max()))
    if score_spread.max() > 1e-4 * scale:
        verdict = (f"one token repeated: the score of offset i − j changes along its diagonal by up to "
                   f"{score_spread.max():.3g}, so it depends on where the query is — the keys are not rotated")
    elif output_spread.max() > 1e-4:
        verdict = (f"one token repeated: the outputs differ between positions by up to {output_spread.max():.3g} — "
                   "the values carry a position (rotary belongs on q and k only)")
    else:
        verdict = ("one token repeated: every score depends only on the offset i − j, and every output is the same "
                   "(the values carry no position)")
    fired = bool(score_spread.max() > 1e-4 * scale or output_spread.max() > 1e-4)
    return Version(fired, verdict, observation, {"score_spread": score_spread, "output_spread": output_spread})


def detect_cache(module, inputs, setup: LabSetup) -> Version:
    """(12)–(14) :func:`attnviz.kv_cache_rule.kv_cache` on two sequences (the text, then the text backwards), and the
    largest |cached − uncached| output of every cached forward (``details["steps"]``: (:attr:`CacheStep.label`,
    difference) pairs, the chart's bars)."""
    observation = observe(module, inputs)
    if (failed := _needs_output(observation)) is not None:
        return failed
    sequences = torch.cat([inputs, inputs.flip(1)])  # (2, n, d_in): two different sequences
    steps = cache_steps(copy.deepcopy(module), sequences)  # the module as it is: a buggy reset keeps state
    check = kv_cache(module, sequences)
    verdict = check.evidence
    if check.status == "fail" and (past := _past_the_context(module, steps)):
        verdict = past  # PyTorch's shape error from a mask slice that came out empty, said in words
    return Version(check.status == "fail", verdict, observation,
                   {"steps": [(step.label, step.difference) for step in steps]})


@dataclass(frozen=True)
class CacheStep:
    """One cached forward of :func:`cache_steps`: sequence ``sequence``'s tokens ``start`` … ``stop`` − 1, the module's
    ``ptr_current_pos`` before it (None if it has none), and the largest |cached − uncached| output (NaN: it raised)."""

    sequence: int  # 1 or 2, as the verdicts number them
    start: int
    stop: int
    position: int | None
    difference: float

    @property
    def label(self) -> str:
        """The step as the chart labels it: "1: 0…4" (sequence 1's tokens 0 … 4), "2: 5" (sequence 2's token 5) —
        the sequences numbered as every verdict numbers them (:func:`attnviz.kv_cache_rule.kv_cache`'s words)."""
        tokens = f"{self.start}" if self.stop - self.start == 1 and self.start > 0 else f"{self.start}…{self.stop - 1}"
        return f"{self.sequence}: {tokens}"


def _past_the_context(module, steps: list[CacheStep]) -> str | None:
    """Why the first cached forward that raised (its difference NaN) could not run, in words, when it is that its
    ``ptr_current_pos`` puts its queries past the mask's rows (the context length); None otherwise."""
    raised = next((step for step in steps if math.isnan(step.difference)), None)
    mask = getattr(module, "mask", None)
    if raised is None or raised.position is None or not isinstance(mask, torch.Tensor):
        return None
    sequence, start, stop, position = raised.sequence, raised.start, raised.stop, raised.position
    context = mask.shape[0]
    if position + stop - start <= context:
        return None
    rows = f"row {position}" if stop - start == 1 else f"rows {position} … {position + stop - start - 1}"
    step = (f"its prefill (tokens 0 … {stop - 1})" if start == 0 else
            f"token {start}" if stop - start == 1 else f"tokens {start} … {stop - 1}")
    cannot = (f"the mask has {amount(context, 'row')} (the context length), no {rows}, so the "
              "forward cannot run")
    if start == 0 and position > 0:
        return (f"sequence {sequence}, {step}: after reset_cache() ptr_current_pos is still {position}, not 0 — this "
                f"prefill takes the causal mask's {rows}, as if it came after the first sequence; {cannot}. "
                "(With a text shorter than the context, those rows hide nothing and the prompt sees its own future.)")
    return f"sequence {sequence}, {step}: ptr_current_pos is {position}, so it takes the causal mask's {rows}; {cannot}"


def cache_steps(module, sequences: torch.Tensor) -> list[CacheStep]:
    """Every cached forward of each sequence's prefill and following tokens — the steps
    :func:`attnviz.kv_cache_rule.kv_cache` feeds —, up to and with the first one that raises (its difference NaN);
    each with the module's ``ptr_current_pos`` before it."""
    n = sequences.shape[1]
    plan = kv_steps(n, kv_prefill(n))  # the prefill, one token at a time, a chunk: kv-cache's steps
    steps = []
    with torch.no_grad():
        expected = [module(sequence[None]) for sequence in sequences]  # (1, n, d_out) each, uncached
        try:
            for number, (sequence, wanted) in enumerate(zip(sequences, expected), start=1):
                module.reset_cache()
                for start, stop in plan:
                    steps.append(CacheStep(number, start, stop, getattr(module, "ptr_current_pos", None), math.nan))
                    got = module(sequence[None, start:stop], use_cache=True)  # (1, stop - start, d_out)
                    difference = float((got - wanted[:, start:stop]).abs().max())
                    steps[-1] = replace(steps[-1], difference=difference)
        except RuntimeError:
            pass  # the step that raised stays NaN
        finally:
            module.reset_cache()
    return steps
