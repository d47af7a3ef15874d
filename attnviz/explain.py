"""Explains one attention weight by decomposing it: q_i and k_j, their per-dimension products q_i[d]·k_j[d] (whose
sum is the score), the divisor that makes the scaled score, and the softmax over row i that makes the weight; and
sums the attention of several selected queries or keys.

Reads only a :class:`~attnviz.trace.Trace`, so it works for every producer that records queries and keys: the
book's classes, the bonus variants, a GPT model's layer and a user's module, each head's q and k as
:meth:`~attnviz.trace.Trace.head_vectors` splits them (grouped K/V heads, rotated q and k).  The divisor is
measured from the run's own ``scores`` and ``scaled`` stages, so a module that scales differently (or not at all)
is explained as it ran, and named against √d_head: the length of q and k, or, for a user module whose q·k runs over
more than a head's width (MLA with W_UK absorbed: its latent; scores that add two products), the width its scale is
judged by, which the Trace keeps (``module_run.score_width``: the checker's own :func:`attnviz.tracing.score_width`);
a divisor the module's config declares (Gemma's ``query_pre_attn_scalar``, DeepSeek's YaRN mscale²: the Trace's
``module_run.declared_scales``) is named as the config's (:func:`declared_divisor`, which the scaled map's title reads
too), and only one nobody declared as the run's own.
Which keys are hidden is read from the recorded ``masked`` stage (−∞, or pushed down from ``scaled`` by at least 10³
or n, whichever is more, further than a bias such as ALiBi's reaches: :func:`attnviz.trace.hidden_by_mask`, the
tracer's own definition), so a causal mask, a sliding window or a padding mask each get their own reason; where a
module changes its scaled scores before the softmax (a soft-cap, a bias, a mask filled with 0 instead of −∞, which
hides nothing), the weight is explained from the numbers the softmax took (``masked_score``, ``row_masked``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from attnviz.config import InputError
from attnviz.trace import ScoreWidth, Trace, hidden_by_mask, index_in, require_trace
from attnviz.words import amount, plural

SUM_STAGES = ("weights", "dropped", "scores", "scaled")  # maps whose sums mean something (masked holds −∞)


class ExplainError(InputError):
    """A head, position or selection the Trace does not have, or a run that recorded no queries and keys."""


@dataclass(frozen=True, eq=False)  # holds arrays
class WeightExplanation:
    """Why query ``query`` gives key ``key`` its weight in head ``head``: every number adds up to the next."""

    head: int
    query: int
    key: int
    query_token: str  # display pieces (user text: escape before drawing)
    key_token: str
    query_vector: np.ndarray  # (head_dim,) q_i of this head (float32)
    key_vector: np.ndarray  # (head_dim,) k_j of this head
    products: np.ndarray  # (head_dim,) q_i[d]·k_j[d]
    score: float  # products.sum() == scores[0, head, query, key] (float tolerance)
    divisor: float  # scores ÷ divisor = scaled: √d_head for the book's classes, 1 where nothing scales
    # the divisor in words ("÷ √d_head = √8 = 2.828", "no scaling (÷ 1): …", "÷ 16: the scale the config declares, …",
    # "÷ 8: this run's own …")
    scaling: str
    scaled: float  # trace.steps["scaled"][0, head, query, key]
    # trace.steps["masked"][0, head, query, key]: what the softmax took for this cell — the scaled score, −∞ (or a
    # large negative) where the mask hides the key, or what a module changed it to (a soft-cap, a bias, a mask filled
    # with 0)
    masked_score: float
    weight: float  # trace.steps["weights"][0, head, query, key]; 0 where the mask hides the key
    dropped: float  # the weight after dropout (== weight when no dropout ran)
    masked: bool  # the mask hides this key from this query
    reason: str | None  # why a masked cell's weight is 0, in plain English; None when not masked
    row_scaled: np.ndarray  # (n,) scaled scores of row ``query`` over every key
    row_masked: np.ndarray  # (n,) the softmax's input: row_scaled with −∞ (or a large negative) where hidden
    row_weights: np.ndarray  # (n,) softmax(row_masked): the row of weights, sums to 1
    row_hidden: np.ndarray  # (n,) bool: the keys the mask hides from this query
    stand_in: str | None  # what stands in for q and k where the run has no query/key projections
    notes: tuple[str, ...] = ()  # anything else the numbers need (dropout ran, Q/K transformed after recording)
    # the d_head the scale is judged by: head_dim, but for a user module whose q·k runs over more than a head's width
    # (MLA with W_UK absorbed, over its latent; two products added) the per-head width it scales by; None: not known
    d_head: int | None = None

    @property
    def head_dim(self) -> int:
        """The length of q_i and k_j (and of their products)."""
        return int(self.products.shape[0])

    @property
    def input_changed(self) -> bool:
        """Whether the softmax took another number than the scaled score for this row's visible keys (a soft-cap, a
        bias, a mask filled with 0, not −∞): the explanation then adds up from ``row_masked``, what the softmax took."""
        return _changed_before_softmax(self.row_scaled, self.row_masked, self.row_hidden)

    def largest(self, count: int = 5) -> np.ndarray:
        """Indices of the ``count`` products of largest magnitude, largest first."""
        order = np.argsort(-np.abs(self.products), kind="stable")
        return order[: max(0, int(count))]


@dataclass(frozen=True, eq=False)  # holds arrays
class AttentionSums:
    """The attention of several selected queries (per key) and to several selected keys (per query), one head."""

    head: int
    stage: str
    queries: tuple[int, ...]  # the selected query positions (sorted, unique; empty when none were selected)
    keys: tuple[int, ...]  # the selected key positions
    per_key_sum: np.ndarray | None  # (n,) Σ over the selected queries of map[q, j], for every key j
    per_key_mean: np.ndarray | None  # (n,) per_key_sum ÷ the number of selected queries
    per_query_total: np.ndarray | None  # (n,) Σ over the selected keys of map[i, k]: what each query gives them


# -------------------------------------------------------------------- one weight

def explain_weight(trace: Trace, head: int, query: int, key: int) -> WeightExplanation:
    """Decompose ``trace``'s weight at (``head``, ``query``, ``key``); raises ExplainError (an InputError) for a
    head or position the Trace does not have, or a run that recorded no queries and keys."""
    require_trace(trace, error=ExplainError)
    heads, n = trace.num_heads, trace.steps["weights"].shape[-1]
    head = _index(head, heads, "head")
    query = _index(query, trace.steps["weights"].shape[-2], "query")
    key = _index(key, n, "key")
    missing = [stage for stage in ("queries", "keys", "scores", "scaled", "masked") if stage not in trace.steps]
    if missing:
        raise ExplainError(f"This run recorded no {' or '.join(missing)}: its scores are not a Q·Kᵀ attnviz could "
                           "find, so this weight cannot be split into per-dimension products.")
    query_vector, key_vector = _head_vectors(trace, head, query, key)
    products = query_vector * key_vector  # (hd,) * (hd,) -> (hd,)
    score = float(products.sum())

    scores_row = trace.steps["scores"][0, head, query]  # (n,)
    row_scaled = trace.steps["scaled"][0, head, query]  # (n,)
    row_masked = trace.steps["masked"][0, head, query]  # (n,)
    weights_row = trace.steps["weights"][0, head, query]  # (n,)
    row_hidden = _hidden(row_masked, row_scaled)  # (n,) bool
    notes = []
    if not np.isfinite(weights_row).all():  # every key hidden: the softmax had nothing to normalise
        notes.append(f"Every key is hidden from query {query}: the softmax has nothing to normalise, so this row's "
                     "weights are shown as 0.")
        weights_row = np.nan_to_num(weights_row, nan=0.0, posinf=0.0, neginf=0.0)
    row_weights = np.array(weights_row, dtype=np.float32)  # (n,) a copy the explanation owns
    masked = bool(row_hidden[key])
    weight = 0.0 if masked else float(row_weights[key])
    dropped = float(np.nan_to_num(trace.steps.get("dropped", trace.steps["weights"])[0, head, query, key]))
    if masked:
        dropped = 0.0
    elif dropped != weight:
        notes.append(f"Dropout ran: this weight, {weight:.4g}, went on to V as {dropped:.4g}.")

    changed = _changed_before_softmax(row_scaled, row_masked, row_hidden)
    fill = _future_fill(row_scaled, row_masked, row_hidden, query) if changed else None
    if fill is not None:  # a mask that sets the later keys to a number, not −∞: they stay visible
        this = (f"the softmax takes {fill:.4g} for this cell, not the scaled {float(row_scaled[key]):.4g}, and gives "
                "it weight" if key > query else "the softmax over this row gives them weight too")
        notes.append(f"The module's mask sets the scores of the keys after query {query} to {fill:.4g}, not −∞: they "
                     f"are not hidden — {this}, so this query sees the future.")
    elif changed and not masked:
        notes.append(f"The module changes its scaled scores before the softmax (a soft-cap such as Gemma 2's "
                     f"cap · tanh(s / cap), or a bias added to them): the softmax takes {float(row_masked[key]):.4g} "
                     f"for this cell, not the scaled {float(row_scaled[key]):.4g}.")

    head_dim = int(products.shape[0])
    width = trace.module_run.score_width if trace.module_run is not None else None
    d_head = head_dim if width is None else width.head_dim
    declared = trace.module_run.declared_scales if trace.module_run is not None else ()
    divisor, scaling = _divisor(scores_row, row_scaled, trace.steps["scores"][0, head], trace.steps["scaled"][0, head],
                                d_head, width, declared)
    recorded = float(scores_row[key])
    if not math.isclose(score, recorded, rel_tol=1e-4, abs_tol=1e-4 * (float(np.abs(products).sum()) + 1e-6)):
        notes.append(f"The recorded q_i and k_j give {score:.6g}, but the run's score is {recorded:.6g}: the module "
                     "changes its queries or keys after the step attnviz records (e.g. rotary positions).")
    return WeightExplanation(
        head=head, query=query, key=key, query_token=_token(trace, query), key_token=_token(trace, key),
        query_vector=_frozen(query_vector), key_vector=_frozen(key_vector), products=_frozen(products),
        score=score, divisor=divisor, scaling=scaling, scaled=float(row_scaled[key]),
        masked_score=float(row_masked[key]), weight=weight, dropped=dropped,
        masked=masked, reason=_mask_reason(query, key, row_hidden, float(row_masked[key])) if masked else None,
        row_scaled=_frozen(row_scaled), row_masked=_frozen(row_masked), row_weights=_frozen(row_weights),
        row_hidden=_frozen(row_hidden), stand_in=_stand_in(trace, query_vector, key_vector, query, key, divisor),
        notes=tuple(notes), d_head=d_head)


def _index(value, size: int, what: str) -> int:
    """``value`` as a head or position in 0 … size − 1, or ExplainError naming the valid range (the words of
    :func:`attnviz.trace.index_in`)."""
    try:
        return index_in(value, size, what, "head" if what == "head" else "position")
    except InputError as error:
        raise ExplainError(str(error)) from None


def _head_vectors(trace: Trace, head: int, query: int, key: int) -> tuple[np.ndarray, np.ndarray]:
    """(q_query, k_key) of ``head``, (head_dim,) float32 each: :meth:`Trace.head_vectors`, the q and k that meet in
    QKᵀ (rotated where the run rotates them); a shape it cannot split is an ExplainError in its words."""
    try:
        vectors = trace.head_vectors(head)
    except InputError as error:
        raise ExplainError(str(error)) from None
    query_vector = vectors.queries[query]  # (n, hd) -> (hd,)
    key_vector = vectors.keys[key]  # (n, hd) -> (hd,)
    return np.asarray(query_vector, dtype=np.float32), np.asarray(key_vector, dtype=np.float32)


def _hidden(row_masked: np.ndarray, row_scaled: np.ndarray, keys: int | None = None) -> np.ndarray:
    """(n,) bool: keys the mask hides, as the tracer tells them (:func:`attnviz.trace.hidden_by_mask`: −∞ in the
    softmax's input, or pushed down from the scaled score by at least 10³ or ``keys``, whichever is more — ``keys``:
    the keys of a row, default the row's length)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(hidden_by_mask(row_masked.astype(np.float64), row_scaled.astype(np.float64), keys),
                          dtype=bool)


