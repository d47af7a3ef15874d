"""The generation figures: rows of different lengths stacked with NaN for keys not cached yet, escaped token labels."""

from __future__ import annotations

import numpy as np

from attnviz.views import generation_figures, margins


def test_new_rows_pads_keys_a_row_could_not_see_with_nan():
    z = generation_figures.new_rows([np.array([0.25, 0.75]), np.array([0.1, 0.2, 0.7])], 4)
    assert z.dtype == np.float32 and z.shape == (2, 4)
    np.testing.assert_array_equal(z[0, :2], [0.25, 0.75])
    assert np.isnan(z[0, 2:]).all() and np.isnan(z[1, 3])
    np.testing.assert_allclose(np.nansum(z, axis=1), 1.0, atol=1e-6)


def test_new_rows_leave_the_keys_a_sliding_window_dropped_empty_as_the_keys_not_seen_yet():
    """A window of W = 2: the query at position 3 reads keys 2 and 3 only; the cache no longer holds keys 0 and 1,
    so the map leaves them empty (not weight 0, drawn as a key read and given nothing): the band shows."""
    rows = [np.array([0.0, 0.4, 0.6]), np.array([0.0, 0.0, 0.3, 0.7])]  # query positions 2 and 3, widened with 0
    z = generation_figures.new_rows(rows, 4, positions=[2, 3], window=2)
    assert np.isnan(z[0, 0]) and not np.isnan(z[0, 1:3]).any() and np.isnan(z[0, 3])
    assert np.isnan(z[1, :2]).all() and not np.isnan(z[1, 2:]).any()
    np.testing.assert_allclose(generation_figures.new_rows(rows, 4, positions=[2, 3], window=None)[1], rows[1])


def test_rows_figure_draws_rows_with_escaped_token_labels():
    z = generation_figures.new_rows([np.array([0.5, 0.5, 0.0])], 3)
    fig = generation_figures.rows_figure(z, ["2:<b>x"], ["0:a", "1:<img src=x>", "2:<b>x"], prompt_length=2,
                                         title="rows")
    heat = fig.data[0]
    assert heat.type == "heatmap" and np.asarray(heat.z).shape == (1, 3)
    ticks = " ".join([*fig.layout.xaxis.ticktext, *fig.layout.xaxis2.ticktext, *fig.layout.yaxis2.ticktext])
    assert "<img" not in ticks and "<b>" not in ticks and "&lt;img" in ticks
    assert fig.layout.height == generation_figures.ROWS_HEIGHT  # fixed: the page below does not move as rows come


def test_rows_figure_hover_names_every_key_by_its_tick_not_by_a_string_per_cell():
    n_keys = 100
    z = generation_figures.new_rows([np.full(n_keys - 1, 1 / (n_keys - 1)), np.full(n_keys, 1 / n_keys)], n_keys)
    labels = [f"{i}:t{i}" for i in range(n_keys)]
    fig = generation_figures.rows_figure(z, labels[-2:], labels, prompt_length=n_keys - 2, title="rows")
    heat = fig.data[0]
    assert heat.customdata is None and "%{x}" in heat.hovertemplate and "%{y}" in heat.hovertemplate
    # the heatmap's own x axis has every key as a tick named by its label (hidden), matched to the visible one
    assert heat.xaxis == "x2" and fig.layout.xaxis2.matches == "x" and fig.layout.xaxis2.overlaying == "x"
    assert list(fig.layout.xaxis2.tickvals) == list(range(n_keys)) and list(fig.layout.xaxis2.ticktext) == labels
    assert fig.layout.xaxis2.showticklabels is False and len(fig.layout.xaxis.tickvals) <= 21
    assert heat.yaxis == "y2" and list(fig.layout.yaxis2.ticktext) == labels[-2:]
    assert fig.layout.yaxis2.matches == "y" and list(fig.layout.yaxis.ticktext) == labels[-2:]  # few rows: all shown


def test_rows_figure_labels_only_as_many_keys_and_queries_as_fit():
    """A map at its narrowest (640 px: the page's ~690 px beside the sidebar in a 1,100 px window) labels at
    most as many keys as fit side by side turned upright, and at most as many queries as fit the plot's height (labels
    a few pixels apart would overlap into a block); the bottom margin holds the keys' labels."""
    n_keys, steps = 300, 100
    z = generation_figures.new_rows([np.full(n_keys - steps + j + 1, 0.01) for j in range(steps)], n_keys)
    keys = [f"{i}:·appointments" for i in range(n_keys)]  # 16 characters and more
    layout = generation_figures.rows_figure(z, keys[-steps:], keys, prompt_length=n_keys - steps,
                                            title="rows").layout
    plot_width = 640 - layout.margin.l - layout.margin.r
    plot_height = layout.height - layout.margin.t - layout.margin.b
    assert len(layout.xaxis.tickvals) >= 2 and len(layout.xaxis.tickvals) * 16 <= plot_width
    assert len(layout.yaxis.tickvals) >= 2 and len(layout.yaxis.tickvals) * 14 <= plot_height
    assert layout.xaxis.tickangle == -90  # upright: the bottom margin holds their full length
    assert layout.margin.b >= margins.text_px([keys[i] for i in layout.xaxis.tickvals])


