"""The attention variants of Chapter 3, faithful to the book, with an optional recorder.

Class names, constructor arguments, attribute names and parameter-creation order are the book's,
so after ``torch.manual_seed(s)`` the weights (and outputs) equal the book's printed tensors.
Four additions, none of which changes a result:

* every class takes ``causal`` (default: what the book does) so the app can toggle the mask;
* ``MultiHeadAttention`` takes ``rope_base`` (default None: the book's class) to rotate its queries and keys
  by position (:mod:`attnviz.rope`), as the book's Llama code does, for the app's rotary setting;
* ``forward(x, recorder=None)`` accepts a :class:`Recorder` that captures named intermediates
  (``queries``, ``keys``, ``values``, ``scores``, ``scaled``, ``masked``, ``weights``,
  ``dropped``, ``context``, ``output``).  Attention maps are recorded as (b, heads, n, n);
* what the book's code would hand to torch's own error is a ValueError in words, saying what is too large and what
  fits: a size that is not a whole number ≥ 1, weights and causal masks that need more memory than the machine has
  free (:func:`check_sizes`, before anything is allocated), and an ``x`` with more tokens than the causal mask has
  rows, which the book's ``self.mask[:num_tokens, :num_tokens]`` cannot cover (:func:`check_context`).

The book fuses scaling into the softmax call (``softmax(attn_scores / keys.shape[-1]**0.5)``)
after masking.  Here scaling and masking are separate stages (scale, then mask): for every
unmasked entry the arithmetic is the same division, and −∞ / √dₖ = −∞, so the weights are
bitwise identical to the book's order.
"""

from __future__ import annotations

import numbers

import torch
from torch import nn

from attnviz import memory, rope

MAP_STAGES = ("scores", "scaled", "masked", "weights", "dropped")  # the (b, heads, n, n) maps
STAGES = ("queries", "keys", "values", *MAP_STAGES, "context", "output")  # what the book's classes record, in order


class Recorder:
    """Collects named intermediates (``steps``) and the ordered shapes they had (``shapes``)."""

    def __init__(self) -> None:
        self.steps: dict[str, torch.Tensor] = {}
        self.shapes: list[tuple[str, tuple[int, ...]]] = []

    def record(self, name: str, tensor: torch.Tensor, copy: bool = False, keep: bool = True) -> None:
        self.shapes.append((name, tuple(tensor.shape)))
        if keep:
            tensor = tensor.detach()
            if name in MAP_STAGES and tensor.dim() < 4:
                tensor = _as_heads(tensor)  # single-head map -> (b, 1, n, n); the shape above stays the real one
            self.steps[name] = tensor.clone() if copy else tensor


def record(recorder: Recorder | None, name: str, tensor: torch.Tensor, copy: bool = False, keep: bool = True) -> None:
    """Record ``tensor`` under ``name`` if a recorder was passed (``copy`` before in-place ops).

    Attention maps (``MAP_STAGES``) are stored as (b, heads, n, n), heads = 1 for single-head variants.
    """
    if recorder is not None:
        recorder.record(name, tensor, copy=copy, keep=keep)