def _changed_before_softmax(row_scaled: np.ndarray, row_masked: np.ndarray, row_hidden: np.ndarray) -> bool:
    """Whether the softmax's input differs from the scaled scores in a cell the mask leaves visible: the module
    changed them between the two (a soft-cap, an added bias), beyond float32's rounding."""
    visible = ~row_hidden  # (n,) bool
    scaled, masked = row_scaled[visible].astype(np.float64), row_masked[visible].astype(np.float64)  # (v,) each
    return bool(visible.any()) and not np.allclose(masked, scaled, rtol=1e-4, atol=1e-5)


def _future_fill(row_scaled: np.ndarray, row_masked: np.ndarray, row_hidden: np.ndarray, query: int) -> float | None:
    """The number a mask set the scores of the keys after ``query`` to, where it hid none of them (a
    ``masked_fill(mask, 0.0)``: 0, not −∞) and changed nothing else of the visible row; None for any other change."""
    later = np.arange(row_scaled.shape[0]) > query  # (n,) the keys after the query
    if not later.any() or row_hidden[later].any():
        return None
    with np.errstate(invalid="ignore"):
        moved = ~np.isclose(row_masked.astype(np.float64), row_scaled.astype(np.float64), rtol=1e-4, atol=1e-5)  # (n,)
    values = row_masked[later]  # (later,)
    if moved[~later & ~row_hidden].any() or not (values == values[0]).all():
        return None
    return float(values[0])


