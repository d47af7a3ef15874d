"""The induction lab's core (attnviz.labs.induction) and figures (attnviz.views.head_figures): hand-built maps with
known stripes, a tiny GPTModel scored layer by layer against all of its maps at once, the halves of the loss."""

import numpy as np
import pytest
import torch

from attnviz.config import AttentionConfig, InputError
from attnviz.head_types import BOS_ID, LABEL_THRESHOLD, future_mass, induction_stripe, previous_token_stripe
from attnviz.labs import induction
from attnviz.labs.train import TrainConfig, build_model, per_position_loss
from attnviz.models import attention_maps
from attnviz.views import head_figures

TINY = {"n_layers": 3, "n_heads": 2, "emb_dim": 16, "context_length": 64}


def perfect_induction_map(n: int, T: int) -> np.ndarray:
    """A causal map whose rows in the repeat attend only to i−T+1 (the rest: to token 0)."""
    weights = np.zeros((n, n), dtype=np.float32)
    weights[:, 0] = 1.0
    for row in range(n - T, n):
        weights[row] = 0.0
        weights[row, row - T + 1] = 1.0
    return weights


def test_lab_tokens_are_bos_then_x_twice_and_bounded():
    ids = induction.lab_tokens(5, seed=3)
    assert ids.shape == (11,) and ids[0] == BOS_ID
    np.testing.assert_array_equal(ids[1:6], ids[6:])
    assert ((ids[1:] >= 1000) & (ids[1:] < 30000)).all()
    np.testing.assert_array_equal(ids, induction.lab_tokens(5, seed=3))
    assert not np.array_equal(ids, induction.lab_tokens(5, seed=4))
    for bad in (induction.MIN_T - 1, induction.MAX_T + 1):
        with pytest.raises(ValueError, match="repeat length"):
            induction.lab_tokens(bad, 0)


def test_repeat_halves_split_at_the_first_copyable_position():
    T, n = 3, 7  # [BOS] a b c a b c: positions 4, 5 predict the copied b, c
    loss = np.array([9.0, 9.0, 9.0, 9.0, 1.0, 3.0])
    assert induction.repeat_halves(loss, T) == (9.0, 2.0)
    assert loss.size == n - 1
    with pytest.raises(ValueError):
        induction.repeat_halves(loss, 4)


def test_run_maps_scores_a_perfect_induction_head_1_and_a_previous_token_head_0():
    T, n = 4, 9
    perfect = perfect_induction_map(n, T)
    previous = np.eye(n, k=-1, dtype=np.float32)
    previous[0, 0] = 1.0
    maps = np.stack([perfect, previous])  # (2, n, n)
    run = induction.run_maps(maps, induction.lab_tokens(T, 0), T, 0)
    np.testing.assert_allclose(run.scores, [[1.0, 0.0]])
    np.testing.assert_allclose(run.previous, [[previous_token_stripe(perfect), 1.0]])
    assert run.best == (0, 0) and run.loss is None and run.halves is None


def next_token_map(n: int) -> np.ndarray:
    """A head with no mask that reads the next token: each row splits its weight between key i + 1 and every
    earlier key holding that same token (the last row: itself).  On [BOS] + x + x the earlier key with the next
    token is i − T + 1 — the induction stripe — without any look-up of an earlier copy."""
    weights = np.zeros((n, n), dtype=np.float32)
    for row in range(n - 1):
        weights[row, row + 1] = 1.0
    weights[n - 1, n - 1] = 1.0
    return weights


def test_a_head_that_reads_the_next_token_hits_the_stripe_but_is_not_named():
    T = 5
    n = 2 * T + 1
    ids = induction.lab_tokens(T, 0)
    reader = next_token_map(n)
    for row in range(n - T, n - 1):  # the second copy: half on i + 1, half on i − T + 1 (the same token)
        reader[row, row + 1], reader[row, row - T + 1] = 0.5, 0.5
    # x repeats: on the second copy, the key after the earlier copy holds the next token
    assert all(ids[row + 1] == ids[row - T + 1] for row in range(n - T, n - 1))
    perfect = perfect_induction_map(n, T)
    run = induction.run_maps(np.stack([reader, perfect]), ids, T, 0)
    assert run.scores[0, 0] >= LABEL_THRESHOLD  # the stripe says induction head ((4 × 0.5 + 1 × 0) / 5 = 0.4)
    np.testing.assert_allclose(run.future, [[future_mass(reader), 0.0]])
    assert run.future[0, 0] > 0.4 and run.sees_future
    assert not run.named(0, 0)  # it reads ahead: no name, whatever its score
    assert not run.named(0, 1)  # nor its layer-mate: the run's attention sees the future
    alone = induction.run_maps(perfect[None], ids, T, 0)
    assert not alone.sees_future and alone.named(0, 0)  # the causal induction head keeps its name
    masked_off = induction.run_maps(perfect[None], ids, T, 0, causal=False)  # the same map from a run with no mask
    assert masked_off.sees_future and not masked_off.named(0, 0)


def test_a_book_class_with_the_mask_off_sees_the_future_and_names_no_head():
    from attnviz import pipeline

    T = 6
    ids = induction.lab_tokens(T, 0)
    runs = {causal: induction.run_maps(pipeline.run_ids(ids.tolist(), AttentionConfig(
        variant="mha", d_in=16, d_out=16, num_heads=4, causal=causal)).steps["weights"][0], ids, T, 0)
        for causal in (True, False)}
    assert not runs[True].sees_future and np.all(runs[True].future == 0.0)
    assert runs[False].sees_future and np.all(runs[False].future > 0.2)  # random weights: ~half on later keys
    assert not any(runs[False].named(0, head) for head in range(4))


