"""Pure Plotly figure builders: arrays + labels in, ``go.Figure`` out.  No model runs here and
no Streamlit: pages hand slices of a Trace to these functions.

Conventions shared by every attention heatmap:

* rows are query tokens, columns are key tokens; axes are categorical with one *unique* label
  per position (``"3: ·starts"``), so repeated tokens ("the") never collapse, and the tick text
  shows the display piece only;
* masked cells (−∞ before softmax, exactly 0 after) are drawn as gaps over a grey background
  and labelled "masked", so they are never confused with small weights;
* weights use a fixed 0…1 colour scale (dropout's kept cells go up to 1/(1−p));
* a figure that shows fewer cells than the data (max-pooling) says so in its title.
"""

from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

MASKED_COLOR = "#c8c8c8"
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


def safe_label(text: str) -> str:
    """Escape user-derived text for Plotly (which renders a subset of HTML in labels)."""
    return html.escape(text, quote=True)


def position_labels(tokens: list[str] | tuple[str, ...]) -> list[str]:
    """Unique category labels ``"i: piece"`` — repeated tokens keep their own row/column."""
    return [f"{i}: {safe_label(piece)}" for i, piece in enumerate(tokens)]


def causal_mask(n: int) -> np.ndarray:
    """(n, n) bool, True above the diagonal (what the causal mask hides)."""
    return np.triu(np.ones((n, n), dtype=bool), k=1)


def max_pool(matrix: np.ndarray, max_size: int, signed: bool = False) -> tuple[np.ndarray, int]:
    """Max-pool a 2-D array so neither side exceeds ``max_size`` (NaN-aware: a block is NaN only
    if all of it is).  ``signed``: keep each block's value of largest magnitude, with its sign (for
    scores, whose peaks are negative as well as positive).  Returns (pooled, block size)."""
    rows, cols = matrix.shape
    block = max(1, math.ceil(max(rows, cols) / max_size))
    if block == 1:
        return matrix, 1
    pad_rows, pad_cols = (-rows) % block, (-cols) % block
    padded = np.pad(matrix.astype(np.float32), ((0, pad_rows), (0, pad_cols)), constant_values=np.nan)
    blocks = padded.reshape(padded.shape[0] // block, block, padded.shape[1] // block, block)
    all_nan = np.isnan(blocks).all(axis=(1, 3))
    if signed:
        flat = blocks.transpose(0, 2, 1, 3).reshape(blocks.shape[0], blocks.shape[2], -1)
        index = np.where(np.isnan(flat), -1.0, np.abs(flat)).argmax(axis=-1)
        pooled = np.take_along_axis(flat, index[..., None], axis=-1)[..., 0]
    else:
        pooled = np.where(np.isnan(blocks), -np.inf, blocks).max(axis=(1, 3))
    pooled[all_nan] = np.nan
    return pooled.astype(np.float32), block


def display_values(matrix: np.ndarray, stage: str, causal: bool) -> np.ndarray:
    """float32 copy with masked cells as NaN (drawn as grey gaps)."""
    values = np.array(matrix, dtype=np.float32)
    values[~np.isfinite(values)] = np.nan  # −∞ in the masked stage
    if causal and stage in PROBABILITY_STAGES:
        values[causal_mask(values.shape[0])[: values.shape[0], : values.shape[1]]] = np.nan
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


def _masked_legend(fig: go.Figure) -> None:
    """A legend entry for the grey masked cells (a square marker outside the data)."""
    fig.add_trace(
        go.Scatter(
            x=[None], y=[None], mode="markers", name="masked",
            marker={"symbol": "square", "size": 12, "color": MASKED_COLOR},
            showlegend=True, hoverinfo="skip",
        )
    )


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
    height: int = 520,
    zrange: tuple[float, float] | None = None,
) -> go.Figure:
    """Full-resolution heatmap of one head's (rows × cols) map, hover = query, key, value.

    ``matrix`` may be a window of a larger map: ``row_offset``/``col_offset`` say where it starts
    and ``tokens`` are the tokens of the whole sequence.
    """
    rows, cols = matrix.shape
    values = display_values(matrix, stage, causal=False)
    if causal and stage in PROBABILITY_STAGES:
        query_pos = np.arange(row_offset, row_offset + rows)[:, None]
        key_pos = np.arange(col_offset, col_offset + cols)[None, :]
        values[key_pos > query_pos] = np.nan
    labels = position_labels(tokens)
    y_labels = labels[row_offset : row_offset + rows]
    x_labels = labels[col_offset : col_offset + cols]
    zmin, zmax, scale = color_range(stage, values, dropout)
    if zrange is not None:  # a before/after pair shares one scale, so equal values look equal
        zmin, zmax = zrange
    fig = go.Figure(
        go.Heatmap(
            z=values, x=x_labels, y=y_labels, zmin=zmin, zmax=zmax, colorscale=scale,
            colorbar={"title": {"text": stage}, "thickness": 12},
            hovertemplate="query %{y}<br>key %{x}<br>" + stage + " %{z:.4f}<extra></extra>",
            hoverongaps=False, xgap=0, ygap=0,
        )
    )
    has_masked = bool(np.isnan(values).any())
    if has_masked:
        _masked_legend(fig)
    _style_axes(fig, tokens, x_labels, y_labels, row_offset, col_offset)
    fig.update_layout(
        title={"text": title or MAP_TITLES.get(stage, stage), "y": 0.99, "yanchor": "top"},
        height=height, margin={"l": 10, "r": 10, "t": 110, "b": 10},  # room for the title above the key ticks
        plot_bgcolor=MASKED_COLOR, legend={"orientation": "h", "y": -0.01, "x": 1, "xanchor": "right", "yanchor": "top"},
    )
    return fig