def head_scale(trace: Trace, head: int = 0) -> tuple[float | None, int | None]:
    """(what ``head``'s scores are divided by in this run, the d_head it is named against), measured over the head as
    :func:`explain_weight` reads it (:func:`_divisor`): exactly √d_head where it divides by √d_head, exactly 1.0
    where it does not scale, else the measured divisor; None where it cannot be measured (no scores or scaled map
    recorded, or every score 0).  The Heads view's title of the scaled map says it (``views.steps.stage_title``)."""
    if "scores" not in trace.steps or "scaled" not in trace.steps:
        return None, None
    width = trace.module_run.score_width if trace.module_run is not None else None
    d_head = trace.config.head_dim if width is None else width.head_dim
    scores_map, scaled_map = trace.steps["scores"][0, head], trace.steps["scaled"][0, head]  # (n, n) each
    if _ratio(scores_map.ravel(), scaled_map.ravel()) is None:
        return None, d_head
    declared = trace.module_run.declared_scales if trace.module_run is not None else ()
    return _divisor(scores_map.ravel(), scaled_map.ravel(), scores_map, scaled_map, d_head, width, declared)[0], d_head


def _divisor(scores_row, scaled_row, scores_map, scaled_map, d_head: int | None,
             width: ScoreWidth | None = None, declared: tuple[tuple[float, str], ...] = ()) -> tuple[float, str]:
    """(divisor, in words): scores ÷ divisor = scaled, measured on this row (or this head) of the run, named against
    √``d_head`` (None: not known); ``width``: a user module's :class:`ScoreWidth`, whose d_head the words explain
    where it is not the length of q and k (:func:`_why_d_head`); ``declared``: the scales the module's config
    declares (``ModuleRun.declared_scales``), each named as the config's where it is the one measured — "this run's
    own scale" is a divisor nobody declared."""
    measured = _ratio(scores_row, scaled_row)
    if measured is None:
        measured = _ratio(scores_map.ravel(), scaled_map.ravel())
    if measured is None:
        return 1.0, "no scaling can be measured: every score of this head is 0"
    why = _why_d_head(width)
    root = None if d_head is None else math.sqrt(d_head)
    if root is not None and math.isclose(measured, root, rel_tol=1e-3):
        return root, f"÷ √d_head = √{d_head} = {root:.4g}{why}"
    if math.isclose(measured, 1.0, rel_tol=1e-4):
        return 1.0, "no scaling (÷ 1): the scores go to the softmax as they are"
    config = declared_divisor(measured, declared)
    if config is not None:
        books = "" if root is None else f" (the book's is √d_head = √{d_head} = {root:.4g})"
        return config[0], f"÷ {config[0]:.4g}: the scale the config declares, {config[1]}{books}{why}"
    latent = width is not None and width.latent is not None and math.isclose(measured, math.sqrt(width.latent),
                                                                             rel_tol=1e-3)
    named = f"√{width.latent} = {measured:.4g}, the latent's width" if latent else f"{measured:.4g}"
    expected = "" if root is None else f", not √d_head = √{d_head} = {root:.4g}"
    return measured, f"÷ {named}: this run's own scale{expected}{why}"


