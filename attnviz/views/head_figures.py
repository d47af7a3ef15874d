"""Pure Plotly figures of head types, the induction lab and live training: arrays in, ``go.Figure`` out.

No model runs here and no Streamlit (as ``attnviz.views.figures``):

* ``stripe_heatmap`` — one head's weights at full resolution with the induction stripe ``A[i, i−T+1]``
  drawn over the repeat (``attnviz.head_types.induction_stripe``'s cells);
* ``stripe_grid`` — every head of a model (layers × heads) as small maps, each with its stripe: the
  Train page's "before" and "after" snapshots;
* ``score_grid`` — one layers × heads heatmap per score, the value printed in every cell;
* ``loss_curve`` and ``score_curves`` — what the Train page draws while it trains;
* ``position_loss`` — the model's loss at every position of the repeated sequence, the repeat shaded.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from attnviz.head_types import repeat_halves
from attnviz.trace import window_band
from attnviz.views import margins
from attnviz.views.figures import PAIR_MAP_PX, WEIGHT_SCALE, attention_heatmap

STRIPE_COLOR = "#ff2d55"
REPEAT_FILL = "rgba(255, 45, 85, 0.08)"
SCORE_TITLES = {
    "induction": "induction",
    "previous_token": "previous-token",
    "duplicate_token": "duplicate-token",
    "first_token": "first-token mass",
}


def head_name(layer: int, head: int) -> str:
    """``L0H3``: layer 0, head 3 (the name every training figure and table uses)."""
    return f"L{layer}H{head}"


def stripe_cells(n: int, T: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of the induction stripe of an ``n``-token sequence ending in x + x, |x| = T:
    rows ``n−T … n−1`` (the repeat), columns ``row − T + 1``."""
    rows = np.arange(n - T, n)  # (T,)
    return rows, rows - T + 1


# px: the Induction lab's map, its labels and colour bar: the page's narrowest column (an 800 px window's), so that
# the column it is drawn in never shrinks it, which would narrow its square cells and leave a band under them
STRIPE_MAP_PX = margins.PAGE_MIN_PX


def stripe_heatmap(weights: np.ndarray, tokens, T: int, *, title: str, score: float | None = None,
                   causal: bool = True, window: int | None = None, width: int = STRIPE_MAP_PX) -> go.Figure:
    """One head's (n, n) weights with the induction stripe ``A[i, i−T+1]`` outlined over the repeat; ``causal``:
    whether the run masked the future (its later keys grey, "masked"); a run with the mask off shows the weight they
    got.  ``window``: the run's sliding window W, whose keys W or more behind a query are grey too, as the Heads page
    greys them (``causal``, and ``width``, across which the cells are square: as in
    :func:`~attnviz.views.figures.attention_heatmap`)."""
    n = weights.shape[-1]
    hidden = None if window is None else window_band(n, n, window, causal=False)  # (n, n): i − j ≥ W
    fig = attention_heatmap(weights, tokens, "weights", causal=causal, title=title, width=width, hidden=hidden)
    rows, cols = stripe_cells(n, T)
    on_stripe = weights[rows, cols]  # (T,)
    cell_px = (width - fig.layout.margin.l - fig.layout.margin.r) / n  # a cell's side: the outline stays inside it
    fig.add_trace(go.Scatter(
        x=cols, y=rows, xaxis="x2", yaxis="y2", mode="markers",  # the overlay's axes name each position's token
        name=f"induction stripe A[i, i−{T - 1}]" + (f" (mean {score:.2f})" if score is not None else ""),
        marker={"symbol": "square-open", "size": max(4, min(14, int(cell_px))), "color": STRIPE_COLOR,
                "line": {"width": 2}},
        customdata=on_stripe, hovertemplate="stripe: query %{y}<br>key %{x}<br>weight %{customdata:.4f}<extra></extra>",
    ))
    # the stripe's name beside "masked" takes a second row where the map's width holds no room for both on one: the
    # bottom margin holds both rows, so Plotly draws the map once (the plot keeps its square)
    margin = fig.layout.margin
    fig.update_layout(showlegend=True, legend={"orientation": "h", "y": -0.01, "x": 1, "xanchor": "right",
                                               "yanchor": "top"},
                      height=fig.layout.height + margins.LEGEND_ROW_PX, margin={"b": margin.b + margins.LEGEND_ROW_PX})
    return fig


