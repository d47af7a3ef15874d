"""Panels only a checkpoint's view has: the model's next-token predictions and the layers × heads overview
(computed layer by layer, pooled, cached per text, checkpoint and mask)."""

from __future__ import annotations

import functools

import streamlit as st

from attnviz import models
from attnviz.ui import weights
from attnviz.ui.frame import Context, plotly_config
from attnviz.ui.state import page_bind
from attnviz.views import checkpoint_view


def next_token_panel(page_run: Context, key: str = "next_position") -> None:
    """Top-5 next tokens at a chosen position (default: the last), and every position's top-1 in an expander that
    runs only while it is open."""
    trace = page_run.trace
    if trace.model is None:
        return
    st.subheader("Next-token predictions")
    n = trace.n
    labels = position_labels(trace.tokens)  # a new text's: the slider reads its token at a position kept
    position = st.select_slider(
        "After position", list(range(n)), format_func=labels.__getitem__,
        **page_bind(key, n - 1, lambda p: isinstance(p, int) and 0 <= p < n, labels=labels),
    ) if n > 1 else 0
    st.caption(f"What the model predicts after “{trace.tokens[position]}” (position {position}): its top 5 "
               "of 50,257 tokens, softmax of the logits.")
    st.dataframe(checkpoint_view.next_tokens(trace, position), hide_index=True, column_config={
        "probability": st.column_config.ProgressColumn("probability", format="%.4f", min_value=0.0, max_value=1.0),
    })
    every = st.expander("Every position's most likely next token", key=f"{key}_every", on_change="rerun")
    if every.open:  # collapsed, its table (a row per token) is neither computed nor sent: a layer switch skips it
        with every:
            st.dataframe(_predictions(trace.config.checkpoint, trace.config.causal, trace.token_ids, trace),
                         hide_index=True, column_config={
                "probability": st.column_config.ProgressColumn("probability", format="%.4f", min_value=0.0,
                                                               max_value=1.0),
            })


def position_labels(tokens: tuple[str, ...]) -> tuple[str, ...]:
    """The labels of a slider over token positions ("3: ·cat"): its ``format_func`` is their ``__getitem__``, and
    ``page_bind``'s ``labels`` them, so that the slider reads the new text's token where a new text keeps its
    position.  Streamlit keeps a widget's ``format_func`` in the session: this one holds the labels only, never a
    Trace or a page's globals (which hold its Context)."""
    return tuple(f"{position}: {token}" for position, token in enumerate(tokens))


@st.cache_resource(max_entries=8, ttl=3600, show_spinner=False)
def _predictions(checkpoint: str, causal: bool, token_ids: tuple[int, ...], _trace):
    """Every position's top-1 table: the same for every layer of a run (the model's output), so computed once."""
    return checkpoint_view.predictions(_trace)


@st.cache_resource(max_entries=4, ttl=3600, show_spinner=False)
def every_layer(checkpoint: str, causal: bool, token_ids: tuple[int, ...]):
    """(pooled maps (L, h, s, s), head-type scores {name: (L, h)}) of every layer: one pass, one layer at a time
    (:func:`attnviz.models.every_layer`), each layer's maps pooled to the overview's tiles as they are computed."""
    model = weights.load(checkpoint)
    size = checkpoint_view.tile_size(model.trf_blocks[0].att.num_heads)
    tiles = functools.partial(checkpoint_view.overview_tiles, causal=causal, size=size)
    return models.every_layer(model, list(token_ids), tiles, causal=causal)


def layers_overview(page_run: Context):
    """The layers × heads overview (BertViz's model view), computed when asked for: every layer's maps once.

    Returns every layer's head-type scores ({name: (layers, heads)}) when shown, else None: the Heads page's
    head types use them (the same pass)."""
    trace = page_run.trace
    if trace.model is None:
        return None
    st.subheader("Every layer and head")
    show = st.toggle(f"Show all {trace.model.n_layers} layers × {trace.num_heads} heads",
                     help="Runs every block once more, one layer at a time, keeping only pooled thumbnails and "
                     "each head's type scores.", **page_bind("heads_overview", False))
    if not show:
        st.caption("Off: turn it on to see every layer's heads and their types (one more pass through the model; "
                   "this layer's heads are above).")
        return None
    pooled = None
    with weights.said_if_unreadable(), st.spinner("Running every layer…"):  # changed on disk since: said
        # the mask that ran: the sliding-window class masks every layer whatever the Causal switch says
        pooled, scores = every_layer(trace.config.checkpoint, trace.hides_future, trace.token_ids)
    if pooled is None:
        return None
    focus = (trace.model.layer, st.session_state.get("heads_focus", 0))
    st.plotly_chart(checkpoint_view.overview_figure(pooled, trace.n, focus=focus),
                    config=plotly_config("attnviz-layers-heads"))
    return scores
