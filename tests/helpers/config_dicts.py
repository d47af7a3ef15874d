"""Attention modules that keep their model's config as a dict, ``self.cfg``, as the book's notebooks' models do, and
read their sizes from it: a sliding window (``cfg["sliding_window"]``) applied or forgotten, and rotary at the
dict's ``rope_theta``, its table built for d_model or for head_dim."""

import torch
import torch.nn.functional as F
from torch import nn


class CfgWindowAttention(nn.Module):
    """Multi-head attention with a sliding window of ``cfg["sliding_window"]``: query i sees keys i − W + 1 … i;
    ``forget_window=True``: it masks the future only, the window never applied."""

    def __init__(self, cfg, forget_window=False):
        super().__init__()
        self.cfg, self.forget_window = cfg, forget_window
        self.num_heads, self.head_dim = cfg["n_heads"], cfg["emb_dim"] // cfg["n_heads"]
        self.qkv = nn.Linear(cfg["emb_dim"], 3 * cfg["emb_dim"])
        self.out_proj = nn.Linear(cfg["emb_dim"], cfg["emb_dim"])

    def forward(self, x):
        b, n, d = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim)  # (b, n, 3, h, hd)
        queries, keys, values = qkv.permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        behind = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # (n, n): how far back each key is
        visible = behind >= 0 if self.forget_window else (behind >= 0) & (behind < self.cfg["sliding_window"])  # (n, n)
        context_vec = F.scaled_dot_product_attention(queries, keys, values, attn_mask=visible)  # (b, h, n, hd)
        return self.out_proj(context_vec.transpose(1, 2).reshape(b, n, d))  # (b, n, d)


class CfgRotaryAttention(nn.Module):
    """Llama-style attention rotated at ``cfg["rope_theta"]``; ``tables="exponent"``: inv_freq with d_model in the
    exponent's denominator, ``1 / theta ** (arange(0, head_dim, 2) / d_model)`` (a port's typo), else head_dim's."""

    def __init__(self, cfg, tables="head_dim"):
        super().__init__()
        self.cfg = cfg
        d_model, self.n_heads = cfg["emb_dim"], cfg["n_heads"]
        self.head_dim = d_model // self.n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        width = d_model if tables == "exponent" else self.head_dim
        inv_freq = 1.0 / cfg["rope_theta"] ** (torch.arange(0, self.head_dim, 2).float() / width)  # (hd/2,)
        angles = torch.outer(torch.arange(cfg["context_length"]).float(), inv_freq)  # (ctx, hd/2)
        angles = torch.cat([angles, angles], dim=-1)  # (ctx, hd)
        self.register_buffer("cos", angles.cos(), persistent=False)  # (ctx, hd)
        self.register_buffer("sin", angles.sin(), persistent=False)  # (ctx, hd)

    def rope(self, t):
        """t (b, h, n, hd) rotated by its positions (rotate_half's layout)."""
        n, half = t.shape[-2], self.head_dim // 2
        rotated_half = torch.cat([-t[..., half:], t[..., :half]], dim=-1)  # (b, h, n, hd)
        return t * self.cos[:n] + rotated_half * self.sin[:n]  # (b, h, n, hd)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        q, k = self.rope(q), self.rope(k)  # (b, h, n, hd) each
        context_vec = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, n, hd)
        return self.out_proj(context_vec.transpose(1, 2).reshape(b, n, d))  # (b, n, d)
