"""What attention does, in the app: knock out heads on the Induction lab and the Heads page, the value-weighted
map, rollout and the logit lens — for a model (a checkpoint, the bundled model, one trained in the session)."""

from __future__ import annotations

import threading

import numpy as np
import streamlit as st

from attnviz import models
from attnviz.ui.frame import Context, plotly_config
from attnviz.ui.state import page_bind
from attnviz.views import figures, head_figures, intervention_figures

NEEDS_A_MODEL = ("Knocking out heads needs a model that predicts tokens: pick the bundled model (or a checkpoint, or "
                 "one trained on the Train page) under *Weights*. The book's classes are one attention layer with "
                 "no language-model head.")
VALUE_WEIGHTED = ("**‖weight × value‖** (Kobayashi et al. 2020): how much each key token actually moves into the "
                  "query's output — its attention weight times the length of what it sends, (x W_V + b_V) W_O for "
                  "this head. A head can put most of its weight on one token (often the first: a *sink*) whose "
                  "value is tiny: the weights say it looks there, this map shows it carries almost nothing.")


def _model(ref: str):
    from attnviz import weights

    return weights.load(ref)


_grids: dict[tuple, tuple[np.ndarray, float]] = {}  # (ref, ids, T) -> the grid: small, kept for the server's life
_grids_lock = threading.Lock()


def _grid(ref: str, token_ids: tuple[int, ...], T: int) -> tuple[np.ndarray, float]:
    """The single-head knock-out grid, computed once per (model, tokens) with a progress bar."""
    key = (ref, token_ids, T)
    with _grids_lock:
        if key in _grids:
            return _grids[key]
    bar = st.progress(0.0, text="Knocking out each head alone…")
    try:
        grid = models.ablation_grid(_model(ref), np.array(token_ids), T,
                                    progress=lambda done: bar.progress(done, text=f"Knocking out heads… {done:.0%}"))
    finally:
        bar.empty()
    with _grids_lock:
        if len(_grids) >= 64:
            _grids.pop(next(iter(_grids)))
        _grids[key] = grid
    return grid


@st.cache_data(max_entries=32, ttl=3600, show_spinner=False)
def _ablated_loss(ref: str, token_ids: tuple[int, ...], heads: tuple[tuple[int, int], ...]) -> np.ndarray:
    model = _model(ref)
    return models.position_loss(models.ablate(model, token_ids, heads), token_ids)