@pytest.mark.parametrize("layer", [None, 0, 2])
def test_run_model_scores_every_layer_like_all_maps_at_once(layer):
    torch.set_num_threads(1)
    model = build_model(TrainConfig(seed=5, **TINY)).eval()
    T = 6
    run = induction.run_model(model, T, seed=1, layer=layer)
    every = attention_maps(model, run.token_ids)  # (layers, heads, n, n): the reference, all at once
    np.testing.assert_allclose(run.scores, induction_stripe(every, T), atol=1e-6)
    np.testing.assert_allclose(run.previous, previous_token_stripe(every), atol=1e-6)
    assert np.all(run.future == 0.0)  # a checkpoint runs with the causal mask it was trained with
    shown = int(np.argmax(run.scores.max(axis=1))) if layer is None else layer
    assert run.layer == shown
    np.testing.assert_allclose(run.maps, every[shown], atol=1e-6)
    np.testing.assert_allclose(run.loss, per_position_loss(model, run.token_ids), atol=1e-5)
    assert run.loss.shape == (2 * T,) and run.halves is not None
    with pytest.raises(ValueError, match="layer"):
        induction.run_model(model, T, seed=1, layer=3)


# ------------------------------------------------------------------ figures

def test_stripe_heatmap_outlines_exactly_the_stripe_cells():
    T, n = 3, 7
    weights = perfect_induction_map(n, T)
    tokens = [f"t{i}" for i in range(n)]
    fig = head_figures.stripe_heatmap(weights, tokens, T, title="head", score=1.0)
    stripe = next(trace for trace in fig.data if trace.type == "scatter" and trace.name.startswith("induction"))
    assert list(stripe.y) == list(range(n - T, n))  # query positions, on the axes that name each position's token
    assert list(stripe.x) == [i - T + 1 for i in range(n - T, n)]
    assert (stripe.xaxis, stripe.yaxis) == ("x2", "y2") and fig.layout.xaxis2.ticktext[0] == "0: t0"
    np.testing.assert_allclose(stripe.customdata, 1.0)
    assert "mean 1.00" in stripe.name


def test_score_grid_prints_every_value_and_dashes_nan():
    scores = {"induction": np.array([[0.1, 0.95]]), "first_token": np.array([[np.nan, 0.5]])}
    fig = head_figures.score_grid(scores)
    assert [trace.text.tolist() for trace in fig.data] == [[["0.10", "0.95"]], [["–", "0.50"]]]
    assert [a.text for a in fig.layout.annotations] == ["induction", "first-token mass"]


def test_score_grid_writes_no_numbers_into_cells_too_narrow_for_them():
    """GPT-2 small's 12 heads in four score panels: cells ~25 px wide, where "0.14" at 11 px overlaps its
    neighbours; the values are on hover instead."""
    fig = head_figures.score_grid({name: np.full((4, 12), 0.14) for name in
                                   ("previous_token", "induction", "duplicate_token", "first_token")})
    assert all(trace.text is None and not trace.texttemplate for trace in fig.data)
    assert all("%{z:.3f}" in trace.hovertemplate for trace in fig.data)
    assert head_figures.score_grid({"induction": np.full((4, 12), 0.14)}).data[0].texttemplate == "%{text}"


def test_position_loss_shades_the_copyable_positions_and_states_both_means():
    loss = np.array([9.0, 9.0, 9.0, 9.0, 1.0, 3.0])
    fig = head_figures.position_loss(loss, 3)
    (shade,) = [shape for shape in fig.layout.shapes if shape.type == "rect"]
    assert (shade.x0, shade.x1) == (3.5, 5.5)
    texts = [a.text for a in fig.layout.annotations]
    assert "second copy: mean 2.00" in texts and "before: mean 9.00" in texts


# ------------------------------------------------------------------ the book's classes on token ids

@pytest.mark.parametrize("variant", ["causal", "mha"])
def test_run_ids_is_run_without_tokenizing(variant):
    from attnviz import pipeline
    from attnviz.tokens import encode

    config = AttentionConfig(variant=variant, d_in=16, d_out=16, num_heads=1 if variant == "causal" else 4)
    text = "Your journey starts with one step, and the journey goes on."
    by_text, by_ids = pipeline.run(text, config), pipeline.run_ids(encode(text), config)
    assert by_ids.token_ids == by_text.token_ids and by_ids.tokens == by_text.tokens
    for name, values in by_text.steps.items():
        np.testing.assert_array_equal(by_ids.steps[name], values)
    random_ids = induction.lab_tokens(9, 2)  # ids no text would tokenize to, as the lab needs
    assert pipeline.run_ids(random_ids, config).token_ids == tuple(random_ids.tolist())


@pytest.mark.parametrize("bad", [[], [50257], [-1], list(range(1025))])
def test_run_ids_refuses_ids_it_cannot_run(bad):
    from attnviz import pipeline

    with pytest.raises(InputError):
        pipeline.run_ids(bad, AttentionConfig(variant="causal", d_in=8, d_out=8))
