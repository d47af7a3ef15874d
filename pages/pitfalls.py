"""Pitfall lab (work in progress)."""

import streamlit as st

from attnviz import ui

ctx = ui.setup("Pitfall lab")
if ctx is None:
    st.stop()
st.title("Pitfall lab")
