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
    assert list(fig.layout.xaxis.ticktext) == ["1", "", "4", ""]  # every other labelled: they fit a narrow panel
    assert any("dₖ = 6" in s.name for s in stars)  # the run's dₖ is named in the legend
    assert [a.text for a in fig.layout.annotations][:3] == [saturation.METRIC_TITLES[m] for m in ablation.METRICS]
    without_run = saturation.scaling_ablation_figure(random_qk)
    assert len(without_run.data) == 6


def test_the_margins_hold_the_numbers_the_axis_titles_and_a_two_row_legend_at_the_foot():
    layout = saturation.scaling_ablation_figure(_random_qk()).layout
    assert layout.margin.l >= margins.NUMBER_PX
    assert layout.margin.b >= margins.across([], angle=0) + 2 * margins.LEGEND_ROW_PX
    assert (layout.legend.yref, layout.legend.y, layout.legend.yanchor) == ("container", 0, "bottom")


def test_the_variance_axis_labels_powers_of_10_only():
    """Plotly's own log ticks put 2 and 5 between the powers of 10 ("1000 5 2 100 5 2 10 …"): one tick a decade."""
    layout = saturation.scaling_ablation_figure(ablation.scaling_ablation(dks=(1, 16, 1024), num_tokens=6)).layout
    assert layout.yaxis.type == "log" and layout.yaxis.dtick == 1
    assert layout.yaxis2.dtick is None and layout.yaxis3.dtick is None  # linear panels keep Plotly's own ticks
