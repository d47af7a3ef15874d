"""Attention classes whose constructors give every size a default of their own, as engineers write them: ``attnviz
check`` without a size flag builds them with those defaults (a flag typed, or a required argument, gets attnviz's)."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class LlamaGQA(nn.Module):
    """Grouped-query attention with Llama's proportions as its defaults: 8 query heads sharing 2 K/V heads."""

    def __init__(self, d_in=64, num_heads=8, num_kv_groups=2):
        super().__init__()
        self.num_heads, self.num_kv_groups, self.head_dim = num_heads, num_kv_groups, d_in // num_heads
        self.W_query = nn.Linear(d_in, num_heads * self.head_dim, bias=False)
        self.W_key = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False)
        self.W_value = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False)
        self.out_proj = nn.Linear(num_heads * self.head_dim, d_in)

    def forward(self, x):
        b, n, _ = x.shape
        queries = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        keys = self.W_key(x).view(b, n, self.num_kv_groups, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        values = self.W_value(x).view(b, n, self.num_kv_groups, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        keys = keys.repeat_interleave(self.num_heads // self.num_kv_groups, dim=1)  # (b, h, n, hd)
        values = values.repeat_interleave(self.num_heads // self.num_kv_groups, dim=1)  # (b, h, n, hd)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n)
        attn_scores = attn_scores.masked_fill(mask, -torch.inf)  # (b, h, n, n)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, n)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, -1)  # (b, n, h·hd)
        return self.out_proj(context_vec)  # (b, n, d_in)


class FusedWidth48(nn.Module):
    """GPT-2's fused layout kept as bare parameters (``x @ c_attn``, as its Conv1D stores them): no nn.Linear and no
    width attribute to read the input width off, so the checked input must be as wide as the class's own
    ``n_embd=48``; its mask is its own ``block_size=16`` square."""

    def __init__(self, n_embd=48, n_head=4, block_size=16):
        super().__init__()
        self.heads = n_head
        self.c_attn = nn.Parameter(torch.randn(n_embd, 3 * n_embd) * 0.02)  # (C, 3C)
        self.c_proj = nn.Parameter(torch.randn(n_embd, n_embd) * 0.02)  # (C, C)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (x @ self.c_attn).split(C, dim=2)  # 3 × (B, T, C)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))  # (B, h, T, hd)
        w = q @ k.transpose(-1, -2) / math.sqrt(v.shape[-1])  # (B, h, T, T)
        w = w.masked_fill(~self.bias[:T, :T], float("-inf"))  # (B, h, T, T)
        y = F.softmax(w, dim=-1) @ v  # (B, h, T, hd)
        return y.transpose(1, 2).reshape(B, T, C) @ self.c_proj  # (B, T, C)