def check_sizes(module: nn.Module, *, d_in, d_out, context_length=None, num_heads=None, qkv_bias: bool = False,
                out_proj: bool = False, per_head: bool = False) -> None:
    """ValueError in words, before anything is allocated, for sizes ``module``'s class cannot be built with: a size
    given (``d_in``, ``d_out``, ``context_length``, ``num_heads``) that is not a whole number ≥ 1, or float32 numbers
    that need more memory than the machine has free (:func:`attnviz.memory.check_memory`).  The count is what the class
    holds: ``W_query``, ``W_key`` and ``W_value`` (3 × d_in × d_out, with their biases), ``out_proj`` where it has one,
    the (context_length, context_length) causal mask where it has one; ``per_head``: all of it once per head (the
    wrapper's ``num_heads`` ``CausalAttention`` heads)."""
    reader = type(module).__name__
    sizes = {"num_heads": num_heads, "d_in": d_in, "d_out": d_out, "context_length": context_length}
    sizes = {name: value for name, value in sizes.items() if value is not None or name in ("d_in", "d_out")}
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{reader}'s {name} must be a whole number ≥ 1, got {value!r:.40}.")
    heads, each = (int(num_heads), "num_heads × ") if per_head else (1, "")
    projections = 3 * (int(d_in) * int(d_out) + bool(qkv_bias) * int(d_out))
    parts = {f"{each}W_query, W_key and W_value, {each}3 × d_in × d_out": heads * projections}
    if out_proj:
        parts["out_proj, d_out² + d_out"] = int(d_out) * int(d_out) + int(d_out)
    if context_length is not None:
        masks = f"{each}the causal masks" if per_head else "the causal mask"
        parts[f"{masks}, {each}context_length²"] = heads * int(context_length) ** 2
    memory.check_memory(reader, parts, " or ".join([", ".join(list(sizes)[:-1]), list(sizes)[-1]]))


def check_tokens_fit(num_tokens: int, start: int, context_length: int, *, argument: str, limit: str, cut: str,
                     reset: str) -> None:
    """ValueError in words when ``num_tokens`` tokens of ``argument`` at positions ``start`` … (a KV cache's next
    position; 0 without one) run past ``context_length`` positions: two sentences, one without a cache and one with,
    that name ``limit`` (what holds the positions), ``cut`` (the slice of ``argument`` that fits) and ``reset`` (the
    call that empties the cache).  An attention's causal mask (:func:`check_context`) and ``GPTModel``'s position
    embeddings word their refusals with it."""
    if start + num_tokens <= context_length:
        return
    if start == 0:
        raise ValueError(f"{argument} has {num_tokens:,} tokens, more than {limit}: it takes at most "
                         f"{context_length:,}. Pass {cut} or build it with context_length ≥ {num_tokens:,}.")
    raise ValueError(f"{argument} adds {num_tokens:,} tokens to the {start:,} the cache holds: positions {start:,} … "
                     f"{start + num_tokens - 1:,}, past {limit}, so it takes at most "
                     f"{max(0, context_length - start):,} more. Call {reset} to start a new sequence, pass fewer "
                     f"tokens, or build it with context_length ≥ {start + num_tokens:,}.")


def check_context(module: nn.Module, num_tokens: int, start: int = 0) -> None:
    """ValueError in words (:func:`check_tokens_fit`) when ``num_tokens`` tokens at positions ``start`` … run past the
    rows of ``module``'s causal mask (``self.mask``, (context_length, context_length)), which the book's
    ``self.mask[:num_tokens, :num_tokens]`` would hand to torch as a shape mismatch.  Nothing to check for a module
    built without the mask (``causal=False``: the book's slicing never runs) or without a mask buffer."""
    mask = getattr(module, "mask", None)
    if not getattr(module, "causal", True) or mask is None:
        return
    context_length = mask.shape[-1]
    check_tokens_fit(num_tokens, start, context_length, argument="x", cut=f"x[:, :{context_length}]",
                     limit=f"the context_length {context_length:,} this {type(module).__name__} was built with (its "
                           f"causal mask, self.mask, is {context_length:,} × {context_length:,})",
                     reset="reset_cache()")


