"""The floor for benchmarks/checkpoint.py's layer switch in Chromium: a Streamlit page whose sidebar Layer
selectbox redraws a caption ("layer L of 12") and, unless ``ATTNVIZ_FLOOR=bare``, the Heads page's two main
charts for 1024 tokens — the 12-head thumbnail grid and the focused head's 256 × 256 window — built by the
same figure builders from maps precomputed at start-up (no model, no attention run, no tables, no selection
events), drawn by ``st.plotly_chart`` as the Heads page draws them (``ATTNVIZ_FLOOR=charts``, the default).

    streamlit run benchmarks/floor_switch_app.py
    ATTNVIZ_FLOOR=bare streamlit run benchmarks/floor_switch_app.py
"""

import os

import numpy as np
import streamlit as st

from attnviz.views import figures

N, HEADS, WINDOW = 1024, 12, 256


@st.cache_resource
def maps(layer: int) -> np.ndarray:
    """(heads, n, n) causal softmax maps of random scores, one set per layer."""
    rng = np.random.default_rng(layer)
    scores = rng.standard_normal((HEADS, N, N), dtype=np.float32)  # (h, n, n)
    scores[:, np.triu(np.ones((N, N), dtype=bool), 1)] = -np.inf  # the causal mask
    weights = np.exp(scores - scores.max(-1, keepdims=True))  # (h, n, n)
    return weights / weights.sum(-1, keepdims=True)


for every in range(12):  # built on the first page, so that a switch only draws
    maps(every)
st.title("floor")
layer = st.sidebar.selectbox("Layer", list(range(12)))
st.caption(f"floor · layer {layer} of 12 · {N} tokens")
if os.environ.get("ATTNVIZ_FLOOR") != "bare":
    weights = maps(layer)  # (h, n, n)
    tokens = [f"t{i}" for i in range(N)]
    grid = figures.heads_grid(weights, "weights")
    window = figures.attention_heatmap(weights[0, :WINDOW, :WINDOW], tokens, "weights", validate=False,
                                      width=figures.FOCUSED_MAP_PX)
    st.plotly_chart(grid, key="floor_grid")
    st.plotly_chart(window, key="floor_window")
