"""A fragment polled every 0.2 s whose layout grows on alternate runs (FIXED=1: the same four slots on every run,
st.empty() where there is nothing), with a large unchanged Plotly chart last (sent as a cached reference)."""
import os

import numpy as np
import plotly.graph_objects as go
import streamlit as st

FIXED = os.environ.get("FIXED") == "1"
rng = np.random.default_rng(0)
X = rng.random(20_000)


@st.fragment(run_every=0.2)
def live():
    n = st.session_state.get("n", 0) + 1
    st.session_state["n"] = n
    st.write(f"run {n}")
    grow = n % 2 == 0
    for k in range(2):
        if grow:
            st.caption(f"row {k} of run {n}")
        elif FIXED:
            st.empty()
    fig = go.Figure(go.Scatter(x=X, y=X[::-1], mode="markers"))  # rebuilt each run (slow), same bytes (a ref)
    st.plotly_chart(fig, key="big")


st.title("gap")
live()
