"""KV-cached attention written the way engineers name their caches: ``self.k``/``self.v``,
``self.keys``/``self.values``, ``self.past_k``, a tuple, a dict, or a cache the caller holds — no attribute with
"cache" in its name holds a tensor.  Plain ``nn.Module``s, nothing from attnviz: the kv-cache rule must find each
cache by what it holds."""

import math

import torch
import torch.nn.functional as F
from torch import nn


def window_mask(n: int, s: int, window: int | None) -> torch.Tensor:
    """(n, s) True where query i (the last n of s tokens) must not see key j: the future, and keys W or more behind."""
    diff = torch.arange(n)[:, None] - torch.arange(s)[None, :] + (s - n)  # (n, s): how far key j is behind query i
    hidden = diff < 0  # (n, s)
    return hidden if window is None else hidden | (diff >= window)  # (n, s)


class WindowKV(nn.Module):
    """Sliding-window attention whose cache is ``self.k``/``self.v`` (b, h, ≤ W, hd): the last W tokens' keys and
    values; ``keep_all=True`` keeps every token (and still attends over the window alone)."""

    def __init__(self, d_in=16, d_out=32, num_heads=4, sliding_window_size=3, keep_all=False):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.sliding_window_size, self.keep_all = sliding_window_size, keep_all
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.k = self.v = None

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries, keys, values = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        if use_cache:
            if self.k is not None:
                keys = torch.cat([self.k, keys], dim=2)  # (b, h, cached + n, hd)
                values = torch.cat([self.v, values], dim=2)  # (b, h, cached + n, hd)
            window = self.sliding_window_size
            self.k, self.v = (keys, values) if self.keep_all else (keys[:, :, -window:], values[:, :, -window:])
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, s) -> (b, h, n, s)
        attn_scores = attn_scores.masked_fill(window_mask(n, keys.shape[2], self.sliding_window_size), -torch.inf)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, s)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)

    def reset_cache(self):
        self.k = self.v = None


