"""Rotary position embeddings written as users write them, in the three layouts people copy: Llama's ``rotate_half``
(feature k paired with k + hd/2), Meta's ``view_as_complex`` (neighbours 2k, 2k + 1) and GPT-NeoX's partial rotary
(the first ``rotary_pct`` of each head).  ``bug`` switches on one mistake of where the rotation goes; without it each
rotates q and k only, as it should.  ``RotaryValuePositions`` rotates q and k and adds a learned position to the
values: positions in V that are not a rotation."""

import math

import torch
import torch.nn.functional as F
from torch import nn


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)  # (…, hd): each pair turned by 90°


def llama_cos_sin(head_dim, context_length, base=10_000.0):
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)  # (hd/2,)
    angles = torch.outer(torch.arange(context_length).float(), inv_freq)  # (ctx, hd/2)
    angles = torch.cat((angles, angles), dim=-1)  # (ctx, hd)
    return angles.cos(), angles.sin()


class LlamaRotary(nn.Module):
    """Llama's attention: q and k turned by ``rotate_half`` and their position.  ``bug``: ``"values-too"`` rotates
    q, k and v; ``"values-instead"`` rotates v alone; ``"keys-only"`` rotates k alone; ``"keys-other-base"`` turns
    the keys by angles of another base (Llama 3's 500,000, the queries by 10,000)."""

    def __init__(self, d_in=32, num_heads=4, context_length=64, bug=None):
        super().__init__()
        self.num_heads, self.head_dim, self.bug = num_heads, d_in // num_heads, bug
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d_in, d_in, bias=False) for _ in range(4))
        cos, sin = llama_cos_sin(self.head_dim, context_length)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        key_cos, key_sin = llama_cos_sin(self.head_dim, context_length, 500_000.0)
        self.register_buffer("key_cos", key_cos, persistent=False)
        self.register_buffer("key_sin", key_sin, persistent=False)

    def apply_rope(self, x, cos=None, sin=None):
        n = x.shape[-2]
        cos, sin = (self.cos, self.sin) if cos is None else (cos, sin)
        return x * cos[:n] + rotate_half(x) * sin[:n]  # (b, h, n, hd)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = (proj(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))  # (b, h, n, hd) each
        if self.bug == "values-too":
            q, k, v = self.apply_rope(q), self.apply_rope(k), self.apply_rope(v)  # (b, h, n, hd) each
        elif self.bug == "values-instead":
            v = self.apply_rope(v)  # (b, h, n, hd)
        elif self.bug == "keys-only":
            k = self.apply_rope(k)  # (b, h, n, hd)
        elif self.bug == "keys-other-base":
            q, k = self.apply_rope(q), self.apply_rope(k, self.key_cos, self.key_sin)  # (b, h, n, hd) each
        else:
            q, k = self.apply_rope(q), self.apply_rope(k)  # (b, h, n, hd) each
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, n, hd)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, d))  # (b, n, d)


def precompute_freqs_cis(dim, end, theta=10_000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))  # (hd/2,)
    freqs = torch.outer(torch.arange(end).float(), freqs)  # (end, hd/2)
    return torch.polar(torch.ones_like(freqs), freqs)  # (end, hd/2) complex


def apply_rotary_emb(xq, xk, freqs_cis):
    """Meta's Llama: neighbouring features (2k, 2k + 1) as one complex number, turned by e^{i·p·θ_k}."""
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))  # (b, n, h, hd/2) complex
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))  # (b, n, g, hd/2) complex
    freqs_cis = freqs_cis[None, :, None, :]  # (1, n, 1, hd/2)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)  # (b, n, h, hd)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)  # (b, n, g, hd)
    return xq_out.type_as(xq), xk_out.type_as(xk)


class MetaRotary(nn.Module):
    """Meta's Llama attention (grouped-query, ``n_kv_heads`` K/V heads): xq and xk turned as complex numbers.
    ``bug``: ``"xv-for-xk"`` passes xv where xk belongs (q and v turned, k not); ``"keys-one-ahead"`` turns the keys
    by positions 1 … n — not a bug for the scores, which still depend on i − j only."""

    def __init__(self, d_in=32, n_heads=4, n_kv_heads=2, max_seq_len=64, bug=None):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim, self.bug = n_heads, n_kv_heads, d_in // n_heads, bug
        self.wq = nn.Linear(d_in, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(d_in, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(d_in, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, d_in, bias=False)
        self.register_buffer("freqs_cis", precompute_freqs_cis(self.head_dim, max_seq_len + 1), persistent=False)

    def forward(self, x):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)  # (b, n, h, hd)
        xk = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)  # (b, n, g, hd)
        xv = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)  # (b, n, g, hd)
        if self.bug == "xv-for-xk":
            xq, xv = apply_rotary_emb(xq, xv, self.freqs_cis[:seqlen])  # (b, n, h, hd), (b, n, g, hd)
        elif self.bug == "keys-one-ahead":
            _, xk = apply_rotary_emb(xq, xk, self.freqs_cis[1:seqlen + 1])  # (b, n, g, hd): positions 1 … n
            xq, _ = apply_rotary_emb(xq, xk, self.freqs_cis[:seqlen])  # (b, n, h, hd)
        else:
            xq, xk = apply_rotary_emb(xq, xk, self.freqs_cis[:seqlen])  # (b, n, h, hd), (b, n, g, hd)
        repeats = self.n_heads // self.n_kv_heads
        keys = xk.repeat_interleave(repeats, dim=2).transpose(1, 2)  # (b, h, n, hd)
        values = xv.repeat_interleave(repeats, dim=2).transpose(1, 2)  # (b, h, n, hd)
        scores = xq.transpose(1, 2) @ keys.transpose(2, 3) / math.sqrt(self.head_dim)  # (b, h, n, n)
        mask = torch.full((seqlen, seqlen), float("-inf")).triu(1)  # (n, n)
        weights = F.softmax(scores + mask, dim=-1)  # (b, h, n, n)
        return self.wo((weights @ values).transpose(1, 2).reshape(bsz, seqlen, -1))  # (b, n, d_in)


