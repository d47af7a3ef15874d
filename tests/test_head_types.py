"""Head scores: hand-computed cases, TransformerLens' head_detector formulas (over the whole map, and over the rows that
can show each type), flags, shapes, memory, labels, the bundled model on a sentence written twice."""

import tracemalloc

import numpy as np
import pytest
import torch

from attnviz.config import AttentionConfig
from attnviz.head_types import (
    BOS_ID,
    FUTURE_TOLERANCE,
    HEAD_TYPES,
    LABEL_THRESHOLD,
    chance_scores,
    chance_types,
    detection_pattern,
    even_spread,
    future_mass,
    head_label,
    induction_stripe,
    pattern_cells,
    previous_token_stripe,
    repeated_random_tokens,
    rows_that_can_show,
    score_heads,
    sees_future,
    unshowable_types,
)

# A hand-checkable 4-token map for tokens [5, 7, 5, 7] (rows sum to 1, causal).
A = np.array([[1.0, 0.0, 0.0, 0.0],
              [0.5, 0.5, 0.0, 0.0],
              [0.2, 0.3, 0.5, 0.0],
              [0.1, 0.2, 0.3, 0.4]], dtype=np.float32)
TOKENS = [5, 7, 5, 7]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        # previous: A[1,0]+A[2,1]+A[3,2] = 1.1; duplicate: A[2,0]+A[3,1] = 0.4;
        # induction: A[2,1]+A[3,2] = 0.6; sum(A) = 4
        ({}, {"previous_token": 1.1 / 4, "duplicate_token": 0.4 / 4, "induction": 0.6 / 4}),
        # column 0 zeroed: sum 2.2, previous loses A[1,0] = 0.5, duplicate loses A[2,0] = 0.2
        ({"exclude_bos": True}, {"previous_token": 0.6 / 2.2, "duplicate_token": 0.2 / 2.2, "induction": 0.6 / 2.2}),
        # diagonal zeroed: sum 4 - 2.4 = 1.6
        ({"exclude_current": True},
         {"previous_token": 1.1 / 1.6, "duplicate_token": 0.4 / 1.6, "induction": 0.6 / 1.6}),
        # both: only A[2,1], A[3,1], A[3,2] remain (sum 0.8)
        ({"exclude_bos": True, "exclude_current": True},
         {"previous_token": 0.6 / 0.8, "duplicate_token": 0.2 / 0.8, "induction": 0.6 / 0.8}),
    ],
)
def test_hand_computed_scores_over_every_row(flags, expected):
    scores = score_heads(A, TOKENS, every_row=True, **flags)
    for name, value in expected.items():
        assert scores[name] == pytest.approx(value, abs=1e-6), name
    assert scores["first_token"] == pytest.approx((0.5 + 0.2 + 0.1) / 3, abs=1e-6)  # flags never change it
    assert scores["future"] == 0.0  # A is causal: nothing above the diagonal


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        # previous-token: rows 1–3 (row 0 has no token before it), sum 3; duplicate-token and induction: rows 2 and 3
        # (their tokens, 5 and 7, came earlier), sum 2
        ({}, {"previous_token": 1.1 / 3, "duplicate_token": 0.4 / 2, "induction": 0.6 / 2}),
        # column 0 zeroed: row 1's only previous cell (1, 0) and row 2's only duplicate cell (2, 0) go, and so do the
        # rows; A′ rows 2 and 3 sum to 0.8 and 0.9
        ({"exclude_bos": True}, {"previous_token": 0.6 / 1.7, "duplicate_token": 0.2 / 0.9, "induction": 0.6 / 1.7}),
        # diagonal zeroed: A′ rows 1–3 sum to 0.5, 0.5, 0.6
        ({"exclude_current": True},
         {"previous_token": 1.1 / 1.6, "duplicate_token": 0.4 / 1.1, "induction": 0.6 / 1.1}),
        # both: A′ rows 2 and 3 sum to 0.3 and 0.5; duplicate keeps only row 3's (3, 1)
        ({"exclude_bos": True, "exclude_current": True},
         {"previous_token": 0.6 / 0.8, "duplicate_token": 0.2 / 0.5, "induction": 0.6 / 0.8}),
    ],
)
def test_each_type_is_scored_over_the_rows_that_can_show_it(flags, expected):
    scores = score_heads(A, TOKENS, **flags)
    for name, value in expected.items():
        assert scores[name] == pytest.approx(value, abs=1e-6), name
    assert scores["first_token"] == pytest.approx((0.5 + 0.2 + 0.1) / 3, abs=1e-6)
    assert scores["future"] == 0.0


