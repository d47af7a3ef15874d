"""The induction lab's glue: T and seed, the cached lab run for the sidebar's weights, and its views
(the score grid, one head's map with the stripe, the per-position loss or why there is none; heads that see the
future are scored but not named, with the Heads page's reason; a sliding window narrower than the stripe, the
sidebar's or a checkpoint layer's own, says why its heads score 0).

T, the seed, the map's layer and its head follow the URL (``T``, ``token_seed``, ``map_layer``, ``head``): read on a
session's first visit of the page, written with the value each run draws.  T and the seed are number boxes
(:mod:`attnviz.ui.number_box`): a T longer than the model's context allows, or no number, typed or in the link, stays
in its box, and the warning under it says the lab uses the default; a layer the model lacks, a head it lacks, is
refused with a notice above its widget, which shows its default.  The page draws the Share link after them and the
knock-outs (its ``PageEntry.draws_link``).  The map opens on the best induction head, in its layer: the lab's own
Layer and Head widgets follow it while left at their defaults (the sidebar's *Layer* is the other pages')."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import streamlit as st

from attnviz.config import AttentionConfig
from attnviz.head_types import LABEL_THRESHOLD
from attnviz.labs import induction
from attnviz.ui.frame import Context, plotly_config
from attnviz.ui.head_labels import future_caption
from attnviz.ui.number_box import link_text, number_box
from attnviz.ui.sidebar import module_message
from attnviz.ui.state import forget_page_params, page_bind, page_widgets_from_url, url_notices
from attnviz.urlstate import HEAD, MAP_LAYER, REPEAT, TOKEN_SEED, parse_head, parse_number
from attnviz.views import head_figures
from attnviz.words import markdown_escape

CHECKPOINT_CAUSAL = ("The lab runs the model with its causal mask, as it was trained: the sidebar's *Causal mask* "
                     "(off) applies to the other pages.")
MAX_SEED = 2**31 - 1  # the seed input's bound
SELECT_PX = 180  # the layer and head boxes' width: a label whole ("layer 11 · 0.74"), the two side by side at 800 px
NO_LOSS = ("The book's classes are one attention layer on seeded random embeddings, with no language-model "
           "head: they predict no tokens, so there is no loss to show. Pick a trained model under *Weights* "
           "in the sidebar (the bundled model, or one trained on the Train page) to see the loss drop on the "
           "second copy.")


@st.cache_resource(max_entries=8, ttl=3600, show_spinner=False)
def _model_run(ref: str, T: int, seed: int, layer: int | None) -> induction.InductionRun:
    """The lab run of the checkpoint ``ref``, with the maps of ``layer`` (None: the best head's layer); a
    CheckpointError in words with its listed name (``ui.weights.load``)."""
    from attnviz.ui import weights

    return induction.run_model(weights.load(ref), T, seed, layer=layer)


@st.cache_resource(max_entries=8, ttl=3600, show_spinner=False)
def _book_run(config: AttentionConfig, T: int, seed: int) -> induction.InductionRun:
    from attnviz import pipeline

    token_ids = induction.lab_tokens(T, seed)
    trace = pipeline.run_ids(token_ids.tolist(), dataclasses.replace(config, train=False))  # eval: no dropout
    return induction.run_maps(trace.steps["weights"][0], token_ids, T, seed, causal=trace.hides_future)


def _always_masks(ref: str) -> bool:
    """Whether the checkpoint ``ref`` hides the future whatever the sidebar's *Causal mask* says (the book's
    sliding-window class, on every layer): then the switch applies to no page of it."""
    from attnviz.producers.model_layer import always_causal
    from attnviz.ui import weights

    return always_causal(weights.load(ref), 0)


def window_caption(window: int, T: int) -> str:
    """Why a sliding window scores 0 when the stripe lies outside it (T > W)."""
    return (f"The sliding window (W = {window}) shows a query only the keys up to {window - 1} behind it: the stripe, "
            f"T − 1 = {T - 1} back, is outside it, so every head scores 0 by construction. "
            + (f"Set T to {window} or less, or widen the window in the sidebar, to test these heads."
               if window >= induction.MIN_T else f"Widen the window in the sidebar to {induction.MIN_T} or more to "
               "test these heads."))


def _layer_windows(ref: str) -> tuple[int | None, ...]:
    """Each layer's own sliding window of the checkpoint ``ref`` (None: a full-attention layer;
    :func:`attnviz.models.layer_windows`)."""
    from attnviz import models
    from attnviz.ui import weights

    try:
        model = weights.load(ref)
    except ValueError:  # changed on disk since the lab ran it: the knock-outs below say so with its name
        return ()
    return models.layer_windows(model)


def layers_window_caption(windows: dict[int, int], T: int) -> str:
    """Why the layers of a checkpoint whose own sliding window is narrower than the stripe (``windows``: layer → W,
    each W < T) score 0 on every head: the checkpoint's windows are its own, so only a shorter T tests them."""
    layers = sorted(windows)
    one = len(layers) == 1
    which = (f"Layer {layers[0]}" if one
             else "Layers " + ", ".join(str(layer) for layer in layers[:-1]) + f" and {layers[-1]}")
    sizes = sorted(set(windows.values()))
    narrowest = sizes[0]
    return (f"{which} of this checkpoint {'runs' if one else 'run'} a sliding window "
            f"({', '.join(f'W = {size}' for size in sizes)}): a query sees only the keys up to W − 1 behind it, and "
            f"the stripe, T − 1 = {T - 1} back, is outside it, so {'its' if one else 'their'} heads score 0 by "
            "construction. "
            + (f"Set T to {narrowest} or less to test {'them' if len(sizes) == 1 else 'them all'}."
               if narrowest >= induction.MIN_T else
               f"A window of {narrowest} shows a query only itself: even the lab's shortest stripe (T = "
               f"{induction.MIN_T}, one key back) is outside it, so the lab cannot test those heads."))


