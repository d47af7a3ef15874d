"""Head types: score attention maps with the field's own definitions (numpy only, no model).

``score_heads`` gives, for attention weights of shape ``(…, n, n)`` (one head, a layer's heads, or
``(layers, heads, n, n)``), one score per map:

* ``previous_token``, ``duplicate_token``, ``induction`` — TransformerLens' ``head_detector`` score with
  ``error_measure="mul"``, read at the queries that can show the type: ``sum(A′ ⊙ P) / sum(A′[R])``, where A′ is
  the map with column 0 zeroed if ``exclude_bos`` and the diagonal zeroed if ``exclude_current``, P is that head
  type's 0/1 detection pattern (``detection_pattern``; the same patterns as TransformerLens'
  ``get_*_head_detection_pattern``) and R the rows where P has a cell A′ keeps (``rows_that_can_show``):
  previous-token, the queries with a token before them (i ≥ 1); duplicate-token and induction, the queries whose
  token occurred earlier — on a text written twice, the second copy's, as TransformerLens' induction score on
  repeated tokens reads only the second half.  The score is the share of those queries' (remaining) attention that
  lands where that head type would look; a query that has no such cell (the first copy of a repeated text, for
  induction) cannot show the type, and counting its attention would cap a perfect head's score at the share of
  rows that can.  ``every_row=True`` divides by ``sum(A′)`` of the whole map instead: TransformerLens' score
  itself.  No row that can show the type, or A′[R] summing to 0, gives ``nan`` (nothing to measure; TransformerLens:
  0/0), never 0; ``unshowable_types`` names the types no query of a text can show (no token repeats: duplicate-token
  and induction).
* ``first_token`` — the attention-sink mass: the mean of ``A[i, 0]`` over rows ``i ≥ 1`` when the run hid the
  future (``causal``: row 0 then sees only key 0, its 1 there no choice of the head's), over every row when it did
  not (``nan`` if n = 1, where row 0 has no other key either way).  It describes where a head parks unused
  attention; it is shown beside a head's type, never as one.
* ``future`` — the mean weight a query gives to keys after it (``future_mass``): 0 for a head that cannot see
  the future (a causal mask, a sliding window), above 0 for one that can (the mask off, a module that does not
  mask).  The three detectors assume the former: their patterns sit in the lower triangle, so a head that may
  read the token after its query can land on them for another reason (on ``[BOS] + x + x``, the key after an
  earlier copy, ``i − T + 1``, holds the same token as ``i + 1``, which such a head can read directly).

``head_label`` turns scores into a name ("previous-token", "induction", "duplicate-token") or ``None``
(see ``LABEL_THRESHOLD``; never for a head that sees the future, or any head of a run without the mask).
``coinciding_types`` names the types whose cells a text makes previous-token cells too (a b a b: the token after an
earlier copy is the token before), on which a previous-token head scores as well.
``chance_scores`` gives what chance scores on a text: the scores of a head that spreads each query's attention
evenly over the keys it sees (keys 0 … i under the causal mask, i − W + 1 … i under a sliding window of W), and
``chance_types`` the types chance alone names (a window of 2 keys: even spread puts 1/2 on the previous token).
``induction_stripe`` and ``previous_token_stripe`` are the two offset stripes of the induction lab and the
training criteria; ``repeated_random_tokens`` makes the lab's data.

Memory: maps are read in place (views and per-map reductions); no float64 copy of the whole input is
made, so a ``(layers, heads, 1024, 1024)`` float32 array costs at most two extra n × n boolean patterns
(a dense detection pattern and the later-keys mask of ``future``).
"""

from __future__ import annotations

import numpy as np

HEAD_TYPES = ("previous_token", "duplicate_token", "induction")
SCORE_NAMES = (*HEAD_TYPES, "first_token", "future")
LABELS = {"previous_token": "previous-token", "duplicate_token": "duplicate-token", "induction": "induction"}

