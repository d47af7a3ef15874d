"""Pitfall lab: one classic attention bug at a time next to the book's code, and a causality leak detector."""

import streamlit as st

from attnviz.words import STARTING

with st.spinner(STARTING):  # a fresh server's first request, for this page's URL, imports PyTorch here
    from attnviz import ui
    from attnviz.ui import pitfalls

page_run = ui.setup()
if page_run is None:
    st.stop()

st.title("Pitfall lab")
pitfalls.draw(page_run)