STRIPE_GRID_PX = PAIR_MAP_PX  # px: a before/after grid's column, as a pair of token maps' (side by side where both fit)
STRIPE_GRID_GAP_PX = 6  # between two tiles of a row
STRIPE_GRID_MARGIN_PX = 10  # the grid's left, right and bottom margins


def stripe_grid(maps: np.ndarray, T: int, *, title: str, notes=None) -> go.Figure:
    """Every head's weights (layers, heads, n, n) as small maps in a layers × heads grid, each with its
    induction stripe; ``notes`` (layers × heads strings, e.g. the head's type) go into the tile titles.

    The tiles are square, as every token map's (each subplot's ``yaxis.scaleanchor`` its x axis, ``constrain``
    "domain"), and, drawn in a column ``STRIPE_GRID_PX`` wide, fill it: the figure is as tall as a row of square tiles
    across that width needs, with its tiles' titles above each row."""
    layers, heads, n, _ = maps.shape
    names = []
    for layer in range(layers):
        for head in range(heads):
            extra = f"<br>{notes[layer][head]}" if notes is not None else ""  # second line: fits a narrow tile
            names.append(head_name(layer, head) + extra)
    top = margins.title_top(size=14, above_plot=margins.SUBPLOT_TITLE_PX * (2 if notes is not None else 1))
    plot_w = STRIPE_GRID_PX - 2 * STRIPE_GRID_MARGIN_PX
    tile = (plot_w - (heads - 1) * STRIPE_GRID_GAP_PX) / heads  # px: a tile's side
    between = top - margins.title_top(size=14) + STRIPE_GRID_GAP_PX  # px: a row's titles and a gap above them
    plot_h = layers * tile + (layers - 1) * between
    fig = make_subplots(rows=layers, cols=heads, subplot_titles=names, horizontal_spacing=STRIPE_GRID_GAP_PX / plot_w,
                        vertical_spacing=between / plot_h if layers > 1 else 0.0)
    rows, cols = stripe_cells(n, T)
    upper = np.triu(np.ones((n, n), dtype=bool), k=1)
    for layer in range(layers):
        for head in range(heads):
            values = np.where(upper, np.nan, maps[layer, head]).astype(np.float32)  # (n, n), masked cells as gaps
            fig.add_trace(go.Heatmap(z=values, zmin=0, zmax=1, colorscale=WEIGHT_SCALE, showscale=False,
                                     hoverongaps=False, name=head_name(layer, head),
                                     hovertemplate=head_name(layer, head)
                                     + ": query %{y}, key %{x}, weight %{z:.3f}<extra></extra>"),
                          row=layer + 1, col=head + 1)
            fig.add_trace(go.Scatter(x=cols, y=rows, mode="lines", line={"color": STRIPE_COLOR, "width": 1},
                                     opacity=0.5, showlegend=False, hoverinfo="skip"), row=layer + 1, col=head + 1)
    fig.update_xaxes(showticklabels=False, ticks="", showgrid=False, zeroline=False, range=[-0.5, n - 0.5],
                     constrain="domain")
    fig.update_yaxes(showticklabels=False, ticks="", showgrid=False, zeroline=False, range=[n - 0.5, -0.5],
                     constrain="domain")
    for index in range(layers * heads):  # each tile's y axis keeps its x axis' scale: square cells
        suffix = "" if index == 0 else str(index + 1)
        fig.layout[f"yaxis{suffix}"].scaleanchor = f"x{suffix}"
    fig.update_annotations(font={"size": 11})
    # pad 0: Plotly grows each tile's grey background by the pad, into a band across the row and past the tiles
    margin = {"l": STRIPE_GRID_MARGIN_PX, "r": STRIPE_GRID_MARGIN_PX, "t": top, "b": STRIPE_GRID_MARGIN_PX, "pad": 0}
    fig.update_layout(title=margins.title(title, 14), height=math.ceil(margins.height(plot_h, margin)),
                      margin=margin, plot_bgcolor="#e8e8e8")
    return fig