def max_repeat(page_run: Context) -> int:
    """The longest T whose sequence ([BOS] + x + x) fits the model's context."""
    return min(induction.MAX_T, (page_run.config.context_length - 1) // 2)


def from_url(page_run: Context, longest: int) -> None:
    """A session's first visit of the lab: T, the seed and the head take the link's ``T`` and ``token_seed`` (any text
    their boxes hold: :func:`attnviz.ui.number_box.link_text`) and ``head`` (a head of the map's layer; its layer:
    :func:`layer_from_url`)."""
    page_widgets_from_url("induction", {
        "induction_T": (REPEAT, functools.partial(link_text, bounds=(induction.MIN_T, longest),
                                                  what="the repeat lengths the lab offers for this model"),
                        f"using T = {min(induction.DEFAULT_T, longest)}"),
        "induction_seed": (TOKEN_SEED, functools.partial(link_text, bounds=(0, MAX_SEED), what="seeds"),
                           f"using seed {induction.DEFAULT_SEED}"),
        "induction_head": (HEAD, functools.partial(parse_head, num_heads=page_run.config.heads),
                           "showing the best head"),
    })


def lab_run(page_run: Context) -> induction.InductionRun | None:
    """T and seed inputs (the link's on a session's first visit), then the lab run for the sidebar's weights
    (cached; a checkpoint's with the maps of its best head's layer)."""
    longest = max_repeat(page_run)
    if longest < induction.MIN_T:  # a model with a context of a few tokens: not even T = 2 fits
        st.info(f"This model's context is {page_run.config.context_length} tokens: the lab's shortest sequence, "
                f"[BOS] + x + x with T = {induction.MIN_T}, needs {2 * induction.MIN_T + 1}. Pick a model with a "
                "longer context under *Weights*.", icon=":material/info:")
        return None
    from_url(page_run, longest)
    url_notices("induction_T", "induction_seed")
    t_col, seed_col = st.columns(2, vertical_alignment="top")  # a box's warning under it, the other box level
    default_t = min(induction.DEFAULT_T, longest)
    T = number_box(t_col, "Repeat length T", "induction_T", default_t, (induction.MIN_T, longest),
                   f"the lab uses T = {default_t}", url=REPEAT,
                   help=f"{induction.MIN_T} … {longest}. x is T random tokens (ids 1,000–30,000); the sequence is "
                        f"[BOS] + x + x, 2T + 1 tokens (at most {longest} here: the model's context).")
    seed = number_box(seed_col, "Seed of the random tokens", "induction_seed", induction.DEFAULT_SEED, (0, MAX_SEED),
                      f"the lab uses seed {induction.DEFAULT_SEED}", url=TOKEN_SEED,
                      help=f"0 … {MAX_SEED:,}. Decides the random tokens x: the same seed gives the same sequence.")
    config = page_run.config
    try:
        with st.spinner("Running the model on the repeated tokens…"):
            if config.checkpoint is not None:
                if not config.causal and not _always_masks(config.checkpoint):
                    st.caption(CHECKPOINT_CAUSAL)
                return _model_run(config.checkpoint, int(T), int(seed), None)
            if config.dropout_runs:
                st.caption("The lab runs the attention in eval mode: dropout is off here.")
            return _book_run(config, int(T), int(seed))
    except ValueError as exc:  # a checkpoint that cannot be loaded, a setting out of range, a user's module: say so
        st.warning(markdown_escape(module_message(str(exc))), icon=":material/back_hand:")  # no folder of the server's
        return None


def layer_from_url(layers: int) -> None:
    """A session's first visit of the lab with a model of several layers: the map's layer takes the link's
    ``map_layer``."""
    page_widgets_from_url("induction_map", {
        "induction_layer": (MAP_LAYER, functools.partial(parse_number, low=0, high=layers - 1,
                                                         what=f"the layers of this {layers}-layer model"),
                            "showing the best head's layer"),
    })


def show(run: induction.InductionRun, page_run: Context) -> None:
    """Scores of every head, the chosen head's map with the stripe, the per-position loss."""
    from attnviz.tokens import pieces

    best_layer, best_head = run.best
    best = run.scores[best_layer, best_head]
    layered = run.scores.shape[0] > 1 or page_run.config.checkpoint is not None
    where = head_figures.head_name(best_layer, best_head) if layered else f"head {best_head}"
    score_col, loss_col = st.columns(2)
    score_col.metric("Best induction score", f"{best:.2f}", help="Mean of A[i, i−T+1] over the second copy "
                     f"({where}). {LABEL_THRESHOLD} or more, in a head that cannot see the future: the Heads page "
                     "names it an induction head.")
    if run.named(best_layer, best_head) and run.T == induction.MIN_T:  # the stripe A[i, i−1]: the token before
        verdict = ("an induction head or a previous-token head: at T = 2 the stripe is the token before, so the "
                   "score cannot tell them apart (try T ≥ 3)")
    elif run.named(best_layer, best_head):
        verdict = "an induction head"
    elif run.sees_future:
        verdict = "not named: this attention sees the future"
    else:
        verdict = "no induction head here"
    score_col.caption(f"{where}: {verdict}")
    if run.halves is not None:
        first, second = run.halves
        change = round(second - first, 2)
        # one sign: the arrow (and its colour: a drop is good) says the direction, the text the size
        loss_col.metric("Loss on the second copy", f"{second:.2f} nats", delta=f"{abs(change):.2f} nats",
                        delta_description="vs before", delta_arrow="down" if change < 0 else "up" if change else "off",
                        delta_color="green" if change < 0 else "red" if change else "gray",
                        help="Mean next-token loss where the repeat can be copied, against the mean before it.")
    st.plotly_chart(head_figures.score_grid({"induction": run.scores, "previous_token": run.previous},
                                            title=f"every head on [BOS] + x + x, T = {run.T}"),
                    config=plotly_config("attnviz-induction-scores"), key="induction_scores")
    if run.sees_future:
        st.info(future_caption(page_run.config, run.future), icon=":material/info:")
    window = page_run.config.window if page_run.config.checkpoint is None else None
    if window is not None and window < run.T:
        st.info(window_caption(window, run.T), icon=":material/info:")
    elif page_run.config.checkpoint is not None:  # a checkpoint's layers each have their own window, or none
        narrow = {layer: size for layer, size in enumerate(_layer_windows(page_run.config.checkpoint))
                  if size is not None and size < run.T}
        if narrow:
            st.info(layers_window_caption(narrow, run.T), icon=":material/info:")

    layers, heads = run.scores.shape
    if layers > 1:
        layer_from_url(layers)
        st.caption(f"The map below opens on the best head, {where}; pick any layer and head here (the sidebar's "
                   "*Layer* is the other pages').")
    url_notices("induction_layer", "induction_head")
    row = st.container(horizontal=True)  # the two boxes, each wide enough for its label ("layer 11 · 0.74")
    layer = run.layer
    if layers > 1:
        best_in = tuple(f"layer {i} · {float(np.nanmax(row)):.2f}" for i, row in enumerate(run.scores))  # (layers,)
        layer = row.selectbox(  # format_func keeps no run; the box reads this T's scores (page_bind's labels)
            "Layer", list(range(layers)), format_func=best_in.__getitem__, width=SELECT_PX,
            help="The layer of the map below, with its best induction score: at first the best head's.",
            **page_bind("induction_layer", best_layer, lambda v: isinstance(v, int) and 0 <= v < layers,
                        url=MAP_LAYER, labels=best_in))
    else:
        forget_page_params(MAP_LAYER)  # one layer: nothing to pick, nothing to link
    if layer == run.layer:
        shown = run
    else:
        try:
            with st.spinner(f"Running the model for layer {layer}'s maps…"):
                shown = _model_run(page_run.config.checkpoint, run.T, run.seed, layer)
        except ValueError as exc:  # the checkpoint changed on disk since the lab ran it: said with its name
            st.warning(markdown_escape(module_message(str(exc))), icon=":material/back_hand:")
            return
    default = best_head if layer == best_layer else int(run.scores[layer].argmax())
    scores = tuple(f"head {h} · {float(score):.2f}" for h, score in enumerate(run.scores[layer]))  # not the run
    head = row.selectbox("Head", list(range(heads)), format_func=scores.__getitem__, width=SELECT_PX,
                         **page_bind("induction_head", default, lambda h: isinstance(h, int) and 0 <= h < heads,
                                     url=HEAD, labels=scores))
    tokens = [t.piece for t in pieces(run.token_ids.tolist())]
    name = head_figures.head_name(layer, head) if layered else f"head {head}"
    if page_run.config.checkpoint is None:
        window = page_run.config.window
    else:  # this layer's own window, or none (a full-attention layer)
        window = dict(enumerate(_layer_windows(page_run.config.checkpoint))).get(layer)
    st.container(width=head_figures.STRIPE_MAP_PX).plotly_chart(  # a column the width its square cells are made for
        head_figures.stripe_heatmap(shown.maps[head], tokens, run.T, score=float(run.scores[layer, head]),
                                    causal=shown.causal,  # the mask off: the later keys' weight, not grey
                                    window=window,  # the keys a sliding window hides: grey, as on the Heads page
                                    title=f"{name}: weights on [BOS] + x + x (T = {run.T}), "
                                          f"stripe A[i, i−{run.T - 1}]"),
        config=plotly_config(f"attnviz-induction-{name}"), key="induction_map")
    st.subheader("Loss at each position")
    if run.loss is None:
        st.info(NO_LOSS, icon=":material/info:")
    else:
        st.plotly_chart(head_figures.position_loss(run.loss, run.T), config=plotly_config("attnviz-induction-loss"),
                        key="induction_loss")
        st.caption("Before the repeat the next token is random: the loss is high (ln 50,257 ≈ 10.8 for a uniform "
                   "guess). On the second copy a model with an induction head copies what followed the earlier "
                   "occurrence, and the loss drops.")
