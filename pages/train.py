"""Train: train a small GPT from scratch in this session and watch its induction and previous-token heads form."""

import streamlit as st

from attnviz.words import STARTING

with st.spinner(STARTING):  # a fresh server's first request, for this page's URL, imports PyTorch here
    from attnviz import ui
    from attnviz.head_types import LABEL_THRESHOLD
    from attnviz.labs import live_train
    from attnviz.ui import train

ui.page_setup()  # training has its own settings, on this page

st.title("Train a model, watch its heads form")
cfg = live_train.page_config()
st.markdown(
    f"Train the book's `GPTModel` from scratch ({cfg.n_layers} layer{'s' if cfg.n_layers != 1 else ''} × "
    f"{cfg.n_heads} heads, {cfg.emb_dim}-dimensional, GPT-2's tokenizer) — the bundled model's recipe, quickened "
    f"(sequences of {cfg.seq_len} tokens, twice the heads) — on "
    "random token sequences that repeat. Every few steps each head is measured: its **induction** score (on a "
    "sequence that repeats, does it look at the token *after* the earlier copy of the current token?) and its "
    "**previous-token** score (on English and code it never trains on, does it look at the token right "
    f"before?). For about the first {live_train.FORMS_AROUND_STEP} steps no head gets a type: the progress bar counts "
    "the steps (how long each takes depends on how busy this computer is), the loss only creeps down and every "
    "head's induction score stays near 0. Then, suddenly, layer 1's heads become induction heads and the loss on "
    "the repeats collapses, while layer 0's start turning towards the "
    "previous token — the two halves of an induction circuit. Layer 0's scores rise more slowly and not as high: "
    f"in a short run they may stay under the dotted {LABEL_THRESHOLD:g} line, where a head is named."
)
with st.expander("What makes this recipe form the textbook circuit"):
    st.markdown(
        "The blocks are attention-only (the book's feed-forward is kept but frozen at zero), the token "
        "embedding stays at its random start (so every token id is alike and the circuit works on ids the "
        "model never saw), and layer 0's heads keep a random, frozen value/output map: they can only learn "
        "*where* to look, and what they pass on — the previous token — arrives in a subspace of its own, "
        "where a layer-1 head's keys can match it against the current token. Trained with learned embeddings "
        "and feed-forward layers, the same model learned to copy the repeat without these heads "
        "(benchmarks/results/train_recipe.md)."
    )
st.caption(train.concurrency_caption())

train.controls()
train.live()
train.results()
