"""Head types on the Heads page: each head's type where its score passes ``head_types.LABEL_THRESHOLD``
("previous-token 0.93"), the first-token (sink) mass beside it — never a type — and, for a checkpoint, a
layers × heads grid of every score on this text, from the page's every-layer pass (opt-in: it runs every block
once more).  Each score is read at the queries that can show its type (``head_types.rows_that_can_show``); a text
on which none can (no token repeats: no induction or duplicate-token head) says so and what to paste
(``unshowable_note``); a head past the threshold on two types whose cells the text makes the same (a b a b:
``head_types.coinciding_types``) is named with both (``describe``, ``COINCIDING``).  Heads that see the future (the
mask off, a module that does not mask) keep their scores but get no type, and the section says why
(``future_caption``, also the Induction lab's).  A named type is said to be chance (``chance_caption``) on random
weights, and on any weights where attention spread evenly over the keys a query sees already reaches the threshold
(a sliding window of 2: ``head_types.chance_scores``)."""

from __future__ import annotations

import functools

import numpy as np
import streamlit as st

from attnviz import head_types, stats
from attnviz.config import AttentionConfig
from attnviz.trace import Trace
from attnviz.ui.cache import cached_trace
from attnviz.ui.focus import focus_from_row
from attnviz.ui.frame import Context, plotly_config
from attnviz.views import head_figures
from attnviz.words import amount

TYPE_COLUMNS = ("previous_token", "induction", "duplicate_token")
FUTURE_COLUMN = "weight on later tokens"
SCORE_HELP = {
    "first-token mass": f"The {stats.FIRST_TOKEN_MASS} — as in the head statistics. Shown beside the type, never a "
                        "type.",
    FUTURE_COLUMN: "The mean weight a query gives to tokens after it: 0 under a causal mask. A head with any is "
                   "not named a type.",
    **{head_figures.SCORE_TITLES[name]: f"TransformerLens' head-detector score on this text (0 … 1), read at the "
       f"queries that can show this type (blank where none can); a head is typed at ≥ "
       f"{head_types.LABEL_THRESHOLD:g}." for name in TYPE_COLUMNS},
}
NO_REPEATS = "no token repeats: paste the text twice to see induction heads"
FEW_QUERIES = 5  # a type read at fewer queries than this is named with their count ("induction 0.54 (from 2 queries)")


def unshowable_note(token_ids) -> str:
    """Why a type cannot be named on this text, or "" when every type can (no query can show it:
    :func:`query_counts`, as ``head_types.unshowable_types``)."""
    counts = query_counts(token_ids)
    if not counts["previous_token"]:
        return "one token: no query has a token before it to look at"
    return NO_REPEATS if not all(counts.values()) else ""


def reading_caption(token_ids) -> str:
    """How many queries of this text each score reads: the ones that can show its type."""
    counts = query_counts(token_ids)
    previous, repeated = counts["previous_token"], counts["induction"]
    before = f"the {previous:,} queries with a token before them" if previous else "none (one token)"
    earlier = ("none (no token repeats)" if not repeated else "the 1 query whose token came earlier" if repeated == 1
               else f"the {repeated:,} whose token came earlier")
    return (f"On this text each score reads the queries that can show its type: previous-token {before}, "
            f"duplicate-token and induction {earlier}. A query that cannot show a type is left out: in a text "
            "written twice the first copy's queries have no earlier copy to look after, and counting them would hold "
            "an induction head's score down.")


def query_counts(token_ids) -> dict[str, int]:
    """How many queries of this text can show each head type (``head_types.rows_that_can_show``), counted once per
    text (a layer switch asks again for the same tokens)."""
    return dict(_query_counts(tuple(int(token) for token in token_ids)))


@functools.lru_cache(maxsize=16)
def _query_counts(token_ids: tuple[int, ...]) -> tuple[tuple[str, int], ...]:
    return tuple((name, int(head_types.rows_that_can_show(name, token_ids).sum())) for name in head_types.HEAD_TYPES)


def chance_of(token_ids, window: int | None) -> dict[str, float]:
    """``head_types.chance_scores`` of this text under this window, computed once per (text, window)."""
    return dict(_chance_of(tuple(int(token) for token in token_ids), window))


@functools.lru_cache(maxsize=16)
def _chance_of(token_ids: tuple[int, ...], window: int | None) -> tuple[tuple[str, float], ...]:
    return tuple(head_types.chance_scores(token_ids, window=window).items())


