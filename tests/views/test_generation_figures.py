"""The generation figures: rows of different lengths stacked with NaN for keys not cached yet, escaped token labels."""

from __future__ import annotations

import numpy as np

from attnviz.views import generation_figures


def test_new_rows_pads_keys_a_row_could_not_see_with_nan():
    z = generation_figures.new_rows([np.array([0.25, 0.75]), np.array([0.1, 0.2, 0.7])], 4)
    assert z.dtype == np.float32 and z.shape == (2, 4)
    np.testing.assert_array_equal(z[0, :2], [0.25, 0.75])
    assert np.isnan(z[0, 2:]).all() and np.isnan(z[1, 3])
    np.testing.assert_allclose(np.nansum(z, axis=1), 1.0, atol=1e-6)


def test_rows_figure_draws_rows_with_escaped_token_labels():
    z = generation_figures.new_rows([np.array([0.5, 0.5, 0.0])], 3)
    fig = generation_figures.rows_figure(z, ["2:<b>x"], ["0:a", "1:<img src=x>", "2:<b>x"], prompt_length=2,
                                         title="rows")
    heat = fig.data[0]
    assert heat.type == "heatmap" and np.asarray(heat.z).shape == (1, 3)
    ticks = " ".join([*fig.layout.xaxis.ticktext, *fig.layout.yaxis.ticktext, *np.asarray(heat.customdata).ravel()])
    assert "<img" not in ticks and "<b>" not in ticks and "&lt;img" in ticks
    assert fig.layout.yaxis.scaleanchor == "x"  # square cells
