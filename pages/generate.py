"""Generate: the sidebar's model continues the text token by token with a KV cache; what the cache holds and costs."""

import streamlit as st

from attnviz.words import STARTING

with st.spinner(STARTING):  # a fresh server's first request, for this page's URL, imports PyTorch here
    from attnviz import ui
    from attnviz.ui import generate

generate.from_url()
page_run = ui.setup()
if page_run is None:
    st.stop()

st.title("Generate, token by token, with a KV cache")
st.markdown(
    "A GPT generates one token at a time: it runs the prompt once (the **prefill**), picks the most likely next "
    "token, appends it and runs again. Without a cache every run recomputes every token's keys and values; "
    "**with a KV cache** each layer keeps what it needs of them (the book's `cache_k` and `cache_v`; a bonus "
    "attention keeps fewer K/V heads, one latent per token or at most W tokens: the cache's table says what this "
    "model keeps), so a new step feeds only the new token: **one query row** over all the cached keys. Press "
    "**Step** to watch the cache grow; the badge checks each step against a full forward without the cache."
)
generate.show(page_run)