def induction_section(ctx: Context, run) -> None:
    """The Induction lab's knock-outs: every head alone (a grid of Δ loss), then any heads together."""
    st.subheader("Knock heads out: which ones does the model need?")
    if ctx.config.checkpoint is None:
        st.info(NEEDS_A_MODEL, icon="ℹ️")
        return
    ref, ids = ctx.config.checkpoint, tuple(int(t) for t in run.token_ids)
    st.caption("A map that *looks* like an induction head proves nothing by itself. Knocking a head out — its part "
               "of the context set to 0 before the output projection — and measuring the loss on the second copy "
               "does: a head the model needs raises it.")
    delta, intact = _grid(ref, ids, run.T)
    st.plotly_chart(intervention_figures.ablation_grid_figure(delta, intact), key="induction_knockout_grid",
                    config=plotly_config("attnviz-knockout-grid"))
    layers, heads = delta.shape
    names = [head_figures.head_name(layer, head) for layer in range(layers) for head in range(heads)]
    worst = names[int(np.argmax(delta))]
    chosen = st.multiselect("Knock out together", names, **page_bind(
        "induction_knockout", [worst], lambda v: isinstance(v, list) and all(name in names for name in v)))
    if chosen:
        pairs = tuple((names.index(name) // heads, names.index(name) % heads) for name in chosen)
        intact_loss = models.position_loss(models.ablate(_model(ref), ids, ()), ids)
        st.plotly_chart(intervention_figures.ablated_loss_figure(intact_loss, _ablated_loss(ref, ids, pairs), run.T,
                                                                 ", ".join(chosen)),
                        key="induction_knockout_loss", config=plotly_config("attnviz-knockout-loss"))


@st.cache_data(max_entries=16, ttl=3600, show_spinner=False)
def _knockout_top(ref: str, token_ids: tuple[int, ...], layer: int, head: int, position: int):
    model = _model(ref)
    intact = models.ablate(model, token_ids, ())[position]  # (vocab,)
    without = models.ablate(model, token_ids, [(layer, head)])[position]
    log_intact, log_without = intact.log_softmax(-1), without.log_softmax(-1)
    top = int(log_intact.argmax())
    rows = []
    for logp in (log_intact, log_without):
        values, indices = logp.exp().topk(5)
        rows.append((indices.numpy(), values.numpy()))
    return rows, top, float(log_without[top] - log_intact[top])


@st.cache_data(max_entries=8, ttl=3600, show_spinner=False)
def _value_weighted(ref: str, token_ids: tuple[int, ...]) -> np.ndarray:
    return models.value_weighted(_model(ref), token_ids)


@st.cache_data(max_entries=8, ttl=3600, show_spinner=False)
def _rollout(ref: str, token_ids: tuple[int, ...]) -> np.ndarray:
    return models.rollout(models.attention_maps(_model(ref), list(token_ids)))


@st.cache_data(max_entries=16, ttl=3600, show_spinner=False)
def _lens(ref: str, token_ids: tuple[int, ...], position: int):
    return models.logit_lens(_model(ref), token_ids, position)


def heads_section(ctx: Context, head: int) -> None:
    """The Heads page with a model: knock out the focused head, its ‖weight × value‖ map, rollout, logit lens."""
    from attnviz.tokens import pieces

    trace = ctx.trace
    if trace.model is None or ctx.stale:
        return
    ref, ids, layer = trace.config.checkpoint, tuple(trace.token_ids), trace.model.layer
    st.subheader("What this attention does")
    position = st.slider("At position", 0, trace.n - 1, **page_bind(
        "heads_knockout_position", trace.n - 1, lambda v: isinstance(v, int) and 0 <= v < trace.n))
    st.caption(f"Predicting the token after {trace.tokens[position]!r} (position {position}).")
    knock, weigh = st.tabs([f"Knock out layer {layer} head {head}", "‖weight × value‖, rollout, logit lens"])
    with knock:
        rows, top, change = _knockout_top(ref, ids, layer, head, position)
        labels = [[t.piece for t in pieces([int(i) for i in row_ids])] for row_ids, _ in rows]
        table = intervention_figures.top_tokens_table(labels, np.stack([p for _, p in rows]),
                                                      ["intact", f"without L{layer}H{head}"])
        st.dataframe(table, key="heads_knockout_table")
        top_piece = pieces([top])[0].piece
        st.metric(f"log-probability of {top_piece!r} (the intact top token)", f"{change:+.3f}",
                  help="Its log-probability with the head knocked out minus intact: negative = the head helped predict it.")
    with weigh:
        st.markdown(VALUE_WEIGHTED)
        vw = _value_weighted(ref, ids)[layer, head]  # (n, n)
        left, right = st.columns(2)
        left.plotly_chart(figures.attention_heatmap(trace.attention_map("weights", head), trace.tokens, "weights",
                                                    title=f"head {head}: weights", height=420),
                          config=plotly_config("attnviz-weights"), key="heads_vw_weights")
        right.plotly_chart(figures.attention_heatmap(vw, trace.tokens, "scores", title=f"head {head}: ‖weight × value‖",
                                                     zrange=(0.0, float(vw.max()) or 1.0), height=420),
                           config=plotly_config("attnviz-value-weighted"), key="heads_vw_map")
        st.markdown(f"**Attention rollout up to layer {layer}** (Abnar & Zuidema 2020): each layer's mean map "
                    "mixed half-and-half with the identity (the residual), multiplied through the layers — how much "
                    "each input token can reach each position so far.")
        rolled = _rollout(ref, ids)[layer]
        st.plotly_chart(figures.attention_heatmap(rolled.astype(np.float32), trace.tokens, "weights",
                                                  title=f"rollout through layers 0…{layer}", height=420),
                        config=plotly_config("attnviz-rollout"), key="heads_rollout")
        st.markdown(f"**Logit lens at position {position}**: the model's own final norm and output head read after "
                    "every block — where in the depth the prediction forms.")
        lens_ids, lens_probs = _lens(ref, ids, position)
        labels = [[t.piece for t in pieces([int(i) for i in row])] for row in lens_ids]
        st.dataframe(intervention_figures.top_tokens_table(labels, lens_probs,
                                                           [f"after block {b}" for b in range(len(lens_ids))]),
                     key="heads_logit_lens")
