"""Pitfall lab, today's attention as a learner writes it: grouped-query, sliding-window, rotary and KV-cached
attention, each a plain ``nn.Module`` in the book's style (its bonus material's names: ``num_kv_groups``,
``group_size``, ``sliding_window_size``, ``use_cache``, ``cache_k``/``cache_v``, ``ptr_current_pos``,
``reset_cache()``), and their classic bugs, each one line away (:func:`~attnviz.labs.pitfalls.bugs.one_line_changed`).

These are the lab's own classes, not the app's variants: short enough to read on the page, with the line a bug
changes written once.  A class that stands for one of the book's bonus classes takes its name and its constructor —
the arguments in the book's order, the book's defaults, the book's ``out_proj`` bias, its parameters created in the
book's order (so ``torch.manual_seed`` gives the book's weights) — and runs ``forward(x)``, as the book's does
without a cache:

* :class:`GroupedQueryAttention` is the book's bonus ``ch04/04_gqa`` class: ``(d_in, d_out, dropout, num_heads,
  num_kv_groups, dtype=None, qkv_bias=False)``, ``out_proj`` without a bias, no ``context_length`` (the causal mask
  is made for the tokens given).  The book's also takes ``use_cache`` (a KV cache); the lab's cache bugs are in
  :class:`CachedMultiHeadAttention`, so this one has none.
* :class:`MultiHeadAttentionWithSWA` is the book's bonus ``ch04/06_swa`` class: ``(d_in, d_out, dropout,
  num_heads, qkv_bias=False, sliding_window_size=None)`` (None: every earlier key), no ``context_length``; no KV
  cache either.
* :class:`CachedMultiHeadAttention` is the book's bonus ``ch04/03_kv-cache`` ``MultiHeadAttention`` — the same
  constructor, ``(d_in, d_out, context_length, dropout, num_heads, qkv_bias=False)``, and ``forward(x,
  use_cache=False)`` — under a name of its own, as the lab runs chapter 3's ``MultiHeadAttention`` beside it.
* :class:`RotaryAttention` stands for no class of the book: its rotation is in Llama 3's ``GroupedQueryAttention``
  (``pkg/llms_from_scratch/llama3.py``), whose ``forward(x, mask, cos, sin)`` takes the mask and the rotation
  tables from the model.  This one is chapter 3's ``MultiHeadAttention`` (its constructor, and ``theta_base``, as
  the book's ``compute_rope_params`` names it) keeping those tables as buffers, so it runs ``forward(x)`` alone.

Their rotation is the one the app's rotary setting runs (:mod:`attnviz.rope`'s ``compute_rope_params`` and
``apply_rope``).  Pure torch: no figures, no Streamlit.
"""

from __future__ import annotations

import torch
from torch import nn

from attnviz.labs.pitfalls.bugs import one_line_changed
from attnviz.rope import apply_rope, compute_rope_params


class _Projections(nn.Module):
    """Chapter 3's MultiHeadAttention's W_query, W_key, W_value, out_proj, dropout and causal mask."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1),
                             persistent=False)


class GroupedQueryAttention(nn.Module):
    """num_kv_groups K/V heads, each shared by group_size = num_heads // num_kv_groups neighbouring query heads."""

    def __init__(self, d_in, d_out, dropout, num_heads, num_kv_groups, dtype=None, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        assert num_heads % num_kv_groups == 0, "num_heads must be divisible by num_kv_groups"
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_key = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=qkv_bias, dtype=dtype)  # d_in -> g·hd
        self.W_value = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=qkv_bias, dtype=dtype)  # d_in -> g·hd
        self.num_kv_groups = num_kv_groups
        self.group_size = num_heads // num_kv_groups
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias, dtype=dtype)
        self.out_proj = nn.Linear(d_out, d_out, bias=False, dtype=dtype)  # the book's GQA: no bias
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        keys = self.W_key(x).view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        values = self.W_value(x).view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        # (b, g, n, hd) -> (b, h, n, hd) each: every K/V head copied to the query heads of its group
        keys, values = keys.repeat_interleave(self.group_size, dim=1), values.repeat_interleave(self.group_size, dim=1)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
        mask_bool = torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=x.device).triu(1)  # (n, n): future
        attn_scores.masked_fill_(mask_bool, -torch.inf)  # (b, h, n, n)
        attn_weights = self.dropout(torch.softmax(attn_scores / self.head_dim**0.5, dim=-1))  # (b, h, n, n)
        context_vec = (attn_weights @ values).transpose(1, 2)  # (b, h, n, n) @ (b, h, n, hd) -> (b, n, h, hd)
        return self.out_proj(context_vec.contiguous().view(b, num_tokens, self.d_out))  # (b, n, d_out)


