"""Implementations benchmark (work in progress)."""

import streamlit as st

from attnviz import ui

ctx = ui.setup("Implementations benchmark")
if ctx is None:
    st.stop()
st.title("Implementations benchmark")