def declared_divisor(measured: float, declared: Iterable[tuple[float, str]]) -> tuple[float, str] | None:
    """(the divisor, the setting that declares it) of the first of the ``declared`` scales (the config's: (the number
    the scores are multiplied by, its setting), ``ModuleRun.declared_scales``) that a ``measured`` divisor is, within
    0.1 % (a divisor measured from float32 scores); None when it is none of them.  The one reading of "the config's
    scale" for the explanation's words and the scaled map's title."""
    return next(((1 / scale, setting) for scale, setting in declared
                 if math.isclose(measured * scale, 1.0, rel_tol=1e-3)), None)


def _why_d_head(width: ScoreWidth | None) -> str:
    """Why a user module's d_head is not the length of its recorded q and k, in a learner's words: MLA in
    DeepSeek-V3's absorbed form takes q·k over its latent (plus its decoupled rotary dimensions) but scales by the
    per-head width it keeps; scores that add two products are scaled by one product's width.  "" where d_head is
    q's length (the book's classes, a checkpoint's layer, most modules)."""
    if width is None:
        return ""
    length = sum(width.summed_widths) if width.summed_widths else None  # q's length, where the scores add two
    if width.latent is not None:
        rotary = 0 if length is None else length - width.latent  # the dimensions whose product adds to the latent's
        length = length or width.latent
        over = f"{width.latent}-wide latent" + (f" plus the {rotary} rotary dimensions it adds" if rotary else "")
        runs = (f"q and k here are {length} long because, as DeepSeek-V3 computes MLA, W_UK is folded into the "
                f"queries and q·k runs over the module's {over}")
        if width.head_dim is None:
            return (f" ({runs}, not over one head's width, and the module keeps no per-head width attnviz knows, such "
                    "as qk_head_dim or head_dim, so √d_head is not known)")
        return f" (d_head is {width.source}; {runs}, while the scale stays 1/√d_head)"
    if length is not None and width.head_dim != length:  # two products of one width
        return (f" (d_head is the width of each of the two products the score adds, q₁·k₁ + q₂·k₂, {width.head_dim} "
                f"wide each; q and k here are the two parts side by side, {length} long, so that their products "
                "still sum to the score)")
    return ""


