"""Why ÷√dₖ?  Softmax saturation versus the key size dₖ, with and without the scaling.

For q and k with independent standard-normal entries, q·k is a sum of dₖ products of variance 1, so
its variance is dₖ: without scaling the scores spread out as dₖ grows, softmax puts nearly all the
weight on one key (low entropy, max weight → 1) and its gradients vanish.  Dividing by √dₖ keeps the
variance at 1 for every dₖ.

Everything here returns plain dicts of NumPy arrays/floats; :mod:`attnviz.views.saturation` draws them.
This run's own queries/keys are reported as one point at this run's dₖ (projecting them onto a prefix
of their dimensions would not be a meaningful "smaller dₖ").
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnviz.stats import row_entropy
from attnviz.trace import Trace

DK_VALUES = tuple(2**i for i in range(11))  # 1, 2, 4, …, 1024
ROWS_PER_DK = 4096  # query rows drawn per dₖ (in batches of n tokens), enough for ~5 % variance estimates
MODES = ("scaled", "unscaled")
METRICS = ("variance", "entropy", "max_weight")


def saturation_stats(queries, keys, causal: bool = False) -> dict[str, dict[str, float]]:
    """Score variance, mean row entropy and mean max weight of softmax(q·k) and softmax(q·k ÷ √dₖ).

    ``queries``/``keys``: (..., n, dₖ) arrays.  The variance is over every q·k pair (the mask does not
    change the scores); entropy and max weight are over the keys a query may see (all, or ≤ its position).
    Computed in float64 (torch only for the fast batched matmul).
    """
    queries = torch.from_numpy(np.asarray(queries, dtype=np.float64))  # (..., n, dₖ), shared with numpy, not copied
    keys = torch.from_numpy(np.asarray(keys, dtype=np.float64))  # (..., n, dₖ)
    d_k, num_tokens = queries.shape[-1], queries.shape[-2]
    attn_scores = queries @ keys.transpose(-1, -2)  # (..., n, dₖ) @ (..., dₖ, n) -> (..., n, n)
    stats = {}
    for mode in MODES:
        scores = attn_scores / math.sqrt(d_k) if mode == "scaled" else attn_scores  # (..., n, n)
        if causal:
            mask_bool = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)  # (n, n)
            scores_seen = scores.masked_fill(mask_bool, -torch.inf)  # (..., n, n)
        else:
            scores_seen = scores  # (..., n, n)
        attn_weights = torch.softmax(scores_seen, dim=-1)  # (..., n, n), rows sum to 1
        entropy = row_entropy(attn_weights.numpy())  # −Σ p log p (0 log 0 = 0): (..., n, n) -> (..., n)
        stats[mode] = {
            "variance": float(scores.var(unbiased=False)),
            "entropy": float(entropy.mean()),
            "max_weight": float(attn_weights.max(dim=-1).values.mean()),
        }
    return stats


def uniform_entropy(num_tokens: int, causal: bool = False) -> float:
    """Mean row entropy of uniform weights (the most spread-out softmax can be)."""
    if causal:
        return float(np.mean(np.log(np.arange(1, num_tokens + 1))))
    return float(math.log(num_tokens))


def scaling_ablation(dks=DK_VALUES, num_tokens: int = 64, seed: int = 123, causal: bool = False,
                     rows: int = ROWS_PER_DK) -> dict:
    """Saturation statistics vs dₖ on random q/k (standard-normal entries, ``numpy`` generator seeded).

    For each dₖ, ``ceil(rows / num_tokens)`` independent sequences of ``num_tokens`` tokens are drawn.
    Returns ``{"dk": array, "num_tokens", "seed", "causal", "uniform_entropy",
    "scaled": {metric: array}, "unscaled": {metric: array}}``.
    """
    rng = np.random.default_rng(seed)
    num_tokens = max(1, int(num_tokens))
    batches = max(1, math.ceil(rows / num_tokens))
    result = {mode: {metric: [] for metric in METRICS} for mode in MODES}
    for d_k in dks:
        queries = rng.standard_normal((batches, num_tokens, d_k))  # (batches, n, dₖ)
        keys = rng.standard_normal((batches, num_tokens, d_k))  # (batches, n, dₖ)
        stats = saturation_stats(queries, keys, causal)
        for mode in MODES:
            for metric in METRICS:
                result[mode][metric].append(stats[mode][metric])
    return {
        "dk": np.array(dks, dtype=np.int64),
        "num_tokens": num_tokens,
        "seed": seed,
        "causal": causal,
        "uniform_entropy": uniform_entropy(num_tokens, causal),
        **{mode: {metric: np.array(values) for metric, values in result[mode].items()} for mode in MODES},
    }


def trace_qk(trace: Trace, head: int = 0, max_tokens: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One head's queries and keys from a Trace, as they enter QKᵀ (:meth:`Trace.head_vectors`): (n, dₖ) each,
    the first ``max_tokens`` tokens."""
    vectors = trace.head_vectors(head)
    return vectors.queries[:max_tokens], vectors.keys[:max_tokens]  # (n, hd) each


def run_point(queries: np.ndarray, keys: np.ndarray, causal: bool = False, head: int = 0) -> dict:
    """This run's statistics at its own dₖ: ``{"dk", "head", "scaled": {...}, "unscaled": {...}}``."""
    return {"dk": int(np.shape(queries)[-1]), "head": head, **saturation_stats(queries, keys, causal)}
