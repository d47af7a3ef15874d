"""The knock-outs in the app (AppTest, the bundled model): the Induction lab's grid and loss curve, and the Heads
page's knock-out, value-weighted map, rollout and logit lens; the book's classes say why there is none."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.apptest import decode, figure, no_exception, open_app
from helpers.maps import cells_shown
from streamlit.testing.v1 import AppTest

from attnviz import models, weights
from attnviz.head_types import repeated_random_tokens
from attnviz.tokens import encode, pieces
from attnviz.views import margins

TIMEOUT = 180
TEXT = "The cat sat on the mat. The cat sat on the"


def app(page: str, **query) -> AppTest:
    at = open_app(page, timeout=TIMEOUT, **query)
    no_exception(at)
    return at


def test_the_induction_lab_knocks_out_each_head_and_any_heads_together():
    at = app("pages/induction.py", weights=weights.BUNDLED_NAME)
    grid = figure(at, "knock out one head")
    delta = np.array(decode(grid["data"][0]["z"]))
    assert delta.shape == (2, 2)
    # the same numbers as the library computes for the lab's tokens
    run_ids = repeated_random_tokens(int(at.text_input(key="induction_T").value),
                                     int(at.text_input(key="induction_seed").value), bos=True)
    expected, _ = models.ablation_grid(models.load_checkpoint(str(models.BUNDLED)), run_ids,
                                       int(at.text_input(key="induction_T").value))
    np.testing.assert_allclose(delta, expected, atol=1e-4)
    assert (delta[0] > 1.0).all()  # the previous-token heads are needed
    curves = figure(at, "knocked out vs intact: the loss per position")
    assert [t["name"].split(" (")[0] for t in curves["data"]] == ["intact", "without L0H0"] or len(curves["data"]) == 2
    at.multiselect(key="induction_knockout").set_value(["L1H0", "L1H1"]).run()
    curves = figure(at, "knocked out vs intact: the loss per position")
    assert curves["data"][1]["name"].startswith("without L1H0, L1H1")
    # T = 10, seed 23: the intact loss on the second copy rounds to 2.44 through the knock-out grid's forward pass and
    # to 2.43 through the lab's (float rounding): the page says one number for it, its metric's, in the grid's title
    # and the curves' legend
    at.text_input(key="induction_T").input("10")
    at.text_input(key="induction_seed").input("23").run()
    no_exception(at)
    said = next(m.value for m in at.metric if m.label == "Loss on the second copy").removesuffix(" nats")
    assert f"(intact {said} nats)" in figure(at, "knock out one head")["layout"]["title"]["text"]
    curves = figure(at, "knocked out vs intact: the loss per position")
    assert curves["data"][0]["name"] == f"intact (second copy {said})", (said, curves["data"][0]["name"])


def test_the_induction_lab_says_why_the_books_classes_have_no_knockouts():
    at = app("pages/induction.py")
    assert any("Knocking out heads needs a model" in i.value for i in at.info)


def test_the_heads_page_knocks_out_the_focused_head_and_shows_what_attention_moves():
    at = app("pages/heads.py", weights=weights.BUNDLED_NAME, text=TEXT)
    assert any(e.label.startswith("What this attention does") for e in at.expander)
    assert not any("intact" in list(d.value.index) for d in at.dataframe)  # collapsed: nothing computed yet
    at.session_state["heads_what"] = True  # the learner opens it
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    table = next(d.value for d in at.dataframe if "intact" in list(d.value.index))
    assert list(table.index) == ["intact", "without L0H0"] and table.shape == (2, 5)
    model = models.load_checkpoint(str(models.BUNDLED))
    ids = encode(TEXT)
    # the metrics: the intact top token's log-probability intact, and without L0H0 with the change as its delta, at
    # the last position, as the whole sequence through the model with the head zeroed gives them
    intact, without = (models.ablate(model, ids, heads)[-1].log_softmax(-1) for heads in ([], [(0, 0)]))
    top = int(intact.argmax())
    piece = pieces([top])[0].piece
    shown = [m for m in at.metric if "log-probability of" in m.label]
    assert [m.label for m in shown] == [f"log-probability of {piece!r}, intact (its top token)",
                                        f"log-probability of {piece!r} without L0H0"]
    assert float(shown[0].value) == pytest.approx(float(intact[top]), abs=2e-3)
    assert np.exp(float(shown[0].value)) == pytest.approx(float(table.loc["intact"].iloc[0].split("(")[-1].rstrip(
        "%)")) / 100, abs=1e-3)  # the table's intact top token, in percent
    assert not shown[0].delta
    assert float(shown[1].value) == pytest.approx(float(without[top]), abs=2e-3)
    change, words = shown[1].delta.split(" ", 1)
    assert words == "from intact" and float(change) == pytest.approx(float(without[top] - intact[top]), abs=2e-3)

    at.session_state["heads_what_tab"] = "‖weight × value‖"
    at.run()
    vw = figure(at, "head 0: ‖weight × value‖")
    z = cells_shown(vw)
    expected = models.value_weighted(model, ids)[0, 0]  # (n, n)
    lower = np.tril_indices(len(ids))
    np.testing.assert_allclose(z[lower], expected[lower], atol=1e-4)
    assert np.isnan(z[np.triu_indices(len(ids), 1)]).all()  # the future masked (grey), as on the weights beside it
    bar = next(trace for trace in vw["data"] if trace.get("name") == "colour bar")
    title = bar["marker"]["colorbar"]["title"]["text"]
    # the colour bar's title in lines its margin holds, so the map beside the weights is drawn as large as they are
    assert title.replace("<br>", " ") == "‖weight × value‖" and margins.text_px(title.split("<br>")) <= 70

    at.session_state["heads_what_tab"] = "Rollout, logit lens"
    at.run()
    figure(at, "rollout through layers 0…0")
    lens = next(d.value for d in at.dataframe if "after block 0" in list(d.value.index))
    assert list(lens.index) == ["after block 0", "after block 1"]


def test_the_heads_page_computes_no_knock_out_until_asked(monkeypatch):
    """A layer switch or a new text must not pay for a forward pass of the model the learner did not ask for."""
    def refuse(*args, **kwargs):
        raise AssertionError("computed while collapsed")

    for name in ("ablate", "ablate_next", "logit_lens", "iter_layer_maps", "value_norms"):
        monkeypatch.setattr(models, name, refuse)
    at = app("pages/heads.py", weights=weights.BUNDLED_NAME, text="The cat sat on the mat.")
    at.sidebar.selectbox(key="layer").set_value(1).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not any("intact" in list(d.value.index) for d in at.dataframe)  # nothing drawn from a cache either
    assert not any("log-probability of" in m.label for m in at.metric)
