"""Compare variants (work in progress)."""

import streamlit as st

from attnviz import ui

ctx = ui.setup("Compare variants")
if ctx is None:
    st.stop()
st.title("Compare variants")
