"""The heads grid: one map image a head, tiled on one pair of axes, each exactly its head's pooled map's colours; the
token map: numeric axes, token ticks, and a cell overlay whose hover and selections name the cells."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.maps import colour_range, pixels

from attnviz import pipeline
from attnviz.config import AttentionConfig
from attnviz.trace import Trace, window_band
from attnviz.views import figures, map_image, margins, steps

JOURNEY = "Your journey starts with one step"


@pytest.fixture(scope="module")
def default_trace() -> Trace:
    return pipeline.run(JOURNEY, AttentionConfig())  # GPT-2 small, 12 causal heads


def tiles_of(fig) -> tuple[list[np.ndarray], list[list[int]], int]:
    """Each head's image (RGBA pixels), where the layout says its tile is, and the tile side; asserts each image is
    placed at its tile."""
    images = [trace for trace in fig.data if trace.type == "image"]
    meta = fig.layout.meta
    for head, (trace, (x0, y0)) in enumerate(zip(images, meta["tiles"])):
        assert trace.name == f"head {head}" and (trace.x0, trace.y0, trace.dx, trace.dy) == (x0, y0, 1, 1)
        assert trace.hoverinfo == "skip"  # the overlay takes hover and clicks
    return [pixels(trace.to_plotly_json()) for trace in images], meta["tiles"], meta["size"]


def colours(fig, values: np.ndarray, stage: str) -> np.ndarray:
    """The pixels a map of ``values`` shows on the figure's colour bar."""
    zmin, zmax = colour_range(fig)
    return map_image.colour(values, zmin, zmax, figures.colorscale(figures.color_range(stage, values)[2]))


def head_titles(fig) -> list[str]:
    return [note.text for note in fig.layout.annotations if note.text.removeprefix("▶ ").startswith("head ")]


def test_max_pool_keeps_every_peak_and_knows_all_masked_blocks():
    matrix = np.zeros((10, 10), dtype=np.float32)
    matrix[3, 7] = 0.9
    matrix[:, 9] = np.nan
    pooled, block = figures.max_pool(matrix, 4)
    assert block == 3 and pooled.shape == (4, 4)
    assert pooled[1, 2] == pytest.approx(0.9)  # (3, 7) falls in block (1, 2)
    assert np.isnan(pooled[:, 3]).all()  # column 9 alone (padded) is all masked
    signed, _ = figures.max_pool(np.array([[-5.0, 1.0], [2.0, 3.0]]), 1, signed=True)
    assert signed[0, 0] == -5.0  # scores keep the largest |value| with its sign


@pytest.mark.parametrize("stage", ["scores", "weights"])
def test_each_head_is_an_image_of_its_map_and_the_tiles_do_not_overlap(default_trace, stage):
    maps = default_trace.steps[stage][0]  # (12, 6, 6)
    fig = figures.heads_grid(maps, stage, causal=True)
    images, tiles, size = tiles_of(fig)
    assert len(images) == len(tiles) == 12 and size == 6
    assert colour_range(fig) == figures.color_range(stage, figures.pooled_display(maps, stage, True, 64)[0])[:2]
    covered = set()
    for head, (x0, y0) in enumerate(tiles):
        expected = figures.display_values(maps[head], stage, causal=True)
        np.testing.assert_array_equal(images[head], colours(fig, expected, stage))  # transparent where masked
        cells = {(x0 + i, y0 + j) for i in range(size) for j in range(size)}
        assert not cells & covered
        covered |= cells
    assert len({x0 for x0, _ in tiles}) == 4 and len({y0 for _, y0 in tiles}) == 3  # 4 columns × 3 rows
    assert head_titles(fig) == [f"head {h}" for h in range(12)]
    assert "downsampled" not in fig.layout.title.text


def test_masked_cells_are_grey_and_the_gaps_white(default_trace):
    fig = figures.heads_grid(default_trace.steps["weights"][0], "weights", causal=True)
    _, tiles, size = tiles_of(fig)
    assert fig.layout.plot_bgcolor == "white"
    grey = [shape for shape in fig.layout.shapes if shape.fillcolor == figures.MASKED_COLOR]
    assert len(grey) == 12 and all(shape.layer == "below" for shape in grey)
    assert sorted((shape.x0 + 0.5, shape.y0 + 0.5) for shape in grey) == sorted(map(tuple, tiles))