class MultiHeadAttentionWithSWA(nn.Module):
    """Query i sees keys i − sliding_window_size + 1 … i: the future and the keys W or more behind are hidden (no
    window, None: every earlier key)."""

    def __init__(self, d_in, d_out, dropout, num_heads, qkv_bias=False, sliding_window_size=None):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.sliding_window_size = sliding_window_size

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        queries, keys, values = (w(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
        positions = torch.arange(num_tokens, device=x.device)  # (n,)
        diff = positions[:, None] - positions[None, :]  # (n, n): how far key j is behind query i
        W = num_tokens + 1 if self.sliding_window_size is None else self.sliding_window_size  # the book's W
        mask_bool = (diff < 0) | (diff >= W)  # (n, n): the future, and keys W or more behind
        attn_scores.masked_fill_(mask_bool, -torch.inf)  # (b, h, n, n)
        attn_weights = self.dropout(torch.softmax(attn_scores / self.head_dim**0.5, dim=-1))  # (b, h, n, n)
        context_vec = (attn_weights @ values).transpose(1, 2)  # (b, h, n, n) @ (b, h, n, hd) -> (b, n, h, hd)
        return self.out_proj(context_vec.contiguous().view(b, num_tokens, self.d_out))  # (b, n, d_out)


class RotaryAttention(_Projections):
    """MultiHeadAttention with rotary position embeddings: q and k rotated by their positions before QKᵀ, so a
    score depends on how far apart two tokens are, not where they are; the values carry no position.  No class of
    the book's: the module's docstring says how it differs from Llama 3's rotation."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, theta_base=10_000.0):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias=qkv_bias)
        cos, sin = compute_rope_params(self.head_dim, theta_base, context_length)  # (ctx, hd) each
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        queries, keys, values = (w(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        queries, keys = apply_rope(queries, self.cos, self.sin), apply_rope(keys, self.cos, self.sin)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)  # (b, h, n, n)
        attn_weights = self.dropout(torch.softmax(attn_scores / self.head_dim**0.5, dim=-1))  # (b, h, n, n)
        context_vec = (attn_weights @ values).transpose(1, 2)  # (b, h, n, n) @ (b, h, n, hd) -> (b, n, h, hd)
        return self.out_proj(context_vec.contiguous().view(b, num_tokens, self.d_out))  # (b, n, d_out)


class CachedMultiHeadAttention(_Projections):
    """The book's MultiHeadAttention with a KV cache (its bonus ``ch04/03_kv-cache`` class, the same constructor):
    with ``use_cache=True`` the new tokens' keys and values join ``cache_k``/``cache_v``, and ``ptr_current_pos`` (the
    position of the first new token) picks the mask's rows; ``reset_cache()`` starts a new sequence."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias=qkv_bias)
        self.register_buffer("cache_k", None, persistent=False)
        self.register_buffer("cache_v", None, persistent=False)
        self.ptr_current_pos = 0

    def forward(self, x, use_cache=False):
        b, num_tokens, d_in = x.shape
        queries, keys_new, values_new = (w(x).view(b, num_tokens, self.num_heads, self.head_dim)
                                         for w in (self.W_query, self.W_key, self.W_value))  # (b, n, h, hd) each
        if use_cache:
            if self.cache_k is None:
                self.cache_k, self.cache_v = keys_new, values_new  # (b, n, h, hd)
            else:
                self.cache_k = torch.cat([self.cache_k, keys_new], dim=1)  # (b, n_cached + n, h, hd)
                self.cache_v = torch.cat([self.cache_v, values_new], dim=1)  # (b, n_cached + n, h, hd)
            keys, values = self.cache_k, self.cache_v
        else:
            keys, values = keys_new, values_new
        queries, keys, values = queries.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)  # (b, h, ·, hd)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n_q, hd) @ (b, h, hd, n_k) -> (b, h, n_q, n_k)
        num_tokens_Q, num_tokens_K = queries.shape[-2], keys.shape[-2]
        if use_cache:
            mask_bool = self.mask.bool()[self.ptr_current_pos:self.ptr_current_pos + num_tokens_Q, :num_tokens_K]
            self.ptr_current_pos += num_tokens_Q
        else:
            mask_bool = self.mask.bool()[:num_tokens_Q, :num_tokens_K]  # (n_q, n_k)
        attn_scores.masked_fill_(mask_bool, -torch.inf)  # (b, h, n_q, n_k)
        attn_weights = self.dropout(torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1))  # (b, h, n_q, n_k)
        context_vec = (attn_weights @ values).transpose(1, 2)  # (b, h, n_q, n_k) @ (b, h, n_k, hd) -> (b, n_q, h, hd)
        return self.out_proj(context_vec.contiguous().view(b, num_tokens, self.d_out))  # (b, n_q, d_out)

    def reset_cache(self):
        self.cache_k, self.cache_v, self.ptr_current_pos = None, None, 0


