"""AppTest of the Induction lab: with the book's classes (one layer, no LM head: it says there is no loss) and
with a GPTModel chosen as weights (every layer scored, the best head's layer drawn or the one picked on the page, the
per-position loss).
The numbers on the page are checked against attnviz.labs.induction / head_types computed here."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.apptest import ShownLabels, decode, figure, no_exception, open_app
from helpers.apptest import plotly_figures as figures
from helpers.checkpoints import own_session_models
from helpers.maps import cells_shown
from streamlit.testing.v1 import AppTest

from attnviz import head_types, pipeline, weights
from attnviz.config import AttentionConfig
from attnviz.labs import induction
from attnviz.labs.train import TrainConfig, build_model
from attnviz.ui.induction import CHECKPOINT_CAUSAL, NO_LOSS, window_caption

NOT_NAMED = "No head is named a type here: these heads see the future"

TIMEOUT = 120
SESSION = "induction-lab-session"


def lab(**query) -> AppTest:
    at = open_app("pages/induction.py", timeout=TIMEOUT, **query)
    no_exception(at)
    return at


def stripe_of(fig: dict) -> dict:
    return next(t for t in fig["data"] if t["type"] == "scatter" and t["name"].startswith("induction stripe"))


def test_book_classes_show_the_stripe_and_say_there_is_no_loss():
    at = lab(variant="causal", d_in="8", d_out="8", preset="custom", knockout="L0H0")
    assert at.title[0].value == "Induction lab"
    assert any(info.value == NO_LOSS for info in at.info)
    # the link's knock-out: no model to knock heads out of, and the lab says it set the link's value aside
    assert "knockout" not in at.query_params
    knockout_notice = ("Ignored URL parameter knockout='L0H0': knocking out heads needs a model that predicts tokens, "
                       "and the book's classes do not.")
    assert [w.value.replace("\\", "") for w in at.warning] == [knockout_notice]
    T = int(at.text_input(key="induction_T").value)
    assert T == induction.DEFAULT_T
    heat = figure(at, "head 0: weights on [BOS] + x + x")
    stripe = stripe_of(heat)
    n = 2 * T + 1
    assert decode(stripe["y"]).tolist() == list(range(n - T, n))  # the repeat's queries, at their positions
    # the page's map is the pipeline's weights for these tokens: its stripe mean is the score it prints
    ids = induction.lab_tokens(T, induction.DEFAULT_SEED)
    config = AttentionConfig(variant="causal", d_in=8, d_out=8, num_heads=1)
    expected = pipeline.run_ids(ids.tolist(), config).steps["weights"][0]  # (1, n, n)
    shown = cells_shown(heat)
    assert shown.shape == (n, n)
    np.testing.assert_allclose(np.nan_to_num(shown), expected[0], atol=1e-6)
    assert at.metric[0].value == f"{head_types.induction_stripe(expected, T).max():.2f}"
    # a new T: a new sequence of 2T + 1 tokens
    at.text_input(key="induction_T").input("7").run()
    assert not at.exception, [e.value for e in at.exception]
    assert decode(stripe_of(figure(at, "head 0: weights"))["y"]).tolist() == list(range(8, 15))  # n = 15
    assert [w.value.replace("\\", "") for w in at.warning] == [knockout_notice]  # said until a model is picked
    # a text that is no T in range stays in the box as typed, and the warning under it names it, the range and the T
    # the lab draws instead (a number box kept such a number in view, red, while the page drew its last T)
    for typed, said in (("9" * 20, "99,999,999,999,999,999,999 is outside 2 … 200"),  # past 2**53, too
                        ("7.5", "'7.5' is not a whole number (2 … 200)"), ("", "is empty (2 … 200)")):
        at.text_input(key="induction_T").input(typed).run()
        no_exception(at)
        assert at.text_input(key="induction_T").value == typed
        assert [w.value.replace("\\", "") for w in at.warning] == [  # under the box, then the link's notice
            f"Repeat length T {said}: the lab uses T = 25.", knockout_notice]
        assert decode(stripe_of(figure(at, "head 0: weights on [BOS] + x + x (T = 25)"))["y"]).tolist() == \
            list(range(26, 51))  # the default T's sequence, n = 51
        assert at.query_params["T"] in (typed, [typed]) or typed == ""  # the link reopens the box as it is
    at.text_input(key="induction_T").input(" +10 ").run()  # a whole number, written back the way the URL holds one
    assert at.text_input(key="induction_T").value == "10"
    assert [w.value.replace("\\", "") for w in at.warning] == [knockout_notice]
    assert figure(at, "head 0: weights on [BOS] + x + x (T = 10)")


def test_an_empty_text_does_not_matter_to_the_lab_and_is_kept():
    """The lab runs random tokens, not the text.  The link's seed goes through its box's check: one that is no whole
    number opens in the box, and the lab says, under it, that it uses the default seed — the one the page draws."""
    at = lab(text="", variant="causal", d_in="8", d_out="8", preset="custom", token_seed="x1")
    assert at.text_input(key="induction_seed").value == "x1"
    assert [w.value.replace("\\", "") for w in at.warning] == [
        "Seed of the random tokens 'x1' is not a whole number (0 … 2,147,483,647): the lab uses seed 0."]
    assert not any("Type some text" in w.value for w in at.warning)  # the lab runs random tokens, not the text
    assert at.title[0].value == "Induction lab"
    T = int(at.text_input(key="induction_T").value)
    assert stripe_of(figure(at, "head 0: weights on [BOS] + x + x"))
    ids = induction.lab_tokens(T, induction.DEFAULT_SEED)
    expected = pipeline.run_ids(ids.tolist(), AttentionConfig(variant="causal", d_in=8, d_out=8, num_heads=1))
    assert at.metric[0].value == f"{head_types.induction_stripe(expected.steps['weights'][0], T).max():.2f}"
    assert at.sidebar.text_area(key="text").value == ""


def test_with_the_mask_off_the_book_classes_are_scored_but_no_head_is_named():
    """T = 2 on 4 random heads with the mask off: head 1's stripe holds 0.44 of the repeat's weight — past the 0.4 the
    lab called 'an induction head' — yet every head gives later tokens weight, so it names none and says why, and its
    map shows that weight."""
    at = lab(variant="mha", d_in="16", d_out="16", num_heads="4", preset="custom", causal="false")
    assert any(NOT_NAMED in info.value for info in at.info)  # at the default T = 25 too (best score 0.02 there)
    at.text_input(key="induction_T").input("2").run()
    assert not at.exception, [e.value for e in at.exception]
    ids = induction.lab_tokens(2, induction.DEFAULT_SEED)
    config = AttentionConfig(variant="mha", d_in=16, d_out=16, num_heads=4, causal=False)
    expected = induction.run_maps(pipeline.run_ids(ids.tolist(), config).steps["weights"][0], ids, 2, 0, causal=False)
    grid = figure(at, "every head on [BOS] + x + x, T = 2")
    np.testing.assert_allclose(decode(grid["data"][0]["z"]), expected.scores, atol=1e-6)  # the scores are shown
    assert at.metric[0].value == f"{expected.scores.max():.2f}" == "0.44"
    assert any(c.value == "head 1: not named: this attention sees the future" for c in at.caption)
    assert any(NOT_NAMED in info.value and "*Causal mask* is off" in info.value for info in at.info)
    # the map draws the weight each later key got, as the weight it is: nothing is greyed as "masked"
    heat = figure(at, "head 1: weights on [BOS] + x + x")
    shown = cells_shown(heat)
    assert not np.isnan(shown).any() and not any(t.get("name") == "masked" for t in heat["data"])
    np.testing.assert_allclose(shown, expected.maps[1], atol=1e-6)


def test_at_t_2_the_lab_does_not_tell_an_induction_head_from_a_previous_token_head():
    """At T = 2 the stripe A[i, i−1] is the previous-token stripe over rows of 4 and 5 keys: random heads reach
    0.45–0.5 there with the mask on, and the lab called the best 'an induction head'."""
    at = lab(variant="mha", d_in="16", d_out="16", num_heads="4", preset="custom")
    at.text_input(key="induction_T").input("2").run()
    assert not at.exception, [e.value for e in at.exception]
    assert float(at.metric[0].value) >= 0.4
    verdict = next(c.value for c in at.caption if c.value.startswith("head "))
    assert "an induction head or a previous-token head: at T = 2 the stripe is the token before" in verdict
    at.text_input(key="induction_T").input("3").run()
    assert not any("previous-token head" in c.value for c in at.caption)


def test_a_sliding_window_narrower_than_the_stripe_says_why_every_score_is_0():
    at = lab(variant="swa", sliding_window_size="4")  # T = 25: the stripe is 24 keys back, the window shows 3
    assert any(info.value == window_caption(4, induction.DEFAULT_T) for info in at.info)
    assert not decode(figure(at, "every head on [BOS] + x + x")["data"][0]["z"]).any()
    assert not any(NOT_NAMED in info.value for info in at.info)  # the window hides the future too
    # the map greys what the window hides, as the Heads page does: every key 4 or more behind its query
    shown = cells_shown(figure(at, "head 0: weights on [BOS] + x + x"))
    n = 2 * induction.DEFAULT_T + 1
    behind = np.subtract.outer(np.arange(n), np.arange(n))  # (n, n): i − j
    np.testing.assert_array_equal(np.isnan(shown), (behind < 0) | (behind >= 4))
    at.text_input(key="induction_T").input("4").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not any("sliding window" in info.value for info in at.info)  # T ≤ W: the stripe is inside the window


def first_map(at: AppTest) -> dict:
    """The first head map the page draws (the stripe's heatmap)."""
    return next(f for f in figures(at) if "weights on [BOS] + x + x" in f["layout"].get("title", {}).get("text", ""))


def test_the_bundled_model_opens_on_the_head_the_lab_names_and_the_layer_is_picked_beside_it():
    """The first map drawn is the head the headline names, in its own layer (not the sidebar's Layer), and the
    lab's own Layer widget shows another layer's heads."""
    at = lab(weights="bundled model")
    T, seed = induction.DEFAULT_T, induction.DEFAULT_SEED
    model = weights.load(weights.bundled_option().ref)
    expected = induction.run_model(model, T, seed)
    layer, head = expected.best
    assert (layer, head) == (1, 0)
    score = expected.scores[layer, head]
    assert at.metric[0].value == f"{score:.2f}"
    assert any(c.value == f"L{layer}H{head}: an induction head" for c in at.caption)
    heat = first_map(at)
    assert heat["layout"]["title"]["text"].startswith(f"L{layer}H{head}: weights on [BOS] + x + x (T = {T})")
    assert stripe_of(heat)["name"].endswith(f"(mean {score:.2f})")
    shown = np.nan_to_num(cells_shown(heat))
    np.testing.assert_allclose(shown, expected.maps[head], atol=1e-6)
    assert head_types.induction_stripe(shown[None], T)[0] == pytest.approx(score, abs=1e-6)  # the map's stripe mean
    assert at.selectbox(key="induction_layer").value == layer and at.selectbox(key="induction_head").value == head
    assert "map_layer" not in at.query_params and "head" not in at.query_params  # the defaults: left out
    # layer 0 picked beside the head: its maps, its best head (the head follows its default)
    at.selectbox(key="induction_layer").set_value(0).run()
    assert not at.exception, [e.value for e in at.exception]
    zero = induction.run_model(model, T, seed, layer=0)
    head0 = int(zero.scores[0].argmax())
    heat = first_map(at)
    assert heat["layout"]["title"]["text"].startswith(f"L0H{head0}: weights on [BOS] + x + x")
    np.testing.assert_allclose(np.nan_to_num(cells_shown(heat)), zero.maps[head0], atol=1e-6)
    assert at.query_params["map_layer"] in ("0", ["0"])
    assert at.metric[0].value == f"{score:.2f}"  # the headline still names the best head
    assert not any("the sidebar's *Layer*)" in c.value for c in at.caption)


def test_the_layer_and_head_boxes_read_the_scores_of_the_t_they_show():
    """Each Layer and Head option carries its best induction score ("layer 1 · 0.74"). A new T or seed changes the
    scores: the closed boxes read the new ones, as the grid and the open lists do, never the label of the scores
    before ("layer 1 · 0.74" over T = 10's 0.71). A layer picked by the user stays picked, with its new label, and in
    the URL; a rerun that changes no score keeps it too."""
    at = lab(weights="bundled model")
    shown = ShownLabels(at)
    assert shown.of(at, "induction_layer").startswith("layer 1 · ") and shown.agree(at, "induction_head")
    at.text_input(key="induction_T").input("10").run()
    shown.read(at)
    assert not at.exception, [e.value for e in at.exception]
    scores = induction.run_model(weights.load(weights.bundled_option().ref), 10, induction.DEFAULT_SEED).scores
    assert shown.of(at, "induction_layer") == f"layer 1 · {np.nanmax(scores[1]):.2f}"
    assert shown.of(at, "induction_head") == f"head 0 · {scores[1, 0]:.2f}"

    shown.pick(at, "induction_layer", 0)
    assert shown.agree(at, "induction_layer") and shown.agree(at, "induction_head")
    at.text_input(key="induction_seed").input("7").run()
    shown.read(at)
    assert at.selectbox(key="induction_layer").value == 0 and at.query_params["map_layer"] in ("0", ["0"])
    assert shown.agree(at, "induction_layer") and shown.agree(at, "induction_head")
    shown.read(at.run())  # nothing changed: the pick stays, and so does what the boxes read
    assert at.selectbox(key="induction_layer").value == 0
    assert shown.agree(at, "induction_layer") and shown.agree(at, "induction_head")


def test_the_loss_drop_has_one_sign_the_arrow():
    """The loss metric read "↓ -11.83 vs before": Streamlit's arrow and the text's minus. The text is the size of the
    change; the arrow, green for a drop, its direction."""
    at = lab(weights="bundled model")
    first, second = induction.run_model(weights.load(weights.bundled_option().ref), induction.DEFAULT_T,
                                        induction.DEFAULT_SEED).halves
    loss = at.metric[1]
    assert second < first
    assert loss.delta == f"{first - second:.2f} nats" and not loss.delta.startswith(("-", "−", "+"))
    assert loss.proto.delta_description == "vs before"
    assert loss.proto.direction == loss.proto.MetricDirection.DOWN
    assert loss.proto.color == loss.proto.MetricColor.GREEN


@pytest.fixture
def session_model(monkeypatch):
    from attnviz.ui import weights as ui_weights

    monkeypatch.setattr(ui_weights, "session_id", lambda: SESSION)
    model = build_model(TrainConfig(seed=3, n_layers=2, n_heads=2, emb_dim=16, context_length=64)).eval()
    own_session_models(monkeypatch)
    return weights.register_session_model(SESSION, "lab-model", model), model


def test_a_model_gets_every_layer_scored_the_labs_layer_drawn_and_its_loss(session_model):
    option, model = session_model
    at = lab(weights=option.name, layer="0")  # the sidebar's Layer: not the lab's
    T = int(at.text_input(key="induction_T").value)
    assert T == induction.DEFAULT_T
    at.text_input(key="induction_seed").input("5").run()
    at.selectbox(key="induction_layer").set_value(1).run()
    assert not at.exception, [e.value for e in at.exception]
    expected = induction.run_model(model, T, 5, layer=1)
    grid = figure(at, f"every head on [BOS] + x + x, T = {T}")
    np.testing.assert_allclose(decode(grid["data"][0]["z"]), expected.scores, atol=1e-6)
    np.testing.assert_allclose(decode(grid["data"][1]["z"]), expected.previous, atol=1e-6)
    heat = figure(at, "L1H")  # layer 1, the lab's layer
    head = int(heat["layout"]["title"]["text"][3])
    np.testing.assert_allclose(np.nan_to_num(cells_shown(heat)), expected.maps[head], atol=1e-6)
    loss = figure(at, "loss at each position")
    np.testing.assert_allclose(decode(loss["data"][0]["y"]), expected.loss, atol=1e-4)
    first, second = expected.halves
    assert at.metric[1].value == f"{second:.2f} nats"
    assert not any(info.value == NO_LOSS for info in at.info)
    assert CHECKPOINT_CAUSAL not in [c.value for c in at.caption] and not any(NOT_NAMED in i.value for i in at.info)
    # a T longer than the model's context allows is not used: 2T + 1 ≤ 64; the box says so and the lab draws 25
    at.text_input(key="induction_T").input("32").run()
    assert "Repeat length T 32 is outside 2 … 31: the lab uses T = 25." in [w.value.replace("\\", "")
                                                                              for w in at.warning]
    assert figure(at, "every head on [BOS] + x + x, T = 25")


def test_a_model_runs_with_its_causal_mask_and_says_so_when_the_sidebar_mask_is_off(session_model):
    option, model = session_model
    at = lab(weights=option.name, causal="false")
    assert CHECKPOINT_CAUSAL in [c.value for c in at.caption]
    T = int(at.text_input(key="induction_T").value)
    expected = induction.run_model(model, T, induction.DEFAULT_SEED)  # causal, as trained
    grid = figure(at, f"every head on [BOS] + x + x, T = {T}")
    np.testing.assert_allclose(decode(grid["data"][0]["z"]), expected.scores, atol=1e-6)
    assert not any(NOT_NAMED in info.value for info in at.info)


@pytest.mark.parametrize("context", [1, 4])
def test_a_model_whose_context_cannot_hold_the_shortest_repeat_says_so(tmp_path, monkeypatch, context):
    """A checkpoint with n_positions 4 (or 1): the lab says its context cannot hold the shortest repeat, with no T
    to pick (a range from 2 to 1 would be a StreamlitInvalidMinMaxError)."""
    pytest.importorskip("transformers")
    from helpers.checkpoints import random_gpt2, use_checkpoints, write_checkpoints

    write_checkpoints(tmp_path, "short-context", random_gpt2(0, n_layer=1, n_head=2, n_embd=64, n_positions=context))
    use_checkpoints(monkeypatch, tmp_path)
    at = lab(weights="short-context", text="Kept as typed")
    assert any(f"This model's context is {context} tokens" in info.value and "needs 5" in info.value
               for info in at.info)
    assert not at.main.text_input and not at.main.number_input  # no T to pick
    assert at.sidebar.text_area(key="text").value == "Kept as typed"
