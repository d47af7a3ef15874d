"""The Heads page after the text or the settings change under a selection made on the last view: what the focused
head's pickers, map selection, window and statistics table kept from that view never shows or sums what the new
view does not have."""

from __future__ import annotations

import re

from helpers.apptest import ShownLabels, no_exception, open_app
from helpers.apptest import plotly_figures as figures
from streamlit.testing.v1 import AppTest

app = open_app


def summed(at: AppTest) -> list[str]:
    return [block.value for block in at.markdown if re.search(r"\bkeys? selected\b", block.value)]


def test_tokens_picked_by_name_are_dropped_when_the_text_changes():
    """Picks are positions named by the pieces of the text they were picked on: another text of the same length keeps
    no pick (no picker shows "5: ·step" over a text without "step", nor sums position 5 of the new one)."""
    at = app(text="Your journey starts with one step", num_heads="4")
    at.session_state["heads_pick"] = True  # the expander open
    at.run()
    at.multiselect(key="heads_pick_queries").set_value([5])
    at.multiselect(key="heads_pick_keys").set_value([4]).run()
    no_exception(at)
    assert summed(at) == ["**1 query, 1 key selected** (head 0)"]

    at.sidebar.text_area(key="text").set_value("one two three four five six").run()  # six tokens too
    no_exception(at)
    assert at.multiselect(key="heads_pick_queries").value == []
    assert at.multiselect(key="heads_pick_keys").value == []
    assert summed(at) == []

    at.multiselect(key="heads_pick_queries").set_value([2]).run()  # the new text's picks work as before
    assert summed(at) == ["**1 query, 0 keys selected** (head 0)"]
    at.sidebar.selectbox(key="num_heads").set_value(2).run()  # other heads, the same tokens: the picks stay
    no_exception(at)
    assert at.multiselect(key="heads_pick_queries").value == [2]


def grid_titles(at: AppTest) -> list[str]:
    grid = next(fig for fig in figures(at) if any(t.get("name", "").startswith("select head") for t in fig["data"]))
    return [note["text"] for note in grid["layout"]["annotations"] if re.fullmatch(r"(▶ )?head \d+", note["text"])]


def test_fewer_heads_than_the_focused_one_mark_head_0_in_the_grid():
    """Head 9 focused (a grid tile, a statistics row or the selectbox), then 4 heads: the focused head falls back to
    head 0 and the grid marks head 0 too, not a head the run does not have."""
    at = app(num_heads="12")
    at.selectbox(key="heads_focus").set_value(9).run()
    assert "▶ head 9" in grid_titles(at)
    at.sidebar.selectbox(key="num_heads").set_value(4).run()
    no_exception(at)
    assert at.selectbox(key="heads_focus").value == 0
    assert grid_titles(at) == ["▶ head 0", "head 1", "head 2", "head 3"]


def focused_map_id(at: AppTest) -> str:
    """The element id of the focused head's map (its widget: the selection made on it is kept under this id)."""
    from streamlit.proto.PlotlyChart_pb2 import PlotlyChart

    lasso = PlotlyChart.SelectionMode.LASSO
    (chart,) = [chart for chart in at.get("plotly_chart") if lasso in chart.proto.selection_mode]
    return chart.proto.id


def test_a_focused_map_drawn_again_is_a_new_widget_that_holds_no_old_selection():
    """The weights map, the scores map, the weights map again: the third is another widget than the first, so a
    selection made on the first (which the browser no longer shows) is not explained beside it; a rerun that draws the
    same map keeps its widget, and so its selection."""
    at = app(text="one two three four", num_heads="2")
    first = focused_map_id(at)
    at.run()
    assert focused_map_id(at) == first
    at.session_state["heads_stage"] = "scores"
    at.run()
    at.session_state["heads_stage"] = "weights"
    at.run()
    no_exception(at)
    assert any(fig["layout"]["title"]["text"].startswith("head 0: weights") for fig in figures(at))
    assert focused_map_id(at) != first


def test_the_focused_head_box_reads_the_label_of_the_variant_shown():
    """Grouped-query heads are labelled with their K/V group ("head 4 · K/V group 1"); picked there, head 4 stays
    focused under another variant, and the closed box reads that variant's label, not "head 4 · K/V group 1" over
    multi-head attention or MLA; the URL keeps head 4; a rerun that changes no label keeps the pick."""
    at = app(variant="gqa")
    shown = ShownLabels(at)
    shown.pick(at, "heads_focus", 4)
    assert shown.of(at, "heads_focus") == "head 4 · K/V group 1"
    for variant, label in (("mha", "head 4"), ("mqa", "head 4 · K/V group 0"), ("mla", "head 4"),
                           ("gqa", "head 4 · K/V group 1")):
        at.sidebar.selectbox(key="variant").set_value(variant).run()
        shown.read(at)
        no_exception(at)
        assert at.selectbox(key="heads_focus").value == 4 and at.query_params["head"] in ("4", ["4"])
        assert shown.of(at, "heads_focus") == label, variant
    shown.read(at.run())
    assert at.selectbox(key="heads_focus").value == 4 and shown.of(at, "heads_focus") == "head 4 · K/V group 1"
