"""Pure Plotly figure builders: arrays + labels in, ``go.Figure`` out.  No model runs here and
no Streamlit: pages hand slices of a Trace to these functions.

Conventions shared by every attention map:

* rows are query tokens, columns are key tokens; axes are numeric (one unit a position, so a
  1,024-token map is two arrays of positions, not 1,024 categories) with the token pieces as tick
  labels, and repeated tokens ("the") never collapse;
* a token map is an image of its cells' colours (``views.map_image``: a PNG Plotly draws as it is) under a
  transparent scatter over its cells (one point a cell, on a second pair of
  axes that match the first and carry every position's token as its tick text): it shows the hover
  (query token, key token, value) and makes cells clickable and box/lasso-selectable in
  ``st.plotly_chart(on_select=…)`` — an image or heatmap trace itself emits no selection;
* masked cells (−∞ before softmax, exactly 0 after) are drawn as gaps over a grey background
  and labelled "masked", so they are never confused with small weights;
* weights use a fixed 0…1 colour scale (dropout's kept cells go up to 1/(1−p));
* a figure that shows fewer cells than the data (max-pooling) says so in its title.
"""

from __future__ import annotations

import functools
import html
import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attnviz.views import margins
from attnviz.views.map_image import colour_bar, map_image

MASKED_COLOR = "#c8c8c8"
SELECTED_COLOR = "#d62728"  # a selected cell's dot on a token map
WEIGHT_SCALE = "Viridis"
SCORE_SCALE = "RdBu_r"
MAP_TITLES = {
    "scores": "scores = Q·Kᵀ",
    "scaled": "scaled = scores ÷ √dₖ",
    "masked": "masked (−∞ above the diagonal)",
    "weights": "weights = softmax(masked)",
    "dropped": "dropped = dropout(weights)",
}
PROBABILITY_STAGES = ("weights", "dropped")


UNSCALED_TITLE = "scaled = scores (no ÷√dₖ in this class)"  # the scaled stage of a class that does not divide (3.3)
UNMASKED_TITLE = "masked = scaled (causal mask off)"  # the masked stage of a run that hides no key


def map_title(stage: str, window: int | None = None, scaled: bool = True, masks: bool = True,
              dropout_off: str | None = None, divisor: str | None = None) -> str:
    """A stage's title (:data:`MAP_TITLES`), saying what ran: a sliding window of ``window`` tokens also hides the
    keys that far back or further, so its masked stage is a band, not a triangle; a class that does not divide by
    √dₖ (``scaled`` False: the simplified class of 3.3) records its scores unchanged as its scaled stage, a run that
    hides no key (``masks`` False: the causal mask off) its scaled scores as its masked stage, and a run whose
    dropout did nothing (``dropout_off``: why, in words) its weights as its dropped stage — and the title says so
    (``views.steps.stage_title`` gives a run's); ``divisor``: a scale other than √dₖ the run divided by, in words
    (``"8 (not √dₖ = √8)"``)."""
    if stage == "masked" and window is not None:
        return f"masked (−∞ above the diagonal or ≥ {window} back)"
    if stage == "masked" and not masks:
        return UNMASKED_TITLE
    if stage == "scaled" and not scaled:
        return UNSCALED_TITLE
    if stage == "scaled" and divisor is not None:
        return f"scaled = scores ÷ {divisor}"
    if stage == "dropped" and dropout_off is not None:
        return f"dropped = weights ({dropout_off})"
    return MAP_TITLES.get(stage, stage)


def safe_label(text: str) -> str:
    """Escape user-derived text for Plotly (which renders a subset of HTML in labels)."""
    return html.escape(text, quote=True)


def position_labels(tokens: list[str] | tuple[str, ...]) -> list[str]:
    """Unique category labels ``"i: piece"`` — repeated tokens keep their own row/column."""
    return [f"{i}: {safe_label(piece)}" for i, piece in enumerate(tokens)]


@functools.lru_cache(maxsize=4)
def causal_mask(n: int) -> np.ndarray:
    """(n, n) bool, True above the diagonal (what the causal mask hides).  Cached and read-only: the grid,
    the overview and every rerun share one 1024² mask instead of building it again."""
    mask = np.triu(np.ones((n, n), dtype=bool), k=1)
    mask.setflags(write=False)
    return mask


