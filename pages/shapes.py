"""Shapes: the live pipeline diagram with this run's tensor shapes, and the same shapes as a table."""

import streamlit as st

from attnviz.words import STARTING

with st.spinner(STARTING):  # a fresh server's first request, for this page's URL, imports PyTorch here
    import pandas as pd

    from attnviz import ui
    from attnviz.tokens import counted
    from attnviz.views import checkpoint_view, diagram

page_run = ui.setup()
if page_run is None:
    st.stop()
trace, config = page_run.trace, page_run.trace.config

st.title("Tensor shapes through the pipeline")
st.caption(f"{ui.weights_caption(page_run)} · {counted(trace.n)} — shapes are read from the tensors of this run.")
ui.book_listing_note(config)  # the diagram's mask stage on a 3.3/3.4 class: attnviz's addition
if page_run.checkpoint:
    st.subheader("The whole model: tokens → logits")
    st.caption(f"Block {trace.model.layer} is expanded; its attention (highlighted) is drawn in detail below.")
    whole, table = st.columns([1, 1])
    whole.graphviz_chart(checkpoint_view.model_path_dot(trace))
    table.dataframe(pd.DataFrame(checkpoint_view.model_path_rows(trace)), hide_index=True, height=600)
    st.subheader(f"Block {trace.model.layer}'s attention")
if trace.module_run is not None:  # the user's module: its own ops, as it ran them
    st.markdown(f"**{trace.module_run.class_name}: every tensor op of its forward, in order, with its line**")
    st.graphviz_chart(diagram.op_dot(trace))
    rows = diagram.op_rows(trace)
else:
    st.markdown(f"**{diagram.head_dim_equation(config)}**")
    st.graphviz_chart(diagram.shape_dot(trace.shapes, config, rankdir="TB", window=trace.window,  # top to bottom
                                        hides_future=trace.hides_future,
                                        layer=trace.model_layer))
    rows = diagram.shape_rows(trace.shapes, config)
st.dataframe(pd.DataFrame(rows), hide_index=True, height=36 * (len(rows) + 1) + 3)  # every stage, no scrolling