def test_a_click_anywhere_on_a_tile_reports_its_head(default_trace):
    fig = figures.heads_grid(default_trace.steps["weights"][0], "weights")
    _, tiles, size = tiles_of(fig)
    (overlay,) = [trace for trace in fig.data if trace.name == "select head"]
    assert overlay.mode == "text" and overlay.text is None and overlay.marker.maxdisplayed == 1  # never drawn
    for x, y, head in zip(overlay.x, overlay.y, overlay.customdata):
        x0, y0 = tiles[head]
        assert x0 <= x <= x0 + size - 1 and y0 <= y <= y0 + size - 1
    assert set(overlay.customdata) == set(range(12))


def test_a_long_input_is_pooled_and_says_so():
    trace = pipeline.run(" the" * 300, AttentionConfig(num_heads=4))
    fig = figures.heads_grid(trace.steps["weights"][0], "weights", max_cells=64)
    images, tiles, size = tiles_of(fig)
    assert size == 60 and fig.layout.meta["block"] == 5  # ceil(300 / 64) = 5 positions per cell
    assert "downsampled 300→60 per side (max-pooling keeps peaks" in fig.layout.title.text
    for head in range(len(tiles)):
        expected, _ = figures.max_pool(figures.display_values(trace.steps["weights"][0][head], "weights", True), 64)
        np.testing.assert_array_equal(images[head], colours(fig, expected, "weights"))


def test_mark_focus_moves_the_marker_and_the_outline(default_trace):
    grid = figures.heads_grid(default_trace.steps["weights"][0], "weights")
    marked = figures.mark_focus(figures.mark_focus(grid, 3), 7)
    assert [t for t in head_titles(marked) if t.startswith("▶")] == ["▶ head 7"]
    (outline,) = [shape for shape in marked.layout.shapes if shape.name == "focus"]
    x0, y0 = marked.layout.meta["tiles"][7]
    assert (outline.x0 + 0.5, outline.y0 + 0.5) == (x0, y0)
    assert not [shape for shape in grid.layout.shapes if shape.name == "focus"]  # the cached figure is untouched
    assert head_titles(grid) == [f"head {h}" for h in range(12)]


def test_a_single_head_grid():
    trace = pipeline.run(JOURNEY, AttentionConfig(variant="causal"))
    fig = figures.mark_focus(figures.heads_grid(trace.steps["weights"][0], "weights"), 0)
    assert head_titles(fig) == ["▶ head 0"]
    assert "1 head" in fig.layout.title.text
    # its tile is square, not stretched across the page: square cells, the plot area shrunk to the tiles
    assert fig.layout.yaxis.scaleanchor == "x"
    assert fig.layout.xaxis.constrain == fig.layout.yaxis.constrain == "domain"
    assert (fig.layout.xaxis.constraintoward, fig.layout.yaxis.constraintoward) == ("left", "top")  # under the title


@pytest.mark.parametrize(("heads", "row_px"), [(12, 150), (6, 150), (4, 225), (3, 300), (1, 300)])
def test_fewer_heads_than_a_row_get_taller_rows_up_to_twice(heads, row_px):
    maps = np.tril(np.ones((heads, 8, 8), dtype=np.float32))  # (heads, n, n)
    layout = figures.heads_grid(maps, "weights").layout
    rows = len({y0 for _, y0 in layout.meta["tiles"]})
    assert layout.height == max(180, row_px * rows + 60)


