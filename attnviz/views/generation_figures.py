"""Figures of generation with a KV cache: the new query rows over the cached keys and the cache's bytes against the
context length.  Pure Plotly: arrays and labels in, a ``go.Figure`` out."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from attnviz.kv_cache import format_bytes

VARIANT_COLORS = {"MHA": "#08519c", "GQA": "#31a354", "MQA": "#74c476", "MLA": "#e6550d", "SWA": "#756bb1",
                  "SWA+GQA": "#bcbddc"}


def new_rows(rows: list[np.ndarray], n_keys: int) -> np.ndarray:
    """Query rows of different lengths (step j attends over its k_j cached keys) stacked into float32
    ``(len(rows), n_keys)``; keys a row could not see yet are NaN (drawn empty, not as 0)."""
    out = np.full((len(rows), n_keys), np.nan, dtype=np.float32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def rows_figure(z: np.ndarray, query_labels: list[str], key_labels: list[str], *, prompt_length: int,
                title: str) -> go.Figure:
    """The generated tokens' query rows ``z`` (steps, keys) over every cached key; a line where the prompt ends.

    Numeric axes with token tick labels (a category axis of hundreds of tokens is slow); square cells.  Labels are
    escaped: Plotly renders a subset of HTML in them, and tokens come from the user's text."""
    query_labels = [html.escape(label, quote=True) for label in query_labels]
    key_labels = [html.escape(label, quote=True) for label in key_labels]
    steps, n_keys = z.shape
    key_ticks = list(range(n_keys)) if n_keys <= 40 else list(range(0, n_keys, max(1, n_keys // 20)))
    hover = np.array([[f"{query_labels[i]} → {key_labels[j]}" for j in range(n_keys)] for i in range(steps)])
    # one constructor call: each update_* call re-walks Plotly's property paths (3× the time of building it once)
    return go.Figure(
        data=[go.Heatmap(
            z=z.astype(np.float32), x=np.arange(n_keys), y=np.arange(steps), zmin=0.0, zmax=1.0, colorscale="Blues",
            customdata=hover, colorbar={"title": {"text": "weight"}, "thickness": 12},
            hovertemplate="%{customdata}<br>weight %{z:.4f}<extra></extra>", hoverongaps=False)],
        layout={
            "title": {"text": title, "font": {"size": 14}}, "height": min(220 + 18 * max(steps, 6), 700),
            "margin": {"l": 10, "r": 10, "t": 50, "b": 10},
            "xaxis": {"title": {"text": "key (cached token)"}, "tickvals": key_ticks,
                      "ticktext": [key_labels[j] for j in key_ticks], "tickangle": -60, "constrain": "domain",
                      "range": [-0.5, n_keys - 0.5]},
            "yaxis": {"title": {"text": "query: the token fed at this step"}, "tickvals": list(range(steps)),
                      "ticktext": query_labels, "autorange": "reversed", "scaleanchor": "x", "constrain": "domain"},
            "shapes": [{"type": "line", "xref": "x", "yref": "paper", "x0": prompt_length - 0.5,  # the prompt's end
                        "x1": prompt_length - 0.5, "y0": 0, "y1": 1,
                        "line": {"color": "#e6550d", "width": 1, "dash": "dot"}}],
        })


def kv_bytes_figure(lengths: list[int], curves: dict[str, list[int]], labels: dict[str, str] | None = None, *,
                    title: str, marker_at: int | None = None) -> go.Figure:
    """KV-cache bytes against the context length, both axes logarithmic, one line per variant.

    ``labels``: a legend label per curve (its settings); ``marker_at``: a context length drawn as a dotted line
    (the model's own context)."""
    labels = labels or {}
    fig = go.Figure()
    for name, values in curves.items():
        fig.add_trace(go.Scatter(
            x=lengths, y=values, mode="lines+markers", name=labels.get(name, name), marker={"size": 5},
            line={"color": VARIANT_COLORS.get(name), "dash": "dash" if name.startswith("SWA") else "solid"},
            customdata=[format_bytes(v) for v in values],
            hovertemplate=f"{name}<br>%{{x:,}} tokens: %{{customdata}}<extra></extra>"))
    if marker_at:
        fig.add_vline(x=marker_at, line={"color": "#636363", "width": 1, "dash": "dot"})
    fig.update_xaxes(type="log", title="context length (tokens)", tickvals=lengths,
                     ticktext=[f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else f"{n:,}" for n in lengths])
    fig.update_yaxes(type="log", title="KV cache (bytes)")
    fig.update_layout(title={"text": title, "font": {"size": 14}}, height=420,
                      legend={"orientation": "v", "x": 1.02, "y": 1}, margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig
