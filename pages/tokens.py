"""Tokens: the text as GPT-2 token chips, and its embeddings (token + position = input)."""

import streamlit as st

from attnviz.words import STARTING, amount

with st.spinner(STARTING):  # a fresh server's first request, for this page's URL, imports PyTorch here
    import pandas as pd

    from attnviz import ui
    from attnviz.tokens import SPAN_HELP, span_labels
    from attnviz.views import figures

page_run = ui.setup()
if page_run is None:
    st.stop()
trace, config = page_run.trace, page_run.trace.config

st.title("Tokens and embeddings")
specials = sum(t.special for t in trace.token_details)
st.metric("Tokens", f"{trace.n:,} / {config.context_length:,}",  # thousands grouped, as words.amount writes them
          help=f"This run's tokens and its context length: at most {config.context_length:,} tokens fit "
               f"(GPT-2's is 1,024).")
if specials:
    st.caption(f"★ {amount(specials, 'special token')} (<|endoftext|> = 50256) marked ★ with a red border.")
with st.container(height=figures.CHIPS_BOX_PX if trace.n > figures.CHIPS_UNBOXED else "content"):  # scrolls inside
    st.html(figures.token_chips_html(trace.tokens, trace.token_ids, [t.special for t in trace.token_details]))
with st.expander("Token table"):
    st.dataframe(pd.DataFrame({
        "position": range(trace.n), "id": trace.token_ids, "piece": trace.tokens,
        "text span": span_labels(trace.token_ids),  # "part of “🙂” (char 7)" for a character split over tokens
        "special": [t.special for t in trace.token_details],
    }), hide_index=True, column_config={"text span": st.column_config.TextColumn(help=SPAN_HELP)})

rotary = config.rotary
st.subheader("Embeddings: token = input (rotary positions)" if rotary else "Embeddings: token + position = input")
if rotary:
    st.caption(f"Rotary positions (RoPE, base {config.rope_base:,}) add no position vector to the input: each head "
               "rotates its queries and keys by their positions inside attention (the Steps page's *rotate q, k* "
               "stage), so the input is the token embedding alone.")
if page_run.checkpoint:
    st.caption(f"The checkpoint's own rows: tok_emb (wte) for each token id and pos_emb (wpe) for each position "
               f"({ui.weights_caption(page_run)}).")
if config.embedding == "book" and not trace.embeddings["position"].any():
    st.caption("The book's hand-set 3-d vectors for the journey sentence (no positional embedding).")
caption, maps = figures.embedding_figures(trace.embeddings, trace.tokens, rotary=rotary)
st.caption(caption)
for name, figure in maps:
    st.plotly_chart(figure, config=ui.plotly_config(f"attnviz-embedding-{name}"))

if page_run.checkpoint:
    ui.next_token_panel(page_run, key="tokens_next_position")
