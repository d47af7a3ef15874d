"""What a GPTModel attends to: every layer's attention maps (or, one layer at a time, their small tiles and head
types), one layer's maps, and one layer's recorded path.

Everything here runs the model's own forward (``GPTModel.forward`` with a :class:`PathRecorder`), in eval
mode and without gradients, so the recorded numbers are the model's numbers.  ``causal`` (default True,
how GPT-2 was trained) is applied to every block's attention for the run: turning it off lets every
token see the whole text in every layer.  The flag lives on the (possibly shared, cached) modules, so
runs hold one lock while it is set; the model's own flags and train/eval mode are restored afterwards.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace

import numpy as np
import torch

from attnviz import head_types
from attnviz.attention import Recorder, record
from attnviz.models.gpt import GPTModel, PathRecorder, check_model, whole_number_in, yes_or_no

TOP_K = 5
_RUN_LOCK = threading.RLock()  # one run at a time sets the causal flags of a model's blocks


@contextmanager
def running(model: GPTModel, causal: bool):
    """Eval mode, no grad, every block's ``att.causal`` = ``causal``; all restored on exit."""
    check_model(model)
    causal = yes_or_no(causal, "causal")
    with _RUN_LOCK, torch.no_grad():
        was_training = model.training
        flags = [block.att.causal for block in model.trf_blocks]
        model.eval()
        for block in model.trf_blocks:
            block.att.causal = causal
        try:
            yield
        finally:
            for block, flag in zip(model.trf_blocks, flags):
                block.att.causal = flag
            model.train(was_training)


_MAX_ID = 2**63 - 1  # the largest id an int64 tensor holds: an id past it is past any vocabulary


def _whole_numbers(token_ids) -> np.ndarray | None:
    """``token_ids`` as an array of whole numbers (any shape, empty included), or None when they are something else:
    text, bytes, a mapping or set, None, floats, booleans, a ragged nesting.  Python ints too large for int64 stay
    Python ints (an object array), so that the range check names them rather than calling them no numbers."""
    if isinstance(token_ids, str | bytes | bytearray | Mapping | AbstractSet) or token_ids is None:
        return None
    if isinstance(token_ids, list | tuple) and _holds_a_bool(token_ids):  # numpy reads [True, 1] as [1, 1]
        return None
    if isinstance(token_ids, torch.Tensor):
        token_ids = token_ids.detach().cpu().numpy()  # a bool or float tensor keeps its kind ("b", "f"): refused
    try:
        values = np.asarray(token_ids)
        if values.dtype.kind in "fO" and values.size:  # ints past int64 (as floats or objects), or no ints at all
            values = np.asarray(token_ids, dtype=object)
    except (ValueError, TypeError, RuntimeError):  # a ragged nesting, an object numpy cannot read
        return None
    if values.dtype.kind in "iu" or not values.size:
        return values
    if values.dtype == object and all(isinstance(value, int | np.integer) and not isinstance(value, bool)
                                      for value in values.flat):
        return values
    return None


def _holds_a_bool(values: list | tuple) -> bool:
    """Whether a list or tuple, or one nested in it, holds a boolean."""
    return any(isinstance(value, bool | np.bool_) or isinstance(value, list | tuple) and _holds_a_bool(value)
               for value in values)


def token_sequence(token_ids, vocab_size: int | None = None) -> torch.Tensor:
    """The one check of the token ids a user passes to ``attnviz.models``: one sequence of whole numbers -> an (n,)
    int64 tensor, or a ValueError saying what is wrong.

    One sequence is a list, tuple or range, a 1-D integer tensor or array ``(n,)``, or a batch of one ``(1, n)``
    (``torch.tensor(ids).unsqueeze(0)``, as the book feeds its model), or a generator or map (read once, here).
    Refused, each in words: text or bytes (tokenize first), None, floats and booleans (no token ids), a set or dict
    (no order), a batch of several sequences or another shape (pass one), no ids at all, and with ``vocab_size`` an id
    outside ``0 … vocab_size − 1``.  What a model adds (its context) its callers check."""
    if isinstance(token_ids, Iterator):
        token_ids = list(token_ids)  # a generator or map is read once, here
    values = _whole_numbers(token_ids)
    if values is None and isinstance(token_ids, Mapping | AbstractSet):
        raise ValueError(f"token_ids must be a sequence in order (a list, a tuple, a tensor), got "
                         f"{type(token_ids).__name__}: a {type(token_ids).__name__} keeps no order of tokens.")
    if values is None:  # text, None, floats, booleans: no token ids to read
        shown = f" {token_ids[:40]!r}" if isinstance(token_ids, str | bytes | bytearray) else ""
        raise ValueError(f"token_ids must be whole numbers (GPT-2 token ids), got {type(token_ids).__name__}{shown}: "
                         "tokenize a text first, with attnviz.tokens.encode(text)")
    if values.ndim == 2 and values.shape[0] == 1:
        values = values[0]  # (1, n) -> (n,): a batch of one sequence
    if values.ndim == 0:
        raise ValueError(f"token_ids must be a sequence of token ids, got the single number {values.item()!r}: pass "
                         f"a list, such as [{values.item()!r}].")
    if values.ndim != 1:
        raise ValueError(f"token_ids must be one sequence of token ids, (n,) or a batch of one (1, n), got shape "
                         f"{tuple(values.shape)}: pass one sequence at a time, such as token_ids[0].")
    if not values.size:
        raise ValueError("token_ids is empty: give at least one token id.")
    top = _MAX_ID if vocab_size is None else vocab_size - 1
    if int(values.min()) < 0 or int(values.max()) > top:
        raise ValueError(f"Token ids must be in 0…{top}.")
    return torch.as_tensor(values.astype(np.int64))  # (n,)


