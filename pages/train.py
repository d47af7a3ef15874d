"""Train: train a small GPT from scratch in this session and watch its induction and previous-token heads form."""

import streamlit as st

from attnviz import live_train, ui
from attnviz.ui import train

ui.setup("Train")  # the shared sidebar; the page itself does not draw the sidebar's run

st.title("Train a model, watch its heads form")
cfg = live_train.page_config()
st.markdown(
    f"Train the book's `GPTModel` from scratch ({cfg.n_layers} layer{'s' if cfg.n_layers != 1 else ''} × {cfg.n_heads} heads, "
    f"{cfg.emb_dim}-dimensional, GPT-2's tokenizer) on repeated random token sequences and English and code "
    "that ship with Python. Every few steps each head is measured: its **induction** score (on a sequence "
    "that repeats, does it look at the token after the earlier copy of the current token?) and its "
    "**previous-token** score. Watch the loss drop and, at some point, an induction head appear — usually in "
    "a sudden phase change, after a previous-token head has formed in the layer below."
)
st.caption("One training per browser tab; the server trains a few at once at most. It runs in the background: "
           "other pages stay usable (your training continues while this tab is open) and closing the tab stops it.")

train.controls()
train.live()
train.results()
