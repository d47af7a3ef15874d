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


def head_statistics(weights: np.ndarray) -> dict[str, np.ndarray]:
    """Statistics per head of ``weights`` shaped (heads, n, n) (rows sum to 1): name -> (heads,)."""
    weights = np.asarray(weights, dtype=np.float64)
    heads, n, _ = weights.shape
    positions = np.arange(n)
    distance = np.abs(positions[:, None] - positions[None, :])  # (n, n)
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = np.where(weights > 0, -weights * np.log(weights), 0.0).sum(axis=-1)  # (heads, n)
    diagonal = weights[:, positions, positions]  # (heads, n)
    previous = weights[:, positions[1:], positions[:-1]] if n > 1 else np.zeros((heads, 1))  # (heads, n-1)
    return {
        "entropy": entropy.mean(axis=-1),
        "max weight": weights.max(axis=-1).mean(axis=-1),
        "first-token mass": weights[:, :, 0].mean(axis=-1),
        "mean distance": (weights * distance).sum(axis=-1).mean(axis=-1),
        "previous-token": previous.mean(axis=-1),
        "diagonal": diagonal.mean(axis=-1),
    }


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
