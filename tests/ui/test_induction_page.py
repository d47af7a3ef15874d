"""AppTest of the Induction lab: with the book's classes (one layer, no LM head: it says there is no loss) and
with a GPTModel chosen as weights (every layer scored, the sidebar's layer drawn, the per-position loss).
The numbers on the page are checked against attnviz.labs.induction / head_types computed here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.apptest import decode
from helpers.apptest import plotly_figures as figures
from helpers.maps import cells_shown
from streamlit.testing.v1 import AppTest

from attnviz import head_types, pipeline, weights
from attnviz.config import AttentionConfig
from attnviz.labs import induction
from attnviz.labs.train import TrainConfig, build_model
from attnviz.ui.induction import NO_LOSS

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120
SESSION = "induction-lab-session"


def lab(**query) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    for key, value in query.items():
        at.query_params[key] = value
    at.switch_page("pages/induction.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def figure(at: AppTest, title_start: str) -> dict:
    return next(f for f in figures(at) if f["layout"].get("title", {}).get("text", "").startswith(title_start))


def stripe_of(fig: dict) -> dict:
    return next(t for t in fig["data"] if t["type"] == "scatter" and t["name"].startswith("induction stripe"))


def test_book_classes_show_the_stripe_and_say_there_is_no_loss():
    at = lab(variant="causal", d_in="8", d_out="8", preset="custom")
    assert at.title[0].value == "Induction lab"
    assert any(info.value == NO_LOSS for info in at.info)
    T = at.number_input(key="induction_T").value
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
    at.number_input(key="induction_T").set_value(7).run()
    assert not at.exception, [e.value for e in at.exception]
    assert decode(stripe_of(figure(at, "head 0: weights"))["y"]).tolist() == list(range(8, 15))  # n = 15


def test_an_empty_text_does_not_matter_to_the_lab_and_is_kept():
    at = lab(text="", variant="causal", d_in="8", d_out="8", preset="custom")
    assert not any("Type some text" in w.value for w in at.warning)  # the lab runs random tokens, not the text
    assert at.title[0].value == "Induction lab"
    T = at.number_input(key="induction_T").value
    assert stripe_of(figure(at, "head 0: weights on [BOS] + x + x"))
    ids = induction.lab_tokens(T, induction.DEFAULT_SEED)
    expected = pipeline.run_ids(ids.tolist(), AttentionConfig(variant="causal", d_in=8, d_out=8, num_heads=1))
    assert at.metric[0].value == f"{head_types.induction_stripe(expected.steps['weights'][0], T).max():.2f}"
    assert at.sidebar.text_area(key="text").value == ""


@pytest.fixture
def session_model(monkeypatch):
    from attnviz.ui import weights as ui_weights

    monkeypatch.setattr(ui_weights, "session_id", lambda: SESSION)
    model = build_model(TrainConfig(seed=3, n_layers=2, n_heads=2, emb_dim=16, context_length=64)).eval()
    option = weights.register_session_model(SESSION, "lab-model", model)
    yield option, model
    weights.forget_session_models(SESSION)


def test_a_model_gets_every_layer_scored_the_sidebar_layer_drawn_and_its_loss(session_model):
    option, model = session_model
    at = lab(weights=option.name, layer="1")
    T = at.number_input(key="induction_T").value
    assert T == induction.DEFAULT_T
    at.number_input(key="induction_seed").set_value(5).run()
    assert not at.exception, [e.value for e in at.exception]
    expected = induction.run_model(model, T, 5, layer=1)
    grid = figure(at, f"every head on [BOS] + x + x, T = {T}")
    np.testing.assert_allclose(decode(grid["data"][0]["z"]), expected.scores, atol=1e-6)
    np.testing.assert_allclose(decode(grid["data"][1]["z"]), expected.previous, atol=1e-6)
    heat = figure(at, "L1H")  # layer 1, the sidebar's layer
    head = int(heat["layout"]["title"]["text"][3])
    np.testing.assert_allclose(np.nan_to_num(cells_shown(heat)), expected.maps[head], atol=1e-6)
    loss = figure(at, "loss at each position")
    np.testing.assert_allclose(decode(loss["data"][0]["y"]), expected.loss, atol=1e-4)
    first, second = expected.halves
    assert at.metric[1].value == f"{second:.2f} nats"
    assert not any(info.value == NO_LOSS for info in at.info)
    # a T longer than the model's context allows is not offered: 2T + 1 ≤ 64
    assert at.number_input(key="induction_T").max == 31


@pytest.mark.parametrize("context", [1, 4])
def test_a_model_whose_context_cannot_hold_the_shortest_repeat_says_so(tmp_path, monkeypatch, context):
    """A checkpoint with n_positions 4: the lab offered T from 2 to 1 and showed StreamlitInvalidMinMaxError."""
    pytest.importorskip("transformers")
    from helpers.checkpoints import random_gpt2, use_checkpoints, write_checkpoints

    write_checkpoints(tmp_path, "short-context", random_gpt2(0, n_layer=1, n_head=2, n_embd=64, n_positions=context))
    use_checkpoints(monkeypatch, tmp_path)
    at = lab(weights="short-context", text="Kept as typed")
    assert any(f"This model's context is {context} tokens" in info.value and "needs 5" in info.value
               for info in at.info)
    assert not at.main.number_input  # no T to pick
    assert at.sidebar.text_area(key="text").value == "Kept as typed"
