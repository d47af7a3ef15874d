"""Figures for what attention does: the knock-out grid, the loss with heads knocked out, the logit lens table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attnviz.head_types import repeat_halves
from attnviz.views import margins

UPRIGHT_HEAD_LABELS = 12  # the knock-out grid's head labels ("head 11") stand upright up to this many heads
# the knock-out grid's colour scale spans at least ±this many nats: a model whose heads all change the loss by
# hundredths (a random one) is drawn pale, not in full red as if it needed a head
GRID_MIN_NATS = 0.1


def ablation_grid_figure(delta: np.ndarray, intact: float, *, title: str = "") -> go.Figure:
    """Δ loss on the second copy (layers, heads) when each head alone is knocked out; red = the model needs it.

    The colours span ±the largest |Δ|, and at least ±``GRID_MIN_NATS``, so that a change of a few thousandths of a
    nat is drawn pale, not in the deepest red."""
    layers, heads = delta.shape
    head_labels, layer_labels = [f"head {h}" for h in range(heads)], [f"layer {layer}" for layer in range(layers)]
    angle = 0 if heads <= UPRIGHT_HEAD_LABELS else -90  # more would overlap: Plotly would turn them
    limit = max(float(np.abs(delta).max()), GRID_MIN_NATS)
    fig = go.Figure(go.Heatmap(
        z=delta, x=head_labels, y=layer_labels,
        colorscale="RdBu_r", zmin=-limit, zmax=limit, text=np.round(delta, 2), texttemplate="%{text:+.2f}",
        colorbar={"title": "Δ loss", "thickness": 12},
        hovertemplate="%{y}, %{x} knocked out<br>loss on the repeat %{z:+.3f} nats<extra></extra>"))
    fig.update_yaxes(autorange="reversed", **margins.LABELS_HELD)
    fig.update_xaxes(tickangle=angle, automargin=False, **margins.LABELS_HELD)
    below = margins.labels_under(head_labels, angle=angle)
    fig.update_layout(title=margins.title(title or f"knock out one head: change in the loss on the second copy "
                                                   f"(intact {intact:.2f} nats)", 14),
                      height=30 + margins.title_top(size=14) + below + 40 * layers,
                      margin={"l": margins.beside(layer_labels, title=False), "r": margins.COLORBAR_PX,
                              "t": margins.title_top(size=14),
                              "b": below, "pad": 0})
    return fig


ABLATED_LOSS_PLOT_PX = 206  # the knocked-out and intact loss curves' plot


def ablated_loss_figure(intact: np.ndarray, ablated: np.ndarray, T: int, label: str) -> go.Figure:
    """The per-position loss (n−1,) intact and with ``label``'s heads knocked out, the second copy shaded.

    The legend sits under the plot, one entry a row, each label broken into lines that fit the narrowest chart
    (:data:`~attnviz.views.margins.PAGE_MIN_PX`), and the left margin holds the losses' numbers: the margins hold
    the chart at any page width, so Plotly draws it once."""
    n = len(intact) + 1
    margin = {"l": margins.beside_values(intact, ablated), "r": 10,
              "t": margins.title_top(size=14)}
    plot_px = margins.PAGE_MIN_PX - margin["l"] - margin["r"]
    fig = go.Figure()
    names = []
    for loss, name, color in ((intact, "intact", "#08519c"), (ablated, f"without {label}", "#cb181d")):
        second = repeat_halves(loss, T)[1]
        names.append(margins.legend_label(f"{name} (second copy {second:.2f})", plot_px))
        fig.add_trace(go.Scatter(x=np.arange(n - 1), y=loss, mode="lines+markers", marker={"size": 4},
                                 line={"color": color}, name=names[-1],
                                 hovertemplate="position %{x}<br>loss %{y:.3f}<extra>" + name + "</extra>"))
    fig.add_vrect(x0=n - T - 0.5, x1=n - 1.5, fillcolor="rgba(255, 200, 0, 0.12)", line_width=0)
    fig.update_xaxes(title=margins.axis_title("position i (predicting token i+1)"))
    fig.update_yaxes(title="cross-entropy (nats)", rangemode="tozero")
    legend, legend_px = margins.legend_one_a_row(names)
    margin["b"] = margins.under_axis() + legend_px  # the axis, then the legend's rows
    fig.update_layout(title=margins.title("knocked out vs intact: the loss per position", 14),
                      height=margins.height(ABLATED_LOSS_PLOT_PX, margin), margin=margin, legend=legend)
    return fig


def top_tokens_table(pieces: list[list[str]], probs: np.ndarray, rows: list[str]) -> pd.DataFrame:
    """One row per ``rows`` label, one column per rank: "token (probability)"."""
    return pd.DataFrame({f"#{rank + 1}": [f"{pieces[row][rank]} ({probs[row, rank]:.1%})" for row in range(len(rows))]
                         for rank in range(probs.shape[1])}, index=rows)
