"""The knock-outs in the app (AppTest, the bundled model): the Induction lab's grid and loss curve, and the Heads
page's knock-out, value-weighted map, rollout and logit lens; the book's classes say why there is none."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import decode
from conftest import plotly_figures as figures
from streamlit.testing.v1 import AppTest

from attnviz import models, weights
from attnviz.head_types import repeated_random_tokens

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 180


def app(page: str, **query) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    for key, value in query.items():
        at.query_params[key] = value
    at.switch_page(page)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def figure(at: AppTest, title_start: str) -> dict:
    return next(f for f in figures(at) if f["layout"].get("title", {}).get("text", "").startswith(title_start))


def test_the_induction_lab_knocks_out_each_head_and_any_heads_together():
    at = app("pages/induction.py", weights=weights.BUNDLED_NAME)
    grid = figure(at, "knock out one head")
    delta = np.array(decode(grid["data"][0]["z"]))
    assert delta.shape == (2, 2)
    # the same numbers as the library computes for the lab's tokens
    run_ids = repeated_random_tokens(at.number_input(key="induction_T").value,
                                     at.number_input(key="induction_seed").value, bos=True)
    expected, _ = models.ablation_grid(models.load_checkpoint(str(models.BUNDLED)), run_ids,
                                       at.number_input(key="induction_T").value)
    np.testing.assert_allclose(delta, expected, atol=1e-4)
    assert (delta[0] > 1.0).all()  # the previous-token heads are needed
    curves = figure(at, "knocked out vs intact: the loss per position")
    assert [t["name"].split(" (")[0] for t in curves["data"]] == ["intact", "without L0H0"] or len(curves["data"]) == 2
    at.multiselect(key="induction_knockout").set_value(["L1H0", "L1H1"]).run()
    curves = figure(at, "knocked out vs intact: the loss per position")
    assert curves["data"][1]["name"].startswith("without L1H0, L1H1")


def test_the_induction_lab_says_why_the_books_classes_have_no_knockouts():
    at = app("pages/induction.py")
    assert any("Knocking out heads needs a model" in i.value for i in at.info)


def test_the_heads_page_knocks_out_the_focused_head_and_shows_what_attention_moves():
    at = app("pages/heads.py", weights=weights.BUNDLED_NAME, text="The cat sat on the mat. The cat sat on the")
    table = next(d.value for d in at.dataframe if "intact" in list(d.value.index))
    assert list(table.index) == ["intact", "without L0H0"] and table.shape == (2, 5)
    assert any("log-probability of" in m.label for m in at.metric)
    vw = figure(at, "head 0: ‖weight × value‖")
    assert np.asarray(decode(vw["data"][0]["z"]), dtype=float).shape[0] > 0
    figure(at, "rollout through layers 0…0")
    lens = next(d.value for d in at.dataframe if "after block 0" in list(d.value.index))
    assert list(lens.index) == ["after block 0", "after block 1"]
