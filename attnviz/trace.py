"""What every run returns: a ``Trace`` (tokens, embeddings, the named steps, shapes, notes), ready to draw.

Every producer (:mod:`attnviz.producers`) builds its Trace with :func:`make_trace`; views, the diagram, caching
and exports read only the Trace.  Arrays are float32 NumPy on the CPU and read-only: a cached Trace is shared
by every session.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import torch

from attnviz import tokens
from attnviz.config import AttentionConfig


@dataclass(frozen=True, eq=False)  # holds arrays
class ModelRun:
    """What a checkpoint's run adds to its Trace: where the layer sits, the whole path, the predictions."""

    layer: int
    n_layers: int
    path: tuple[tuple[str, tuple[int, ...]], ...]  # (stage, shape): tokens, tok_emb, pos_emb, input, blocks…, logits
    top_ids: np.ndarray  # (n, 5) int64: the model's most likely next tokens after each position
    top_probs: np.ndarray  # (n, 5) float32, descending per row


@dataclass(frozen=True)
class ModuleRun:
    """What a user module's run adds to its Trace: its class, its file and the line of each stage it computed."""

    class_name: str
    filename: str | None
    stage_lines: dict[str, int]  # stage -> line in ``filename`` that produced it
    ops: tuple[tuple[str, tuple[int, ...], int | None, str | None], ...]  # (call, output shape, line, stage) per op
    kind: str  # how its attention was found: "softmax", "sdpa" or "nn.MultiheadAttention"
    source: str = ""  # the class's source text
    first_line: int = 1  # the line of ``filename`` where ``source`` starts


@dataclass(frozen=True)
class Trace:
    """One run, ready to draw.  Arrays are float32 NumPy on the CPU; treat them as read-only."""

    config: AttentionConfig
    text: str  # the text that was tokenized (after bounding/cleaning; see notes)
    tokens: tuple[str, ...]  # display pieces, e.g. "·journey"
    token_ids: tuple[int, ...]
    token_details: tuple[tokens.Token, ...]  # pieces with character offsets and special flags
    embeddings: dict[str, np.ndarray]  # "token", "position", "input": (n, d_in) each
    # named intermediates (attention.STAGES); maps are (batch, heads, n, n), batch 1 but for trace_module on a batch
    # (views draw item 0); q/k/v/context are per head from trace_module, as projected from run (docs/api.md's table)
    steps: dict[str, np.ndarray]
    output: np.ndarray  # (batch, n, d_out)
    shapes: tuple[tuple[str, tuple[int, ...]], ...]  # (stage, shape) in pipeline order, from real tensors
    device: str  # the device that actually ran
    notes: tuple[str, ...] = field(default=())  # things the user should know (truncation, fallback)
    model: ModelRun | None = None  # set when the run used a checkpoint
    module_run: ModuleRun | None = None  # set when the run traced a user's module

    @property
    def n(self) -> int:
        return len(self.token_ids)

    @property
    def num_heads(self) -> int:
        return self.steps["weights"].shape[1]

    def attention_map(self, stage: str, head: int) -> np.ndarray:
        """(n, n) map of ``stage`` for one head."""
        return self.steps[stage][0, head]




def make_trace(config: AttentionConfig, text: str, token_ids: list[int], embeddings: dict, *, steps: dict,
           output: np.ndarray, shapes: tuple, device: str, notes: list[str], model: ModelRun | None = None,
           module_run: ModuleRun | None = None, tokenized: bool = True) -> Trace:
    """A Trace of these tokens: the display pieces are derived here, the same for every run of the same ids.
    ``tokenized`` False: the inputs were vectors, not tokens (a tensor given to ``trace_module``); ``token_ids`` are
    their positions, and the pieces say so (``x[3]``), never the GPT-2 tokens those numbers would be."""
    details = pieces(tuple(token_ids)) if tokenized else tuple(
        tokens.Token(id=int(i), piece=f"x[{i}]", start=0, end=0, special=False) for i in token_ids)
    return Trace(config=config, text=text, tokens=tuple(t.piece for t in details), token_ids=tuple(token_ids),
                 token_details=details, embeddings=embeddings, steps=steps, output=output, shapes=shapes,
                 device=device, notes=tuple(notes), model=model, module_run=module_run)


@functools.lru_cache(maxsize=8)
def pieces(token_ids: tuple[int, ...]) -> tuple[tokens.Token, ...]:
    return tuple(tokens.pieces(list(token_ids)))


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """float32 NumPy view on the CPU, read-only: cached Traces are shared by every session."""
    array = tensor.detach().to("cpu", torch.float32).numpy()
    array.setflags(write=False)
    return array


_byte_bounds = getattr(getattr(np.lib, "array_utils", None), "byte_bounds", None) or np.byte_bounds  # NumPy 2 / 1


def trace_nbytes(trace: Trace) -> int:
    """Bytes held by a Trace's arrays; memory shared by several arrays (in eval mode ``dropped`` is
    ``weights``, a non-causal run's ``masked`` is ``scaled``) counts once."""
    extra = (trace.model.top_ids, trace.model.top_probs) if trace.model is not None else ()
    spans = sorted(_byte_bounds(array) for array in (*trace.steps.values(), *trace.embeddings.values(),
                                                        trace.output, *extra) if array.nbytes)
    total, end = 0, None
    for low, high in spans:  # the union of the arrays' byte ranges
        if end is None or low >= end:
            total, end = total + high - low, high
        elif high > end:
            total, end = total + high - end, high
    return total