def test_a_text_without_repeats_has_no_row_that_can_show_duplicate_or_induction():
    tokens = [11, 12, 13, 14]
    assert not rows_that_can_show("induction", tokens).any() and not rows_that_can_show("duplicate_token", tokens).any()
    assert rows_that_can_show("previous_token", tokens).tolist() == [False, True, True, True]
    assert rows_that_can_show("induction", TOKENS).tolist() == [False, False, True, True]  # 5 and 7 came earlier
    assert rows_that_can_show("duplicate_token", TOKENS, exclude_bos=True).tolist() == [False, False, False, True]
    scores = score_heads(A, tokens)
    assert np.isnan(scores["induction"]) and np.isnan(scores["duplicate_token"])  # not 0: nothing to measure
    assert scores["previous_token"] == pytest.approx(1.1 / 3)
    assert head_label(scores) is None
    assert score_heads(A, tokens, every_row=True)["induction"] == 0.0  # TransformerLens' whole-map score: 0 / 4
    assert unshowable_types(tokens) == ("duplicate_token", "induction")
    assert unshowable_types(TOKENS) == ()
    assert unshowable_types([7]) == HEAD_TYPES  # one token: not even a token before it


def test_the_bundled_model_names_its_induction_heads_on_a_sentence_written_twice():
    """Layer 1's heads are induction heads (the Induction lab: 0.74 / 0.67); over the whole map their score is held
    down by the first copy, whose queries have no earlier copy to look after (0.22 / 0.26); over the six queries of
    the second copy whose token came earlier they pass 0.4 and are named."""
    from attnviz import models
    from attnviz.tokens import encode

    tokens = encode("The cat sat on the mat. The cat sat on the mat.")  # 14 ids; "The" and " The" differ
    maps = models.attention_maps(models.load_checkpoint(models.BUNDLED), tokens)  # (2, 2, 14, 14)
    rows = rows_that_can_show("induction", tokens)
    assert np.flatnonzero(rows).tolist() == [8, 9, 10, 11, 12, 13]
    scores = score_heads(maps, tokens)
    for head in (0, 1):
        one = {name: values[1, head] for name, values in scores.items()}
        assert head_label(one) == "induction", one
        pattern = detection_pattern("induction", tokens)
        by_hand = (maps[1, head] * pattern).sum() / maps[1, head][rows].sum()
        assert one["induction"] == pytest.approx(by_hand, abs=1e-6)
    assert (score_heads(maps, tokens, every_row=True)["induction"][1] < LABEL_THRESHOLD).all()  # the old reading
    assert [head_label({name: values[0, head] for name, values in scores.items()}) for head in (0, 1)] == \
        ["previous-token"] * 2


def test_patterns_are_transformer_lens_patterns():
    # tokens [3, 3, 3]: duplicate (1,0), (2,0), (2,1); induction = that shifted right, diagonal kept
    assert detection_pattern("previous_token", [3, 3, 3]).astype(int).tolist() == [[0, 0, 0], [1, 0, 0], [0, 1, 0]]
    assert detection_pattern("duplicate_token", [3, 3, 3]).astype(int).tolist() == [[0, 0, 0], [1, 0, 0], [1, 1, 0]]
    assert detection_pattern("induction", [3, 3, 3]).astype(int).tolist() == [[0, 0, 0], [0, 1, 0], [0, 1, 1]]
    with pytest.raises(ValueError, match="unknown head type"):
        detection_pattern("sink", [1, 2])


