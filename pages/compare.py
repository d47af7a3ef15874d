"""Compare: the same tokens through every variant side by side (the book's six and the bonus GQA, MQA, MLA, SWA),
the equivalences between implementations (wrapper and MHA, MHA and SDPA, …) measured live, and why the
scores are divided by √dₖ."""

import streamlit as st

from attnviz.words import STARTING

with st.spinner(STARTING):  # a fresh server's first request, for this page's URL, imports PyTorch here
    from attnviz import ui
    from attnviz.ui import compare

page_run = ui.setup()
if page_run is None:
    st.stop()

st.title("Compare variants")
compare.draw(page_run)
