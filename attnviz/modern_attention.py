"""The attention of today's LLMs, from the book's bonus material: grouped-query (and multi-query), multi-head
latent and sliding-window attention, each optionally with rotary positions.

Class names, constructor arguments, parameter names, shapes, bias choices and creation order are those of the
book's bonus classes (``ch04/04_gqa``, ``05_mla``, ``06_swa``; RoPE from ``llama3.py``), so a state dict moves
between these classes and the book's both ways, and after ``torch.manual_seed(s)`` the weights are the book's.
As in :mod:`attnviz.attention`, each ``forward(x, recorder=None)`` records its named intermediates; the
stages these classes add are ``latent`` (MLA: what its cache would keep), ``rotated_queries`` and ``rotated_keys``
(rotary), and the shapes of ``kv_groups`` and ``kv_repeat`` (GQA/MQA: the keys as K/V heads, then repeated).
Scaling and masking are separate stages (scale, then mask), which gives the book's weights bitwise (−∞ / √dₖ = −∞).

Additions that change no result: ``causal`` (GQA and MLA; default True, as the book), and ``rope_base``
(GQA and SWA; None = no rotation, as the bonus classes): queries and keys are rotated after the head split
and before QKᵀ, as the book's Llama 3 ``GroupedQueryAttention`` does.  The classes hold no KV cache: the mask
is built from query and key positions, so a cache adds an offset to the query positions.
"""

from __future__ import annotations

import torch
from torch import nn

from attnviz import rope
from attnviz.attention import Recorder, record


def causal_mask(num_tokens: int, device) -> torch.Tensor:
    """True where query i must not see key j (j > i), built from positions as the bonus classes do."""
    q_positions = torch.arange(num_tokens, device=device)  # (n,)
    k_positions = torch.arange(num_tokens, device=device)  # (n,)
    return q_positions.unsqueeze(-1) < k_positions.unsqueeze(0)  # (n, 1) < (1, n) -> (n, n)


class GroupedQueryAttention(nn.Module):
    """Grouped-query attention (Llama 3, Qwen3, Gemma 3): ``num_kv_groups`` key/value heads, each shared by
    ``group_size = num_heads // num_kv_groups`` query heads (``num_kv_groups = 1``: multi-query attention)."""

    def __init__(self, d_in, d_out, dropout, num_heads, num_kv_groups, dtype=None, qkv_bias=False, *,
                 causal: bool = True, rope_base: float | None = None):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        assert num_heads % num_kv_groups == 0, "num_heads must be divisible by num_kv_groups"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_key = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=qkv_bias, dtype=dtype)  # d_in -> g·hd
        self.W_value = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=qkv_bias, dtype=dtype)  # d_in -> g·hd
        self.num_kv_groups = num_kv_groups
        self.group_size = num_heads // num_kv_groups  # query heads per key/value head
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias, dtype=dtype)  # d_in -> d_out
        self.out_proj = nn.Linear(d_out, d_out, bias=False, dtype=dtype)  # no bias, as the book's GQA
        self.dropout = nn.Dropout(dropout)
        self.causal = causal
        self.rope_base = rope_base

    def forward(self, x: torch.Tensor, recorder: Recorder | None = None) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, n, d_in)
        queries = self.W_query(x)  # (b, n, d_in) -> (b, n, d_out)
        keys = self.W_key(x)  # (b, n, d_in) -> (b, n, g·hd)
        values = self.W_value(x)  # (b, n, d_in) -> (b, n, g·hd)
        record(recorder, "queries", queries)
        record(recorder, "keys", keys)
        record(recorder, "values", values)

        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, n, d_out) -> (b, n, h, hd)
        keys = keys.view(b, num_tokens, self.num_kv_groups, self.head_dim)  # (b, n, g·hd) -> (b, n, g, hd)
        values = values.view(b, num_tokens, self.num_kv_groups, self.head_dim)  # (b, n, g, hd)
        record(recorder, "view", queries, keep=False)
        queries = queries.transpose(1, 2)  # (b, n, h, hd) -> (b, h, n, hd)
        keys = keys.transpose(1, 2)  # (b, n, g, hd) -> (b, g, n, hd)
        values = values.transpose(1, 2)  # (b, g, n, hd)
        record(recorder, "transpose", queries, keep=False)
        record(recorder, "kv_groups", keys, keep=False)

        if self.rope_base is not None:  # rotary positions: turn q and k by their token's position
            cos, sin = rope.compute_rope_params(self.head_dim, self.rope_base, num_tokens, x.device)  # (n, hd) each
            queries = rope.apply_rope(queries, cos, sin)  # (b, h, n, hd)
            keys = rope.apply_rope(keys, cos, sin)  # (b, g, n, hd)
            record(recorder, "rotated_queries", queries)
            record(recorder, "rotated_keys", keys)

        # each K/V head serves group_size neighbouring query heads: [K1, K2] -> [K1, K1, K2, K2]
        # (repeat would give [K1, K2, K1, K2]: heads paired with the wrong group)
        keys = keys.repeat_interleave(self.group_size, dim=1)  # (b, g, n, hd) -> (b, h, n, hd)
        values = values.repeat_interleave(self.group_size, dim=1)  # (b, g, n, hd) -> (b, h, n, hd)
        record(recorder, "kv_repeat", keys, keep=False)

        mask_bool = causal_mask(num_tokens, x.device) if self.causal else None  # (n, n)
        return scaled_dot_product(self, queries, keys, values, mask_bool, recorder)


class MultiHeadLatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek V3): keys and values are up-projected from one small latent
    vector per token, ``latent_dim`` wide (default ``max(16, d_out // 8)``, as the book)."""

    def __init__(self, d_in, d_out, dropout, num_heads, qkv_bias=False, latent_dim=None, *, causal: bool = True):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.latent_dim = latent_dim if latent_dim is not None else max(16, d_out // 8)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)  # per-head queries
        self.W_DKV = nn.Linear(d_in, self.latent_dim, bias=qkv_bias)  # down: d_in -> latent_dim
        self.W_UK = nn.Linear(self.latent_dim, d_out, bias=qkv_bias)  # up: latent_dim -> per-head keys
        self.W_UV = nn.Linear(self.latent_dim, d_out, bias=qkv_bias)  # up: latent_dim -> per-head values
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.causal = causal

    def forward(self, x: torch.Tensor, recorder: Recorder | None = None) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, n, d_in)
        queries = self.W_query(x)  # (b, n, d_in) -> (b, n, d_out)
        latent = self.W_DKV(x)  # down-projection: (b, n, d_in) -> (b, n, latent_dim)
        record(recorder, "latent", latent)
        keys = self.W_UK(latent)  # up-projection: (b, n, latent_dim) -> (b, n, d_out)
        values = self.W_UV(latent)  # up-projection: (b, n, latent_dim) -> (b, n, d_out)
        record(recorder, "queries", queries)
        record(recorder, "keys", keys)
        record(recorder, "values", values)

        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, n, d_out) -> (b, n, h, hd)
        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, n, h, hd)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, n, h, hd)
        record(recorder, "view", queries, keep=False)
        queries = queries.transpose(1, 2)  # (b, n, h, hd) -> (b, h, n, hd)
        keys = keys.transpose(1, 2)  # (b, h, n, hd)
        values = values.transpose(1, 2)  # (b, h, n, hd)
        record(recorder, "transpose", queries, keep=False)

        mask_bool = causal_mask(num_tokens, x.device) if self.causal else None  # (n, n)
        return scaled_dot_product(self, queries, keys, values, mask_bool, recorder)


class MultiHeadAttentionWithSWA(nn.Module):
    """Sliding-window attention (Gemma 2/3, Mistral): query i sees key j exactly when 0 ≤ i − j < W,
    W = ``sliding_window_size`` (None: every earlier key, i.e. causal multi-head attention)."""

    def __init__(self, d_in, d_out, dropout, num_heads, qkv_bias=False, sliding_window_size=None, *,
                 rope_base: float | None = None):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)  # combines the head outputs
        self.dropout = nn.Dropout(dropout)
        self.sliding_window_size = sliding_window_size
        self.causal = True  # the window hides the future too
        self.rope_base = rope_base

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

        window = num_tokens + 1 if self.sliding_window_size is None else int(self.sliding_window_size)  # W
        q_positions = torch.arange(num_tokens, device=x.device)  # (n,)
        k_positions = torch.arange(num_tokens, device=x.device)  # (n,)
        diff = q_positions.unsqueeze(-1) - k_positions.unsqueeze(0)  # (n, 1) - (1, n) -> (n, n): i − j
        mask_bool = (diff < 0) | (diff >= window)  # (n, n): the future, and keys W or more behind
        return scaled_dot_product(self, queries, keys, values, mask_bool, recorder)


def scaled_dot_product(module: nn.Module, queries, keys, values, mask_bool, recorder):
    """The shared tail of the three classes, in the book's operations: QKᵀ, ÷√hd, mask, softmax, dropout, ·V,
    heads concatenated, ``out_proj``."""
    b, num_heads, num_tokens, head_dim = queries.shape  # (b, h, n, hd)
    attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
    record(recorder, "scores", attn_scores)
    attn_scores = attn_scores / keys.shape[-1] ** 0.5  # ÷√head_dim -> (b, h, n, n)
    record(recorder, "scaled", attn_scores, copy=mask_bool is not None)  # copy: masked in place next
    if mask_bool is not None:
        attn_scores.masked_fill_(mask_bool, -torch.inf)  # in place -> (b, h, n, n)
    record(recorder, "masked", attn_scores)
    attn_weights = torch.softmax(attn_scores, dim=-1)  # (b, h, n, n), each row sums to 1
    record(recorder, "weights", attn_weights)
    attn_weights = module.dropout(attn_weights)  # (b, h, n, n)
    record(recorder, "dropped", attn_weights)

    context_vec = (attn_weights @ values).transpose(1, 2)  # (b, h, n, n) @ (b, h, n, hd) -> (b, n, h, hd)
    record(recorder, "context", context_vec.transpose(1, 2))  # per head: (b, h, n, hd)
    context_vec = context_vec.contiguous().view(b, num_tokens, module.d_out)  # (b, n, h, hd) -> (b, n, d_out)
    record(recorder, "concat", context_vec, keep=False)
    context_vec = module.out_proj(context_vec)  # (b, n, d_out) -> (b, n, d_out)
    record(recorder, "output", context_vec)
    return context_vec