def test_a_window_line_on_its_attentions_line_shows_as_rings_around_its_dots():
    """Up to its window a sliding window's cache grows as its attention's does: its line lies on that line. Drawn
    after it, with rings wider than its dots for markers, both show there, each in its own colour; a line that meets
    no other keeps plain dots."""
    lengths = [16, 32, 64, 128]
    curves = {"MHA": [10, 20, 40, 80], "GQA": [5, 10, 20, 40], "SWA": [10, 20, 40, 40]}
    fig = generation_figures.kv_bytes_figure(lengths, curves, title="t")
    mha, gqa, swa = fig.data
    assert [trace.name for trace in fig.data] == ["MHA", "GQA", "SWA"]  # SWA on top
    assert swa.marker.symbol == "circle-open" and swa.marker.size > mha.marker.size + 2 * swa.marker.line.width
    assert mha.marker.symbol in (None, "circle") and gqa.marker.symbol in (None, "circle")
    assert swa.line.color == generation_figures.VARIANT_COLORS["SWA"] != mha.line.color


def test_rows_figure_cells_are_square_as_the_attention_maps_and_a_row_is_never_a_hairline():
    """The new tokens' rows are rows of the attention map: their cells are square (Plotly keeps the y axis' scale the x
    axis', ``scaleanchor``), not stretched across the page, and the figure is as wide as its cells, labels and colour
    bar (the colour bar beside the cells, ``width="content"``) and no wider than the page's narrowest column.  A few
    rows over a long prompt keep rows of :data:`MIN_ROW_PX` (and a map as tall as its axis' title), taller than a key is
    wide, not a strip a pixel high."""
    def layout_of(steps: int, n_keys: int):
        z = generation_figures.new_rows([np.full(n_keys - steps + j + 1, 0.01) for j in range(steps)], n_keys)
        keys = [f"{i}:·t{i}" for i in range(n_keys)]
        return generation_figures.rows_figure(z, keys[-steps:], keys, prompt_length=n_keys - steps,
                                              title="rows").layout

    for steps, n_keys in ((1, 7), (12, 18), (30, 36), (200, 220)):
        layout = layout_of(steps, n_keys)
        assert layout.yaxis.scaleanchor == "x" and layout.yaxis.scaleratio == 1, (steps, n_keys)
        assert layout.xaxis.constrain == layout.yaxis.constrain == "domain"
        key_px = (layout.width - layout.margin.l - layout.margin.r) / n_keys  # a square cell's side
        plot_height = layout.height - layout.margin.t - layout.margin.b
        assert layout.width <= generation_figures.ROWS_MIN_WIDTH and steps * key_px <= plot_height + 1
        # as large as fits: the cells span the width the page gives, or the rows the height
        assert layout.width >= generation_figures.ROWS_MIN_WIDTH - 1 or steps * key_px >= plot_height - steps
    for steps in (1, 5):  # the prefill's one row, and a few, over a 1,024-token prompt
        long_prompt = layout_of(steps, 1024 + steps)
        key_px = (long_prompt.width - long_prompt.margin.l - long_prompt.margin.r) / (1024 + steps)
        row_px = long_prompt.yaxis.scaleratio * key_px
        assert row_px >= generation_figures.MIN_ROW_PX and steps * row_px >= generation_figures.MIN_MAP_PX, steps


def test_rows_figure_makes_room_under_the_map_for_the_key_labels_it_shows():
    """Many rows over few keys: the rows' height narrows the map (square cells), which then holds fewer key labels than
    the chart's width would; the labels shown are the ones the room under the map is made for, so a long key label
    among them is whole, not run past the figure's foot, wherever it stands."""
    n_keys, steps = 30, 40
    z = generation_figures.new_rows([np.full(n_keys, 1 / n_keys)] * steps, n_keys)
    for long in range(12):  # the keys the narrow map labels (every 3rd or 4th) and those it does not
        keys = [f"{i}:·a" for i in range(n_keys)]
        keys[long] = f"{long}:·extraordinarily"
        layout = generation_figures.rows_figure(z, keys[:steps], keys, prompt_length=n_keys, title="rows").layout
        shown = list(layout.xaxis.ticktext)
        assert len(shown) < n_keys // 2  # a narrow map: fewer labels than every other key
        assert layout.margin.b >= margins.across(shown, angle=90), (long, shown)
