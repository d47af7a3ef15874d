"""Train: train a small GPT from scratch in this session and watch its induction and previous-token heads form."""

import streamlit as st

from attnviz import live_train, ui
from attnviz.ui import train

ui.setup("Train")  # the shared sidebar; the page itself does not draw the sidebar's run

st.title("Train a model, watch its heads form")
cfg = live_train.page_config()
st.markdown(
    f"Train the book's `GPTModel` from scratch ({cfg.n_layers} layer{'s' if cfg.n_layers != 1 else ''} × "
    f"{cfg.n_heads} heads, {cfg.emb_dim}-dimensional, GPT-2's tokenizer) — the recipe of the bundled model — on "
    "English and code that ship with Python and on random token sequences whose tokens often copy the one two "
    "places back. Every few steps each head is measured: its **previous-token** score (does it look at the "
    "token right before?) and its **induction** score (on a sequence that repeats, does it look at the token "
    "after the earlier copy of the current token?). Watch the loss drop and a previous-token head appear, "
    "suddenly, a few hundred steps in: the first half of an induction circuit. This recipe does not form the "
    "second half (an induction head) in this time — the curves would show it if it did."
)
st.caption("One training per browser tab; the server trains a few at once at most. It runs in the background: "
           "other pages stay usable (your training continues while this tab is open) and closing the tab stops it.")

train.controls()
train.live()
train.results()
