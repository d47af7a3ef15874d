"""Heads: every head as a thumbnail, one focused head at full resolution, the shape diagram beside."""

import streamlit as st

from attnviz import ui
from attnviz.ui import heads_views

ctx = ui.setup(checks_module=True)  # a module no map can draw is still checked here
if ctx is None:
    st.stop()

st.title("Attention heads")
ui.draw_layer_views(ctx, heads_views.draw)  # the layer's views: a new layer reruns only them (a fragment)
if ctx.checkpoint:
    ui.next_token_panel(ctx)  # the model's output: the same for every layer, so outside the layer's fragment
