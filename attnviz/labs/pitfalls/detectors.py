"""Pitfall lab, the detectors: run a version once and compute a verdict from its tensors (or its error).

Pure torch + NumPy: no figures, no Streamlit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from attnviz import stats
from attnviz.attention import MAP_STAGES, Recorder
from attnviz.labs.pitfalls.leak import leak_report, positions_text
from attnviz.labs.pitfalls.workbench import LabSetup, forward_rng

ROW_SUM_TOLERANCE = 1e-4


# --------------------------------------------------------------------------- running a version

@dataclass(frozen=True)
class Observation:
    """One forward pass: the recorded maps of every head (h, n, n), the output (n, d_out), or the error."""

    maps: dict[str, np.ndarray]
    output: np.ndarray | None
    error: str | None


def observe(module: nn.Module, inputs: torch.Tensor, seed: int | None = 0) -> Observation:
    """Run ``module`` once with a Recorder; catch a RuntimeError's text.  Dropout draws from ``seed``, or
    with ``seed=None`` continues the current RNG stream (inside a seeded section)."""
    recorder = Recorder()
    try:
        with forward_rng(module, seed), torch.no_grad():
            output = module(inputs, recorder)  # (1, n, d_in) -> (1, n, d_out)
    except RuntimeError as exc:
        return Observation(maps={}, output=None, error=str(exc))
    maps = {name: recorder.steps[name][0].float().numpy().copy() for name in MAP_STAGES}  # (h, n, n) each
    return Observation(maps=maps, output=output[0].float().numpy().copy(), error=None)


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