# A head is named by a type when at least this share of the attention of the queries that can show the type lands
# on its pattern.  0.4 sits far above chance (uniform causal attention over an n-token text scores (H_n - 1)/(n - 1)
# on the previous token: 0.04 at n = 100; on a text of T tokens written twice, the mean of 1/(i + 1) over the second
# copy on induction: 0.09 at T = 7, 0.01 at T = 64) and below a clean head (the bundled model's layer-0
# previous-token heads: benchmarks/README.md, "Numbers moved out of the code"), and it is the cut
# TransformerLens-based tutorials use for their attention-pattern detectors, which also read only the rows that can
# show the type (ARENA 1.2: the mean of the stripe ``diagonal(-1)`` or ``diagonal(-seq_len + 1)``, ``score > 0.4``).
# At most one type wins (the highest).  Chance is measured on the keys a query really sees (``chance_scores``): a
# sliding window of W shows a query at most W keys, so even spread puts 1/W on the previous token — at W = 2 it
# reaches the cut, as it does on a text of 2 or 3 tokens without a window.
LABEL_THRESHOLD = 0.4

# A head "sees the future" when its queries give later keys more than this mean weight.  A mask gives exactly 0
# (softmax of −∞, or of a large negative fill, underflows to 0 in float32); a softmax over unmasked keys never does
# (random or trained heads with the mask off put 0.2–0.95 there), so the cut only absorbs rounding.
FUTURE_TOLERANCE = 1e-6

_SPARSE = 16  # a pattern with at most 1 cell in 16 set is summed over its cells' indices (else: masked)


def _as_array(weights) -> np.ndarray:
    """A numpy view of ``weights`` (numpy array or CPU torch tensor; no copy when already float)."""
    if hasattr(weights, "detach"):  # torch.Tensor, without importing torch here
        weights = weights.detach().cpu().numpy()
    weights = np.asarray(weights)
    if weights.ndim < 2 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"attention weights must have shape (..., n, n); got {weights.shape}")
    if not np.issubdtype(weights.dtype, np.floating):
        weights = weights.astype(np.float32)
    return weights


def _as_tokens(token_ids, n: int) -> np.ndarray:
    if hasattr(token_ids, "detach"):
        token_ids = token_ids.detach().cpu().numpy()
    tokens = np.asarray(token_ids).reshape(-1)
    if tokens.shape[0] != n:
        raise ValueError(f"token_ids has {tokens.shape[0]} tokens but the maps are {n} × {n}")
    return tokens


def detection_pattern(name: str, token_ids) -> np.ndarray:
    """TransformerLens' 0/1 detection pattern ``P`` (n, n) for ``name`` in ``HEAD_TYPES``, as booleans.

    previous: ``P[i, i-1] = 1``; duplicate: ``D[i, j] = 1`` iff ``tok_i == tok_j`` and ``j < i``;
    induction: D shifted one column right (``P[i, j] = D[i, j-1]``), column 0 zeroed, lower triangle kept.
    """
    tokens = np.asarray(token_ids).reshape(-1)
    n = tokens.shape[0]
    if name == "previous_token":
        return np.eye(n, k=-1, dtype=bool)  # (n, n), ones on the first subdiagonal
    duplicate = np.tril(tokens[:, None] == tokens[None, :], k=-1)  # (n, n): same token, strictly earlier
    if name == "duplicate_token":
        return duplicate
    if name == "induction":
        shifted = np.zeros_like(duplicate)  # (n, n)
        shifted[:, 1:] = duplicate[:, :-1]  # roll right by one column; column 0 stays 0
        return np.tril(shifted)  # keep the lower triangle (diagonal included, as TransformerLens)
    raise ValueError(f"unknown head type {name!r}; expected one of {HEAD_TYPES}")


def pattern_cells(name: str, token_ids) -> tuple[np.ndarray, np.ndarray] | None:
    """The set cells ``(rows, cols)`` of ``detection_pattern(name, token_ids)``, found without building the (n, n)
    pattern, or ``None`` when more than 1 cell in ``_SPARSE`` is set (a text of few distinct tokens: use the pattern).

    previous: ``(i, i − 1)``; duplicate: ``(i, j)`` for each earlier ``j`` with the same token; induction: the
    duplicate cells moved one column right, ``(i, j + 1)`` (``j < i``, so they stay in the lower triangle and off
    column 0)."""
    tokens = np.asarray(token_ids).reshape(-1)
    n = tokens.shape[0]
    if name == "previous_token":
        return np.arange(1, n), np.arange(n - 1)
    if name not in HEAD_TYPES:
        raise ValueError(f"unknown head type {name!r}; expected one of {HEAD_TYPES}")
    return _cells_of(name, _duplicate_cells(tokens))