@pytest.mark.parametrize(("heads", "group"), [(2, 1), (6, 1), (12, 1), (32, 1), (12, 3), (12, 12), (8, 2)])
def test_in_a_narrow_window_each_tile_is_as_wide_as_its_title(heads, group):
    """A 900 px window with the sidebar open shrinks the grid to its column: each tile still holds its title (11 px,
    about half an em a character), the focused head's ▶ included, so "head 10" and "head 11" do not run together; heads
    that share a K/V head stay side by side in one row."""
    labels = [f"head {h}" if group == 1 else f"head {h}<br>K/V {h // group}" for h in range(heads)]
    layout = figures.heads_grid(np.ones((heads, 6, 6), dtype=np.float32), "weights", labels=labels,
                                columns=figures.grid_columns(labels, group)).layout
    width_cells = layout.xaxis.range[1] - layout.xaxis.range[0]
    height_cells = layout.yaxis.range[0] - layout.yaxis.range[1]
    px_per_cell = min((figures.GRID_NARROW_PX - layout.margin.l - layout.margin.r) / width_cells,
                      (layout.height - layout.margin.t - layout.margin.b) / height_cells)
    widest = max(len(f"▶ {line}") for label in labels for line in label.split("<br>")) * 11 * 0.5
    assert layout.meta["size"] * px_per_cell >= widest
    columns = len({x0 for x0, _ in layout.meta["tiles"]})
    assert columns % group == 0 or group > columns  # a K/V head's queries in one row where they fit one


@pytest.mark.parametrize("heads", [1, 2, 4, 12])
def test_the_grid_is_as_wide_as_its_tiles_so_the_colour_bar_sits_beside_them(heads):
    layout = figures.heads_grid(np.tril(np.ones((heads, 8, 8), dtype=np.float32)), "weights").layout
    tiles, size = layout.meta["tiles"], layout.meta["size"]
    cells_wide, cells_tall = max(x0 for x0, _ in tiles) + size, max(y0 for _, y0 in tiles) + size
    plot_wide = layout.width - layout.margin.l - layout.margin.r
    plot_tall = layout.height - layout.margin.t - layout.margin.b
    assert plot_wide == pytest.approx(plot_tall * cells_wide / cells_tall, abs=1)  # square cells fill the plot


def test_a_single_token_tile_is_not_pushed_down_by_a_title_row_as_tall_as_itself():
    layout = figures.heads_grid(np.ones((1, 1, 1), dtype=np.float32), "weights").layout
    (x0, y0), = layout.meta["tiles"]
    assert layout.meta["size"] == 1 and 0 < y0 < 0.5  # the row of titles above it: under half the tile


GRID_AT_800_PX = 343  # the heads grid's width on an 800 px window, sidebar open: the page shrinks it to that


@pytest.mark.parametrize(("labels", "lines"), [(None, 1), ([f"head {h}<br>K/V {h // 3}" for h in range(12)], 2)])
def test_the_grids_titles_have_room_above_their_row_when_the_page_shrinks_it_to_an_800_px_window(labels, lines):
    """The page draws the grid narrower than its own width on a laptop window, shrinking the square tiles; the titles
    keep their 11 px (15 px a line): the room above each row of tiles, a share of the tile, still holds them."""
    layout = figures.heads_grid(np.ones((12, 14, 14), dtype=np.float32), "weights", labels=labels).layout
    width_cells = layout.xaxis.range[1] - layout.xaxis.range[0]
    height_cells = layout.yaxis.range[0] - layout.yaxis.range[1]
    px_per_cell = min((GRID_AT_800_PX - layout.margin.l - layout.margin.r) / width_cells,
                      (layout.height - layout.margin.t - layout.margin.b) / height_cells)
    (_, y0), (_, y1) = layout.meta["tiles"][0], layout.meta["tiles"][6]  # rows 1 and 2: the room above row 2
    room_px = (y1 - y0 - layout.meta["size"]) * px_per_cell
    assert room_px >= 15 * lines


def test_a_narrow_grid_is_still_as_wide_as_its_title():
    trace = pipeline.run(" the" * 300, AttentionConfig(variant="causal"))
    layout = figures.heads_grid(trace.steps["weights"][0], "weights").layout
    note = layout.title.text.split("<sup>")[1].removesuffix("</sup>")
    assert layout.width >= margins.text_px([note]) * 0.7 > 300  # the "downsampled" note, at its <sup> size