UPRIGHT_HEAD_LABELS = 24  # a score grid's head labels, all panels together, that stand upright across a page


def score_grid(scores: dict[str, np.ndarray], *, title: str = "", names=None) -> go.Figure:
    """One layers × heads heatmap per score (``{name: (layers, heads)}``), 0…1, the value written in every cell where
    the cells are wide enough to hold it (else shown on hover); margins that hold its labels and colour bar."""
    names = list(names or scores)
    layers, heads = np.asarray(scores[names[0]]).shape
    numbered = heads * len(names) <= UPRIGHT_HEAD_LABELS  # a cell's "0.14" fits it; narrower cells: on hover only
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=[SCORE_TITLES.get(k, k) for k in names],
                        horizontal_spacing=0.06)
    for index, name in enumerate(names):
        values = np.asarray(scores[name], dtype=float)  # (layers, heads)
        fig.add_trace(go.Heatmap(
            z=values, x=[f"H{h}" for h in range(heads)], y=[f"L{layer}" for layer in range(layers)],
            zmin=0, zmax=1, colorscale=WEIGHT_SCALE, showscale=index == len(names) - 1,
            text=np.vectorize(lambda v: "–" if not np.isfinite(v) else f"{v:.2f}")(values) if numbered else None,
            texttemplate="%{text}" if numbered else None, textfont={"size": 11}, name=SCORE_TITLES.get(name, name),
            hovertemplate="layer %{y}, head %{x}<br>" + SCORE_TITLES.get(name, name) + " %{z:.3f}<extra></extra>",
            colorbar={"thickness": 10},
        ), row=1, col=index + 1)
    head_labels, layer_labels = [f"H{h}" for h in range(heads)], [f"L{layer}" for layer in range(layers)]
    angle = 0 if heads * len(names) <= UPRIGHT_HEAD_LABELS else -90  # more would overlap: Plotly would turn them
    fig.update_yaxes(autorange="reversed", type="category", **margins.LABELS_HELD)
    fig.update_xaxes(type="category", side="bottom", tickangle=angle, automargin=False, **margins.LABELS_HELD)
    below = margins.labels_under(head_labels, angle=angle)
    # the title under the modebar's row, then the panels' titles; without a title, the panels' titles under it
    top = (margins.title_top(size=14, above_plot=margins.SUBPLOT_TITLE_PX) if title
           else margins.MODEBAR_PX + margins.SUBPLOT_TITLE_PX)
    fig.update_layout(title=margins.title(title, 14),
                      height=top + 10 + below + 26 * max(layers, 3),
                      margin={"l": margins.beside(layer_labels, title=False), "r": margins.COLORBAR_PX,
                              "t": top, "b": below, "pad": 0})
    return fig