def chance_caption(n: int, window: int | None, chance: dict[str, float], named: list[str],
                   random_weights: str | None, window_setting: bool = False) -> str:
    """Why the types ``named`` on this text (``head_types.HEAD_TYPES`` names) may be chance, or "": the keys a query
    really sees (``window``: the run's sliding window; without one, the ``n`` tokens up to it) and what attention
    spread evenly over them scores (``chance``: :func:`chance_of`).  A type chance alone names is chance whatever
    the weights; otherwise a named type is said to be chance only on random weights (``random_weights``: whose,
    "The book's classes have random weights"; None for trained weights).  ``window_setting``: the sidebar's
    Window W sets the window (say to widen it)."""
    windowed = window is not None and window < n
    sees = (f"each query sees at most {amount(window, 'key')} (the sliding window, W = {window:,})" if windowed
            else f"on {n:,} tokens a query has few keys to spread over")
    reached = [name for name in dict.fromkeys(named) if chance.get(name, 0.0) >= head_types.LABEL_THRESHOLD]
    if reached:
        lead = f"{random_weights}, and a" if random_weights else "A"
        types = " or ".join(head_types.LABELS[name] for name in reached)
        even = ", ".join(f"{chance[name]:.2f} on {WHERE[name]}" for name in reached)
        widen = (" Widen **Window W** in the sidebar, and chance falls under the cut." if windowed
                 and window_setting else " A longer text tells a head's habit from chance." if not windowed else "")
        return (f"{lead} {types} type named here is chance whatever the weights: {sees}, so attention spread "
                f"evenly over them already puts {even} — at or above the {head_types.LABEL_THRESHOLD:g} at which a "
                f"head is named.{widen}")
    if random_weights is None:
        return ""
    return (f"{random_weights}, so a type named here is chance: {sees}, and {head_types.LABEL_THRESHOLD:g} on one of "
            "them is easily reached.")


WHERE = {"previous_token": "the token before", "duplicate_token": "earlier copies of the token",
         "induction": "the tokens after earlier copies"}


def named_type(scores: dict, index=(), causal: bool = True) -> str | None:
    """The ``head_types.HEAD_TYPES`` name of the head's type (``head_types.head_label``), or None."""
    label = head_types.head_label({name: np.asarray(values)[index] for name, values in scores.items()}, causal=causal)
    return None if label is None else next(key for key, text in head_types.LABELS.items() if text == label)


def describe(scores: dict, index=(), causal: bool = True, queries: dict[str, int] | None = None,
             coinciding: tuple[str, ...] = ()) -> str:
    """The head's type and score ("previous-token 0.93"), or "—" when no score passes the threshold or the head
    can see the future (``causal`` False: the run's mask was off; see ``head_types.head_label``).  With ``queries``
    (:func:`query_counts`), a type read at fewer than :data:`FEW_QUERIES` queries says how few ("induction 0.54
    (from 2 queries)").  ``coinciding`` (``head_types.coinciding_types`` of the text): the types whose cells the text
    makes previous-token cells too; where the head's type and the previous-token type are such a pair and both pass
    the threshold, the other is named beside it ("induction 0.96 (previous-token 0.83 too)"): the text cannot tell
    them apart (:data:`COINCIDING`)."""
    name = named_type(scores, index, causal)
    if name is None:
        return "—"
    count = None if queries is None else queries.get(name)
    few = f" (from {count} {'query' if count == 1 else 'queries'})" if count is not None and count < FEW_QUERIES else ""
    also = [other for other in TYPE_COLUMNS if other != name and "previous_token" in (name, other)
            and ({name, other} - {"previous_token"}) <= set(coinciding)
            and float(np.asarray(scores[other])[index]) >= head_types.LABEL_THRESHOLD]  # NaN never passes
    too = "".join(f" ({head_types.LABELS[other]} {float(np.asarray(scores[other])[index]):.2f} too)" for other in also)
    return f"{head_types.LABELS[name]} {float(np.asarray(scores[name])[index]):.2f}{few}{too}"


COINCIDING = ("A head named with a second type (\"… too\") scores on both because this text makes their cells the "
              "same: where a token repeats two apart (a b a b) the token after its earlier copy is the token right "
              "before it, and where a token follows itself (the the) its earlier copy is the token before — so a "
              "previous-token head scores as an induction or duplicate-token head, and this text cannot tell which "
              "it is. The Induction lab's random tokens, or a text written twice, can.")


