"""The floor for benchmarks/generate_browser.py: the least a Streamlit page can do for one step — a fragment with a
Step button whose click redraws one Plotly heatmap of a step's new query rows (k rows × 256 cached keys, float32,
numeric axes) under a "Step k of N" line.  No model, no other element.

    streamlit run benchmarks/generate_floor_app.py

``python benchmarks/generate_browser.py --floor`` times Step → drawn on this page the same way as on the Generate
page: what is left above this floor is the Generate page's own work.
"""

import numpy as np
import plotly.graph_objects as go
import streamlit as st

STEPS = int(st.query_params.get("new_tokens", 20))
N_KEYS = 256


def go_to(k: int) -> None:
    st.session_state["k"] = k


@st.fragment
def stepper() -> None:
    k = st.session_state.get("k", 0)
    st.button("Step", disabled=k >= STEPS, on_click=go_to, args=(k + 1,))
    st.button("Prefill", on_click=go_to, args=(0,))
    st.markdown(f"**Step {k} of {STEPS}**")
    rows = np.random.default_rng(k).random((max(k, 1), N_KEYS), dtype=np.float32)  # (k, 256)
    st.plotly_chart(go.Figure(
        go.Heatmap(z=rows, x=np.arange(N_KEYS), y=np.arange(len(rows)), zmin=0.0, zmax=1.0, colorscale="Blues"),
        layout={"title": {"text": "query row over the cached keys"}, "height": 400,
                "yaxis": {"autorange": "reversed", "scaleanchor": "x", "constrain": "domain"},
                "xaxis": {"constrain": "domain"}}), key="floor_map")


st.title("Generate floor")
stepper()
