"""The book's MultiHeadAttention (Chapter 3) as a learner might type it, with one bug: the scores are never divided by
√head_dim.  The README and docs/check-your-module.md check it:

    attnviz check docs/examples/my_attention.py:MultiHeadAttention --d-in 32 --num-heads 4

Dividing ``attn_scores`` by ``self.head_dim ** 0.5`` before the softmax makes every rule pass.
"""

import torch
import torch.nn as nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"

        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads

        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape

        keys = self.W_key(x)  # (b, n, d_in) -> (b, n, d_out)
        queries = self.W_query(x)  # (b, n, d_out)
        values = self.W_value(x)  # (b, n, d_out)

        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, n, h, hd)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, n, h, hd)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, n, h, hd)

        keys = keys.transpose(1, 2)  # (b, h, n, hd)
        queries = queries.transpose(1, 2)  # (b, h, n, hd)
        values = values.transpose(1, 2)  # (b, h, n, hd)

        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)  # (b, h, n, n)
        attn_weights = torch.softmax(attn_scores, dim=-1)  # bug: the scores are never divided by √head_dim
        attn_weights = self.dropout(attn_weights)  # (b, h, n, n)

        context_vec = (attn_weights @ values).transpose(1, 2)  # (b, h, n, hd) -> (b, n, h, hd)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)  # (b, n, d_out)
        context_vec = self.out_proj(context_vec)  # (b, n, d_out)
        return context_vec