def future_reason(config: AttentionConfig) -> str:
    """Why this run's heads can see the future, in the sidebar's words."""
    if config.module is not None:
        return "your module does not mask the future" if not config.causal else "your module gives later tokens weight"
    if config.checkpoint is not None:
        return "the sidebar's *Causal mask* is off, and the model was trained with it on"
    return "the sidebar's *Causal mask* is off"


def sees_future(trace: Trace, future) -> bool:
    """Whether a run's heads may see the future: what ran did not hide it (``Trace.hides_future``: the mask was off,
    and no sliding-window class masked anyway), or a head gave later tokens weight (``future``: the heads'
    ``head_types.future_mass``; a module that masks only some)."""
    return not trace.hides_future or bool(np.any(head_types.sees_future(future)))


def future_caption(config: AttentionConfig, future) -> str:
    """Why no head is named a type: what the detectors assume, and what a head that sees the future does instead.
    ``future``: the heads' ``head_types.future_mass``."""
    mean = float(np.mean(future))
    weight = f"{mean:.2f}" if mean >= 0.005 else "almost none"
    return ("**No head is named a type here: these heads see the future** "
            f"({future_reason(config)}; a query gives later tokens {weight} of its weight on average). The "
            "detectors assume a head that cannot: they count weight on earlier tokens only. A head that can read "
            "ahead may land there for another reason — in a repeated text the token after an earlier copy "
            "(i−T+1) is the same token as the next one (i+1), so a head that reads the next token lands on the "
            "induction stripe too — and its weight on later tokens is counted nowhere. The scores are still "
            "shown: the same formulas, on this run's weights.")


def label_table(scores: dict, causal: bool = True, queries: dict[str, int] | None = None,
                coinciding: tuple[str, ...] = ()):
    """One row per head: its type (read at few ``queries``: their count; a second type the text cannot tell from it,
    ``coinciding``: :func:`describe`), its first-token mass beside it, then each type's score (and, when the heads
    may see the future, the weight they give later tokens)."""
    import pandas as pd

    heads = np.asarray(scores["first_token"]).shape[0]
    future = np.asarray(scores.get("future", np.zeros(heads)), dtype=float)
    return pd.DataFrame({
        "head": range(heads),
        "type": [describe(scores, (h,), causal, queries, coinciding) for h in range(heads)],
        "first-token mass": np.asarray(scores["first_token"], dtype=float),
        **{head_figures.SCORE_TITLES[name]: np.asarray(scores[name], dtype=float) for name in TYPE_COLUMNS},
        **({FUTURE_COLUMN: future} if not causal or np.any(head_types.sees_future(future)) else {}),
    })


@st.cache_data(max_entries=64, ttl=3600, show_spinner=False)
def _trace_scores(text: str, config: AttentionConfig) -> dict:
    trace = cached_trace(text, config)
    # our mask hid the future: its weight there is 0 without summing; a user's module masks (or not) in its own code.
    # causal: the first-token mass reads the queries the head statistics' does (stats.head_statistics)
    masked = trace.hides_future and trace.config.module is None
    return head_types.score_heads(trace.steps["weights"][0], trace.token_ids, masked=masked,
                                  causal=trace.hides_future)  # {name: (heads,)}


