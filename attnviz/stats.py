"""Per-head statistics of attention weights (pure NumPy)."""

from __future__ import annotations

import numpy as np

# name -> what it measures (shown as column help in the app)
STATS = {
    "entropy": "mean entropy of a query's weights (nats): high = spread out, 0 = all on one key",
    "max weight": "mean of each query's largest weight",
    "first-token mass": "mean weight on the first token (an 'attention sink' when large)",
    "mean distance": "mean |query − key| distance, weighted by attention",
    "previous-token": "mean weight on the token just before the query",
    "diagonal": "mean weight a token gives itself",
}


def row_entropy(weights: np.ndarray) -> np.ndarray:
    """Entropy (nats) of each row of attention weights (..., n) -> (...): −Σ p log p with 0 log 0 = 0;
    0 = all weight on one key, ln n = uniform.  attnviz's one entropy (Steps, head statistics, ablation, lab)."""
    p = np.asarray(weights, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, -p * np.log(p), 0.0)
    return terms.sum(axis=-1)


def head_statistics(weights: np.ndarray) -> dict[str, np.ndarray]:
    """Statistics per head of ``weights`` shaped (heads, n, n) (rows sum to 1): name -> (heads,).

    One head at a time, in float64: the temporaries stay (n, n).  All heads at once needed about eight
    float64 copies of the (heads, n, n) maps — 0.5 GB for GPT-2 medium at 1024 tokens, the server's peak."""
    weights = np.asarray(weights)
    heads, n, _ = weights.shape
    positions = np.arange(n)
    distance = np.abs(positions[:, None] - positions[None, :])  # (n, n)
    result = {name: np.zeros(heads) for name in STATS}
    for head in range(heads):
        w = weights[head].astype(np.float64)  # (n, n)
        result["entropy"][head] = row_entropy(w).mean()  # (n, n) -> (n,) -> mean
        result["max weight"][head] = w.max(axis=-1).mean()
        result["first-token mass"][head] = w[:, 0].mean()
        result["mean distance"][head] = (w * distance).sum(axis=-1).mean()
        result["previous-token"][head] = w[positions[1:], positions[:-1]].mean() if n > 1 else 0.0
        result["diagonal"][head] = w[positions, positions].mean()
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
