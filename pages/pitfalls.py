"""Pitfall lab: one classic attention bug at a time next to the book's code, and a causality leak detector."""

import streamlit as st

from attnviz import ui
from attnviz.ui import pitfalls

ctx = ui.setup(book_classes=True, draws_link=True)  # after the bug and the perturbed token are bound
if ctx is None:
    st.stop()

st.title("Pitfall lab")
pitfalls.draw(ctx)
