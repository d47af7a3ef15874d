"""Induction lab: repeated random tokens, the induction stripe A[i, i−T+1] on every head, and the model's loss."""

import streamlit as st

from attnviz.words import STARTING

with st.spinner(STARTING):  # a fresh server's first request, for this page's URL, imports PyTorch here
    from attnviz import ui
    from attnviz.ui import induction, interventions

page_run = ui.setup()  # the Share link is drawn below, once T, the seed, the head and the knock-outs are bound
if page_run is None:
    st.stop()

st.title("Induction lab")
st.markdown(
    "An **induction head** completes patterns: at a token it has seen before, it attends to the token that "
    "came *after* that earlier occurrence, so the model can predict it again. The test (TransformerLens' "
    "induction demo): T random tokens x, repeated — `[BOS] + x + x`. On the second copy an induction head "
    "looks T − 1 tokens back, along the stripe **A[i, i−T+1]** (outlined on the map). Its score is the mean "
    "of that stripe over the second copy. Random tokens mean nothing but the repeat can be predicted."
)
run = induction.lab_run(page_run)
if run is not None:
    induction.show(run, page_run)
    interventions.induction_section(page_run, run)
ui.share_link(page_run.link)
