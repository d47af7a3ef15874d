"""Per-head statistics of attention weights (pure NumPy)."""

from __future__ import annotations

import functools

import numpy as np

# the rows the first-token mass reads (as head_types' ``first_token``): under the causal mask query 0 sees only
# itself, the first token, so its 1 there is no choice of the head's; with the mask off it weighs every key
FIRST_TOKEN_QUERIES = ("over the queries after the first under the causal mask (query 0 sees only itself there, the "
                   "first token, so its weight on it is always 1, not the head's choice), over every query with the "
                   "mask off")

# the one first-token mass of the Heads page's two tables (the head types' is head_types' ``first_token``)
FIRST_TOKEN_MASS = (f"mean weight on the first token: {FIRST_TOKEN_QUERIES}; an 'attention sink' when large; blank "
                    "with one token")

# name -> what it measures (shown as column help in the app)
STATS = {
    "entropy": "mean entropy of a query's weights (nats): high = spread out, 0 = all on one key",
    "max weight": "mean of each query's largest weight",
    "first-token mass": FIRST_TOKEN_MASS,
    "mean distance": "mean |query − key| distance, weighted by attention",
    "previous-token": "mean weight on the token just before the query, over the queries after the first (query 0 has "
                      "no token before it); blank with one token",
    "diagonal": "mean weight a query gives its own token: over the queries after the first under the causal mask "
                "(query 0 sees only itself there, so its weight on itself is always 1, not the head's choice), over "
                "every query with the mask off; blank with one token",
}


def row_entropy(weights: np.ndarray, dtype=np.float64, out: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Entropy (nats) of each row of attention weights (..., n) -> (...): −Σ p log p with 0 log 0 = 0;
    0 = all weight on one key, ln n = uniform.  attnviz's one entropy (Steps, head statistics, ablation, lab).

    ``dtype``: the precision of the work (the head statistics pass float32 for float32 maps: half the memory
    traffic, and each row's sum of n terms stays within ~1e-6 of float64).  ``out``: (terms, positive) buffers of
    ``weights``' shape, ``dtype`` and bool, to work in (overwritten) instead of allocating two."""
    p = np.asarray(weights, dtype=dtype)
    terms, positive = out if out is not None else (np.empty(p.shape, dtype=dtype), np.empty(p.shape, dtype=bool))
    np.greater(p, 0, out=positive)
    terms.fill(0)
    np.log(p, out=terms, where=positive)  # log p where p > 0, else 0 (0 log 0 = 0)
    terms *= p  # p log p
    return 0.0 - terms.sum(axis=-1).astype(np.float64)  # (..., n) -> (...); 0.0 - …: never −0.0


@functools.lru_cache(maxsize=4)
def _distances(n: int, dtype: type) -> np.ndarray:
    """(n, n) |query − key| (read-only, cached)."""
    positions = np.arange(n)
    distance = np.abs(positions[:, None] - positions[None, :]).astype(dtype)  # (n, n)
    distance.setflags(write=False)
    return distance


def head_statistics(weights: np.ndarray, causal: bool = True) -> dict[str, np.ndarray]:
    """Statistics per head of ``weights`` shaped (heads, n, n) (rows sum to 1): name -> (heads,).  ``causal``: whether
    the run kept every query from later keys (``Trace.hides_future``); the first-token mass and the diagonal then leave
    out query 0, whose weight on the first token, itself, that mask forces to 1 (as head_types' ``first_token``).

    One head at a time, so the temporaries stay (n, n) instead of several float64 copies of all the
    (heads, n, n) maps.  float32 maps (a Trace's) are worked on in float32 (row sums pairwise, means in float64):
    no float64 copy to make, and the statistics stay as exact as their display needs; float64 input stays float64."""
    weights = np.asarray(weights)
    heads, n, _ = weights.shape
    work = np.float32 if weights.dtype == np.float32 else np.float64
    distance = _distances(n, work)
    result = {name: np.zeros(heads) for name in STATS}
    terms = np.empty((n, n), dtype=work)  # one (n, n) buffer for every head: a new one per head costs a page
    positive = np.empty((n, n), dtype=bool)  # fault per 4 kB (the server hands freed memory back: ui.cache)
    for head in range(heads):
        w = np.asarray(weights[head], dtype=work)  # (n, n), a view when already float32
        result["entropy"][head] = row_entropy(w, dtype=work, out=(terms, positive)).mean()  # (n, n) -> (n,) -> mean
        result["max weight"][head] = w.max(axis=-1).mean(dtype=np.float64)
        # under the causal mask the queries after the first, as head_types' first_token (row 0 of a causal map is
        # always 1); with the mask off every query (one token: no choice either way)
        result["first-token mass"][head] = w[1 if causal else 0:, 0].mean(dtype=np.float64) if n > 1 else np.nan
        np.multiply(w, distance, out=terms)  # (n, n): weight × |query − key|
        result["mean distance"][head] = terms.sum(axis=-1).mean(dtype=np.float64)  # (n, n) -> (n,) -> mean
        result["previous-token"][head] = np.diagonal(w, offset=-1).mean(dtype=np.float64) if n > 1 else np.nan
        # under the causal mask the queries after the first, as the first-token mass (row 0's A[0, 0] is the same
        # forced 1); with the mask off row 0 weighs every key, and its A[0, 0] is the head's choice (one token: no
        # choice either way)
        result["diagonal"][head] = np.diagonal(w)[1 if causal else 0:].mean(dtype=np.float64) if n > 1 else np.nan
    return result


def stat_range(name: str, n: int) -> tuple[float, float]:
    """The range a statistic can take for ``n`` tokens, whatever the weights: the table's bars are
    drawn on it, so a bar's length means the same for every head and every run of that length."""
    if name == "entropy":
        return 0.0, float(np.log(n)) if n > 1 else 1.0  # uniform over all n keys
    if name == "mean distance":
        positions = np.arange(n)
        farthest = np.maximum(positions, n - 1 - positions).mean()  # every query on its farthest key
        return 0.0, float(farthest) if n > 1 else 1.0
    if name in STATS:
        return 0.0, 1.0  # weights and sums of weights of a row
    raise KeyError(name)