class DictCacheWindow(WindowKV):
    """WindowKV whose cache is a dict, ``self.cache = {"k": …, "v": …}``; the reset empties it."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        del self.k, self.v
        self.cache = {}

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries, keys, values = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        if use_cache:
            if self.cache:
                keys = torch.cat([self.cache["k"], keys], dim=2)  # (b, h, cached + n, hd)
                values = torch.cat([self.cache["v"], values], dim=2)  # (b, h, cached + n, hd)
            kept = keys.shape[2] if self.keep_all else self.sliding_window_size
            self.cache = {"k": keys[:, :, -kept:], "v": values[:, :, -kept:]}  # (b, h, ≤ kept, hd) each
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, s) -> (b, h, n, s)
        attn_scores = attn_scores.masked_fill(window_mask(n, keys.shape[2], self.sliding_window_size), -torch.inf)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, s)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)

    def reset_cache(self):
        self.cache = {}


class TupleCacheMHA(nn.Module):
    """Causal multi-head attention whose cache is one tuple, ``self.kv = (k, v)`` (b, h, n, hd) each, and which keeps
    a causal mask buffer that no forward changes."""

    def __init__(self, d_in=16, d_out=32, context_length=16, num_heads=4):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.qkv = nn.Linear(d_in, 3 * d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())
        self.kv = None

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries, keys, values = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        start = 0  # (b, h, n, hd) each above
        if use_cache:
            if self.kv is not None:
                start = self.kv[0].shape[2]
                keys = torch.cat([self.kv[0], keys], dim=2)  # (b, h, cached + n, hd)
                values = torch.cat([self.kv[1], values], dim=2)  # (b, h, cached + n, hd)
            self.kv = (keys, values)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, s) -> (b, h, n, s)
        attn_scores = attn_scores.masked_fill(self.mask[start:start + n, :keys.shape[2]], -torch.inf)  # (b, h, n, s)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, s)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)

    def reset_cache(self):
        self.kv = None



class StackedViews(nn.Module):
    """Causal multi-head attention whose cache is one stacked tensor, ``self.kv`` (2, b, h, n, hd), kept beside its
    halves as views, ``self.k = self.kv[0]`` and ``self.v = self.kv[1]``, which the forward reads.  ``reset``: "all"
    empties the three, "views" only ``k`` and ``v`` (the next forward extends the old ``kv``), "nothing" none."""

    def __init__(self, d_in=16, d_out=32, context_length=16, num_heads=4, reset="all"):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.reset = reset
        self.qkv = nn.Linear(d_in, 3 * d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())
        self.kv = self.k = self.v = None

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries, keys, values = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        start = 0  # (b, h, n, hd) each above
        if use_cache:
            kv = torch.stack([keys, values])  # (2, b, h, n, hd)
            if self.kv is not None:
                start = self.kv.shape[3]
                kv = torch.cat([self.kv, kv], dim=3)  # (2, b, h, cached + n, hd)
            self.kv = kv
            self.k, self.v = self.kv[0], self.kv[1]  # (b, h, cached + n, hd) each: views of self.kv
            keys, values = self.k, self.v
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, s) -> (b, h, n, s)
        attn_scores = attn_scores.masked_fill(self.mask[start:start + n, :keys.shape[2]], -torch.inf)  # (b, h, n, s)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, s)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)

    def reset_cache(self):
        if self.reset == "all":
            self.kv = None
        if self.reset in ("all", "views"):
            self.k = self.v = None

class StepCountedMHA(nn.Module):
    """Causal multi-head attention whose cache is ``self.past_k``/``self.past_v`` (b, h, n, hd), beside two tensors
    that change at every cached forward and hold no token: a ``steps`` buffer the reset replaces, and a ``calls``
    count it never resets."""

    def __init__(self, d_in=16, d_out=32, num_heads=4):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.register_buffer("steps", torch.tensor(0))
        self.calls = torch.zeros(1)
        self.past_k = self.past_v = None

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries, keys, values = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        if use_cache:
            if self.past_k is not None:
                keys = torch.cat([self.past_k, keys], dim=2)  # (b, h, cached + n, hd)
                values = torch.cat([self.past_v, values], dim=2)  # (b, h, cached + n, hd)
            self.past_k, self.past_v = keys, values
            self.steps += 1
            self.calls = self.calls + 1
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, s) -> (b, h, n, s)
        attn_scores = attn_scores.masked_fill(window_mask(n, keys.shape[2], None), -torch.inf)  # (b, h, n, s)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, s)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)

    def reset_cache(self):
        self.past_k = self.past_v = None
        self.steps = torch.tensor(0)


class GQAKeysValues(nn.Module):
    """Grouped-query attention whose cache is ``self.keys``/``self.values`` (b, num_kv_groups, n, hd), the K/V heads
    before ``repeat_interleave``; ``repeated=True`` caches them after it (num_heads heads)."""

    def __init__(self, d_in=16, d_out=32, context_length=16, num_heads=4, num_kv_groups=2, repeated=False):
        super().__init__()
        self.d_out, self.num_heads, self.num_kv_groups = d_out, num_heads, num_kv_groups
        self.head_dim, self.group_size = d_out // num_heads, num_heads // num_kv_groups
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False)
        self.W_value = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())
        self.repeated = repeated
        self.keys = self.values = None

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        keys = self.W_key(x).view(b, n, self.num_kv_groups, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        values = self.W_value(x).view(b, n, self.num_kv_groups, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        if self.repeated:
            keys = keys.repeat_interleave(self.group_size, dim=1)  # (b, h, n, hd)
            values = values.repeat_interleave(self.group_size, dim=1)  # (b, h, n, hd)
        start = 0
        if use_cache:
            if self.keys is not None:
                start = self.keys.shape[2]
                keys = torch.cat([self.keys, keys], dim=2)  # (b, g or h, cached + n, hd)
                values = torch.cat([self.values, values], dim=2)  # (b, g or h, cached + n, hd)
            self.keys, self.values = keys, values
        if not self.repeated:
            keys = keys.repeat_interleave(self.group_size, dim=1)  # (b, h, s, hd)
            values = values.repeat_interleave(self.group_size, dim=1)  # (b, h, s, hd)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, s) -> (b, h, n, s)
        attn_scores = attn_scores.masked_fill(self.mask[start:start + n, :keys.shape[2]], -torch.inf)  # (b, h, n, s)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, s)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)

    def reset_cache(self):
        self.keys = self.values = None


class PastWindow(nn.Module):
    """Hugging Face's convention with a sliding window: the caller holds the cache, ``forward(x,
    past_key_values=None, use_cache=False) -> (out, present)``, and ``present`` is the last W tokens' (k, v)
    (b, h, ≤ W, hd) each; ``keep_all=True`` returns every token's."""

    def __init__(self, d_model=32, n_heads=4, sliding_window_size=3, keep_all=False):
        super().__init__()
        self.h, self.dk = n_heads, d_model // n_heads
        self.sliding_window_size, self.keep_all = sliding_window_size, keep_all
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.o = nn.Linear(d_model, d_model)

    def forward(self, x, past_key_values=None, use_cache=False):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, self.dk).permute(2, 0, 3, 1, 4)  # 3 × (B, h, T, dk)
        if past_key_values is not None:
            k = torch.cat([past_key_values[0], k], dim=2)  # (B, h, past + T, dk)
            v = torch.cat([past_key_values[1], v], dim=2)  # (B, h, past + T, dk)
        kept = k.shape[2] if self.keep_all else self.sliding_window_size
        present = (k[:, :, -kept:], v[:, :, -kept:]) if use_cache else None  # (B, h, ≤ kept, dk) each
        s = q @ k.transpose(-1, -2) / math.sqrt(self.dk)  # (B, h, T, S)
        s = s.masked_fill(window_mask(T, k.shape[2], self.sliding_window_size), float("-inf"))  # (B, h, T, S)
        y = F.softmax(s, dim=-1) @ v  # (B, h, T, dk)
        return self.o(y.transpose(1, 2).reshape(B, T, C)), present  # (B, T, C)


