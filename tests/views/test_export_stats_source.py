"""Downloads (a head's CSV), head statistics, and the source panel read from the running code."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from attnviz import attention, pipeline, stats, variants
from attnviz.config import AttentionConfig
from attnviz.views import export, source

CONFIG = AttentionConfig(d_in=16, d_out=16, num_heads=4, context_length=32, seed=5)
TEXT = "the cat and the hat"


@pytest.fixture(scope="module")
def trace():
    return pipeline.run(TEXT, CONFIG)


def test_weights_csv_is_the_focused_heads_map_with_token_labels(trace):
    rows = list(csv.reader(io.StringIO(export.weights_csv(trace, 2).decode("utf-8"))))
    assert rows[0][1:] == ["0: the", "1: ·cat", "2: ·and", "3: ·the", "4: ·hat"]
    assert [row[0] for row in rows[1:]] == rows[0][1:]
    values = np.array([[float(v) for v in row[1:]] for row in rows[1:]])
    assert np.allclose(values, trace.attention_map("weights", 2), atol=1e-6)
    assert np.allclose(values.sum(axis=1), 1.0, atol=1e-5)


def test_head_statistics_on_known_maps():
    n = 4
    identity = np.eye(n)[None]  # every token attends to itself
    previous = np.eye(n, k=-1)[None]
    previous[0, 0, 0] = 1.0  # the first token can only see itself
    uniform_causal = np.tril(np.ones((n, n)))
    uniform_causal = (uniform_causal / uniform_causal.sum(axis=1, keepdims=True))[None]
    result = stats.head_statistics(np.concatenate([identity, previous, uniform_causal]))
    # the diagonal, like the first-token mass, over the queries after the first: query 0 of a causal map has only
    # itself to give its 1 to (the previous-token head's row 0 is that 1, not a choice)
    assert result["diagonal"].tolist()[:2] == [1.0, 0.0]
    assert result["diagonal"][2] == pytest.approx(np.mean([1 / k for k in range(2, n + 1)]))
    assert result["previous-token"][1] == 1.0 and result["previous-token"][0] == 0.0
    assert result["entropy"][0] == 0.0 and result["max weight"][0] == 1.0
    assert result["mean distance"][0] == 0.0 and result["mean distance"][1] == pytest.approx(0.75)
    assert result["entropy"][2] == pytest.approx(np.mean([np.log(k) for k in range(1, n + 1)]))
    # the queries after the first (row 0 can only give the first token its 1), as the head types count it
    assert result["first-token mass"][2] == pytest.approx(np.mean([1 / k for k in range(2, n + 1)]))
    assert result["first-token mass"][0] == 0.0 and result["first-token mass"][1] == pytest.approx(1 / (n - 1))


def test_first_token_mass_previous_token_and_diagonal_have_no_value_for_one_token():
    """One token: no query after the first, so no first-token mass, previous-token nor diagonal (blank, as in the head
    types table)."""
    one_token = stats.head_statistics(np.ones((2, 1, 1)))
    assert np.isnan(one_token["first-token mass"]).all() and np.isnan(one_token["previous-token"]).all()
    assert np.isnan(one_token["diagonal"]).all()


def test_diagonal_and_first_token_mass_leave_out_the_same_query_and_say_so():
    """Under the causal mask, one rule for the two statistics that query 0 would set by itself: both read the queries
    after the first, and the column help of each says so."""
    n = 6
    weights = np.random.default_rng(0).random((3, n, n)) * np.tril(np.ones((n, n)))  # (3, n, n), causal
    weights /= weights.sum(axis=-1, keepdims=True)
    result = stats.head_statistics(weights)
    assert np.allclose(result["diagonal"], np.diagonal(weights, axis1=1, axis2=2)[:, 1:].mean(axis=1))
    assert np.allclose(result["first-token mass"], weights[:, 1:, 0].mean(axis=1))
    for name in ("diagonal", "first-token mass"):
        assert "over the queries after the first" in stats.STATS[name], name


def test_head_statistics_of_a_real_trace_are_in_range(trace):
    result = stats.head_statistics(trace.steps["weights"][0])
    assert set(result) == set(stats.STATS)
    assert all(values.shape == (4,) for values in result.values())
    assert ((result["max weight"] >= 0) & (result["max weight"] <= 1)).all()
    assert (result["entropy"] <= np.log(trace.n) + 1e-9).all()


@pytest.mark.parametrize("variant", list(source.CLASSES))
def test_source_panel_marks_the_line_that_computes_each_stage(variant):
    text = source.variant_source(variant)
    assert f"class {source.CLASSES[variant].__name__}" in text
    for stage, needle in (("scores", "@"), ("weights", "softmax"), ("context", "@")):
        marked, line = source.marked_source(variant, stage)
        assert line is not None and marked.splitlines()[line - 1].endswith(source.MARK), (variant, stage)
        assert needle in marked.splitlines()[line - 1]
    masked_line = source.stage_code(variant, "masked")
    window = "sliding_window_size" in variants.get(variant).settings  # its mask is the band it builds
    assert masked_line is not None and ("(diff >= window)" if window else "masked_fill") in masked_line


def test_source_panel_reads_the_running_module():
    """If the class changed, the panel would show the change: it is read with inspect, not copied."""
    assert source.variant_source("mha").startswith("class MultiHeadAttention")
    assert "self.out_proj(context_vec)" in source.variant_source("mha")
    assert source.stage_code("simplified", "scaled") is None  # section 3.3 does not scale
    assert source.CLASSES["mha"] is attention.MultiHeadAttention


@pytest.mark.parametrize("n", [1, 2, 7, 64])
def test_every_statistic_stays_in_the_range_its_bar_is_drawn_on_and_reaches_its_ends(n):
    rng = np.random.default_rng(n)
    logits = rng.normal(size=(64, n, n)) * rng.uniform(0.1, 20, size=(64, 1, 1))
    random_weights = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
    uniform = np.full((1, n, n), 1.0 / n)  # largest entropy
    farthest = np.zeros((1, n, n))
    farthest[0, np.arange(n), np.where(np.arange(n) < n / 2, n - 1, 0)] = 1.0  # each query on its farthest key
    result = stats.head_statistics(np.concatenate([random_weights, uniform, farthest]))
    for name, values in result.items():
        low, high = stats.stat_range(name, n)
        assert low == 0.0 and high > low
        if name in ("first-token mass", "previous-token", "diagonal") and n == 1:  # no query after the first: blank
            assert np.isnan(values).all()
            continue
        assert (values >= low - 1e-9).all() and (values <= high + 1e-9).all(), name
    if n > 1:
        assert result["entropy"][-2] == pytest.approx(stats.stat_range("entropy", n)[1])
        assert result["mean distance"][-1] == pytest.approx(stats.stat_range("mean distance", n)[1])
    with pytest.raises(KeyError):
        stats.stat_range("attention", n)


def test_head_statistics_of_float32_maps_match_float64():
    """A Trace's float32 maps are worked on in float32 (with float64 sums): the same numbers to ~1e-6."""
    rng = np.random.default_rng(7)
    n = 300
    logits = np.where(np.tril(np.ones((n, n), dtype=bool)), rng.normal(size=(4, n, n)) * 3, -np.inf)
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    single = stats.head_statistics(weights.astype(np.float32))
    double = stats.head_statistics(weights)
    for name in stats.STATS:
        np.testing.assert_allclose(single[name], double[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_the_diagonal_leaves_out_query_0_only_under_the_causal_mask():
    """Under the causal mask query 0 sees only itself, so its diagonal weight is 1 whatever the head: the statistic
    reads the queries after it.  With the mask off query 0 weighs every key like any other query, and counts; the
    column help names both cases."""
    unmasked = np.array([[[0.2, 0.5, 0.3],
                          [0.1, 0.6, 0.3],
                          [0.4, 0.4, 0.2]]])  # (1, 3, 3): query 0 gives its own token 0.2
    causal = np.array([[[1.0, 0.0, 0.0],
                        [0.4, 0.6, 0.0],
                        [0.3, 0.5, 0.2]]])  # (1, 3, 3): query 0's forced 1
    assert stats.head_statistics(unmasked, causal=False)["diagonal"][0] == pytest.approx((0.2 + 0.6 + 0.2) / 3)
    assert stats.head_statistics(causal, causal=True)["diagonal"][0] == pytest.approx((0.6 + 0.2) / 2)
    assert stats.head_statistics(causal)["diagonal"][0] == pytest.approx((0.6 + 0.2) / 2)  # the book's mask: on
    assert np.isnan(stats.head_statistics(np.ones((1, 1, 1)), causal=False)["diagonal"]).all()  # one key: no choice
    assert "under the causal mask" in stats.STATS["diagonal"] and "mask off" in stats.STATS["diagonal"]


def test_the_first_token_mass_leaves_query_0_out_only_under_the_causal_mask():
    """Under the causal mask query 0 sees only the first token, so its weight there is 1 whatever the head: the mass
    reads the queries after it (as the head types' first_token).  With the mask off query 0 weighs every key like any
    other query, and counts; the column help names both cases."""
    unmasked = np.array([[[0.2, 0.5, 0.3],
                          [0.1, 0.6, 0.3],
                          [0.4, 0.4, 0.2]]])  # (1, 3, 3): query 0 gives the first token 0.2
    causal = np.array([[[1.0, 0.0, 0.0],
                        [0.4, 0.6, 0.0],
                        [0.3, 0.5, 0.2]]])  # (1, 3, 3): query 0's forced 1
    assert stats.head_statistics(unmasked, causal=False)["first-token mass"][0] == pytest.approx((0.2 + 0.1 + 0.4) / 3)
    assert stats.head_statistics(causal, causal=True)["first-token mass"][0] == pytest.approx((0.4 + 0.3) / 2)
    assert stats.head_statistics(causal)["first-token mass"][0] == pytest.approx((0.4 + 0.3) / 2)  # the book's mask
    assert np.isnan(stats.head_statistics(np.ones((1, 1, 1)), causal=False)["first-token mass"]).all()  # one key
    help_text = stats.STATS["first-token mass"]
    assert "after the first under the causal mask" in help_text and "every query with the mask off" in help_text