def _reference_pool(matrix: np.ndarray, max_size: int, signed: bool) -> np.ndarray:
    """The plain definition: pad with NaN, NaN-aware max (or largest |value| with its sign) of every block."""
    block = max(1, -(-max(matrix.shape) // max_size))
    rows, cols = matrix.shape
    padded = np.full((-(-rows // block) * block, -(-cols // block) * block), np.nan, dtype=np.float32)
    padded[:rows, :cols] = matrix
    out = np.full((padded.shape[0] // block, padded.shape[1] // block), np.nan, dtype=np.float32)
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            cells = padded[i * block : (i + 1) * block, j * block : (j + 1) * block]
            cells = cells[~np.isnan(cells)]
            if cells.size:
                out[i, j] = cells[np.abs(cells).argmax()] if signed else cells.max()
    return out


@pytest.mark.parametrize("n", [5, 64, 65, 130, 200])
@pytest.mark.parametrize("stage", ["scores", "scaled", "masked", "weights", "dropped"])
def test_the_pooled_grid_equals_pooling_the_displayed_maps(n, stage):
    """pooled_display pools the raw maps and blanks whole masked blocks; it must equal pooling the displayed
    (NaN-masked) maps cell for cell, for every stage, with and without padding."""
    rng = np.random.default_rng(n)
    scores = rng.normal(size=(3, n, n)).astype(np.float32) * 4
    masked = np.where(np.triu(np.ones((n, n), dtype=bool), k=1), -np.inf, scores).astype(np.float32)
    weights = np.exp(masked - masked.max(axis=-1, keepdims=True))
    weights = (weights / weights.sum(axis=-1, keepdims=True)).astype(np.float32)
    maps = {"scores": scores, "scaled": scores / 8, "masked": masked, "weights": weights,
            "dropped": weights * (rng.random(weights.shape) > 0.3) / 0.7}[stage].astype(np.float32)
    pooled, block = figures.pooled_display(maps, stage, True, 64)
    signed = stage not in figures.PROBABILITY_STAGES
    for head in range(3):
        shown = figures.display_values(maps[head], stage, causal=True)
        expected, expected_block = figures.max_pool(shown, 64, signed=signed)
        assert block == expected_block
        np.testing.assert_array_equal(pooled[head], expected)
        np.testing.assert_array_equal(expected, _reference_pool(shown, 64, signed))


def test_figures_built_without_validation_are_what_plotly_validates():
    """heads_grid, mark_focus and (validate=False) the focused head's heatmap and overview skip Plotly's
    per-property validation; validating their dicts changes nothing, and validate=True builds the same figure."""
    import json

    import plotly.graph_objects as go
    import plotly.io as pio

    def as_json(fig):
        return json.loads(pio.to_json(fig, validate=False))

    rng = np.random.default_rng(0)
    maps = rng.random((5, 100, 100)).astype(np.float32)
    big = rng.normal(size=(300, 300)).astype(np.float32)
    masked = np.where(np.triu(np.ones((300, 300), dtype=bool), k=1), -np.inf, big).astype(np.float32)
    tokens = [f"<t{i}>&" for i in range(300)]
    fast = [figures.heads_grid(maps, "weights"), figures.mark_focus(figures.heads_grid(maps, "scores"), 2)]
    for stage, matrix in (("weights", np.tril(np.abs(big))), ("scores", big), ("masked", masked)):
        for validate in (False, True):
            fast.append(figures.attention_heatmap(matrix[20:276, 10:266], tokens, stage, row_offset=20, col_offset=10,
                                                  title="t", validate=validate, width=480))
            fast.append(figures.overview_heatmap(matrix, stage, causal=True, window=(20, 10, 256), validate=validate))
    for fig in fast:
        validated = go.Figure(fig.to_dict())  # raises on an invalid property
        assert as_json(fig) == as_json(validated)
    assert as_json(fast[2]) == as_json(fast[4]) and as_json(fast[3]) == as_json(fast[5])  # validate=False == True


def test_the_causal_mask_is_built_once_and_read_only():
    mask = figures.causal_mask(1024)
    assert figures.causal_mask(1024) is mask and not mask.flags.writeable
    assert mask[0, 1] and not mask[1, 0] and not mask[5, 5]


def test_a_token_heatmap_has_numeric_axes_token_ticks_and_a_cell_for_every_overlay_point():
    rng = np.random.default_rng(1)
    n = 300
    tokens = [f"<t{i}>" for i in range(n)]
    weights = np.tril(rng.random((n, n))).astype(np.float32)
    fig = figures.attention_heatmap(weights[20:120, 10:110], tokens, "weights", row_offset=20, col_offset=10,
                                    width=figures.FOCUSED_MAP_PX)
    image = fig.data[0]
    assert image.type == "image" and image.hoverinfo == "skip"
    assert (image.x0, image.y0, image.dx, image.dy) == (10, 20, 1, 1)  # cell (i, j) at key 10 + j, query 20 + i
    assert pixels(image.to_plotly_json()).shape == (100, 100, 4)
    layout = fig.layout
    assert len(layout.xaxis.tickvals) <= 40 and list(layout.xaxis.ticktext) == [
        f"&lt;t{i}&gt;" for i in layout.xaxis.tickvals]  # escaped token pieces at their positions
    assert list(layout.xaxis2.tickvals) == list(range(10, 110))  # the overlay's axis names every position
    assert layout.xaxis2.ticktext[0] == "10: &lt;t10&gt;"
    assert layout.xaxis2.matches == "x" and layout.yaxis2.matches == "y" and not layout.xaxis2.showticklabels
    assert list(layout.yaxis.range) == [119.5, 19.5]  # queries run down
    cells, masked = (trace for trace in fig.data if trace.name in ("cells", "masked cells"))
    assert cells.mode == masked.mode == "text" and cells.hoverinfo != "skip"  # hovered and selected, never drawn
    shown = {(int(y), int(x)) for x, y in zip(cells.x, cells.y)}
    hidden = {(int(y), int(x)) for x, y in zip(masked.x, masked.y)}
    assert len(shown) + len(hidden) == 100 * 100 and not shown & hidden
    assert hidden == {(q, k) for q in range(20, 120) for k in range(10, 110) if k > q}  # the causal mask
    values = dict(zip(zip(cells.y, cells.x), cells.customdata))
    assert values[(50, 30)] == pytest.approx(weights[50, 30])  # the hover's value is the cell's
    assert "query %{y}" in cells.hovertemplate and "key %{x}" in cells.hovertemplate


def test_a_small_overlay_marks_a_selected_cell_and_a_large_one_draws_no_point():
    """Up to 64 × 64 cells the overlay's points are transparent markers, and a selected one is drawn; above, they are
    text points without text, which Plotly hovers and selects but never draws (markers would snap to any cell within
    3 px, and a marker a cell is a node a cell)."""
    for n, marked in ((8, True), (64, True), (65, False), (256, False)):
        fig = figures.attention_heatmap(np.zeros((n, n), np.float32), ["a"] * n, "weights", causal=True,
                                        width=figures.FOCUSED_MAP_PX)
        overlay = [t for t in fig.data if t.name in ("cells", "masked cells")]
        assert len(overlay) == 2 and sum(len(t.x) for t in overlay) == n * n
        for trace in overlay:
            assert trace.type == "scatter" and trace.text is None
            if marked:
                assert trace.mode == "markers" and trace.marker.opacity == 0 and trace.selected.marker.opacity == 1
            else:
                assert trace.mode == "text" and trace.marker.maxdisplayed == 1


def test_the_overview_is_a_square_of_square_cells_with_no_band_or_grid_beside_it():
    layout = figures.overview_heatmap(np.tril(np.ones((512, 512), dtype=np.float32)), "weights", causal=True,
                                      window=(0, 0, 256)).layout
    assert layout.yaxis.scaleanchor == "x"
    assert layout.xaxis.constrain == layout.yaxis.constrain == "domain"  # the plot area shrinks to the square
    assert not layout.xaxis.showgrid and not layout.yaxis.showgrid
    # the plot is the pooled cells edge to edge, down: no grey band (the masked cells' colour) on any side of them,
    # neither Plotly's padding around the plot nor autorange widened for the window's outline on the map's edge
    assert layout.margin.pad == 0
    assert layout.xaxis.range == (-0.5, 127.5) and layout.yaxis.range == (127.5, -0.5)  # 512 tokens, 4 × 4 a cell


def test_a_sliding_windows_overview_greys_what_the_window_hides_as_the_grid_does():
    """A 512-token map of a sliding window (W = 4), pooled 4 × 4: the blocks far below the band are masked, as the
    thumbnails and the focused map show them (grey), not weight 0 drawn in the colour of a seen key."""
    n, window = 512, 4
    distance = np.arange(n)[:, None] - np.arange(n)[None, :]  # (n, n): i − j
    hidden = (distance < 0) | (distance >= window)  # (n, n): what the window hides
    weights = np.where(hidden, 0.0, 1.0 / window).astype(np.float32)  # (n, n)
    overview = np.asarray(figures.overview_heatmap(weights, "weights", causal=True, window=(0, 0, 256),
                                                   hidden=hidden, validate=False).data[0]["z"], dtype=float)
    assert np.isnan(overview[100, 0]) and np.isnan(overview[127, 64])  # far below the band: hidden
    assert not np.isnan(overview[100, 100])  # the band itself
    grid_tile = figures.pooled_display(weights[None], "weights", True, 128, hidden[None])[0][0]  # the thumbnail's
    assert np.array_equal(np.isnan(overview), np.isnan(grid_tile))


@pytest.mark.parametrize(("n_queries", "n_keys", "window", "causal", "positions"), [
    (6, 6, 1, True, None), (6, 6, 3, True, None), (6, 6, 3, False, None), (5, 9, 4, True, None),
    (3, 9, 2, False, [6, 7, 8]), (4, 4, 10, True, None)])
def test_the_window_band_every_view_greys_hides_the_keys_w_or_more_behind_and_with_the_mask_the_future(
        n_queries, n_keys, window, causal, positions):
    """Query i sees keys i − W + 1 … i: every view (the induction stripe map, the overview tiles, the generation
    rows) greys the same cells, read here one cell at a time."""
    queries = list(range(n_queries)) if positions is None else positions
    expected = np.array([[i - j >= window or (causal and j > i) for j in range(n_keys)] for i in queries])
    assert np.array_equal(window_band(n_queries, n_keys, window, causal=causal, positions=positions), expected)


def test_the_window_band_is_what_a_sliding_window_run_hid():
    trace = pipeline.run("the cat sat on the mat and", AttentionConfig(variant="swa", sliding_window_size=3))
    hidden = trace.hidden_cells()  # (h, n, n)
    n = hidden.shape[-1]
    assert all(np.array_equal(head, window_band(n, n, 3)) for head in hidden)


def test_a_narrow_map_has_as_many_key_labels_as_its_width_holds_and_can_leave_its_colour_bar_out():
    """A map a page draws narrower than tall (the Compare page's, 290 px) turns no more key tokens' labels than its
    plot's width holds side by side; without its colour bar (one scale for every map, said once) the cells get the
    room."""
    tokens, matrix = [f"·token{i}" for i in range(256)], np.full((256, 256), 1 / 256)  # (n, n)
    tall = figures.attention_heatmap(matrix, tokens, width=figures.FOCUSED_MAP_PX)
    narrow = figures.attention_heatmap(matrix, tokens, width=290, show_scale=False)
    margin = narrow.layout.margin
    plot_width = 290 - margin.l - margin.r
    assert len(narrow.layout.xaxis.tickvals) <= plot_width // figures.COLUMN_LABEL_PX
    assert len(narrow.layout.xaxis.tickvals) < len(tall.layout.xaxis.tickvals)
    assert plot_width > 290 - margin.l - margins.COLORBAR_PX
    assert colour_range(tall) == (0.0, 1.0)
    with pytest.raises(ValueError):  # no colour bar to unpack
        colour_range(narrow)


def test_a_map_with_its_colour_bar_below_gives_the_cells_the_bars_width():
    """The Steps page's cards are 330 px wide: a colour bar beside the map takes 100 px of them; under the map, across
    its width, it leaves them to the cells, and the bottom margin holds it above the legend."""
    tokens, matrix = ["Your", "·journey", "·starts", "·with", "·one", "·step"], np.tril(np.full((6, 6), 0.5))
    beside = figures.attention_heatmap(matrix, tokens, width=steps.PAIR_WIDTH)
    below = figures.attention_heatmap(matrix, tokens, width=steps.PAIR_WIDTH, scale_below=True)
    (bar,) = [trace.marker.colorbar for trace in below.data if trace.type == "scatter" and trace.marker.showscale]
    assert bar.orientation == "h" and bar.yref == "container"
    assert below.layout.margin.r == figures.NO_COLOUR_BAR_PX < beside.layout.margin.r == margins.COLORBAR_PX
    assert below.layout.margin.b == beside.layout.margin.b + figures.COLOUR_BAR_BELOW_PX
    assert bar.y * below.layout.height < below.layout.margin.b  # the bar's top lies in the bottom margin
    assert below.layout.legend.yref == "container" and below.layout.legend.y == 0  # the legend at the foot, under it
    assert colour_range(below) == colour_range(beside)


def test_pooled_embedding_maps_share_a_scale_that_spans_what_they_show_and_name_each_rows_positions():
    """At 1,024 tokens the Tokens page mean-pools its embedding maps: their one colour scale spans the pooled values
    (the raw extremes left the maps pale), and a pooled row says which positions it averages."""
    rng = np.random.default_rng(0)
    embeddings = {name: rng.standard_normal((1024, 768)).astype(np.float32) for name in ("token", "position")}
    embeddings["input"] = embeddings["token"] + embeddings["position"]  # (n, d_in)
    tokens = [f"·t{i}" for i in range(1024)]
    caption, maps = figures.embedding_figures(embeddings, tokens, rotary=False)
    shown = [np.asarray(figure.data[0].z, dtype=np.float32) for _, figure in maps]  # (256, 256) each
    bound = max(float(np.nanmax(np.abs(values))) for values in shown)
    assert all(figure.data[0].zmax == -figure.data[0].zmin == pytest.approx(bound) for _, figure in maps)
    assert f"±{bound:.2f}" in caption
    assert bound < float(np.abs(embeddings["input"]).max()) / 2  # the pooled values, not the raw extremes
    assert list(maps[0][1].data[0].y[:2]) == ["0–3", "4–7"] and maps[0][1].data[0].y[-1] == "1020–1023"


def test_a_chip_shows_its_id_on_its_pieces_baseline_so_a_period_is_not_read_as_a_space():
    """The Tokens page's chips: "." (id 13) and " " (id 220, shown "·"). An id lowered under the piece (a subscript)
    lifted a period to the height of a space's "·" beside it (". 13" read as "· 13"); on the piece's baseline the
    period sits low and the dot of a space in the middle, as on the maps' labels and in the "why this weight" panel."""
    from html.parser import HTMLParser

    class Chips(HTMLParser):
        def __init__(self):
            super().__init__()
            self.depth, self.chips = 0, []  # [(piece, [(tag, style, text)])]

        def handle_starttag(self, tag, attrs):
            self.depth += 1
            if self.depth == 2:
                self.chips.append(["", []])
            elif self.depth > 2:
                self.chips[-1][1].append([tag, dict(attrs).get("style", ""), ""])

        def handle_endtag(self, tag):
            self.depth -= 1

        def handle_data(self, data):
            if self.depth == 2:
                self.chips[-1][0] += data
            elif self.depth > 2:
                self.chips[-1][1][-1][2] += data

    parser = Chips()
    parser.feed(figures.token_chips_html([".", "·", "·cat"], [13, 220, 3797], [False, False, False]))
    assert [piece for piece, _ in parser.chips] == [".", "·", "·cat"]
    for (_, inner), token_id in zip(parser.chips, (13, 220, 3797)):
        ((tag, style, text),) = inner  # the id, the chip's one element
        assert text.strip() == str(token_id)
        assert tag not in ("sub", "sup") and "vertical-align" not in style  # on the piece's baseline
