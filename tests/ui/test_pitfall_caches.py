"""The Pitfall lab's caches: a bug's result is computed once for a trace, and the correct version once for every bug
that runs the same correct class under the same detector (the three KV-cache bugs)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from attnviz import pipeline
from attnviz.config import AttentionConfig
from attnviz.labs.pitfalls import catalogue, detectors
from attnviz.ui import compute
from attnviz.ui.cache import trace_key

KV_BUGS = ("cache_position", "cache_reset", "cache_too_little")


def test_the_kv_cache_bugs_run_their_correct_cache_once_a_trace(monkeypatch):
    trace = pipeline.run("Your journey starts with one step", AttentionConfig(d_in=16, d_out=16, num_heads=4, seed=7))
    key = trace_key(trace)
    compute.pitfall.clear()
    for cache in ("pitfall_correct",):
        if hasattr(compute, cache):
            getattr(compute, cache).clear()
    runs = Counter()  # the cached steps each version's detector walks, by the class it ran
    real = detectors.cache_steps

    def counted(module, sequences, *rest):
        runs[type(module).__name__] += 1
        return real(module, sequences, *rest)

    monkeypatch.setattr(detectors, "cache_steps", counted)
    results = [compute.pitfall(key, 4, bug, trace) for bug in KV_BUGS]
    again = [compute.pitfall(key, 4, bug, trace) for bug in KV_BUGS]  # the same settings: nothing runs again
    assert runs == {"CachedMultiHeadAttention": 1, "PositionNeverAdvances": 1, "ResetForgetsPosition": 1,
                    "CacheKeepsTooLittle": 1}
    monkeypatch.setattr(detectors, "cache_steps", real)
    for bug, result, repeated in zip(KV_BUGS, results, again, strict=True):
        alone = catalogue.run_on_trace(trace, 4, bug)  # each bug on its own, as before the cache
        for shown, expected in ((result.correct, alone.correct), (result.buggy, alone.buggy),
                                (repeated.buggy, alone.buggy)):
            assert (shown.fired, shown.verdict) == (expected.fired, expected.verdict), bug
            assert np.array_equal(np.array(shown.details["steps"])[:, 1].astype(float),
                                  np.array(expected.details["steps"])[:, 1].astype(float), equal_nan=True), bug
        assert result.correct.fired is False and result.buggy.fired is True, bug


def test_only_bugs_whose_correct_code_and_detector_are_the_same_share_a_correct_version():
    sides = {bug: catalogue.correct_side(bug) for bug in catalogue.PITFALLS}
    shared = Counter(sides.values())
    assert [bug for bug, side in sides.items() if shared[side] > 1] == [
        "view_contiguous", "mask_not_sliced",  # the book's code, run to see whether it raises
        "rope_queries_only", "rope_values",  # the lab's RotaryAttention on one token repeated
        *KV_BUGS]
    for bug, side in sides.items():
        pitfall = catalogue.PITFALLS[bug]
        for other in (other for other, its in sides.items() if its == side):
            assert (catalogue.PITFALLS[other].runs, catalogue.PITFALLS[other].detect) == (pitfall.runs, pitfall.detect)