def _cells_of(name: str, duplicate: tuple[np.ndarray, np.ndarray] | None):
    """``name``'s cells from the duplicate-token cells (None stays None): induction's are one column right."""
    if duplicate is None or name == "duplicate_token":
        return duplicate
    rows, cols = duplicate
    return rows, cols + 1


def _duplicate_cells(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(rows, cols) of every (i, j < i) with the same token, or None when more than 1 cell in ``_SPARSE`` is."""
    n = tokens.shape[0]
    order = np.argsort(tokens, kind="stable")  # positions grouped by token, in text order within a group
    bounds = np.flatnonzero(np.diff(tokens[order])) + 1  # where each group after the first starts
    starts, counts = np.r_[0, bounds], np.diff(np.r_[0, bounds, n])  # (groups,), (groups,)
    if int((counts * (counts - 1) // 2).sum()) * _SPARSE > n * n:
        return None
    later, earlier = [], []
    for start, count in zip(starts[counts > 1], counts[counts > 1], strict=True):
        first, second = np.triu_indices(count, k=1)  # every pair of the group's positions, first < second
        group = order[start : start + count]
        later.append(group[second])
        earlier.append(group[first])
    rows = np.concatenate(later) if later else np.zeros(0, dtype=np.intp)  # (k,)
    cols = np.concatenate(earlier) if earlier else np.zeros(0, dtype=np.intp)  # (k,)
    return rows, cols


def _excluded_row_sums(attn: np.ndarray, exclude_bos: bool, exclude_current: bool) -> np.ndarray:
    """Each row's sum of A′ for one (n, n) map, (n,) float64, without copying it."""
    totals = attn.sum(axis=-1, dtype=np.float64)  # (n,)
    if exclude_bos:
        totals -= attn[:, 0]
    if exclude_current:
        totals -= np.diagonal(attn)
        if exclude_bos:
            totals[0] += float(attn[0, 0])  # A[0, 0] is in column 0 and on the diagonal: removed once
    return totals


def _kept_pattern(name: str, tokens: np.ndarray, duplicate, exclude_bos: bool, exclude_current: bool):
    """``name``'s pattern less the cells A′ zeroes (column 0, the diagonal): ``(rows, cols)`` when sparse, else a
    dense (n, n) boolean mask, and the (n,) rows where it keeps a cell (the queries that can show the type).
    ``duplicate``: ``_duplicate_cells(tokens)``, shared by the duplicate-token and induction patterns."""
    n = tokens.shape[0]
    found = pattern_cells(name, tokens) if name == "previous_token" else _cells_of(name, duplicate)
    shown = np.zeros(n, dtype=bool)  # (n,)
    if found is None:  # a text of few distinct tokens: the (n, n) mask
        pattern = detection_pattern(name, tokens)  # (n, n)
        if exclude_bos:
            pattern[:, 0] = False
        if exclude_current:
            np.fill_diagonal(pattern, False)
        np.any(pattern, axis=1, out=shown)
        return pattern, shown
    rows, cols = found
    keep = np.ones(rows.shape, dtype=bool)
    if exclude_bos:
        keep &= cols != 0
    if exclude_current:
        keep &= rows != cols
    shown[rows[keep]] = True
    return (rows[keep], cols[keep]), shown


def rows_that_can_show(name: str, token_ids, *, exclude_bos: bool = False, exclude_current: bool = False
                       ) -> np.ndarray:
    """(n,) booleans: the queries that can show head type ``name`` on ``token_ids`` — the rows where its detection
    pattern has a cell that the exclusions leave.  previous-token: rows i ≥ 1 (a token before them); duplicate-token
    and induction: the rows whose token occurred earlier (induction's cell is the key after that earlier copy)."""
    if name not in HEAD_TYPES:
        raise ValueError(f"unknown head type {name!r}; expected one of {HEAD_TYPES}")
    tokens = np.asarray(token_ids).reshape(-1)
    duplicate = None if name == "previous_token" else _duplicate_cells(tokens)
    return _kept_pattern(name, tokens, duplicate, exclude_bos, exclude_current)[1]


def unshowable_types(token_ids) -> tuple[str, ...]:
    """The head types (of ``HEAD_TYPES``, in its order) that no query of ``token_ids`` can show, so that no head is
    named by them: duplicate-token and induction on a text where no token repeats; every type on a single token."""
    return tuple(name for name in HEAD_TYPES if not rows_that_can_show(name, token_ids).any())


def coinciding_types(token_ids) -> tuple[str, ...]:
    """The head types (``duplicate_token``, ``induction``, in ``HEAD_TYPES``' order) whose cells on ``token_ids`` are
    previous-token cells at some query, so that a head attending to the token before scores on them too and the text
    cannot tell the two apart: duplicate-token where a token follows itself (``tok[i] == tok[i − 1]``: its earlier
    copy is the token before), induction where a token repeats two apart (``tok[i] == tok[i − 2]``: the token after
    that copy is the token before)."""
    tokens = np.asarray(token_ids).reshape(-1)
    follows_itself = bool(np.any(tokens[1:] == tokens[:-1]))
    two_apart = bool(np.any(tokens[2:] == tokens[:-2]))
    return tuple(name for name, shared in (("duplicate_token", follows_itself), ("induction", two_apart)) if shared)


def score_heads(
    weights, token_ids, *, exclude_bos: bool = False, exclude_current: bool = False, masked: bool = False,
    causal: bool = True, every_row: bool = False,
) -> dict[str, np.ndarray]:
    """Scores of every map in ``weights`` (…, n, n) for the tokens ``token_ids`` (n,): ``{name: (…)}``.

    Keys: ``previous_token``, ``duplicate_token``, ``induction`` (TransformerLens ``mul`` scores, read at the
    queries that can show the type; ``every_row``: over the whole map, TransformerLens' own), ``first_token`` (mean
    of ``A[i, 0]`` over rows ``i ≥ 1``, or over every row when not ``causal``) and ``future`` (``future_mass``); the
    exclusion flags change neither of the last two.  ``causal``: the run kept every query from later keys
    (``Trace.hides_future``, as ``stats.head_statistics``' ``causal``), so row 0 sees only key 0 and
    ``first_token`` leaves it out.  ``masked``: the caller's run hid the future with a mask it knows is there (a
    causal mask, implying ``causal``), so ``future`` is 0 without summing the maps' upper triangles.
    """
    weights = _as_array(weights)
    n = weights.shape[-1]
    tokens = _as_tokens(token_ids, n)
    lead = weights.shape[:-2]
    # a sparse pattern (the previous token's n − 1 cells; a text's repeats) is read at its cells, a dense one
    # (a text of one token repeated) through an (n, n) mask: both without a copy of the map.
    # sum(A′ ⊙ P) = sum(A ⊙ P′) with P′ = P less the entries A′ zeroed (column 0, the diagonal)
    duplicate = _duplicate_cells(tokens)  # the duplicate and induction cells from one grouping of the tokens
    kept = {name: _kept_pattern(name, tokens, duplicate, exclude_bos, exclude_current) for name in HEAD_TYPES}
    scores = {name: np.empty(lead, dtype=np.float64) for name in SCORE_NAMES}
    later = None if masked else _later_keys(n)  # (n, n) bool: key after query
    first_row = 1 if causal or masked else 0  # the rows first_token reads: row 0 of a causal map is always on key 0
    for index in np.ndindex(*lead):
        attn = weights[index]  # (n, n) view
        row_sums = _excluded_row_sums(attn, exclude_bos, exclude_current)  # (n,): sum(A′) of each query
        for name, (found, shown) in kept.items():
            if isinstance(found, tuple):
                hit = attn[found].sum(dtype=np.float64)  # sum(A′ ⊙ P): the pattern's cells, (k,)
            else:
                hit = attn.sum(where=found, dtype=np.float64)  # sum(A′ ⊙ P) without a copy
            total = row_sums.sum() if every_row else row_sums[shown].sum()  # sum(A′), or sum(A′[R])
            scores[name][index] = hit / total if total != 0 else np.nan
        scores["first_token"][index] = attn[first_row:, 0].mean(dtype=np.float64) if n > 1 else np.nan
        # mean over queries of Σ_{j>i} A[i, j]: 0 where the mask hid those keys
        scores["future"][index] = 0.0 if masked else attn.sum(where=later, dtype=np.float64) / n
    return scores


def even_spread(n: int, window: int | None = None) -> np.ndarray:
    """(n, n) float32 map of a head with no preference: query i spreads its weight evenly over the keys it sees,
    keys ``max(0, i − W + 1) … i`` (``window`` W; None: every key up to i, the causal mask)."""
    if window is not None and window < 1:
        raise ValueError(f"a sliding window must see at least 1 key; got W = {window}")
    offsets = np.arange(n)[:, None] - np.arange(n)[None, :]  # (n, n): i − j
    seen = (offsets >= 0) & (offsets < (n if window is None else window))  # (n, n): the keys query i sees
    return seen / seen.sum(axis=-1, keepdims=True, dtype=np.float32)  # (n, n), each row sums to 1


def chance_scores(token_ids, *, window: int | None = None) -> dict[str, float]:
    """What chance scores on ``token_ids``: the ``score_heads`` scores of :func:`even_spread` (each query's weight
    spread evenly over the keys it sees; ``window``: a sliding window's W, None for the causal mask), one float per
    name of ``HEAD_TYPES`` (``nan`` where no query can show the type).  The fewer keys a query sees, the higher:
    previous-token is the mean of ``1 / min(i + 1, W)`` over the queries i ≥ 1 — (H_n − 1)/(n − 1) with the causal
    mask, exactly 1/2 under a window of 2."""
    tokens = np.asarray(token_ids).reshape(-1)
    scores = score_heads(even_spread(tokens.shape[0], window), tokens, masked=True)  # {name: ()}
    return {name: float(scores[name]) for name in HEAD_TYPES}


def chance_types(token_ids, *, window: int | None = None) -> tuple[str, ...]:
    """The head types (of ``HEAD_TYPES``, in its order) that chance alone names on ``token_ids``: those whose
    :func:`chance_scores` reach ``LABEL_THRESHOLD``, so any head that does not prefer a key is named by them (the
    previous-token type under a window of 2, or on a text of 2 or 3 tokens)."""
    chance = chance_scores(token_ids, window=window)
    return tuple(name for name in HEAD_TYPES if np.isfinite(chance[name]) and chance[name] >= LABEL_THRESHOLD)


def _later_keys(n: int) -> np.ndarray:
    """(n, n) booleans, True where the key comes after the query (j > i): the cells a causal mask hides."""
    return np.triu(np.ones((n, n), dtype=bool), k=1)


def future_mass(weights) -> np.ndarray:
    """Mean over queries of the weight on keys after the query, ``Σ_{j>i} A[i, j] / n``, for maps (…, n, n): (…).

    0 where a mask hides the future; above ``FUTURE_TOLERANCE`` where a head can see it (``sees_future``)."""
    weights = _as_array(weights)
    n = weights.shape[-1]
    later = _later_keys(n)
    lead = weights.shape[:-2]
    mass = np.empty(lead, dtype=np.float64)
    for index in np.ndindex(*lead):
        mass[index] = weights[index].sum(where=later, dtype=np.float64) / n  # one (n, n) map, no copy
    return mass


def sees_future(future) -> np.ndarray | bool:
    """Whether a head with this ``future_mass`` (a number or an array) puts weight on later tokens."""
    return np.asarray(future) > FUTURE_TOLERANCE


def head_label(scores: dict, *, causal: bool = True) -> str | None:
    """The head's type for one head's scores (``score_heads`` of one map), or ``None``.

    The type with the highest score among previous-token, induction and duplicate-token, if that score
    is ≥ ``LABEL_THRESHOLD``.  ``first_token`` is never a type: a sink head is "no type" (show its
    first-token mass beside it).  NaN scores never label.

    The detectors assume a head that cannot see the future, so none is named when ``causal`` is False (the
    run's mask was off: in a model, a later layer then reads what earlier layers saw ahead, even where its own
    map has no weight on later keys) or its ``future`` score says it gave later tokens weight (``sees_future``).
    Scores without a ``future`` entry (a training probe's, of a causal model) are taken as causal.
    """
    if not causal or ("future" in scores and sees_future(float(np.asarray(scores["future"])))):
        return None
    candidates = []
    for name in ("previous_token", "induction", "duplicate_token"):
        score = float(np.asarray(scores[name]))
        if np.isfinite(score) and score >= LABEL_THRESHOLD:
            candidates.append((score, name))
    if not candidates:
        return None
    return LABELS[max(candidates, key=lambda pair: pair[0])[1]]  # ties: the earlier name (max keeps the first)


def induction_stripe(weights, T: int) -> np.ndarray:
    """Mean of ``A[i, i-T+1]`` over the repeat, for maps (…, n, n) of a sequence ending in x + x, |x| = T.

    The repeat is the last T positions (rows ``n-T … n-1``): with no prefix (n = 2T) those are the rows
    ``i ≥ T``; a BOS token or random prefix before the first copy shifts them.  An induction head at row
    i looks at the token after the previous occurrence of token i, i.e. key ``i-T+1``.
    """
    weights = _as_array(weights)
    n = weights.shape[-1]
    if not 1 <= T <= n // 2:
        raise ValueError(f"repeat length T={T} must be between 1 and n/2 = {n // 2}")
    stripe = np.diagonal(weights, offset=-(T - 1), axis1=-2, axis2=-1)  # (…, n-T+1) view: A[i, i-T+1]
    return stripe[..., -T:].mean(axis=-1, dtype=np.float64)  # (…): rows n-T … n-1


def previous_token_stripe(weights) -> np.ndarray:
    """Mean of ``A[i, i-1]`` over rows ``i ≥ 1`` for maps (…, n, n), n ≥ 2."""
    weights = _as_array(weights)
    if weights.shape[-1] < 2:
        raise ValueError("the previous-token stripe needs at least 2 tokens")
    stripe = np.diagonal(weights, offset=-1, axis1=-2, axis2=-1)  # (…, n-1) view: A[i, i-1]
    return stripe.mean(axis=-1, dtype=np.float64)  # (…)


BOS_ID = 50256  # GPT-2's <|endoftext|>, used as BOS by TransformerLens


def repeated_random_tokens(T: int, seed: int, *, batch: int | None = None, bos: bool = True,
                           low: int = 1000, high: int = 30000) -> np.ndarray:
    """TransformerLens' induction data: T random ids in [low, high) repeated twice, BOS first if ``bos``.

    Shape (2T + bos,) or (batch, 2T + bos); int64.  The same (T, seed, …) always gives the same tokens.
    """
    if T < 1:
        raise ValueError(f"repeat length T must be ≥ 1; got {T}")
    rng = np.random.default_rng(seed)
    half = rng.integers(low, high, size=(batch or 1, T), dtype=np.int64)  # (b, T)
    parts = [np.full((batch or 1, 1), BOS_ID, dtype=np.int64)] if bos else []
    tokens = np.concatenate([*parts, half, half], axis=1)  # (b, bos + 2T)
    return tokens if batch is not None else tokens[0]

def repeat_halves(loss, T: int) -> tuple[float, float]:
    """Mean per-position loss (n−1,) of a sequence ending in x + x (|x| = T): before the repeat can be
    copied (positions 0 … n−T−1: the prefix, the first copy and the first token of the second, which
    nothing predicts) and on the copyable second copy (positions n−T … n−2 predict tokens n−T+1 … n−1)."""
    loss = np.asarray(loss, dtype=np.float64)
    n = loss.size + 1
    if not 2 <= T <= n // 2:
        raise ValueError(f"repeat length T={T} must be between 2 and n/2 = {n // 2}")
    return float(loss[: n - T].mean()), float(loss[n - T:].mean())