def _block_extremes(maps: np.ndarray, block: int, signed: bool) -> np.ndarray:
    """(heads, rows, cols) -> (heads, ⌈rows/block⌉, ⌈cols/block⌉) block maxima, NaN-aware: a block is NaN
    only if all of it is (padding is NaN).  ``signed``: each block's value of largest magnitude, with its sign
    (ties: the positive one).  One pass over the data, no full-size temporaries."""
    heads, rows, cols = maps.shape
    pad_rows, pad_cols = (-rows) % block, (-cols) % block
    values = np.asarray(maps, dtype=np.float32)
    if pad_rows or pad_cols:
        values = np.pad(values, ((0, 0), (0, pad_rows), (0, pad_cols)), constant_values=np.nan)
    # (heads, R·block, C·block) -> (heads, R, block, C, block)
    blocks = values.reshape(heads, values.shape[1] // block, block, values.shape[2] // block, block)
    # reduce the rows of each block first (contiguous rows, vectorised), then the short column runs
    high = np.fmax.reduce(np.fmax.reduce(blocks, axis=2), axis=-1)  # (heads, R, C); fmax skips NaN
    if not signed:
        return high
    low = np.fmin.reduce(np.fmin.reduce(blocks, axis=2), axis=-1)  # (heads, R, C)
    return np.where(-low > high, low, high)


def max_pool(matrix: np.ndarray, max_size: int, signed: bool = False) -> tuple[np.ndarray, int]:
    """Max-pool a 2-D array so neither side exceeds ``max_size`` (NaN-aware: a block is NaN only
    if all of it is).  ``signed``: keep each block's value of largest magnitude, with its sign (for
    scores, whose peaks are negative as well as positive).  Returns (pooled, block size)."""
    rows, cols = matrix.shape
    block = max(1, math.ceil(max(rows, cols) / max_size))
    if block == 1:
        return matrix, 1
    return _block_extremes(np.asarray(matrix)[None], block, signed)[0].astype(np.float32, copy=False), block


def _all_masked_blocks(n_rows: int, n_cols: int, block: int) -> np.ndarray:
    """(⌈n_rows/block⌉, ⌈n_cols/block⌉) bool: True where every cell of the block is above the diagonal."""
    first_col = np.arange(math.ceil(n_cols / block)) * block  # (C,)
    last_row = np.minimum(np.arange(math.ceil(n_rows / block)) * block + block, n_rows) - 1  # (R,)
    return first_col[None, :] > last_row[:, None]  # (R, C)


def pooled_display(maps: np.ndarray, stage: str, causal: bool, max_cells: int,
                   hidden: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """``max_pool(display_values(m, stage, causal), max_cells)`` of every (n, n) map in ``maps`` (heads, n, n),
    without the full-size float copies: masked cells of the probability stages are exactly 0 and the kept
    ones ≥ 0, so pooling the raw maps and then blanking the blocks that lie wholly above the diagonal gives
    the same values.  ``hidden`` (heads, n, n) bool: the cells a mask other than the causal one hides (a
    sliding window); blocks it hides wholly are blanked too.  Returns ((heads, s, s) float32, block size)."""
    heads, rows, cols = maps.shape
    block = max(1, math.ceil(max(rows, cols) / max_cells))
    signed = stage not in PROBABILITY_STAGES
    values = np.asarray(maps, dtype=np.float32)
    if signed and not np.isfinite(values).all():  # −∞ of the masked stage: NaN, as display_values does
        values = np.where(np.isfinite(values), values, np.float32(np.nan))
    pooled = np.array(values, dtype=np.float32) if block == 1 else _block_extremes(values, block, signed)
    if causal and stage in PROBABILITY_STAGES:
        pooled[:, _all_masked_blocks(rows, cols, block)] = np.nan
    if hidden is not None and stage in PROBABILITY_STAGES:
        seen = np.asarray(~hidden, dtype=np.float32)  # 1 where a key is visible
        pooled[(seen if block == 1 else _block_extremes(seen, block, signed=False)) == 0] = np.nan
    return pooled, block


def display_values(matrix: np.ndarray, stage: str, causal: bool) -> np.ndarray:
    """float32 copy with masked cells as NaN (drawn as grey gaps)."""
    values = np.array(matrix, dtype=np.float32)
    values[~np.isfinite(values)] = np.nan  # −∞ in the masked stage
    if causal and stage in PROBABILITY_STAGES:
        rows, cols = values.shape
        values[causal_mask(max(rows, cols))[:rows, :cols]] = np.nan
    return values


def color_range(stage: str, values: np.ndarray, dropout: float = 0.0) -> tuple[float, float, str]:
    """(zmin, zmax, colourscale): fixed 0…1 for weights, symmetric around 0 for scores."""
    if stage == "weights":
        return 0.0, 1.0, WEIGHT_SCALE
    if stage == "dropped":
        return 0.0, 1.0 / (1.0 - dropout), WEIGHT_SCALE
    finite = values[np.isfinite(values)]
    bound = float(np.abs(finite).max()) if finite.size else 1.0
    return -bound or -1.0, bound or 1.0, SCORE_SCALE


def shared_range(matrices) -> tuple[float, float]:
    """Symmetric colour range covering the finite values of all ``matrices``."""
    bounds = [float(np.abs(m[np.isfinite(m)]).max()) for m in matrices if np.isfinite(m).any()]
    bound = max(bounds, default=1.0) or 1.0
    return -bound, bound


MAP_TITLE_PX = margins.title_top()  # a token map's one-line title under the modebar's row, above its key tokens
# px: a map's column (its labels, square cells and colour bar); two side by side beside the sidebar at 1,280 px
PAIR_MAP_PX = 390
# px: the Heads page's focused map (its labels, square cells and colour bar), with the "why" panel beside it on a
# 1,280 px window with the sidebar open (a narrower page puts the panel under the map)
FOCUSED_MAP_PX = 480
NO_COLOUR_BAR_PX = 24  # the right margin of a map without a colour bar: its last key label's turned foot
COLOUR_BAR_BELOW_PX = 44  # a horizontal colour bar under a map: the gap above it, the bar and its tick labels
COLOUR_BAR_GAP_PX = 14  # from the map's foot to the top of a colour bar under it, with room for the title beside it


def attention_heatmap(
    matrix: np.ndarray,
    tokens: list[str] | tuple[str, ...],
    stage: str = "weights",
    *,
    causal: bool = True,
    dropout: float = 0.0,
    title: str = "",
    row_offset: int = 0,
    col_offset: int = 0,
    zrange: tuple[float, float] | None = None,
    validate: bool = True,
    uirevision: str | None = None,
    hidden: np.ndarray | None = None,
    title_px: int = MAP_TITLE_PX,
    width: int,
    show_scale: bool = True,
    scale_below: bool = False,
    label: str | None = None,
) -> go.Figure:
    """Full-resolution token map of one head's (rows × cols) map, hover = query token, key token, value.

    ``matrix`` may be a window of a larger map: ``row_offset``/``col_offset`` say where it starts and ``tokens`` are
    the tokens of the whole sequence.  The map is an image of the cells' colours on numeric axes (x = key position,
    y = query position) under a transparent cell overlay (:func:`cell_overlay`), whose points (x, y) are the cells a
    click or a box selection reports.  ``validate=False`` skips Plotly's per-property validation
    (``tests/views/test_figures.py`` validates these dicts): for a figure that is drawn as it is, not changed
    afterwards.  ``uirevision`` keeps a zoom across redraws of the same view.  ``hidden`` (rows × cols bool): cells a
    mask other than the causal one hides (a sliding window), grey in the probability stages like the causal mask's.
    ``title_px``: the room above the key tokens' labels for the title (0 for a map whose caller blanks it); the
    figure is that much taller, so a title's room never comes out of the cells, and maps side by side with the same
    title room are as tall.  ``width``: the width the page gives the chart (a column of that width): the figure is
    as tall as square cells across it need, so they fill its plot, and the key tokens' and query tokens' labels are
    as many as the plot holds without overlapping.  The cells are square, as the matrix's, whatever the chart's
    shape (``yaxis.scaleanchor``: the plot area, not the range, gives way, and the cells sit at its top left).
    ``show_scale`` False: no colour bar beside the map, whose room goes to the cells (maps side by side on one fixed
    scale, whose page says it once).  ``scale_below``: the colour bar lies under the map, across its width, and the
    map takes the room a bar beside it would (a map in a narrow card: the Steps page's before/after pair).
    ``label``: the name of the value in the colour bar and the hover where it is not ``stage``'s (a map of weights
    times something else, drawn and masked as weights are).
    """
    rows, cols = matrix.shape
    label = stage if label is None else label
    values = display_values(matrix, stage, causal=False)
    if causal and stage in PROBABILITY_STAGES:
        query_pos = np.arange(row_offset, row_offset + rows)[:, None]
        key_pos = np.arange(col_offset, col_offset + cols)[None, :]
        values[key_pos > query_pos] = np.nan
    if hidden is not None and stage in PROBABILITY_STAGES:
        values[hidden] = np.nan
    zmin, zmax, scale = color_range(stage, values, dropout)
    if zrange is not None:  # a before/after pair shares one scale, so equal values look equal
        zmin, zmax = zrange
    palette = colorscale(scale)
    data = [map_image(values, zmin, zmax, palette, x0=col_offset, y0=row_offset, name=stage)]
    below_px = COLOUR_BAR_BELOW_PX if show_scale and scale_below else 0  # under the plot, above the legend
    right_px = margins.COLORBAR_PX if show_scale and not below_px else NO_COLOUR_BAR_PX
    axes = token_axes(tokens, (row_offset, rows), (col_offset, cols))
    top = title_px + margins.turned_axis(axes["xaxis"]["ticktext"])
    def square_height() -> int:  # the figure's, for square cells across the plot ``width`` leaves beside the labels
        plot_width = width - margins.beside(axes["yaxis"]["ticktext"]) - right_px
        return top + round(plot_width * rows / cols) + margins.LEGEND_BELOW_PX + below_px

    height = square_height()  # with every label; again below, with the labels that fit
    # as many labels as the plot holds without overlapping: its height for the rows, and its width for the columns
    plot_px = height - top - margins.LEGEND_BELOW_PX - below_px
    # without a colour bar beside it, the last key label leans right of its tick into the right margin, which holds
    # what the cells do not; a wider margin leaves the plot narrower, and maybe fewer labels: until both agree
    leans, settled = right_px == NO_COLOUR_BAR_PX, None
    while settled != right_px:
        settled = right_px
        plot_width_px = width - margins.beside(axes["yaxis"]["ticktext"]) - right_px
        row_ticks, column_ticks = max(2, plot_px // ROW_LABEL_PX), max(2, plot_width_px // COLUMN_LABEL_PX)
        if row_ticks < len(axes["yaxis"]["tickvals"]) or column_ticks < len(axes["xaxis"]["tickvals"]):
            axes = token_axes(tokens, (row_offset, rows), (col_offset, cols), max_row_ticks=row_ticks,
                              max_column_ticks=column_ticks)
        if leans:
            plot_width_px = width - margins.beside(axes["yaxis"]["ticktext"]) - right_px
            right_px = max(right_px, _lean_past_plot(axes["xaxis"], col_offset + cols, plot_width_px / cols))
    top = title_px + margins.turned_axis(axes["xaxis"]["ticktext"])  # over the key labels that fit
    height = square_height()  # the labels that fit may be narrower: the plot as wide, and as tall
    # Plotly's own square cells: the y axis keeps the x axis' scale, and the plot area, not the range, gives way
    axes["xaxis"].update(constrain="domain", constraintoward="left")
    axes["yaxis"].update(scaleanchor="x", constrain="domain", constraintoward="top")
    if show_scale:
        data.append(colour_bar(zmin, zmax, palette, {"title": {"text": label}, "thickness": 12} if not below_px else
                               {"title": {"text": label, "side": "right"}, "thickness": 10, "orientation": "h",
                                "x": 0, "xanchor": "left", "len": 1, "ypad": 0, "yref": "container", "yanchor": "top",
                                "y": (margins.LEGEND_BELOW_PX + below_px - COLOUR_BAR_GAP_PX) / height}))
    data += cell_overlay(values, label, row_offset, col_offset)
    if np.isnan(values).any():
        data.append(_MASKED_LEGEND)
    layout = {
        **axes,
        "title": margins.title(title or MAP_TITLES.get(stage, stage)),
        # margins that hold the labels, so Plotly draws the map once (views/margins.py); t: the title above the
        # key ticks; b: the "masked" legend whether or not there is one, so a before/after pair (only one of
        # them masked) has plots of the same size
        "height": height, "margin": {"l": margins.beside(axes["yaxis"]["ticktext"]), "r": right_px,
                                     "t": top,
                                     "b": margins.LEGEND_BELOW_PX + below_px,
                                     "pad": 0},  # no grey band beside the cells
        "plot_bgcolor": MASKED_COLOR,
        "legend": {"orientation": "h", "y": -0.01, "x": 1, "xanchor": "right", "yanchor": "top"} if not below_px
        else {**margins.LEGEND_AT_FOOT, "x": 1, "xanchor": "right"},  # under the colour bar
        "dragmode": "zoom", "hovermode": "closest",
        # a box select is the box dragged, however thin: Plotly's default ("any") turns a drag under ~12 px in one
        # direction into a band across the whole map (every query row, or every key column)
        "selectdirection": "d",
    }
    if uirevision is not None:
        layout["uirevision"] = uirevision
    return go.Figure(data=data, layout=layout, _validate=validate)


KEY_LABEL_LEAN_PX = 20  # right of a key tick, beyond its label's turned length: the label's line height and standoff


def _lean_past_plot(xaxis: dict, end: int, cell_px: float) -> int:
    """The room right of the plot a map's last key label takes (turned 60°, it leans right of its tick, less the cells
    between its tick and the plot's edge, ``end`` − ½ at ``cell_px`` a cell): 0 where the cells hold it."""
    lean = margins.text_px(xaxis["ticktext"][-1:]) * math.cos(math.radians(60)) + KEY_LABEL_LEAN_PX
    return max(0, math.ceil(lean - (end - 0.5 - int(xaxis["tickvals"][-1])) * cell_px))


MARKED_CELLS = 64 * 64  # an overlay of at most this many cells marks a selected cell with a dot


def undrawn_points() -> dict:
    """A scatter's settings for points Plotly hovers and selects but never draws: text points without text (Plotly
    draws text only where there is some, and of markers only the ``maxdisplayed`` it subsamples; a text-only trace
    has none).  A new dict each call: a figure may keep and change it."""
    return {"mode": "text", "marker": {"maxdisplayed": 1}}


def cell_overlay(values: np.ndarray, stage: str, row_offset: int = 0, col_offset: int = 0) -> list[dict]:
    """The invisible scatter over a token map's cells: one point a cell at (key, query), on the axes
    ``x2``/``y2`` whose tick text names every position and its token, so its hover reads "query 3: ·cat / key
    1: ·the / weights 0.1234".  Visible cells carry their value (``customdata``); masked ones (NaN) are a second trace
    whose hover says the mask hides them.  Both report clicks and box/lasso selections as points (x = key
    position, y = query position).

    Up to :data:`MARKED_CELLS` cells the points are transparent markers, and a selected cell shows a dot.  Above, they
    are :func:`undrawn_points`: Plotly draws none of them, while its hover and selection still test every point, so
    the overlay adds no node a cell.  Not markers there: Plotly's hover takes any marker within 3 px of the pointer as
    the nearest, a cell or two away where cells are that small; a text point must be within half a pixel."""
    stage = stage.replace("<br>", " ")  # a colour bar's title in two lines reads as one in the hover
    rows, cols = values.shape
    keys = np.tile(np.arange(col_offset, col_offset + cols, dtype=np.int16), rows)  # (rows·cols,) positions < 2¹⁵
    queries = np.repeat(np.arange(row_offset, row_offset + rows, dtype=np.int16), cols)  # (rows·cols,)
    flat = values.reshape(-1)  # (rows·cols,)
    hidden = np.isnan(flat)
    common = {"type": "scatter", "xaxis": "x2", "yaxis": "y2", "showlegend": False}
    if flat.size <= MARKED_CELLS:
        common.update(mode="markers", marker={"opacity": 0, "size": 6, "color": SELECTED_COLOR},
                      selected={"marker": {"opacity": 1}}, unselected={"marker": {"opacity": 0}})
    else:
        common.update(undrawn_points())
    overlay = [{**common, "name": "cells", "x": keys[~hidden], "y": queries[~hidden],
                "customdata": flat[~hidden].astype(np.float32, copy=False),
                "hovertemplate": "query %{y}<br>key %{x}<br>" + stage + " %{customdata:.4f}<extra></extra>"}]
    if hidden.any():
        why = "−∞ (masked)" if stage == "masked" else "masked: weight 0"
        overlay.append({**common, "name": "masked cells", "x": keys[hidden], "y": queries[hidden],
                        "hovertemplate": "query %{y}<br>key %{x}<br>" + why + "<extra></extra>"})
    return overlay


# a legend entry for the grey masked cells (a square marker outside the data)
_MASKED_LEGEND = {"type": "scatter", "x": [None], "y": [None], "mode": "markers", "name": "masked",
                  "marker": {"symbol": "square", "size": 12, "color": MASKED_COLOR}, "showlegend": True,
                  "hoverinfo": "skip"}


def tick_positions(first: int, count: int, max_ticks: int = 40) -> np.ndarray:
    """At most ``max_ticks`` evenly spaced positions of ``first … first + count − 1``."""
    step = max(1, math.ceil(count / max_ticks))
    return np.arange(first, first + count, step, dtype=np.int32)


TICK_LABEL_CHARS = 16  # a token's tick label, cut with "…" beyond this (its hover names it whole)
ROW_LABEL_PX = 14  # the height a query token's tick label needs (12 px text)
COLUMN_LABEL_PX = 17  # the width a key token's label needs, turned 60°


def tick_label(piece: str) -> str:
    """A token's tick label: its piece, cut to :data:`TICK_LABEL_CHARS` characters with "…", escaped."""
    return safe_label(piece if len(piece) <= TICK_LABEL_CHARS else piece[: TICK_LABEL_CHARS - 1] + "…")


def token_axes(tokens, rows: tuple[int, int], cols: tuple[int, int], max_ticks: int = 40,
               max_row_ticks: int | None = None, max_column_ticks: int | None = None) -> dict:
    """The four axes of a token map of query rows ``rows`` = (first, count) and key columns ``cols``.

    ``xaxis``/``yaxis`` hold the map: numeric, keys on top and queries down, at most ``max_ticks`` token labels
    each (fewer where ``max_row_ticks`` or ``max_column_ticks`` says), each a :func:`tick_label`.  ``xaxis2``/``yaxis2``
    overlay and match them (a zoom moves all four) and hold the cell overlay: every position of the window is a tick
    whose text is ``"i: piece"``, labels hidden — Plotly's hover writes a position on an axis with array ticks as
    that tick's text."""
    layout = {}
    for name, (first, count), side, title in (("x", cols, "top", "key token"), ("y", rows, None, "query token")):
        every = np.arange(first, first + count, dtype=np.int32)
        most = max_column_ticks if name == "x" else max_row_ticks
        shown = tick_positions(first, count, max_ticks if most is None else min(max_ticks, most))
        span = [first - 0.5, first + count - 0.5]
        # autoscale fits the cells, as Reset axes does: without these bounds Plotly pads the overlay's points (~5 %)
        fit = {"autorangeoptions": {"minallowed": span[0], "maxallowed": span[1]}}
        visible = {"title": {"text": title}, "type": "linear", "tickmode": "array", "tickvals": shown,
                   "ticktext": [tick_label(tokens[i]) for i in shown], "showgrid": False, "zeroline": False,
                   "range": span if name == "x" else span[::-1], **fit, **margins.LABELS_HELD}
        if side:  # the key tokens' labels turned over the map, their title above them (margins.turned_axis)
            visible.update(side=side, tickangle=-60, **margins.turned_title(title, under=False))
        layout[f"{name}axis"] = visible
        layout[f"{name}axis2"] = {"overlaying": name, "matches": name, "tickmode": "array", "tickvals": every,
                                  "ticktext": [f"{i}: {safe_label(tokens[i])}" for i in every], "showticklabels": False,
                                  "ticks": "", "showgrid": False, "zeroline": False, **fit,
                                  **({"side": side} if side else {})}
    return layout


GRID_COLUMNS = 6  # tiles in a full row of the heads grid, at most
GRID_GAP_SHARE = 0.06  # between a row's tiles, a share of the tile: ≈ 7 px whatever the tile's side in cells
GRID_TITLE_FONT_PX = 11  # a tile's title ("head 5"; with its K/V head on a second line where heads share one)
# px: the heads grid's width on a 900 px window with the sidebar open, where the page shrinks it to its column: the
# narrowest its tiles are drawn, and each must still be as wide as its title
GRID_NARROW_PX = 322
GRID_MARGIN_L = 10  # px: left of the heads grid's tiles


def grid_columns(labels: Sequence[str], group: int = 1) -> int:
    """Tiles a row of the heads grid: the most (up to :data:`GRID_COLUMNS`) whose tiles, in a grid shrunk to
    :data:`GRID_NARROW_PX`, are each as wide as the widest title line, marked ▶ as the focused head's is, and half an
    em (fewer columns, wider tiles: "head 10" and "head 11" stand apart instead of running together); heads that
    share K/V heads (``group`` a K/V head) side by side, a group never split across rows unless it is longer than a
    row."""
    lines = [line for label in labels for line in label.split("<br>")]
    # the widest title, and half an em between it and its neighbour's
    title_px = max(margins.title_px(f"▶ {line}", GRID_TITLE_FONT_PX) for line in lines) + GRID_TITLE_FONT_PX / 2
    plot_px = GRID_NARROW_PX - GRID_MARGIN_L - margins.COLORBAR_PX
    columns = GRID_COLUMNS
    while columns > 1 and plot_px / (columns + (columns - 1) * GRID_GAP_SHARE) < title_px:
        columns -= 1
    columns = min(columns, len(labels))
    return group * (columns // group) if 1 < group <= columns else columns


# a grid title line's room above its row, a share of the tile: an 11 px line takes 15 px, and a page shrinks a full
# row's tiles to ~37 px on an 800 px window with the sidebar open
GRID_TITLE_SHARE = 0.48


def heads_grid(
    maps: np.ndarray,
    stage: str = "weights",
    *,
    causal: bool = True,
    dropout: float = 0.0,
    max_cells: int = 64,
    columns: int | None = None,
    group: int = 1,
    labels: list[str] | None = None,
    hidden: np.ndarray | None = None,
    window: int | None = None,
    stage_title: str | None = None,
) -> go.Figure:
    """All heads as small maps, max-pooled to at most ``max_cells`` per side: one image trace per head
    (named "head h"), tiled on **one** pair of axes by each trace's ``x0``/``y0`` (subplots with an axis pair
    per head redraw far slower).  Cells are square, so a tile is square however few heads there are: the plot
    area keeps the tiles' shape and sits at the top left.  The figure is as wide as its tiles, its colour bar and its
    title (``layout.width``, for ``st.plotly_chart(width="content")``; a narrower page shrinks it), so the colour bar
    sits beside the tiles.

    ``maps`` is (heads, n, n).  Tile ``h`` sits at row ``h // columns``, column ``h % columns`` (``None``:
    :func:`grid_columns` of the titles, ``group`` heads that share a K/V head kept in one row); its position is in
    ``layout.meta["tiles"]`` as ``[x0, y0]`` (top-left cell), the tile side in ``meta["size"]``.  The background
    between tiles is white; a grey rectangle under each tile shows its masked cells grey, as in every attention map
    (``hidden``: what a sliding window of ``window`` tokens hides, as in :func:`pooled_display`).  The heading
    starts with ``stage_title``, the run's (``views.steps.stage_title``), or :func:`map_title` of ``stage`` and
    ``window``.  The titles ("head 3", or ``labels``) are annotations (:func:`mark_focus` marks the focused one ▶
    and outlines it).  An invisible scatter overlay of 4 × 4 points a tile (customdata = head index,
    :func:`undrawn_points`) reports clicks: an image's pixels do not.

    Built from plain dicts without Plotly's per-property validation (``tests/views/test_figures.py``
    validates the same dicts).
    """
    num_heads, n, _ = maps.shape
    names = labels or [f"head {head}" for head in range(num_heads)]
    columns = max(1, min(grid_columns(names, group) if columns is None else columns, num_heads))
    rows = math.ceil(num_heads / columns)
    pooled, block = pooled_display(maps, stage, causal, max_cells, hidden)  # (heads, size, size)
    zmin, zmax, scale = color_range(stage, pooled, dropout)
    size = pooled.shape[1]
    gap = size * GRID_GAP_SHARE  # between columns
    lines = max(name.count("<br>") + 1 for name in names)
    # above each row of tiles, room for its titles' lines (a share of a tile: one cell is a whole tile of 1)
    title = size * GRID_TITLE_SHARE * lines
    height_cells, width_cells = rows * (title + size), columns * size + (columns - 1) * gap
    tiles = []
    for head in range(num_heads):
        row, col = divmod(head, columns)
        tiles.append([col * (size + gap), row * (title + size) + title])
    first = block if block > 1 else 1
    palette = colorscale(scale)
    data = [map_image(small, zmin, zmax, palette, x0=x0, y0=y0, name=f"head {head}")
            for head, (small, (x0, y0)) in enumerate(zip(pooled, tiles))]  # hover and clicks: the overlay below
    data.append(colour_bar(zmin, zmax, palette, {"title": {"text": stage}, "thickness": 10, "len": 0.9}))
    marks = (np.arange(min(size, 4)) + 0.5) * size / min(size, 4) - 0.5  # 4 × 4 click targets per tile
    mark_x, mark_y = (a.ravel() for a in np.meshgrid(marks, marks))
    data.append({"type": "scatter", "x": np.concatenate([mark_x + x0 for x0, _ in tiles]),
                 "y": np.concatenate([mark_y + y0 for _, y0 in tiles]),
                 "customdata": np.repeat(np.arange(num_heads), mark_x.size), "name": "select head",
                 **undrawn_points(), "showlegend": False,
                 "hovertemplate": "head %{customdata}: click to focus<extra></extra>"})
    shapes = [{"type": "rect", "x0": x0 - 0.5, "x1": x0 + size - 0.5, "y0": y0 - 0.5, "y1": y0 + size - 0.5,
               "fillcolor": MASKED_COLOR, "line": {"width": 0}, "layer": "below"} for x0, y0 in tiles]
    annotations = [{"x": x0 + (size - 1) / 2, "y": y0 - 0.5, "yanchor": "bottom", "showarrow": False,
                    "text": names[head], "font": {"size": GRID_TITLE_FONT_PX}} for head, (x0, y0) in enumerate(tiles)]
    pooling = ("max-pooling keeps peaks" if stage in PROBABILITY_STAGES
               else "each cell keeps its block's largest |score|")
    note = f"downsampled {n}→{size} per side ({pooling}; exact values: the focused head)" if block > 1 else ""
    heads_text = f"all {num_heads} heads" if num_heads > 1 else "1 head"
    heading = f"{stage_title or map_title(stage, window)}, {heads_text}"
    top = margins.title_top(2 if note else 1, 13)  # the heading (and its note) under the modebar's row
    height = max(180, _grid_row_px(min(num_heads, GRID_COLUMNS)) * rows + 60)
    margin = {"l": GRID_MARGIN_L, "r": margins.COLORBAR_PX, "t": top, "b": 10}
    # as wide as its tiles and colour bar (and its title): the colour bar sits beside the tiles however few there
    # are; a page narrower than that shrinks the tiles, which stay square
    tiles_px = (height - margin["t"] - margin["b"]) * width_cells / height_cells
    width = margin["l"] + max(math.ceil(tiles_px) + margin["r"], math.ceil(margins.text_px([heading]) * TITLE_SCALE),
                              math.ceil(margins.text_px([note]) * TITLE_SCALE * SUP_SCALE))
    layout = {
        "title": margins.title(heading + (f"<br><sup>{note}</sup>" if note else ""), 13),
        "height": height, "width": width,
        "margin": margin,
        "plot_bgcolor": "white", "clickmode": "event+select", "dragmode": False, "hovermode": "closest",
        "hoverdistance": -1,  # the click target nearest the pointer, however far: anywhere on a tile is its head's
        # square cells: the plot area shrinks to the tiles, which sit at its top left under the title
        "xaxis": {"visible": False, "range": [-0.5, width_cells - 0.5], "fixedrange": True, "constrain": "domain",
                  "constraintoward": "left"},
        "yaxis": {"visible": False, "range": [height_cells - 0.5, -0.5], "fixedrange": True, "scaleanchor": "x",
                  "constrain": "domain", "constraintoward": "top"},
        "shapes": shapes, "annotations": annotations,
        "meta": {"tiles": tiles, "size": size, "block": first, "labels": names},
    }
    return go.Figure(data=data, layout=layout, _validate=False)


TITLE_SCALE = 13 / 12  # the grid's 13 px title against the 12 px labels margins.CHAR_PX measures
SUP_SCALE = 0.7  # a <sup> line's text against its title's (Plotly draws it at 70 % of the font size)
GRID_ROW_PX = 150  # a row of GRID_COLUMNS square tiles, about the width of the grid's column on a wide page


def _grid_row_px(heads: int) -> int:
    """A grid row's height: fewer heads than a full row get taller rows, so their square tiles span about the width a
    full row would (at most twice as tall: one head's tile is not made page-sized); ``heads``: the grid's heads,
    capped at :data:`GRID_COLUMNS` (a grid of more heads in fewer columns, for their titles, keeps a full row's
    height)."""
    return round(GRID_ROW_PX * min(2.0, max(1.0, GRID_COLUMNS / heads)))


@functools.lru_cache(maxsize=8)
def colorscale(name: str) -> tuple:
    """A named colour scale (``"Viridis"``, ``"RdBu_r"``) as Plotly's (position, colour) pairs."""
    from plotly.colors import get_colorscale

    return tuple(tuple(pair) for pair in get_colorscale(name))


def _focus_outline(tile, size: int) -> dict:
    x0, y0 = tile
    return {"type": "rect", "x0": x0 - 0.5, "x1": x0 + size - 0.5, "y0": y0 - 0.5, "y1": y0 + size - 0.5,
            "line": {"color": "#d62728", "width": 2}, "layer": "above", "name": "focus"}


def mark_focus(grid: go.Figure, head: int) -> go.Figure:
    """A copy of a ``heads_grid`` figure with ``head``'s title marked ▶ and its tile outlined (``grid`` is
    untouched: it is cached).  Copies the layout's small lists only; the data (the mosaic) is shared."""
    layout = grid.layout.to_plotly_json()
    annotations = []
    meta = layout["meta"]
    names = meta.get("labels") or []
    for index, annotation in enumerate(layout.get("annotations", ())):
        title = annotation["text"].removeprefix("▶ ")
        annotations.append({**annotation, "text": ("▶ " if index == head and index < len(names) else "") + title})
    shapes = [shape for shape in layout.get("shapes", ()) if shape.get("name") != "focus"]
    if 0 <= head < len(meta["tiles"]):
        shapes.append(_focus_outline(meta["tiles"][head], meta["size"]))
    return go.Figure(data=[trace.to_plotly_json() for trace in grid.data],
                     layout={**layout, "annotations": annotations, "shapes": shapes}, _validate=False)


OVERVIEW_PLOT_PX = 250  # the overview's plot: its square of pooled cells


def overview_heatmap(matrix: np.ndarray, stage: str, *, causal: bool, dropout: float = 0.0, max_cells: int = 128,
                     window: tuple[int, int, int] | None = None, validate: bool = True,
                     hidden: np.ndarray | None = None) -> go.Figure:
    """A max-pooled picture of a large map, with the focused window outlined (row0, col0, size).  ``hidden`` (n, n)
    bool: what a mask other than the causal one hides (a sliding window), grey as in the grid and the focused map.
    ``validate=False``: as in :func:`attention_heatmap`."""
    pooled, block = pooled_display(np.asarray(matrix)[None], stage, causal, max_cells,
                                   None if hidden is None else np.asarray(hidden)[None])
    small = pooled[0]
    zmin, zmax, scale = color_range(stage, small, dropout)  # signed pooling keeps the largest |value|: same bound
    # l, b: what Plotly keeps beside axes without labels (less, and it draws the overview twice)
    # pad 0: Plotly's default 8 px between the plot and its axes showed as a grey band on two sides
    margin = {"l": 10, "r": 5, "t": margins.title_top(size=12), "b": 10, "pad": 0}
    cells = [-0.5, small.shape[0] - 0.5]  # the pooled cells edge to edge: autorange widened them for the outline
    layout = {
        # square cells, and the plot area shrunk to the square (the grey background is the masked cells, not a band)
        "yaxis": {"range": cells[::-1], "showticklabels": False, "scaleanchor": "x", "constrain": "domain",
                  "showgrid": False, "zeroline": False, "ticks": ""},
        "xaxis": {"range": cells, "showticklabels": False, "constrain": "domain", "showgrid": False,
                  "zeroline": False, "ticks": ""},
        "title": margins.title(f"overview, downsampled {matrix.shape[0]}→{small.shape[0]} (max-pooling)", 12),
        "height": margins.height(OVERVIEW_PLOT_PX, margin), "margin": margin,
        "plot_bgcolor": MASKED_COLOR,
    }
    if window is not None:
        row0, col0, size = window
        layout["shapes"] = [{"type": "rect", "x0": col0 / block - 0.5, "x1": (col0 + size) / block - 0.5,
                             "y0": row0 / block - 0.5, "y1": (row0 + size) / block - 0.5,
                             "line": {"color": "red", "width": 2}}]
    data = [{"type": "heatmap", "z": small, "zmin": zmin, "zmax": zmax, "colorscale": colorscale(scale),
             "showscale": False, "hoverongaps": False,
             "hovertemplate": f"positions ≈ %{{y}}×{block} … (max of block) %{{z:.4f}}<extra></extra>"}]
    return go.Figure(data=data, layout=layout, _validate=validate)


def softmax(matrix: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64 (−∞ → 0), as torch.softmax(dim=-1)."""
    values = np.asarray(matrix, dtype=np.float64)
    shifted = values - np.max(values, axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


def entropy_bars(tokens, entropy_scaled: np.ndarray, entropy_unscaled: np.ndarray, *,
                 width: int | None = None) -> go.Figure:
    """Per-query entropy of softmax with and without ÷√dₖ (lower = more saturated); ``width``: the narrowest the
    chart is drawn, which its title's lines fit (``margins.wrapped_title``)."""
    labels = position_labels(tokens)[: len(entropy_scaled)]
    fig = go.Figure([
        go.Bar(x=labels, y=entropy_scaled, name="softmax(scores ÷ √dₖ)"),
        go.Bar(x=labels, y=entropy_unscaled, name="softmax(scores) — no scaling"),
    ])
    below = margins.labels_under(labels, angle=60)  # the turned token labels, then the legend at the figure's foot
    # one series a row, whatever the page's width: the margin holds the same legend at any width
    legend, legend_px = margins.legend_one_a_row([trace.name for trace in fig.data])
    title = "entropy of each query's weights (nats; 0 = saturated on one key)"
    title = title if width is None else margins.wrapped_title(title, width, 13)
    top = margins.title_top(title.count("<br>") + 1, 13)
    fig.update_layout(
        title=margins.title(title, 13),
        barmode="group", height=130 + top + below + legend_px,
        margin={"l": margins.beside(title=False), "r": margins.TURNED_LABELS_PX, "t": top, "b": below + legend_px},
        legend=legend,
    )
    fig.update_xaxes(type="category", tickangle=-60, automargin=False, **margins.LABELS_HELD)
    return fig


def difference_heatmap(after: np.ndarray, before: np.ndarray, tokens, *, title: str, row_offset: int = 0,
                       col_offset: int = 0, hidden: np.ndarray | None = None, width: int,
                       scale_below: bool = False) -> go.Figure:
    """after − before (finite cells only), diverging colours around 0, on a token map's axes and overlay
    (``width``, ``scale_below``: as in :func:`attention_heatmap`); ``hidden`` (rows × cols bool):
    cells the run's mask hid, grey as in the maps of the weights (their difference is 0 − 0, not a change)."""
    with np.errstate(invalid="ignore"):
        diff = np.asarray(after, np.float32) - np.asarray(before, np.float32)
    diff[~np.isfinite(diff)] = np.nan
    if hidden is not None:
        diff[hidden] = np.nan
    bound = float(np.nanmax(np.abs(diff))) if np.isfinite(diff).any() else 1.0
    return attention_heatmap(diff, tokens, "Δ", causal=False, title=title, row_offset=row_offset,
                             col_offset=col_offset, width=width,
                             scale_below=scale_below, zrange=(-(bound or 1.0), bound or 1.0))


def pooled_embedding(matrix: np.ndarray, max_cells: int = 256) -> tuple[np.ndarray, int, int]:
    """(n, d) embedding rows mean-pooled along d (and n) to at most ``max_cells`` a side: (values, rows a cell,
    dimensions a cell)."""
    values = np.asarray(matrix, dtype=np.float32)
    n, dim = values.shape
    row_block = max(1, math.ceil(n / max_cells))
    col_block = max(1, math.ceil(dim / max_cells))
    if row_block > 1 or col_block > 1:
        padded = np.pad(values, ((0, (-n) % row_block), (0, (-dim) % col_block)), constant_values=np.nan)
        # (n, dim) -> (⌈n/row_block⌉, ⌈dim/col_block⌉): each block's mean
        values = np.nanmean(padded.reshape(padded.shape[0] // row_block, row_block,
                                           padded.shape[1] // col_block, col_block), axis=(1, 3))
    return values, row_block, col_block


EMBEDDING_PLOT_PX = 226  # an embedding map's plot, under its title and over its dimension axis


def embedding_heatmap(matrix: np.ndarray, tokens, *, title: str, max_cells: int = 256,
                      plot_px: int = EMBEDDING_PLOT_PX, bound: float | None = None) -> go.Figure:
    """(n, d) embedding rows; mean-pooled along d (and n) when larger than ``max_cells`` (said in the title, and a
    pooled row's label names its positions, "0–3").  ``plot_px``: the map's height; the figure adds its margins."""
    n, dim = np.shape(matrix)
    values, row_block, col_block = pooled_embedding(matrix, max_cells)  # (≤ max_cells, ≤ max_cells)
    if row_block > 1 or col_block > 1:
        title += f" — downsampled to {values.shape[0]}×{values.shape[1]} (mean-pooled)"
    y = position_labels(tokens) if row_block == 1 else [
        f"{i * row_block}–{min(n, (i + 1) * row_block) - 1}" for i in range(values.shape[0])]
    bound = bound or float(np.nanmax(np.abs(values))) or 1.0  # pass one bound to compare several heatmaps
    fig = go.Figure(go.Heatmap(
        z=values, y=y, x=np.arange(values.shape[1]) * col_block, zmin=-bound, zmax=bound, colorscale=SCORE_SCALE,
        hovertemplate="token %{y}<br>dim %{x}<br>%{z:.4f}<extra></extra>",
        colorbar={"thickness": 10},
    ))
    fig.update_yaxes(autorange="reversed", type="category")
    pooled = f", mean of {col_block} per cell" if col_block > 1 else ""
    fig.update_xaxes(title=margins.axis_title(f"embedding dimension (d_in = {dim}){pooled}"))
    # margins that hold the title, the token labels, the colour bar and the dimension axis (views/margins.py)
    margin = {"l": margins.beside(y, title=False), "r": margins.COLORBAR_PX, "t": margins.title_top(size=13),
              "b": margins.under_axis(ticks_out=True)}  # a heatmap's axes draw their ticks outward
    fig.update_layout(title=margins.title(title, 13), height=margins.height(plot_px, margin), margin=margin)
    return fig


def embedding_figures(embeddings: dict[str, np.ndarray], tokens, *,
                      rotary: bool) -> tuple[str, list[tuple[str, go.Figure]]]:
    """The Tokens page's embedding maps on one colour scale, as (caption, [(name, figure)]): the token embedding,
    the positional embedding and their sum, the input; with rotary positions, which add no vector, the input alone
    (it is the token embedding).  The scale spans the values the maps show: where they are mean-pooled, the pooled
    values (a scale of the raw extremes would leave pooled maps pale)."""
    shown = ((("input", "input = token embedding"),) if rotary else
             (("token", "token embedding"), ("position", "positional embedding"),
              ("input", "input = token + position")))
    bound = max(float(np.nanmax(np.abs(pooled_embedding(embeddings[name])[0]))) for name, _ in shown) or 1.0
    caption = (f"One map shows both: the token embedding and the input are the same matrix (colour scale ±{bound:.2f})."
               if rotary else
               f"All three use the same colour scale (±{bound:.2f}), so they can be compared cell by cell.")
    return caption, [(name, embedding_heatmap(embeddings[name], tokens, title=f"{label} {embeddings[name].shape}",
                                              bound=bound)) for name, label in shown]


CHIPS_UNBOXED = 120  # a text of more tokens shows its chips in a box of CHIPS_BOX_PX that scrolls: the embeddings
CHIPS_BOX_PX = 320  # below stay in reach (1,024 chips are some 70 lines)


def token_chips_html(tokens: list[str] | tuple[str, ...], token_ids, special) -> str:
    """Coloured chips (piece + id) as HTML; every user-derived string is escaped.  The id is smaller and grey on the
    piece's baseline, not lowered under it: beside a lowered id a period sat as high as a space's ``·`` (". 13" read
    as "· 13"), where the maps' labels and the "why this weight" panel show the two apart."""
    palette = ("#fde2e4", "#e2ece9", "#dfe7fd", "#fff1e6", "#e9edc9", "#f0e6ef")
    chips = []
    for index, (piece, token_id, is_special) in enumerate(zip(tokens, token_ids, special)):
        color = "#ffd166" if is_special else palette[index % len(palette)]
        border = "2px solid #d62828" if is_special else "1px solid #bbb"
        marker = " ★special" if is_special else ""
        chips.append(
            f'<span title="position {index}" style="display:inline-block;margin:2px;padding:2px 6px;'
            f'border-radius:6px;background:{color};border:{border};font-family:monospace;color:#222">'
            f"{html.escape(piece)}<span style='color:#555;font-size:0.8em'> {int(token_id)}{marker}</span></span>"
        )
    return '<div class="attnviz-chips" style="line-height:2">' + "".join(chips) + "</div>"


BENCHMARK_PLOT_PX = 216  # the benchmark bars' plot


def benchmark_bars(rows, about: str) -> go.Figure:
    """Median forward time per implementation (``implementations.Row``s) as horizontal bars, fastest easy to see."""
    fig = go.Figure(go.Bar(
        x=[row.median_ms for row in rows], y=[row.name for row in rows], orientation="h",
        text=[f"{row.median_ms:.2f} ms" for row in rows], textposition="auto",
        hovertemplate="%{y}<br>median %{x:.3f} ms<extra></extra>",
    ))
    fig.update_yaxes(autorange="reversed")
    margin = {"l": margins.beside([row.name for row in rows], title=False), "r": 10, "t": margins.title_top(),
              "b": margins.under_axis()}
    fig.update_layout(title=margins.title(f"median forward time ({about})"),
                      xaxis_title=margins.axis_title("milliseconds (lower is faster)"),
                      height=margins.height(BENCHMARK_PLOT_PX, margin), margin=margin)
    return fig