def _transformer_lens_reference(attention, tokens, name, exclude_bos, exclude_current, every_row=True):
    """TransformerLens head_detector (get_*_detection_pattern + compute_head_attention_similarity_score, mul); with
    ``every_row`` False, on the map with the rows that have no cell of the (excluded) pattern zeroed first."""
    tokens = torch.as_tensor(tokens)
    n = tokens.shape[-1]
    if name == "previous_token":
        pattern = torch.zeros(n, n)
        pattern[1:, :-1] = torch.eye(n - 1)
        pattern = torch.tril(pattern)
    else:
        token_pattern = tokens.repeat(n, 1).numpy()
        eq_mask = np.equal(token_pattern, token_pattern.T).astype(int)
        np.fill_diagonal(eq_mask, 0)
        pattern = torch.tril(torch.as_tensor(eq_mask).float())
        if name == "induction":
            shifted = torch.roll(pattern, shifts=1, dims=1)
            pattern = torch.tril(torch.cat((torch.zeros(n, 1), shifted[:, 1:]), dim=1))
    attention = torch.as_tensor(attention, dtype=torch.float64).clone()
    if exclude_bos:
        attention[:, 0] = 0
    if exclude_current:
        attention.fill_diagonal_(0)
    if not every_row:
        kept = pattern.clone()
        if exclude_bos:
            kept[:, 0] = 0
        if exclude_current:
            kept.fill_diagonal_(0)
        attention[kept.sum(dim=1) == 0] = 0  # a query with no cell of the pattern cannot show the type
    return ((attention * pattern).sum() / attention.sum()).item()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("exclude_bos", [False, True])
