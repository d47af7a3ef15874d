"""Records any PyTorch attention module's forward and turns it into a ``Trace``: the user's own code, unchanged.

``record(module, x)`` runs ``module(x)`` once under a ``torch.overrides.TorchFunctionMode`` that sees every
tensor call (``@``, ``/``, ``masked_fill``, ``softmax``, ``view``, ``transpose``, ``F.linear``, ``F.dropout``,
``F.scaled_dot_product_attention``, ``F.multi_head_attention_forward`` …), keeps each call's name, output shape
and the line of the user's file that made it, and links every output tensor to the tensors it came from.  An
attention is

* a softmax over the last dimension of a ``(…, n, n)`` tensor, n the tokens given: walking back from its input through
  the mask (``masked_fill``, ``where`` — its scores operand, not the condition or the fill —, an added mask), a
  soft-cap ``cap · tanh(s / cap)`` (Gemma 2's, kept as ``Attention.softcap``: :func:`_softcap`), a cast
  to another floating dtype (``softmax(s.half())``) and the scale (a multiply or divide by a number; or one Q or K
  got before they were viewed, transposed or reshaped into heads, OPT's ``q_proj(x) * scaling``, or before they were
  rotated, ``rope(q * scale)``) reaches the ``Q @ Kᵀ`` matmul — or an add of two such products, q₁·k₁ + q₂·k₂
  (DeepSeek-V3's absorbed MLA adding its decoupled rotary scores to its latent ones, Transformer-XL's content and
  position terms), read as one product of the concatenations [Q₁ | Q₂] and [K₁ | K₂], whose width is then the sum of
  the two products' widths, not a head's width (:func:`_summed_operands`); walking forward through a dropout, a cast
  to the dtype the weights have, a ``where`` that only sets NaN to 0, a head or query mask that zeroes whole rows
  (GPT-2's ``* head_mask``: ``Attention.rows_zeroed``) (or a number the weights are multiplied or divided by: a bug
  that ``Attention.weights_scale`` keeps) reaches the ``weights @ V`` matmul, passing by a copy the output is not
  made from (``self.last_attn_weights = attn_weights.detach()``, ``.clone()``, ``.cpu()``, a list of maps kept for
  plotting: :func:`_made_of`); both walks pass a ``view`` /
  ``reshape`` that keeps the last two dims (Bloom's (b·h, n, n) scores viewed as (b, h, n, n), and back); a
  softmax over the keys and one more column that a slice drops right after it (an attention sink, GPT-OSS's
  ``probs[..., :-1]``) is one too: its weights are the slice, whose rows sum to less than 1, and the walk back passes
  the ``torch.cat`` of the scores and the sink logits (:func:`_sink_slice`, ``Attention.sinks``); where no softmax
  runs over the keys, one over the queries, the heads or the batch of the ``(…, n, n)`` scores is the attention,
  gone wrong: the checker's rules fail naming it (``Attention.softmax_dim``, ``Attention.softmax_over``) — and one
  over the queries the output is made from is one beside softmaxes over the keys too (a model's later layer);
* a ``scaled_dot_product_attention`` call or an ``nn.MultiheadAttention`` (one ``multi_head_attention_forward``
  call): they never materialise their weights, so the weights are computed explicitly from the call's own
  q, k, v, mask, ``is_causal``, ``scale`` (and ``enable_gqa``) — with a scale q or k got before the call read as
  the manual path reads it, and SDPA's in float32 from float16 or bfloat16 inputs, as its kernels compute the scores
  and the softmax; the module still gets the call's real result.

Today's attention needs nothing special: a grouped-query module's ``Q @ Kᵀ`` operands are the per-head keys
after its ``repeat_interleave`` (SDPA's ``enable_gqa`` is repeated the same way), a latent module's keys are its
up-projection's output, rotary's are q and k after the rotation, and a sliding window is the mask's band.

``input_width(module)`` is the width of the input a module takes when no one says it: a width attribute, else the
width of the first projection its forward calls (a forward stopped there), and where it was read — words a forward
that refuses that width is told in (:func:`saying_width`).

``step_attentions(module, x, use_cache=True)`` records one cached step the same way: each attention's queries over
more keys than there are queries (the kv-cache rule reads a failing step's mask, queries, keys and values from them,
a model's layer by layer).

``trace_module(module, x)`` returns a ``Trace`` like the book's producer's, for every item of the batch: maps
``(batch, heads, n, n)``, ``queries``/``keys``/``values``/``context`` per head ``(batch, heads, n, head_dim)``,
the output ``(batch, n, d_out)``, and ``shapes`` listing every recorded op in order with its real shape, so the
diagram draws the user's own pipeline.  Its maps and stages are one attention's, the one ``attention=k`` picks
(counted from 1, as the checker names them): a wrapper's one-head softmaxes are stacked as its heads (in a model of
wrappers, each layer's), and a model's layers, each computed from the one before, are never stacked as heads
(:func:`each_attention`).  The views (the app,
``attnviz.show``) draw item 0.  The module is never edited and declares nothing; it runs in the mode (train/eval) it
is in, without gradients.  Its ``module_run.score_width`` is the head_dim the scale is judged by (``score_width``,
the checker's ``scaling`` rule's too): not the width of the recorded q·k where the scores run over an absorbed MLA's
latent or add two products.

Every call of a user's forward goes through ``run_forward``: its exception (named with the file and line of the
user's code it came from), a ``sys.exit`` or a run longer than ``time_limit.SECONDS`` (an endless loop, stopped) is
a one-line ``TraceError``.  A module that holds an
``nn.MultiheadAttention`` runs it on its general path there, the one the recording sees, never on its fast path
(:func:`_general_path`), so every forward of a check computes what the traced one did.  It calls ``forward(x)``, or
``forward(x, x, x)`` when the first three parameters are query, key and value (``nn.MultiheadAttention`` itself).
``forward_output(module, x)`` runs it so, unrecorded, and gives the output as every page reads it (``output_of``).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import numbers
import os
import re
import sys
import traceback
import warnings
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from attnviz import code_places, declarations, time_limit
from attnviz.config import MAX_CONTEXT_LENGTH, MAX_SEED, AttentionConfig, EmptyTextError
from attnviz.producers import book
from attnviz.text import prepare_text
from attnviz.trace import ModuleRun, ScoreWidth, Trace, attention_named, hidden_by_mask, make_trace, to_numpy
from attnviz.words import amount

RECORDED_BYTES = 2 * 2**30  # the tensors one recorded forward may hold (an endless loop's would fill the memory)


class TraceError(ValueError):
    """The module cannot be traced; the message is one line naming the cause."""


class EndlessForwardError(TraceError):
    """A forward of the user's module ran for :data:`attnviz.time_limit.SECONDS` without returning and was stopped."""


class EmptyInputError(TraceError, EmptyTextError):
    """``x`` is empty: a text with no tokens, or a tensor with no item, token or feature.  A TraceError, as every error
    of ``trace_module`` is, and an EmptyTextError, as ``attnviz.run`` raises for the same text."""


@dataclass
class Op:
    """One recorded tensor call."""

    name: str  # "linear", "matmul", "view", "transpose", "softmax", "masked_fill_", "scaled_dot_product_attention" …
    shape: tuple[int, ...]  # the shape of its (first) tensor output
    line: int | None  # the line of the user's file that made the call
    filename: str | None
    stage: str | None = None  # the attnviz stage it produced (attention.STAGES), once known


@dataclass
class Attention:
    """One attention computation found in the forward; tensors are (batch, heads, n_query, n_key|head_dim)."""

    kind: str  # "softmax", "sdpa" or "nn.MultiheadAttention"
    weights: torch.Tensor
    masked: torch.Tensor  # the softmax input: scores after scale and mask (-inf, or very negative, where hidden)
    scores: torch.Tensor | None = None  # Q·Kᵀ before any scale
    scaled: torch.Tensor | None = None  # scores × scale, before the mask
    dropped: torch.Tensor | None = None  # what multiplied V
    queries: torch.Tensor | None = None
    keys: torch.Tensor | None = None  # as used (after a grouped-query repeat)
    values: torch.Tensor | None = None
    context: torch.Tensor | None = None  # dropped @ values
    scale: float | None = None  # what the scores were multiplied by (1/√head_dim expected)
    # the part of ``scale`` given to Q and to K before the product (q * head_dim ** -0.5; 1.0: none)
    operand_scales: tuple[float, float] = (1.0, 1.0)
    # the widths of the two products the scores are the sum of (q₁·k₁ + q₂·k₂: queries and keys are their
    # concatenations, as wide as both together); () when the scores are one product
    summed_widths: tuple[int, ...] = ()
    # the cap of a soft-cap between the scaled scores and the softmax, cap · tanh(s / cap) (Gemma 2's
    # attn_logit_softcapping); None when the scores are not soft-capped
    softcap: float | None = None
    # an attention sink (GPT-OSS): a learned logit per head the softmax runs over beside the keys, its column dropped
    # after it — the sink logits (b, h, nq, 1) as the softmax got them, and the weight each row gave them (b, h, nq, 1),
    # what the weights' row sums fall short of 1 by; None without a sink
    sinks: torch.Tensor | None = None
    sink_weights: torch.Tensor | None = None
    hidden: torch.Tensor | None = None  # bool, True where a call's mask hides the cell (see masked_cells)
    is_causal: bool | None = None  # an SDPA / MultiheadAttention call's flag (None: a softmax the module computed)
    float_mask: bool = False  # an SDPA / MultiheadAttention call's attn_mask, as given, was a float added to the scores
    dropout_p: float = 0.0  # an SDPA / MultiheadAttention call's dropout probability
    # an nn.MultiheadAttention call given is_causal=True, an attn_mask, need_weights=False and no key_padding_mask: its
    # general path then drops the mask and hides the future only, its fast path applies the mask
    mask_dropped_by_hint: bool = False
    dropout_ops: tuple[str, ...] = ()  # dropouts met on the way from Q·Kᵀ to the softmax (before it)
    # the first of those: where it is (" on line 35", "" unknown), and whether it comes "before" or "after" a mask
    # between them ("": no mask there)
    dropout_place: str = ""
    dropout_vs_mask: str = ""
    # the p of the dropout between the softmax and @ V when its own call drops (training=True), 0.0 when it does not
    # (nn.Dropout in eval mode): what it did to its own input, whatever a mask after the softmax did before it
    dropout_after_p: float = 0.0
    softmax_dim: int = -1  # the dimension the softmax normalised (-1: over the keys, as it should)
    # a softmax over another dimension than the keys or the queries, in words ("" for those two): "the softmax on
    # line 30 runs over dim=1 of a (2, 4, 8, 8) tensor (the heads)"
    softmax_over: str = ""
    softmax_over_size: int = 0  # that dimension's size (the heads' number …); 0: none
    # the first call the output is made from that splits (…, n, d) straight into (…, h, n, d / h) heads — a view or
    # reshape without the transpose, which gives each head's position the features of other tokens: "view on line 21"
    heads_split_by: str = ""
    weights_scale: float = 1.0  # what the weights were multiplied by between the softmax and @ V (1: nothing)
    zeroed_after: torch.Tensor | None = None  # bool, True where a mask after the softmax set a weight to 0 (a bug)
    # bool (b, h, nq, 1), True where a head or query mask after the softmax set the whole row to 0 (not a bug: the
    # weights are the softmax's, and those rows of the context are 0)
    rows_zeroed: torch.Tensor | None = None
    lost: str | None = None  # why Q and K, or V, are None: "no Q @ Kᵀ: the exp on line 12 comes before the softmax"
    # why a stage is not recorded, per side: {"scores": "no Q @ Kᵀ before the softmax: …", "context": "no weights …"}
    unrecorded: dict[str, str] = field(default_factory=dict)
    transposed_after: str | None = None  # the call that transposes the weights after the softmax: "the einsum on …"
    # what an SDPA call returned (b, h, nq, dv), or nn.MultiheadAttention (b, nq, E)
    returned: torch.Tensor | None = None
    out_proj: tuple | None = None  # nn.MultiheadAttention's (out_proj weight, bias)
    op_index: int = -1  # the op that produced the weights (Recording.ops)
    context_ops: tuple[int, ...] = ()  # the ops that produced the context: weights @ V, or the fused call
    # the context ops of earlier attentions its weights are computed from, up to the nearest on each path: none for a
    # model's first layer, the layer before's (and those its residual carries) for a later layer — a wrapper's heads,
    # computed from one input, share them, and a later layer's are another set (:func:`stacked_heads`)
    made_from: frozenset[int] = frozenset()

    def masked_cells(self) -> torch.Tensor:
        """bool (b, h, nq, nk): True at every cell the mask hid, the causal triangle's too
        (:func:`attnviz.trace.hidden_by_mask`: −∞, or pushed down from the scaled score by at least 10³ or nk, whichever
        is more, further than a bias reaches; without the scaled scores, at most −(10³ + nk))."""
        if self.hidden is not None:
            return self.hidden.expand(self.masked.shape)
        return hidden_by_mask(self.masked, self.scaled)


