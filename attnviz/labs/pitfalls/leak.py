"""Pitfall lab, the causality leak detector: perturb token j, measure how far every output moves — on any module
(:func:`leak_report`), or on a user's own module called as every page calls it (:func:`module_leak`).

Shared by the page's leak section and pitfall 1.  Pure torch + NumPy: no figures, no Streamlit.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from attnviz import tracing
from attnviz.config import AttentionConfig
from attnviz.labs.pitfalls.workbench import forward_rng
from attnviz.words import listed

NOISE_SCALE = 1.0  # std of the perturbation added to token j (the embeddings are ~N(0, 2))


def _forward(module: nn.Module, inputs: torch.Tensor, seed: int) -> torch.Tensor:
    with forward_rng(module, seed), torch.no_grad():
        return module(inputs)  # (1, n, d_in) -> (1, n, d_out)


def _as_batch(inputs) -> torch.Tensor:
    tensor = torch.as_tensor(np.array(inputs, dtype=np.float32) if not torch.is_tensor(inputs) else inputs)
    return tensor if tensor.dim() == 3 else tensor.unsqueeze(0)  # (n, d_in) -> (1, n, d_in)


# --------------------------------------------------------------------------- the causality leak detector

def leak_report(module_or_factory: nn.Module | Callable[[], nn.Module], inputs, j: int, *, seed: int = 123,
                scale: float = NOISE_SCALE) -> dict:
    """Perturb token ``j``'s input embedding (seeded Gaussian noise) and measure every output's move.

    Returns ``delta`` (n,): max |Δ output| over the features at each position; ``leaked``: positions
    before j whose output changed at all (``delta != 0`` — a causal model moves them by exactly 0);
    ``nan_positions``: positions whose output is NaN (they cannot be compared); ``verdict``: "no leak"
    or "leaks into positions 0, 1, …" ("position 0" for one).  Both runs start from the same RNG state, so active
    dropout draws the same masks and only the perturbation differs.  A module that raises, raises here.
    """
    module = module_or_factory if isinstance(module_or_factory, nn.Module) else module_or_factory()
    batch = _as_batch(inputs)  # (1, n, d_in)
    n = batch.shape[1]
    if not 0 <= j < n:
        raise ValueError(f"j must be a position in 0 … {n - 1}, got {j}.")
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn(batch.shape[-1], generator=generator) * scale  # (d_in,)
    perturbed = batch.clone()  # (1, n, d_in)
    perturbed[0, j] += noise  # only token j changes
    before = _forward(module, batch, seed)  # (1, n, d_out)
    after = _forward(module, perturbed, seed)  # (1, n, d_out)
    delta = (after - before).abs().amax(dim=-1)[0].double().numpy()  # (1, n, d_out) -> (n,)
    nan_positions = [p for p in range(n) if math.isnan(delta[p])]
    leaked = [p for p in range(j) if not math.isnan(delta[p]) and delta[p] != 0]  # exactly 0, not allclose
    nan_before = [p for p in nan_positions if p < j]
    if leaked:
        verdict = f"leaks into {listed('position', leaked)}"
    elif j == 0:
        verdict = "no leak (nothing comes before position 0: pick a later token to test)"
    elif nan_before:
        verdict = "no leak among the positions that can be compared"
    else:
        verdict = "no leak"
    if nan_positions:
        verdict += f"; the output is NaN at {listed('position', nan_positions)}, which cannot be compared"
    return {"j": j, "delta": delta, "leaked": leaked, "nan_positions": nan_positions, "verdict": verdict}


# --------------------------------------------------------------------------- a user's own module

def module_leak(config: AttentionConfig, inputs: torch.Tensor, j: int) -> dict:
    """:func:`leak_report` on the user's listed module of a settled ``config``, built as every page runs it — its own
    mask, not a copy of its causal setting on the book's code: a module that means to mask the future and does not
    leaks here.  A forward that raises gives ``{"error": text}``."""
    from attnviz.producers import user_module  # the listed module, built once for every page

    module = _AsEveryPageRunsIt(user_module.module_for(config))
    try:
        return {**leak_report(module, inputs, j, seed=config.seed), "bug": None}
    except Exception as exc:  # the user's code: whatever it raises is said, not a traceback
        return {"j": j, "bug": None, "error": str(exc), "verdict": f"cannot run: {type(exc).__name__}: {exc}"}


class _AsEveryPageRunsIt(nn.Module):
    """A user's module called as every page calls it, its ops not recorded (:func:`attnviz.tracing.forward_output`):
    its calling convention (``forward(x, x, x)``, sequence first), the time limit, ``os._exit`` refused, and the output
    read from whatever it returns it in (a tuple, weights after it, a dict).  In the user's module's own mode, which it
    leaves as it is."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.training = module.training  # not .train(): that would set the user's module too

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tracing.forward_output(self.module, x)  # (1, n, d_in) -> (1, n, d_out)