def smooth(values, window: int = 25) -> np.ndarray:
    """Trailing mean over at most ``window`` points (the first points average what exists so far)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return values
    cumulative = np.cumsum(np.insert(values, 0, 0.0))  # (k+1,)
    ends = np.arange(1, values.size + 1)
    starts = np.maximum(0, ends - window)
    return (cumulative[ends] - cumulative[starts]) / (ends - starts)


LOSS_PLOT_PX = 186  # a loss curve's plot (the training loss, the loss at each position)
SCORES_PLOT_PX = 226  # the score curves' plot
LEGEND_GAP_PX = 10  # between two entries of a row of a horizontal legend (Plotly's gap, and slack)


def loss_curve(steps, loss, *, total_steps: int | None = None, stride: int = 1,
               title: str = "training loss") -> go.Figure:
    """Every ``stride``-th step's loss (faint; the last step always) and the trailing mean over 25 steps
    (computed on every step)."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(mode="lines", name="loss", line={"color": "#9ecae1", "width": 1},
                             hovertemplate="step %{x}<br>loss %{y:.3f}<extra></extra>"))
    fig.add_trace(go.Scatter(mode="lines", name="mean of the last 25 steps", line={"color": "#08519c", "width": 2},
                             hovertemplate="step %{x}<br>mean loss %{y:.3f}<extra></extra>"))
    if total_steps:
        fig.update_xaxes(range=[0, max(1, total_steps - 1)])
    fig.update_xaxes(title=margins.axis_title("step"))
    fig.update_yaxes(title="cross-entropy (nats)", rangemode="tozero")
    margin = {"l": margins.beside(), "r": 10, "t": margins.title_top(size=14, above_plot=margins.LEGEND_ROW_PX),
              "b": margins.under_axis()}
    fig.update_layout(title=margins.title(title, 14), height=margins.height(LOSS_PLOT_PX, margin), margin=margin,
                      legend={"orientation": "h", "y": 1.02, "x": 1, "xanchor": "right", "yanchor": "bottom"})
    return set_loss_curve(fig, steps, loss, stride=stride)


def set_loss_curve(fig: go.Figure, steps, loss, *, stride: int = 1) -> go.Figure:
    """Put these steps' loss into a ``loss_curve`` figure, in place (the Train page's live view: setting two
    traces' data holds the GIL its training thread needs for far less time than building the figure again)."""
    steps, loss = np.asarray(steps), np.asarray(loss, dtype=np.float64)
    mean = smooth(loss)
    keep = np.unique(np.r_[np.arange(0, steps.size, max(1, stride)), steps.size - 1]) if steps.size else []
    with fig.batch_update():
        for trace, values in zip(fig.data, (loss, mean), strict=True):
            trace.x, trace.y = steps[keep], values[keep].astype(np.float32)
    return fig