def _ratio(scores: np.ndarray, scaled: np.ndarray) -> float | None:
    """scores ÷ scaled at the entry of largest |scaled| (finite, non-zero), or None."""
    usable = np.isfinite(scores) & np.isfinite(scaled) & (scaled != 0)
    if not usable.any():
        return None
    where = np.flatnonzero(usable)
    best = where[np.argmax(np.abs(scaled[where]))]
    return float(scores[best]) / float(scaled[best])


def _mask_reason(query: int, key: int, hidden: np.ndarray, value: float) -> str:
    """Why ``key`` is hidden from ``query``, from the row's hidden keys: a causal mask, a sliding window or other."""
    before = f"({'−∞' if math.isinf(value) else f'{value:.3g}'} before the softmax)"
    visible = np.flatnonzero(~hidden)
    if key > query and hidden[query + 1 :].all():
        return f"key {key} comes after query {query}: the causal mask hides it {before}, so its weight is 0"
    window = visible.size > 0 and np.array_equal(visible, np.arange(visible[0], query + 1))  # keys lo … query
    if key < query and window:
        return (f"key {key} is {amount(query - key, 'token')} before query {query}: the sliding window keeps only "
                f"the {visible.size} most recent {plural(visible.size, 'key')} ({visible[0]} to {query}), so the mask "
                f"hides it {before} and its weight is 0")
    return f"the mask hides key {key} from query {query} {before}, so its weight is 0"


