"""The bonus attention classes with the book's KV cache: grouped-query (and multi-query), multi-head latent and
sliding-window attention, each holding what its cache really keeps.

As the book's bonus code does (``ch04/04_gqa``, ``05_mla``, ``06_swa``), each class adds ``use_cache`` to
``forward``, a ``ptr_current_pos`` (the position of the first token fed next) and ``reset_cache()``:

* :class:`CachedGroupedQueryAttention` caches the keys and values of its K/V heads before they are repeated,
  ``cache_k``/``cache_v`` ``(b, num_kv_groups, n, head_dim)``: the cache shrinks by ``group_size``;
* :class:`CachedMultiHeadLatentAttention` caches one latent vector per token, ``cache_c_kv``
  ``(b, n, latent_dim)``, and up-projects every cached latent to keys and values at each step;
* :class:`CachedMultiHeadAttentionWithSWA` keeps at most the last W keys and values, ``cache_k``/``cache_v``
  ``(b, min(n, W), num_heads, head_dim)``: appended on dim 1 before the transpose, as ``06_swa`` (and the book's
  MHA cache of ``03_kv-cache``) keeps them; a prefill of q tokens attends over up to W − 1 older keys plus its
  own q, so its first query keeps its whole window.

Without ``use_cache`` each ``forward`` is its parent's (:mod:`attnviz.modern_attention`), unchanged.  The mask
is built from absolute positions (queries from ``ptr_current_pos``, keys from the first one the cache still
holds), so a cached step masks exactly what the full forward masks.  Queries and keys are not rotated here:
the GPT these classes sit in has learned positions.  ``cache_tensors()`` names what a layer holds, as
:class:`attnviz.models.gpt.CachedMultiHeadAttention` does.
"""

from __future__ import annotations

import torch

from attnviz.attention import Recorder, record
from attnviz.modern_attention import (
    GroupedQueryAttention,
    MultiHeadAttentionWithSWA,
    MultiHeadLatentAttention,
    scaled_dot_product,
)


def _positions(start: int, count: int, device) -> torch.Tensor:
    return torch.arange(start, start + count, device=device, dtype=torch.long)  # (count,): absolute positions


def _no_rotation(module) -> None:
    if getattr(module, "rope_base", None) is not None:
        raise ValueError("The cached classes have no rotary positions: build them with rope_base=None.")


class KeyValueCache:
    """The book's KV-cache state for an attention class that keeps keys and values: the ``cache_k``/``cache_v``
    buffers (not in the state dict) and ``ptr_current_pos``; ``reset_cache()`` empties both and sets the position
    back to 0, ``cache_tensors()`` names what the cache holds (each class says the shapes), ``cache_token_axis`` the
    dimension that counts its tokens."""

    cache_token_axis = 2  # cache_k/cache_v (b, heads, n, hd): kept after the transpose, as ch04/04_gqa keeps them

    def init_cache(self) -> None:
        self.register_buffer("cache_k", None, persistent=False)
        self.register_buffer("cache_v", None, persistent=False)
        self.ptr_current_pos = 0

    def reset_cache(self) -> None:
        self.cache_k, self.cache_v = None, None
        self.ptr_current_pos = 0

    def cache_tensors(self) -> dict[str, torch.Tensor]:
        """``{"cache_k": …, "cache_v": …}``, or {} when empty."""
        return {} if self.cache_k is None else {"cache_k": self.cache_k, "cache_v": self.cache_v}