def _style_axes(fig, tokens, x_labels, y_labels, row_offset, col_offset, max_ticks: int = 40) -> None:
    def ticks(labels, offset):
        step = max(1, math.ceil(len(labels) / max_ticks))
        vals = labels[::step]
        text = [safe_label(tokens[offset + i]) for i in range(0, len(labels), step)]
        return {"tickmode": "array", "tickvals": vals, "ticktext": text, "type": "category"}

    fig.update_xaxes(title="key token", side="top", tickangle=-60, showgrid=False, **ticks(x_labels, col_offset))
    fig.update_yaxes(title="query token", autorange="reversed", showgrid=False, **ticks(y_labels, row_offset))


def heads_grid(
    maps: np.ndarray,
    stage: str = "weights",
    *,
    causal: bool = True,
    dropout: float = 0.0,
    max_cells: int = 64,
    columns: int = 6,
    focus: int | None = None,
) -> go.Figure:
    """All heads as small heatmaps in one figure, max-pooled to at most ``max_cells`` per side.

    ``maps`` is (heads, n, n).  Each thumbnail carries an invisible scatter overlay (customdata =
    head index) so a click on it can be reported back; heatmap cells do not report clicks.
    """
    num_heads, n, _ = maps.shape
    columns = max(1, min(columns, num_heads))
    rows = math.ceil(num_heads / columns)
    pooled = []
    block = 1
    for head in range(num_heads):
        values = display_values(maps[head], stage, causal)
        small, block = max_pool(values, max_cells, signed=stage not in PROBABILITY_STAGES)
        pooled.append(small)
    zmin, zmax, scale = color_range(stage, np.stack(pooled), dropout)
    fig = make_subplots(
        rows=rows, cols=columns, horizontal_spacing=0.02, vertical_spacing=min(0.15, 0.5 / rows) if rows > 1 else 0.02,
        subplot_titles=[("▶ " if head == focus else "") + f"head {head}" for head in range(num_heads)],
    )
    size = pooled[0].shape[0]
    grid = np.linspace(0, size - 1, num=min(size, 6))
    overlay_x, overlay_y = np.meshgrid(grid, grid)
    for head, small in enumerate(pooled):
        row, col = divmod(head, columns)
        fig.add_trace(
            go.Heatmap(
                z=small, zmin=zmin, zmax=zmax, colorscale=scale, showscale=head == 0, hoverongaps=False,
                colorbar={"title": {"text": stage}, "thickness": 10, "len": 0.8},
                hoverinfo="skip",  # the overlay below takes hover and clicks; exact values: the focused view
                name=f"head {head}",
            ),
            row=row + 1, col=col + 1,
        )
        fig.add_trace(
            go.Scatter(
                x=overlay_x.ravel(), y=overlay_y.ravel(), mode="markers", customdata=[head] * overlay_x.size,
                marker={"size": 24, "opacity": 0}, showlegend=False, name=f"select head {head}",
                hovertemplate=f"head {head}: click to focus<extra></extra>",
            ),
            row=row + 1, col=col + 1,
        )
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False, range=[-0.5, size - 0.5])
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, range=[size - 0.5, -0.5])
    pooling = "max-pooling keeps peaks" if stage in PROBABILITY_STAGES else "each cell keeps its block's largest |score|"
    note = f" — downsampled {n}→{size} per side ({pooling}; exact values: the focused head)" if block > 1 else ""
    fig.update_layout(
        title={"text": f"{MAP_TITLES.get(stage, stage)}, " + (f"all {num_heads} heads" if num_heads > 1 else "1 head")
               + (f"<br><sup>{note.removeprefix(' — ')}</sup>" if note else ""), "font": {"size": 13}},
        height=max(180, 150 * rows + 60), margin={"l": 10, "r": 10, "t": 70, "b": 10},
        plot_bgcolor=MASKED_COLOR, clickmode="event+select", dragmode=False,
    )
    fig.update_annotations(font_size=11)
    return fig


