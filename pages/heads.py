"""Heads: every head as a thumbnail, one focused head at full resolution, the shape diagram beside."""

import streamlit as st

from attnviz.words import STARTING

with st.spinner(STARTING):  # a fresh server's first request, for this page's URL, imports PyTorch here
    from attnviz import ui
    from attnviz.ui import heads_views

page_run = ui.setup()
if page_run is None:
    st.stop()

st.title("Attention heads")
ui.draw_layer_views(page_run, heads_views.draw)  # the layer's views: a new layer reruns only them (a fragment)
if page_run.checkpoint:
    ui.next_token_panel(page_run)  # the model's output: the same for every layer, so outside the layer's fragment