def section(page_run: Context) -> None:
    """The Heads page's "Head types" section."""
    trace, config = page_run.trace, page_run.trace.config
    st.subheader("Head types")
    scores = _trace_scores(*page_run.trace_key)
    where = f" of layer {config.layer}" if config.checkpoint is not None else ""
    future = np.asarray(scores["future"])
    seeing = sees_future(trace, future)
    queries = query_counts(trace.token_ids)
    coinciding = head_types.coinciding_types(trace.token_ids)
    described = [describe(scores, (h,), not seeing, queries, coinciding) for h in range(trace.num_heads)]
    named = [f"head {h}: {text}" for h, text in enumerate(described) if text != "—"]
    st.caption(
        f"A head is named by a type when at least {head_types.LABEL_THRESHOLD:g} of the attention of the queries "
        "that can show that type lands where it looks (TransformerLens' head-detector score, read at those "
        "queries): previous-token = the token before, duplicate-token = an earlier copy of the same token, "
        "induction = the token after an earlier copy. The first-token mass (where a head parks unused attention, "
        "a 'sink') is shown beside it and is never a type. Duplicate-token and induction need repeated tokens: "
        "paste a text twice, or open the Induction lab."
    )
    st.caption(reading_caption(trace.token_ids))
    note = unshowable_note(trace.token_ids)
    none = f"none on this text — {note}." if note else "none on this text."
    whose = ("Your module has random weights" if config.module is not None
             else "The book's classes have random weights" if config.spec.weights is not None
             else "This class has no weights (its queries, keys and values are the inputs)")
    their = "its head" if trace.num_heads == 1 else "their heads"
    learned = ("Choose the bundled model (or train one on the Train page) under *Weights* to see heads that learned "
               "one.")
    if seeing:
        none = "none: these heads see the future (below)."
    elif not named and config.checkpoint is None:
        none += f" {whose}: {their} learned no type. {learned}"
    cannot = f". No induction or duplicate-token head can show on this text — {note}." if note and not seeing else ""
    st.markdown(f"**Heads{where} with a type:** " + ("; ".join(named) + cannot if named else none))
    if any(text.endswith(" too)") for text in described):
        st.caption(COINCIDING)
    if named:  # a type is chance on random weights, likelier the fewer keys a query sees, and on any weights when
        # attention spread evenly over those keys already reaches the threshold (a window of 2)
        named_types = [named_type(scores, (h,), not seeing) for h, text in enumerate(described) if text != "—"]
        chance = chance_caption(trace.n, trace.window, chance_of(trace.token_ids, trace.window), named_types,
                                whose if config.checkpoint is None else None,
                                window_setting="sliding_window_size" in config.spec.settings)
        if chance:
            st.caption(chance + (f" {learned}" if config.checkpoint is None else ""))
    if seeing:
        st.info(future_caption(config, future), icon=":material/info:")
    types = label_table(scores, causal=not seeing, queries=queries, coinciding=coinciding)
    st.dataframe(types, key="heads_types", hide_index=True, selection_mode="single-row",
                 on_select=functools.partial(focus_from_row, "heads_types", list(types["head"])), column_config={
        name: st.column_config.ProgressColumn(name, format="%.2f", min_value=0.0, max_value=1.0, help=SCORE_HELP[name])
        for name in ("first-token mass", *(head_figures.SCORE_TITLES[k] for k in TYPE_COLUMNS), FUTURE_COLUMN)
        if name in types.columns
    })


def every_layer(scores: dict, trace: Trace) -> None:
    """Every layer's head types on ``trace``'s text (``{name: (layers, heads)}``, from the Heads page's every-layer
    pass, :func:`attnviz.ui.checkpoint.layers_overview`, run with the trace's mask, ``Trace.hides_future``): the
    typed heads (and why a type cannot show on this text), and a layers × heads grid per score."""
    layers, heads = scores["first_token"].shape
    seeing = sees_future(trace, scores["future"])
    token_ids = trace.token_ids
    queries = query_counts(token_ids)
    coinciding = head_types.coinciding_types(token_ids)
    typed = [(layer, head, describe(scores, (layer, head), not seeing, queries, coinciding))
             for layer in range(layers) for head in range(heads)]
    typed = [(layer, head, text) for layer, head, text in typed if text != "—"]
    note = "" if seeing else unshowable_note(token_ids)
    none = ("no head is named: they see the future (above)." if seeing
            else f"no head passes the threshold on this text — {note}." if note
            else "no head passes the threshold on this text.")
    cannot = f". No induction or duplicate-token head can show on this text — {note}." if note else ""
    st.markdown(f"**Every layer** ({layers} × {heads} heads, this text): "
                + ("; ".join(f"{head_figures.head_name(layer, head)} {text}" for layer, head, text in typed) + cannot
                   if typed else none))
    both = {layer for layer, _, text in typed if text.endswith(" too)")}
    if both - {trace.config.layer} and trace.config.layer not in both:  # the section above said it for its layer
        st.caption(COINCIDING)
    st.plotly_chart(head_figures.score_grid(scores, names=(*TYPE_COLUMNS, "first_token"),
                                            title="every layer's heads on this text"),
                    config=plotly_config("attnviz-head-types"), key="heads_type_grid")