class _TwoGQALayers(nn.Module):
    """Two grouped-query attention layers in a row, a residual around each (a small decoder's attention stack), each
    layer's K and V (b, num_kv_groups, n, hd) cached; ``repeated=True`` caches them after ``repeat_interleave``
    (num_heads heads)."""

    def __init__(self, d_model=32, num_heads=4, num_kv_groups=2, repeated=False):
        super().__init__()
        self.d_out, self.num_heads, self.num_kv_groups = d_model, num_heads, num_kv_groups
        self.head_dim, self.group_size = d_model // num_heads, num_heads // num_kv_groups
        self.W_query = nn.ModuleList(nn.Linear(d_model, d_model, bias=False) for _ in range(2))
        self.W_key = nn.ModuleList(nn.Linear(d_model, num_kv_groups * self.head_dim, bias=False) for _ in range(2))
        self.W_value = nn.ModuleList(nn.Linear(d_model, num_kv_groups * self.head_dim, bias=False) for _ in range(2))
        self.out_proj = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(2))
        self.repeated = repeated

    def layer(self, i, x, past):
        """Layer i on x (b, n, d_model) after the cached ``past`` (k, v) or None: (its output, the (k, v) to keep)."""
        b, n, _ = x.shape
        queries = self.W_query[i](x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        keys = self.W_key[i](x).view(b, n, self.num_kv_groups, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        values = self.W_value[i](x).view(b, n, self.num_kv_groups, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        if self.repeated:
            keys = keys.repeat_interleave(self.group_size, dim=1)  # (b, h, n, hd)
            values = values.repeat_interleave(self.group_size, dim=1)  # (b, h, n, hd)
        if past is not None:
            keys = torch.cat([past[0], keys], dim=2)  # (b, g or h, cached + n, hd)
            values = torch.cat([past[1], values], dim=2)  # (b, g or h, cached + n, hd)
        kept = (keys, values)
        if not self.repeated:
            keys = keys.repeat_interleave(self.group_size, dim=1)  # (b, h, s, hd)
            values = values.repeat_interleave(self.group_size, dim=1)  # (b, h, s, hd)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, s) -> (b, h, n, s)
        attn_scores = attn_scores.masked_fill(window_mask(n, keys.shape[2], None), -torch.inf)  # (b, h, n, s)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, s)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)
        return x + self.out_proj[i](context_vec), kept  # (b, n, d_model)


class LayerCaches(_TwoGQALayers):
    """The two layers' cache kept as one list of per-layer tuples, ``self.kv = [(k, v), (k, v)]``."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.kv = None

    def forward(self, x, use_cache=False):
        kept = []
        for i in range(2):
            x, layer_kv = self.layer(i, x, self.kv[i] if use_cache and self.kv is not None else None)  # (b, n, d)
            kept.append(layer_kv)
        if use_cache:
            self.kv = kept
        return x  # (b, n, d_model)

    def reset_cache(self):
        self.kv = None


class PastLayers(_TwoGQALayers):
    """The caller holds the two layers' cache as Hugging Face's legacy format has it: ``past_key_values`` is a tuple of
    per-layer (k, v) tuples, ``forward(x, past_key_values=None, use_cache=False) -> (out, presents)``."""

    def forward(self, x, past_key_values=None, use_cache=False):
        presents = []
        for i in range(2):
            x, layer_kv = self.layer(i, x, None if past_key_values is None else past_key_values[i])  # (b, n, d)
            presents.append(layer_kv)
        return x, tuple(presents) if use_cache else None  # (b, n, d_model), ((k, v), (k, v))


class ZeroedInPlace(nn.Module):
    """Causal multi-head attention whose cache is allocated once, as buffers ``k_buf``/``v_buf`` (1, h, context, hd)
    filled at ``pos``, and whose reset zeroes them in place (``k_buf.zero_()``): the same tensors before and after."""

    def __init__(self, d_in=16, d_out=32, context_length=16, num_heads=4):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.qkv = nn.Linear(d_in, 3 * d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.register_buffer("k_buf", torch.zeros(1, num_heads, context_length, self.head_dim), persistent=False)
        self.register_buffer("v_buf", torch.zeros(1, num_heads, context_length, self.head_dim), persistent=False)
        self.pos = 0

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries, keys, values = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        start = 0  # (b, h, n, hd) each above
        if use_cache:
            start = self.pos
            self.k_buf[:, :, start:start + n] = keys
            self.v_buf[:, :, start:start + n] = values
            self.pos += n
            keys, values = self.k_buf[:, :, :self.pos], self.v_buf[:, :, :self.pos]  # (1, h, cached + n, hd)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, s) -> (b, h, n, s)
        attn_scores = attn_scores.masked_fill(window_mask(n, keys.shape[2], None), -torch.inf)  # (b, h, n, s)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, s)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)

    def reset_cache(self):
        self.k_buf.zero_()
        self.v_buf.zero_()
        self.pos = 0
