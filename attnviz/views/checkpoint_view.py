"""What the app shows of a whole GPT model (pure: NumPy, pandas, Plotly, DOT; no Streamlit).

* :func:`overview_tiles` — one layer's heads max-pooled to small tiles (:func:`attnviz.models.every_layer`
  computes every layer's, one at a time), and :func:`overview_figure` draws them as one layers × heads mosaic
  (BertViz's model view, as a heatmap);
* :func:`next_tokens` — the model's top-5 next tokens after one position, as a table; :func:`predictions` —
  every position's most likely next token;
* :func:`model_path_rows` / :func:`model_path_dot` — the shapes of the whole path, tokens → logits.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attnviz import tokens
from attnviz.trace import window_band
from attnviz.views import diagram, figures, margins

if TYPE_CHECKING:
    from attnviz.trace import Trace


def tile_size(n_heads: int) -> int:
    """Pixels-ish per tile side: 24 cells up to 16 heads, 16 beyond (GPT-2 XL's 25 heads stay one row wide)."""
    return 24 if n_heads <= 16 else 16


def overview_tiles(maps: np.ndarray, causal: bool, size: int, window: int | None = None) -> np.ndarray:
    """One layer's softmax weights ``(heads, n, n)`` as the overview's tiles: each head's map max-pooled to at most
    ``size`` × ``size``, masked cells NaN — with a sliding ``window`` W, the keys W or more behind their query too,
    as the Heads page's grid greys them: ``(heads, s, s)`` float32.  :func:`attnviz.models.every_layer` takes it
    to make each layer small as it is computed."""
    n_rows, n_cols = maps.shape[-2:]
    hidden = None if window is None else window_band(n_rows, n_cols, window)  # (n, n): the future and the far past
    tiles = []
    for head_map in maps:
        values = figures.display_values(head_map, "weights", causal)  # (n, n), a copy
        if hidden is not None:
            values[hidden] = np.nan  # the window hides the future and the far past
        tiles.append(figures.max_pool(values, size)[0])  # (s, s)
    return np.stack(tiles).astype(np.float32, copy=False)  # (h, s, s)


def overview_figure(pooled: np.ndarray, n_tokens: int, focus: tuple[int, int] | None = None) -> go.Figure:
    """The layers × heads mosaic of every layer's :func:`overview_tiles` (rows = layers, columns = heads), one heatmap.

    ``focus`` = (layer, head) is outlined (the Heads page's layer and focused head)."""
    n_layers, n_heads, size, _ = pooled.shape
    gap = max(1, math.ceil(size * 0.12))
    step = size + gap
    mosaic = np.full((n_layers * step - gap, n_heads * step - gap), np.nan, dtype=np.float32)
    for layer in range(n_layers):
        for head in range(n_heads):
            mosaic[layer * step : layer * step + size, head * step : head * step + size] = pooled[layer, head]
    fig = go.Figure(go.Heatmap(
        z=mosaic, zmin=0.0, zmax=1.0, colorscale=figures.WEIGHT_SCALE, hoverongaps=False, hoverinfo="skip",
        colorbar={"title": {"text": "weights"}, "thickness": 10, "len": 0.9}, name="every layer and head",
    ))
    # every tile's backdrop, given to the layout at once (add_shape copies the layout's shapes on each call)
    shapes = [{"type": "rect", "x0": head * step - 0.5, "x1": head * step + size - 0.5, "y0": layer * step - 0.5,
               "y1": layer * step + size - 0.5, "fillcolor": figures.MASKED_COLOR, "line": {"width": 0},
               "layer": "below"} for layer in range(n_layers) for head in range(n_heads)]
    if focus is not None:
        layer, head = focus
        shapes.append({"type": "rect", "x0": head * step - 0.5, "x1": head * step + size - 0.5,
                       "y0": layer * step - 0.5, "y1": layer * step + size - 0.5,
                       "line": {"color": "#d62728", "width": 2}, "layer": "above", "name": "focus"})
    fig.update_layout(shapes=shapes)
    centers = (np.arange(max(n_layers, n_heads)) * step + (size - 1) / 2).tolist()
    # square cells (each tile a square, as the map it is): the plot area shrinks to the mosaic, at its top left
    fig.update_xaxes(tickvals=centers[:n_heads], ticktext=[f"H{h}" for h in range(n_heads)], side="top",
                     range=[-0.5, mosaic.shape[1] - 0.5], showgrid=False, zeroline=False, tickfont={"size": 10},
                     constrain="domain", constraintoward="left")
    fig.update_yaxes(tickvals=centers[:n_layers], ticktext=[f"L{layer}" for layer in range(n_layers)],
                     range=[mosaic.shape[0] - 0.5, -0.5], showgrid=False, zeroline=False, tickfont={"size": 10},
                     scaleanchor="x", scaleratio=1, constrain="domain", constraintoward="top")
    pooled_note = f"each tile max-pooled {n_tokens}→{size}" if n_tokens > size else "each tile at full resolution"
    top, bottom = margins.title_top(2, 13, above_plot=HEAD_LABELS_PX), 10  # the title's two lines, the heads' labels
    fig.update_layout(
        title=margins.title(f"Every layer × head: attention weights<br><sup>{pooled_note}; rows = layers, columns = "
                            "heads; the outlined tile is the layer and head in focus</sup>", 13),
        height=min(OVERVIEW_MAX_PX, top + bottom + round(mosaic.shape[0] * overview_cell_px(mosaic.shape[1], size))),
        margin={"l": 40, "r": margins.COLORBAR_PX, "t": top, "b": bottom},
        plot_bgcolor="white", dragmode=False,
    )
    return fig


OVERVIEW_WIDTH_PX = 600  # the mosaic's width at most, within the Heads page's wide column (less on a narrow one)
OVERVIEW_TILE_PX = 200  # a tile's side at most: a few heads' tiles are not made page-sized
OVERVIEW_MAX_PX = 2400  # the figure's height at most (GPT-2 XL's 48 layers)
HEAD_LABELS_PX = 20  # the heads' labels ("H3") above the mosaic, at 10 px


def overview_cell_px(columns: int, size: int) -> float:
    """Pixels per cell side of :func:`overview_figure`'s square cells: the mosaic's ``columns`` cells span at most
    :data:`OVERVIEW_WIDTH_PX`, and a tile of ``size`` cells at most :data:`OVERVIEW_TILE_PX`; the figure's height
    follows from it (a narrower page shrinks the square cells: the width then decides)."""
    return min(OVERVIEW_WIDTH_PX / columns, OVERVIEW_TILE_PX / size)


def next_tokens(trace: Trace, position: int) -> pd.DataFrame:
    """The model's top-5 next tokens after ``position``: rank, token (display piece), id, probability."""
    run = trace.model
    ids = [int(token) for token in run.top_ids[position]]
    return pd.DataFrame({
        "rank": range(1, len(ids) + 1),
        "next token": [piece.piece for piece in tokens.pieces(ids)] if ids else [],
        "id": ids,
        "probability": [float(p) for p in run.top_probs[position]],
    })


def predictions(trace: Trace) -> pd.DataFrame:
    """Every position's most likely next token: position, token, predicted next token, its probability, and
    whether the text's actual next token is in the top 5."""
    run = trace.model
    top1 = [piece.piece for piece in tokens.pieces([int(i) for i in run.top_ids[:, 0]])]
    actual = list(trace.token_ids[1:]) + [None]
    return pd.DataFrame({
        "position": range(trace.n),
        "token": list(trace.tokens),
        "predicted next": top1,
        "probability": [float(p) for p in run.top_probs[:, 0]],
        "actual next in top 5": [None if nxt is None else bool(nxt in run.top_ids[i]) for i, nxt in enumerate(actual)],
    })


def model_path_rows(trace: Trace) -> list[dict[str, str]]:
    """The whole model's path, one row per tensor: stage, shape, and where it is (block L's own steps marked)."""
    run = trace.model
    rows, inside = [], False
    for name, shape in run.path:
        if name == "norm1":
            inside = True
        where = f"block {run.layer}" if inside else ""
        if inside and name == "shortcut2":
            inside = False
        rows.append({"stage": name, "shape": diagram.format_shape(shape), "where": where})
    return rows


def model_path_dot(trace: Trace) -> str:
    """Graphviz DOT of the whole path: embeddings, blocks (the traced one expanded), final norm, logits."""
    run = trace.model
    shapes = dict(run.path)
    quote = diagram.quote
    lines = ["digraph model {", '  graph [rankdir=TB, nodesep=0.25, ranksep=0.25, fontname="Helvetica", '
             f'bgcolor="transparent", fontcolor="{diagram.LINE}"];',
             '  node [shape=box, style="rounded,filled", fillcolor="#e8eef9", fontname="Helvetica", fontsize=11, '
             f'fontcolor="{diagram.INK}"];',
             f'  edge [arrowsize=0.7, color="{diagram.LINE}", fontcolor="{diagram.LINE}"];']

    def node(key: str, label: str, **attrs) -> None:
        extra = "".join(f", {k}={quote(str(v))}" for k, v in attrs.items())
        lines.append(f"  {quote(key)} [label={quote(label)}{extra}];")

    node("tokens", f"tokens {diagram.format_shape(shapes['tokens'])}")
    node("tok_emb", f"tok_emb (wte) {diagram.format_shape(shapes['tok_emb'])}")
    node("pos_emb", f"pos_emb (wpe) {diagram.format_shape(shapes['pos_emb'])}")
    node("input", f"input = tok_emb + pos_emb {diagram.format_shape(shapes['input'])}")
    lines += ['  "tokens" -> "tok_emb";', '  "tok_emb" -> "input";', '  "pos_emb" -> "input";']
    previous = "input"
    block_shape = diagram.format_shape(shapes[f"block {run.layer}"])
    for index in range(run.n_layers):
        if index == run.layer:
            lines.append(f"  subgraph cluster_layer {{ graph [label={quote(f'block {index} (this layer)')}, "
                         'style="rounded,dashed", color="#d62728"];')
            attention = f"{trace.config.spec.cls.__name__}\n{trace.config.spec.shape_path[1]} … output"  # latent …
            inner = [("norm1", "norm1 (LayerNorm)"), ("attention", attention),
                     ("shortcut1", "+ shortcut"), ("norm2", "norm2 (LayerNorm)"), ("ff", "feed-forward (GELU)"),
                     ("shortcut2", "+ shortcut")]
            for key, label in inner:
                shape = shapes["output"] if key == "attention" else shapes[key]
                node(key, f"{label}\n{diagram.format_shape(shape)}",
                     **({"fillcolor": "#ffd54f"} if key == "attention" else {}))
            lines.append("  }")
            for key, _ in inner:
                lines.append(f"  {quote(previous)} -> {quote(key)};")
                previous = key
        elif index in (0, run.n_layers - 1) or abs(index - run.layer) == 1:
            key = f"block {index}"
            node(key, f"block {index} {block_shape}")
            lines.append(f"  {quote(previous)} -> {quote(key)};")
            previous = key
        elif index in (1, run.layer + 2):  # collapsed runs of blocks
            last = run.layer - 2 if index == 1 else run.n_layers - 2
            key = f"blocks {index}-{last}"
            label = f"block {index}" if last == index else f"blocks {index} … {last}"
            node(key, f"{label}  {block_shape}", style="rounded,dashed")
            lines.append(f"  {quote(previous)} -> {quote(key)};")
            previous = key
    node("final_norm", f"final_norm {diagram.format_shape(shapes['final_norm'])}")
    node("logits", f"logits = out_head(final_norm) {diagram.format_shape(shapes['logits'])}")
    lines += [f"  {quote(previous)} -> \"final_norm\";", '  "final_norm" -> "logits";', "}"]
    return "\n".join(lines) + "\n"
