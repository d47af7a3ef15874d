"""What attention does, in the app: knock out heads on the Induction lab and the Heads page, the value-weighted
map, rollout and the logit lens — for a model (a checkpoint, the bundled model, one trained in the session)."""

from __future__ import annotations

import functools
import threading

import numpy as np
import streamlit as st

from attnviz import models
from attnviz.ui import weights as ui_weights
from attnviz.ui.frame import Context, plotly_config
from attnviz.ui.state import (
    forget_page_params,
    page_bind,
    page_param_notice,
    page_params_of,
    page_widgets_from_url,
    shown_page,
    url_notices,
)
from attnviz.urlstate import KNOCKOUT, ignored, parse_options
from attnviz.views import figures, head_figures, intervention_figures

NEEDS_A_MODEL = ("Knocking out heads needs a model that predicts tokens: pick the bundled model (or a checkpoint, or "
                 "one trained on the Train page) under *Weights*. The book's classes are one attention layer with "
                 "no language-model head.")
VALUE_WEIGHTED = ("**‖weight × value‖** (Kobayashi et al. 2020): how much each key token actually moves into the "
                  "query's output — its attention weight times the length of what it sends, (x W_V + b_V) W_O for "
                  "this head. A head can put most of its weight on one token (often the first: a *sink*) whose "
                  "value is tiny: the weights say it looks there, this map shows it carries almost nothing.")


def _model(ref: str):
    """The model behind ``ref``; a CheckpointError in words with its listed name (``ui.weights.load``)."""
    return ui_weights.load(ref)


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


UNUSED_KNOCKOUT = "induction_knockout_without_model"  # the notice of a link's knock-outs the book's classes cannot run


def induction_section(page_run: Context, run) -> None:
    """The Induction lab's knock-outs: every head alone (a grid of Δ loss), then any heads together — the link's
    ``knockout`` on a session's first visit of the lab with a model, and the URL's since."""
    st.subheader("Knock heads out: which ones does the model need?")
    if page_run.config.checkpoint is None:
        raw = st.query_params.get(KNOCKOUT)
        if raw is not None and raw != page_params_of(shown_page()).get(KNOCKOUT):  # a link's, not this lab's
            st.session_state[page_param_notice(UNUSED_KNOCKOUT)] = ignored(
                [(KNOCKOUT, raw)], "knocking out heads needs a model that predicts tokens, and the book's classes "
                "do not.")
        url_notices(UNUSED_KNOCKOUT)  # until a model is picked
        st.info(NEEDS_A_MODEL, icon=":material/info:")
        forget_page_params(KNOCKOUT)  # nothing to knock out: the URL leaves it out
        return
    st.session_state.pop(page_param_notice(UNUSED_KNOCKOUT), None)
    ref, ids = page_run.config.checkpoint, tuple(int(t) for t in run.token_ids)
    st.caption("A map that *looks* like an induction head proves nothing by itself. Knocking a head out — its part "
               "of the context set to 0 before the output projection — and measuring the loss on the second copy "
               "does: a head the model needs raises it.")
    with ui_weights.said_if_unreadable():  # the model is read again here: it may have changed on disk since
        _induction_knockouts(ref, ids, run)


