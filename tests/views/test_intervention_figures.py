"""The knock-out grid's colours: red only where a knock-out changes the loss by a visible amount."""

from __future__ import annotations

import numpy as np

from attnviz.views import intervention_figures


def colour_span(delta: np.ndarray) -> tuple[float, float]:
    trace = intervention_figures.ablation_grid_figure(delta, 10.0).data[0]
    return trace.zmin, trace.zmax


def test_negligible_changes_are_drawn_pale():
    """A random model: every head changes the loss by thousandths, and the grid's colour span is at least ±0.1, so
    +0.004 is drawn nearly white, not in the deepest red."""
    delta = np.array([[0.004, -0.002], [0.001, 0.0]])
    zmin, zmax = colour_span(delta)
    assert zmin == -zmax and zmax >= 0.1
    assert delta.max() / zmax < 0.05  # near the middle of RdBu: nearly white


def test_a_needed_head_spans_the_scale():
    delta = np.array([[4.93, 3.48], [1.32, -0.56]])  # the bundled model's grid
    assert colour_span(delta) == (-4.93, 4.93)