class NeoXRotary(nn.Module):
    """GPT-NeoX's attention with partial rotary: the first ``rotary_pct`` of each head's features turned
    (``rotate_half`` within them), the rest left as they are.  ``bug="queries-only"`` forgets the keys."""

    def __init__(self, d_in=32, num_heads=4, context_length=64, rotary_pct=0.5, bug=None):
        super().__init__()
        self.num_heads, self.head_size, self.bug = num_heads, d_in // num_heads, bug
        self.rotary_ndims = int(self.head_size * rotary_pct)
        self.query_key_value = nn.Linear(d_in, 3 * d_in)
        self.dense = nn.Linear(d_in, d_in)
        cos, sin = llama_cos_sin(self.rotary_ndims, context_length)
        self.register_buffer("cos_cached", cos, persistent=False)
        self.register_buffer("sin_cached", sin, persistent=False)

    def rotate(self, x):
        n, r = x.shape[-2], self.rotary_ndims
        x_rot, x_pass = x[..., :r], x[..., r:]  # (b, h, n, r), (b, h, n, hd - r)
        x_rot = x_rot * self.cos_cached[:n] + rotate_half(x_rot) * self.sin_cached[:n]  # (b, h, n, r)
        return torch.cat((x_rot, x_pass), dim=-1)  # (b, h, n, hd)

    def forward(self, x):
        b, n, d = x.shape
        qkv = self.query_key_value(x).view(b, n, self.num_heads, 3 * self.head_size).transpose(1, 2)  # (b, h, n, 3hd)
        query, key, value = qkv.chunk(3, dim=-1)  # (b, h, n, hd) each
        query = self.rotate(query)  # (b, h, n, hd)
        if self.bug != "queries-only":
            key = self.rotate(key)  # (b, h, n, hd)
        scores = query @ key.transpose(-1, -2) / math.sqrt(self.head_size)  # (b, h, n, n)
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))  # (b, h, n, n)
        out = F.softmax(scores, dim=-1) @ value  # (b, h, n, hd)
        return self.dense(out.transpose(1, 2).reshape(b, n, d))  # (b, n, d)


class RotaryValuePositions(LlamaRotary):
    """LlamaRotary (q and k rotated) that also adds a learned position embedding to its values: the values differ by
    position, but no rotation turned them."""

    def __init__(self, d_in=32, num_heads=4, context_length=64):
        super().__init__(d_in, num_heads, context_length)
        self.value_positions = nn.Parameter(torch.randn(context_length, self.head_dim))

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = (proj(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))  # (b, h, n, hd) each
        q, k = self.apply_rope(q), self.apply_rope(k)  # (b, h, n, hd) each
        v = v + self.value_positions[:n]  # (b, h, n, hd): a position in the values, not a rotation
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, n, hd)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, d))  # (b, n, d)


class LlamaRotaryOnValues(LlamaRotary):
    """LlamaRotary with q, k and v rotated, for the app, which builds a listed class from its sizes alone."""

    def __init__(self, d_in=32, num_heads=4, context_length=64):
        super().__init__(d_in, num_heads, context_length, bug="values-too")


class RotaryBeforeSplit(nn.Module):
    """Llama's rotate_half applied to the whole d_in-wide q and k, its cos and sin built for d_in, before the split into
    heads: feature k is paired with k + d_in/2, in another head, so no head's q or k is turned within it."""

    def __init__(self, d_in=32, num_heads=4, context_length=64):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_in // num_heads
        self.qkv = nn.Linear(d_in, 3 * d_in, bias=False)
        self.out_proj = nn.Linear(d_in, d_in, bias=False)
        cos, sin = llama_cos_sin(d_in, context_length)  # (ctx, d_in) each: the bug, tables for the full width
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)  # (b, n, d) each
        q = q * self.cos[:n] + rotate_half(q) * self.sin[:n]  # (b, n, d): rotated before the split
        k = k * self.cos[:n] + rotate_half(k) * self.sin[:n]  # (b, n, d)
        q, k, v = (t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))  # (b, h, n, hd)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, n, hd)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, d))  # (b, n, d)