def _token_batch(model: GPTModel, token_ids) -> torch.Tensor:
    """token ids (:func:`token_sequence`) -> a (1, n) long tensor the model can read: ids of its vocabulary, at most
    its context; or a ValueError saying what is wrong."""
    ids = token_sequence(token_ids, vocab_size=model.tok_emb.weight.shape[0])  # (n,)
    context_length = model.pos_emb.weight.shape[0]
    if ids.numel() > context_length:
        raise ValueError(f"{ids.numel()} tokens; this model reads at most {context_length}.")
    return ids.unsqueeze(0).to(model.pos_emb.weight.device)  # (n,) -> (1, n)


def _check_layer(model: GPTModel, layer: int) -> int:
    return whole_number_in(layer, "layer", 0, len(model.trf_blocks) - 1)


class _Keep(Recorder):
    """A Recorder that keeps only some steps (no clones of the others); shapes are still recorded."""

    def __init__(self, names: Sequence[str]):
        super().__init__()
        self.names = frozenset(names)

    def record(self, name: str, tensor: torch.Tensor, copy: bool = False, keep: bool = True) -> None:
        keep = keep and name in self.names
        super().record(name, tensor, copy=copy and keep, keep=keep)


class _WeightsInto(Recorder):
    """Writes the block's softmax weights straight into ``out[layer]`` (heads, n, n); keeps nothing."""

    def __init__(self, out: np.ndarray, layer: int):
        super().__init__()
        self.out, self.layer = out, layer

    def record(self, name: str, tensor: torch.Tensor, copy: bool = False, keep: bool = True) -> None:
        if name == "weights":
            self.out[self.layer] = tensor[0].detach().cpu().numpy()  # (1, h, n, n) -> (h, n, n)
        super().record(name, tensor, keep=False)


class _StopError(Exception):
    """Raised by _UpTo to end a forward early (control flow, never seen by callers)."""


class _UpTo(PathRecorder):
    """Stops the forward right after block ``last`` (nothing after it is needed)."""

    def __init__(self, last: int, **kwargs):
        super().__init__(**kwargs)
        self.last = last

    def leave_block(self, index: int, x: torch.Tensor) -> None:
        super().leave_block(index, x)
        if index == self.last:
            raise _StopError


def _run_up_to(model: GPTModel, idx: torch.Tensor, recorder: _UpTo) -> None:
    with suppress(_StopError):
        model(idx, recorder)


def attention_maps(model: GPTModel, token_ids, causal: bool = True) -> np.ndarray:
    """Softmax attention weights of every layer and head: float32 ``(layers, heads, n, n)``."""
    idx = _token_batch(check_model(model), token_ids)  # (1, n)
    n = idx.shape[1]
    n_layers, n_heads = len(model.trf_blocks), model.trf_blocks[0].att.num_heads
    maps = np.empty((n_layers, n_heads, n, n), dtype=np.float32)  # (L, h, n, n)
    recorder = _UpTo(n_layers - 1, layers=range(n_layers), recorder_factory=lambda layer: _WeightsInto(maps, layer))
    with running(model, causal):
        _run_up_to(model, idx, recorder)
    return maps


def layer_maps(model: GPTModel, token_ids, layer: int, causal: bool = True) -> np.ndarray:
    """Softmax attention weights of one layer: float32 ``(heads, n, n)``; runs blocks 0…layer only."""
    layer = _check_layer(check_model(model), layer)
    idx = _token_batch(model, token_ids)  # (1, n)
    n, n_heads = idx.shape[1], model.trf_blocks[layer].att.num_heads
    maps = np.empty((1, n_heads, n, n), dtype=np.float32)  # (1, h, n, n)
    recorder = _UpTo(layer, layers=[layer], recorder_factory=lambda _: _WeightsInto(maps, 0))
    with running(model, causal):
        _run_up_to(model, idx, recorder)
    return maps[0]


