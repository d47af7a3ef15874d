"""Pure Plotly figures of why a cell has its weight and of several tokens' summed attention: an explanation or
sums in (:mod:`attnviz.explain`), ``go.Figure`` out.

No model runs here and no Streamlit (as :mod:`attnviz.views.figures`):

* ``products_figure`` — the head_dim products q_i[d]·k_j[d] as bars, the largest named, the title adding them up:
  Σ = score, ÷ divisor = scaled, and the weight (or why the mask hides the key);
* ``row_softmax_figure`` — row i's scaled scores over every key and the softmax of that row, key j highlighted;
* ``summed_attention_figure`` — the selected queries' attention per key (mean, sum in the hover) and what every
  query gives the selected keys.

Positions are numeric x values with token tick labels (at most ``MAX_TICKS``), arrays are float32 (Plotly sends
them as binary), and every piece of token text is escaped (:func:`~attnviz.views.figures.safe_label`).
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnviz.explain import AttentionSums, WeightExplanation
from attnviz.views.figures import MASKED_COLOR, safe_label

POSITIVE = "#d6604d"  # a product that raises the score
NEGATIVE = "#4393c3"  # a product that lowers it
HIGHLIGHT = "#ff7f0e"  # key j in the row, the selected positions
PLAIN = "#7f7f7f"
MAX_TICKS = 40


def _number(value: float) -> str:
    return f"{value:.4g}"


def _divisor_text(explanation: WeightExplanation) -> str:
    """``÷ √8``, ``÷ 1 (no scaling)`` or ``÷ 5`` (a run's own scale)."""
    if math.isclose(explanation.divisor, math.sqrt(explanation.head_dim), rel_tol=1e-6):
        return f"÷ √{explanation.head_dim}"
    if explanation.divisor == 1.0:
        return "÷ 1 (no scaling)"
    return f"÷ {_number(explanation.divisor)}"


def _cell_name(explanation: WeightExplanation) -> str:
    return (f"query {explanation.query} “{safe_label(explanation.query_token)}” → key {explanation.key} "
            f"“{safe_label(explanation.key_token)}”, head {explanation.head}")


def products_figure(explanation: WeightExplanation, *, top: int = 5, height: int = 360) -> go.Figure:
    """Bars of q_i[d]·k_j[d] for every dimension d of the head; the ``top`` largest by magnitude are named on
    their bars; the title adds them up to the score, the scaled score and the weight (or the mask's reason)."""
    products = np.asarray(explanation.products, dtype=np.float32)  # (hd,)
    dims = np.arange(explanation.head_dim, dtype=np.float32)  # (hd,)
    largest = [int(d) for d in explanation.largest(top)]
    text = [""] * explanation.head_dim
    for d in largest:
        text[d] = f"d{d}"
    colors = np.where(products >= 0, POSITIVE, NEGATIVE).tolist()
    customdata = np.stack([explanation.query_vector, explanation.key_vector], axis=1).astype(np.float32)  # (hd, 2)
    bars = go.Bar(x=dims, y=products, text=text, textposition="outside", cliponaxis=False, customdata=customdata,
                  marker={"color": colors}, name="q[d]·k[d]",
                  hovertemplate=("dimension %{x}<br>q[d] = %{customdata[0]:.4f}<br>k[d] = %{customdata[1]:.4f}"
                                 "<br>q[d]·k[d] = %{y:.4f}<extra></extra>"))
    sums = (f"Σ q[d]·k[d] = score {_number(explanation.score)}   {_divisor_text(explanation)} = scaled "
            f"{_number(explanation.scaled)}   ")
    if explanation.masked:
        sums += "→ masked: weight 0"
        subtitle = safe_label(explanation.reason or "")
    else:
        sums += f"→ softmax over row {explanation.query}: weight {explanation.weight:.4f}"
        subtitle = ""
    if explanation.stand_in:
        subtitle = " ".join(filter(None, [subtitle, safe_label(explanation.stand_in)]))
    fig = go.Figure([bars])
    fig.update_layout(
        title={"text": f"{_cell_name(explanation)}<br>{sums}", "font": {"size": 13},
               "subtitle": {"text": subtitle, "font": {"size": 11}}},
        height=height, margin={"l": 10, "r": 10, "t": 100, "b": 40}, showlegend=False, bargap=0.1,
        uniformtext={"minsize": 10, "mode": "show"},
        xaxis={"title": {"text": f"dimension d of the head (0 … {explanation.head_dim - 1})"}, "zeroline": False},
        yaxis={"title": {"text": "q[d]·k[d]"}, "zeroline": True},
        meta={"largest": largest, "score": explanation.score, "divisor": explanation.divisor},
    )
    return fig


def _token_axis(tokens, n: int, max_ticks: int = MAX_TICKS) -> dict:
    """A numeric position axis with at most ``max_ticks`` token tick labels (escaped)."""
    step = max(1, math.ceil(n / max_ticks))
    positions = list(range(0, n, step))
    return {"tickmode": "array", "tickvals": positions, "ticktext": [safe_label(tokens[p]) for p in positions],
            "tickangle": -60, "range": [-0.5, n - 0.5]}


def _hover_names(tokens, n: int) -> np.ndarray:
    """``"j: piece"`` for every position, escaped (Plotly renders HTML in hover text)."""
    return np.array([f"{p}: {safe_label(tokens[p])}" for p in range(n)], dtype=object)


def row_softmax_figure(explanation: WeightExplanation, tokens, *, height: int = 420) -> go.Figure:
    """Row ``query``'s scaled scores over every key (the softmax's input; hidden keys grey at 0) above the softmax
    of that row (the weights), key ``key`` highlighted in both."""
    n = explanation.row_weights.shape[0]
    positions = np.arange(n, dtype=np.float32)  # (n,)
    hidden = np.asarray(explanation.row_hidden, dtype=bool)  # (n,)
    scaled = np.where(hidden, 0.0, explanation.row_scaled).astype(np.float32)  # (n,) hidden keys drawn at 0
    colors = np.where(hidden, MASKED_COLOR, PLAIN).astype(object)
    colors[explanation.key] = HIGHLIGHT
    names = _hover_names(tokens, n)
    shown = np.array([f"−∞ (the mask hides this key; its scaled score is {value:.4f})" if hide else f"{value:.4f}"
                      for value, hide in zip(explanation.row_scaled.tolist(), hidden.tolist())], dtype=object)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12, subplot_titles=(
        f"row {explanation.query}: scaled scores (the softmax's input)",
        f"softmax over row {explanation.query}: the weights (sum to 1)"))
    fig.add_trace(go.Bar(x=positions, y=scaled, marker={"color": colors.tolist()}, name="scaled",
                         customdata=np.stack([names, shown], axis=1),
                         hovertemplate="key %{customdata[0]}<br>softmax input %{customdata[1]}<extra></extra>"),
                  row=1, col=1)
    fig.add_trace(go.Bar(x=positions, y=np.asarray(explanation.row_weights, dtype=np.float32),
                         marker={"color": colors.tolist()}, name="weight", customdata=names,
                         hovertemplate="key %{customdata}<br>weight %{y:.4f}<extra></extra>"), row=2, col=1)
    axis = _token_axis(tokens, n)
    fig.update_xaxes(**axis)
    fig.update_xaxes(title={"text": "key token"}, row=2, col=1)
    fig.add_vline(x=explanation.key, line={"color": HIGHLIGHT, "width": 1, "dash": "dot"}, row="all", col=1)
    if explanation.masked:
        how = f"key {explanation.key} is hidden: exp(−∞) = 0, so its weight is 0"
    else:
        how = (f"weight = exp({_number(explanation.scaled)}) ÷ Σ over the row's visible keys of exp(scaled) = "
               f"{explanation.weight:.4f}")
    fig.update_layout(title={"text": f"{_cell_name(explanation)}<br>{how}", "font": {"size": 13}}, height=height,
                      showlegend=False, bargap=0.1, margin={"l": 10, "r": 10, "t": 90, "b": 40})
    return fig


