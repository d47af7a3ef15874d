"""Steps: one head through QKᵀ → ÷√dₖ → mask → softmax → dropout → ·V, before/after, next to the
live shape diagram with the viewed stage highlighted; the bonus variants' latent, rotation and K/V repeat first."""

import streamlit as st

from attnviz.words import STARTING

with st.spinner(STARTING):  # a fresh server's first request, for this page's URL, imports PyTorch here
    from attnviz import ui
    from attnviz.ui import steps

page_run = ui.setup()
if page_run is None:
    st.stop()

st.title("Attention step by step")
steps.draw(page_run)