def mark_focus(grid: go.Figure, head: int) -> go.Figure:
    """A copy of a ``heads_grid`` figure whose subplot title marks ``head`` with ▶."""
    marked = go.Figure(grid)
    for annotation in marked.layout.annotations:
        title = annotation.text.removeprefix("▶ ")
        annotation.text = ("▶ " if title == f"head {head}" else "") + title
    return marked


def overview_heatmap(matrix: np.ndarray, stage: str, *, causal: bool, dropout: float = 0.0, max_cells: int = 128,
                     window: tuple[int, int, int] | None = None) -> go.Figure:
    """A max-pooled picture of a large map, with the focused window outlined (row0, col0, size)."""
    values = display_values(matrix, stage, causal)
    small, block = max_pool(values, max_cells, signed=stage not in PROBABILITY_STAGES)
    zmin, zmax, scale = color_range(stage, values, dropout)
    fig = go.Figure(go.Heatmap(z=small, zmin=zmin, zmax=zmax, colorscale=scale, showscale=False, hoverongaps=False,
                               hovertemplate=f"positions ≈ %{{y}}×{block} … (max of block) %{{z:.4f}}<extra></extra>"))
    if window is not None:
        row0, col0, size = window
        fig.add_shape(type="rect", x0=col0 / block - 0.5, x1=(col0 + size) / block - 0.5,
                      y0=row0 / block - 0.5, y1=(row0 + size) / block - 0.5, line={"color": "red", "width": 2})
    fig.update_yaxes(autorange="reversed", showticklabels=False, scaleanchor="x")
    fig.update_xaxes(showticklabels=False)
    fig.update_layout(
        title={"text": f"overview, downsampled {matrix.shape[0]}→{small.shape[0]} (max-pooling)", "font": {"size": 12}},
        height=300, margin={"l": 5, "r": 5, "t": 40, "b": 5}, plot_bgcolor=MASKED_COLOR,
    )
    return fig