class SimplifiedSelfAttention(nn.Module):
    """Section 3.3: no trainable weights; context = softmax(x xᵀ) x.  Not causal by default."""

    def __init__(self, causal: bool = False):
        super().__init__()
        self.causal = causal

    def forward(self, inputs: torch.Tensor, recorder: Recorder | None = None) -> torch.Tensor:
        record(recorder, "queries", inputs)  # the inputs act as queries, keys and values
        record(recorder, "keys", inputs)
        record(recorder, "values", inputs)
        attn_scores = inputs @ inputs.transpose(-2, -1)  # (..., n, d_in) @ (..., d_in, n) -> (..., n, n)
        record(recorder, "scores", attn_scores)  # stored as (b, 1, n, n)
        record(recorder, "scaled", attn_scores)  # no scaling in the simplified version
        if self.causal:
            n = attn_scores.shape[-1]
            mask_bool = torch.triu(torch.ones(n, n, dtype=torch.bool, device=inputs.device), diagonal=1)  # (n, n)
            attn_scores = attn_scores.masked_fill(mask_bool, -torch.inf)  # (..., n, n)
        record(recorder, "masked", attn_scores)
        attn_weights = torch.softmax(attn_scores, dim=-1)  # (..., n, n), rows sum to 1
        record(recorder, "weights", attn_weights)
        record(recorder, "dropped", attn_weights)  # no dropout in the simplified version
        context_vecs = attn_weights @ inputs  # (..., n, n) @ (..., n, d_in) -> (..., n, d_in)
        record(recorder, "context", context_vecs)
        record(recorder, "output", context_vecs)
        return context_vecs


class SelfAttention_v1(nn.Module):
    """Section 3.4.2: weights as ``nn.Parameter(torch.rand(d_in, d_out))``.  Not causal by default."""

    def __init__(self, d_in: int, d_out: int, causal: bool = False):
        super().__init__()
        check_sizes(self, d_in=d_in, d_out=d_out)  # a ValueError in words, before anything is allocated
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))
        self.causal = causal

    def forward(self, x: torch.Tensor, recorder: Recorder | None = None) -> torch.Tensor:
        keys = x @ self.W_key  # (..., n, d_in) @ (d_in, d_out) -> (..., n, d_out)
        queries = x @ self.W_query  # (..., n, d_out)
        values = x @ self.W_value  # (..., n, d_out)
        return _single_head(self, queries, keys, values, None, recorder)


class SelfAttention_v2(nn.Module):
    """Section 3.4.2: weights as ``nn.Linear(d_in, d_out, bias=qkv_bias)``.  Not causal by default."""

    def __init__(self, d_in: int, d_out: int, qkv_bias: bool = False, causal: bool = False):
        super().__init__()
        check_sizes(self, d_in=d_in, d_out=d_out, qkv_bias=qkv_bias)  # a ValueError in words, before any allocation
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.causal = causal

    def forward(self, x: torch.Tensor, recorder: Recorder | None = None) -> torch.Tensor:
        keys = self.W_key(x)  # (..., n, d_in) -> (..., n, d_out)
        queries = self.W_query(x)  # (..., n, d_out)
        values = self.W_value(x)  # (..., n, d_out)
        return _single_head(self, queries, keys, values, None, recorder)