def _selection_text(positions: tuple[int, ...], tokens, shown: int = 8) -> str:
    words = [f"{p} “{safe_label(tokens[p])}”" for p in positions[:shown]]
    more = f" … and {len(positions) - shown} more" if len(positions) > shown else ""
    return ", ".join(words) + more


def summed_attention_figure(sums: AttentionSums, tokens, *, height: int | None = None) -> go.Figure:
    """Bar charts of a several-token selection: the selected queries' attention per key (mean; the sum in the
    hover) and what each query gives the selected keys in total; the selected positions highlighted."""
    panels = []
    if sums.per_key_sum is not None:
        panels.append(("queries", f"{sums.stage} of the {len(sums.queries)} selected queries, averaged, per key: "
                       f"{_selection_text(sums.queries, tokens)}", "key token"))
    if sums.per_key_sum is None and sums.per_query_total is None:
        raise ValueError("sums hold no selection to draw")
    if sums.per_query_total is not None:
        panels.append(("keys", f"{sums.stage} each query gives the {len(sums.keys)} selected keys in total: "
                       f"{_selection_text(sums.keys, tokens)}", "query token"))
    fig = make_subplots(rows=len(panels), cols=1, vertical_spacing=0.22, subplot_titles=[p[1] for p in panels])
    n = len(tokens)
    positions = np.arange(n, dtype=np.float32)  # (n,)
    names = _hover_names(tokens, n)
    for row, (kind, _, axis_title) in enumerate(panels, start=1):
        colors = np.full(n, PLAIN, dtype=object)
        if kind == "queries":
            values = np.asarray(sums.per_key_mean, dtype=np.float32)  # (n,)
            customdata = np.stack([names, np.asarray(sums.per_key_sum, dtype=np.float32).astype(object)], axis=1)
            hover = "key %{customdata[0]}<br>mean %{y:.4f}<br>sum %{customdata[1]:.4f}<extra></extra>"
            name = "mean over the selected queries"
            colors[list(sums.keys)] = HIGHLIGHT  # the keys selected below, if any
        else:
            values = np.asarray(sums.per_query_total, dtype=np.float32)  # (n,)
            colors[list(sums.queries)] = HIGHLIGHT  # the queries selected above, if any
            customdata = names
            hover = "query %{customdata}<br>to the selected keys %{y:.4f}<extra></extra>"
            name = "total to the selected keys"
        fig.add_trace(go.Bar(x=positions, y=values, marker={"color": colors.tolist()}, customdata=customdata,
                             hovertemplate=hover, name=name), row=row, col=1)
        fig.update_xaxes(title={"text": axis_title}, **_token_axis(tokens, n), row=row, col=1)
    fig.update_annotations(font={"size": 12})
    fig.update_layout(height=height or 300 * len(panels), showlegend=False, bargap=0.1,
                      title={"text": f"head {sums.head}: several tokens at once", "font": {"size": 13}},
                      margin={"l": 10, "r": 10, "t": 80, "b": 40})
    return fig
