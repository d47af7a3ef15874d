"""Figures of generation with a KV cache: the new query rows over the cached keys and the cache's bytes against the
context length.  Pure Plotly: arrays and labels in, a ``go.Figure`` out."""

from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go

from attnviz.kv_cache import format_bytes
from attnviz.trace import window_band
from attnviz.views import margins
from attnviz.views.figures import tick_positions

VARIANT_COLORS = {"MHA": "#08519c", "GQA": "#31a354", "MQA": "#74c476", "MLA": "#e6550d", "SWA": "#756bb1",
                  "SWA+GQA": "#bcbddc"}
OWN_COLOR = "#d62728"  # a model's own attention where no variant's line is it (Gemma 3's "MQA + SWA 5:1")


def new_rows(rows: list[np.ndarray], n_keys: int, *, positions: list[int] | None = None,
             window: int | None = None) -> np.ndarray:
    """Query rows of different lengths (step j attends over its k_j cached keys) stacked into float32
    ``(len(rows), n_keys)``; keys a row could not see yet are NaN (drawn empty, not as 0).  With a sliding
    ``window`` W and each row's query ``positions``, the keys W or more behind a row's query — dropped from the
    cache, their weight 0 only because the row was widened to every position — are NaN too."""
    out = np.full((len(rows), n_keys), np.nan, dtype=np.float32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    if window is not None and positions is not None:
        # keys i − W and older: no longer cached (a later key is already NaN where the row stops)
        out[window_band(len(rows), n_keys, window, causal=False, positions=positions[: len(rows)])] = np.nan
    return out


# px, whatever the rows and keys: the title under the modebar's row, then the map and its key labels (a margin that
# grows with the labels, and the map gives way), so the page below keeps its place
ROWS_HEIGHT = margins.title_top(size=14) + 390
# The widest the rows map is drawn, and the narrowest its column is: the page's full width beside the sidebar in a
# 1,100 px window is ~690 px.  Its key labels are chosen to fit this width (a figure cannot ask the browser its width).
ROWS_MIN_WIDTH = 640  # px
KEY_LABEL_PX = 18  # the width a key label turned upright needs (a 12 px line, and a gap)
QUERY_LABEL_PX = 16  # the height a query label needs
MIN_ROW_PX = QUERY_LABEL_PX  # a query row's height at least (its label's): over more keys, rows are drawn taller
QUERY_TITLE = "query"  # the y axis' title, upright beside the rows: a short one, which a map of one row still holds
MIN_MAP_PX = margins.text_px([QUERY_TITLE]) + 13  # the rows' height at least: their axis' title, and a gap


def rows_figure(z: np.ndarray, query_labels: list[str], key_labels: list[str], *, prompt_length: int,
                title: str) -> go.Figure:
    """The generated tokens' query rows ``z`` (steps, keys) over every cached key; a line where the prompt ends.

    Numeric axes with token tick labels (a category axis of hundreds of tokens is slow).  The cells are square, as
    the attention map's whose rows these are (``yaxis.scaleanchor``), as large as the figure's fixed height and
    :data:`ROWS_MIN_WIDTH` allow, from the top left: the figure is as wide as its cells, its labels and its colour bar
    (``layout.width``, for ``st.plotly_chart(width="content")``), and as tall whatever the steps, so the page below
    keeps its place as the steps add rows.  Where square cells would leave a row under :data:`MIN_ROW_PX`, or the rows
    under :data:`MIN_MAP_PX` (a few rows over a long prompt), the rows are that tall and the cells taller than wide
    (``scaleratio``).
    The heatmap sits on ``xaxis2``/``yaxis2``, which overlay and match
    ``xaxis``/``yaxis``: every position is one of their ticks, labels hidden, so the hover names query and key by
    their tick text (Plotly writes a position on an array-tick axis as its tick's text) without a string per cell,
    while the visible axes show at most 20 keys (turned upright, as many as the map's width holds) and
    24 queries (as many as fit the plot's height).  Labels are escaped: Plotly renders a subset of HTML
    in them, and tokens come from the user's text."""
    query_labels = [html.escape(label, quote=True) for label in query_labels]
    key_labels = [html.escape(label, quote=True) for label in key_labels]
    steps, n_keys = z.shape
    layout = {
        "title": margins.title(title, 14), "height": ROWS_HEIGHT,
        # margins that hold the title and the labels, so Plotly draws the map once (views/margins.py)
        "margin": {"l": 10, "r": margins.COLORBAR_PX, "t": margins.title_top(size=14), "b": 10},
        # the prompt's end, on the heatmap's own axes
        "shapes": [{"type": "line", "xref": "x2", "yref": "y2", "x0": prompt_length - 0.5,
                    "x1": prompt_length - 0.5, "y0": -0.5, "y1": steps - 0.5,
                    "line": {"color": "#e6550d", "width": 1, "dash": "dot"}}],
    }
    # the key labels first: the left margin holds the query labels, and the plot's width what is left of the map's
    query_shown = [query_labels[i] for i in tick_positions(0, len(query_labels), 24).tolist()]
    plot_width = ROWS_MIN_WIDTH - margins.beside(query_shown) - margins.COLORBAR_PX
    # the key labels the map's width holds, and the room under the map for those same labels: a taller room leaves a
    # shorter plot, whose rows may then narrow the map (square cells) to fewer labels, so the room is found first
    # growing, never shrinking, until it holds the labels of the map it leaves
    bottom = margins.across([], angle=90)
    while True:
        plot_height = ROWS_HEIGHT - layout["margin"]["t"] - bottom
        # a cell's width and height: square, across the width where the rows fit the height, else as tall as they fit
        key_px = min(plot_width / n_keys, plot_height / steps)
        map_width = math.ceil(key_px * n_keys)
        key_ticks = tick_positions(0, len(key_labels), max(2, min(20, map_width // KEY_LABEL_PX))).tolist()
        needed = margins.across([key_labels[i] for i in key_ticks], angle=90)
        if needed <= bottom:
            break
        bottom = needed
    layout["margin"]["b"] = bottom
    row_px = min(max(key_px, MIN_ROW_PX, MIN_MAP_PX / steps), plot_height / steps)
    query_ticks = tick_positions(0, len(query_labels), max(1, min(24, plot_height // QUERY_LABEL_PX))).tolist()
    for name, labels, title_text, shown, extra in (
            ("x", key_labels, "key (cached token)", key_ticks, {"tickangle": -90, "constrain": "domain",
                                                               "constraintoward": "left"}),
            ("y", query_labels, QUERY_TITLE, query_ticks,
             {"scaleanchor": "x", "scaleratio": row_px / key_px, "constrain": "domain", "constraintoward": "top"})):
        every = list(range(len(labels)))
        span = [-0.5, len(labels) - 0.5]
        shown_labels = [labels[i] for i in shown]
        if name == "y":
            layout["margin"]["l"] = margins.beside(shown_labels)
        layout[f"{name}axis"] = {"title": {"text": title_text}, "tickmode": "array", "tickvals": shown,
                                 "ticktext": shown_labels, "range": span if name == "x" else span[::-1],
                                 **margins.LABELS_HELD, **extra}
        layout[f"{name}axis2"] = {"overlaying": name, "matches": name, "tickmode": "array", "tickvals": every,
                                  "ticktext": labels, "showticklabels": False, "ticks": "", "showgrid": False,
                                  "zeroline": False}
    # as wide as the map, its labels and colour bar (and its title): the colour bar beside the cells
    layout["width"] = max(layout["margin"]["l"] + map_width + layout["margin"]["r"],
                          math.ceil(margins.title_px(title, 14)) + margins.TITLE_INSET_PX)
    # a colour bar as tall as the rows, and tall enough for its labels
    colorbar = {"title": {"text": "weight"}, "thickness": 12, "lenmode": "pixels",
                "len": max(COLOUR_BAR_MIN_PX, min(plot_height, row_px * steps)), "y": 1, "yanchor": "top"}
    # one constructor call: each update_* call re-walks Plotly's property paths (benchmarks/README.md, "A step of the
    # Generate page in Chromium", item 1)
    return go.Figure(
        data=[go.Heatmap(
            z=z.astype(np.float32), x=np.arange(n_keys), y=np.arange(steps), zmin=0.0, zmax=1.0, colorscale="Blues",
            xaxis="x2", yaxis="y2", colorbar=colorbar,
            hovertemplate="%{y} → %{x}<br>weight %{z:.4f}<extra></extra>", hoverongaps=False),
            # one transparent point on the visible axes: Streamlit's Plotly draws no axis whose subplot has no trace
            go.Scatter(x=[0], y=[0], mode="markers", marker={"opacity": 0}, hoverinfo="skip", showlegend=False)],
        layout=layout)


COLOUR_BAR_MIN_PX = 150  # the rows map's colour bar at least: its 0 … 1 labels apart


COST_PLOT_PX = 286  # the cost chart's plot, between its title and its length axis
# The narrowest the cost chart is drawn: the page's width beside the sidebar in a 900 px window; its title is broken
# into lines that fit it (Plotly cuts a title at the figure's edge)
COST_MIN_WIDTH = 420  # px
COST_LEGEND_LINE_PX = 16  # a second line of a cost line's legend label
# a legend label's 12 px text, measured as a 13 px title's characters: Plotly's Open Sans is wider than the
# titles' Source Sans that margins.title_px measures
LEGEND_FONT_PX = 13
COST_LEGEND_SAMPLE_PX = 40  # a legend entry's line sample and the gaps beside it, left of its label
COST_RIGHT_PX = 30  # the cost chart's right margin
COST_LEGEND_ROW_PX = 20  # a row of the cost chart's legend, one entry a row (Plotly draws them 19 px apart)
DOT_PX = 5  # a cost line's markers
RING = {"size": 10, "symbol": "circle-open", "line": {"width": 2}}  # those of a line on another: rings around its dots
MAX_LENGTH_TICKS = 6  # the cost chart's context lengths labelled at most (256, 1k, 4k, 16k, 64k, 128k from 256)


def _length_ticks(lengths: list[int]) -> list[int]:
    """The cost chart's labelled context lengths: at most :data:`MAX_LENGTH_TICKS`, powers of two at even steps (a
    window among the lengths, 1,000, is drawn, not labelled) and the longest, none crowding it (160k): upright labels
    of ~4 characters fit a plot 300 px wide."""
    powers = [n for n in lengths[:-1] if n & (n - 1) == 0]
    every = max(1, -(-len(powers) // (MAX_LENGTH_TICKS - 1)))
    return [n for n in [*powers[::every], lengths[-1]] if n == lengths[-1] or lengths[-1] / n >= 1.5]


def kv_bytes_figure(lengths: list[int], curves: dict[str, list[int]], labels: dict[str, str] | None = None, *,
                    title: str, marker_at: int | None = None) -> go.Figure:
    """KV-cache bytes against the context length, both axes logarithmic, one line per variant.

    ``labels``: a legend label per curve (its settings); ``marker_at``: a context length drawn as a dotted line
    (the model's own context).  A curve equal to an earlier one (the same bytes at every length) is drawn dotted on
    top of it, and its label says which it equals; one that meets an earlier one at some lengths (a window's line
    lies on its attention's up to the window) has rings for markers, wider than the dots under them, so both lines
    show where they coincide.  The legend sits under the plot, one entry a row, and at most
    :data:`MAX_LENGTH_TICKS` lengths are labelled (powers of two at even steps, and the longest), and the title is
    broken into lines that fit :data:`COST_MIN_WIDTH`: the chart reads at any width."""
    labels = dict(labels or {})
    fig = go.Figure()
    first_with = {}  # a curve's values -> the first variant with them
    for name, values in curves.items():
        same = first_with.setdefault(tuple(values), name)
        if same != name:
            labels[name] = f"{labels.get(name, name)} = {same}"
        dash = "dot" if same != name else "dash" if "SWA" in name else "solid"
        meets = same == name and any(value == under[i] for under in first_with if under != tuple(values)
                                     for i, value in enumerate(values))  # lies on an earlier line somewhere
        fig.add_trace(go.Scatter(
            x=lengths, y=values, mode="lines+markers", name=legend_label(labels.get(name, name)),
            marker=RING if meets else {"size": DOT_PX},
            line={"color": VARIANT_COLORS.get(name, OWN_COLOR), "dash": dash, "width": 3 if same != name else 2},
            customdata=[format_bytes(v) for v in values],
            hovertemplate=f"{name}<br>%{{x:,}} tokens: %{{customdata}}<extra></extra>"))
    if marker_at:
        fig.add_vline(x=marker_at, line={"color": "#636363", "width": 1, "dash": "dot"})
    ticks = _length_ticks(lengths)
    fig.update_xaxes(type="log", title=margins.axis_title("context length (tokens)"), tickvals=ticks,
                     ticktext=[f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else f"{n:,}" for n in ticks])
    # a label at each power of 10 only ("1M", "10M", "100M", "1G": SI, so a billion bytes is not "1B"): Plotly's own
    # log ticks add 2 and 5 between them, and "2 100M 5 2 10M" reads as one run of numbers
    fig.update_yaxes(type="log", title="KV cache (bytes)", dtick=1, exponentformat="SI")
    # the legend under the plot, one entry a row, so the plot keeps the figure's width whatever the labels' length
    extra_lines = sum(trace.name.count("<br>") for trace in fig.data)
    legend_px = COST_LEGEND_ROW_PX * len(curves) + COST_LEGEND_LINE_PX * extra_lines + 10
    # margins that hold the title (in lines that fit the narrowest chart), the legend and the labels
    title = margins.wrapped_title(title, COST_MIN_WIDTH, 14)
    margin = {"l": margins.beside(), "r": COST_RIGHT_PX, "t": margins.title_top(title.count("<br>") + 1, size=14),
              "b": margins.under_axis() + legend_px}
    fig.update_layout(title=margins.title(title, 14), height=margins.height(COST_PLOT_PX, margin),
                      legend={**margins.LEGEND_AT_FOOT, "entrywidth": 1, "entrywidthmode": "fraction"}, margin=margin)
    return fig


def legend_label(label: str) -> str:
    """A cost line's legend label in lines (``<br>``) that fit the narrowest chart's legend entry beside its line's
    sample, broken after a comma between its settings ("SWA (4 K/V heads × 256,<br>window 512 on 15 of 18 layers,
    5:1 SWA:full)"): an entry is as wide as the plot (the legend's ``entrywidth``), and Plotly cuts its text there."""
    room = COST_MIN_WIDTH - margins.beside() - COST_RIGHT_PX - COST_LEGEND_SAMPLE_PX
    lines, rest = [], label
    while margins.title_px(rest, LEGEND_FONT_PX) > room and ", " in rest:
        cuts = [i for i in range(len(rest)) if rest.startswith(", ", i)]
        cut = max((i for i in cuts if margins.title_px(rest[: i + 1], LEGEND_FONT_PX) <= room), default=cuts[0])
        lines.append(rest[: cut + 1])
        rest = rest[cut + 2:]
    return "<br>".join([*lines, rest])
