"""What one element of the checkpoint's Heads page costs the browser to redraw: a Streamlit page whose sidebar
Layer selectbox redraws a caption ("layer L of 12") and the elements named in ``ATTNVIZ_ELEMENTS`` (comma
separated), built by attnviz's own figure builders from 1024-token maps precomputed at start-up (no model, no
attention run).  Driven by ``benchmarks/element_costs.py``.

    ATTNVIZ_ELEMENTS=grid,window streamlit run benchmarks/element_cost_app.py

Elements: ``grid`` (the 12-head thumbnail grid: an image a head), ``grid_image`` (the same grid drawn from one PNG
mosaic instead of 12 images), ``window`` (the focused head's 256 × 256 window with its cell overlay, as
``st.plotly_chart(on_select="rerun")`` draws it on the Heads page), ``window_plain`` (the same heatmap without labels,
colour bar, legend or title), ``overview`` (the focused head's pooled 128² overview), ``merged`` (grid, window and
overview as one figure on three pairs of axes), ``sidebar`` (the shared sidebar's 14 settings widgets, without
its page links), ``share`` (the sidebar's collapsed "Share & export" expander: the link to the view as a code
block, which changes with every setting, a radio and a download button), ``links`` (nine page links), ``table``
(the head statistics table), ``select_slider`` (the next-token panel's 1024-option slider), ``sliders`` (the
window's two sliders).  None: the caption only.
"""

import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from attnviz import stats, variants  # noqa: E402
from attnviz.views import figures, map_image

N, HEADS, WINDOW = 1024, 12, 256
ELEMENTS = set(filter(None, os.environ.get("ATTNVIZ_ELEMENTS", "").split(",")))


@st.cache_resource
def maps(layer: int) -> np.ndarray:
    """(heads, n, n) causal softmax maps of random scores, one set per layer."""
    rng = np.random.default_rng(layer)
    scores = 3 * rng.standard_normal((HEADS, N, N), dtype=np.float32)  # (h, n, n)
    scores[:, np.triu(np.ones((N, N), dtype=bool), 1)] = -np.inf  # the causal mask
    weights = np.exp(scores - scores.max(-1, keepdims=True))  # (h, n, n)
    return weights / weights.sum(-1, keepdims=True)


def grid_image(weights: np.ndarray) -> go.Figure:
    """``figures.heads_grid`` with its per-head images drawn as one PNG mosaic (same tiles, "select head" overlay,
    titles and colour bar)."""
    figure = figures.heads_grid(weights, "weights")
    grid = figure.to_plotly_json()
    pooled, _ = figures.pooled_display(weights, "weights", True, 64)  # (heads, size, size): the tiles' values
    x = grid["layout"]["xaxis"]["range"]
    y = grid["layout"]["yaxis"]["range"]
    mosaic = np.full((round(y[0] - y[1]), round(x[1] - x[0])), np.nan, np.float32)  # (height cells, width cells)
    for tile, (x0, y0) in zip(pooled, grid["layout"]["meta"]["tiles"]):  # each head's tile at its (x0, y0)
        mosaic[y0 : y0 + tile.shape[0], x0 : x0 + tile.shape[1]] = tile
    others = [trace for trace in grid["data"] if trace["type"] != "image"]
    image = map_image.map_image(mosaic, 0.0, 1.0, figures.colorscale(figures.WEIGHT_SCALE))
    return go.Figure(data=[image, *others], layout=grid["layout"], _validate=False)


def merged(weights: np.ndarray, tokens: list[str]) -> go.Figure:
    """Grid, window and overview as one figure: three pairs of axes."""
    grid = figures.heads_grid(weights, "weights").to_plotly_json()
    window = figures.attention_heatmap(weights[0, :WINDOW, :WINDOW], tokens, "weights", validate=False,
                                       width=figures.FOCUSED_MAP_PX).to_plotly_json()
    overview = figures.overview_heatmap(weights[0], "weights", causal=True, window=(0, 0, WINDOW),
                                        validate=False).to_plotly_json()
    data = [{**t, "xaxis": "x", "yaxis": "y"} for t in grid["data"]]
    data += [{**t, "xaxis": "x2", "yaxis": "y2"} for t in window["data"]]  # the window's image, bar and overlay
    data += [{**t, "xaxis": "x3", "yaxis": "y3"} for t in overview["data"]]
    grid_bar, window_bar = (t for t in data if t.get("name") == "colour bar")
    grid_bar["marker"] = {**grid_bar["marker"], "colorbar": {**grid_bar["marker"]["colorbar"], "len": 0.3, "y": 0.85}}
    window_bar["marker"] = {**window_bar["marker"],
                            "colorbar": {**window_bar["marker"]["colorbar"], "len": 0.6, "y": 0.3}}
    layout = {"height": 1000, "margin": {"l": 10, "r": 10, "t": 70, "b": 36}, "plot_bgcolor": "white",
              "xaxis": {**grid["layout"]["xaxis"], "domain": [0, 1]},
              "yaxis": {**grid["layout"]["yaxis"], "domain": [0.72, 1.0]},
              "xaxis2": {**window["layout"]["xaxis"], "domain": [0.35, 1], "anchor": "y2"},
              "yaxis2": {**window["layout"]["yaxis"], "domain": [0, 0.55], "anchor": "x2"},
              "xaxis3": {**overview["layout"]["xaxis"], "domain": [0, 0.3], "anchor": "y3"},
              "yaxis3": {**overview["layout"]["yaxis"], "domain": [0.2, 0.55], "anchor": "x3", "scaleanchor": "x3"},
              "shapes": grid["layout"]["shapes"], "annotations": grid["layout"]["annotations"],
              "clickmode": "event+select", "dragmode": False}
    return go.Figure(data=data, layout=layout, _validate=False)