@dataclass
class Recording:
    """One recorded forward: every op, the attentions found and the module's output."""

    ops: list[Op]
    attentions: list[Attention]
    output: torch.Tensor
    dropout_calls: list[tuple[int, bool, float]] = field(default_factory=list)  # (op index, training, p)
    # (op index, tensor, the context ops it is made of) of every F.linear input (or x of a product with a weight,
    # x @ W.T: :func:`_by_weight`), then the output (op index len(ops)),
    # that is computed from attention contexts alone (see _context_sources)
    fed_onwards: list[tuple[int, torch.Tensor, frozenset[int]]] = field(default_factory=list)
    triangular_mask: bool = False  # a masked_fill / where, or an SDPA / MultiheadAttention call, had a triangular mask
    triangles: list[tuple[int, str, int]] = field(default_factory=list)  # (op index, "tril"/"triu", its diagonal)
    # (op index, the number, whether the cells are the future) of every masked_fill / where that set the cells of a
    # triangular mask to a number (``masked_fill(mask, 0.0)``, ``-inf``): :func:`_triangle_fill`
    fills: list[tuple[int, float, bool]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the Trace should say about how the attention was read


# -------------------------------------------------------------------- recording

_HERE = os.path.abspath(__file__)
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_MATMULS = {"matmul", "__matmul__", "bmm", "einsum", "baddbmm"}
_SCALES = {"div", "__truediv__", "div_", "mul", "__mul__", "__rmul__", "mul_", "true_divide", "__itruediv__",
           "__imul__"}
_MASKS = {"masked_fill", "masked_fill_", "where", "add", "__add__", "__radd__", "add_", "__iadd__", "sub",
          "__sub__", "sub_"}
_ADDS = {"add", "__add__", "__radd__", "add_", "__iadd__"}  # an add of two score products is one (_summed_operands)
# value-preserving steps between stages (``w.cpu()`` of a tensor on the CPU is ``w`` itself: the calls after it read
# the weights through it)
_PASS = {"contiguous", "float", "to", "type_as", "clone", "detach", "cpu"}
_REGROUPS = {"view", "reshape", "_unsafe_view"}  # they pass when they keep the last two dims (_regroups)
# ops that only move an operand's values about: a scale before them (OPT's q_proj(x) * scaling, then .view(…)
# .transpose(1, 2) and a reshape into (b·h, n, hd)) scales the operand they make
_REARRANGES = {"transpose", "mT", "permute", "T", "t", "view", "reshape", "_unsafe_view", "flatten", "unflatten",
               "view_as", "reshape_as", "squeeze", "unsqueeze"}
_SHAPED_AS = {"view_as", "reshape_as", "expand_as", "type_as"}  # their second tensor gives only a shape or dtype
_CASTS = {"type", "double", "half", "bfloat16"}  # value-preserving when the dtype stays: w.type(v.dtype) in float32
_DROPOUTS = {"dropout", "dropout_", "feature_dropout", "alpha_dropout"}
_SOFTMAXES = {"softmax", "_softmax", "softmax_"}
_DIVIDES = {"div", "__truediv__", "true_divide"}
_TANHS = {"tanh", "tanh_"}  # the middle of a soft-cap, cap · tanh(s / cap) (_softcap)
_CATS = {"cat", "concat", "concatenate"}  # the scores and an attention sink's logits side by side (_sink_operands)
NAIVE_SOFTMAX = "torch.exp(s) / torch.exp(s).sum(dim=-1, keepdim=True)"  # the book's softmax_naive (3.3.1), by rows


class _Node:
    """An output tensor, the call that made it and the nodes of its tensor arguments."""

    __slots__ = ("name", "out", "parents", "args", "kwargs", "children", "index")

    def __init__(self, name, out, parents, args, kwargs, index):
        self.name, self.out, self.parents, self.args, self.kwargs, self.index = name, out, parents, args, kwargs, index
        self.children: list[_Node] = []


def _name(func) -> str:
    name = getattr(func, "__name__", "") or ""
    if name == "__get__":  # a property: Tensor.T, Tensor.mT, Tensor.shape …
        name = getattr(getattr(func, "__self__", None), "__name__", name)
    return name


def _user_line() -> tuple[str | None, int | None]:
    """(file, line) of the innermost frame outside torch and this module: the user's code that made the call."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_TORCH_DIR) and os.path.abspath(filename) != _HERE and "<frozen" not in filename:
            return filename, frame.f_lineno
        frame = frame.f_back
    return None, None


def first_tensor(value):
    """The first tensor in ``value``: itself, or the first found in a tuple, list or dict (by its values, in order:
    ``{"hidden_states": out}``, a Hugging Face output), however nested; None when it holds none."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, dict):
        value = tuple(value.values())
    if isinstance(value, tuple | list):
        for item in value:
            found = first_tensor(item)
            if found is not None:
                return found
    return None


class _Recorder(TorchFunctionMode):
    """Records every tensor call of a forward (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[Op] = []
        self.nodes: dict[int, _Node] = {}  # id(tensor) -> the node that made it (tensors are kept alive by nodes)
        self.softmaxes: list[tuple[_Node, int]] = []  # (node, the dimension it normalised, negative)
        self.other_softmaxes: list[tuple[_Node, int]] = []  # a softmax over an earlier dimension (node, dim ≥ 0)
        self.user_file: str | None = None  # the file of the module's class: a line elsewhere is named with its file
        self.linear_inputs: list[tuple[int, torch.Tensor, _Node | None]] = []  # (op index, input, its node)
        self.triangular_mask = False
        self.triangles: list[tuple[int, str, int]] = []  # every tril / triu call: (op index, name, diagonal)
        self.fills: list[tuple[int, float, bool]] = []  # a triangle's cells set to a number: (op index, it, future?)
        self.fused_calls: list[Attention] = []  # SDPA / MultiheadAttention calls, their stages recomputed
        self.fused_nodes: list[_Node] = []  # their nodes, in the same order
        self.boolean_mha_masks: list[bool] = []  # per nn.MultiheadAttention call: was its attn_mask boolean?
        self.dropout_calls: list[tuple[int, bool, float]] = []
        self.held_bytes = 0  # what the recorded outputs hold, a view counted as a copy

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        if name in ("scaled_dot_product_attention", "multi_head_attention_forward"):
            return self._record_fused_call(name, func, args, kwargs)
        inplace = name.endswith("_") and not name.startswith("_") and args and isinstance(args[0], torch.Tensor)
        before = self.nodes.get(id(args[0])) if inplace else None
        if before is not None:
            before.out = args[0].clone()  # the stage before an in-place op keeps its own values
        out = func(*args, **kwargs)
        tensor = first_tensor(out)
        if tensor is None or name in ("__get__", "shape", "dtype", "device", "grad_fn", "is_nested", "requires_grad"):
            return out
        self.held_bytes += tensor.nbytes
        if self.held_bytes > RECORDED_BYTES:  # before it is kept: what the forward does from here on is not recorded
            raise _TooMuchRecorded
        filename, line = _user_line()
        index = len(self.ops)
        self.ops.append(Op(name, tuple(tensor.shape), line, filename))
        parents = [self.nodes.get(id(a)) for a in _tensor_args(args, kwargs)]
        if before is not None and before not in parents:
            parents.insert(0, before)
        node = _Node(name, tensor, parents, args, kwargs, index)
        for parent in parents:
            if parent is not None:
                parent.children.append(node)
        if isinstance(out, tuple | list):  # split / chunk / unbind: every piece comes from the same input
            for piece in out:
                if isinstance(piece, torch.Tensor):
                    self.nodes[id(piece)] = _Node(name, piece, parents, args, kwargs, index)
        self.nodes[id(tensor)] = node
        if name in _DROPOUTS:
            training = _arg(func, args, kwargs, "training", True)
            self.dropout_calls.append((index, bool(training), float(_arg(func, args, kwargs, "p", 0.5))))
        if name in _DIVIDES and tensor.dim() >= 2 and _exp_over_sum(node):
            self.softmaxes.append((node, -1))  # the book's softmax_naive: a softmax over the keys, written out
        if name in _SOFTMAXES and tensor.dim() >= 2:
            dim = _softmax_dim(func, args, kwargs, tensor.dim())
            if dim is not None and dim >= tensor.dim() - 2:
                self.softmaxes.append((node, dim - tensor.dim()))
            elif dim is not None:
                self.other_softmaxes.append((node, dim))
        if name == "linear" or name in _MATMULS and _by_weight(args):
            self.linear_inputs.append((index, args[0], parents[0] if parents else None))
        if name in ("masked_fill", "masked_fill_", "where") and not self.triangular_mask:
            self.triangular_mask = any(_triangular(a) for a in args[:2] if isinstance(a, torch.Tensor))
        if name in ("masked_fill", "masked_fill_", "where") and (fill := _triangle_fill(name, args, kwargs)):
            self.fills.append((index, *fill))
        if name in ("tril", "triu", "tril_", "triu_"):
            diagonal = kwargs.get("diagonal", args[1] if len(args) > 1 else 0)
            if isinstance(diagonal, int):
                self.triangles.append((index, name.rstrip("_"), diagonal))
        return out

    def forget(self) -> None:
        """Drop every recorded tensor at once (the ops' names and shapes stay): each node lets go of its tensors and
        of the other nodes, whose links both ways are cycles only Python's garbage collector would free, later."""
        seen, stack = set(), list(self.nodes.values())
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack += [parent for parent in node.parents if parent is not None] + node.children
            node.out = node.args = node.kwargs = None
            node.parents, node.children = [], []
        self.nodes.clear()
        self.softmaxes.clear()
        self.other_softmaxes.clear()
        self.linear_inputs.clear()
        self.fused_calls.clear()
        self.fused_nodes.clear()

    def _record_fused_call(self, name, func, args, kwargs):
        """Run an SDPA / MultiheadAttention call, which computes the whole attention in one call and hides its
        weights, and record it as one op with its stages recomputed from the call's own arguments."""
        out = func(*args, **kwargs)
        tensor = first_tensor(out)
        filename, line = _user_line()
        index = len(self.ops)
        self.ops.append(Op(name, tuple(tensor.shape), line, filename, stage="context"))
        attention = (_sdpa(args, kwargs, self.nodes) if name == "scaled_dot_product_attention"
                     else _mha(func, args, kwargs, boolean_mask=bool(self.boolean_mha_masks)
                               and self.boolean_mha_masks.pop()))
        attention.op_index = index
        attention.context_ops = (index,)
        attention.returned = _as_head_maps(tensor) if name == "scaled_dot_product_attention" else (
            tensor.transpose(0, 1) if tensor.dim() == 3 else tensor.unsqueeze(0))  # (L, N, E) -> (N, L, E)
        if attention.context is None:  # SDPA's own result is the context (b, h, nq, dv)
            attention.context = attention.returned
        self.fused_calls.append(attention)
        mask = kwargs.get("attn_mask", args[3] if name == "scaled_dot_product_attention" and len(args) > 3 else None)
        if isinstance(mask, torch.Tensor) and not self.triangular_mask:  # a float mask hides where it is very negative
            self.triangular_mask = _triangular(mask if mask.dtype == torch.bool else hidden_by_mask(mask))
        parents = [self.nodes.get(id(a)) for a in args if isinstance(a, torch.Tensor)]
        node = _Node(name, tensor, parents, args, kwargs, index)
        self.nodes[id(tensor)] = node
        self.fused_nodes.append(node)
        if isinstance(out, tuple):
            for piece in out:
                if isinstance(piece, torch.Tensor):
                    self.nodes[id(piece)] = node
        return out


def _by_weight(args) -> bool:
    """Whether a matmul's arguments are an input and a weight: ``x @ W``, ``x @ W.T`` with ``W`` a parameter
    (Falcon's ``FalconLinear``, a hand-written projection) — a linear layer written as a product."""
    if len(args) != 2 or not all(isinstance(arg, torch.Tensor) for arg in args) or isinstance(args[0], nn.Parameter):
        return False
    weight = args[1]
    return isinstance(weight, nn.Parameter) or (weight._base is not None and isinstance(weight._base, nn.Parameter))


def _arg(func, args, kwargs, name, default):
    """A call's argument by name, positional or keyword (for torch functions with a Python signature)."""
    if name in kwargs:
        return kwargs[name]
    try:
        parameters = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        parameters = {"dropout": ["input", "p", "training", "inplace"]}.get(_name(func), [])
    if name in parameters and parameters.index(name) < len(args):
        return args[parameters.index(name)]
    return default


def _exp_over_sum(node: _Node) -> bool:
    """Whether a division is :data:`NAIVE_SOFTMAX`: ``exp(s)`` over the sum of ``exp(s)`` — the same ``s``, or the
    same ``exp(s)`` — along the last dimension with ``keepdim=True``, which is ``softmax(s, dim=-1)`` exactly."""
    if len(node.parents) != 2 or None in node.parents:
        return False
    numerator, denominator = node.parents
    if numerator.name != "exp" or denominator.name != "sum" or not denominator.parents:
        return False
    summed = denominator.parents[0]  # exp(s) again, or the numerator itself (e / e.sum(…))
    if summed is None or summed.name != "exp" or not summed.args or not numerator.args:
        return False
    if summed is not numerator and summed.args[0] is not numerator.args[0]:
        return False
    args, kwargs = denominator.args, denominator.kwargs
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    dim = dim[0] if isinstance(dim, tuple | list) and len(dim) == 1 else dim
    keepdim = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
    ndim = node.out.dim()
    return isinstance(dim, int) and dim % ndim == ndim - 1 and keepdim is True and numerator.out.shape == node.out.shape


def _softmax_dim(func, args, kwargs, ndim: int) -> int | None:
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    if not isinstance(dim, int):
        return None
    return dim % ndim


CAUSAL_HINT_ERROR = "Need attn_mask if specifying the is_causal hint"  # F.multi_head_attention_forward's words
CAUSAL_HINT_ALONE = ("nn.MultiheadAttention was given is_causal=True without an attn_mask: is_causal only tells it "
                     "that attn_mask is the causal mask, so its general path (training, or with gradients, and every "
                     "forward attnviz runs) raises “Need attn_mask if specifying the is_causal hint”, and its fast "
                     "path (eval mode without gradients) ignores it and hides nothing — every token sees the future. "
                     "Pass the mask too: attn_mask=torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1), "
                     "is_causal=True")


@contextlib.contextmanager
def _noting_mha_masks(module: nn.Module, recorder: _Recorder):
    """While it lasts, each ``nn.MultiheadAttention`` of ``module`` notes in ``recorder.boolean_mha_masks`` whether
    the attn_mask a call gives it is boolean: its forward turns a boolean mask into a float one (−∞ where True)
    before the ``multi_head_attention_forward`` call the recorder reads, which then takes it for a float mask."""
    def note(layer: nn.MultiheadAttention, args, kwargs) -> None:
        try:
            mask = inspect.signature(layer.forward).bind(*args, **kwargs).arguments.get("attn_mask")
        except TypeError:  # the forward raises on these arguments itself
            mask = None
        recorder.boolean_mha_masks.append(isinstance(mask, torch.Tensor) and mask.dtype == torch.bool)

    handles = [layer.register_forward_pre_hook(note, with_kwargs=True) for layer in module.modules()
               if isinstance(layer, nn.MultiheadAttention)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def record(module: nn.Module, x: torch.Tensor, *, tried_first: bool = False, **forward_kwargs) -> Recording:
    """Run ``module(x)`` once, recording every tensor call; raises TraceError when the forward raises (in words when x
    is longer than the context the module says it has, see :func:`module_context`, and runs within it), computes no
    attention over the n tokens of ``x`` (batch, n, d_in) — no softmax or SDPA call whose weights are (…, n, n) —
    or returns anything but one vector per token, (batch, n, d_out).  ``tried_first``: ``x`` is the input attnviz
    tries the module on first to learn its sizes, not the user's, and the words that quote its shape say so."""
    _require_values(module, x)  # before the forward: a failed one is retried on fewer tokens, reading the buffers
    recorder = _Recorder()
    recorder.user_file = class_file(module)
    try:
        try:
            with torch.no_grad(), recorder, _noting_mha_masks(module, recorder):
                output = run_forward(module, x, **forward_kwargs)
        except BaseException:
            recorder.forget()  # an error's traceback holds this frame: it must not keep what the forward recorded
            raise
    except EndlessForwardError:
        raise  # a forward that never returns: running it again on fewer tokens would only wait as long again
    except _TooMuchRecorded:
        raise EndlessForwardError(
            f"{type(module).__name__}.forward made {len(recorder.ops):,} tensor calls whose outputs hold more than "
            f"{RECORDED_BYTES / 2**30:g} GiB without returning (an endless loop?); if it is one forward, trace fewer "
            "tokens or a smaller batch") from None
    except TraceError as error:
        words = None if forward_kwargs else _longer_than_context(module, x)
        if words is None and not isinstance(error, EndlessForwardError):
            words = _other_width(module, x, error)
        if words is None and not isinstance(error, EndlessForwardError):
            words = _unsliced_mask(module, x, error)
        if words is None and _raised_in(error, "multi_head_attention_forward") and CAUSAL_HINT_ERROR in str(error):
            words = CAUSAL_HINT_ALONE
        if words is None and _raised_in(error, "multi_head_attention_forward"):
            batch_first = _not_batch_first(module, x, tried_first=tried_first)
            words = None if batch_first is None else f"{str(error).rstrip('.')} — {batch_first}"
        if words is None:
            raise
        raise TraceError(words) from error
    returned, output = output, output_of(output)
    n = x.shape[-2]  # the tokens given
    maps = [(node, dim) for node, dim in recorder.softmaxes if tuple(node.out.shape[-2:]) == (n, n)]
    made_of = _made_of(recorder.nodes.get(id(output)))
    over_keys = [node for node, dim in maps if dim == -1]
    if not over_keys:  # a softmax over the queries (dim=-2) of an (n, n) map is attention gone wrong: keep it
        over_keys = [node for node, _ in maps]
    elif len(over_keys) < len(maps):  # beside softmaxes over the keys (a model's other layers): if the output needs it
        over_keys = [node for node, dim in maps if dim == -1 or id(node) in made_of]
    sunk = {id(node): sliced for node, dim in recorder.softmaxes  # over n + 1 columns, one dropped after: a sink
            if dim == -1 and tuple(node.out.shape[-2:]) == (n, n + 1) and (sliced := _sink_slice(node)) is not None}
    if not over_keys and sunk:
        over_keys = [node for node, _ in recorder.softmaxes if id(node) in sunk]
        maps = [(node, -1) for node in over_keys]
    across = {}  # a softmax over the heads or the batch of an (n, n) map is attention gone wrong too: kept, named
    if not over_keys and not recorder.fused_calls:
        node, dim = next(((node, dim) for node, dim in recorder.other_softmaxes
                          if tuple(node.out.shape[-2:]) == (n, n)), (None, None))
        if node is not None:
            maps, over_keys = [(node, dim - node.out.dim())], [node]
            shape = tuple(node.out.shape)
            across[id(node)] = (_softmax_over(recorder, node.index, dim, shape, _axis_words(dim, shape, x.shape[0])),
                                node.out.shape[dim])
    dims = {id(node): dim for node, dim in maps}
    found = [_from_softmax(node, recorder, made_of, sunk.get(id(node))) for node in over_keys]
    for attention, node in zip(found, over_keys):
        attention.softmax_dim = dims[id(node)]
        attention.softmax_over, attention.softmax_over_size = across.get(id(node), ("", 0))
    split = _split_without_transpose(recorder, made_of, n)
    fused = [a for a in recorder.fused_calls if tuple(a.weights.shape[-2:]) == (n, n)]
    attentions = sorted([*found, *fused], key=lambda a: a.op_index)
    if not attentions:
        raise TraceError(_no_attention(recorder, x, module, tried_first=tried_first))
    for attention in attentions:
        attention.heads_split_by = split
    _mark_later_layers([*zip(found, over_keys), *((attention, node) for attention, node
                                                  in zip(recorder.fused_calls, recorder.fused_nodes)
                                                  if tuple(attention.weights.shape[-2:]) == (n, n))])
    if not forward_kwargs and any(node.out.dim() >= 4 and node.out.shape[-3] == n for node in over_keys):
        _require_tokens_last(module, x, recorder)  # (…, n, n, n): the tokens, or the heads when there are n of them?
    if output.dim() != 3 or output.shape[0] != x.shape[0] or output.shape[1] != n:
        raise TraceError(f"the forward returned shape {tuple(output.shape)} for an input of shape {tuple(x.shape)}: "
                         f"an attention module returns one vector per token, ({x.shape[0]}, {n}, d_out)"
                         f"{_output_later(returned, x.shape[0], n)}")
    notes = [note for attention in attentions if (note := _fold_heads(attention, x.shape[0], module))][:1]
    notes += [note for attention in attentions if (note := _rows_zeroed_note(attention))][:1]
    notes += [SINK_NOTE for attention in attentions if attention.sink_weights is not None][:1]
    contexts = {index for a in attentions for index in a.context_ops}
    fed_onwards = [(index, tensor, sources) for index, tensor, node in
                   [*recorder.linear_inputs, (len(recorder.ops), output, recorder.nodes.get(id(output)))]
                   if (sources := _context_sources(node, contexts))]
    return Recording(ops=recorder.ops, attentions=attentions, output=output.detach(),
                     dropout_calls=recorder.dropout_calls, fed_onwards=fed_onwards,
                     triangular_mask=recorder.triangular_mask, triangles=recorder.triangles, fills=recorder.fills,
                     notes=notes)


def output_of(returned) -> torch.Tensor:
    """The output every page reads from what a forward returned: its first tensor (:func:`first_tensor`: the output of
    an ``(output, weights)`` tuple, a dict's first value); TraceError when it returned no tensor."""
    output = first_tensor(returned)
    if output is None:
        raise TraceError("the forward returned no tensor")
    return output


def forward_output(module: nn.Module, x: torch.Tensor, **forward_kwargs) -> torch.Tensor:
    """``module``'s output for ``x`` as every page reads it, with nothing recorded: :func:`run_forward` (the calling
    convention, the time limit, the exit guard) and :func:`output_of`.  For a caller that needs only the output."""
    return output_of(run_forward(module, x, **forward_kwargs))


def _output_later(returned, batch: int, n: int) -> str:
    """Words for a returned tuple or list whose first tensor is not one vector per token but a later item is
    (``(weights, output)``): which item, and that attnviz reads the first; "" otherwise."""
    if not isinstance(returned, tuple | list):
        return ""
    for index, item in enumerate(returned):
        found = first_tensor(item)
        if index and found is not None and found.dim() == 3 and tuple(found.shape[:2]) == (batch, n):
            kind = "tuple" if isinstance(returned, tuple) else "list"
            return (f" — item {index} of the {kind} it returned has shape {tuple(found.shape)}: attnviz reads the "
                    "first tensor returned as the output, so return the output first")
    return ""


HEADS_FOLDED = ("weights", "masked", "scores", "scaled", "dropped", "queries", "keys", "values", "context", "hidden",
                "zeroed_after", "rows_zeroed")  # the stages an attention whose heads are folded into the batch unfolds


def _fold_heads(attention: Attention, batch: int, module: nn.Module) -> str | None:
    """Reads an attention computed with the heads folded into the batch — (b·h, n, n) weights, Bloom's and GPT-NeoX's
    ``baddbmm`` / ``bmm`` layout, recorded as b·h items of one head — as (b, h, n, n) when the module declares h
    heads (``num_heads``, ``n_head``, ``n_heads`` …); else says so in a note (None: nothing to read or say)."""
    items = attention.weights.shape[0]
    if attention.weights.shape[1] != 1 or items <= batch or items % batch:
        return None
    heads = declarations.declared_size(module, "num_heads")
    if heads is None or items != batch * heads:
        return (f"The attention weights are {items} maps for {amount(batch, 'item')}: read as {items} items of one "
                "head each; if they are batch × heads (a (b·h, n, n) layout), give the module a num_heads attribute "
                "and they are read as heads.")
    for stage in HEADS_FOLDED:
        tensor = getattr(attention, stage)
        if isinstance(tensor, torch.Tensor) and tensor.dim() == 4 and tensor.shape[1] == 1 and (
                tensor.shape[0] % batch == 0 and tensor.shape[0] > batch):
            setattr(attention, stage, tensor.reshape(batch, -1, *tensor.shape[2:]))  # (b·h, 1, n, m) -> (b, h, n, m)
    return None


SINK_NOTE = ("The softmax runs over the keys and one more column, a learned logit per head that the module drops "
             "after it (an attention sink, as GPT-OSS has): the maps show the weights on the keys, and each row sums "
             "to less than 1 — the rest went to the sink.")


def _rows_zeroed_note(attention: Attention) -> str | None:
    """What the Trace says of a head or query mask the module applies after the softmax (None: it applies none)."""
    rows = attention.rows_zeroed  # (b, h, nq, 1)
    if rows is None or not rows.any():
        return None
    heads = [head for head in range(rows.shape[1]) if bool(rows[:, head].all())]
    if heads:
        names = ", ".join(str(head) for head in heads)
        return (f"{'Heads' if len(heads) > 1 else 'Head'} {names} {'are' if len(heads) > 1 else 'is'} masked to 0 "
                "after the softmax (a head mask): the maps show the weights the softmax gives, and the context of "
                f"{'those heads' if len(heads) > 1 else 'that head'} is 0.")
    return ("Some queries' rows are masked to 0 after the softmax (a query mask): the maps show the weights the "
            "softmax gives, and those queries' context is 0.")


def step_attentions(module: nn.Module, x: torch.Tensor, **forward_kwargs) -> tuple[object, list[Attention]]:
    """Run one forward of ``module`` on ``x`` (batch, q, d_in) — a cached step, whose q queries may attend over more
    keys than q — recording it: (what the forward returned, every attention whose rows are x's q queries, in the
    order the forward computed them — a model's layers: a softmax over the last dimension of a (…, q, k) tensor, or an
    SDPA / MultiheadAttention call), the list empty when it computes none, each with the earlier contexts it is
    computed from, as :func:`record`'s (:func:`stacked_heads` stacks them alike).  A forward that raises is a
    TraceError, as in :func:`run_forward`."""
    recorder = _Recorder()
    try:
        try:
            with torch.no_grad(), recorder, _noting_mha_masks(module, recorder):
                output = run_forward(module, x, what="a cached forward", **forward_kwargs)
        except _TooMuchRecorded:
            raise TraceError("a cached forward recorded too much") from None
        q = x.shape[-2]
        rows = [node for node, dim in recorder.softmaxes if dim == -1 and node.out.shape[-2] == q]
        made_of = _made_of(recorder.nodes.get(id(first_tensor(output))))
        found = [_from_softmax(node, recorder, made_of, _sink_slice(node)) for node in rows]
        fused = [(a, node) for a, node in zip(recorder.fused_calls, recorder.fused_nodes) if a.weights.shape[-2] == q]
        _mark_later_layers([*zip(found, rows), *fused])  # so that stacked_heads stacks them as it stacks record's
        return output, sorted([*found, *(a for a, _ in fused)], key=lambda a: a.op_index)
    finally:
        recorder.forget()


def _mark_later_layers(made_by: list[tuple[Attention, _Node]]) -> None:
    """Set ``made_from`` on each attention: the context ops of the others its weights are computed from — a model's
    later layer, whose input is the layer before's output, has some; heads of one layer, computed from one input,
    have the same.  ``made_by``: each attention with the node of its softmax or fused call."""
    if len(made_by) < 2:
        return
    contexts = {index for attention, _ in made_by for index in attention.context_ops}
    memo: dict[int, frozenset[int]] = {}  # id(node) -> the context ops it is computed from
    for attention, node in made_by:
        attention.made_from = _from_contexts(node, contexts, memo)


def _from_contexts(start: _Node, contexts: set[int], memo: dict[int, frozenset[int]]) -> frozenset[int]:
    """The context ops (op indices in ``contexts``) a tensor ``start`` is computed from, walking back through every
    parent up to the first context on each path; ``memo`` keeps each node's answer for the next walk."""
    stack = [(start, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in memo:
            continue
        parents = [parent for parent in node.parents if parent is not None]
        if expanded:
            found = [frozenset((parent.index,)) if parent.index in contexts else memo[id(parent)]
                     for parent in parents]
            found = [one for one in found if one]
            memo[id(node)] = (frozenset() if not found else found[0] if all(one == found[0] for one in found)
                              else frozenset().union(*found))
        else:
            stack.append((node, True))
            stack.extend((parent, False) for parent in parents if id(parent) not in memo)
    return memo[id(start)]


def _context_sources(node: _Node | None, contexts: set[int]) -> frozenset[int]:
    """The context ops (``weights @ V``, an SDPA call; op indices in ``contexts``) that ``node``'s tensor is computed
    from, when it is computed from them alone: walking back from it reaches a context on every path and no other
    tensor (the input x, a weight, a mask buffer) enters on the way — so a reshape, a transpose, a concatenation of
    the heads or a batch mean of the context counts, and x projected after the softmax, or x + context, does not.
    Empty when it is not."""
    sources, seen, stack = set(), set(), [node]
    while stack:
        current = stack.pop()
        if current is None:
            return frozenset()
        if current.index in contexts:
            sources.add(current.index)
            continue
        if id(current) in seen:
            continue
        seen.add(id(current))
        parents = current.parents[:1] if current.name in _SHAPED_AS else current.parents  # reshape_as(x): x's shape
        parents = [p for p in parents if p is not None] if current.name in _PASS else parents
        if not parents:  # made from no tensor (torch.zeros), or only from tensors it did not record (type_as(x))
            return frozenset()
        stack.extend(parents)
    return frozenset(sources)


def module_context(module: nn.Module) -> tuple[int, str] | None:
    """(c, how attnviz knows) for a module that says its context: a triangular (…, c, c) mask buffer ("its mask
    buffer is 16 × 16") or a size it keeps under a name a constructor gives a context (``context_length``,
    ``block_size``, ``max_position_embeddings`` …: :func:`attnviz.declarations.declared`; "its context_length is 16"),
    the smallest when there are several; None when it says none."""
    found = []
    for name, buffer in module.named_buffers():
        if buffer is not None and not buffer.is_meta and _triangular(buffer.bool()):  # meta: shapes, no values
            c = buffer.shape[-1]
            shape = " × ".join(str(size) for size in buffer.shape)
            found.append((c, f"its {name.rsplit('.', 1)[-1]} buffer is {shape}"))
    declared = declarations.declared(module, "context_length")
    if declared is not None:
        name, value = declared
        found.append((value, f"its {name} is {value}"))
    return min(found, key=lambda item: item[0]) if found else None


def _longer_than_context(module: nn.Module, x: torch.Tensor) -> str | None:
    """Why a forward on ``x`` (batch, n, d_in) raised, in words, when n is more than the context c the module says it
    has and the forward runs on x's first c tokens; None otherwise (then the forward's own error says more)."""
    context = module_context(module)
    n = x.shape[-2]
    if context is None or n <= context[0]:
        return None
    c, how = context
    try:
        with torch.no_grad():
            run_forward(module, x[..., :c, :])
    except TraceError:  # it fails on c tokens too: the length is not the cause
        return None
    return (f"the input is {n} tokens; the module's context is {c} ({how}): use a shorter text or build it with a "
            f"larger {_context_parameter(module)}")


def _context_parameter(module: nn.Module) -> str:
    """The name the module's constructor gives its context (``block_size`` for nanoGPT's, ``context_length`` for the
    book's: :data:`attnviz.declarations.SPELLINGS`), or "context" when it takes none of the usual names."""
    try:
        parameters = inspect.signature(type(module).__init__).parameters
    except (TypeError, ValueError):
        parameters = {}
    return next((name for name in declarations.SPELLINGS["context_length"] if name in parameters), "context")


def _unsliced_mask(module: nn.Module, x: torch.Tensor, error: TraceError) -> str | None:
    """Why a forward on ``x`` (batch, n, d_in) raised, in words, when the error is two sizes that do not match —
    the n tokens and the side of a triangular mask the module keeps (a buffer or attribute, (…, N, N)), N ≠ n: the
    mask used whole, never sliced to the tokens; None otherwise.  The forward's own words follow."""
    n = x.shape[-2]
    sizes = {int(size) for size in re.findall(r"size of tensor \w \((\d+)\)", str(error))}
    if n not in sizes or len(sizes) != 2:
        return None
    side = (sizes - {n}).pop()
    named = [*module.named_buffers(), *((name, value) for name, value in vars(module).items()
                                        if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter))]
    for name, mask in named:
        if mask.dim() >= 2 and tuple(mask.shape[-2:]) == (side, side) and _triangular(mask.bool()):
            return (f"{str(error).rstrip('.')} — the mask self.{name} {tuple(mask.shape)} is used whole: slice it "
                    f"to the tokens, self.{name}[:n, :n] with n = x.shape[1] (whole, it fits only an input of {side} "
                    f"tokens; this one has {n})")
    return None


def _other_width(module: nn.Module, x: torch.Tensor, error: TraceError) -> str | None:
    """Why a forward on ``x`` (batch, n, d_in) raised, in words, when x's width is not the one the first projection
    the forward calls takes (or the module's first ``nn.Linear`` or ``nn.MultiheadAttention``: :func:`_layer_width`);
    None otherwise.  The forward's own words follow."""
    found = _layer_width(module)
    if found is None or found.layer is None or x.shape[-1] == found.width:
        return None
    return (f"x is {x.shape[-1]} wide; {found.layer} takes {found.width}: pass a (batch, n, {found.width}) tensor "
            f"({error})")


def run_forward(module: nn.Module, x: torch.Tensor, *, what: str = "the forward", **forward_kwargs):
    """``module(x, **forward_kwargs)``: the user's forward, whose exception (or ``sys.exit``) is a TraceError in one
    line that begins with ``what`` ("the forward raised …"), and says which rotary tables the forward was not given
    when it takes them with a default of None (Hugging Face's ``position_embeddings``: :func:`_rotary_hint`).

    A forward that calls ``flex_attention`` is a TraceError saying attnviz cannot trace it (:data:`FLEX_ATTENTION`:
    under the recording it goes through TorchDynamo, whose warnings are hidden).

    A forward that runs for :data:`attnviz.time_limit.SECONDS` without returning (a ``while`` loop whose condition
    never changes) is stopped (:func:`attnviz.time_limit.call`: Python code, not one C call that blocks), and the call
    is an :class:`EndlessForwardError`, "MyAttention.forward ran for 60 s without returning (an endless loop?)".

    A forward whose first three parameters are query, key and value (``nn.MultiheadAttention``, the Annotated
    Transformer's) is called as self-attention, ``forward(x, x, x)``; an ``nn.MultiheadAttention`` built without
    ``batch_first`` gets x as (n, batch, d_in) and hands its output back as (batch, n, d_out).  A forward that needs
    another argument (a mask, rotary tables), or a module whose weights are on the meta device, is a TraceError that
    says what to do, before the forward runs; rotary tables it takes with a default of None are named beside them.

    A forward that takes ``use_cache`` and would cache unless told not to (``forward(x, use_cache=True)``, or a
    default of None that reads a config's) is called with ``use_cache=False`` unless ``forward_kwargs`` says: a
    forward attnviz calls without ``use_cache=True`` is an uncached one, and must not add to the module's cache."""
    _require_values(module, x)
    forward_kwargs = {**_uncached(module, forward_kwargs), **forward_kwargs}
    args, sequence_first = _forward_args(module, x, forward_kwargs)
    try:
        with warnings.catch_warnings():  # flex_attention's own, and TorchDynamo's on the way to FLEX_ATTENTION
            warnings.filterwarnings("ignore", message=FLEX_WARNINGS)
            with _general_path(module):
                output = time_limit.call(module, *args, **forward_kwargs)
        return _batch_first(output) if sequence_first else output
    except time_limit.TimeLimitError as out:
        raise _endless(module, forward_kwargs, out.seconds) from None
    except Exception as error:  # the user's forward: any exception is theirs, reported in one line
        if "flex_attention" in str(error) and "Higher Order Operator" in str(error):  # TorchDynamo's Unsupported
            raise TraceError(f"{what} calls {FLEX_ATTENTION}") from error
        raise TraceError(f"{what} raised {time_limit.described(error, _raised_at(error, module))}"
                         f"{_rotary_hint(module, forward_kwargs)}") from error
    except SystemExit as stop:  # sys.exit() in a forward would end the notebook's kernel or the CLI's run
        raise TraceError(f"{what} called {time_limit.exit_call(stop)}: an attention forward returns its output, "
                         "it does not end the program") from None


def _raised_at(error: BaseException, module: nn.Module) -> str:
    """Where in the user's code the module's forward raised ``error``: " (mine.py, line 27)", the traceback's last
    frame in the file of the module's class or of a base class of it (not torch's: ``nn.MultiheadAttention`` is no
    user's code) — the line that raised, or that called the torch function that raised; "" when no frame is in one."""
    error = error.error if isinstance(error, time_limit.RaisedBaseError) else error
    own = set()
    for cls in type(module).__mro__:
        try:
            file = inspect.getsourcefile(cls)
        except (TypeError, OSError):
            continue
        if file is not None and not os.path.abspath(file).startswith(_TORCH_DIR + os.sep):
            own.add(os.path.abspath(file))
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if os.path.abspath(frame.filename) in own]
    return f" ({os.path.basename(frames[-1].filename)}, line {frames[-1].lineno})" if frames else ""


class _AsItIs(TorchFunctionMode):
    """Runs every tensor call as it is.  While it is active, ``torch.overrides.has_torch_function`` is true, which
    keeps ``nn.MultiheadAttention`` (and ``nn.TransformerEncoderLayer``) off their fast path, as the recording does."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


FAST_PATH_LAYERS = (nn.MultiheadAttention, nn.TransformerEncoderLayer)  # torch's layers with a fast path


def _general_path(module: nn.Module):
    """Within it, the ``nn.MultiheadAttention`` layers of ``module`` take their general path, the one the recording
    sees (:class:`_AsItIs`), not the fast path of an eval-mode forward without gradients: the two differ where the
    layer is given ``is_causal=True`` and ``need_weights=False`` with an attn_mask that is not the causal one — the
    general path then hides the future and ignores the mask, the fast path applies the mask —, and a rule comparing a
    forward of its own with the traced one would see that difference as the module's.  Nothing for a module without
    such a layer (within the recording, it passes every call on to the recording's mode)."""
    if not any(isinstance(sub, FAST_PATH_LAYERS) for sub in module.modules()):
        return contextlib.nullcontext()
    return _AsItIs()


def _endless(module: nn.Module, forward_kwargs: dict, seconds: float) -> EndlessForwardError:
    """"MyAttention.forward(use_cache=False) ran for 60 s without returning (an endless loop?)"."""
    call = ", ".join(f"{name}={value!r}" for name, value in forward_kwargs.items())
    return EndlessForwardError(f"{type(module).__name__}.forward{f'({call})' if call else ''} ran for {seconds:g} s "
                               "without returning (an endless loop?)")


def _uncached(module: nn.Module, given: dict) -> dict:
    """``{"use_cache": False}`` for a forward whose ``use_cache`` parameter defaults to anything but False (it caches
    unless told not to) when ``given`` does not set it; else nothing."""
    if "use_cache" in given:
        return {}
    try:
        parameter = inspect.signature(module.forward).parameters.get("use_cache")
    except (TypeError, ValueError):  # a forward without a signature to read: called as it is
        return {}
    if parameter is None or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
        return {}
    return {} if parameter.default is False else {"use_cache": False}


FLEX_ATTENTION = ("flex_attention, which attnviz cannot trace: it runs through TorchDynamo, which cannot follow the "
                  "recording of every tensor call — check an eager version of the module, the same mask through "
                  "scaled_dot_product_attention's attn_mask or softmax(QKᵀ/√d + mask)·V")
FLEX_WARNINGS = r"(flex_attention called without torch\.compile|Dynamo does not know how to trace)"
META_WEIGHTS = ("the module's weights are on the meta device (no values): materialise it "
                "(module.to_empty(device='cpu') and load weights) before tracing")
SELF_ATTENTION_PARAMETERS = (("query", "q"), ("key", "k"), ("value", "v"))  # forward(x, x, x) when these come first
# a forward's rotary tables, which its model computes and hands it (None by default in Hugging Face's layers)
ROTARY_PARAMETERS = ("position_embeddings", "freqs_cis", "rotary_pos_emb", "rope", "cos", "sin")


def _require_values(module: nn.Module, x: torch.Tensor) -> None:
    """TraceError when the module's weights or ``x`` are on the meta device: shapes without values, which no rule
    (and no map) can read."""
    if any(tensor.is_meta for tensor in (*module.parameters(), *module.buffers())):
        raise TraceError(META_WEIGHTS)
    if x.is_meta:
        raise TraceError("x is on the meta device (no values): pass a tensor that holds numbers, on the module's "
                         "device")


def _forward_args(module: nn.Module, x: torch.Tensor, given: dict) -> tuple[tuple[torch.Tensor, ...], bool]:
    """The positional arguments ``run_forward`` calls the forward with — (x,), or (x, x, x) for a query/key/value
    signature — and whether x goes in as (n, batch, d_in) (an ``nn.MultiheadAttention`` without ``batch_first``);
    TraceError naming any other parameter the forward requires that ``given`` does not hold."""
    try:
        parameters = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):  # a forward without a signature to read: called as forward(x)
        return (x,), False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    self_attention = len(positional) >= 3 and all(
        p.name in names for p, names in zip(positional, SELF_ATTENTION_PARAMETERS))
    taken = 3 if self_attention else 1
    required = [p.name for p in positional[taken:] if p.default is p.empty and p.name not in given]
    required += [p.name for p in parameters if p.kind is p.KEYWORD_ONLY and p.default is p.empty
                 and p.name not in given]
    if required and positional:
        call = "forward(x, x, x)" if self_attention else "forward(x)"
        rotary = _rotary_not_given(parameters, given)
        also = f", and {_and(rotary)} {_ROTARY_WORDS}" if rotary else ""
        raise TraceError(f"{type(module).__name__}.forward needs {_and(required)} as well as x{also}: attnviz calls "
                         f"{call} alone: wrap your module so forward(x) builds the {' / '.join(required + rotary)} and "
                         "calls yours (docs/your-module.md shows a wrapper)")
    sequence_first = isinstance(module, nn.MultiheadAttention) and not module.batch_first
    if sequence_first:
        x = x.transpose(0, 1)  # (b, n, d_in) -> (n, b, d_in)
    return (x, x, x) if self_attention else (x,), sequence_first


_ROTARY_WORDS = "if it rotates q and k (the rotary cos and sin its model computes; None by default)"


def _and(names: list[str]) -> str:
    """"mask", "mask and cos", "mask, cos and sin"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _rotary_not_given(parameters, given) -> list[str]:
    """The forward's rotary-table parameters (:data:`ROTARY_PARAMETERS`) that default to None and ``given`` lacks."""
    return [p.name for p in parameters if p.name in ROTARY_PARAMETERS and p.default is None and p.name not in given]


def _rotary_hint(module: nn.Module, given: dict) -> str:
    """" — its position_embeddings was not given …" for a forward that raised with rotary tables left None; else ""."""
    try:
        parameters = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return ""
    rotary = _rotary_not_given(parameters, given)
    if not rotary:
        return ""
    return (f" — {_and(rotary)} {'was' if len(rotary) == 1 else 'were'} not given (None), which a rotary layer needs: "
            f"wrap your module so forward(x) computes the rotary cos and sin and passes them "
            "(docs/your-module.md shows a wrapper)")


def _batch_first(output):
    """An ``nn.MultiheadAttention`` output without ``batch_first``, (n, b, d_out) first, as (b, n, d_out) first."""
    if isinstance(output, tuple) and output and isinstance(output[0], torch.Tensor):
        return (output[0].transpose(0, 1), *output[1:])  # (n, b, d_out) -> (b, n, d_out)
    return output


class _TooMuchRecorded(time_limit.StopCall):
    """What the recorder raises in a forward whose recorded outputs pass ``RECORDED_BYTES`` (a BaseException: ``except
    Exception`` passes it)."""


def _untransposed(shape: tuple[int, ...], n: int, tokens_dim: int, place: str,
                  fewer: tuple[int, ...] | None = None) -> str:
    """Words for a softmax of ``shape`` whose last two dims are not the ``n`` tokens, which are its dim
    ``tokens_dim``: the heads split with view and never transposed; ``fewer``: its shape on one token fewer, which
    tells it when there are as many heads as tokens."""
    heads = shape[-1]
    told = (f"its last two dims are ({heads}, {heads}), not the {n} tokens, which are its dim {tokens_dim}"
            if fewer is None else
            f"its last two dims are the {heads} heads, not the {n} tokens (as many here), which are its dim "
            f"{tokens_dim}: on {n - 1} tokens it gives {fewer}")
    return (f"the softmax{place} gives {shape}: {told} — q, k and v were split into heads with .view(b, n, heads, "
            "head_dim) and never transposed, so the scores are heads × heads for each token: add .transpose(1, 2) to "
            "make them (b, heads, n, head_dim) before q @ k.transpose(-2, -1) (and transpose the context back before "
            "merging the heads)")


def _heads_before_keys(shape: tuple[int, ...], place: str) -> str:
    """Words for a softmax of ``shape`` (…, n, heads, n): the queries, then the heads, then the keys (DeepSeek-V3's
    ``"bsht"`` scores), where attnviz reads (…, heads, queries, keys)."""
    heads, queries, keys = amount(shape[-2], "head"), amount(shape[-3], "query", "queries"), amount(shape[-1], "key")
    return (f"the softmax{place} gives {shape}: (batch, queries, heads, keys), the {heads} between the {queries} and "
            f"the {keys} (DeepSeek-V3's einsum layout \"bsht\"); attnviz reads "
            "attention weights as (batch, heads, queries, keys): compute the scores as \"bhst\" (einsum "
            "\"bshc,btc->bhst\", or .transpose(1, 2) before the mask and the softmax, and the weights' layout to match "
            "when they multiply V)")


def _require_tokens_last(module: nn.Module, x: torch.Tensor, recorder: _Recorder) -> None:
    """For a softmax over (…, n, n, n) — as many heads as tokens —: one more forward on one token fewer tells
    whether its last two dims follow the tokens (attention) or stay n (heads × heads of each token: q split into
    heads with view and not transposed, a TraceError naming it).  A probe that raises says nothing."""
    n = x.shape[-2]
    cube = next((node for node, _ in recorder.softmaxes if node.out.dim() >= 4 and node.out.shape[-3] == n), None)
    if n < 2 or cube is None:
        return
    probe = _Recorder()
    try:
        with torch.no_grad(), probe:
            run_forward(module, x[:, :-1])
    except (KeyboardInterrupt, EndlessForwardError):
        raise
    except BaseException:  # noqa: BLE001  the probe's own failure settles nothing
        return
    finally:
        shapes = [tuple(node.out.shape) for node, _ in probe.softmaxes]
        probe.forget()
    fewer = next((shape for shape in shapes if len(shape) >= 4 and shape[-3] == n - 1 and shape[-2:] == (n, n)), None)
    if fewer is not None:
        shape = tuple(cube.out.shape)
        raise TraceError(_untransposed(shape, n, len(shape) - 3, _place(recorder, cube.index), fewer))
    if any(len(shape) >= 4 and shape[-3:] == (n - 1, n, n - 1) for shape in shapes):  # (…, queries, heads, keys)
        raise TraceError(_heads_before_keys(tuple(cube.out.shape), _place(recorder, cube.index)))


_SPLITS = {"view", "reshape", "unflatten"}


def _split_without_transpose(recorder: _Recorder, made_of: set[int], n: int) -> str:
    """The first call among those the output is made from (``made_of``: :func:`_made_of`) that reshapes a (…, n, d)
    tensor straight into (…, h, n, d / h) — heads split without ``view(…, n, h, d / h).transpose(1, 2)``, which puts
    the features of h consecutive tokens where one token's head should be —, as :func:`_call` words it ("view on line
    21"); "" when there is none.  Not for h = n (then the shapes cannot tell it from a right split) or h = 1."""
    for node in sorted(recorder.nodes.values(), key=lambda node: node.index):
        before = node.args[0] if node.args and isinstance(node.args[0], torch.Tensor) else None
        if node.name not in _SPLITS or id(node) not in made_of or before is None:
            continue
        after = node.out
        if (before.dim() >= 3 and after.dim() == before.dim() + 1 and before.shape[:-2] == after.shape[:-3]
                and before.shape[-2] == after.shape[-2] == n and after.shape[-3] not in (1, n)
                and after.shape[-3] * after.shape[-1] == before.shape[-1]):
            return _call(recorder, node)
    return ""


def _axis_words(dim: int, shape: tuple, batch: int) -> str:
    """What dimension ``dim`` (≥ 0) of an (…, n, n) map of ``shape`` holds, for a softmax over it: "the batch", "the
    heads" (of a (…, b, h, n, n) map), or "the batch and the heads folded together" (a (b·h, n, n) one); "" else."""
    axes = {}
    if len(shape) >= 4:  # (…, b, h, n, n)
        axes = {len(shape) - 4: "the batch", len(shape) - 3: "the heads"}
    elif len(shape) == 3:  # (b, n, n): one head's, or the heads folded into the batch
        axes = {0: "the batch" if shape[0] == batch else "the batch and the heads folded together"}
    return axes.get(dim % len(shape), "")


def _softmax_over(recorder: _Recorder, index: int, dim: int, shape: tuple, axis: str) -> str:
    """A softmax over another dimension than the keys, in words: "the softmax on line 30 runs over dim=1 of a (2, 4,
    8, 8) tensor (the heads)" (``axis``: :func:`_axis_words`, "" for none)."""
    held = f" ({axis})" if axis else ""
    return f"the softmax{_place(recorder, index)} runs over dim={dim} of a {shape} tensor{held}"


def _no_attention(recorder: _Recorder, x: torch.Tensor, module: nn.Module | None = None, *,
                  tried_first: bool = False) -> str:
    """Why a forward has no attention over the n tokens of ``x`` (batch, n, d_in): no softmax or SDPA call at all,
    or only ones whose weights are not (…, n, n) — the first named with its shape and line, or an
    ``nn.MultiheadAttention`` of ``module`` built without ``batch_first=True`` (:func:`_not_batch_first`)."""
    n = x.shape[-2]
    seen = [(node.index, "softmax", tuple(node.out.shape)) for node, _ in recorder.softmaxes]
    seen += [(a.op_index, a.kind, tuple(a.weights.shape)) for a in recorder.fused_calls]
    across = [(node.index, dim, tuple(node.out.shape)) for node, dim in recorder.other_softmaxes]
    maps = [softmax for softmax in across if softmax[2][-2:] == (n, n)]  # (…, n, n) scores, normalised elsewhere
    if maps or (across and not seen):
        index, dim, shape = min(maps or across)
        axis = _axis_words(dim, shape, x.shape[0]) if maps else ""
        return (f"no attention found: {_softmax_over(recorder, index, dim, shape, axis)}; attention's softmax runs "
                "over the keys, dim=-1")
    if not seen:
        written = any(op.name == "exp" for op in recorder.ops)  # a softmax written out some other way
        return ("no attention found: the forward computed no softmax over the last dimension and called no "
                "scaled_dot_product_attention or nn.MultiheadAttention" + (
                    f" (a hand-written softmax is read only as {NAIVE_SOFTMAX}: use torch.softmax(s, dim=-1))"
                    if written else ""))
    index, kind, shape = min(seen)
    if kind == "softmax" and len(shape) >= 4 and shape[-3] == n and shape[-1] == shape[-2] != n:
        return _untransposed(shape, n, len(shape) - 3, _place(recorder, index))
    if kind == "softmax" and len(shape) >= 4 and shape[-3] == shape[-1] == n:
        return _heads_before_keys(shape, _place(recorder, index))
    if kind == "nn.MultiheadAttention" and shape[0] == n and shape[-1] == x.shape[0]:  # (n, h, batch, batch)
        batch_first = _not_batch_first(module, x, _place(recorder, index), tried_first=tried_first)
        if batch_first is not None:
            return batch_first
    sink = ""
    if kind == "softmax" and shape[-2:] == (n, n + 1):
        sink = (" — a softmax over the n keys and one more column: an attention sink (GPT-OSS) is read when that "
                "column is dropped right after the softmax, probs[..., :-1] or probs[..., 1:]")
    return (f"attention weights must have shape (..., n, n), one row per query and one column per key: (..., {n}, "
            f"{n}) for an input of shape {tuple(x.shape)}; the {kind}{_place(recorder, index)} gives {shape}{sink}")


def _not_batch_first(module: nn.Module | None, x: torch.Tensor, where: str = "", *,
                     tried_first: bool = False) -> str | None:
    """Words for an ``nn.MultiheadAttention`` in ``module`` built without ``batch_first=True``: it reads ``x``
    (batch, n, d) as batch tokens of n items ("the nn.MultiheadAttention on line 12 (self.mha) has batch_first=False,
    …"); None when the module has none, or x's batch and tokens are as many (then nothing tells them apart).
    ``tried_first``: see :func:`record`."""
    if module is None or x.shape[0] == x.shape[1]:
        return None
    names = [name for name, sub in module.named_modules()
             if isinstance(sub, nn.MultiheadAttention) and not sub.batch_first]
    if not names:
        return None
    return not_batch_first_words(names[0], tuple(x.shape), where, tried_first=tried_first)


def not_batch_first_words(name: str, shape: tuple[int, ...], where: str = "", *, items_mixed: bool = False,
                          tried_first: bool = False) -> str:
    """The words for an ``nn.MultiheadAttention`` built without ``batch_first=True``, which reads an input of
    ``shape`` (batch, n, d) as batch tokens of n items: ``name`` is its attribute in the module ("" for the module
    itself), ``where`` its line (" on line 12").  ``items_mixed``: the items were seen attending across each other,
    and none moved with ``batch_first=True`` set (the batch-independence rule's evidence).  ``tried_first``: the
    input is the one attnviz tries the module on first to learn its sizes (:func:`record`), named so — not "your"
    input, whose shape it is not."""
    attribute = f" (self.{name})" if name else ""
    batch, n = shape[:2]
    seen = ""
    if items_mixed:
        same = " (your batch is as long as your sequence, so no shape shows it)" if batch == n else ""
        seen = f" and attends across the items{same}; with batch_first=True no item moves"
    read = (f"the {tuple(shape)} input attnviz tries it on first as {amount(batch, 'token')} × {amount(n, 'item')}, "
            "and your text the same way" if tried_first else
            f"your {tuple(shape)} input as {amount(batch, 'token')} × {amount(n, 'item')}")
    return (f"the nn.MultiheadAttention{where}{attribute} has batch_first=False, so it reads {read}{seen}: build it "
            "with batch_first=True (or pass it (n, batch, d))")


def _raised_in(error: BaseException, function: str) -> bool:
    """Whether the exception behind ``error`` (its cause) was raised inside a call of ``function``."""
    cause = error.__cause__
    traceback = cause.__traceback__ if cause is not None else None
    while traceback is not None:
        if traceback.tb_frame.f_code.co_name == function:
            return True
        traceback = traceback.tb_next
    return False


def _triangle_fill(name: str, args, kwargs) -> tuple[float, bool] | None:
    """(the number, whether the cells are the future: above the diagonal) of a ``masked_fill(mask, value)`` or a
    ``where(cond, x, value)`` / ``where(cond, value, x)`` that sets the cells of a triangular boolean mask
    (:func:`_triangular`) to a number; None for any other call."""
    if name == "where":
        if len(args) < 3 or not isinstance(args[0], torch.Tensor):
            return None
        condition, kept, value = args[0], args[1], args[2]
        if isinstance(kept, int | float) or isinstance(kept, torch.Tensor) and kept.dim() == 0:  # where(mask, 0, s)
            cells = condition
            value = kept
        else:  # where(keep, s, 0): the cells the condition leaves out
            cells = ~condition if condition.dtype == torch.bool else condition
    else:
        cells = args[1] if len(args) > 1 else kwargs.get("mask")
        value = args[2] if len(args) > 2 else kwargs.get("value")
    if isinstance(value, torch.Tensor) and value.dim() == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float) or not isinstance(cells, torch.Tensor):
        return None
    if not _triangular(cells):
        return None
    square = cells.reshape(-1, *cells.shape[-2:])[0]  # (n, n)
    future = torch.ones(square.shape, dtype=torch.bool, device=square.device).triu(1)  # (n, n)
    return float(value), torch.equal(square, future)


def _triangular(tensor: torch.Tensor) -> bool:
    """A boolean (…, n, n) mask that is strictly upper (hide the future) or lower triangular (keep the past)."""
    if tensor.dtype != torch.bool or tensor.dim() < 2 or tensor.shape[-1] != tensor.shape[-2] or tensor.shape[-1] < 2:
        return False
    square = tensor.reshape(-1, *tensor.shape[-2:])[0]  # (n, n)
    n = square.shape[-1]
    ones = torch.ones(n, n, dtype=torch.bool, device=square.device)
    return any(torch.equal(square, ones.triu(k)) or torch.equal(square, ones.tril(-k)) for k in (0, 1, 2))


# -------------------------------------------------------------------- a softmax's stages

def _made_of(node: _Node | None) -> set[int]:
    """The ids of the nodes ``node``'s tensor is computed from, itself included (every path back through the parents):
    for the output's node, every call the output depends on — not a copy of the weights kept on the side."""
    made_of, stack = set(), [node]
    while stack:
        current = stack.pop()
        if current is None or id(current) in made_of:
            continue
        made_of.add(id(current))
        stack.extend(current.parents)
    return made_of


def _from_softmax(node: _Node, recorder: _Recorder, made_of: set[int] = frozenset(),
                  sliced: tuple[_Node, int] | None = None) -> Attention:
    """The attention a softmax's ``node`` computes: back from its input to Q @ Kᵀ, on from its output to
    ``weights @ V`` (:func:`_forward_to_values`, along the calls in ``made_of``, the ids of the nodes the output is made
    from, where there are some).  ``sliced``: an attention sink's (:func:`_sink_slice`) — the weights are the slice
    that drops the sink's column, and the walk back passes the concatenation of the scores and the sink logits."""
    weights = node.out  # (…, nq, nk)
    masked_node = node.parents[0] if node.parents else None
    masked = masked_node.out if masked_node is not None else node.args[0]
    if node.name in _DIVIDES:  # NAIVE_SOFTMAX: its input is the exp's
        masked = masked_node.args[0]
        masked_node = masked_node.parents[0] if masked_node.parents else None
    sinks, sink_weights, walked_from = None, None, node
    if sliced is not None:
        walked_from, column = sliced
        keys = weights.shape[-1] - 1
        kept = slice(0, keys) if column == -1 else slice(1, keys + 1)
        sink_weights = weights[..., column:][..., :1]  # (…, nq, 1)
        weights, masked = walked_from.out, masked[..., kept]  # (…, nq, nk)
    softcap = None
    chain, matmul, current, summed = [], None, masked_node, None
    while current is not None:  # back through the mask, a soft-cap and the scale to Q @ Kᵀ
        if current.name in _MATMULS or (summed := _summed_operands(current)) is not None:
            matmul = current  # the product, or the add of two products (q₁·k₁ + q₂·k₂)
            break
        # a soft-cap between the scaled scores and the softmax, as Gemma 2 caps: one with a scale after it caps other
        # scores than the reference's (the walk stops at its tanh)
        capped = None if softcap is not None or any(link.name in _SCALES for link in chain) else _softcap(current)
        if capped is not None:  # cap · tanh(s / cap): on to s
            softcap, current = capped
            continue
        if sliced is not None and sinks is None and (joined := _sink_operands(current, weights.shape[-1])) is not None:
            sinks, current = joined  # [scores | sink logits]: on to the scores
            continue
        unscaled = current.name in _SCALES and _scalar(current) is None
        if unscaled or not (current.name in _SCALES | _MASKS | _DROPOUTS or _passes(current) or _regroups(current)
                            or _float_cast(current)):
            break
        chain.append(current)
        current = _tensor_parent(current)
    lost = None if matmul is not None or current is None else (
        f"no Q @ Kᵀ before the softmax: the {_call(recorder, current)} comes between them")
    attention = Attention(kind="softmax", weights=_as_head_maps(weights), masked=_as_head_maps(masked),
                          op_index=walked_from.index, dropout_ops=tuple(n.name for n in chain if n.name in _DROPOUTS))
    drops = [k for k, link in enumerate(chain) if link.name in _DROPOUTS]  # the chain runs from the softmax back
    if drops:
        masks = [k for k, link in enumerate(chain) if link.name in _MASKS]
        attention.dropout_place = _place(recorder, chain[drops[-1]].index)
        attention.dropout_vs_mask = ("" if not masks else "before" if min(masks) < drops[-1] else "after")
    if sliced is not None:
        attention.sink_weights = _as_head_maps(sink_weights)
        attention.sinks = None if sinks is None else _as_head_maps(sinks)
    recorder.ops[walked_from.index].stage = "weights"
    operands = None if matmul is None else summed[:4] if summed is not None else _matmul_operands(matmul)
    if matmul is not None and operands is None:
        lost = f"the {_call(recorder, matmul)} before the softmax could not be read as Q @ Kᵀ"
        matmul = None
    if matmul is not None:
        queries, keys, scale, operand_scales = operands
        computed = matmul.name == "baddbmm" or operand_scales != (1.0, 1.0) or scale != 1.0
        for link in chain:
            if link.name in _SCALES:
                scale *= _scalar(link)
        attention.scores = _as_head_maps(matmul.out)
        # baddbmm's out is beta · input + alpha · Q @ Kᵀ (the mask is added in the same call); a Q or K scaled before
        # the product (or a product scaled before it is added to another) makes it Q·Kᵀ × their scale: the scores are
        # the unscaled Q and K's product, as the stages say
        if computed:
            attention.scores = _as_head_maps(queries @ keys.transpose(-2, -1))  # (…, nq, d) @ (…, d, nk)
        attention.scale, attention.operand_scales, attention.softcap = scale, operand_scales, softcap
        attention.summed_widths = () if summed is None else summed[4]
        attention.queries, attention.keys = _as_head_maps(queries), _as_head_maps(keys)
        recorder.ops[matmul.index].stage = "scores"
        attention.scaled = _scaled(chain, attention.scores, scale, recorder)
        if computed and not any(link.name in _SCALES for link in chain):
            attention.scaled = attention.scores * scale  # (b, h, nq, nk): the scaled product, before the added mask
        if any(link.name in _MASKS for link in chain):
            recorder.ops[chain[0].index].stage = "masked"
    forward = _forward_to_values(walked_from, made_of)
    attention.weights_scale = forward.factor
    if forward.context is None and forward.stop is not None:
        attention.unrecorded["context"] = (f"no weights @ V after the softmax: the {_call(recorder, forward.stop)} "
                                           "acts on the weights first")
    if lost:
        attention.unrecorded["scores"] = lost
    attention.lost = lost or attention.unrecorded.get("context")
    if forward.renormalised is not None:  # masked after the softmax, then each row divided by its sum: the weights
        attention.weights = _as_head_maps(forward.renormalised.out)
        attention.hidden = _as_head_maps(forward.zeroed)
        recorder.ops[forward.renormalised.index].stage = "weights"
    elif forward.zeroed is not None:
        attention.zeroed_after = _as_head_maps(forward.zeroed)
    if forward.rows is not None:
        attention.rows_zeroed = _as_head_maps(forward.rows)
    dropped = forward.dropped
    attention.dropped = attention.weights
    if dropped is not None:
        attention.dropped = _as_head_maps(dropped.out) / forward.before_dropout
        recorder.ops[dropped.index].stage = "dropped"
        call = next((call for call in recorder.dropout_calls if call[0] == dropped.index), None)
        attention.dropout_after_p = call[2] if call is not None and call[1] else 0.0
    operands = None if forward.context is None else _values_operand(forward.context, forward.fed)
    transposes = next((node for node in (forward.context, forward.stop) if node is not None
                       and _transposes(node, walked_from.out)), None)
    if transposes is not None and operands is None:
        attention.transposed_after = f"the {_call(recorder, transposes)}"
        attention.unrecorded["context"] = (f"{attention.transposed_after} transposes the weights after the softmax "
                                           "— each column sums to 1, not each row")
        attention.lost = lost or attention.unrecorded["context"]
    elif operands is None and forward.context is not None:
        attention.unrecorded["context"] = (f"the {_call(recorder, forward.context)} after the softmax could not be "
                                           "read as weights @ V")
        attention.lost = attention.lost or attention.unrecorded["context"]
    if operands is not None:
        values, context = operands
        attention.values = _as_head_maps(values)
        attention.context = _as_head_maps(context)
        attention.context_ops = (forward.context.index,)
        recorder.ops[forward.context.index].stage = "context"
    _same_layout(attention)
    return attention


def _transposes(node: _Node, weights: torch.Tensor) -> bool:
    """Whether ``node`` turns the softmax's ``weights`` (…, nq, nk) into their transpose, query and key swapped
    (``einsum("bhqk->bhkq", w)``, ``w.transpose(-1, -2)``): a square map that is not symmetric."""
    flipped = weights.transpose(-2, -1)  # (…, nk, nq)
    return (weights.shape[-1] == weights.shape[-2] and node.out.shape == flipped.shape
            and torch.equal(node.out, flipped) and not torch.equal(node.out, weights))


def _same_layout(attention: Attention) -> None:
    """Gives every stage the weights' (b, h) when it holds the same maps grouped otherwise: a view between Q @ Kᵀ and
    the softmax, or between the softmax and weights @ V (Bloom's (b·h, n, n) scores viewed as (b, h, n, n)), leaves
    the stages on its far side as (b·h, 1, …); they are read as (b, h, …) — b·h in that order, as the view makes it."""
    items, heads = attention.weights.shape[:2]
    for stage in HEADS_FOLDED:
        tensor = getattr(attention, stage)
        if isinstance(tensor, torch.Tensor) and tensor.dim() == 4 and tuple(tensor.shape[:2]) != (items, heads) and (
                tensor.shape[0] * tensor.shape[1] == items * heads):
            setattr(attention, stage, tensor.reshape(items, heads, *tensor.shape[2:]))  # (b·h, 1, n, m) -> (b, h, …)


def _scaled(chain: list[_Node], scores: torch.Tensor, scale: float, recorder: _Recorder) -> torch.Tensor:
    """The scores after the scale and before the mask: the module's own tensor when it scales before masking
    (the usual order), else computed (scores × scale)."""
    from_scores = list(reversed(chain))  # matmul side first
    prefix = []
    for link in from_scores:
        if link.name in _MASKS or link.name in _DROPOUTS:
            break
        prefix.append(link)
    if not any(link.name in _SCALES for link in chain):
        return scores
    if all(link in prefix for link in chain if link.name in _SCALES):
        last = [link for link in prefix if link.name in _SCALES][-1]
        recorder.ops[last.index].stage = "scaled"
        return _as_head_maps(last.out)
    return scores * scale  # (b, h, nq, nk)


def _softcap(node: _Node) -> tuple[float, _Node | None] | None:
    """(the cap, the node of the scores it caps) when ``node`` ends a soft-cap, cap · tanh(s / cap) — Gemma 2's
    ``torch.tanh(s / cap) * cap``, or ``s = s / cap; s = torch.tanh(s); s = s * cap``, or ``s * (1 / cap)`` first:
    a multiply by a number whose input is a tanh of the scores divided by that same number; else None."""
    cap = _scalar(node) if node.name in _SCALES else None
    tanh = _tensor_parent(node) if cap else None
    if tanh is None or tanh.name not in _TANHS:
        return None
    divide = _tensor_parent(tanh)
    inward = _scalar(divide) if divide is not None and divide.name in _SCALES else None
    if inward is None or not math.isclose(cap * inward, 1.0, rel_tol=1e-6) or cap <= 0:
        return None
    return cap, _tensor_parent(divide)


def _sink_slice(node: _Node) -> tuple[_Node, int] | None:
    """(the slice, the sink's column: -1 or 0) when a softmax ``node`` over the keys and one more column is followed
    by a slice that drops that column, first or last — an attention sink (GPT-OSS's learned logit per head,
    ``probs[..., :-1]``): the slice is the attention's weights; else None."""
    out = node.out  # (…, nq, nk + 1)
    if out.dim() < 2 or out.shape[-1] < 2:
        return None
    for child in node.children:
        if child.parents[:1] != [node] or tuple(child.out.shape) != (*out.shape[:-1], out.shape[-1] - 1):
            continue
        for column, kept in ((-1, out[..., :-1]), (0, out[..., 1:])):  # (…, nq, nk)
            if torch.equal(child.out, kept):
                return child, column
    return None


def _sink_operands(node: _Node, keys: int) -> tuple[torch.Tensor, _Node | None] | None:
    """(the sink logits (…, nq, 1), the node of the scores (…, nq, ``keys``)) when ``node`` concatenates the scores
    and one column of sink logits along the last dimension (``torch.cat([scores, sinks], dim=-1)``); else None."""
    if node.name not in _CATS:
        return None
    pairs = list(zip(node.parents, _tensor_args(node.args, node.kwargs)))
    if len(pairs) != 2 or any(arg.shape[:-1] != node.out.shape[:-1] for _, arg in pairs):
        return None
    if sorted(arg.shape[-1] for _, arg in pairs) != [1, keys]:
        return None
    scores = next(parent for parent, arg in pairs if arg.shape[-1] == keys)
    sinks = next(arg for _, arg in pairs if arg.shape[-1] == 1)  # (…, nq, 1)
    return sinks, scores


def _tensor_args(args, kwargs) -> list[torch.Tensor]:
    """A call's tensor arguments in order, those inside a list or tuple argument included (``torch.cat([a, b])``)."""
    found = []
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, tuple | list):
            found.extend(item for item in value if isinstance(item, torch.Tensor))
    return found


def _tensor_parent(node: _Node) -> _Node | None:
    """The parent that carries the scores: of a ``where``, the operand that is neither the boolean condition nor the
    fill (a number, a one-element tensor, a tensor of one value); else the first tensor argument that is at least
    2-d and map-shaped."""
    tensor_args = _tensor_args(node.args, node.kwargs)
    if node.name == "where":
        operands = [(parent, arg) for parent, arg in zip(node.parents, tensor_args)
                    if parent is not None and arg.dtype != torch.bool and not _one_value(arg)]
        if operands:
            return next((parent for parent, arg in operands if arg.shape[-2:] == node.out.shape[-2:]), operands[0][0])
    for parent, arg in zip(node.parents, tensor_args):
        if parent is not None and arg.dim() >= 2 and arg.shape[-2:] == node.out.shape[-2:]:
            return parent
    return next((p for p in node.parents if p is not None), None)


def _one_value(tensor: torch.Tensor) -> bool:
    """A fill: a tensor holding one value (−∞ everywhere, an ``IGNORE`` buffer, ``zeros_like``)."""
    flat = tensor.reshape(-1)  # (numel,)
    return flat.numel() <= 1 or bool((flat == flat[0]).all()) or bool(flat.isnan().all())


def _passes(node: _Node) -> bool:
    """A step that keeps its input's values: a reshape-free copy, or a cast to the dtype the tensor already has."""
    if node.name in _PASS:
        return True
    source = first_tensor(node.args)
    return node.name in _CASTS and source is not None and node.out.dtype == source.dtype


def _float_cast(node: _Node) -> bool:
    """A cast from one floating dtype to another (``s.half()`` before the softmax): it rounds the scores, and keeps
    what they are — the walk back from the softmax reads the scale and Q @ Kᵀ through it."""
    source = first_tensor(node.args)
    return (node.name in _CASTS and source is not None and source.is_floating_point()
            and node.out.is_floating_point())


def _regroups(node: _Node) -> bool:
    """A ``view`` / ``reshape`` that only splits or merges the dims before the last two, keeping them: Bloom's and
    GPT-NeoX's (b·h, n, n) scores viewed as (b, h, n, n) for the mask and the softmax, and back for ``bmm``."""
    source = first_tensor(node.args)
    return (node.name in _REGROUPS and source is not None and node.out.dim() >= 2 and source.dim() >= 2
            and tuple(node.out.shape[-2:]) == tuple(source.shape[-2:]))


def _keeps_values(node: _Node, parent: _Node) -> bool:
    """A ``where`` whose scores operand is ``parent`` and that changes none of its values but NaN (TransformerLens'
    ``torch.where(torch.isnan(pattern), torch.zeros_like(pattern), pattern)``)."""
    if node.name != "where" or _tensor_parent(node) is not parent or node.out.shape != parent.out.shape:
        return False
    before = parent.out
    return node.out.dtype == before.dtype and torch.equal(torch.where(before.isnan(), node.out, before), node.out)


def _scalar(node: _Node) -> float | None:
    """The number a multiply/divide applies (``x / 8``, ``x * 0.125``, ``8 ** -0.5 * x``), as a multiplier."""
    numbers = [a for a in (*node.args, *node.kwargs.values()) if isinstance(a, int | float) and not isinstance(a, bool)]
    numbers += [a.item() for a in (*node.args, *node.kwargs.values()) if isinstance(a, torch.Tensor) and a.numel() == 1]
    if len(numbers) != 1:
        return None
    value = float(numbers[0])
    divide = node.name in ("div", "__truediv__", "div_", "true_divide", "__itruediv__")
    return (1.0 / value if value else None) if divide else value


def _matmul_operands(matmul: _Node) -> tuple[torch.Tensor, torch.Tensor, float, tuple[float, float]] | None:
    """(queries (…, nq, d), keys (…, nk, d), the scale the product applies with what the queries and keys were
    multiplied by before it, and those two numbers (:func:`_operand_scale`) — the queries and keys returned before
    them, so that the scores are their product and the scale is what scaled it) of ``Q @ Kᵀ`` — a
    matmul, ``bmm``, ``baddbmm`` (its ``alpha`` is a scale; ``beta`` only weighs the mask or bias it adds) or an
    ``einsum`` of any layout, read from its equation; both in the product's own batch dims (an operand broadcast
    over them, grouped-query keys (b, g, 1, n, d) against queries (b, g, h/g, n, d), expanded: :func:`_broadcast`).
    None when an einsum is not one query and one key operand contracted over one dimension."""
    tensors = _tensor_args(matmul.args, matmul.kwargs)
    parents = list(matmul.parents) or [None] * len(tensors)
    if matmul.name == "baddbmm":  # baddbmm(input, batch1, batch2), any of them perhaps by name
        named = dict(zip(("input", "batch1", "batch2"), matmul.args))
        named.update({key: value for key, value in matmul.kwargs.items() if key in ("input", "batch1", "batch2")})
        by_id = {id(tensor): parent for tensor, parent in zip(tensors, parents)}
        tensors = [named.get("batch1"), named.get("batch2")]
        if not all(isinstance(tensor, torch.Tensor) for tensor in tensors):
            return None
        parents = [by_id.get(id(tensor)) for tensor in tensors]
    if len(tensors) != 2:
        return None
    batch = matmul.out.shape[:-2]
    if matmul.name == "einsum":
        read = _einsum_scores(matmul, tensors)
        if read is None:
            return None
        query_index, arrange_queries, arrange_keys = read
    else:
        query_index = 0
        arrange_queries = lambda queries: queries  # noqa: E731
        arrange_keys = lambda keys: keys.transpose(-2, -1)  # noqa: E731  (…, d, nk) -> (…, nk, d)
    scale = float(matmul.kwargs.get("alpha", 1.0)) if matmul.name == "baddbmm" else 1.0
    queries, keys = tensors[query_index], tensors[1 - query_index]
    factors = [_operand_scale(node) for node in parents[:2]]
    query_factor, key_factor = factors[query_index], factors[1 - query_index]
    queries, keys = _unscaled(queries, query_factor), _unscaled(keys, key_factor)  # (Whisper's: each × hd ** -0.25)
    scale *= query_factor * key_factor
    return (_broadcast(arrange_queries(queries), batch), _broadcast(arrange_keys(keys), batch, fewer=True), scale,
            (query_factor, key_factor))


def _summed_operands(add: _Node) -> tuple[torch.Tensor, torch.Tensor, float, tuple[float, float],
                                          tuple[int, int]] | None:
    """:func:`_matmul_operands`' (queries, keys, scale, operand scales), and the two widths, of scores that are the sum
    of two products, q₁·k₁ + q₂·k₂: DeepSeek-V3's absorbed MLA adding its decoupled rotary scores to its latent ones,
    Transformer-XL's content and position terms.  They are one product of the concatenations along the last dimension,
    queries [Q₁ | Q₂] (…, nq, d₁ + d₂) and keys [K₁ | K₂] (…, nk, d₁ + d₂), both in the products' batch dims (keys
    shared by query heads kept as few only when both products share them).  Each operand of the add is reached back
    through a scale by a number, a cast or a view to a product :func:`_matmul_operands` reads (not ``baddbmm``, which
    adds a third term), both giving the same (…, nq, nk) shape; the first product's scale is the scale, and what the
    second is scaled by relative to it is folded into Q₂, so that the concatenated Q·Kᵀ × scale is the sum.  None
    when the add is not of two such products (an added mask or bias)."""
    tensors = _tensor_args(add.args, add.kwargs)
    if add.name not in _ADDS or len(tensors) != 2 or len(add.parents) != 2 or add.kwargs.get("alpha", 1) != 1:
        return None
    products = []
    for node in add.parents:
        factor = 1.0  # what the product is multiplied by between it and the add
        while node is not None and (_scalar_scale(node) or _passes(node) or _float_cast(node) or _regroups(node)):
            factor *= _scalar(node) if node.name in _SCALES else 1.0
            node = _tensor_parent(node)
        operands = None if node is None or node.name not in _MATMULS - {"baddbmm"} else _matmul_operands(node)
        if operands is None:
            return None
        products.append((node.out.shape, *operands[:2], operands[2] * factor, operands[3]))
    (shape, q1, k1, scale, by1), (other, q2, k2, scale2, by2) = products
    if shape != other or q1.shape[:-1] != q2.shape[:-1]:
        return None
    if k1.shape[:-1] != k2.shape[:-1]:  # grouped-query keys in one product only: both per query head
        k1, k2 = _broadcast(k1, shape[:-2]), _broadcast(k2, shape[:-2])  # (…, nk, d₁), (…, nk, d₂)
        if k1.shape[:-1] != k2.shape[:-1]:
            return None
    q2 = q2 if scale2 == scale else q2 * (scale2 / scale)  # (…, nq, d₂): q₂·k₂ × s₂ = (q₂ × s₂/s₁)·k₂ × s₁
    return (torch.cat([q1, q2], dim=-1), torch.cat([k1, k2], dim=-1), scale,  # (…, nq, d₁ + d₂), (…, nk, d₁ + d₂)
            by1 if by1 == by2 else (1.0, 1.0), (q1.shape[-1], q2.shape[-1]))


def _unscaled(operand: torch.Tensor, factor: float) -> torch.Tensor:
    """A Q or K operand as it was before it was multiplied by ``factor``."""
    return operand if factor == 1.0 else operand / factor


def _operand_scale(node: _Node | None) -> float:
    """The number a Q or K operand was multiplied by on its way to the product (1.0: none): a multiply or divide by a
    number (:func:`_scalar`) reached back through steps that only move its values about (OPT's ``q_proj(x) *
    scaling`` viewed and transposed into heads: :func:`_before_rearranges`) and through a rotation (rotary applied
    after the scale, lucidrains' ``rope(q * scale)``: :func:`_rotation_inputs`), which keeps the scale — it turns
    each pair of a row by an angle, so c·q turned is c times q turned.  A step that changes a row's norm otherwise (a
    norm of q after its scale undoes it) ends the walk."""
    walked = _rearranged_from(node)
    found = walked[-1] if walked else None
    if found is not None and not _scalar_scale(found):
        found = next((source for rotated in _rotation_inputs(found, [step.out for step in walked])
                      if _scalar_scale(source := _before_rearranges(rotated))), found)
    return _scalar(found) if _scalar_scale(found) else 1.0


def _scalar_scale(node: _Node | None) -> bool:
    """A multiply or divide by a number other than 0."""
    return node is not None and node.name in _SCALES and bool(_scalar(node))


def _before_rearranges(node: _Node | None) -> _Node | None:
    """The node ``node``'s values come from, back through the steps that only move them about (:data:`_REARRANGES`,
    :func:`_passes`)."""
    walked = _rearranged_from(node)
    return walked[-1] if walked else None


def _rearranged_from(node: _Node | None) -> list[_Node]:
    """``node`` and the nodes before it back through the steps that only move its values about (:data:`_REARRANGES`,
    :func:`_passes`), the last one the first that does more (or has no recorded parent: none then)."""
    walked = []
    while node is not None:
        walked.append(node)
        if not (_passes(node) or node.name in _REARRANGES):
            return walked
        node = None if not node.parents else node.parents[0] if node.name in _SHAPED_AS else _tensor_parent(node)
    return []


ROTATION_SEARCH = 48  # the ancestors of a Q or K operand searched for the tensor a rotation turned


def _rotation_inputs(node: _Node, views: list[torch.Tensor]):
    """The ancestors of ``node``, nearest first, that a rotation may have turned into it: the shape of ``node`` or of
    one of ``views`` (the operand it becomes, moved about: GPT-J's pairs stacked, then flattened) and the same norm
    along the last dimension in every row (rotary turns each pair of a row by an angle — Llama's halves, GPT-J's
    neighbours, a complex product viewed as real pairs, a part of the row left as it is — which keeps each row's
    norm).  The search stays after the projections: it does not go back past a product or a linear layer."""
    if node.name in _STOPS:
        return
    norms = {tuple(view.shape): view.float().norm(dim=-1) for view in (*views, node.out)  # (…, n) each
             if isinstance(view, torch.Tensor) and view.is_floating_point() and view.dim() >= 2}
    seen, queue = {id(node)}, [parent for parent in node.parents if parent is not None]
    while queue and len(seen) <= ROTATION_SEARCH:
        current = queue.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        out = current.out
        if (isinstance(out, torch.Tensor) and tuple(out.shape) in norms and out.is_floating_point()
                and torch.allclose(out.float().norm(dim=-1), norms[tuple(out.shape)], rtol=1e-4, atol=1e-6)):
            yield current
        if current.name not in _STOPS:
            queue += [parent for parent in current.parents if parent is not None]


_STOPS = _MATMULS | _SOFTMAXES | {"linear", "scaled_dot_product_attention", "multi_head_attention_forward"}


def _broadcast(tensor: torch.Tensor, batch: tuple[int, ...] | torch.Size, *, fewer: bool = False) -> torch.Tensor:
    """``tensor`` (…, n, d), an operand of a product whose batch dims are ``batch``, expanded to them; with ``fewer``
    (keys, values) left as it is when its heads, folded (:func:`_as_head_maps`), are the expanded ones'
    ``repeat_interleave``'s (grouped-query K/V heads the Trace keeps as few as they are: query head h reads K/V head
    h ÷ (heads ÷ K/V heads))."""
    if tuple(tensor.shape[:-2]) == tuple(batch) or len(batch) < tensor.dim() - 2:
        return tensor
    try:
        expanded = tensor.expand(*batch, *tensor.shape[-2:])  # (*batch, n, d)
    except RuntimeError:
        return tensor
    if fewer and tensor.dim() == expanded.dim() and tensor.shape[0] == expanded.shape[0]:
        mine, theirs = _as_head_maps(tensor), _as_head_maps(expanded)  # (b, g, n, d), (b, h, n, d)
        heads, groups = theirs.shape[1], mine.shape[1]
        if heads % groups == 0 and torch.equal(mine.repeat_interleave(heads // groups, dim=1), theirs):
            return tensor
    return expanded


def _einsum_subscripts(node: _Node, tensors: list[torch.Tensor]) -> tuple[list[str], str] | None:
    """(each operand's subscripts, the output's) of an einsum call, an ellipsis spelled out as letters; None when
    the equation does not fit its operands or repeats a letter within one operand."""
    equation = node.args[0] if node.args else None
    if not isinstance(equation, str):
        return None
    equation = equation.replace(" ", "")
    inputs, arrow, output = equation.partition("->")
    specs = inputs.split(",")
    if len(specs) != len(tensors):
        return None
    if not arrow:  # implicit output: the letters used once, in alphabetical order
        letters = "".join(specs).replace(".", "")
        output = ("..." if "..." in inputs else "") + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in equation]
    widths = [tensor.dim() - len(spec.replace("...", "")) for spec, tensor in zip(specs, tensors) if "..." in spec]
    ellipsis = "".join(free[:max(widths, default=0)])
    specs = [spec.replace("...", ellipsis[len(ellipsis) - (tensor.dim() - len(spec) + 3):] if "..." in spec else "")
             for spec, tensor in zip(specs, tensors)]
    output = output.replace("...", ellipsis)
    if any(len(spec) != tensor.dim() or len(set(spec)) != len(spec) for spec, tensor in zip(specs, tensors)):
        return None
    return specs, output


def _arranged(tensor: torch.Tensor, spec: str, letters: str) -> torch.Tensor:
    """``tensor`` indexed by ``spec`` as dims ``letters``, in that order: a letter it lacks a dim of size 1 (a
    broadcast), every letter of ``spec`` among ``letters``."""
    order = [spec.index(c) for c in letters if c in spec]
    moved = tensor.permute(*order)
    shape = [tensor.shape[spec.index(c)] if c in spec else 1 for c in letters]
    return moved.reshape(shape)


def _einsum_scores(node: _Node, tensors: list[torch.Tensor]):
    """(which operand holds the queries, then functions arranging the queries operand as (…, i, d) and the keys
    operand as (…, j, d) in the output's batch letters) for an einsum whose output ends in (i, j): one operand has i,
    the other j, and they are contracted over one letter d; None otherwise."""
    read = _einsum_subscripts(node, tensors)
    if read is None or len(read[1]) < 2:
        return None
    (first, second), output = read
    batch, i, j = output[:-2], output[-2], output[-1]
    contracted = [c for c in first if c in second and c not in output]
    if len(contracted) != 1:
        return None
    d = contracted[0]
    for query_index, (q_spec, k_spec) in enumerate(((first, second), (second, first))):
        if i in q_spec and j not in q_spec and j in k_spec and i not in k_spec and (
                set(q_spec) <= set(batch + i + d) and set(k_spec) <= set(batch + j + d)):
            return (query_index, lambda q, q_spec=q_spec: _arranged(q, q_spec, batch + i + d),
                    lambda k, k_spec=k_spec: _arranged(k, k_spec, batch + j + d))
    return None


def _values_operand(context_node: _Node, weights_node: _Node) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(the values (…, nk, dv) in the weights' batch dims, the context (…, nq, dv)) of ``weights @ V``, the
    product ``context_node`` makes of ``weights_node``'s weights (…, nq, nk): a matmul or ``bmm`` with the weights
    first, or an ``einsum`` of any layout whose weights operand is indexed (…, i, j), contracted over j with the values
    alone; None when it is not one of those."""
    tensors = _tensor_args(context_node.args, context_node.kwargs)
    weights = weights_node.out
    batch = weights.shape[:-2]
    if context_node.name != "einsum":
        if len(tensors) != 2 or context_node.parents[:1] != [weights_node]:
            return None
        return _broadcast(tensors[1], batch, fewer=True), context_node.out
    if len(tensors) != 2 or context_node.parents.count(weights_node) != 1:
        return None
    read = _einsum_subscripts(context_node, tensors)
    if read is None:
        return None
    specs, output = read
    weights_index = context_node.parents.index(weights_node)
    w_spec, v_spec = specs[weights_index], specs[1 - weights_index]
    batch_letters, i, j = w_spec[:-2], w_spec[-2], w_spec[-1]
    width = [c for c in v_spec if c not in w_spec]
    if j not in v_spec or j in output or i in v_spec or len(width) != 1 or (
            [c for c in w_spec if c in v_spec and c not in output] != [j]) or (
            set(output) != set(batch_letters + i + width[0])):
        return None
    d = width[0]
    values = _arranged(tensors[1 - weights_index], v_spec, batch_letters + j + d)  # (…, nk, dv)
    return _broadcast(values, batch, fewer=True), _arranged(context_node.out, output, batch_letters + i + d)


@dataclass
class _Forward:
    """What lies between a softmax and ``weights @ V`` (:func:`_forward_to_values`)."""

    dropped: _Node | None = None  # the dropout after the softmax
    context: _Node | None = None  # the weights @ V product
    factor: float = 1.0  # what the weights were multiplied by on the way (softmax(s) / √d @ v, a bug)
    before_dropout: float = 1.0  # the part of ``factor`` applied before the dropout
    stop: _Node | None = None  # the call the walk stopped at, when it reached no product
    fed: _Node | None = None  # the node whose tensor the product took as its weights
    zeroed: torch.Tensor | None = None  # bool, True where a mask after the softmax set a weight to 0
    rows: torch.Tensor | None = None  # bool (…, nq, 1), True where a head or query mask set the whole row to 0
    renormalised: _Node | None = None  # the division of the masked weights by their row sums that followed


def _forward_to_values(node: _Node, made_of: set[int] = frozenset()) -> _Forward:
    """The walk from the softmax's output to the ``weights @ V`` product, through a dropout, a cast, a NaN → 0
    ``where``, a ``view`` / ``reshape`` that keeps the last two dims, a number the weights are multiplied by, and a
    mask applied after the softmax (``masked_fill(mask, 0)``, ``where(keep, w, 0)``, ``w * keep`` with a 0/1 tensor,
    ``w.tril()``) —
    then perhaps a division of each row by its sum (``w / w.sum(-1, keepdim=True)``: a roundabout correct mask); no
    product when anything else acts on the way.  A mask that zeroes whole rows only (GPT-2's ``w * head_mask``, a
    (…, h, 1, 1) multiplier; a (…, nq, 1) query mask) or nothing (all ones) is no bug: the walk goes on through it.
    Where some of the calls made from the weights are in ``made_of`` (the ids of the nodes the module's output is made
    from), the walk follows those alone: a copy kept on the side (``self.last_attn_weights = w.detach()``,
    ``w.clone()``, ``w.cpu()``, ``self.maps.append(w.detach())``), whatever order it comes in, changes nothing."""
    found, current = _Forward(), node
    for _ in range(12):
        unchanged = next((child for child in current.children if _keeps_values(child, current)), None)
        if unchanged is not None:  # a NaN -> 0 where, whose condition and fill are made from the weights first
            current = unchanged
            continue
        following = [child for child in current.children if child.args and (
            child.parents[:1] == [current] or child.name in ("einsum", "where") and current in child.parents)]
        following = [child for child in following if id(child) in made_of] or following  # not a copy kept aside
        if not following:
            break
        child = next((child for child in following if found.zeroed is not None and found.renormalised is None
                      and _row_sums_divide(child, current)), following[0])  # w / w.sum(…): the sum comes first
        if child.name in _MATMULS:
            found.context, found.fed = child, current
            break
        zeroed = _zeroed(child, current)
        if child.name in _DROPOUTS:
            found.dropped, found.before_dropout = child, found.factor
        elif child.name in _SCALES and _scalar(child) is not None:
            found.factor *= _scalar(child)
        elif zeroed is not None and not zeroed.any():
            pass  # a mask that hides nothing (a padding mask with no padding): the weights go on as they are
        elif zeroed is not None and _whole_rows(zeroed):  # a head or query mask: read through it
            rows = zeroed[..., :1]  # (…, nq, 1)
            found.rows = rows if found.rows is None else found.rows | rows
        elif zeroed is not None and found.renormalised is None:
            found.zeroed = zeroed if found.zeroed is None else found.zeroed | zeroed
        elif found.zeroed is not None and found.renormalised is None and _row_sums_divide(child, current):
            found.renormalised = child
        elif not (_passes(child) or _regroups(child)):
            found.stop = following[-1]  # the last call made from it: w / w.sum()'s /
            break
        current = child
    return found


def _zeroed(node: _Node, weights: _Node) -> torch.Tensor | None:
    """bool, the weights' shape: the cells ``node`` sets to 0 when it masks ``weights`` — ``masked_fill(mask, 0)``,
    ``where(keep, weights, 0)`` / ``where(hide, 0, weights)``, ``weights * keep`` with a tensor of 0s and 1s,
    ``weights.tril()`` / ``torch.triu(weights, k)`` —, all False when it hides nothing, or only weights that are 0
    already (a ``tril()`` after a softmax whose input the mask already hid: the same weights go on); None when it is
    none of those."""
    shape = weights.out.shape
    hidden = None
    if node.name in ("masked_fill", "masked_fill_") and len(node.args) >= 3:
        mask, fill = node.args[1], node.args[2]
        fill = fill.item() if isinstance(fill, torch.Tensor) and fill.numel() == 1 else fill
        if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and fill == 0:
            hidden = mask
    elif node.name == "where" and len(node.args) == 3 and isinstance(node.args[0], torch.Tensor):
        condition, kept, other = node.args
        if condition.dtype == torch.bool and kept is weights.out and _zero(other):
            hidden = ~condition
        elif condition.dtype == torch.bool and other is weights.out and _zero(kept):
            hidden = condition
    elif node.name in ("mul", "__mul__", "__rmul__", "mul_", "__imul__") and _scalar(node) is None:
        others = [arg for arg in _tensor_args(node.args, node.kwargs) if arg is not weights.out]
        if len(others) == 1 and bool(((others[0] == 0) | (others[0] == 1)).all()):
            hidden = others[0] == 0
    elif node.name in ("tril", "triu", "tril_", "triu_") and node.args and node.args[0] is weights.out:
        diagonal = node.kwargs.get("diagonal", node.args[1] if len(node.args) > 1 else 0)
        if isinstance(diagonal, int):
            ones = torch.ones(shape[-2:], dtype=torch.bool, device=weights.out.device)  # (nq, nk)
            hidden = ones.triu(diagonal + 1) if node.name.startswith("tril") else ones.tril(diagonal - 1)
    if hidden is None:
        return None
    try:
        hidden = hidden.expand(shape)
    except RuntimeError:
        return None
    if not (hidden & (weights.out != 0)).any():  # every cell it sets to 0 is 0 already
        return torch.zeros_like(hidden)
    return hidden


def _whole_rows(hidden: torch.Tensor) -> bool:
    """Whether a mask after the softmax (bool (…, nq, nk)) hides each row whole or not at all: a head or query mask,
    not the mask-after-softmax bug (which hides some cells of a row and keeps others)."""
    rows = hidden.all(dim=-1, keepdim=True)  # (…, nq, 1)
    return torch.equal(hidden, rows.expand_as(hidden))


def _zero(value) -> bool:
    """A fill of 0: the number, or a tensor holding only 0."""
    if isinstance(value, torch.Tensor):
        return _one_value(value) and value.numel() > 0 and value.reshape(-1)[0].item() == 0
    return isinstance(value, int | float) and value == 0


def _row_sums_divide(node: _Node, weights: _Node) -> bool:
    """Whether ``node`` divides ``weights`` by their own sums over the last dimension (kept as a dimension)."""
    if node.name not in ("div", "__truediv__", "div_", "true_divide", "__itruediv__") or len(node.args) < 2:
        return False
    divisor = node.parents[1] if len(node.parents) > 1 else None
    return (divisor is not None and divisor.name == "sum" and divisor.parents[:1] == [weights]
            and tuple(divisor.out.shape) == (*weights.out.shape[:-1], 1))


_OPERATORS = {"__truediv__": "/", "div": "/", "__mul__": "*", "mul": "*", "__rmul__": "*", "__add__": "+",
              "add": "+", "__radd__": "+", "__sub__": "-", "sub": "-", "__matmul__": "@", "matmul": "@"}


def _call(recorder: _Recorder, node: _Node) -> str:
    """A recorded call as the user wrote it: "/ on line 12" (an operator), "exp on line 12" (a function), "type on
    line 66 of transformers/models/gpt2/modeling_gpt2.py" (a line outside the module's own file)."""
    return _OPERATORS.get(node.name, node.name) + _place(recorder, node.index)


def _place(recorder: _Recorder, index: int) -> str:
    """Where op ``index`` of a recording was made, in words (:func:`op_place`)."""
    return op_place(recorder.ops[index], recorder.user_file)


def op_place(op: Op, own_file: str | None) -> str:
    """An op's place in words, the one naming of a source line: " on line 12" for a line of the module's own file
    (``own_file``: :func:`class_file`), " on line 66 of transformers/models/gpt2/modeling_gpt2.py" for one elsewhere
    (:func:`_shown_file`), "" where the line is not known."""
    if op.line is None:
        return ""
    same = op.filename is not None and own_file is not None and (
        os.path.abspath(op.filename) == os.path.abspath(own_file))
    return f" on line {op.line}" + ("" if same or op.filename is None else f" of {_shown_file(op.filename)}")


def _shown_file(filename: str) -> str:
    """A file as an import names it: relative to the deepest ``sys.path`` folder holding it
    ("transformers/models/gpt2/modeling_gpt2.py"), else its name."""
    path = os.path.abspath(filename)
    folders = [os.path.abspath(folder or os.curdir) for folder in sys.path if isinstance(folder, str)]
    holding = [folder for folder in folders if path.startswith(folder.rstrip(os.sep) + os.sep)]
    return os.path.relpath(path, max(holding, key=len)) if holding else os.path.basename(path)


def class_file(module: nn.Module) -> str | None:
    """The file that defines the module's class (None when Python cannot tell)."""
    try:
        return inspect.getsourcefile(type(module))
    except (TypeError, OSError):
        return None


def _as_head_maps(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` detached, as (b, h, n, m) maps: (n, m) -> (1, 1, n, m); (b, n, m) -> (b, 1, n, m);
    (b, h, n, m) as is; more dims fold into heads."""
    tensor = tensor.detach()
    if tensor.dim() == 2:
        return tensor[None, None]
    if tensor.dim() == 3:
        return tensor[:, None]
    return tensor.reshape(tensor.shape[0], -1, *tensor.shape[-2:])


# -------------------------------------------------------------------- calls that hide their weights

def _recomputed_attention(kind, queries, keys, values, hidden, additive, scale, *, is_causal, dropout_p) -> Attention:
    """The stages of softmax(mask(Q·Kᵀ·scale))·V computed explicitly (tensors (b, h, n, d)); SDPA's in float32 from
    float16 or bfloat16 Q and K, as its kernels compute the scores and the softmax (the Attention keeps Q, K and V in
    the dtype the module gave them)."""
    upcast = kind == "sdpa" and queries.dtype in (torch.float16, torch.bfloat16)
    scores = (queries.float() @ keys.float().transpose(-2, -1) if upcast
              else queries @ keys.transpose(-2, -1))  # (b, h, nq, d) @ (b, h, d, nk) -> (b, h, nq, nk)
    scaled = scores * scale  # (b, h, nq, nk)
    if upcast and additive is not None:
        additive = additive.float()  # (…, nq, nk)
    masked = scaled if additive is None else scaled + additive  # (b, h, nq, nk)
    if hidden is not None:
        masked = masked.masked_fill(hidden, -torch.inf)  # (b, h, nq, nk)
    weights = torch.softmax(masked, dim=-1)  # (b, h, nq, nk)
    context = None if kind == "sdpa" else weights @ values  # (b, h, nq, nk) @ (b, h, nk, dv) -> (b, h, nq, dv)
    if hidden is not None and additive is not None:
        hidden = hidden | hidden_by_mask(additive)
    elif additive is not None:
        hidden = hidden_by_mask(additive)
    return Attention(kind=kind, weights=weights, masked=masked, scores=scores, scaled=scaled, dropped=weights,
                     queries=queries, keys=keys, values=values, context=context, scale=scale, hidden=hidden,
                     is_causal=is_causal, dropout_p=dropout_p, float_mask=additive is not None)


def _sdpa(args, kwargs, nodes: dict[int, _Node] | None = None) -> Attention:
    """An SDPA call's stages; ``nodes``: the recorder's, to read a scale the module gave q or k before the call
    (:func:`_operand_scale`), which scales the scores as the call's own ``scale`` does: the stages keep q and k from
    before it and the scale holds both."""
    bound = inspect.signature(_SDPA_SIGNATURE).bind(*args, **kwargs).arguments
    query, key, value = bound["query"], bound["key"], bound["value"]
    lead = query.shape[:-2]
    queries, keys, values = (t.reshape(-1 if t.dim() > 2 else 1, *t.shape[-3:-2] or (1,), *t.shape[-2:])
                             for t in (query, key, value))
    operand_scales = tuple(_operand_scale((nodes or {}).get(id(t))) for t in (query, key))
    queries, keys = _unscaled(queries, operand_scales[0]), _unscaled(keys, operand_scales[1])  # (b, h, n, d) each
    if bound.get("enable_gqa") and keys.shape[1] != queries.shape[1]:
        repeat = queries.shape[1] // keys.shape[1]
        keys = keys.repeat_interleave(repeat, dim=1)  # (b, hkv, nk, d) -> (b, h, nk, d)
        values = values.repeat_interleave(repeat, dim=1)
    nq, nk = queries.shape[-2], keys.shape[-2]
    scale = bound.get("scale")
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    scale *= operand_scales[0] * operand_scales[1]
    hidden, additive = None, None
    is_causal = bool(bound.get("is_causal", False))
    if is_causal:
        hidden = torch.ones(nq, nk, dtype=torch.bool, device=query.device).tril().logical_not()  # (nq, nk)
    mask = bound.get("attn_mask")
    if mask is not None:
        mask = mask.reshape(*(mask.shape if mask.dim() <= 2 else (-1, *mask.shape[-3:])))
        if mask.dtype == torch.bool:  # SDPA: True = takes part
            hidden = ~mask if hidden is None else hidden | ~mask
        else:
            additive = mask
    del lead
    attention = _recomputed_attention("sdpa", queries, keys, values, hidden, additive, scale, is_causal=is_causal,
                                      dropout_p=float(bound.get("dropout_p", 0.0)))
    attention.operand_scales = operand_scales
    return attention


def _SDPA_SIGNATURE(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """The documented signature of ``F.scaled_dot_product_attention`` (the builtin has none to inspect)."""


def _mha(func, args, kwargs, *, boolean_mask: bool = False) -> Attention:
    """The attention of an ``F.multi_head_attention_forward`` call.  ``boolean_mask``: the attn_mask the
    ``nn.MultiheadAttention`` was given is boolean (:func:`_noting_mha_masks`), which its forward hands on as a float
    mask, −∞ where True: it is read as the boolean mask it was."""
    bound = inspect.signature(func).bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    query, key, value, heads = a["query"], a["key"], a["value"], a["num_heads"]
    batched = query.dim() == 3
    if not batched:  # (L, E) -> (L, 1, E)
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
    if a["use_separate_proj_weight"]:
        weights = (a["q_proj_weight"], a["k_proj_weight"], a["v_proj_weight"])
    else:
        weights = a["in_proj_weight"].chunk(3)
    biases = a["in_proj_bias"].chunk(3) if a["in_proj_bias"] is not None else (None, None, None)
    projected = [F.linear(t, w, b) for t, w, b in zip((query, key, value), weights, biases)]  # (L, N, E) each
    length, batch, embed = projected[0].shape
    head_dim = embed // heads
    queries, keys, values = (t.reshape(t.shape[0], batch, heads, head_dim).permute(1, 2, 0, 3) for t in projected)
    nq, nk = queries.shape[-2], keys.shape[-2]
    hidden, additive = None, None
    mask = a["attn_mask"]
    if mask is not None:
        mask = mask.reshape(batch, heads, nq, nk) if mask.dim() == 3 else mask  # (N·h, L, S) -> (N, h, L, S)
        if mask.dtype == torch.bool or boolean_mask:  # nn.MultiheadAttention: True = may NOT attend
            hidden = mask if mask.dtype == torch.bool else mask.isneginf()
        else:
            additive = mask
    elif a["is_causal"]:
        hidden = torch.ones(nq, nk, dtype=torch.bool).triu(1)
    padding = a["key_padding_mask"]
    if padding is not None:
        pad = padding.bool() if padding.dtype == torch.bool else hidden_by_mask(padding)
        pad = pad[:, None, None, :]  # (N, S) -> (N, 1, 1, S)
        hidden = pad if hidden is None else hidden | pad
    attention = _recomputed_attention("nn.MultiheadAttention", queries, keys, values, hidden, additive,
                                    1.0 / math.sqrt(head_dim), is_causal=bool(a["is_causal"]),
                                    dropout_p=float(a["dropout_p"]) if a["training"] else 0.0)
    attention.out_proj = (a["out_proj_weight"], a["out_proj_bias"])
    attention.mask_dropped_by_hint = bool(mask is not None and a["is_causal"] and padding is None
                                          and not a["need_weights"])
    return attention


# -------------------------------------------------------------------- a Trace

@dataclass(frozen=True)
class InputWidth:
    """An input width attnviz reads off a module (:func:`input_width`) and where, in words: ``source`` follows the
    width ("x was (2, 8, 64): the width of q_proj, the first Linear the forward calls"); ``layer`` names the layer it
    is read off ("the first Linear the forward calls (q_proj)"; None: an attribute or a weight, not a layer)."""

    width: int
    source: str
    layer: str | None = None


def _read_off(width: int, kind: str, name: str | None, *, called: bool) -> InputWidth:
    """The InputWidth of a ``kind`` ("Linear", "MultiheadAttention", "weight") named ``name`` in the module ("": the
    module itself; None: no parameter of it), the first the forward calls (``called``) or the first it holds."""
    if not called:
        role = f"the module's first {kind}"
    else:
        role = f"the first {kind} the forward {'multiplies x by' if kind == 'weight' else 'calls'}"
    measure = "embed_dim" if kind == "MultiheadAttention" else "width"
    source = f"the {measure} of {name}, {role}" if name else f"the {measure} of {role}"
    layer = None if kind == "weight" else f"{role} ({name})" if name else role
    return InputWidth(int(width), source, layer)


class _Found(time_limit.StopCall):
    """Stops a forward at its first projection (:class:`_FirstProjection`); a BaseException, which ``run_forward``
    does not turn into a TraceError."""


class _FirstProjection(TorchFunctionMode):
    """Stops a forward at its first projection — an ``F.linear`` call (every ``nn.Linear``'s), an
    ``nn.MultiheadAttention`` or a matmul by a weight (``x @ self.W_query``) — before it runs, keeping the width it
    takes (``found``)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.names = {id(parameter): name for name, parameter in module.named_parameters()}
        self.found: InputWidth | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.found is None:
            self.found = self._projection(func, args, kwargs)
            if self.found is not None:
                raise _Found
        return func(*args, **kwargs)

    def _projection(self, func, args, kwargs) -> InputWidth | None:
        name = _name(func)
        if name == "linear":
            weight = args[1] if len(args) > 1 else kwargs.get("weight")
            return _read_off(weight.shape[-1], "Linear", self._owner(weight), called=True)
        if name == "multi_head_attention_forward":
            weight = _arg(func, args, kwargs, "in_proj_weight", None)
            if weight is None:  # separate q, k, v weights (kdim or vdim not embed_dim)
                weight = _arg(func, args, kwargs, "q_proj_weight", None)
            width = _arg(func, args, kwargs, "embed_dim_to_check", None)
            return _read_off(width, "MultiheadAttention", self._owner(weight), called=True)
        if name in _MATMULS and _by_weight(args):  # (…, n, d_in) @ (d_in, d_out)
            weight = args[1] if isinstance(args[1], nn.Parameter) else args[1]._base
            return _read_off(args[1].shape[-2], "weight", self.names.get(id(weight)), called=True)
        return None

    def _owner(self, weight) -> str | None:
        """The name of the layer whose parameter ``weight`` is ("" for the module itself); None: none of its own."""
        name = self.names.get(id(weight))
        return None if name is None else name.rpartition(".")[0]


PROBE_TOKENS = 4  # the tokens of the forward that finds the first projection a module calls
PROBED_WIDTHS = 3  # the widths that forward is tried at (the module's layers' own, in the order it holds them)


def _layers(module: nn.Module) -> list[tuple[str, nn.Module, int]]:
    """(name, layer, the width it takes) of every ``nn.Linear`` and ``nn.MultiheadAttention`` of the module (itself
    included: name ""), in the order the module holds them — the order its constructor made them."""
    return [(name, layer, layer.in_features if isinstance(layer, nn.Linear) else layer.embed_dim)
            for name, layer in module.named_modules() if isinstance(layer, nn.Linear | nn.MultiheadAttention)]


def _first_called(module: nn.Module) -> InputWidth | None:
    """The width the first projection the forward calls takes (:class:`_FirstProjection`): ``module.forward`` called
    as :func:`run_forward` calls it, on a seeded (1, PROBE_TOKENS, width) input, and stopped before that projection
    runs, with no gradient and the random numbers restored after — nothing the forward does before its first
    projection is kept, and no hook of the module counts it as a forward.  It is tried at each width the module's
    layers take (at most :data:`PROBED_WIDTHS`) until one reaches a projection: what the forward does to x before it
    (a norm, an assert) may need the right width.  None: the module has no ``nn.Linear`` or ``nn.MultiheadAttention``
    (a forward not stopped early could change its state), its forward needs more than x, or none reaches a
    projection; :class:`EndlessForwardError` when one runs for the time limit."""
    widths = list(dict.fromkeys(width for _, _, width in _layers(module)))[:PROBED_WIDTHS]
    device = next((t.device for t in module.parameters()), torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    kwargs = _uncached(module, {})
    for width in widths:
        x = torch.randn(1, PROBE_TOKENS, width, generator=generator)  # (1, 4, width)
        x = x.to(device=device, dtype=module_dtype(module))
        try:
            _require_values(module, x)
            args, _ = _forward_args(module, x, kwargs)
        except TraceError:
            return None
        probe = _FirstProjection(module)
        try:
            with torch.random.fork_rng(devices=[]), torch.no_grad(), probe:
                time_limit.call(module.forward, *args, **kwargs)
        except _Found:
            pass
        except time_limit.TimeLimitError as out:
            raise _endless(module, kwargs, out.seconds) from None  # the next forward would run as long
        except (Exception, SystemExit):  # it raised before any projection: another width may get there
            pass
        if probe.found is not None:
            return probe.found
    return None


def _layer_width(module: nn.Module) -> InputWidth | None:
    """The width of the first ``nn.Linear`` or ``nn.MultiheadAttention`` the forward calls (or multiplies x by a
    weight: :func:`_first_called`), else of the first the module holds; None: it holds none."""
    called = _first_called(module)
    if called is not None:
        return called
    name, layer, width = next(iter(_layers(module)), (None, None, None))
    if layer is None:
        return None
    return _read_off(width, "Linear" if isinstance(layer, nn.Linear) else "MultiheadAttention", name, called=False)


def input_width(module: nn.Module) -> InputWidth | None:
    """The input width a module expects, and where it was read (:class:`InputWidth`): a size it keeps under a name a
    constructor gives its input width (``d_in``, ``embed_dim``, ``hidden_size`` …:
    :func:`attnviz.declarations.declared`); else the width the first projection its forward calls takes — an
    ``nn.Linear``, an ``nn.MultiheadAttention``, or a weight x is multiplied by (:func:`_first_called`: a forward
    stopped there, so Qwen3's ``o_proj``, heads × head_dim wide, made before ``q_proj``, is not taken for the
    input); else the first of them the module holds; else the first dimension of a 2-D weight named for queries (the
    book's ``SelfAttention_v1``: ``W_query`` is (d_in, d_out)).  None: none of these."""
    declared = declarations.declared(module, "d_in")
    if declared is not None:
        return InputWidth(declared[1], f"its {declared[0]} attribute")
    found = _layer_width(module)
    if found is not None:
        return found
    for name, parameter in module.named_parameters():
        if parameter.dim() == 2 and "q" in name.rsplit(".", 1)[-1].lower():
            return InputWidth(parameter.shape[0], f"the first dimension of {name}")
    return None


def infer_d_in(module: nn.Module) -> int | None:
    """The input width a module expects (:func:`input_width`); None when attnviz cannot tell."""
    found = input_width(module)
    return None if found is None else found.width


@contextlib.contextmanager
def saying_width(x: torch.Tensor, found: InputWidth | None, *,
                 how: str = "pass x of that width, a (batch, n, d_in) tensor"):
    """A TraceError raised inside, when the forward's own exception names the width of ``x`` (a shape error: "mat1
    and mat2 shapes cannot be multiplied (16x128 and 64x128)") and attnviz chose that width (``found``: a width the
    user gave is theirs to know), is raised again with the width and where it came from: "… — x was (2, 8, 128):
    the width of o_proj, the module's first Linear; if the module takes another width, ``how``".  An error attnviz
    has already put in words (``record``'s: x wider than the first Linear takes, a mask not sliced) is left as it
    is."""
    try:
        yield
    except TraceError as error:
        own = error.__cause__  # the forward's own exception; a TraceError: attnviz already said why (record)
        if found is None or not isinstance(own, Exception) or isinstance(own, TraceError) or not re.search(
                rf"(?<![\d.]){x.shape[-1]}(?![\d.])", str(own)):
            raise
        raise TraceError(f"{error} — x was {tuple(x.shape)}: {found.source}; if the module takes another width, "
                         f"{how}") from error


def as_module(module) -> nn.Module:
    """``module`` when it is an ``nn.Module`` instance; TraceError naming what it is otherwise."""
    if isinstance(module, nn.Module):
        return module
    if isinstance(module, type) and issubclass(module, nn.Module):
        raise TraceError(f"module is the class {module.__name__}, not a module: build it first, e.g. "
                         f"{module.__name__}(d_in, d_out, ...)")
    raise TraceError(f"module must be a torch.nn.Module, got {type(module).__name__}")


def yes_no_causal(causal) -> bool | None:
    """``causal`` as :func:`trace_module` and ``check_module`` take it: True, False or None (read from the run);
    anything else — the string "False" too, which Python would read as true — is a TraceError."""
    if causal is None or isinstance(causal, bool):
        return causal
    raise TraceError(f"causal must be True, False or None (read from the run), got {causal!r}")


def whole_seed(seed) -> int:
    """``seed`` as :func:`trace_module` takes it: a whole number from 0 to ``MAX_SEED``; TraceError otherwise."""
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool) and 0 <= seed <= MAX_SEED:
        return int(seed)
    raise TraceError(f"seed must be a whole number from 0 to {MAX_SEED:,}, got {seed!r}")


def _weights_dtype(module: nn.Module) -> torch.dtype | None:
    """The dtype of the module's first floating-point parameter or buffer; None when it has none."""
    return next((t.dtype for t in (*module.parameters(), *module.buffers()) if t.is_floating_point()), None)


def module_dtype(module: nn.Module) -> torch.dtype:
    """The dtype the module runs on: its weights' (float32 when it has none)."""
    return _weights_dtype(module) or torch.float32


def embed_for(module: nn.Module, text: str, *, seed: int = 123,
              width: InputWidth | None = None) -> tuple[str, list[int], torch.Tensor, dict]:
    """:func:`embed_text` at the module's input width (``width``, else :func:`input_width`'s) and dtype (the seeded
    tables are float32; a float64 module gets float64); TraceError when the module does not say its input width."""
    width = width or input_width(module)
    if width is None:
        raise TraceError("cannot tell the module's input width: give it a d_in/embed_dim attribute or pass a tensor")
    try:
        text, token_ids, inputs, arrays = embed_text(text, width.width, seed=seed)
    except EmptyTextError:
        raise EmptyInputError("x is empty text (or only whitespace): pass a text with at least one word, or a "
                              "(batch, n, d_in) tensor") from None
    return text, token_ids, inputs.to(module_dtype(module)), arrays  # inputs (1, n, d_in)


def input_tensor(module: nn.Module, x) -> torch.Tensor:
    """``x`` as the (batch, n, d_in) floating-point tensor the module runs on: a NumPy array or nested lists become
    a tensor at the module's dtype; TraceError names an input that is not a tensor (one number is not either), holds
    integers, has another number of dimensions, is empty, or is a tensor of another floating dtype than the module's
    weights (a module without weights takes any)."""
    weights = _weights_dtype(module)
    dtype = weights or torch.float32
    if not isinstance(x, torch.Tensor):
        given = type(x).__name__
        try:
            x = torch.as_tensor(x)
        except (TypeError, ValueError, RuntimeError):
            raise TraceError(f"x must be a (batch, n, d_in) tensor or text, got {given}") from None
        if x.dim() == 0:  # one number (5, 0.5, a NumPy scalar): not embeddings, whatever its dtype
            raise TraceError(f"x must be a (batch, n, d_in) tensor or text, got {given}")
        if x.is_floating_point():
            x = x.to(dtype)  # NumPy's float64 is its default, not the user's choice
    if not x.is_floating_point():
        raise TraceError(f"x holds {str(x.dtype).removeprefix('torch.')} values: pass floating-point embeddings "
                         "(batch, n, d_in), or text")
    if x.dim() != 3:
        raise TraceError(f"x must be (batch, n, d_in) or text; got shape {tuple(x.shape)}")
    if 0 in x.shape:
        raise EmptyInputError(f"x has shape {tuple(x.shape)}: it needs at least one item, one token and one feature")
    if weights is not None and x.dtype != weights:  # a module without weights runs on any floating dtype
        name, wanted = str(x.dtype).removeprefix("torch."), str(dtype).removeprefix("torch.")
        raise TraceError(f"x is {name} but the module's weights are {wanted}: pass x.to(torch.{wanted}) "
                         f"(or convert the module with module.to(torch.{name}))")
    return x


def embed_text(text: str, d_in: int, *, seed: int = 123) -> tuple[str, list[int], torch.Tensor, dict]:
    """(text, token ids, (1, n, d_in) input, embedding arrays) as the app embeds text: seeded GPT-2-sized tables."""
    config = AttentionConfig(d_in=d_in, d_out=d_in, num_heads=1, seed=seed)
    text, token_ids, notes = prepare_text(text, MAX_CONTEXT_LENGTH)
    inputs, arrays = book._embed(token_ids, config, notes)  # (1, n, d_in)
    return text, token_ids, inputs, arrays


def stacked_heads(attentions: list[Attention]) -> list[Attention]:
    """The attentions a Trace can show, in the order the forward computed them: each run of one-head softmaxes of one
    shape computed from the same earlier contexts (``Attention.made_from``) stacked into one attention's heads — a
    wrapper's heads, one layer of a model of wrappers; a model's layers, each computed from the one before, are never
    stacked together — and every other attention as it is (a layer's multi-head softmax, a fused call)."""
    runs: list[list[Attention]] = []
    for attention in attentions:
        last = runs[-1][-1] if runs else None
        if (last is not None and attention.weights.shape[1] == 1 and attention.weights.shape == last.weights.shape
                and attention.kind == last.kind and attention.made_from == last.made_from):
            runs[-1].append(attention)
        else:
            runs.append([attention])
    return [run[0] if len(run) == 1 else _stack(run) for run in runs]


def _stack(same: list[Attention]) -> Attention:
    """One attention whose heads are the one-head attentions ``same``, in order."""
    first = same[0]
    stacked = Attention(kind=first.kind, weights=torch.cat([a.weights for a in same], dim=1),
                        masked=torch.cat([a.masked for a in same], dim=1), op_index=first.op_index,
                        scale=first.scale, operand_scales=first.operand_scales, is_causal=first.is_causal,
                        summed_widths=first.summed_widths, dropout_p=max(a.dropout_p for a in same),
                        weights_scale=first.weights_scale, lost=first.lost, unrecorded=first.unrecorded,
                        context_ops=tuple(index for a in same for index in a.context_ops), made_from=first.made_from)
    stacked.dropout_after_p = max(a.dropout_after_p for a in same)  # a head whose dropout drops: the module's does
    for stage in ("scores", "scaled", "dropped", "queries", "keys", "values", "context", "hidden"):
        parts = [getattr(a, stage) for a in same]
        if all(p is not None for p in parts):
            setattr(stacked, stage, torch.cat(parts, dim=1))
    return stacked


def combine(attentions: list[Attention]) -> Attention:
    """The first attention a Trace can show (:func:`stacked_heads`): a wrapper's one-head softmaxes stacked into its
    heads, else the first the forward computed."""
    return stacked_heads(attentions)[0]


def each_attention(recording: Recording) -> list[Attention]:
    """The attentions a Trace can show, as the checker numbers them ("attention 2 of 2"): :func:`stacked_heads` of
    the forward's."""
    return stacked_heads(recording.attentions)


def attention_places(recording: Recording, attentions: list[Attention], own_file: str | None) -> tuple[str, ...]:
    """Where each of ``attentions`` is computed, as the checker names it — "line 35" (its softmax, or its SDPA or
    MultiheadAttention call), "line 66 of transformers/models/gpt2/modeling_gpt2.py" (a line outside ``own_file``,
    the module's class file: :func:`op_place`), "" where the line is not known."""
    places = []
    for attention in attentions:
        op = recording.ops[attention.op_index] if 0 <= attention.op_index < len(recording.ops) else None
        places.append("" if op is None else op_place(op, own_file).removeprefix(" on "))
    return tuple(places)


def picked_note(total: int, number: int, place: str) -> str:
    """The Trace's note on a forward that computed ``total`` attentions that do not stack into heads: which it shows."""
    return f"The forward computed {total} attentions; this shows {attention_named(number, total, place)}."


def picked(recording: Recording, attention: int, own_file: str | None) -> tuple[Attention, int, tuple[str, ...]]:
    """(the attention number ``attention`` of the recording's, 1-based, of :func:`each_attention`; its index; the
    places of every one, :func:`attention_places`); a TraceError naming how many there are when it has none of that
    number (or ``attention`` is no whole number)."""
    attentions = each_attention(recording)
    places = attention_places(recording, attentions, own_file)
    total = len(attentions)
    if isinstance(attention, bool) or not isinstance(attention, numbers.Integral) or not 1 <= attention <= total:
        if total == 1:
            place = f" (on {places[0]})" if places[0] else ""
            raise TraceError(f"attention={attention!r}: the forward computed one attention{place} — attention=1 "
                             "shows it")
        named = "; ".join(attention_named(number, total, place) for number, place in enumerate(places[:4], start=1))
        more = f"; … {total - 4} more" if total > 4 else ""
        raise TraceError(f"attention={attention!r}: the forward computed {total} attentions ({named}{more}) — pick "
                         f"one with attention=1 … {total}, counted from 1 as the checker names them")
    return attentions[attention - 1], attention - 1, places


def trace_module(module: nn.Module, x, *, causal: bool | None = None, label: str | None = None,
                 seed: int = 123, attention: int = 1) -> Trace:
    """The Trace of ``module`` on ``x``: a (batch, n, d_in) tensor, or text embedded as the app embeds it at the
    module's input width (a batch of one).  Every step keeps the whole batch (maps ``(batch, heads, n, n)``); the
    embedding arrays are item 0's, the one the views draw.  ``attention``: which of the forward's attentions it shows
    when it computes several that are not one layer's heads (a model's layers), counted from 1 in the order the
    forward computes them, as the checker names them ("attention 2 of 2 on line 35": :func:`each_attention`);
    ``trace.module_run`` says which.  Raises TraceError (one line) when it cannot."""
    notes: list[str] = []
    module = as_module(module)
    causal, seed = yes_no_causal(causal), whole_seed(seed)
    if isinstance(attention, bool) or not isinstance(attention, numbers.Integral) or attention < 1:
        raise TraceError(f"attention must be a whole number from 1 (the first attention the forward computes), "
                         f"got {attention!r}")
    width = None  # the width attnviz chose, said when the forward refuses it (saying_width)
    if isinstance(x, str):
        width = input_width(module)
        text, token_ids, inputs, arrays = embed_for(module, x, seed=seed, width=width)
    else:
        inputs = input_tensor(module, x)
        _require_values(module, inputs)  # before its values are read for the Trace
        text, token_ids = "", list(range(inputs.shape[1]))
        arrays = {"token": to_numpy(inputs[0]), "position": to_numpy(torch.zeros_like(inputs[0])),
                  "input": to_numpy(inputs[0])}
    with saying_width(inputs, width):
        return trace_inputs(module, inputs, text=text, token_ids=token_ids, embeddings=arrays, notes=notes,
                            causal=causal, label=label, seed=seed, tokenized=isinstance(x, str),
                            attention=int(attention))


def trace_inputs(module: nn.Module, inputs: torch.Tensor, *, text: str, token_ids: list[int], embeddings: dict,
                 notes: list[str], causal: bool | None = None, label: str | None = None, seed: int = 123,
                 config: AttentionConfig | None = None, tokenized: bool = True, attention: int = 1) -> Trace:
    """The Trace of ``module`` on embedded tokens ``inputs`` (batch, n, d_in), showing its attention number
    ``attention`` (:func:`picked`); ``config``: the Trace's config (the producer of a listed module passes its settled
    one), else one is made from what the run showed.  ``tokenized`` False: ``inputs`` are a caller's vectors, labelled
    by position (``trace.make_trace``)."""
    if inputs.shape[1] > MAX_CONTEXT_LENGTH:
        raise TraceError(f"{inputs.shape[1]} tokens is more than {MAX_CONTEXT_LENGTH}")
    recording = record(module, inputs)
    shown, index, places = picked(recording, attention, class_file(module))
    notes.extend(recording.notes)
    if len(places) > 1:
        notes.append(picked_note(len(places), index + 1, places[index]))
    heads = shown.weights.shape[1]
    if causal is None:
        causal = infer_causal(recording, shown, module)
    d_out = recording.output.shape[-1]
    if config is None:
        config = AttentionConfig(d_in=inputs.shape[-1], d_out=d_out, num_heads=heads,
                                 context_length=max(1, inputs.shape[1]), causal=bool(causal), dropout=0.0,
                                 train=module.training, seed=seed, module=label or type(module).__name__,
                                 attention=attention)
    steps = {"weights": shown.weights, "masked": shown.masked}
    for stage in ("queries", "keys", "values", "scores", "scaled", "dropped", "context"):
        value = getattr(shown, stage)
        if value is not None:
            steps[stage] = value
    steps["output"] = recording.output
    shapes = (("input", tuple(inputs.shape)), *((op.name, op.shape) for op in recording.ops))
    run = module_run(module, recording, shown, attention_number=index + 1, places=places)
    return make_trace(config, text, token_ids, embeddings,
                      steps={name: to_numpy(value) for name, value in steps.items()},
                      output=to_numpy(recording.output), shapes=shapes, device=str(inputs.device.type),
                      notes=notes, module_run=run, tokenized=tokenized)


def module_run(module: nn.Module, recording: Recording, attention: Attention, *, attention_number: int = 1,
               places: tuple[str, ...] = ("",)) -> ModuleRun:
    """The module's class, its file, every op (the stages marked of ``attention`` alone) and the line of each of its
    stages (for the source panel and the op diagram) and the class or function of its code each is in
    (:class:`attnviz.code_places.CodePlaces`), which of the forward's attentions it is (``attention_number`` of
    ``places``, where each is: :func:`picked`), the head_dim its scale is judged by (:func:`score_width`) and the
    scales its config declares (:func:`attnviz.declarations.declared_scales`' designs), for the explanation of a
    weight."""
    try:
        filename = inspect.getsourcefile(type(module))
    except (TypeError, OSError):
        filename = None
    lines, at = {}, {}  # stage -> its line in the class's file; stage -> (its file, its line), wherever it is
    first, last = _op_span(recording, attention)
    for op in recording.ops[first:last + 1]:
        if op.stage and op.stage not in lines and op.line is not None and op.filename == filename:
            lines[op.stage] = op.line
        if op.stage and op.stage not in at and op.line is not None:
            at[op.stage] = (op.filename, op.line)
    if attention.kind != "softmax":  # one SDPA / MultiheadAttention call computes them all
        for known in (lines, at):
            for stage in ("scores", "scaled", "masked", "weights", "dropped") if "context" in known else ():
                known.setdefault(stage, known["context"])
    code = code_places.CodePlaces(module, filename, name_file=_shown_file)
    sources = {stage: found for stage, (file, line) in at.items() if (found := code.place(file, line)) is not None}
    ops = tuple((op.name, op.shape, op.line if op.filename == filename else None,
                 op.stage if first <= index <= last else None)  # the stages of the attention shown, not another's
                for index, op in enumerate(recording.ops))
    source_lines, first_line = code_places.source_lines(type(module))
    width = score_width(module, attention)
    declared = tuple((found.scale, found.setting)
                     for found in declarations.declared_scales(module, width.head_dim) if found.design)
    return ModuleRun(class_name=type(module).__name__, filename=filename, stage_lines=lines, ops=ops,
                     kind=attention.kind, source="".join(source_lines), first_line=first_line,
                     unrecorded=dict(attention.unrecorded), score_width=width, declared_scales=declared,
                     attention=attention_number, attention_places=tuple(places),
                     stage_sources=sources)


def _op_span(recording: Recording, attention: Attention) -> tuple[int, int]:
    """(first, last) op indices of ``attention``'s calls: after the context of the attention the forward computed
    before it, up to its own context (its weights where no context is recorded); the whole recording for the
    first."""
    last = max((*attention.context_ops, attention.op_index))
    before = [index for other in recording.attentions if other is not attention
              for index in (*other.context_ops, other.op_index) if index < attention.op_index]
    return (max(before) + 1 if before else 0), (last if last >= 0 else len(recording.ops) - 1)


def score_width(module: nn.Module | None, attention: Attention) -> ScoreWidth:
    """The width of Q·Kᵀ (of scores that are the sum of two products of one width, q₁·k₁ + q₂·k₂, that width) —
    unless the latent the module declares (``latent_dim``, ``kv_lora_rank`` …) is the width of Q·Kᵀ or of one of its
    two products: MLA in DeepSeek-V3's absorbed form folds W_UK into the queries and takes the scores against the
    latent ``c_kv`` itself (adding its decoupled rotary scores), while its scale stays 1/√ of the per-head width,
    which the module then declares (:data:`attnviz.declarations.HEAD_DIM_NAMES`, or d_out ÷ num_heads) or leaves
    unknown (None)."""
    width = None if attention.queries is None else attention.queries.shape[-1]
    summed = tuple(attention.summed_widths)  # the widths of the products the scores are the sum of
    widths = summed or (width,)
    latent = None if module is None else declarations.declared_size(module, "latent_dim")
    if width is None or latent not in widths:
        return ScoreWidth(widths[0] if len(set(widths)) == 1 else width, summed_widths=summed)
    for name in declarations.HEAD_DIM_NAMES:
        value = getattr(module, name, None)
        if declarations.is_size(value):
            return ScoreWidth(width, summed_widths=summed) if value == width else ScoreWidth(
                value, name, latent, f"the per-head width the module keeps as {name}", summed)
    d_out, heads = declarations.declared_size(module, "d_out"), declarations.declared_size(module, "num_heads")
    if d_out is not None and heads is not None and d_out % heads == 0:
        return ScoreWidth(width, summed_widths=summed) if d_out // heads == width else ScoreWidth(
            d_out // heads, latent=latent, source="the per-head width, the module's d_out ÷ num_heads",
            summed_widths=summed)
    return ScoreWidth(None, latent=latent, summed_widths=summed)


def causal_flag(module: nn.Module) -> tuple[str, nn.Module] | None:
    """(its name, "" for the module itself; the module) of the first of ``module`` and its submodules whose
    ``is_causal`` attribute is True (a Hugging Face attention layer's, which its model reads to build the mask);
    None when none says so."""
    for name, sub in module.named_modules():
        if getattr(sub, "is_causal", None) is True:
            return name, sub
    return None


def infer_causal(recording: Recording, attention: Attention, module: nn.Module | None = None) -> bool:
    """Whether the module means to mask the future: an SDPA / MultiheadAttention call's ``is_causal`` flag, a
    ``causal`` attribute, an ``is_causal`` attribute that is True (the module's or a submodule's), hidden cells
    above the diagonal, weights above the diagonal set to 0 after the softmax (``w.tril()``, ``w * tril``: a bug the
    rules name), hidden cells that are a causal mask inverted (the past and the diagonal), a triangular mask applied
    (masked_fill, where, or a call's attn_mask: boolean, or a float one very negative in a triangle), or a triangular
    mask buffer."""
    if attention.is_causal:
        return True
    if module is not None and isinstance(getattr(module, "causal", None), bool):
        return module.causal
    if module is not None and causal_flag(module) is not None:
        return True
    hidden_all = None if attention.hidden is None else attention.hidden.expand(attention.masked.shape)  # (b, h, nq, nk)
    first = Attention(kind=attention.kind, weights=attention.weights[:1, :1], masked=attention.masked[:1, :1],
                      scaled=None if attention.scaled is None else attention.scaled[:1, :1],
                      hidden=None if hidden_all is None else hidden_all[:1, :1])
    hidden = first.masked_cells()[0, 0]  # (nq, nk) of the first item's first head
    future = torch.ones(hidden.shape, dtype=torch.bool, device=hidden.device).triu(1)  # (nq, nk)
    if future.any() and hidden[future].float().mean() > 0.5:
        return True
    zeroed = attention.zeroed_after  # (b, h, nq, nk): weights a mask after the softmax set to 0 (a bug it means by)
    if future.any() and zeroed is not None and zeroed[0, 0][future].float().mean() > 0.5:
        return True  # the future zeroed after the softmax: meant to be causal, and the rules name the mask's place
    if future.any() and torch.equal(hidden, ~future):
        return True  # the causal mask inverted (the past and the diagonal hidden): no design means that
    if recording.triangular_mask:
        return True
    buffers = module.buffers() if module is not None else ()
    return any(_triangular(buffer.bool()) for buffer in buffers if buffer.dim() >= 2)