def softmax(matrix: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64 (−∞ → 0), as torch.softmax(dim=-1)."""
    values = np.asarray(matrix, dtype=np.float64)
    shifted = values - np.max(values, axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


def row_entropy(weights: np.ndarray) -> np.ndarray:
    """Entropy (nats) of each row of a weight matrix; 0 = all weight on one key."""
    p = np.asarray(weights, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, -p * np.log(p), 0.0)
    return terms.sum(axis=-1)


def entropy_bars(tokens, entropy_scaled: np.ndarray, entropy_unscaled: np.ndarray) -> go.Figure:
    """Per-query entropy of softmax with and without ÷√dₖ (lower = more saturated)."""
    labels = position_labels(tokens)[: len(entropy_scaled)]
    fig = go.Figure([
        go.Bar(x=labels, y=entropy_scaled, name="softmax(scores ÷ √dₖ)"),
        go.Bar(x=labels, y=entropy_unscaled, name="softmax(scores) — no scaling"),
    ])
    fig.update_layout(
        title={"text": "entropy of each query's weights (nats; 0 = saturated on one key)", "font": {"size": 13}},
        barmode="group", height=300, margin={"l": 10, "r": 10, "t": 50, "b": 10},
        legend={"orientation": "h", "y": -0.3},
    )
    fig.update_xaxes(type="category", tickangle=-60)
    return fig


def difference_heatmap(after: np.ndarray, before: np.ndarray, tokens, *, title: str, row_offset: int = 0,
                       col_offset: int = 0, height: int = 420) -> go.Figure:
    """after − before (finite cells only), diverging colours around 0."""
    with np.errstate(invalid="ignore"):
        diff = np.asarray(after, np.float32) - np.asarray(before, np.float32)
    diff[~np.isfinite(diff)] = np.nan
    bound = float(np.nanmax(np.abs(diff))) if np.isfinite(diff).any() else 1.0
    labels = position_labels(tokens)
    x_labels = labels[col_offset : col_offset + diff.shape[1]]
    y_labels = labels[row_offset : row_offset + diff.shape[0]]
    fig = go.Figure(go.Heatmap(
        z=diff, x=x_labels, y=y_labels, zmin=-(bound or 1.0), zmax=bound or 1.0, colorscale=SCORE_SCALE,
        hovertemplate="query %{y}<br>key %{x}<br>Δ %{z:.4f}<extra></extra>", hoverongaps=False,
        colorbar={"title": {"text": "Δ"}, "thickness": 12},
    ))
    _style_axes(fig, tokens, x_labels, y_labels, row_offset, col_offset)
    fig.update_layout(title={"text": title}, height=height, margin={"l": 10, "r": 10, "t": 60, "b": 10},
                      plot_bgcolor=MASKED_COLOR)
    return fig


def embedding_heatmap(matrix: np.ndarray, tokens, *, title: str, max_cells: int = 256, height: int = 360,
                      bound: float | None = None) -> go.Figure:
    """(n, d) embedding rows; mean-pooled along d (and n) when larger than ``max_cells`` (said in the title)."""
    values = np.asarray(matrix, dtype=np.float32)
    n, dim = values.shape
    row_block = max(1, math.ceil(n / max_cells))
    col_block = max(1, math.ceil(dim / max_cells))
    if row_block > 1 or col_block > 1:
        padded = np.pad(values, ((0, (-n) % row_block), (0, (-dim) % col_block)), constant_values=np.nan)
        values = np.nanmean(padded.reshape(padded.shape[0] // row_block, row_block,
                                           padded.shape[1] // col_block, col_block), axis=(1, 3))
        title += f" — downsampled to {values.shape[0]}×{values.shape[1]} (mean-pooled)"
    y = position_labels(tokens) if row_block == 1 else [f"{i * row_block}…" for i in range(values.shape[0])]
    bound = bound or float(np.nanmax(np.abs(values))) or 1.0  # pass one bound to compare several heatmaps
    fig = go.Figure(go.Heatmap(
        z=values, y=y, x=np.arange(values.shape[1]) * col_block, zmin=-bound, zmax=bound, colorscale=SCORE_SCALE,
        hovertemplate="token %{y}<br>dim %{x}<br>%{z:.4f}<extra></extra>",
        colorbar={"thickness": 10},
    ))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(title=f"embedding dimension (d_in = {dim})" + (f", mean of {col_block} per cell" if col_block > 1 else ""))
    fig.update_layout(title={"text": title, "font": {"size": 13}}, height=height,
                      margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig


def token_chips_html(tokens: list[str] | tuple[str, ...], token_ids, special) -> str:
    """Coloured chips (piece + id) as HTML; every user-derived string is escaped."""
    palette = ("#fde2e4", "#e2ece9", "#dfe7fd", "#fff1e6", "#e9edc9", "#f0e6ef")
    chips = []
    for index, (piece, token_id, is_special) in enumerate(zip(tokens, token_ids, special)):
        color = "#ffd166" if is_special else palette[index % len(palette)]
        border = "2px solid #d62828" if is_special else "1px solid #bbb"
        marker = " ★special" if is_special else ""
        chips.append(
            f'<span title="position {index}" style="display:inline-block;margin:2px;padding:2px 6px;'
            f'border-radius:6px;background:{color};border:{border};font-family:monospace;color:#222">'
            f"{html.escape(piece)}<sub style='color:#555'> {int(token_id)}{marker}</sub></span>"
        )
    return '<div class="attnviz-chips" style="line-height:2">' + "".join(chips) + "</div>"


def head_stat_bars(heads, values, metric: str, description: str) -> go.Figure:
    """One bar per head for one statistic."""
    fig = go.Figure(go.Bar(x=[f"head {int(h)}" for h in heads], y=values,
                           hovertemplate="%{x}: %{y:.4f}<extra></extra>"))
    fig.update_layout(title={"text": f"{metric} — {description}", "font": {"size": 12}}, height=320,
                      margin={"l": 10, "r": 10, "t": 50, "b": 10})
    fig.update_xaxes(type="category")
    return fig