class CachedGroupedQueryAttention(KeyValueCache, GroupedQueryAttention):
    """Grouped-query attention whose cache holds the ``num_kv_groups`` K/V heads, not the repeated ones:
    ``cache_k``/``cache_v`` (b, g, n, hd)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _no_rotation(self)
        self.init_cache()

    def forward(self, x: torch.Tensor, recorder: Recorder | None = None, use_cache: bool = False) -> torch.Tensor:
        if not use_cache:
            return super().forward(x, recorder)
        b, num_tokens, d_in = x.shape  # (b, q, d_in): only the new tokens
        queries = self.W_query(x)  # (b, q, d_in) -> (b, q, d_out)
        keys_new = self.W_key(x)  # (b, q, d_in) -> (b, q, g·hd)
        values_new = self.W_value(x)  # (b, q, g·hd)
        record(recorder, "queries", queries)

        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # -> (b, h, q, hd)
        keys_new = keys_new.view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)  # (b, g, q, hd)
        values_new = values_new.view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)  # (b,g,q,hd)

        if self.cache_k is None:
            self.cache_k, self.cache_v = keys_new, values_new  # (b, g, q, hd) each
        else:
            # (b, g, k, hd) + (b, g, q, hd) -> (b, g, k+q, hd)
            self.cache_k = torch.cat([self.cache_k, keys_new], dim=2)
            self.cache_v = torch.cat([self.cache_v, values_new], dim=2)  # (b, g, k+q, hd)
        record(recorder, "keys", self.cache_k)
        record(recorder, "values", self.cache_v)
        record(recorder, "kv_groups", self.cache_k, keep=False)

        keys = self.cache_k.repeat_interleave(self.group_size, dim=1)  # (b, g, k, hd) -> (b, h, k, hd)
        values = self.cache_v.repeat_interleave(self.group_size, dim=1)  # (b, g, k, hd) -> (b, h, k, hd)
        record(recorder, "kv_repeat", keys, keep=False)

        num_tokens_K = keys.shape[-2]
        q_positions = _positions(self.ptr_current_pos, num_tokens, x.device)  # (q,)
        k_positions = _positions(0, num_tokens_K, x.device)  # (k,): the cache holds every token
        self.ptr_current_pos += num_tokens
        mask_bool = (q_positions.unsqueeze(-1) < k_positions.unsqueeze(0)) if self.causal else None  # (q, k)
        return scaled_dot_product(self, queries, keys, values, mask_bool, recorder)


class CachedMultiHeadLatentAttention(MultiHeadLatentAttention):
    """Multi-head latent attention whose cache holds the latent, ``cache_c_kv`` (b, n, latent_dim)."""

    cache_token_axis = 1  # cache_c_kv (b, n, latent_dim)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_buffer("cache_c_kv", None, persistent=False)
        self.ptr_current_pos = 0

    def forward(self, x: torch.Tensor, recorder: Recorder | None = None, use_cache: bool = False) -> torch.Tensor:
        if not use_cache:
            return super().forward(x, recorder)
        b, num_tokens, d_in = x.shape  # (b, q, d_in): only the new tokens
        queries = self.W_query(x)  # (b, q, d_in) -> (b, q, d_out)
        latent_new = self.W_DKV(x)  # down-projection: (b, q, d_in) -> (b, q, latent_dim)
        if self.cache_c_kv is None:
            self.cache_c_kv = latent_new  # (b, q, latent_dim)
        else:
            self.cache_c_kv = torch.cat([self.cache_c_kv, latent_new], dim=1)  # (b, k, l) + (b, q, l) -> (b, k+q, l)
        latent = self.cache_c_kv  # (b, k, latent_dim): every token so far
        record(recorder, "latent", latent)
        keys = self.W_UK(latent)  # up-projection: (b, k, latent_dim) -> (b, k, d_out)
        values = self.W_UV(latent)  # up-projection: (b, k, latent_dim) -> (b, k, d_out)
        record(recorder, "queries", queries)
        record(recorder, "keys", keys)
        record(recorder, "values", values)

        num_tokens_K = keys.shape[1]
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # -> (b, h, q, hd)
        keys = keys.view(b, num_tokens_K, self.num_heads, self.head_dim).transpose(1, 2)  # -> (b, h, k, hd)
        values = values.view(b, num_tokens_K, self.num_heads, self.head_dim).transpose(1, 2)  # -> (b, h, k, hd)

        q_positions = _positions(self.ptr_current_pos, num_tokens, x.device)  # (q,)
        k_positions = _positions(0, num_tokens_K, x.device)  # (k,)
        self.ptr_current_pos += num_tokens
        mask_bool = (q_positions.unsqueeze(-1) < k_positions.unsqueeze(0)) if self.causal else None  # (q, k)
        return scaled_dot_product(self, queries, keys, values, mask_bool, recorder)

    def reset_cache(self) -> None:
        self.cache_c_kv = None
        self.ptr_current_pos = 0

    def cache_tensors(self) -> dict[str, torch.Tensor]:
        """``{"cache_c_kv": (b, n, latent_dim)}``, or {} when empty."""
        return {} if self.cache_c_kv is None else {"cache_c_kv": self.cache_c_kv}


class CachedMultiHeadAttentionWithSWA(KeyValueCache, MultiHeadAttentionWithSWA):
    """Sliding-window attention whose cache keeps at most the last W keys and values (all of them without W):
    ``cache_k``/``cache_v`` (b, ≤W, h, hd), tokens first as the book's ``06_swa`` keeps them."""

    cache_token_axis = 1  # cache_k/cache_v (b, n, h, hd): appended before the transpose, as ch04/06_swa

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _no_rotation(self)
        self.init_cache()

    def forward(self, x: torch.Tensor, recorder: Recorder | None = None, use_cache: bool = False) -> torch.Tensor:
        if not use_cache:
            return super().forward(x, recorder)
        b, num_tokens, d_in = x.shape  # (b, q, d_in): only the new tokens
        keys_new = self.W_key(x)  # (b, q, d_in) -> (b, q, d_out)
        queries = self.W_query(x)  # (b, q, d_out)
        values_new = self.W_value(x)  # (b, q, d_out)
        record(recorder, "queries", queries)

        keys_new = keys_new.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, q, d_out) -> (b, q, h, hd)
        values_new = values_new.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, q, h, hd)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, q, h, hd)

        old_len = 0 if self.cache_k is None else self.cache_k.shape[1]  # keys held before this forward
        if self.cache_k is None:
            keys, values = keys_new, values_new  # (b, q, h, hd)
        else:
            keys = torch.cat([self.cache_k, keys_new], dim=1)  # (b, k, h, hd) + (b, q, h, hd) -> (b, k+q, h, hd)
            values = torch.cat([self.cache_v, values_new], dim=1)  # (b, k+q, h, hd)
        combined = keys.shape[1]
        k_start = self.ptr_current_pos - old_len  # the absolute position of the first key held
        if self.sliding_window_size is not None:
            window = int(self.sliding_window_size)
            attn_keep = min(combined, window + num_tokens - 1)  # W − 1 older keys serve the chunk's first query
            cache_keep = min(combined, window)  # what the next token can still see
            self.cache_k, self.cache_v = keys[:, -cache_keep:], values[:, -cache_keep:]  # (b, ≤W, h, hd)
            keys, values = keys[:, -attn_keep:], values[:, -attn_keep:]  # (b, ≤W+q−1, h, hd)
            k_start += combined - attn_keep
        else:
            window = self.ptr_current_pos + num_tokens + 1  # wider than any distance: causal only
            self.cache_k, self.cache_v = keys, values  # (b, k+q, h, hd)
        keys = keys.transpose(1, 2)  # (b, k, h, hd) -> (b, h, k, hd)
        values = values.transpose(1, 2)  # (b, h, k, hd)
        queries = queries.transpose(1, 2)  # (b, q, h, hd) -> (b, h, q, hd)
        record(recorder, "keys", keys)
        record(recorder, "values", values)

        q_positions = _positions(self.ptr_current_pos, num_tokens, x.device)  # (q,)
        k_positions = _positions(k_start, keys.shape[2], x.device)  # (k,)
        self.ptr_current_pos += num_tokens
        diff = q_positions.unsqueeze(-1) - k_positions.unsqueeze(0)  # (q, 1) - (1, k) -> (q, k): i − j
        mask_bool = (diff < 0) | (diff >= window)  # (q, k): the future, and keys W or more behind
        return scaled_dot_product(self, queries, keys, values, mask_bool, recorder)
