"""The "Why ÷√dₖ?" chart: both lines on each of its three panels, this run as stars, and margins that hold its labels
and legend (Chromium checks that Plotly then finds nothing to widen: tests/browser/test_pages.py)."""

from __future__ import annotations

import numpy as np

from attnviz import ablation
from attnviz.views import margins, saturation


def _random_qk() -> dict:
    return ablation.scaling_ablation(dks=(1, 2, 4, 8), num_tokens=6, seed=1)


def test_figure_has_both_lines_on_each_panel_and_the_run_as_stars():
    random_qk = _random_qk()
    run = {"dk": 6, "head": 0, "scaled": {m: 0.5 for m in ablation.METRICS},
           "unscaled": {m: 0.7 for m in ablation.METRICS}}
    fig = saturation.scaling_ablation_figure(random_qk, run)
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    stars = [t for t in fig.data if t.mode == "markers"]
    assert len(lines) == 6 and len(stars) == 6
    unscaled_variance = next(t for t in lines if t.xaxis == "x" and "no scaling" in t.name)
    assert np.array_equal(unscaled_variance.y, random_qk["unscaled"]["variance"])
    assert all(tuple(s.x) == (6,) for s in stars)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert list(fig.layout.xaxis.tickvals) == [1, 2, 4, 8]
    assert list(fig.layout.xaxis.ticktext) == ["1", "2", "4", "8"]  # four labels fit a panel of a narrow page
    assert any("dₖ = 6" in s.name for s in stars)  # the run's dₖ is named in the legend
    assert [a.text for a in fig.layout.annotations][:3] == [saturation.PANEL_TITLES[m] for m in ablation.METRICS]
    without_run = saturation.scaling_ablation_figure(random_qk)
    assert len(without_run.data) == 6


def test_the_margins_hold_the_numbers_the_axis_titles_and_a_two_row_legend_at_the_foot():
    run = {"dk": 6, "head": 0, "scaled": {m: 0.05 for m in ablation.METRICS},
           "unscaled": {m: 0.7 for m in ablation.METRICS}}
    layout = saturation.scaling_ablation_figure(_random_qk(), run).layout
    assert layout.margin.l >= margins.TICK_PAD_PX + margins.text_px(["0.01"])  # the run's star under 0.1
    # a mode's line and its star a row: two rows at any page width, which the margin under the axes holds
    assert layout.legend.entrywidthmode == "fraction" and 1 / 3 < layout.legend.entrywidth < 1 / 2
    assert layout.margin.b >= margins.under_axis(saturation.TICK_FONT_PX) + 2 * saturation.LEGEND_ROW_PX
    assert (layout.legend.yref, layout.legend.y, layout.legend.yanchor) == ("container", 0, "bottom")
    without_run = saturation.scaling_ablation_figure(_random_qk()).layout  # two entries: one row
    assert without_run.margin.b == layout.margin.b - saturation.LEGEND_ROW_PX


def test_on_the_narrowest_page_the_titles_and_dk_labels_fit_their_panels():
    """At an 800 px window the chart is 468 px wide: each panel's title lines fit over its panel, the chart's title
    lines fit the chart, and the dₖ labels (1 to 1,024) stand apart, the last one inside the right margin."""
    random_qk = ablation.scaling_ablation(num_tokens=6, seed=1)  # the page's dₖ, 1 … 1,024
    layout = saturation.scaling_ablation_figure(random_qk).layout
    panel_px = saturation.panel_width(layout.margin.l, layout.margin.r)
    for note in layout.annotations[:3]:
        assert all(margins.title_px(line, saturation.PANEL_TITLE_PX) <= panel_px for line in note.text.split("<br>"))
    assert all(margins.title_px(line, 13) + margins.TITLE_INSET_PX <= margins.PAGE_MIN_PX
               for line in layout.title.text.split("<br>"))
    shown = [(i, text) for i, text in enumerate(layout.xaxis.ticktext) if text]
    step_px = panel_px / (len(layout.xaxis.tickvals) - 1)  # between two dₖ on the log₂ axis
    for (i, text), (k, after) in zip(shown, shown[1:]):
        room = (k - i) * step_px - (len(text) + len(after)) / 2 * margins.CHAR_PX * saturation.TICK_FONT_PX / 12
        assert room >= saturation.TICK_GAP_PX, (text, after)
    assert len(shown) >= 3 and layout.margin.r >= len("1024") / 2 * margins.CHAR_PX * saturation.TICK_FONT_PX / 12


def test_the_variance_axis_labels_powers_of_10_only():
    """Plotly's own log ticks put 2 and 5 between the powers of 10 ("1000 5 2 100 5 2 10 …"): one tick a decade."""
    layout = saturation.scaling_ablation_figure(ablation.scaling_ablation(dks=(1, 16, 1024), num_tokens=6)).layout
    assert layout.yaxis.type == "log" and layout.yaxis.dtick == 1
    assert layout.yaxis2.dtick is None and layout.yaxis3.dtick is None  # linear panels keep Plotly's own ticks