# --------------------------------------------------------------------------- the bugs, one line each

GQA_LINE = ("keys, values = keys.repeat_interleave(self.group_size, dim=1), "
            "values.repeat_interleave(self.group_size, dim=1)")
GQA_BUG = "keys, values = keys.repeat(1, self.group_size, 1, 1), values.repeat(1, self.group_size, 1, 1)"
WINDOW_LINE = "mask_bool = (diff < 0) | (diff >= W)"
WINDOW_BUG = "mask_bool = (diff < 0) | (diff > W)"
ROPE_LINE = "queries, keys = apply_rope(queries, self.cos, self.sin), apply_rope(keys, self.cos, self.sin)"
ROPE_QUERIES_BUG = "queries = apply_rope(queries, self.cos, self.sin)"
ROPE_VALUES_BUG = "queries, keys, values = (apply_rope(t, self.cos, self.sin) for t in (queries, keys, values))"
ADVANCE_LINE = "self.ptr_current_pos += num_tokens_Q"
ADVANCE_BUG = "pass  # the position is never moved on"
RESET_LINE = "self.cache_k, self.cache_v, self.ptr_current_pos = None, None, 0"
RESET_BUG = "self.cache_k, self.cache_v = None, None"
KEEP_LINE = "keys, values = self.cache_k, self.cache_v"
KEEP_BUG = "keys, values = self.cache_k, self.cache_v = self.cache_k[:, -4:], self.cache_v[:, -4:]"


class RepeatNotInterleave(GroupedQueryAttention):
    """``repeat`` tiles the groups (0, 1, 0, 1): query head h gets group h % num_kv_groups, not h // group_size."""

    forward = one_line_changed(GroupedQueryAttention.forward, GQA_LINE, GQA_BUG + "  # BUG: (b, h, n, hd), tiled")


class WindowOffByOne(MultiHeadAttentionWithSWA):
    """``diff > W``: query i also sees key i − W, a window of W + 1."""

    forward = one_line_changed(MultiHeadAttentionWithSWA.forward, WINDOW_LINE,
                               WINDOW_BUG + "  # BUG: (n, n), W + 1 wide")


class RopeOnQueriesOnly(RotaryAttention):
    """Only the queries are rotated: a score depends on the query's position, not on the distance."""

    forward = one_line_changed(RotaryAttention.forward, ROPE_LINE, ROPE_QUERIES_BUG + "  # BUG: keys not rotated")


class RopeOnValues(RotaryAttention):
    """The values are rotated too: the context carries each key's absolute position."""

    forward = one_line_changed(RotaryAttention.forward, ROPE_LINE, ROPE_VALUES_BUG + "  # BUG: values rotated")


class PositionNeverAdvances(CachedMultiHeadAttention):
    """ptr_current_pos stays 0: every cached token is masked as if it were the first."""

    forward = one_line_changed(CachedMultiHeadAttention.forward, ADVANCE_LINE, ADVANCE_BUG)


class ResetForgetsPosition(CachedMultiHeadAttention):
    """reset_cache() empties the cache but keeps ptr_current_pos: the next sequence starts mid-way."""

    reset_cache = one_line_changed(CachedMultiHeadAttention.reset_cache, RESET_LINE,
                                   RESET_BUG + "  # BUG: ptr_current_pos kept")


class CacheKeepsTooLittle(CachedMultiHeadAttention):
    """The cache is cut to the last 4 tokens (a window) though every query attends to all earlier ones."""

    forward = one_line_changed(CachedMultiHeadAttention.forward, KEEP_LINE, KEEP_BUG + "  # BUG: keeps 4 tokens")