def iter_layer_maps(model: GPTModel, token_ids, causal: bool = True) -> Iterator[tuple[int, np.ndarray]]:
    """``(layer, (heads, n, n) float32 weights)`` for every layer, one at a time (one layer's maps held at once).

    One forward keeps the residual stream entering each block ((layers, n, d), small); each step then
    reruns that one block with a recorder.
    """
    block_inputs = _block_inputs(model, _token_batch(check_model(model), token_ids), causal)  # (L, n, d)
    for layer in range(len(model.trf_blocks)):
        yield layer, _block_maps(model, block_inputs[layer], layer, causal)


def every_layer(model: GPTModel, token_ids, tiles: Callable[[np.ndarray], np.ndarray],
                causal: bool = True) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Every layer's maps made small and every head's type scores, in one pass: ``(tiles of every layer (layers,
    heads, s, s), {score: (layers, heads)})``.

    ``tiles`` makes one layer's ``(heads, n, n)`` float32 weights small (``(heads, s, s)``: the view's
    ``checkpoint_view.overview_tiles``), called ``tiles(maps, window=W)`` for a layer with a sliding window W (a
    checkpoint's schedule may mix them) so that it can mask what the window hides, and ``tiles(maps)`` if it takes no
    ``window`` (the weights the window hides are 0 either way); the scores are
    :func:`attnviz.head_types.score_heads` of the same maps.  The blocks run one at a time
    (:func:`iter_layer_maps`): one layer's maps exist at once, never every layer's (GPT-2 small at 1024 tokens
    would hold 600 MB of them)."""
    check_model(model)
    if not callable(tiles):
        raise ValueError(f"tiles must be a function that makes one layer's (heads, n, n) maps small, got "
                         f"{type(tiles).__name__}.")
    idx = _token_batch(model, token_ids)  # (1, n): a generator is read once, here
    layers, rows = [], {name: [] for name in head_types.SCORE_NAMES}
    masks_windows = _takes_window(tiles)
    for layer, maps in iter_layer_maps(model, idx, causal=causal):  # (h, n, n) float32
        window = getattr(model.trf_blocks[layer].att, "sliding_window_size", None)
        small = tiles(maps, window=int(window)) if window is not None and masks_windows else tiles(maps)
        layers.append(small)  # (h, n, n) -> (h, s, s)
        for name, values in head_types.score_heads(maps, idx[0].tolist(), masked=causal,
                                                       causal=causal).items():  # (h,) each
            rows[name].append(values)
        del maps
    return np.stack(layers), {name: np.stack(values) for name, values in rows.items()}  # (L, h, s, s), (L, h) each


def _takes_window(tiles: Callable) -> bool:
    """Whether ``tiles`` can be called with a ``window=`` keyword (a parameter of that name, or ``**kwargs``); a
    callable whose signature cannot be read is given it."""
    try:
        parameters = inspect.signature(tiles).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "window" and p.kind is not p.POSITIONAL_ONLY or p.kind is p.VAR_KEYWORD for p in parameters)


def _block_inputs(model: GPTModel, idx: torch.Tensor, causal: bool) -> torch.Tensor:
    n_layers = len(model.trf_blocks)
    recorder = _UpTo(n_layers - 1, keep_block_inputs=True)
    with running(model, causal):
        _run_up_to(model, idx, recorder)
    return torch.cat(recorder.block_inputs)  # L × (1, n, d) -> (L, n, d)


def _block_maps(model: GPTModel, block_input: torch.Tensor, layer: int, causal: bool) -> np.ndarray:
    n = block_input.shape[0]
    maps = np.empty((1, model.trf_blocks[layer].att.num_heads, n, n), dtype=np.float32)  # (1, h, n, n)
    with running(model, causal):
        model.trf_blocks[layer](block_input.unsqueeze(0), _WeightsInto(maps, 0))  # (1, n, d) -> (1, n, d)
    return maps[0]


# ============================== one layer's trace ==============================


@dataclass(frozen=True, eq=False)  # holds tensors: compared by identity
class LayerTrace:
    """One layer of a GPTModel run, ready for the pipeline.

    ``recorder``: block ``layer``'s Recorder: ``steps`` holds ``norm1`` (the LayerNorm'd block input the
    attention reads) and ``att``'s named steps (``queries`` … ``output``; maps ``(1, heads, n, n)``), as
    detached CPU tensors; ``shapes`` the block's own path.  ``path``: (stage, shape) of the whole model.
    ``top_ids``/``top_probs``: the model's top-k next tokens at every position, ``(n, k)``.
    ``block_inputs``: the residual stream entering each block, ``(layers, n, d)``, so
    :func:`switch_layer` recomputes one block's attention instead of the model.
    """

    layer: int
    causal: bool
    token_ids: tuple[int, ...]
    recorder: Recorder
    head: tuple[tuple[str, tuple[int, ...]], ...]  # tokens, tok_emb, pos_emb, input
    tail: tuple[tuple[str, tuple[int, ...]], ...]  # final_norm, logits
    top_ids: np.ndarray  # (n, k) int64
    top_probs: np.ndarray  # (n, k) float32, descending per row
    block_inputs: torch.Tensor  # (layers, n, d)

    @property
    def n_layers(self) -> int:
        return self.block_inputs.shape[0]

    @property
    def steps(self) -> dict[str, torch.Tensor]:
        return self.recorder.steps

    @property
    def path(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """tokens → tok_emb + pos_emb → input → blocks 0…L−1 → block L's steps → blocks L+1… → final_norm → logits."""
        block_shape = (1, *self.block_inputs.shape[1:])  # (1, n, d)
        blocks: list[tuple[str, tuple[int, ...]]] = []
        for index in range(self.n_layers):
            if index == self.layer:
                blocks.extend(self.recorder.shapes)
            blocks.append((f"block {index}", block_shape))
        return (*self.head, *blocks, *self.tail)


