"""ALiBi attention written the way users write it from the paper (Press et al., "Train Short, Test Long"): a plain
``nn.Module`` that adds −m·|i − j| to query i's score for key j, slopes m = 2^(−8k/H) for heads k = 1 … H, then
masks the future.  Nothing from attnviz."""

import math

import torch
import torch.nn.functional as F
from torch import nn


def alibi_slopes(heads: int) -> torch.Tensor:
    """(heads,) the paper's slopes for ``heads`` heads, a power of two: 2^(−8/H), 2^(−16/H), … 2^(−8)."""
    return 2.0 ** (-8.0 * torch.arange(1, heads + 1) / heads)  # (H,)


def alibi_bias(n: int, slopes: torch.Tensor) -> torch.Tensor:
    """(h, n, n) −m·|i − j| per head: the paper's bias (MPT's, without a causal mask), 0 on the diagonal."""
    distance = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs()  # (n, n) |i − j|
    return -slopes[:, None, None] * distance  # (h, 1, 1) * (n, n) -> (h, n, n)


class ALiBiAttention(nn.Module):
    """Causal multi-head attention with the paper's ALiBi bias and no position embedding.  ``heads_in_model`` H
    (default ``num_heads``): the module computes the first ``num_heads`` heads of a layer of H heads and takes their
    slopes, as a tensor-parallel shard of a 64-head layer does.  ``mask``: how the future is hidden — "-inf" (the
    book's ``masked_fill``), "-1e4" (added, BERT-style), "finfo.min" (``masked_fill`` with the dtype's lowest), or
    "sdpa" (bias and a −∞ future as SDPA's float ``attn_mask``)."""

    def __init__(self, d_in=16, d_out=16, num_heads=2, heads_in_model=None, mask="-inf"):
        super().__init__()
        self.num_heads, self.head_dim, self.mask = num_heads, d_out // num_heads, mask
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.register_buffer("slopes", alibi_slopes(heads_in_model or num_heads)[:num_heads])  # (h,)

    def forward(self, x):
        b, n, _ = x.shape
        queries = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        keys = self.W_key(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        values = self.W_value(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        bias = alibi_bias(n, self.slopes)  # (h, n, n)
        future = torch.ones(n, n, dtype=torch.bool).triu(1)  # (n, n)
        if self.mask == "sdpa":
            attn_mask = bias.masked_fill(future, -torch.inf)  # (h, n, n)
            context_vec = F.scaled_dot_product_attention(queries, keys, values, attn_mask=attn_mask)  # (b, h, n, hd)
        else:
            attn_scores = queries @ keys.transpose(2, 3) / math.sqrt(self.head_dim)  # (b, h, n, n)
            attn_scores = attn_scores + bias  # (b, h, n, n)
            if self.mask == "-1e4":
                attn_scores = attn_scores + future * -10000.0  # (b, h, n, n)
            else:
                fill = torch.finfo(attn_scores.dtype).min if self.mask == "finfo.min" else -torch.inf
                attn_scores = attn_scores.masked_fill(future, fill)  # (b, h, n, n)
            attn_weights = torch.softmax(attn_scores, dim=-1)  # (b, h, n, n)
            context_vec = attn_weights @ values  # (b, h, n, n) @ (b, h, n, hd) -> (b, h, n, hd)
        context_vec = context_vec.transpose(1, 2).reshape(b, n, self.num_heads * self.head_dim)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)