def _induction_knockouts(ref: str, ids: tuple[int, ...], run) -> None:
    """Every head alone, then the chosen heads together (:func:`induction_section`), against the lab run's own
    intact loss (``run.loss``: the one its metric and loss curve show)."""
    delta, _ = _grid(ref, ids, run.T)
    # intact: the lab's own loss (its metric's), not the grid pass's, which differs from it by float rounding and
    # may print a different second decimal beside the metric
    intact = run.halves[1]
    st.plotly_chart(intervention_figures.ablation_grid_figure(delta, intact), key="induction_knockout_grid",
                    config=plotly_config("attnviz-knockout-grid"))
    layers, heads = delta.shape
    names = [head_figures.head_name(layer, head) for layer in range(layers) for head in range(heads)]
    worst = names[int(np.argmax(delta))]
    page_widgets_from_url("induction_knockout", {"induction_knockout": (
        KNOCKOUT, functools.partial(parse_options, options=names, what="a head of this model", using="knocking out"),
        f"knocking out {worst}")})
    url_notices("induction_knockout")
    chosen = st.multiselect("Knock out together", names, **page_bind(
        "induction_knockout", [worst], lambda v: isinstance(v, list) and all(name in names for name in v),
        url=KNOCKOUT))
    if chosen:
        pairs = tuple((names.index(name) // heads, names.index(name) % heads) for name in chosen)
        st.plotly_chart(intervention_figures.ablated_loss_figure(run.loss, _ablated_loss(ref, ids, pairs), run.T,
                                                                 ", ".join(chosen)),
                        key="induction_knockout_loss", config=plotly_config("attnviz-knockout-loss"))


@st.cache_data(max_entries=32, ttl=3600, show_spinner="Knocking the head out…")
def _next_probs(ref: str, token_ids: tuple[int, ...], heads: tuple[tuple[int, int], ...], position: int) -> np.ndarray:
    """Next-token probabilities (vocab,) after ``position`` with ``heads`` knocked out
    (the model as trained, causal)."""
    return models.ablate_next(_model(ref), token_ids, heads, position).softmax(-1).numpy()


def _value_norms(trace) -> np.ndarray:
    """‖f^h(x_j)‖ (heads, n) of the trace's layer, from the LayerNorm'd block input it kept (no forward)."""
    import torch

    att = _model(trace.config.checkpoint).trf_blocks[trace.model.layer].att
    with torch.no_grad():
        return models.value_norms(att, torch.tensor(trace.steps["norm1"])).numpy()  # (1, n, d) -> (h, n)


@st.cache_resource(max_entries=4, ttl=3600, show_spinner="Rolling attention out through the layers…")
def _rollout(ref: str, token_ids: tuple[int, ...]) -> np.ndarray:
    """Rollout (layers, n, n) float32; only each layer's mean over heads enters it, so one layer's maps are held at
    a time."""
    means = [maps.mean(axis=0, keepdims=True) for _, maps in models.iter_layer_maps(_model(ref), list(token_ids))]
    rolled = models.rollout(np.stack(means)).astype(np.float32)  # layers × (1, n, n) -> (layers, n, n)
    rolled.setflags(write=False)  # shared by every session that asks for it
    return rolled


@st.cache_data(max_entries=16, ttl=3600, show_spinner="Reading the prediction after every block…")
def _lens(ref: str, token_ids: tuple[int, ...], position: int):
    return models.logit_lens(_model(ref), token_ids, position)


WHAT_TABS = ("Knock out this head", "‖weight × value‖", "Rollout, logit lens")
AS_TRAINED = "The causal mask is off for the maps above; this runs the model as it was trained, with it."


def heads_section(trace, head: int, window: tuple[int, int, int]) -> None:
    """The Heads page with a model, right below the focused head (inside its fragment, so a new focus or window
    redraws it too): knock out that head, its ‖weight × value‖ map and the rollout on the same ``window`` (row0,
    col0, size), the logit lens.

    All of it sits in an expander that runs only while it is open, and each tab only while it is shown: a layer
    switch or a new text pays for none of it until asked (each is a forward pass of the model, seconds at 1,024
    tokens on a CPU)."""
    if trace.model is None:
        return
    section = st.expander("What this attention does: knock out this head, ‖weight × value‖, rollout, logit lens",
                          key="heads_what", on_change="rerun", icon=":material/science:")
    if not section.open:
        return
    with section, ui_weights.said_if_unreadable():  # each tab reads the model: it may have changed on disk since
        position = 0 if trace.n == 1 else st.slider("At position", 0, trace.n - 1, **page_bind(
            "heads_knockout_position", trace.n - 1, lambda v: isinstance(v, int) and 0 <= v < trace.n))
        st.caption(f"Predicting the token after {trace.tokens[position]!r} (position {position}).")
        knock, weigh, through = st.tabs(WHAT_TABS, key="heads_what_tab", on_change="rerun")
        if knock.open:
            with knock:
                _knock_out(trace, head, position)
        if weigh.open:
            with weigh:
                _weigh(trace, head, window)
        if through.open:
            with through:
                _through_the_layers(trace, position, window)


def _knock_out(trace, head: int, position: int) -> None:
    """Top-5 next tokens with and without the head; the intact top token's log-probability with and without it, and
    the change."""
    from attnviz.tokens import pieces

    ref, ids, layer = trace.config.checkpoint, tuple(trace.token_ids), trace.model.layer
    if trace.hides_future:  # the run's own top-5 is the model's, as trained (a sliding-window layer always masks)
        intact_ids, intact_probs = trace.model.top_ids[position], trace.model.top_probs[position]  # (5,) each
    else:  # the run was unmasked: the knock-out compares with the model as trained
        st.caption(AS_TRAINED)
        intact = _next_probs(ref, ids, (), position)  # (vocab,)
        intact_ids = np.argsort(-intact)[:5]
        intact_probs = intact[intact_ids]
    without = _next_probs(ref, ids, ((layer, head),), position)  # (vocab,)
    without_ids = np.argsort(-without)[:5]
    labels = [[t.piece for t in pieces([int(i) for i in row])] for row in (intact_ids, without_ids)]
    table = intervention_figures.top_tokens_table(labels, np.stack([intact_probs, without[without_ids]]),
                                                  ["intact", f"without L{layer}H{head}"])
    st.dataframe(table, key="heads_knockout_table")
    top = int(intact_ids[0])
    piece = pieces([top])[0].piece
    intact_lp = float(np.log(float(intact_probs[0])))
    without_lp = float(np.log(max(float(without[top]), 1e-45)))
    row = st.container(horizontal=True)
    row.metric(f"log-probability of {piece!r}, intact (its top token)", f"{intact_lp:.3f}",
               help="The natural log of its probability in the table's intact row.")
    row.metric(f"log-probability of {piece!r} without L{layer}H{head}", f"{without_lp:.3f}",
               delta=f"{without_lp - intact_lp:+.3f} from intact",
               help="With the head knocked out; under it, knocked out minus intact: negative = the head helped "
                    "predict it.")


def _weigh(trace, head: int, window: tuple[int, int, int]) -> None:
    """The focused head's weights beside ‖weight × value‖, on the focused view's window."""
    st.markdown(VALUE_WEIGHTED)
    norms = _value_norms(trace)[head]  # (n,)
    weights = trace.attention_map("weights", head)  # (n, n)
    row0, col0, size = window
    cells = np.s_[row0:row0 + size, col0:col0 + size]
    vw = (weights * norms[None, :])[cells]  # α_ij · ‖f(x_j)‖ = ‖α_ij f(x_j)‖ -> (size, size)
    if size < trace.n:
        st.caption(f"The focused view's window: query rows {row0}…{row0 + size - 1}, "
                   f"key columns {col0}…{col0 + size - 1}.")
    row = st.container(horizontal=True, gap="medium")  # side by side where two fit, else one above the other
    left, right = (row.container(width=figures.PAIR_MAP_PX) for _ in range(2))
    hidden = trace.hidden_cells(head)  # (n, n) or None: the layer's sliding window, greyed as on the focused map
    hidden = None if hidden is None else hidden[cells]  # (size, size)
    common = {"causal": trace.hides_future, "hidden": hidden, "row_offset": row0, "col_offset": col0,
              "width": figures.PAIR_MAP_PX, "validate": False}
    left.plotly_chart(figures.attention_heatmap(weights[cells], trace.tokens, "weights", title=f"head {head}: weights",
                                                **common),
                      config=plotly_config("attnviz-weights"), key="heads_vw_weights")
    right.plotly_chart(figures.attention_heatmap(vw, trace.tokens, "weights", title=f"head {head}: ‖weight × value‖",
                                                 # masked as the weights are; in two lines, a colour bar title
                                                 # as narrow as "weights", so the two maps are drawn the same size
                                                 label="‖weight ×<br>value‖",
                                                 zrange=(0.0, float(np.nanmax(vw)) or 1.0), **common),
                       config=plotly_config("attnviz-value-weighted"), key="heads_vw_map")


def _through_the_layers(trace, position: int, window: tuple[int, int, int]) -> None:
    """Attention rollout up to this layer (the focused view's window) and the logit lens at the position."""
    from attnviz.tokens import pieces

    ref, ids, layer = trace.config.checkpoint, tuple(trace.token_ids), trace.model.layer
    if not trace.hides_future:
        st.caption(AS_TRAINED)
    st.markdown(f"**Attention rollout up to layer {layer}** (Abnar & Zuidema 2020): each layer's mean map "
                "mixed half-and-half with the identity (the residual), multiplied through the layers — how much "
                "each input token can reach each position so far.")
    row0, col0, size = window
    rolled = _rollout(ref, ids)[layer][row0:row0 + size, col0:col0 + size]
    st.container(width=figures.PAIR_MAP_PX).plotly_chart(
        figures.attention_heatmap(rolled, trace.tokens, "weights", title=f"rollout through layers 0…{layer}",
                                  row_offset=row0, col_offset=col0, width=figures.PAIR_MAP_PX, validate=False),
        config=plotly_config("attnviz-rollout"), key="heads_rollout")
    st.markdown(f"**Logit lens at position {position}**: the model's own final norm and output head read after "
                "every block — where in the depth the prediction forms.")
    lens_ids, lens_probs = _lens(ref, ids, position)
    labels = [[t.piece for t in pieces([int(i) for i in row])] for row in lens_ids]
    st.dataframe(intervention_figures.top_tokens_table(labels, lens_probs,
                                                       [f"after block {b}" for b in range(len(lens_ids))]),
                 key="heads_logit_lens")