def score_curves(probe_steps, induction, previous_token, *, total_steps: int | None = None,
                 threshold: float | None = None) -> go.Figure:
    """Each head's induction and previous-token stripe at every probe: two panels, one line per head.

    ``induction`` and ``previous_token`` are (probes, layers, heads); a head keeps its colour in both.
    """
    induction, previous_token = np.asarray(induction), np.asarray(previous_token)
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        # two short lines each: one line apiece overlaps its neighbour on a narrow screen
                        subplot_titles=("induction: mean A[i, i−T+1]<br>on repeated random tokens",
                                        "previous-token: mean A[i, i−1]<br>on held-out text"))
    if induction.size:
        _, layers, heads = induction.shape
        palette = qualitative.Plotly + qualitative.D3
        for layer, head, col in _score_lines(layers, heads):
            name = head_name(layer, head)
            fig.add_trace(go.Scatter(
                mode="lines+markers", name=name, legendgroup=name, showlegend=col == 1,
                line={"color": palette[(layer * heads + head) % len(palette)], "width": 2}, marker={"size": 4},
                hovertemplate=name + "<br>step %{x}<br>%{y:.3f}<extra></extra>",
            ), row=1, col=col)
        set_score_curves(fig, probe_steps, induction, previous_token)
    if threshold is not None:
        for col in (1, 2):
            fig.add_hline(y=threshold, line={"dash": "dot", "color": "grey", "width": 1}, row=1, col=col)
    if total_steps:
        fig.update_xaxes(range=[0, max(1, total_steps - 1)])
    fig.update_xaxes(title=margins.axis_title("step"))
    fig.update_yaxes(range=[0, 1.02])
    names = [head_name(layer, head) for layer, head, col in _score_lines(*induction.shape[1:]) if col == 1] \
        if induction.size else []
    # the legend under the panels, in rows of as many heads as fit the narrowest page's plot, so the panels keep the
    # figure's width; the margin under the axis holds its rows
    margin = {"l": margins.beside(), "r": 10, "t": margins.MODEBAR_PX + 2 * margins.SUBPLOT_TITLE_PX}
    plot_px = margins.PAGE_MIN_PX - margin["l"] - margin["r"]
    per_row = max(1, int(plot_px // (margins.LEGEND_SAMPLE_PX + margins.text_px(names) + LEGEND_GAP_PX)))
    rows = math.ceil(len(names) / per_row)
    margin["b"] = margins.under_axis() + (rows * margins.LEGEND_ROW_PX + margins.LEGEND_PAD_PX if rows else 0)
    # an entry (its sample and label) a share of the plot's width, so that per_row entries and the gaps Plotly puts
    # between them fit the narrowest plot, and as many a wider one
    share = (plot_px / per_row - LEGEND_GAP_PX) / plot_px
    legend = {**margins.LEGEND_AT_FOOT, "entrywidth": math.floor(share * 1000) / 1000, "entrywidthmode": "fraction"}
    fig.update_layout(height=margins.height(SCORES_PLOT_PX, margin), margin=margin, legend=legend)
    fig.update_annotations(font={"size": 12})
    return fig


def _score_lines(layers: int, heads: int) -> list[tuple[int, int, int]]:
    """The score curves' lines in their traces' order, as (layer, head, panel): each head's induction line (panel 1),
    then its previous-token line (panel 2)."""
    return [(layer, head, col) for layer in range(layers) for head in range(heads) for col in (1, 2)]


def set_score_curves(fig: go.Figure, probe_steps, induction, previous_token) -> go.Figure:
    """Put these probes into a ``score_curves`` figure of as many layers and heads, in place (the Train page's live
    view: setting the traces' data holds the GIL its training thread needs for far less time than building the
    figure again)."""
    induction, previous_token = np.asarray(induction), np.asarray(previous_token)
    _, layers, heads = induction.shape
    columns = [(induction if col == 1 else previous_token)[:, layer, head]
               for layer, head, col in _score_lines(layers, heads)]
    if len(columns) != len(fig.data):
        raise ValueError(f"the figure has {len(fig.data)} lines; these scores need {len(columns)}")
    with fig.batch_update():
        for trace, values in zip(fig.data, columns, strict=True):
            trace.x, trace.y = list(probe_steps), values
    return fig


def position_loss(loss: np.ndarray, T: int, *, title: str = "loss at each position") -> go.Figure:
    """Per-position next-token loss (n−1,) of a sequence ending in x + x (|x| = T), the second copy shaded.

    Position ``i`` predicts token ``i+1``; the shaded positions ``n−T … n−2`` predict tokens of the second
    copy that an induction head can copy (the first token of the copy cannot be known yet).
    """
    loss = np.asarray(loss, dtype=float)
    n = loss.size + 1
    first, second = repeat_halves(loss, T)
    fig = go.Figure(go.Scatter(x=np.arange(n - 1), y=loss, mode="lines+markers", name="loss",
                               line={"color": "#08519c"}, marker={"size": 4},
                               hovertemplate="position %{x} → predicts token %{x}+1<br>loss %{y:.3f}<extra></extra>"))
    fig.add_vrect(x0=n - T - 0.5, x1=n - 1.5, fillcolor=REPEAT_FILL, line_width=0,
                  annotation_text=f"second copy: mean {second:.2f}", annotation_position="top left")
    fig.add_hline(y=first, line={"dash": "dot", "color": "grey"}, annotation_text=f"before: mean {first:.2f}",
                  annotation_position="top right")
    fig.update_xaxes(title=margins.axis_title("position i (predicting token i+1)"))
    fig.update_yaxes(title="cross-entropy (nats)", rangemode="tozero")
    margin = {"l": margins.beside_values(loss), "r": 10, "t": margins.title_top(size=14),
              "b": margins.under_axis()}
    fig.update_layout(title=margins.title(title, 14), height=margins.height(LOSS_PLOT_PX, margin), margin=margin,
                      showlegend=False)
    return fig