class CausalAttention(nn.Module):
    """Section 3.5.3: single-head causal attention with dropout on the weights."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False, causal: bool = True):
        super().__init__()
        check_sizes(self, d_in=d_in, d_out=d_out, context_length=context_length, qkv_bias=qkv_bias)  # before allocating
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))  # (ctx, ctx)
        self.causal = causal

    def forward(self, x: torch.Tensor, recorder: Recorder | None = None) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, n, d_in)
        keys = self.W_key(x)  # (b, n, d_in) -> (b, n, d_out)
        queries = self.W_query(x)  # (b, n, d_out)
        values = self.W_value(x)  # (b, n, d_out)
        return _single_head(self, queries, keys, values, self.dropout, recorder)


def _as_heads(attn_map: torch.Tensor) -> torch.Tensor:
    """(n, n) or (b, n, n) -> (b, 1, n, n): single-head maps in the multi-head layout."""
    if attn_map.dim() == 2:
        attn_map = attn_map.unsqueeze(0)  # (n, n) -> (1, n, n)
    return attn_map.unsqueeze(1)  # (b, n, n) -> (b, 1, n, n)


def _single_head(module, queries, keys, values, dropout, recorder):
    """The shared single-head pipeline of v1, v2 and CausalAttention, in the book's operations."""
    record(recorder, "queries", queries)  # (b, n, d_out)
    record(recorder, "keys", keys)  # (b, n, d_out)
    record(recorder, "values", values)  # (b, n, d_out)
    attn_scores = queries @ keys.transpose(-2, -1)  # (b, n, d_out) @ (b, d_out, n) -> (b, n, n)
    record(recorder, "scores", attn_scores)  # stored as (b, 1, n, n)
    attn_scores = attn_scores / keys.shape[-1] ** 0.5  # ÷√dₖ, dₖ = d_out -> (b, n, n)
    record(recorder, "scaled", attn_scores, copy=module.causal)  # copy: masked in place next
    if module.causal:
        num_tokens = attn_scores.shape[-1]
        mask_bool = _mask_bool(module, num_tokens, attn_scores.device)  # (n, n)
        attn_scores.masked_fill_(mask_bool, -torch.inf)  # in place, with the underscore -> (b, n, n)
    record(recorder, "masked", attn_scores)
    attn_weights = torch.softmax(attn_scores, dim=-1)  # (b, n, n), each row sums to 1
    record(recorder, "weights", attn_weights)
    if dropout is not None:
        attn_weights = dropout(attn_weights)  # zeroes p of the weights, scales the rest by 1/(1-p)
    record(recorder, "dropped", attn_weights)
    context_vec = attn_weights @ values  # (b, n, n) @ (b, n, d_out) -> (b, n, d_out)
    record(recorder, "context", context_vec)
    record(recorder, "output", context_vec)
    return context_vec


def _mask_bool(module: nn.Module, num_tokens: int, device) -> torch.Tensor:
    """The book's ``self.mask.bool()[:num_tokens, :num_tokens]``; v1/v2 have no buffer, build one."""
    mask = getattr(module, "mask", None)
    if mask is None:
        return torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=device), diagonal=1)  # (n, n)
    check_context(module, num_tokens)  # more tokens than the mask has rows: a ValueError in words
    return mask.bool()[:num_tokens, :num_tokens]  # (ctx, ctx) -> (n, n)


class MultiHeadAttentionWrapper(nn.Module):
    """Section 3.6.1: ``num_heads`` independent ``CausalAttention`` heads, outputs concatenated.

    As in the book, ``d_out`` is per head: the output has ``num_heads * d_out`` features.
    """

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, causal: bool = True):
        super().__init__()
        check_sizes(self, d_in=d_in, d_out=d_out, context_length=context_length, num_heads=num_heads, qkv_bias=qkv_bias,
                    per_head=True)  # every head's weights and mask, before any is allocated
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias, causal=causal) for _ in range(num_heads)]
        )

    def forward(self, x: torch.Tensor, recorder: Recorder | None = None) -> torch.Tensor:
        head_recorders = [Recorder() if recorder is not None else None for _ in self.heads]
        context_vecs = [  # h × (b, n, d_out)
            head(x, head_recorder) for head, head_recorder in zip(self.heads, head_recorders)
        ]
        context_vec = torch.cat(context_vecs, dim=-1)  # h × (b, n, d_out) -> (b, n, h·d_out)
        if recorder is not None:
            # each head ran the CausalAttention pipeline; show one head's path, marked "× h"
            recorder.shapes.extend(
                (f"{name} ×{len(self.heads)}", shape) for name, shape in head_recorders[0].shapes if name != "output"
            )
            recorder.shapes.append(("concat", tuple(context_vec.shape)))
            # pop each head's copy as it is stacked, so at most one stage is held twice
            for name in ("queries", "keys", "values"):
                per_head = [t.steps.pop(name) for t in head_recorders]  # h × (b, n, d_out)
                recorder.steps[name] = torch.cat(per_head, dim=-1)  # -> (b, n, h·d_out)
            for name in ("scores", "scaled", "masked", "weights", "dropped"):
                recorder.steps[name] = torch.cat([t.steps.pop(name) for t in head_recorders], dim=1)  # -> (b, h, n, n)
            recorder.steps["context"] = torch.stack(context_vecs, dim=1).detach()  # -> (b, h, n, d_out)
        record(recorder, "output", context_vec)
        return context_vec