for every in range(12):  # built on the first page, so that a switch only draws
    maps(every)
layer = st.sidebar.selectbox("Layer", list(range(12)))
if "sidebar" in ELEMENTS:  # the shared sidebar's settings (attnviz/ui/sidebar.py), unchanged by a switch
    with st.sidebar:
        st.markdown("### attnviz")
        st.text_area("Text", "Your journey starts with one step", height=110)
        st.selectbox("Weights", ["book", "bundled"])
        st.selectbox("Attention variant", list(variants.LABELS), format_func=variants.LABELS.get)
        st.selectbox("Model size", ["small", "medium", "large", "xl", "custom"])
        left, right = st.columns(2)
        left.number_input("d_in", 1, 4096, 768)
        right.number_input("d_out", 1, 4096, 768)
        st.selectbox("Heads", [1, 2, 3, 4, 6, 8, 12])
        st.toggle("Causal mask", True)
        st.slider("Dropout p", 0.0, 0.9, 0.0, step=0.05)
        st.toggle("Dropout active (training mode)", False)
        st.number_input("Seed", 0, 2**31 - 1, 123)
        st.selectbox("Device", ["auto", "cpu"])
if "share" in ELEMENTS:
    with st.sidebar, st.expander("Share & export", icon=":material/share:"):
        st.caption("Link to this view (copy with the icon on the right):")
        st.code(f"http://127.0.0.1:8501/?layer={layer}&text=Your+journey+starts+with+one+step", language=None,
                wrap_lines=True)
        st.radio("Figure download format (camera icon on each chart)", ["png", "svg"], horizontal=True)
        st.download_button("Download this trace (NPZ + JSON manifest)", lambda: b"", file_name="trace.npz",
                           on_click="ignore", icon=":material/download:")
if "links" in ELEMENTS:
    with st.sidebar:
        for index in range(9):
            st.page_link(f"https://example.invalid/page{index}", label=f"Page {index}", icon=":material/visibility:")
st.caption(f"element cost · layer {layer} of 12 · {N} tokens")
weights = maps(layer)  # (h, n, n)
tokens = [f"t{i}" for i in range(N)]
if "grid" in ELEMENTS:
    st.plotly_chart(figures.heads_grid(weights, "weights"), key="grid")
if "grid_image" in ELEMENTS:
    st.plotly_chart(grid_image(weights), key="grid_image")
if "window" in ELEMENTS:
    st.plotly_chart(figures.attention_heatmap(weights[0, :WINDOW, :WINDOW], tokens, "weights", validate=False,
                                              width=figures.FOCUSED_MAP_PX),
                    key="window", on_select="rerun", selection_mode=("points", "box", "lasso"))
if "window_plain" in ELEMENTS:
    st.plotly_chart(go.Figure([{"type": "heatmap", "z": np.asarray(weights[0, :WINDOW, :WINDOW]), "zmin": 0,
                                "zmax": 1, "showscale": False}],
                              layout={"height": 520, "margin": {"l": 30, "r": 10, "t": 30, "b": 30},
                                      "yaxis": {"autorange": "reversed"}}, _validate=False), key="window_plain")
if "overview" in ELEMENTS:
    st.plotly_chart(figures.overview_heatmap(weights[0], "weights", causal=True, window=(0, 0, WINDOW),
                                             validate=False), key="overview")
if "merged" in ELEMENTS:
    st.plotly_chart(merged(weights, tokens), key="merged")
if "table" in ELEMENTS:
    table = pd.DataFrame(stats.head_statistics(weights))
    table.insert(0, "head", range(len(table)))
    st.dataframe(table, hide_index=True, on_select="rerun", selection_mode="single-row")  # as the Heads page
if "select_slider" in ELEMENTS:
    st.select_slider("After position", list(range(N)), format_func=lambda p: f"{p}: {tokens[p]}", value=N - 1)
if "sliders" in ELEMENTS:
    left, right = st.columns(2)
    left.slider("First query row", 0, N - WINDOW, 0)
    right.slider("First key column", 0, N - WINDOW, 0)
