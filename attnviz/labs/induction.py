"""The induction lab's data: a model (or one layer of maps) on repeated random tokens, scored.

TransformerLens' induction demo: ``[BOS] + x + x`` with x = T random ids in 1,000–30,000
(``head_types.repeated_random_tokens``).  An induction head at a token of the second copy attends to the
token *after* that token's first occurrence, ``A[i, i−T+1]``; its score is the mean of that stripe over
the repeat (``head_types.induction_stripe``).  A model with an LM head also predicts the second copy:
its loss there drops when induction works (``repeat_halves``).

``run_model`` scores every layer of a ``GPTModel`` one layer at a time (``iter_layer_maps``: never all
maps at once), with the causal mask it was trained with, and keeps only the layer on view; ``run_maps`` scores
maps the caller already has (the random book classes: one attention layer, no LM head, so no loss; with the
mask off, heads that see the future).

The stripe is an induction test only for heads that cannot see the future (``head_types.sees_future``): a head
that can read the token after its query finds the same token at ``i − T + 1`` (x repeats), so weight there need
not mean it looked up an earlier copy.  ``InductionRun.named`` is the lab's verdict with that rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz.head_types import (
    LABEL_THRESHOLD,
    future_mass,
    induction_stripe,
    previous_token_stripe,
    repeat_halves,
    repeated_random_tokens,
    sees_future,
)

MIN_T, MAX_T = 2, 200  # repeat length the lab offers (the sequence is 2T + 1 tokens with BOS)
DEFAULT_T, DEFAULT_SEED = 25, 0


@dataclass(frozen=True, eq=False)  # holds arrays
class InductionRun:
    """One lab run.  ``scores``/``previous``/``future``: (layers, heads); ``maps``: (heads, n, n) of ``layer``;
    ``loss``: (n−1,) per-position next-token loss, or ``None`` for attention without an LM head."""

    T: int
    seed: int
    token_ids: np.ndarray  # (n,) = [BOS] + x + x
    layer: int
    maps: np.ndarray  # (heads, n, n)
    scores: np.ndarray  # (layers, heads): mean A[i, i−T+1] over the repeat
    previous: np.ndarray  # (layers, heads): mean A[i, i−1] on the same tokens
    future: np.ndarray  # (layers, heads): mean weight a query gives to later keys (0 under a causal mask)
    loss: np.ndarray | None = None
    causal: bool = True  # the run's mask was on (a model: every layer's)

    @property
    def n(self) -> int:
        return int(self.token_ids.shape[0])

    @property
    def best(self) -> tuple[int, int]:
        """(layer, head) with the highest induction score."""
        layer, head = np.unravel_index(int(np.nanargmax(self.scores)), self.scores.shape)
        return int(layer), int(head)

    @property
    def sees_future(self) -> bool:
        """Whether the run's attention could see later tokens: its mask was off, or a head gave them weight."""
        return not self.causal or bool(np.any(sees_future(self.future)))

    def named(self, layer: int, head: int) -> bool:
        """Whether the lab calls this head an induction head: its score is ≥ ``LABEL_THRESHOLD`` and the run's
        attention cannot see the future (the rule of ``head_types.head_label``, the Heads page's head types)."""
        return bool(self.scores[layer, head] >= LABEL_THRESHOLD and not self.sees_future)

    @property
    def halves(self) -> tuple[float, float] | None:
        """Mean loss before the repeat can be copied and on the copyable second copy (``repeat_halves``)."""
        return None if self.loss is None else repeat_halves(self.loss, self.T)


def lab_tokens(T: int, seed: int) -> np.ndarray:
    """The lab's sequence: ``[BOS] + x + x``, x = T random ids in 1,000–30,000 drawn from ``seed``: (2T + 1,)."""
    if not MIN_T <= T <= MAX_T:
        raise ValueError(f"repeat length T must be between {MIN_T} and {MAX_T}; got {T}")
    return repeated_random_tokens(T, seed, bos=True)


def run_maps(maps: np.ndarray, token_ids, T: int, seed: int, *, layer: int = 0, causal: bool = True) -> InductionRun:
    """A lab run from one layer's maps (heads, n, n) of ``token_ids`` (no model, no loss); ``causal``: whether the
    attention that made them masked the future (``AttentionConfig.hides_future``)."""
    maps = np.asarray(maps)
    scores = induction_stripe(maps, T)[None]  # (heads,) -> (1, heads)
    previous = previous_token_stripe(maps)[None]  # (1, heads)
    future = future_mass(maps)[None]  # (1, heads)
    return InductionRun(T=T, seed=seed, token_ids=np.asarray(token_ids), layer=layer, maps=maps,
                        scores=scores, previous=previous, future=future, causal=causal)


def run_model(model, T: int, seed: int, *, layer: int | None = None) -> InductionRun:
    """Every layer of a GPTModel on the lab's tokens, layer by layer; keeps the maps of ``layer`` (default:
    the layer of the best induction head) and the model's full-vocabulary per-position loss."""
    from attnviz.labs.train import per_position_loss
    from attnviz.models import iter_layer_maps, running

    token_ids = lab_tokens(T, seed)  # (n,)
    n_layers = len(model.trf_blocks)
    if layer is not None and not 0 <= layer < n_layers:
        raise ValueError(f"layer must be between 0 and {n_layers - 1}; got {layer}")
    heads = model.trf_blocks[0].att.num_heads
    scores = np.empty((n_layers, heads))
    previous = np.empty((n_layers, heads))
    future = np.empty((n_layers, heads))
    kept: dict[int, np.ndarray] = {}
    for index, maps in iter_layer_maps(model, token_ids):  # (heads, n, n), one layer at a time
        scores[index] = induction_stripe(maps, T)
        previous[index] = previous_token_stripe(maps)
        future[index] = future_mass(maps)  # 0: iter_layer_maps runs the model causal
        if layer is None:  # keep the best layer so far only
            if not kept or scores[index].max() > scores[next(iter(kept))].max():
                kept = {index: maps}
        elif index == layer:
            kept = {index: maps}
    (shown, maps), = kept.items()
    # the model may be shared with other sessions' runs, which switch its causal flags under this lock
    with running(model, True):
        loss = per_position_loss(model, token_ids)  # (n−1,), with the causal mask the model was trained with
    return InductionRun(T=T, seed=seed, token_ids=token_ids, layer=shown, maps=maps, scores=scores,
                        previous=previous, future=future, loss=loss)
