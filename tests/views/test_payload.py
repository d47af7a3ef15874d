"""Guards on what the Heads page sends at n = 1024, and on reruns that must not redo tensor work.

The numbers behind these bounds are in benchmarks/README.md ("Payload per page").  Sizes are read
from the element protos AppTest receives (benchmarks/payload.py), i.e. what the websocket carries.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import streamlit as st
from helpers.apptest import follow_link, plotly_figures
from helpers.maps import images, pixels
from streamlit.testing.v1 import AppTest

from attnviz import pipeline, tokens
from attnviz.config import AttentionConfig
from attnviz.views import figures

ROOT = Path(__file__).resolve().parents[2]
N = 1024
MAX_FIGURE_BYTES = 3 * 1024 * 1024
WINDOW = 256


def _load_payload():
    spec = importlib.util.spec_from_file_location("attnviz_benchmarks_payload", ROOT / "benchmarks" / "payload.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


payload = _load_payload()


@pytest.fixture(scope="module")
def long_text() -> str:
    text = payload.text_of_tokens(N)
    assert len(tokens.encode(text)) == N
    return text


@pytest.fixture
def counted(monkeypatch) -> dict[str, list]:
    """Count pipeline.run and figures.heads_grid calls (AppTest runs the app in this process).

    The resource cache is process-wide and shared with other tests: clear it first so the first run
    really computes, and after, so no trace made through the wrapper outlives the test.
    """
    st.cache_resource.clear()
    calls: dict[str, list] = {"run": [], "heads_grid": []}
    real_run, real_grid = pipeline.run, figures.heads_grid

    def run(text, config):
        calls["run"].append(config)
        return real_run(text, config)

    def heads_grid(*args, **kwargs):
        calls["heads_grid"].append(kwargs.get("focus"))
        return real_grid(*args, **kwargs)

    monkeypatch.setattr(pipeline, "run", run)
    monkeypatch.setattr(figures, "heads_grid", heads_grid)
    yield calls
    st.cache_resource.clear()


def heads_app(text: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["text"] = text
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def shape_drawn(trace: dict) -> tuple[int, ...]:
    """(rows, cols) of a heatmap's z or an image's pixels."""
    if trace["type"] == "image":
        return pixels(trace).shape[:2]
    z = trace["z"]
    if isinstance(z, dict):  # NumPy array sent as {"dtype", "bdata", "shape"}
        return tuple(int(s) for s in str(z["shape"]).split(","))
    return (len(z), len(z[0]) if z else 0)


def test_heads_page_at_1024_tokens_sends_less_than_3_mb_of_figures(long_text, counted):
    at = heads_app(long_text)
    assert f"{N:,} tokens" in at.caption[0].value
    sizes = payload.element_sizes(at)
    assert sizes["plotly_charts"] >= 2
    assert sizes["plotly_bytes"] < MAX_FIGURE_BYTES, f"{sizes['plotly_bytes']:,} bytes of Plotly JSON"
    assert sizes["total_bytes"] < MAX_FIGURE_BYTES + 512 * 1024


def test_heads_grid_is_downsampled_and_the_focused_view_is_a_window(long_text, counted):
    at = heads_app(long_text)
    figs = plotly_figures(at)
    grid = next(fig for fig in figs if "all 12 heads" in fig["layout"]["title"]["text"])
    assert "downsampled" in grid["layout"]["title"]["text"]
    tiles = images(grid)  # one map a head
    assert len(tiles) == len(grid["layout"]["meta"]["tiles"]) == 12 and grid["layout"]["meta"]["size"] == 64
    assert {shape_drawn(tile) for tile in tiles} == {(64, 64)}
    focused = next(fig for fig in figs if fig["layout"]["title"]["text"].startswith("head "))
    rows, cols = shape_drawn(images(focused)[0])
    assert rows <= WINDOW and cols <= WINDOW
    for fig in figs:  # no map anywhere on the page is drawn at full 1024 × 1024
        if fig is grid:
            continue
        for trace in fig["data"]:
            if trace["type"] in ("heatmap", "image"):
                assert max(shape_drawn(trace)) <= WINDOW, fig["layout"]["title"]["text"]


def test_reruns_with_unchanged_inputs_do_no_tensor_work(long_text, counted):
    at = heads_app(long_text)
    assert len(counted["run"]) == 1
    grids = len(counted["heads_grid"])
    assert grids == 1

    at.selectbox(key="heads_focus").set_value(3).run()  # another focused head
    assert not at.exception
    assert len(counted["run"]) == 1

    follow_link(at, "pages/steps.py")  # another page, same inputs
    assert not at.exception
    assert len(counted["run"]) == 1
    follow_link(at, "pages/heads.py")  # and back
    assert not at.exception
    assert len(counted["run"]) == 1

    at.segmented_control(key="heads_stage").set_value("scores").run()  # another stage of the same run
    assert len(counted["run"]) == 1
    follow_link(at, "pages/shapes.py")
    follow_link(at, "pages/heads.py")
    assert len(counted["run"]) == 1

    at.sidebar.toggle(key="causal").set_value(False).run()  # a real change does run (the counter works)
    assert len(counted["run"]) == 2


def grid_marker(at: AppTest) -> list[str]:
    grid = next(fig for fig in plotly_figures(at) if "all " in fig["layout"]["title"]["text"])
    return [note["text"] for note in grid["layout"]["annotations"] if "▶" in note["text"]]


def test_page_switch_back_reuses_the_grid_and_marks_the_focused_head(counted):
    at = heads_app("Your journey starts with one step")
    at.selectbox(key="heads_focus").set_value(3).run()
    assert grid_marker(at) == ["▶ head 3"]
    grids = len(counted["heads_grid"])
    follow_link(at, "pages/shapes.py")
    follow_link(at, "pages/heads.py")
    assert not at.exception
    assert at.selectbox(key="heads_focus").value == 3
    assert grid_marker(at) == ["▶ head 3"]
    assert len(counted["heads_grid"]) == grids  # same inputs, same figure: from the cache


def test_plotly_serializes_with_orjson(monkeypatch):
    """``st.plotly_chart`` writes every figure with ``plotly.io.to_json``, whose engine is orjson when it is installed
    (a requirement): the big focused maps are written several times faster than with the json module
    (benchmarks/README.md, "A click draws its products first; orjson writes the figures")."""
    import orjson
    import plotly.io as pio

    calls = []
    dumps = orjson.dumps
    monkeypatch.setattr(orjson, "dumps", lambda *args, **kwargs: calls.append(1) or dumps(*args, **kwargs))
    trace = pipeline.run("The cat sat.", AttentionConfig(variant="mha", d_in=8, d_out=8, num_heads=2))
    fig = figures.attention_heatmap(trace.steps["weights"][0, 0], trace.tokens, "weights", validate=False,
                                    width=figures.FOCUSED_MAP_PX)
    text = pio.to_json(fig, validate=False)
    assert calls and '"image"' in text