class MultiHeadAttention(nn.Module):
    """Section 3.6.2: one set of projections split into ``num_heads`` heads, then ``out_proj``."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, causal: bool = True,
                 rope_base: float | None = None):
        super().__init__()
        check_sizes(self, d_in=d_in, d_out=d_out, context_length=context_length, num_heads=num_heads, qkv_bias=qkv_bias,
                    out_proj=True)  # a ValueError in words, before anything is allocated
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads  # reduce the projection dim to match the desired output dim
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)  # combines the head outputs
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))  # (ctx, ctx)
        self.causal = causal
        self.rope_base = rope_base  # None: the book's class; a base: rotary positions (see attnviz.rope)

    def forward(self, x: torch.Tensor, recorder: Recorder | None = None) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, n, d_in)
        keys = self.W_key(x)  # (b, n, d_in) -> (b, n, d_out)
        queries = self.W_query(x)  # (b, n, d_out)
        values = self.W_value(x)  # (b, n, d_out)
        record(recorder, "queries", queries)
        record(recorder, "keys", keys)
        record(recorder, "values", values)

        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, n, d_out) -> (b, n, h, hd)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, n, h, hd)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, n, h, hd)
        record(recorder, "view", queries, keep=False)

        keys = keys.transpose(1, 2)  # (b, n, h, hd) -> (b, h, n, hd)
        queries = queries.transpose(1, 2)  # (b, h, n, hd)
        values = values.transpose(1, 2)  # (b, h, n, hd)
        record(recorder, "transpose", queries, keep=False)

        if self.rope_base is not None:  # rotary positions: turn q and k by their token's position
            cos, sin = rope.compute_rope_params(self.head_dim, self.rope_base, num_tokens, x.device)  # (n, hd) each
            queries = rope.apply_rope(queries, cos, sin)  # (b, h, n, hd)
            keys = rope.apply_rope(keys, cos, sin)  # (b, h, n, hd)
            record(recorder, "rotated_queries", queries)
            record(recorder, "rotated_keys", keys)

        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
        record(recorder, "scores", attn_scores)
        attn_scores = attn_scores / keys.shape[-1] ** 0.5  # ÷√head_dim of these keys -> (b, h, n, n)
        record(recorder, "scaled", attn_scores, copy=self.causal)  # copy: masked in place next
        if self.causal:
            check_context(self, num_tokens)  # more tokens than the mask has rows: a ValueError in words
            mask_bool = self.mask.bool()[:num_tokens, :num_tokens]  # (ctx, ctx) -> (n, n)
            attn_scores.masked_fill_(mask_bool, -torch.inf)  # in place, with the underscore -> (b, h, n, n)
        record(recorder, "masked", attn_scores)
        attn_weights = torch.softmax(attn_scores, dim=-1)  # (b, h, n, n), each row sums to 1
        record(recorder, "weights", attn_weights)
        attn_weights = self.dropout(attn_weights)  # (b, h, n, n)
        record(recorder, "dropped", attn_weights)

        context_vec = (attn_weights @ values).transpose(1, 2)  # (b, h, n, n) @ (b, h, n, hd) -> (b, n, h, hd)
        record(recorder, "context", context_vec.transpose(1, 2))  # per head: (b, h, n, hd)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)  # (b, n, h, hd) -> (b, n, d_out)
        record(recorder, "concat", context_vec, keep=False)
        context_vec = self.out_proj(context_vec)  # (b, n, d_out) -> (b, n, d_out)
        record(recorder, "output", context_vec)
        return context_vec