def _stand_in(trace: Trace, query_vector, key_vector, query: int, key: int, divisor: float) -> str | None:
    """What stands in for q and k in a run without query/key projections (the simplified class of 3.3)."""
    inputs = trace.embeddings.get("input")
    if inputs is None or inputs.shape[-1] != query_vector.shape[0] or max(query, key) >= inputs.shape[0]:
        return None
    if not (np.array_equal(inputs[query], query_vector) and np.array_equal(inputs[key], key_vector)):
        return None
    scaling = " and nothing scales its scores (÷ 1)" if divisor == 1.0 else ""
    return (f"This run has no W_query or W_key: the input embeddings themselves stand in for the query and the key "
            f"(q_{query} = x_{query}, k_{key} = x_{key}){scaling}.")


def _token(trace: Trace, position: int) -> str:
    return trace.tokens[position] if position < len(trace.tokens) else str(position)


def _frozen(array) -> np.ndarray:
    array = np.array(array)  # a copy: the explanation does not hold views into a cached Trace
    if array.dtype != bool:
        array = array.astype(np.float32)
    array.setflags(write=False)
    return array


# -------------------------------------------------------------------- several tokens at once

def attention_sums(trace: Trace, head: int, *, queries: Iterable[int] | None = None, keys: Iterable[int] | None = None,
                   stage: str = "weights") -> AttentionSums:
    """The attention of the selected ``queries`` summed (and averaged) per key, and what each query gives the
    selected ``keys`` in total, in ``head``'s ``stage`` map; raises ExplainError for a head, position or stage the
    Trace does not have, or an empty selection, or a ``trace`` that is not a Trace."""
    require_trace(trace, error=ExplainError)
    if stage not in SUM_STAGES or stage not in trace.steps:
        usable = [name for name in SUM_STAGES if name in trace.steps]
        raise ExplainError(f"Cannot sum the {stage!r} map: choose one of {', '.join(usable)}.")
    head = _index(head, trace.num_heads, "head")
    attention_map = trace.steps[stage][0, head]  # (n, n)
    if queries is None and keys is None:
        raise ExplainError("Select at least one query or key token to sum attention over.")
    query_positions = _selection(queries, attention_map.shape[0], "query")
    key_positions = _selection(keys, attention_map.shape[1], "key")
    per_key_sum = per_key_mean = per_query_total = None
    if query_positions:
        rows = attention_map[list(query_positions)].astype(np.float64)  # (q, n)
        per_key_sum = _frozen(rows.sum(axis=0))  # (q, n) -> (n,)
        per_key_mean = _frozen(rows.sum(axis=0) / len(query_positions))  # (n,)
    if key_positions:
        columns = attention_map[:, list(key_positions)].astype(np.float64)  # (n, k)
        per_query_total = _frozen(columns.sum(axis=1))  # (n, k) -> (n,)
    return AttentionSums(head=head, stage=stage, queries=query_positions, keys=key_positions,
                         per_key_sum=per_key_sum, per_key_mean=per_key_mean, per_query_total=per_query_total)


def hidden_among(trace: Trace, head: int, cells: Iterable[tuple[int, int]]) -> np.ndarray:
    """(len(cells),) bool: which of the selected (query, key) cells of ``head`` the mask hides from their query
    (weight 0), as :func:`explain_weight` tells them; all False for a run that recorded no ``masked`` and ``scaled``
    stages."""
    pairs = np.asarray(list(cells), dtype=np.int64).reshape(-1, 2)  # (c, 2)
    if "masked" not in trace.steps or "scaled" not in trace.steps:
        return np.zeros(len(pairs), dtype=bool)
    head = _index(head, trace.num_heads, "head")
    queries, keys = pairs[:, 0], pairs[:, 1]  # (c,), (c,)
    masked = trace.steps["masked"][0, head][queries, keys]  # (c,)
    scaled = trace.steps["scaled"][0, head][queries, keys]  # (c,)
    return _hidden(np.asarray(masked), np.asarray(scaled), trace.steps["masked"].shape[-1])


def _selection(positions, size: int, what: str) -> tuple[int, ...]:
    """Sorted unique positions, each checked; ``None`` → (); an empty selection is an ExplainError."""
    if positions is None:
        return ()
    if isinstance(positions, int | np.integer | bool | str | float):
        positions = [positions]
    chosen = tuple(sorted({_index(position, size, what) for position in list(positions)}))
    if not chosen:
        raise ExplainError(f"The {what} selection is empty: select one or more {what} positions from 0 to {size - 1}.")
    return chosen