@pytest.mark.parametrize("exclude_current", [False, True])
@pytest.mark.parametrize("read", ["cells", "mask"])
@pytest.mark.parametrize("every_row", [True, False])
def test_matches_transformer_lens_on_random_maps(seed, exclude_bos, exclude_current, read, every_row, monkeypatch):
    from attnviz import head_types

    # every pattern read at its cells' indices, or every one that can be through its (n, n) mask
    monkeypatch.setattr(head_types, "_SPARSE", 1 if read == "cells" else 10**9)
    rng = np.random.default_rng(seed)
    n = 24
    tokens = rng.integers(0, 6, size=n)  # few distinct ids: many duplicates and adjacent repeats
    logits = rng.normal(size=(3, n, n)) * 2
    logits[:, np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] = -np.inf
    maps = np.exp(logits - logits.max(-1, keepdims=True))
    maps = (maps / maps.sum(-1, keepdims=True)).astype(np.float32)  # (3, n, n) causal, rows sum to 1
    scores = score_heads(maps, tokens, exclude_bos=exclude_bos, exclude_current=exclude_current, every_row=every_row)
    for name in ("previous_token", "duplicate_token", "induction"):
        reference = [_transformer_lens_reference(m, tokens, name, exclude_bos, exclude_current, every_row)
                     for m in maps]
        np.testing.assert_allclose(scores[name], reference, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("name", ["previous_token", "duplicate_token", "induction"])
@pytest.mark.parametrize("vocabulary", [1, 2, 5, 50, 5000])
def test_pattern_cells_are_the_patterns_set_cells(name, vocabulary, monkeypatch):
    from attnviz import head_types

    monkeypatch.setattr(head_types, "_SPARSE", 1)  # cells however dense
    for seed in range(4):
        tokens = np.random.default_rng(seed).integers(0, vocabulary, size=[1, 2, 17, 64][seed])
        rows, cols = pattern_cells(name, tokens)
        expected = set(zip(*np.nonzero(detection_pattern(name, tokens)), strict=True))
        assert len(rows) == len(expected) and set(zip(rows.tolist(), cols.tolist(), strict=True)) == expected


def test_a_dense_pattern_is_left_to_its_mask():
    assert pattern_cells("duplicate_token", [7] * 64) is None  # 2016 of 4096 cells: summed through the mask
    rows, cols = pattern_cells("induction", list(range(64)))  # no repeat, no cell
    assert rows.size == cols.size == 0
    assert len(pattern_cells("previous_token", [7] * 64)[0]) == 63  # always n − 1 cells


def test_shapes_and_inputs():
    rng = np.random.default_rng(0)
    maps = rng.random((2, 3, 5, 6, 6)).astype(np.float32)
    tokens = rng.integers(0, 4, size=6)
    scores = score_heads(maps, tokens)
    assert {k: v.shape for k, v in scores.items()} == {k: (2, 3, 5) for k in scores}
    single = score_heads(maps[1, 2, 3], tokens)
    assert all(single[k].shape == () for k in single)
    for name in scores:
        assert single[name] == pytest.approx(scores[name][1, 2, 3])
    from_torch = score_heads(torch.from_numpy(maps[0]), torch.as_tensor(tokens))
    np.testing.assert_allclose(from_torch["induction"], scores["induction"][0])
    half = score_heads(maps.astype(np.float16), tokens)
    np.testing.assert_allclose(half["previous_token"], scores["previous_token"], atol=1e-3)
    with pytest.raises(ValueError, match="shape"):
        score_heads(np.zeros((3, 4)), [1, 2, 3])
    with pytest.raises(ValueError, match="tokens"):
        score_heads(np.zeros((4, 4)), [1, 2, 3])


def test_degenerate_maps_give_nan_not_errors():
    one = score_heads(np.ones((1, 1)), [7])
    assert np.isnan(one["previous_token"])  # one token: no query has a token before it
    assert score_heads(np.ones((1, 1)), [7], every_row=True)["previous_token"] == 0.0  # TransformerLens: 0 / 1
    assert np.isnan(one["first_token"])
    # everything excluded: A′ sums to 0 -> nan (TransformerLens: 0 / 0)
    two = score_heads(np.array([[1.0, 0.0], [0.3, 0.7]]), [1, 2], exclude_bos=True, exclude_current=True)
    assert np.isnan(two["previous_token"])
    assert head_label(two) is None


def test_no_float64_copy_of_the_maps():
    maps = np.random.default_rng(0).random((4, 4, 256, 256), dtype=np.float32)  # 4 MiB
    tokens = np.arange(256) % 50
    tracemalloc.start()
    score_heads(maps, tokens, exclude_bos=True, exclude_current=True)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1_000_000, peak  # three 64 KiB boolean patterns + bookkeeping; a float64 copy is 8 MiB


def _one_hot_rows(n, targets):
    attn = np.zeros((n, n), dtype=np.float32)
    attn[np.arange(n), targets] = 1.0
    return attn


def test_labels_never_name_a_sink():
    n = 12
    tokens = np.arange(n)
    sink = score_heads(_one_hot_rows(n, np.zeros(n, dtype=int)), tokens)
    assert sink["first_token"] == pytest.approx(1.0)
    assert head_label(sink) is None
    previous = score_heads(_one_hot_rows(n, np.maximum(np.arange(n) - 1, 0)), tokens)
    assert head_label(previous) == "previous-token"
    duplicate = {"previous_token": 0.2, "duplicate_token": 0.5, "induction": 0.45, "first_token": 0.9}
    assert head_label(duplicate) == "duplicate-token"
    below = LABEL_THRESHOLD - 0.01
    assert head_label({"previous_token": below, "duplicate_token": below, "induction": below,
                       "first_token": 1.0}) is None
    assert head_label({"previous_token": np.nan, "duplicate_token": 0.0, "induction": LABEL_THRESHOLD}) == "induction"


# The 4-token map with the future in view: rows 0–2 give some weight to later keys (rows sum to 1).
A_AHEAD = np.array([[0.4, 0.6, 0.0, 0.0],
                    [0.5, 0.3, 0.2, 0.0],
                    [0.1, 0.3, 0.2, 0.4],
                    [0.1, 0.2, 0.3, 0.4]], dtype=np.float32)


def test_future_mass_is_the_mean_weight_on_later_keys():
    # rows: 0.6, 0.2, 0.4 and 0 (the last query has no later key) -> mean 1.2 / 4
    assert future_mass(A_AHEAD) == pytest.approx(1.2 / 4, abs=1e-6)
    assert future_mass(A) == 0.0
    np.testing.assert_allclose(future_mass(np.stack([[A, A_AHEAD]])), [[0.0, 0.3]], atol=1e-6)  # (1, 2)
    assert score_heads(np.stack([A, A_AHEAD]), TOKENS)["future"] == pytest.approx([0.0, 0.3], abs=1e-6)
    assert not sees_future(0.0) and not sees_future(FUTURE_TOLERANCE) and sees_future(1e-4)


def test_the_first_token_mass_leaves_query_0_out_only_when_the_run_hides_the_future():
    """Under a causal mask query 0 sees only token 0, so its 1 there is no choice of the head's and is left out; with
    the mask off it weighs every key like any other query, and counts (one token: no choice either way, nan)."""
    assert score_heads(A, TOKENS)["first_token"] == pytest.approx((0.5 + 0.2 + 0.1) / 3, abs=1e-6)  # causal default
    assert score_heads(A, TOKENS, causal=True)["first_token"] == pytest.approx((0.5 + 0.2 + 0.1) / 3, abs=1e-6)
    assert score_heads(A, TOKENS, masked=True)["first_token"] == pytest.approx((0.5 + 0.2 + 0.1) / 3, abs=1e-6)
    # A_AHEAD, the mask off: rows 0–3 give token 0 0.4, 0.5, 0.1 and 0.1
    assert score_heads(A_AHEAD, TOKENS, causal=False)["first_token"] == pytest.approx(
        (0.4 + 0.5 + 0.1 + 0.1) / 4, abs=1e-6)
    for flags in ({"exclude_bos": True}, {"exclude_current": True}, {"every_row": True}):  # none changes it
        assert score_heads(A_AHEAD, TOKENS, causal=False, **flags)["first_token"] == pytest.approx(1.1 / 4, abs=1e-6)
    assert np.isnan(score_heads(np.ones((1, 1)), [7], causal=False)["first_token"])


def test_a_head_that_sees_the_future_keeps_its_scores_but_gets_no_type():
    # the formula is unchanged: previous = (0.5 + 0.3 + 0.3) / 3 on A_AHEAD (A[1,0], A[2,1], A[3,2]; rows 1–3)
    ahead = score_heads(A_AHEAD, TOKENS)
    assert ahead["previous_token"] == pytest.approx(1.1 / 3, abs=1e-6)
    # a previous-token head (0.9 of each row on i − 1) that puts the rest on the next token: named only when causal
    n = 12
    tokens = np.arange(n)
    causal = _one_hot_rows(n, np.maximum(np.arange(n) - 1, 0))
    peeking = 0.9 * causal
    peeking[np.arange(n - 1), np.arange(1, n)] += 0.1
    peeking[n - 1, n - 2] += 0.1  # the last row has no next token: all on i − 1
    scores = score_heads(peeking, tokens)
    assert scores["previous_token"] >= LABEL_THRESHOLD and scores["future"] == pytest.approx(0.1 * 11 / 12)
    assert head_label(scores) is None
    assert head_label(score_heads(causal, tokens)) == "previous-token"
    # scores without a "future" entry (a training probe of a causal model) are named as before
    assert head_label({name: value for name, value in scores.items() if name != "future"}) == "previous-token"
    # a run without the mask names no head, even one whose own map has no weight on later keys (a model's later
    # layer reads what earlier layers saw ahead)
    assert head_label(score_heads(causal, tokens), causal=False) is None


@pytest.mark.parametrize(("config", "hides"), [
    (AttentionConfig(variant="mha"), True),
    (AttentionConfig(variant="mha", causal=False), False),
    (AttentionConfig(variant="simplified", causal=False), False),
    (AttentionConfig(variant="swa", causal=False), True),  # the window always hides the future
    (AttentionConfig(checkpoint="some-model", causal=False), False),  # the sidebar's mask, in every layer
    (AttentionConfig(module="my-module", causal=False), False),  # what the module's probe run showed
    (AttentionConfig(module="my-module", causal=True), True),
])
def test_which_runs_hide_the_future(config, hides):
    assert config.hides_future is hides


def test_induction_head_on_repeated_tokens():
    T = 7
    tokens = repeated_random_tokens(T, seed=3)  # [BOS] + x + x, n = 2T + 1
    n = len(tokens)
    targets = np.zeros(n, dtype=int)  # everything before the repeat on BOS
    targets[n - T:] = np.arange(n - T, n) - T + 1  # the repeat on i - T + 1
    maps = np.stack([_one_hot_rows(n, targets), _one_hot_rows(n, np.maximum(np.arange(n) - 1, 0))])  # (2, n, n)
    assert induction_stripe(maps, T).tolist() == [1.0, pytest.approx(0.0)]
    assert previous_token_stripe(maps).tolist() == [pytest.approx(1 / (n - 1)), 1.0]  # only row 1 (on BOS = i - 1)
    scores = score_heads(maps, tokens)
    assert scores["induction"][0] == pytest.approx(1.0)  # every query that can show induction (the repeat's) does
    whole = score_heads(maps, tokens, every_row=True)
    assert whole["induction"][0] == pytest.approx(T / n)  # TransformerLens' whole map: the BOS rows count in sum(A)
    assert whole["induction"][0] == pytest.approx(
        score_heads(maps[0], tokens, exclude_bos=True, every_row=True)["induction"] * T / n)
    assert head_label(score_heads(maps[0], tokens, exclude_bos=True)) == "induction"
    with pytest.raises(ValueError, match="repeat length"):
        induction_stripe(maps, n)


@pytest.mark.parametrize("T", [3, 10, 25])
def test_on_repeated_random_tokens_the_induction_score_is_the_induction_labs_stripe(T):
    """On TransformerLens' induction data ([BOS] + x + x, x of distinct ids) the queries that can show induction are
    the second copy's, each with one cell, A[i, i − T + 1]: the score is the stripe's mean over the second copy, the
    Induction lab's score; its mean over every row (``every_row=True``) is that times T / (2T + 1)."""
    tokens = repeated_random_tokens(T, seed=T)
    assert len(set(tokens[1:T + 1].tolist())) == T  # distinct ids: one earlier copy per second-copy token
    n = len(tokens)
    rng = np.random.default_rng(T)
    logits = rng.normal(size=(4, n, n)) * 3 + np.triu(np.full((n, n), -np.inf), k=1)  # (heads, n, n), causal
    maps = np.exp(logits - logits.max(-1, keepdims=True))
    maps /= maps.sum(-1, keepdims=True)  # (heads, n, n): rows sum to 1
    np.testing.assert_allclose(score_heads(maps, tokens)["induction"], induction_stripe(maps, T), rtol=1e-9)
    np.testing.assert_allclose(score_heads(maps, tokens, every_row=True)["induction"],
                               induction_stripe(maps, T) * T / n, rtol=1e-9)


def test_repeated_random_tokens():
    tokens = repeated_random_tokens(30, seed=1)
    assert tokens.shape == (61,)
    assert tokens[0] == BOS_ID
    assert (tokens[1:31] == tokens[31:]).all()
    assert tokens[1:].min() >= 1000 and tokens[1:].max() < 30000
    assert (repeated_random_tokens(30, seed=1) == tokens).all()
    assert not (repeated_random_tokens(30, seed=2) == tokens).all()
    batch = repeated_random_tokens(5, seed=0, batch=3, bos=False)
    assert batch.shape == (3, 10)
    assert (batch[:, :5] == batch[:, 5:]).all()


def test_scores_of_a_masked_run_are_the_same_with_or_without_summing_the_future():
    """``masked=True`` (the caller's run hid the future) skips summing the upper triangles: every score is what the
    full sum gives for causal maps, ``future`` 0 included."""
    rng = np.random.default_rng(0)
    scores = rng.random((3, 12, 12)) * np.tril(np.ones((12, 12)))  # (heads, n, n), zero above the diagonal
    maps = scores / scores.sum(-1, keepdims=True)  # (heads, n, n): causal rows summing to 1
    tokens = rng.integers(0, 5, 12)  # repeats, so the duplicate and induction patterns have cells
    summed, masked = score_heads(maps, tokens), score_heads(maps, tokens, masked=True)
    assert summed.keys() == masked.keys()
    for name in summed:
        np.testing.assert_array_equal(masked[name], summed[name], err_msg=name)
    assert not masked["future"].any()


# ============================== chance: the keys a query sees ==============================


@pytest.mark.parametrize("window", [None, 1, 2, 3, 7, 40])
def test_even_spread_is_what_a_head_with_no_preference_computes_under_its_mask(window):
    """The sliding-window class with zero queries (every score 0) spreads each query evenly over the keys its
    window shows: even_spread's map, row by row."""
    from attnviz.attention import Recorder
    from attnviz.modern_attention import MultiHeadAttentionWithSWA

    n = 12
    torch.manual_seed(0)
    module = MultiHeadAttentionWithSWA(8, 8, 0.0, 2, sliding_window_size=window).eval()
    recorder = Recorder()
    with torch.no_grad():
        module.W_query.weight.zero_()  # every query 0: every score 0
        module(torch.randn(1, n, 8), recorder)
    weights = recorder.steps["weights"][0].numpy()  # (h, n, n)
    np.testing.assert_allclose(weights, np.broadcast_to(even_spread(n, window), weights.shape), atol=1e-6)


def test_chance_counts_the_keys_a_query_sees():
    """Even spread over the keys a query sees: the causal mask's (H_n − 1)/(n − 1) on the previous token, far
    under the cut on 54 tokens; a window of 3 puts 1/3 on it (1/2 at query 1), under the cut; a window of 2 puts
    exactly 1/2 on it at every query, over the cut, so chance alone names every head previous-token there."""
    n = 54
    tokens = np.arange(n)
    harmonic = np.sum(1 / np.arange(1, n + 1))
    assert chance_scores(tokens)["previous_token"] == pytest.approx((harmonic - 1) / (n - 1))
    assert chance_scores(tokens, window=n)["previous_token"] == pytest.approx((harmonic - 1) / (n - 1))
    assert chance_scores(tokens, window=3)["previous_token"] == pytest.approx((1 / 2 + (n - 2) / 3) / (n - 1))
    assert chance_scores(tokens, window=2)["previous_token"] == pytest.approx(0.5)
    assert chance_types(tokens) == () and chance_types(tokens, window=3) == ()
    assert chance_types(tokens, window=2) == ("previous_token",)
    assert chance_types(tokens[:3]) == ("previous_token",)  # 3 tokens: (1/2 + 1/3) / 2 = 0.42 without a window
    # no token repeats: nothing to score for duplicate-token and induction
    assert np.isnan(chance_scores(tokens, window=2)["induction"])
    # a text of 5 tokens written twice: a window of 2 never shows the key after the earlier copy (5 − 1 back)
    twice = np.r_[np.arange(5), np.arange(5)]
    assert chance_scores(twice, window=2)["induction"] == 0.0
    assert chance_scores(twice, window=5)["induction"] == pytest.approx(1 / 5)
    with pytest.raises(ValueError, match="at least 1 key"):
        even_spread(4, 0)
