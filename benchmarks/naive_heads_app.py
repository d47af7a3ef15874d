"""The naive baseline for benchmarks/browser.py: every head as its own full-resolution float heatmap.

    streamlit run benchmarks/naive_heads_app.py        # ?text=… sets the text, like the app

What a first attempt at the Heads page looks like: the same ``attnviz.pipeline.run`` (cached the same
way as the app, so a warm rerun measures drawing only), then one ``go.Heatmap(z=float64 n×n)`` per head,
one ``st.plotly_chart`` each — no pooling, no window, no figure cache.  Settings are the app's defaults
(GPT-2 small, 12 heads, causal, eval mode); only the text can change (sidebar text area, key ``text``).
"""

import sys
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # attnviz from this checkout

from attnviz import pipeline, variants  # noqa: E402
from attnviz.config import AttentionConfig  # noqa: E402
from attnviz.trace import Trace  # noqa: E402

DEFAULT_TEXT = "Your journey starts with one step"
CONFIG = AttentionConfig(variant=variants.MHA, d_in=768, d_out=768, num_heads=12, dropout=0.1, train=False,
                                  causal=True, seed=123, device="auto")  # = the app's default settings


@st.cache_resource(max_entries=8, show_spinner=False)
def cached_run(text: str) -> Trace:
    return pipeline.run(text, CONFIG)


st.set_page_config(page_title="naive heads", layout="wide")
if "text" not in st.session_state:
    st.session_state["text"] = st.query_params.get("text", DEFAULT_TEXT)
text = st.sidebar.text_area("Text", key="text", height=110)
trace = cached_run(text)

st.title("Attention heads (naive)")
st.caption(f"{trace.n} tokens · {trace.num_heads} heads · one full-resolution heatmap per head")
for head in range(trace.num_heads):
    weights = trace.attention_map("weights", head).astype(np.float64)  # (n, n)
    fig = go.Figure(go.Heatmap(z=weights, zmin=0.0, zmax=1.0, colorscale="Viridis"))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title=f"head {head}", height=500, margin={"l": 10, "r": 10, "t": 40, "b": 10})
    st.plotly_chart(fig, key=f"naive_head_{head}")
