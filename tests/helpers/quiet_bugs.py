"""Attention modules with bugs the checker once passed or blamed on the wrong cause, written the way users write
them: a sliding window declared and never applied, dropout left on in eval mode, a window applied after the
softmax, a softmax run in float16 or bfloat16, and flex_attention."""

import math

import torch
import torch.nn.functional as F
from torch import nn


def heads(module: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q, K, V of a fused projection, (b, h, n, hd) each."""
    b, n, _ = x.shape
    qkv = module.qkv(x).view(b, n, 3, module.num_heads, module.head_dim)  # (b, n, 3, h, hd)
    queries, keys, values = qkv.permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
    return queries, keys, values


class FusedAttention(nn.Module):
    """A fused QKV projection and an output projection; subclasses write the forward."""

    def __init__(self, d_in=32, num_heads=4):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_in // num_heads
        self.qkv = nn.Linear(d_in, 3 * d_in)
        self.out_proj = nn.Linear(d_in, d_in)

    def merged(self, context_vec: torch.Tensor) -> torch.Tensor:
        b, _, n, _ = context_vec.shape
        return self.out_proj(context_vec.transpose(1, 2).reshape(b, n, -1))  # (b, h, n, hd) -> (b, n, d_out)


class ForgotWindow(FusedAttention):
    """Declares a sliding window (Mistral's ``sliding_window_size``) and runs plain causal SDPA."""

    def __init__(self, d_in=32, num_heads=4, sliding_window_size=3):
        super().__init__(d_in, num_heads)
        self.sliding_window_size = sliding_window_size

    def forward(self, x):
        queries, keys, values = heads(self, x)  # (b, h, n, hd) each
        context_vec = F.scaled_dot_product_attention(queries, keys, values, is_causal=True)  # (b, h, n, hd)
        return self.merged(context_vec)


class BandedSWA(FusedAttention):
    """A sliding window through an SDPA band, as Mistral's ``sliding_window`` names it: query i sees keys
    i - W + 1 … i; ``bug="wide"``: keeps ``i - j <= W`` (one key too many)."""

    def __init__(self, d_in=32, num_heads=4, sliding_window=3, bug=None):
        super().__init__(d_in, num_heads)
        self.sliding_window, self.bug = sliding_window, bug

    def forward(self, x):
        queries, keys, values = heads(self, x)  # (b, h, n, hd) each
        n = x.shape[1]
        diff = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # (n, n): how far back each key is
        near = diff <= self.sliding_window if self.bug == "wide" else diff < self.sliding_window  # (n, n)
        band = (diff >= 0) & near  # (n, n): True takes part
        context_vec = F.scaled_dot_product_attention(queries, keys, values, attn_mask=band)  # (b, h, n, hd)
        return self.merged(context_vec)


class WindowAfterSoftmax(FusedAttention):
    """Hides the future with −∞ before the softmax, then multiplies the weights by the window's band after it."""

    def __init__(self, d_in=32, num_heads=4, sliding_window_size=3):
        super().__init__(d_in, num_heads)
        self.sliding_window_size = sliding_window_size

    def forward(self, x):
        queries, keys, values = heads(self, x)  # (b, h, n, hd) each
        n = x.shape[1]
        diff = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # (n, n)
        attn_scores = queries @ keys.transpose(2, 3) / math.sqrt(self.head_dim)  # (b, h, n, n)
        attn_scores = attn_scores.masked_fill(diff < 0, -torch.inf)  # (b, h, n, n)
        band = ((diff >= 0) & (diff < self.sliding_window_size)).float()  # (n, n): the window's keys
        attn_weights = torch.softmax(attn_scores, dim=-1) * band  # (b, h, n, n): the window after the softmax
        return self.merged(attn_weights @ values)  # (b, h, n, hd)


class EvalDropout(FusedAttention):
    """Dropout on the weights that never reads the module's mode: ``F.dropout(w, p)`` (training defaults to True),
    or, with ``sdpa=True``, SDPA's ``dropout_p=self.dropout`` without ``if self.training``."""

    def __init__(self, d_in=32, num_heads=4, dropout=0.1, sdpa=False):
        super().__init__(d_in, num_heads)
        self.dropout, self.sdpa = dropout, sdpa

    def forward(self, x):
        queries, keys, values = heads(self, x)  # (b, h, n, hd) each
        if self.sdpa:
            context_vec = F.scaled_dot_product_attention(queries, keys, values, is_causal=True,
                                                         dropout_p=self.dropout)  # (b, h, n, hd)
            return self.merged(context_vec)
        n = x.shape[1]
        attn_scores = queries @ keys.transpose(2, 3) / math.sqrt(self.head_dim)  # (b, h, n, n)
        attn_scores = attn_scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -torch.inf)  # (b, h, n, n)
        attn_weights = F.dropout(torch.softmax(attn_scores, dim=-1), self.dropout)  # (b, h, n, n)
        return self.merged(attn_weights @ values)  # (b, h, n, hd)


class LowPrecisionSoftmax(FusedAttention):
    """A float32 module whose softmax runs in ``dtype`` (float16 or bfloat16) without an upcast, as mixed-precision
    code written for half-precision weights does: ``F.softmax(scores, dim=-1, dtype=…)``, cast back after."""

    def __init__(self, d_in=32, num_heads=4, dtype=torch.float16):
        super().__init__(d_in, num_heads)
        self.dtype = dtype

    def forward(self, x):
        queries, keys, values = heads(self, x)  # (b, h, n, hd) each
        n = x.shape[1]
        attn_scores = queries @ keys.transpose(2, 3) / math.sqrt(self.head_dim)  # (b, h, n, n)
        attn_scores = attn_scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -torch.inf)  # (b, h, n, n)
        attn_weights = F.softmax(attn_scores, dim=-1, dtype=self.dtype).to(queries.dtype)  # (b, h, n, n)
        return self.merged(attn_weights @ values)  # (b, h, n, hd)


class FlexCausal(FusedAttention):
    """Causal attention through ``torch.nn.attention.flex_attention`` with a ``score_mod``."""

    def forward(self, x):
        from torch.nn.attention.flex_attention import flex_attention

        def causal(score, batch, head, q_idx, kv_idx):
            return torch.where(q_idx >= kv_idx, score, -torch.inf)

        queries, keys, values = heads(self, x)  # (b, h, n, hd) each
        return self.merged(flex_attention(queries, keys, values, score_mod=causal))  # (b, h, n, hd)