def trace_layer(model: GPTModel, token_ids, layer: int, causal: bool = True, top_k: int = TOP_K) -> LayerTrace:
    """Run the model once; record layer ``layer``'s attention, the whole path, top-k predictions, block inputs."""
    layer = _check_layer(check_model(model), layer)
    top_k = whole_number_in(top_k, "top_k", 1, model.out_head.weight.shape[0])
    idx = _token_batch(model, token_ids)  # (1, n)
    recorder = PathRecorder(layers=[layer], keep_block_inputs=True)
    with running(model, causal):
        logits = model(idx, recorder)  # (1, n, vocab)
        top_ids, top_probs = _top_k(logits[0], top_k)
    del logits
    n_front = 4  # tokens, tok_emb, pos_emb, input
    return LayerTrace(
        layer=layer,
        causal=causal,
        token_ids=tuple(int(token) for token in idx[0]),
        recorder=recorder.blocks[layer],
        head=tuple(recorder.shapes[:n_front]),
        tail=tuple(recorder.shapes[-2:]),
        top_ids=top_ids,
        top_probs=top_probs,
        block_inputs=torch.cat(recorder.block_inputs),  # L × (1, n, d) -> (L, n, d)
    )


def switch_layer(model: GPTModel, trace: LayerTrace, layer: int) -> LayerTrace:
    """The same run's trace for another layer: reruns only that block's norm1 + attention, from its stored input.

    ``model`` must be the model that made ``trace``.
    """
    layer = _check_layer(check_model(model), layer)
    if not isinstance(trace, LayerTrace):
        raise ValueError(f"trace must be an attnviz.models.LayerTrace (trace_layer's result), got "
                         f"{type(trace).__name__}.")
    if trace.block_inputs.shape[0] != len(model.trf_blocks):
        raise ValueError("This trace was made by another model.")
    block, recorder = model.trf_blocks[layer], Recorder()
    with running(model, trace.causal):
        # the first half of TransformerBlock.forward: all a layer switch draws (the feed-forward half is skipped)
        x = block.norm1(trace.block_inputs[layer].unsqueeze(0))  # (n, d) -> (1, n, d)
        record(recorder, "norm1", x)
        block.att(x, recorder)  # (1, n, d) -> (1, n, d), records att's named steps
    after = [name for name, _ in trace.recorder.shapes].index("output") + 1
    recorder.shapes.extend(trace.recorder.shapes[after:])  # shortcut1 … shortcut2: same shapes in every block
    return replace(trace, layer=layer, recorder=recorder)


def _top_k(logits: torch.Tensor, k: int, rows: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Top-k token ids and softmax probabilities per position, a few rows at a time (vocab-wide softmax)."""
    ids, probs = [], []
    for start in range(0, logits.shape[0], rows):
        chunk = torch.softmax(logits[start : start + rows].float(), dim=-1)  # (rows, vocab), each row sums to 1
        values, indices = torch.topk(chunk, k, dim=-1)  # (rows, vocab) -> (rows, k), most likely first
        ids.append(indices)
        probs.append(values)
    return torch.cat(ids).numpy().astype(np.int64), torch.cat(probs).numpy().astype(np.float32)
