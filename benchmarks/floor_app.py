"""The floor for benchmarks/browser.py's first-paint measurement: the least a Streamlit page with attnviz's
stack can do — import torch and Plotly and draw one Plotly heatmap of the size the first page's focused map has
(the default sentence's 6 × 6) with ``st.plotly_chart``.

    streamlit run benchmarks/floor_app.py

A fresh server's first page of attnviz (the Heads page, default sentence) is timed against this page's,
in the same run, from opening the URL to every chart drawn.
"""

import numpy as np
import plotly.graph_objects as go
import streamlit as st
import torch

values = torch.rand(6, 6, generator=torch.Generator().manual_seed(0)).numpy()  # (6, 6)
st.title("floor")
st.caption("torch and Plotly imported · one chart")
st.plotly_chart(go.Figure(go.Heatmap(z=np.asarray(values), zmin=0.0, zmax=1.0)), key="floor_chart")
