"""Benchmark: the book's MultiHeadAttention vs the wrapper, a fused QKV, nn.MultiheadAttention and SDPA,
all with the same weights (attnviz.labs.implementations), timed on this machine when the button is pressed."""

import streamlit as st

from attnviz.words import STARTING

with st.spinner(STARTING):  # a fresh server's first request, for this page's URL, imports PyTorch here
    from attnviz import ui
    from attnviz.ui import benchmark

page_run = ui.setup()
if page_run is None:
    st.stop()

st.title("Implementations benchmark")
benchmark.show(page_run)
