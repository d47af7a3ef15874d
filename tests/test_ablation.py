"""Why ÷√dₖ: the score variance grows like dₖ without the scaling and stays ≈ 1 with it; unscaled
softmax saturates (entropy falls, max weight rises) as dₖ grows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnviz import ablation, pipeline
from attnviz.config import AttentionConfig

SEEDS = (0, 123, 999)


@pytest.fixture(scope="module", params=SEEDS)
def random_qk(request) -> dict:
    return ablation.scaling_ablation(num_tokens=64, seed=request.param)


def test_unscaled_variance_grows_linearly_with_dk(random_qk):
    dks = random_qk["dk"]
    variance = random_qk["unscaled"]["variance"]
    assert list(dks) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    assert np.all(np.abs(variance / dks - 1) < 0.15)  # var(q·k) = dₖ for N(0, 1) entries
    assert np.all(np.abs(variance[1:] / variance[:-1] - 2) < 0.3)  # doubling dₖ doubles the variance
    assert variance[-1] / variance[0] == pytest.approx(1024, rel=0.2)


def test_scaled_variance_stays_near_one(random_qk):
    assert np.all(np.abs(random_qk["scaled"]["variance"] - 1) < 0.15)


def test_without_scaling_softmax_saturates_as_dk_grows(random_qk):
    entropy = random_qk["unscaled"]["entropy"]
    max_weight = random_qk["unscaled"]["max_weight"]
    assert np.all(np.diff(entropy) < 0)
    assert np.all(np.diff(max_weight) > 0)
    assert entropy[-1] < 0.1 * random_qk["uniform_entropy"]  # nearly one-hot at dₖ = 1024
    assert max_weight[-1] > 0.9


def test_with_scaling_the_softmax_does_not_saturate(random_qk):
    entropy = random_qk["scaled"]["entropy"]
    max_weight = random_qk["scaled"]["max_weight"]
    assert entropy.max() - entropy.min() < 0.1
    assert max_weight.max() - max_weight.min() < 0.05
    assert np.all(entropy > 0.85 * random_qk["uniform_entropy"])  # ≈ log n − ½ for unit-variance scores
    assert np.all(random_qk["scaled"]["entropy"][1:] > random_qk["unscaled"]["entropy"][1:])


def test_bounds_hold_for_every_dk(random_qk):
    for mode in ablation.MODES:
        assert np.all(random_qk[mode]["entropy"] <= random_qk["uniform_entropy"] + 1e-9)
        assert np.all(random_qk[mode]["max_weight"] >= 1 / 64 - 1e-12)
        assert np.all(random_qk[mode]["max_weight"] <= 1)
    # dₖ = 1: √1 = 1, so the two are the same numbers
    for metric in ablation.METRICS:
        assert random_qk["scaled"][metric][0] == pytest.approx(random_qk["unscaled"][metric][0])


def test_the_same_seed_gives_the_same_numbers_and_another_seed_does_not():
    first = ablation.scaling_ablation(dks=(4, 16), num_tokens=8, seed=3)
    again = ablation.scaling_ablation(dks=(4, 16), num_tokens=8, seed=3)
    other = ablation.scaling_ablation(dks=(4, 16), num_tokens=8, seed=4)
    assert np.array_equal(first["unscaled"]["variance"], again["unscaled"]["variance"])
    assert not np.array_equal(first["unscaled"]["variance"], other["unscaled"]["variance"])


def test_saturation_stats_by_hand():
    queries = np.array([[1.0, 0.0], [0.0, 2.0]])  # (n=2, dₖ=2)
    keys = np.array([[1.0, 0.0], [1.0, 1.0]])
    stats = ablation.saturation_stats(queries, keys)
    scores = np.array([[1.0, 1.0], [0.0, 2.0]])  # q·k
    assert stats["unscaled"]["variance"] == pytest.approx(scores.var())
    assert stats["scaled"]["variance"] == pytest.approx((scores / math.sqrt(2)).var())
    p = 1 / (1 + math.exp(-2))  # row 2: softmax([0, 2]) = (1 − p, p)
    row2_entropy = -(p * math.log(p) + (1 - p) * math.log(1 - p))
    assert stats["unscaled"]["entropy"] == pytest.approx((math.log(2) + row2_entropy) / 2)
    assert stats["unscaled"]["max_weight"] == pytest.approx((0.5 + p) / 2)


def test_causal_rows_see_only_the_past():
    queries = keys = np.eye(3)
    stats = ablation.saturation_stats(queries, keys, causal=True)
    # row 0 sees one key (entropy 0, max 1); rows 1 and 2 see 2 and 3 keys
    weights_row1 = np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum()
    weights_row2 = np.exp([0.0, 0.0, 1.0]) / np.exp([0.0, 0.0, 1.0]).sum()
    entropies = [0.0, -(weights_row1 * np.log(weights_row1)).sum(), -(weights_row2 * np.log(weights_row2)).sum()]
    assert stats["unscaled"]["entropy"] == pytest.approx(np.mean(entropies))
    assert stats["unscaled"]["max_weight"] == pytest.approx(np.mean([1.0, weights_row1.max(), weights_row2.max()]))
    assert ablation.uniform_entropy(3, causal=True) == pytest.approx(np.mean(np.log([1, 2, 3])))
    assert stats["unscaled"]["entropy"] < ablation.saturation_stats(queries, keys)["unscaled"]["entropy"]


@pytest.mark.parametrize(("variant", "heads", "dk"), [("mha", 4, 8), ("mha_wrapper", 2, 16), ("causal", 1, 32),
                                                        ("simplified", 1, 32)])
def test_this_runs_point_is_one_head_at_its_own_dk(variant, heads, dk):
    config = AttentionConfig(variant=variant, d_in=32, d_out=32, num_heads=heads)
    trace = pipeline.run("the cat sat on the mat", config)
    queries, keys = ablation.trace_qk(trace, head=1 if heads > 1 else 0)
    assert queries.shape == keys.shape == (trace.n, dk)
    if heads > 1:
        assert np.array_equal(queries, trace.steps["queries"][0][:, dk : 2 * dk])
    point = ablation.run_point(queries, keys, causal=True, head=1)
    assert point["dk"] == dk and point["head"] == 1
    recorded = trace.steps["scores"][0, 1 if heads > 1 else 0]
    assert point["unscaled"]["variance"] == pytest.approx(float(recorded.astype(np.float64).var()), rel=1e-4)
    assert ablation.trace_qk(trace, max_tokens=3)[0].shape == (3, dk)
