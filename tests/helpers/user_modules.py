"""Attention modules written the way users write them: plain ``nn.Module``s, nothing from attnviz.

The tests trace and check these as a learner's or an engineer's own code.
"""

import enum
import math
import time

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    """nanoGPT's attention (model.py): fused c_attn, SDPA with is_causal, or the manual masked_fill path."""

    def __init__(self, n_embd=32, n_head=4, block_size=16, dropout=0.0, bias=True, flash=True):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head = n_head
        self.n_embd = n_embd
        self.dropout = dropout
        self.flash = flash
        if not self.flash:
            causal = torch.tril(torch.ones(block_size, block_size))  # (block_size, block_size)
            self.register_buffer("bias", causal.view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                               dropout_p=self.dropout if self.training else 0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class TorchMHA(nn.Module):
    """nn.MultiheadAttention, batch_first, with a causal attn_mask (True = may not attend)."""

    def __init__(self, embed_dim=32, num_heads=4, causal=True):
        super().__init__()
        self.attn = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)
        self.causal = causal

    def forward(self, x):
        T = x.shape[1]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1) if self.causal else None
        out, _ = self.attn(x, x, x, attn_mask=mask, need_weights=False)
        return out


class Bidirectional(nn.Module):
    """nn.MultiheadAttention with no mask, as an encoder runs it: every token sees every other one."""

    def __init__(self, embed_dim=32, num_heads=4):
        super().__init__()
        self.attn = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)

    def forward(self, x):
        out, _ = self.attn(x, x, x, need_weights=False)
        return out


class SDPAWithMask(nn.Module):
    """Separate projections; SDPA with an explicit boolean (True = takes part) or float (0 / -inf) causal mask."""

    def __init__(self, d_model=32, nhead=4, float_mask=False):
        super().__init__()
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)
        self.nhead = nhead
        self.float_mask = float_mask

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = (proj(x).view(b, n, self.nhead, d // self.nhead).transpose(1, 2) for proj in (self.q, self.k, self.v))
        keep = torch.ones(n, n, dtype=torch.bool).tril()
        mask = torch.zeros(n, n).masked_fill(~keep, float("-inf")) if self.float_mask else keep
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o(y.transpose(1, 2).reshape(b, n, d))


class GroupedQueryAttention(nn.Module):
    """Grouped-query attention: 4 query heads share 2 key/value heads (keys repeated), manual softmax."""

    def __init__(self, d_model=32, n_heads=4, n_kv_heads=2):
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.head_dim = d_model // n_heads
        self.wq = nn.Linear(d_model, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, d_model, bias=False)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.wq(x).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        k = k.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)
        v = v.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
        scores = scores.masked_fill(mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(b, n, -1)
        return self.wo(out)


class GQAWithSDPA(nn.Module):
    """Grouped-query attention through SDPA's enable_gqa."""

    def __init__(self, d_model=32, n_heads=4, n_kv_heads=2):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, d_model // n_heads
        self.wq = nn.Linear(d_model, d_model, bias=False)
        self.wkv = nn.Linear(d_model, 2 * n_kv_heads * self.head_dim, bias=False)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.wq(x).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)
        k, v = self.wkv(x).view(b, n, 2, self.n_kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return y.transpose(1, 2).reshape(b, n, -1)


class ReturnsTuple(nn.Module):
    """One head; returns (output, weights) like many attention layers do."""

    def __init__(self, d_in=32, d_out=16):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)

    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2)
        n = x.shape[1]
        scores = scores.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), -torch.inf)
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        return weights @ values, weights


class NoSoftmax(nn.Module):
    """A linear layer: no attention at all."""

    def __init__(self, d_in=32):
        super().__init__()
        self.proj = nn.Linear(d_in, d_in)

    def forward(self, x):
        return self.proj(x)


class Raises(nn.Module):
    """A forward with a shape bug."""

    def __init__(self, d_in=32):
        super().__init__()
        self.proj = nn.Linear(d_in, d_in)

    def forward(self, x):
        return self.proj(x).view(-1, 7, 5)


class SoftmaxOverFeatures(nn.Module):
    """A softmax that is not an attention map: over each token's query features, (b, n, d_out)."""

    def __init__(self, d_in=32, d_out=16):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False)

    def forward(self, x):
        queries = self.W_query(x)  # (b, n, d_in) -> (b, n, d_out)
        return torch.softmax(queries, dim=-1)  # (b, n, d_out): a row per token, not per key


class DropsTheBatch(nn.Module):
    """Attention on item 0 only: 2-D weights (n, n), and the output is a batch of one whatever the input's batch."""

    def __init__(self, d_in=32, d_out=16):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False)

    def forward(self, x):
        queries = self.W_query(x)[0]  # (b, n, d_in) -> (n, d_out): the batch's first item
        attn_weights = torch.softmax(queries @ queries.T / queries.shape[-1] ** 0.5, dim=-1)  # (n, n)
        return (attn_weights @ queries)[None]  # (n, n) @ (n, d_out) -> (1, n, d_out)


class NaNScores(nn.Module):
    """Scores multiplied by NaN (a scale computed from an empty tensor, say): every weight is NaN."""

    def __init__(self, d_in=32, d_out=16):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)

    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, n, d_out) each
        attn_scores = queries @ keys.transpose(1, 2) * float("nan")  # (b, n, n), all NaN
        attn_weights = torch.softmax(attn_scores, dim=-1)  # (b, n, n)
        return attn_weights @ values  # (b, n, d_out)


class ReturnsTransposed(nn.Module):
    """A valid attention whose forward returns the context transposed: (b, d_out, n), not (b, n, d_out)."""

    def __init__(self, d_in=32, d_out=16):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)

    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, n, d_out) each
        attn_scores = queries @ keys.transpose(1, 2)  # (b, n, d_out) @ (b, d_out, n) -> (b, n, n)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (b, n, n)
        context_vec = attn_weights @ values  # (b, n, n) @ (b, n, d_out) -> (b, n, d_out)
        return context_vec.transpose(1, 2)  # (b, d_out, n)


class GatedAttention(nn.Module):
    """One head whose output is gated by a softmax over its features: two softmaxes, one of them attention."""

    def __init__(self, d_in=32, d_out=16):
        super().__init__()
        self.W_gate = nn.Linear(d_in, d_out, bias=False)
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)

    def forward(self, x):
        gate = torch.softmax(self.W_gate(x), dim=-1)  # (b, n, d_out): over the features, not attention
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, n, d_out) each
        attn_scores = queries @ keys.transpose(1, 2)  # (b, n, d_out) @ (b, d_out, n) -> (b, n, n)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (b, n, n)
        return gate * (attn_weights @ values)  # (b, n, d_out)


class MyMultiHeadAttention(nn.Module):
    """The book's MultiHeadAttention as a learner types it into a notebook, with one classic bug switched on by
    ``bug`` (None: the correct code).  The bugs are the Pitfall lab's, plus a few more a checker must name."""

    def __init__(self, d_in=16, d_out=16, context_length=16, dropout=0.0, num_heads=4, qkv_bias=False, bug=None):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        diagonal = {"diagonal-hidden": 0, "one-future-visible": 2}.get(bug, 1)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=diagonal))
        self.bug = bug

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        if self.bug == "no-transpose-split":  # (b, n, d_out) viewed straight as (b, h, n, hd)
            keys = self.W_key(x).view(b, self.num_heads, num_tokens, self.head_dim)
            queries = self.W_query(x).view(b, self.num_heads, num_tokens, self.head_dim)
            values = self.W_value(x).view(b, self.num_heads, num_tokens, self.head_dim)
        if self.bug == "inverted-sdpa-mask":  # the book's mask (True = hide) handed to SDPA (True = take part)
            mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
            context_vec = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask_bool)
            context_vec = context_vec.transpose(1, 2).contiguous().view(b, num_tokens, self.d_out)
            return self.out_proj(context_vec)
        attn_scores = queries @ keys.transpose(2, 3)
        if self.bug == "dropout-before-softmax":
            attn_scores = self.dropout(attn_scores)
        if self.bug == "no-scale":
            pass
        elif self.bug == "scale-by-d-out":
            attn_scores = attn_scores / self.d_out ** 0.5
        elif self.bug == "scale-without-root":
            attn_scores = attn_scores / keys.shape[-1]
        else:
            attn_scores = attn_scores / keys.shape[-1] ** 0.5
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        if self.bug == "masked-fill-copy":
            attn_scores.masked_fill(mask_bool, -torch.inf)
        else:
            attn_scores.masked_fill_(mask_bool, -torch.inf)
        if self.bug == "dropout-after-mask":
            attn_scores = self.dropout(attn_scores)
        attn_weights = torch.softmax(attn_scores, dim=-2 if self.bug == "softmax-dim" else -1)
        if self.bug == "dropout-in-eval":
            attn_weights = F.dropout(attn_weights, p=0.5)
        elif self.bug == "dropout-never-trains":
            attn_weights = F.dropout(attn_weights, p=self.dropout.p, training=False)
        elif self.bug == "dropout-not-called":
            pass
        elif self.bug == "dropout-mask-shape" and self.training:  # a hand-rolled dropout: raises in training only
            keep = torch.rand(attn_weights.shape[:-1]) >= self.dropout.p  # (b, h, n): the key dimension is missing
            attn_weights = attn_weights * keep / (1 - self.dropout.p)
        elif self.bug not in ("dropout-before-softmax", "dropout-after-mask"):
            attn_weights = self.dropout(attn_weights)
        context_vec = attn_weights @ values
        if self.bug == "no-transpose-back":
            context_vec = context_vec.reshape(b, num_tokens, self.d_out)
        else:
            context_vec = context_vec.transpose(1, 2).contiguous().view(b, num_tokens, self.d_out)
        if self.bug == "batch-mixing":
            context_vec = context_vec - context_vec.mean(dim=0, keepdim=True)
        return self.out_proj(context_vec)


class SleepyAttention(MyMultiHeadAttention):
    """The book's MultiHeadAttention with a ``time.sleep`` left in the forward from debugging: a slow module."""

    def __init__(self, d_in=16, d_out=16, context_length=16, dropout=0.0, num_heads=4, qkv_bias=False, pause=0.01):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.pause = pause

    def forward(self, x):
        time.sleep(self.pause)  # left in from debugging
        return super().forward(x)


class EndlessLoop(MyMultiHeadAttention):
    """The book's MultiHeadAttention with a learner's ``while`` loop whose condition never changes (the counter is
    never increased): its forward never returns.  ``calls`` counts the forwards begun."""

    calls = 0

    def forward(self, x):
        self.calls += 1
        steps = 0
        while steps < 3:  # meant to refine x three times; the steps += 1 is missing
            x = x + 0
        return super().forward(x)


class BusyFor(MyMultiHeadAttention):
    """The book's MultiHeadAttention whose forward first spins ``seconds`` in a Python loop of torch ops: slow but
    finished."""

    def __init__(self, d_in=16, d_out=16, context_length=16, dropout=0.0, num_heads=4, qkv_bias=False, seconds=0.1):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.seconds = seconds

    def forward(self, x):
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            x = x + 0
        return super().forward(x)


class SleepsForever(MyMultiHeadAttention):
    """A forward blocked in one C call, ``time.sleep(seconds)``: a debugging pause."""

    def __init__(self, d_in=16, d_out=16, context_length=16, dropout=0.0, num_heads=4, qkv_bias=False, seconds=1.0):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.seconds = seconds

    def forward(self, x):
        time.sleep(self.seconds)
        return super().forward(x)


class HandRolledDropout(MyMultiHeadAttention):
    """MyMultiHeadAttention with a hand-rolled dropout whose mask forgets the key dimension: it raises in training
    mode only."""

    def __init__(self, d_in=16, d_out=16, context_length=16, dropout=0.0, num_heads=4, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias, bug="dropout-mask-shape")


class ViewWithoutContiguous(MyMultiHeadAttention):
    """The Pitfall lab's (5): ``.view`` on the transposed context raises."""

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                   for w in (self.W_query, self.W_key, self.W_value))
        attn_scores = (q @ k.transpose(2, 3) / k.shape[-1] ** 0.5).masked_fill(self.mask.bool()[:n, :n], -torch.inf)
        context_vec = (torch.softmax(attn_scores, dim=-1) @ v).transpose(1, 2)
        return self.out_proj(context_vec.view(b, n, self.d_out))


class MaskNotSliced(MyMultiHeadAttention):
    """The Pitfall lab's (7): the whole (context_length, context_length) mask on an (n, n) score matrix."""

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                   for w in (self.W_query, self.W_key, self.W_value))
        attn_scores = (q @ k.transpose(2, 3) / k.shape[-1] ** 0.5).masked_fill(self.mask.bool(), -torch.inf)
        context_vec = (torch.softmax(attn_scores, dim=-1) @ v).transpose(1, 2).reshape(b, n, self.d_out)
        return self.out_proj(context_vec)


# ---------------------------------------------------------------- today's attention, as a learner writes it

def rope_angles(head_dim, context_length, theta_base=10_000.0):
    """cos and sin (context_length, head_dim) of rotary embeddings, halves rotated together (Llama's layout)."""
    inv_freq = 1.0 / theta_base ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.arange(context_length).float()[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return torch.cos(angles), torch.sin(angles)


def rotate(x, cos, sin, start=0):
    """x (b, h, n, hd) rotated by the angles of positions start … start + n - 1."""
    n, half = x.shape[-2], x.shape[-1] // 2
    rotated_half = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[start:start + n] + rotated_half * sin[start:start + n]


class RotaryTablesForDModel(nn.Module):
    """Llama-style attention whose rotary tables are built for the model's width and sliced for each head, as ports of
    Llama often write them.  ``tables``: ``"sliced"`` — cos and sin built for d_model (Llama's halves layout), then
    ``cos[:n, :head_dim]``; ``"exponent"`` — inv_freq with d_model in the exponent's denominator,
    ``1 / base ** (arange(0, head_dim, 2) / d_model)``; ``"complex"`` — Meta's ``freqs_cis`` for d_model, sliced to
    ``[:n, :head_dim // 2]``; ``"tiled"`` — head_dim's tables repeated for every head (d_model wide), sliced to
    ``[:n, :head_dim]``, which are head_dim's own."""

    def __init__(self, d_model=32, n_heads=4, context_length=64, tables="sliced", base=10_000.0):
        super().__init__()
        self.n_heads, self.head_dim, self.tables = n_heads, d_model // n_heads, tables
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        positions = torch.arange(context_length).float()  # (ctx,)
        if tables == "complex":
            freqs = 1.0 / base ** (torch.arange(0, d_model, 2).float() / d_model)  # (d_model/2,)
            angles = torch.outer(positions, freqs)  # (ctx, d_model/2)
            self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles), persistent=False)
            return
        if tables == "sliced":
            inv_freq = 1.0 / base ** (torch.arange(0, d_model, 2).float() / d_model)  # (d_model/2,)
        elif tables == "exponent":
            inv_freq = 1.0 / base ** (torch.arange(0, self.head_dim, 2).float() / d_model)  # (hd/2,): the typo
        else:
            inv_freq = 1.0 / base ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim)  # (hd/2,)
        angles = torch.outer(positions, inv_freq)  # (ctx, width/2)
        angles = torch.cat([angles, angles], dim=-1)  # (ctx, width)
        if tables == "tiled":
            angles = angles.repeat(1, n_heads)  # (ctx, d_model): every head's angles side by side
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def rope(self, t):
        """t (b, h, n, hd) rotated by its positions, with the module's tables."""
        n, hd = t.shape[-2], self.head_dim
        if self.tables == "complex":
            pairs = torch.view_as_complex(t.float().reshape(*t.shape[:-1], hd // 2, 2))  # (b, h, n, hd/2)
            return torch.view_as_real(pairs * self.freqs_cis[:n, :hd // 2]).flatten(-2)  # (b, h, n, hd)
        cos, sin = self.cos[:n, :hd], self.sin[:n, :hd]  # (n, hd) each
        half = torch.cat([-t[..., hd // 2:], t[..., :hd // 2]], dim=-1)  # (b, h, n, hd)
        return t * cos + half * sin  # (b, h, n, hd)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        q, k = self.rope(q), self.rope(k)  # (b, h, n, hd) each
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, n, hd)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, d))  # (b, n, d)


class RotaryTiledBeforeTheSplit(nn.Module):
    """Rotary applied to the d_model-wide q and k before the split into heads, with head_dim's tables repeated for
    every head.  ``pairs``: ``"per-head"`` — rotate_half within each head's slice (the same as rotating after the
    split); ``"full-width"`` — rotate_half over the whole width, which pairs feature k with k + d_model/2, in another
    head."""

    def __init__(self, d_model=32, n_heads=4, context_length=64, pairs="per-head"):
        super().__init__()
        self.n_heads, self.head_dim, self.pairs = n_heads, d_model // n_heads, pairs
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        cos, sin = rope_angles(self.head_dim, context_length)  # (ctx, hd) each
        self.register_buffer("cos", cos.repeat(1, n_heads), persistent=False)  # (ctx, d_model)
        self.register_buffer("sin", sin.repeat(1, n_heads), persistent=False)  # (ctx, d_model)

    def rope(self, t):
        """t (b, n, d_model) rotated by its positions, before the split."""
        b, n, d = t.shape
        width = self.head_dim if self.pairs == "per-head" else d
        halves = t.view(b, n, d // width, width)  # (b, n, d/width, width)
        half = width // 2
        rotated = torch.cat([-halves[..., half:], halves[..., :half]], dim=-1).view(b, n, d)  # (b, n, d)
        return t * self.cos[:n] + rotated * self.sin[:n]  # (b, n, d)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)  # (b, n, d) each
        q, k = self.rope(q), self.rope(k)  # (b, n, d) each
        q, k, v = (t.view(b, n, self.n_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))  # (b, h, n, hd)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, n, hd)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, d))  # (b, n, d)


class LearnerGQA(nn.Module):
    """Grouped-query attention like the book's bonus class: num_kv_groups K/V heads, each shared by
    num_heads // num_kv_groups query heads (repeat_interleave); num_kv_groups=1 is multi-query attention.
    ``rotary``: q and k rotated before QKᵀ (Llama)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, num_kv_groups=2, qkv_bias=False,
                 rotary=False, rope_base=10_000.0):
        super().__init__()
        assert d_out % num_heads == 0 and num_heads % num_kv_groups == 0
        self.d_out, self.num_heads, self.num_kv_groups = d_out, num_heads, num_kv_groups
        self.head_dim = d_out // num_heads
        self.group_size = num_heads // num_kv_groups
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))
        self.rotary = rotary
        cos, sin = rope_angles(self.head_dim, context_length, rope_base)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)

    def forward(self, x):
        b, num_tokens, _ = x.shape
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        keys = self.W_key(x).view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)
        values = self.W_value(x).view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)
        if self.rotary:
            queries, keys = rotate(queries, self.cos, self.sin), rotate(keys, self.cos, self.sin)
        keys = keys.repeat_interleave(self.group_size, dim=1)
        values = values.repeat_interleave(self.group_size, dim=1)
        attn_scores = queries @ keys.transpose(2, 3)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = self.dropout(torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1))
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)
        return self.out_proj(context_vec)


class LearnerRotaryGQA(LearnerGQA):
    """LearnerGQA with rotary position embeddings on q and k."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, num_kv_groups=2, rope_base=10_000.0):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, num_kv_groups, rotary=True,
                         rope_base=rope_base)


class LearnerGQAWithSDPA(LearnerGQA):
    """LearnerGQA through SDPA's enable_gqa (rotary: q and k rotated first)."""

    def forward(self, x):
        b, num_tokens, _ = x.shape
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        keys = self.W_key(x).view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)
        values = self.W_value(x).view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)
        if self.rotary:
            queries, keys = rotate(queries, self.cos, self.sin), rotate(keys, self.cos, self.sin)
        context_vec = F.scaled_dot_product_attention(queries, keys, values, is_causal=True, enable_gqa=True)
        return self.out_proj(context_vec.transpose(1, 2).reshape(b, num_tokens, self.d_out))


class LearnerMLA(nn.Module):
    """Multi-head latent attention like the book's bonus class: K and V come up from one small latent."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, latent_dim=8, qkv_bias=False):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_DKV = nn.Linear(d_in, latent_dim, bias=qkv_bias)
        self.W_UK = nn.Linear(latent_dim, d_out, bias=qkv_bias)
        self.W_UV = nn.Linear(latent_dim, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, n, _ = x.shape
        latent = self.W_DKV(x)
        queries = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        keys = self.W_UK(latent).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        values = self.W_UV(latent).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        attn_scores = queries @ keys.transpose(-2, -1)
        attn_scores = attn_scores.masked_fill(self.mask.bool()[:n, :n], -torch.inf)
        attn_weights = self.dropout(torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1))
        return self.out_proj((attn_weights @ values).transpose(1, 2).contiguous().view(b, n, self.d_out))


class LearnerSWA(nn.Module):
    """Sliding-window attention like the book's bonus class: query i sees keys i - W + 1 … i.
    ``bug="window-off-by-one"``: ``diff > W`` hides one key too few."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, sliding_window_size=3, qkv_bias=False,
                 bug=None):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.sliding_window_size, self.bug = sliding_window_size, bug
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, n, _ = x.shape
        queries, keys, values = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))
        attn_scores = queries @ keys.transpose(2, 3)
        diff = torch.arange(n)[:, None] - torch.arange(n)[None, :]
        window = self.sliding_window_size
        too_far = diff > window if self.bug == "window-off-by-one" else diff >= window
        attn_scores.masked_fill_((diff < 0) | too_far, -torch.inf)
        attn_weights = self.dropout(torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1))
        return self.out_proj((attn_weights @ values).transpose(1, 2).contiguous().view(b, n, self.d_out))


class LearnerCachedMHA(nn.Module):
    """The book's MultiHeadAttention with a KV cache (use_cache, cache_k/cache_v, ptr_current_pos, reset_cache),
    as a learner types it; ``bug`` switches on one of the classic cache bugs: the position never advances, advances
    by 1 per forward, is advanced before the mask is sliced, is one ahead (the prefill adds n + 1), is not reset,
    or reset to 1; the mask is sliced as if the new tokens started at 0; the cache keeps too little, or the first
    keys twice (an ``if`` without its ``else``); the reset keeps the cache (it only zeroes the position) or does
    nothing at all; a cached forward returns NaN, or the last token's vector alone; the mask hides the diagonal too
    (``diagonal-hidden``: query 0 hides every key, its output NaN, cached or not)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, bug=None):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        diagonal = 0 if bug == "diagonal-hidden" else 1  # the bug: triu(0) hides each token from itself
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=diagonal))
        self.cache_k, self.cache_v, self.ptr_current_pos = None, None, 0
        self.bug = bug

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries, keys_new, values_new = (w(x).view(b, n, self.num_heads, self.head_dim)
                                         for w in (self.W_query, self.W_key, self.W_value))
        if use_cache:
            if self.cache_k is None and self.bug == "appends-twice":  # the first keys set, then appended again
                self.cache_k = torch.cat([keys_new, keys_new], dim=1)  # (b, 2n, h, hd)
                self.cache_v = torch.cat([values_new, values_new], dim=1)  # (b, 2n, h, hd)
            elif self.cache_k is None:
                self.cache_k, self.cache_v = keys_new, values_new
            else:
                self.cache_k = torch.cat([self.cache_k, keys_new], dim=1)  # (b, cached + n, h, hd)
                self.cache_v = torch.cat([self.cache_v, values_new], dim=1)  # (b, cached + n, h, hd)
            if self.bug == "keeps-too-little":  # a cache bounded to the last 3 tokens on full attention
                self.cache_k, self.cache_v = self.cache_k[:, -3:], self.cache_v[:, -3:]
            keys, values = self.cache_k, self.cache_v
        else:
            keys, values = keys_new, values_new
        queries, keys, values = queries.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
        attn_scores = queries @ keys.transpose(2, 3)
        num_tokens_Q, num_tokens_K = queries.shape[-2], keys.shape[-2]
        if use_cache:
            if self.bug == "advances-before-slicing":
                self.ptr_current_pos += num_tokens_Q
            mask_bool = self.mask.bool()[self.ptr_current_pos:self.ptr_current_pos + num_tokens_Q, :num_tokens_K]
            if self.bug == "mask-for-new-tokens":  # the uncached slice: the new tokens as if they started at 0
                mask_bool = self.mask.bool()[:num_tokens_Q, :num_tokens_K]
            if self.bug == "advances-by-one":
                self.ptr_current_pos += 1
            elif self.bug == "one-ahead" and self.ptr_current_pos == 0:
                self.ptr_current_pos += num_tokens_Q + 1
            elif self.bug not in ("position-never-advances", "advances-before-slicing"):
                self.ptr_current_pos += num_tokens_Q
        else:
            mask_bool = self.mask.bool()[:num_tokens_Q, :num_tokens_K]
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        attn_weights = self.dropout(torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1))
        context_vec = (attn_weights @ values).transpose(1, 2).contiguous().view(b, n, self.d_out)
        if use_cache and self.bug == "nan-when-cached":
            return self.out_proj(context_vec) * float("nan")  # (b, n, d_out) of NaN
        if use_cache and self.bug == "last-token-when-cached":
            return self.out_proj(context_vec)[:, -1]  # (b, d_out): the last token's alone
        return self.out_proj(context_vec)

    def reset_cache(self):
        if self.bug == "never-resets":
            return
        if self.bug != "reset-keeps-cache":
            self.cache_k, self.cache_v = None, None
        if self.bug == "reset-to-one":  # counting from 1
            self.ptr_current_pos = 1
        elif self.bug != "reset-forgets-position":
            self.ptr_current_pos = 0


class TwoCachedLayers(nn.Module):
    """Two of the learner's cached attention layers, one after the other with a residual; ``second_bug``: a bug of
    LearnerCachedMHA's in the second layer alone (``diagonal-hidden``: its NaN reaches the output while the first
    layer's weights are finite)."""

    def __init__(self, d_in=16, num_heads=2, context_length=16, second_bug=None):
        super().__init__()
        self.d_in = d_in
        self.first = LearnerCachedMHA(d_in, d_in, context_length, 0.0, num_heads)
        self.second = LearnerCachedMHA(d_in, d_in, context_length, 0.0, num_heads, bug=second_bug)

    def forward(self, x):
        x = x + self.first(x)  # (b, n, d_in)
        return x + self.second(x)  # (b, n, d_in)


class CountsTokensSeen(nn.Module):
    """A KV-cached attention whose position counter is ``tokens_seen`` (not one of the usual names), advanced by 1
    per forward instead of by the new tokens' count (``fixed=True``: by the count)."""

    def __init__(self, d_in=16, d_out=32, context_length=16, num_heads=4, fixed=False):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())
        self.keys_so_far = self.values_so_far = None
        self.tokens_seen = 0
        self.fixed = fixed

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries, keys, values = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        start = self.tokens_seen if use_cache else 0
        if use_cache:
            if self.keys_so_far is not None:
                keys = torch.cat([self.keys_so_far, keys], dim=2)  # (b, h, cached + n, hd)
                values = torch.cat([self.values_so_far, values], dim=2)  # (b, h, cached + n, hd)
            self.keys_so_far, self.values_so_far = keys, values
            self.tokens_seen += n if self.fixed else 1
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, k) -> (b, h, n, k)
        attn_scores = attn_scores.masked_fill(self.mask[start:start + n, :keys.shape[2]], -torch.inf)  # (b, h, n, k)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, k)
        return (attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)

    def reset_cache(self):
        self.keys_so_far = self.values_so_far = None
        self.tokens_seen = 0


class CountsTokensSeenWithPos(CountsTokensSeen):
    """CountsTokensSeen that also keeps a constant ``pos`` (like OPT's ``self.offset = 2``): an int under a usual
    position name that no forward changes."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.pos = 0


class PreallocatedCache(nn.Module):
    """The book's optimized KV cache (ch04/03_kv-cache ``gpt_with_kv_cache_optimized.py``): ``cache_k``/``cache_v``
    allocated once at the context's size, filled at ``ptr_cur``; ``bug="mask-for-new-tokens"``: the cached step's
    mask is the uncached slice, as if the new tokens started at 0."""

    def __init__(self, d_in=16, d_out=32, context_length=16, num_heads=4, bug=None):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())
        self.cache_k = self.cache_v = None
        self.ptr_cur = 0
        self.bug = bug

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries, keys_new, values_new = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                         for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        start = 0
        if use_cache:
            if self.cache_k is None:
                self.cache_k = torch.zeros(b, self.num_heads, self.context_length, self.head_dim)  # (b, h, ctx, hd)
                self.cache_v = torch.zeros_like(self.cache_k)  # (b, h, ctx, hd)
            self.cache_k[:, :, self.ptr_cur:self.ptr_cur + n] = keys_new
            self.cache_v[:, :, self.ptr_cur:self.ptr_cur + n] = values_new
            start = 0 if self.bug == "mask-for-new-tokens" else self.ptr_cur
            self.ptr_cur += n
            keys, values = self.cache_k[:, :, :self.ptr_cur], self.cache_v[:, :, :self.ptr_cur]  # (b, h, k, hd)
        else:
            keys, values = keys_new, values_new
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, k) -> (b, h, n, k)
        attn_scores = attn_scores.masked_fill(self.mask[start:start + n, :keys.shape[2]], -torch.inf)  # (b, h, n, k)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, k)
        return (attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)

    def reset_cache(self):
        self.cache_k = self.cache_v = None
        self.ptr_cur = 0


class LearnerSWAWithSDPA(LearnerSWA):
    """LearnerSWA through SDPA with a boolean band (True = takes part)."""

    def forward(self, x):
        b, n, _ = x.shape
        queries, keys, values = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))
        diff = torch.arange(n)[:, None] - torch.arange(n)[None, :]
        band = (diff >= 0) & (diff < self.sliding_window_size)
        context_vec = F.scaled_dot_product_attention(queries, keys, values, attn_mask=band)
        return self.out_proj(context_vec.transpose(1, 2).reshape(b, n, self.d_out))


class LearnerCachedSWA(LearnerSWA):
    """LearnerSWA with a KV cache that keeps only the last W tokens' keys and values: all a window needs;
    ``bug="keeps-all"``: the cache keeps every token (the step still attends over the window alone);
    ``bug="cached-mask-no-window"``: the cached forwards' mask hides only the future; ``bug="window-never-applied"``:
    every mask hides only the future (the cache still keeps the last W); ``bug="attends-the-trimmed-cache"``: a step
    attends over the cache it keeps, the last W tokens — right one token at a time, too few for a chunk's first
    query."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, sliding_window_size=3, bug=None):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, sliding_window_size, bug=bug)
        self.cache_k = self.cache_v = None
        self.ptr_current_pos = 0

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries, keys, values = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))
        start = self.ptr_current_pos if use_cache else 0
        if use_cache:
            if self.cache_k is not None:
                keys, values = torch.cat([self.cache_k, keys], dim=2), torch.cat([self.cache_v, values], dim=2)
            window = self.sliding_window_size
            self.cache_k, self.cache_v = keys[:, :, -window:], values[:, :, -window:]  # (b, h, ≤ W, hd) each
            if self.bug == "keeps-all":
                self.cache_k, self.cache_v = keys, values  # (b, h, cached + n, hd) each
                keys, values = keys[:, :, -(window + n - 1):], values[:, :, -(window + n - 1):]  # the window's keys
            if self.bug == "attends-the-trimmed-cache":
                keys, values = self.cache_k, self.cache_v  # (b, h, ≤ W, hd) each
            self.ptr_current_pos += n
        q_positions = torch.arange(start, start + n)
        k_positions = torch.arange(start + n - keys.shape[2], start + n)
        diff = q_positions[:, None] - k_positions[None, :]
        attn_scores = queries @ keys.transpose(2, 3)
        hidden = (diff < 0) | (diff >= self.sliding_window_size)  # (n, keys)
        if self.bug == "window-never-applied":
            hidden = diff < 0  # (n, keys): the future alone, cached or not
        if use_cache and self.bug == "cached-mask-no-window":
            hidden = diff < 0  # (n, keys): the future alone
        attn_scores.masked_fill_(hidden, -torch.inf)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)
        return self.out_proj((attn_weights @ values).transpose(1, 2).contiguous().view(b, n, self.d_out))

    def reset_cache(self):
        self.cache_k = self.cache_v = None
        self.ptr_current_pos = 0


class CachedWindowOrFull(nn.Module):
    """One cached attention layer of a model that mixes window and full layers: ``sliding_window_size`` W (query i
    sees keys i - W + 1 … i, the cache keeps the last W tokens) or None (full causal attention, the cache keeps every
    token).  ``keeps_all``: the bug of a window layer whose cache keeps every token (its mask still applies W)."""

    def __init__(self, d_in, d_out, num_heads, sliding_window_size=None, keeps_all=False):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.sliding_window_size, self.keeps_all = sliding_window_size, keeps_all
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.cache_k = self.cache_v = None
        self.ptr_current_pos = 0

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries, keys, values = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        start = self.ptr_current_pos if use_cache else 0
        window = self.sliding_window_size
        if use_cache:
            if self.cache_k is not None:
                keys = torch.cat([self.cache_k, keys], dim=2)  # (b, h, cached + n, hd)
                values = torch.cat([self.cache_v, values], dim=2)  # (b, h, cached + n, hd)
            kept = keys.shape[2] if window is None or self.keeps_all else window
            self.cache_k, self.cache_v = keys[:, :, -kept:], values[:, :, -kept:]  # (b, h, ≤ kept, hd) each
            self.ptr_current_pos += n
        query_pos = torch.arange(start, start + n)  # (n,)
        key_pos = torch.arange(start + n - keys.shape[2], start + n)  # (keys,)
        behind = query_pos[:, None] - key_pos[None, :]  # (n, keys): how far each key is behind each query
        hidden = behind < 0 if window is None else (behind < 0) | (behind >= window)  # (n, keys)
        attn_scores = (queries @ keys.transpose(2, 3)).masked_fill(hidden, -torch.inf)  # (b, h, n, keys)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, keys)
        context_vec = (attn_weights @ values).transpose(1, 2).contiguous().view(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)

    def reset_cache(self):
        self.cache_k = self.cache_v = None
        self.ptr_current_pos = 0


class WindowAndFullLayers(nn.Module):
    """Residual attention layers on a schedule of ``sliding_window_stride`` window layers, then one full layer, again
    and again (the layout of the book's bonus sliding-window model, ch04/06_swa): each layer keeps its own
    ``sliding_window_size`` (None on the full ones) and its own cache, all reset by ``reset_kv_cache()``."""

    def __init__(self, d_in=16, num_heads=2, n_layers=3, sliding_window_size=3, sliding_window_stride=2,
                 keeps_all=False):
        super().__init__()
        self.d_in = d_in
        self.layers = nn.ModuleList(
            CachedWindowOrFull(d_in, d_in, num_heads, sliding_window_size if layer % (sliding_window_stride + 1)
                               < sliding_window_stride else None, keeps_all)
            for layer in range(n_layers))

    def forward(self, x, use_cache=False):
        for layer in self.layers:
            x = x + layer(x, use_cache=use_cache)  # (b, n, d_in)
        return x

    def reset_kv_cache(self):
        for layer in self.layers:
            layer.reset_cache()


class LearnerCachedGQA(LearnerGQA):
    """LearnerGQA with the book's KV cache (04_gqa): ``cache_k``/``cache_v`` (b, num_kv_groups, n, head_dim) hold the
    K/V heads before ``repeat_interleave``; ``rotary``: the new queries and keys rotated at ``ptr_current_pos``, the
    keys cached rotated (Llama 3).  ``bug``: ``"caches-repeated"`` caches K/V after the repeat (num_heads heads),
    ``"repeat-on-cached-path"`` repeats the cached K with ``.repeat``, ``"rerotate"`` rotates every cached key again
    from position 0 each step, ``"no-offset"`` rotates the new queries and keys from position 0 (the mask is right)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, num_kv_groups=2, rotary=False, bug=None):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, num_kv_groups, rotary=rotary)
        self.cache_k = self.cache_v = None
        self.ptr_current_pos = 0
        self.bug = bug

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        keys = self.W_key(x).view(b, n, self.num_kv_groups, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        values = self.W_value(x).view(b, n, self.num_kv_groups, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        start = self.ptr_current_pos if use_cache else 0
        if self.rotary:
            rotated_at = 0 if self.bug == "no-offset" else start
            queries = rotate(queries, self.cos, self.sin, rotated_at)  # (b, h, n, hd)
            if self.bug != "rerotate":
                keys = rotate(keys, self.cos, self.sin, rotated_at)  # (b, g, n, hd)
        if self.bug == "caches-repeated":
            keys = keys.repeat_interleave(self.group_size, dim=1)  # (b, h, n, hd)
            values = values.repeat_interleave(self.group_size, dim=1)  # (b, h, n, hd)
        if use_cache:
            if self.cache_k is not None:
                keys = torch.cat([self.cache_k, keys], dim=2)  # (b, g, cached + n, hd)
                values = torch.cat([self.cache_v, values], dim=2)  # (b, g, cached + n, hd)
            self.ptr_current_pos += n
        if self.bug == "rerotate":
            keys = rotate(keys, self.cos, self.sin)  # (b, g, k, hd): the cached keys rotated once more
        if use_cache:
            self.cache_k, self.cache_v = keys, values
        if self.bug != "caches-repeated":
            repeat_cached = self.bug == "repeat-on-cached-path" and use_cache
            keys = (keys.repeat(1, self.group_size, 1, 1) if repeat_cached
                    else keys.repeat_interleave(self.group_size, dim=1))  # (b, h, k, hd)
            values = values.repeat_interleave(self.group_size, dim=1)  # (b, h, k, hd)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, k) -> (b, h, n, k)
        attn_scores.masked_fill_(self.mask.bool()[start:start + n, :keys.shape[2]], -torch.inf)  # (b, h, n, k)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, k)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)

    def reset_cache(self):
        self.cache_k = self.cache_v = None
        self.ptr_current_pos = 0


class LearnerCachedMLA(LearnerMLA):
    """LearnerMLA with the book's latent cache (05_mla): ``cache_c_kv`` (b, n, latent_dim), K and V computed from it
    every step; ``bug="caches-kv"``: it caches the up-projected K and V instead (2 × d_out per token)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, latent_dim=8, bug=None):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, latent_dim)
        self.latent_dim = latent_dim
        self.cache_c_kv = self.cache_k = self.cache_v = None
        self.ptr_current_pos = 0
        self.bug = bug

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        latent = self.W_DKV(x)  # (b, n, latent_dim)
        start = self.ptr_current_pos if use_cache else 0
        if use_cache and self.bug != "caches-kv":
            if self.cache_c_kv is not None:
                latent = torch.cat([self.cache_c_kv, latent], dim=1)  # (b, cached + n, latent_dim)
            self.cache_c_kv = latent
        keys_all, values_all = self.W_UK(latent), self.W_UV(latent)  # (b, k, d_out) each
        if use_cache and self.bug == "caches-kv":
            if self.cache_k is not None:
                keys_all = torch.cat([self.cache_k, keys_all], dim=1)  # (b, cached + n, d_out)
                values_all = torch.cat([self.cache_v, values_all], dim=1)  # (b, cached + n, d_out)
            self.cache_k, self.cache_v = keys_all, values_all
        if use_cache:
            self.ptr_current_pos += n
        k = keys_all.shape[1]
        queries = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        keys = keys_all.view(b, k, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, k, hd)
        values = values_all.view(b, k, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, k, hd)
        attn_scores = queries @ keys.transpose(-2, -1)  # (b, h, n, hd) @ (b, h, hd, k) -> (b, h, n, k)
        attn_scores = attn_scores.masked_fill(self.mask.bool()[start:start + n, :k], -torch.inf)  # (b, h, n, k)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, k)
        context_vec = (attn_weights @ values).transpose(1, 2).contiguous().view(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)

    def reset_cache(self):
        self.cache_c_kv = self.cache_k = self.cache_v = None
        self.ptr_current_pos = 0


class LearnerCachedRopeMLA(LearnerMLA):
    """DeepSeek-style MLA with a decoupled rotary key: K and V come up from the latent, and each head's query and key
    also carry ``rope_dim`` rotated features, the key's shared by every head.  The cache holds the latent
    (``cache_c_kv``, (b, n, latent_dim)) and the rotated shared key (``cache_k_rope``, (b, n, rope_dim))."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, latent_dim=8, rope_dim=4):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, latent_dim)
        self.latent_dim, self.rope_dim = latent_dim, rope_dim
        self.W_query_rope = nn.Linear(d_in, num_heads * rope_dim, bias=False)
        self.W_key_rope = nn.Linear(d_in, rope_dim, bias=False)
        cos, sin = rope_angles(rope_dim, context_length)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)
        self.cache_c_kv = self.cache_k_rope = None
        self.ptr_current_pos = 0

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        start = self.ptr_current_pos if use_cache else 0
        latent = self.W_DKV(x)  # (b, n, latent_dim)
        key_rope = rotate(self.W_key_rope(x)[:, None], self.cos, self.sin, start)[:, 0]  # (b, n, rope_dim)
        if use_cache:
            if self.cache_c_kv is not None:
                latent = torch.cat([self.cache_c_kv, latent], dim=1)  # (b, cached + n, latent_dim)
                key_rope = torch.cat([self.cache_k_rope, key_rope], dim=1)  # (b, cached + n, rope_dim)
            self.cache_c_kv, self.cache_k_rope = latent, key_rope
            self.ptr_current_pos += n
        k = latent.shape[1]
        query_rope = self.W_query_rope(x).view(b, n, self.num_heads, self.rope_dim).transpose(1, 2)  # (b, h, n, r)
        queries = torch.cat([self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2),
                             rotate(query_rope, self.cos, self.sin, start)], dim=-1)  # (b, h, n, hd + r)
        keys = torch.cat([self.W_UK(latent).view(b, k, self.num_heads, self.head_dim).transpose(1, 2),
                          key_rope[:, None].expand(b, self.num_heads, k, self.rope_dim)], dim=-1)  # (b, h, k, hd + r)
        values = self.W_UV(latent).view(b, k, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, k, hd)
        attn_scores = queries @ keys.transpose(-2, -1)  # (b, h, n, hd + r) @ (b, h, hd + r, k) -> (b, h, n, k)
        attn_scores = attn_scores.masked_fill(self.mask.bool()[start:start + n, :k], -torch.inf)  # (b, h, n, k)
        attn_weights = torch.softmax(attn_scores / queries.shape[-1] ** 0.5, dim=-1)  # (b, h, n, k)
        context_vec = (attn_weights @ values).transpose(1, 2).contiguous().view(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)

    def reset_cache(self):
        self.cache_c_kv = self.cache_k_rope = None
        self.ptr_current_pos = 0


class CachedGQAWithPositions(LearnerCachedGQA):
    """LearnerCachedGQA that also keeps the cached tokens' positions (``cache_positions``, (n,)) and builds the
    step's mask from them: query positions against key positions."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, num_kv_groups=2):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, num_kv_groups)
        self.cache_positions = None

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        keys = self.W_key(x).view(b, n, self.num_kv_groups, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        values = self.W_value(x).view(b, n, self.num_kv_groups, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        start = self.ptr_current_pos if use_cache else 0
        positions = torch.arange(start, start + n)  # (n,)
        key_positions = positions
        if use_cache:
            if self.cache_k is not None:
                keys = torch.cat([self.cache_k, keys], dim=2)  # (b, g, cached + n, hd)
                values = torch.cat([self.cache_v, values], dim=2)  # (b, g, cached + n, hd)
                key_positions = torch.cat([self.cache_positions, positions])  # (cached + n,)
            self.cache_k, self.cache_v, self.cache_positions = keys, values, key_positions
            self.ptr_current_pos += n
        keys = keys.repeat_interleave(self.group_size, dim=1)  # (b, h, k, hd)
        values = values.repeat_interleave(self.group_size, dim=1)  # (b, h, k, hd)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, k) -> (b, h, n, k)
        future = key_positions[None, :] > positions[:, None]  # (n, k)
        attn_scores.masked_fill_(future, -torch.inf)  # (b, h, n, k)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, k)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)

    def reset_cache(self):
        super().reset_cache()
        self.cache_positions = None


class NaNAfterAttention(nn.Module):
    """Correct causal attention whose output projection's weights were never initialised: NaN after the attention."""

    def __init__(self, d_in=32, d_out=32, num_heads=4, context_length=16):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        nn.init.constant_(self.out_proj.weight, float("nan"))
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, n, _ = x.shape
        queries, keys, values = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))
        attn_scores = queries @ keys.transpose(2, 3) / self.head_dim ** 0.5
        attn_scores = attn_scores.masked_fill(self.mask.bool()[:n, :n], -torch.inf)
        attn_weights = torch.softmax(attn_scores, dim=-1)
        return self.out_proj((attn_weights @ values).transpose(1, 2).reshape(b, n, -1))


class ExitsInForward(nn.Module):
    """A forward that ends the program (a debugging ``sys.exit`` left in)."""

    def __init__(self, d_in=32):
        super().__init__()
        self.proj = nn.Linear(d_in, d_in)

    def forward(self, x):
        import sys

        sys.exit(1)


class ValuesAfterSoftmax(nn.Module):
    """Correct causal single-head attention that projects V after the softmax (``w @ self.W_value(x)``), as some
    tutorials do; its ``W_value`` is a Linear met after the attention whose input is x, not the context.
    ``diagonal=2``: the mask lets each token see one future token (a bug)."""

    def __init__(self, d_in=32, d_out=32, diagonal=1):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.diagonal = diagonal

    def forward(self, x):
        n = x.shape[1]
        attn_scores = self.W_query(x) @ self.W_key(x).transpose(1, 2)  # (b, n, d_out) @ (b, d_out, n) -> (b, n, n)
        mask = torch.triu(torch.ones(n, n), diagonal=self.diagonal).bool()  # (n, n)
        attn_scores = attn_scores.masked_fill(mask, float("-inf"))  # (b, n, n)
        attn_weights = torch.softmax(attn_scores / self.W_key.out_features ** 0.5, dim=-1)  # (b, n, n)
        return attn_weights @ self.W_value(x)  # (b, n, n) @ (b, n, d_out) -> (b, n, d_out)


class BlockWithoutOutProj(nn.Module):
    """A tiny transformer block with no output projection: the context goes into a residual sum, then (with
    ``feed_forward``) a feed-forward network whose first Linear takes x + context."""

    def __init__(self, d_in=32, feed_forward=True):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d_in, d_in), nn.Linear(d_in, d_in), nn.Linear(d_in, d_in)
        self.ff = nn.Sequential(nn.Linear(d_in, 4 * d_in), nn.GELU(), nn.Linear(4 * d_in, d_in))
        self.feed_forward = feed_forward

    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.q(x), self.k(x), self.v(x)  # (b, n, d_in) each
        s = q @ k.transpose(1, 2) / x.shape[-1] ** 0.5  # (b, n, d_in) @ (b, d_in, n) -> (b, n, n)
        s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))  # (b, n, n)
        h = x + torch.softmax(s, dim=-1) @ v  # (b, n, d_in)
        return h + self.ff(h) if self.feed_forward else h  # (b, n, d_in)


class LearnedPositions(nn.Module):
    """Causal single-head attention that adds its own learned position vectors (``context_length`` of them) to x:
    no mask buffer, and a text longer than the context makes the addition raise."""

    def __init__(self, d_in=16, d_out=16, context_length=16):
        super().__init__()
        self.context_length = context_length
        self.pos_emb = nn.Parameter(torch.randn(context_length, d_in) * 0.02)
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)

    def forward(self, x):
        n = x.shape[1]
        x = x + self.pos_emb[:n]  # (b, n, d_in) + (n, d_in): raises when n > context_length
        attn_scores = self.W_query(x) @ self.W_key(x).transpose(1, 2)  # (b, n, d_out) @ (b, d_out, n) -> (b, n, n)
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n)
        attn_scores = attn_scores.masked_fill(mask, float("-inf"))  # (b, n, n)
        attn_weights = torch.softmax(attn_scores / self.W_key.out_features ** 0.5, dim=-1)  # (b, n, n)
        return attn_weights @ self.W_value(x)  # (b, n, n) @ (b, n, d_out) -> (b, n, d_out)


class CachedInInferenceMode(LearnerCachedMHA):
    """The learner's cached attention with its forward under ``@torch.inference_mode()``, as generation code often
    runs: the keys and values it caches are inference tensors, which keep no version counter."""

    @torch.inference_mode()
    def forward(self, x, use_cache=False):
        return super().forward(x, use_cache)


class FusedPositionTable(nn.Module):
    """Causal single-head attention in Hugging Face's and the book's GPT names: a learned position table of
    ``max_position_embeddings`` rows added to x, then q, k and v from one fused ``in_proj_weight`` through F.linear
    (no nn.Linear to read a width from).  A text longer than the table makes the addition raise."""

    def __init__(self, emb_dim=24, max_position_embeddings=16):
        super().__init__()
        self.emb_dim = emb_dim
        self.max_position_embeddings = max_position_embeddings
        self.pos_emb = nn.Parameter(torch.randn(max_position_embeddings, emb_dim) * 0.02)
        self.in_proj_weight = nn.Parameter(torch.randn(3 * emb_dim, emb_dim) / emb_dim ** 0.5)

    def forward(self, x):
        n = x.shape[1]
        x = x + self.pos_emb[:n]  # (b, n, emb_dim) + (n, emb_dim): raises when n > max_position_embeddings
        queries, keys, values = F.linear(x, self.in_proj_weight).chunk(3, dim=-1)  # (b, n, emb_dim) each
        attn_scores = queries @ keys.transpose(1, 2)  # (b, n, emb_dim) @ (b, emb_dim, n) -> (b, n, n)
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n)
        attn_scores = attn_scores.masked_fill(mask, float("-inf"))  # (b, n, n)
        attn_weights = torch.softmax(attn_scores / self.emb_dim ** 0.5, dim=-1)  # (b, n, n)
        return attn_weights @ values  # (b, n, n) @ (b, n, emb_dim) -> (b, n, emb_dim)


class InvertedSDPAMask(nn.Module):
    """Bug: the mask built in the forward with masked_fill's convention (True = hide the future) and handed to SDPA,
    whose boolean attn_mask keeps where it is True: it shows the future and hides the past and the diagonal (the last
    query keeps no key: its softmax is 0/0, NaN; SDPA returns zeros there).  No mask buffer, no causal attribute."""

    def __init__(self, d_in=16, d_out=16, num_heads=4):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(d_in, 3 * d_out)
        self.proj = nn.Linear(d_out, d_out)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # (b, n, d_out) each
        q, k, v = (t.view(b, n, self.num_heads, -1).transpose(1, 2) for t in (q, k, v))  # (b, h, n, head_dim)
        future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n): True above the diagonal
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=future)  # (b, h, n, head_dim)
        return self.proj(y.transpose(1, 2).reshape(b, n, -1))  # (b, n, d_out)


class TrilInsteadOfTriu(nn.Module):
    """Bug: the mask built inline with tril(…, -1) where triu(…, 1) belongs: it hides the past and shows the future."""

    def __init__(self, d_in=16, d_out=16):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)

    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, n, d_out) each
        mask = torch.tril(torch.ones(n, n), diagonal=-1).bool()  # (n, n): True below the diagonal
        s = (q @ k.transpose(1, 2)).masked_fill(mask, -torch.inf)  # (b, n, d_out) @ (b, d_out, n) -> (b, n, n)
        return torch.softmax(s / k.shape[-1] ** 0.5, dim=-1) @ v  # (b, n, n) @ (b, n, d_out) -> (b, n, d_out)


class ScaleAfterSoftmax(nn.Module):
    """Bug: the division by √d_out comes after the softmax, so the weights that multiply V sum to 1/√d_out
    (``in_place``: ``w /= …``)."""

    def __init__(self, d_in=16, d_out=16, context_length=16, in_place=False):
        super().__init__()
        self.in_place = in_place
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, n, d_out) each
        s = (q @ k.transpose(1, 2)).masked_fill(self.mask.bool()[:n, :n], -torch.inf)  # (b, n, n)
        w = torch.softmax(s, dim=-1)  # (b, n, n)
        if self.in_place:
            w /= k.shape[-1] ** 0.5  # (b, n, n): rows sum to 1/√d_out
        else:
            w = w / k.shape[-1] ** 0.5  # (b, n, n): rows sum to 1/√d_out
        return w @ v  # (b, n, n) @ (b, n, d_out) -> (b, n, d_out)


class RenormalisedWeights(nn.Module):
    """Correct causal attention that renormalises the softmax's output by its row sums before ``@ V`` (redundant: a
    tensor, not a number, acts between the softmax and V)."""

    def __init__(self, d_in=16, d_out=16):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)

    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, n, d_out) each
        s = (q @ k.transpose(1, 2)) / k.shape[-1] ** 0.5  # (b, n, d_out) @ (b, d_out, n) -> (b, n, n)
        s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1), -torch.inf)  # (b, n, n)
        w = torch.softmax(s, dim=-1)  # (b, n, n)
        w = w / w.sum(dim=-1, keepdim=True)  # (b, n, n): the rows already sum to 1
        return w @ v  # (b, n, n) @ (b, n, d_out) -> (b, n, d_out)


class SoftCappedScores(nn.Module):
    """Causal attention whose scores are soft-capped (``cap · tanh(scores / cap)``, as Gemma 2 does): a tanh comes
    between Q @ Kᵀ and the softmax."""

    def __init__(self, d_in=16, d_out=16, cap=30.0):
        super().__init__()
        self.cap = cap
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)

    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, n, d_out) each
        s = self.cap * torch.tanh(q @ k.transpose(1, 2) / self.cap)  # (b, n, d_out) @ (b, d_out, n) -> (b, n, n)
        s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1), -torch.inf)  # (b, n, n)
        return torch.softmax(s / k.shape[-1] ** 0.5, dim=-1) @ v  # (b, n, n) @ (b, n, d_out) -> (b, n, d_out)


class WhereMasked(nn.Module):
    """nanoGPT's manual path with the causal mask applied by ``torch.where``, as TransformerLens masks.  ``spelling``:
    "keep" ``torch.where(keep, att, -inf)``, "buffer" ``torch.where(keep, att, self.IGNORE)`` (a tensor fill),
    "inverted" ``torch.where(~keep, -inf, att)``; ``scaled`` False: the ÷√head_dim is forgotten (a bug)."""

    def __init__(self, n_embd=32, n_head=4, spelling="keep", scaled=True):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd, self.spelling, self.scaled = n_head, n_embd, spelling, scaled
        self.register_buffer("IGNORE", torch.tensor(-torch.inf))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        att = q @ k.transpose(-2, -1)  # (B, nh, T, hs) @ (B, nh, hs, T) -> (B, nh, T, T)
        if self.scaled:
            att = att * (1.0 / math.sqrt(k.size(-1)))  # (B, nh, T, T)
        keep = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # (T, T): True on and below the diagonal
        if self.spelling == "keep":
            att = torch.where(keep, att, float("-inf"))  # (B, nh, T, T)
        elif self.spelling == "buffer":
            att = torch.where(keep, att, self.IGNORE)  # (B, nh, T, T)
        else:
            att = torch.where(~keep, float("-inf"), att)  # (B, nh, T, T)
        att = F.softmax(att, dim=-1)  # (B, nh, T, T)
        y = att @ v  # (B, nh, T, T) @ (B, nh, T, hs) -> (B, nh, T, hs)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class TransformerLensAttention(nn.Module):
    """TransformerLens' ``AbstractAttention`` core path: W_Q/W_K/W_V as (head, d_model, d_head), the ``IGNORE``
    buffer, ``torch.where(final_mask, attn_scores, self.IGNORE)``, the NaN → 0 ``where`` after the softmax and
    ``pattern.to(v.dtype)`` (``einops.rearrange`` written as permute/reshape)."""

    def __init__(self, d_model=32, n_heads=4):
        super().__init__()
        d_head = d_model // n_heads
        self.n_heads, self.d_model, self.d_head = n_heads, d_model, d_head
        self.W_Q = nn.Parameter(torch.randn(n_heads, d_model, d_head) * 0.2)
        self.W_K = nn.Parameter(torch.randn(n_heads, d_model, d_head) * 0.2)
        self.W_V = nn.Parameter(torch.randn(n_heads, d_model, d_head) * 0.2)
        self.W_O = nn.Parameter(torch.randn(n_heads, d_head, d_model) * 0.2)
        self.b_Q, self.b_K, self.b_V = (nn.Parameter(torch.zeros(n_heads, d_head)) for _ in range(3))
        self.b_O = nn.Parameter(torch.zeros(d_model))
        self.register_buffer("IGNORE", torch.tensor(-torch.inf))
        self.attn_scale = math.sqrt(d_head)

    @staticmethod
    def attn_linear(x, w, b):
        w = w.permute(0, 2, 1).reshape(-1, w.shape[1])  # (h, d_model, d_head) -> (h·d_head, d_model)
        return F.linear(x, w, b.reshape(-1)).reshape(x.shape[0], x.shape[1], *b.shape)  # (b, n, h, d_head)

    def forward(self, x):
        q = self.attn_linear(x, self.W_Q, self.b_Q)  # (b, n, h, d_head)
        k = self.attn_linear(x, self.W_K, self.b_K)  # (b, n, h, d_head)
        v = self.attn_linear(x, self.W_V, self.b_V)  # (b, n, h, d_head)
        attn_scores = q.permute(0, 2, 1, 3) @ k.permute(0, 2, 3, 1) / self.attn_scale  # (b, h, n, n)
        n = attn_scores.size(-1)
        positions = torch.arange(n, device=x.device)  # (n,)
        final_mask = (positions[None, :] <= positions[:, None])[None, None, :, :]  # (1, 1, n, n): keep the past
        attn_scores = torch.where(final_mask, attn_scores, self.IGNORE)  # (b, h, n, n)
        pattern = F.softmax(attn_scores, dim=-1)  # (b, h, n, n)
        pattern = torch.where(torch.isnan(pattern), torch.zeros_like(pattern), pattern)  # (b, h, n, n)
        pattern = pattern.to(device=v.device, dtype=v.dtype)  # (b, h, n, n)
        z = (pattern @ v.permute(0, 2, 1, 3)).permute(0, 2, 1, 3)  # (b, h, n, n) @ (b, h, n, d_head) -> (b, n, h, d)
        w = self.W_O.permute(2, 0, 1).reshape(self.d_model, -1)  # (d_model, h·d_head)
        return F.linear(z.reshape(z.shape[0], z.shape[1], -1), w, self.b_O)  # (b, n, d_model)


class SoftmaxOverHeads(nn.Module):
    """Bug: nanoGPT's manual path with ``F.softmax(att, dim=1)`` on (B, nh, T, T), over the heads (dim=-1 meant).
    ``fill``: what the mask writes, nanoGPT's "-inf" or Hugging Face's "min" (``torch.finfo(dtype).min``)."""

    def __init__(self, n_embd=32, n_head=4, fill="-inf"):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.n_head, self.n_embd, self.fill = n_head, n_embd, fill

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in self.c_attn(x).split(self.n_embd, dim=2))  # (B, nh, T, hs) each
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, nh, T, T)
        fill = float("-inf") if self.fill == "-inf" else torch.finfo(att.dtype).min
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), fill)  # (B, nh, T, T)
        att = F.softmax(att, dim=1)  # (B, nh, T, T): over the heads
        return (att @ v).transpose(1, 2).reshape(B, T, C)  # (B, nh, T, hs) -> (B, T, C)


class EagerAttention(nn.Module):
    """A Hugging Face-style layer: projections here, the attention in a library function in another file
    (``helpers.library_attention.eager_attention_forward``, as transformers' GPT-2 keeps it), which casts the weights
    to V's dtype after the softmax; ``renormalise``: that function also divides the weights by their row sums."""

    def __init__(self, embed_dim=32, num_heads=4, renormalise=False):
        super().__init__()
        self.embed_dim, self.num_heads, self.renormalise = embed_dim, num_heads, renormalise
        self.c_attn = nn.Linear(embed_dim, 3 * embed_dim)
        self.c_proj = nn.Linear(embed_dim, embed_dim)
        self.attn_dropout = nn.Dropout(0.0)

    def forward(self, x):
        from helpers.library_attention import eager_attention_forward

        b, n, _ = x.shape
        shape = (b, n, self.num_heads, self.embed_dim // self.num_heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in self.c_attn(x).split(self.embed_dim, dim=2))  # (b, h, n, hd)
        mask = torch.full((n, n), torch.finfo(x.dtype).min).triu(1)  # (n, n): additive, the future pushed down
        out = eager_attention_forward(self, q, k, v, mask, renormalise=self.renormalise)  # (b, n, h, hd)
        return self.c_proj(out.reshape(b, n, self.embed_dim))  # (b, n, embed_dim)


class PastKeyValues(nn.Module):
    """Hugging Face's cache convention: the caller holds the cache, ``forward(x, past_key_values=None,
    use_cache=False) -> (out, present)``, and the module keeps nothing between calls.  ``bug="mask-ignores-past"``:
    the mask is built as if the new tokens started at position 0; ``bug="no-mask"``: nothing is masked, as Hugging
    Face's eager GPT2Attention called without its model's mask."""

    def __init__(self, d_model=32, n_heads=4, bug=None):
        super().__init__()
        self.h, self.dk = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.o = nn.Linear(d_model, d_model)
        self.bug = bug

    def forward(self, x, past_key_values=None, use_cache=False):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, self.dk).permute(2, 0, 3, 1, 4)  # 3 × (B, h, T, dk)
        past = 0
        if past_key_values is not None:
            pk, pv = past_key_values
            past = pk.shape[2]
            k = torch.cat([pk, k], dim=2)  # (B, h, past + T, dk)
            v = torch.cat([pv, v], dim=2)  # (B, h, past + T, dk)
        present = (k, v) if use_cache else None
        S = k.shape[2]
        s = q @ k.transpose(-1, -2) / math.sqrt(self.dk)  # (B, h, T, S)
        i = torch.arange(T, device=x.device)[:, None] + (0 if self.bug == "mask-ignores-past" else past)  # (T, 1)
        j = torch.arange(S, device=x.device)[None, :]  # (1, S)
        if self.bug != "no-mask":
            s = s.masked_fill(j > i, float("-inf"))  # (B, h, T, S)
        y = F.softmax(s, dim=-1) @ v  # (B, h, T, dk)
        out = self.o(y.transpose(1, 2).reshape(B, T, C))  # (B, T, C)
        return out, present


class CacheObjectAttention(nn.Module):
    """Written the way Hugging Face's layers are (transformers 5.x ``LlamaAttention``): the caller passes a ``Cache``
    object (``DynamicCache``) as ``past_key_values``; the layer calls ``past_key_values.update(k, v, self.layer_idx)``,
    which stores the new keys and values in that object and hands back all of them, and returns ``(out, weights)``
    (``returns_cache``: ``(out, weights, past_key_values)``).  ``bug="mask-ignores-past"``: the mask is built as if
    the new tokens started at position 0; ``bug="updates-twice"``: the new keys are stored, then updated again."""

    def __init__(self, hidden_size=32, num_heads=4, layer_idx=0, bug=None, returns_cache=False):
        super().__init__()
        self.num_heads, self.head_dim, self.layer_idx = num_heads, hidden_size // num_heads, layer_idx
        self.q_proj = nn.Linear(hidden_size, hidden_size)
        self.k_proj = nn.Linear(hidden_size, hidden_size)
        self.v_proj = nn.Linear(hidden_size, hidden_size)
        self.o_proj = nn.Linear(hidden_size, hidden_size)
        self.bug, self.returns_cache = bug, returns_cache

    def forward(self, hidden_states, past_key_values=None, **kwargs):
        b, T, _ = hidden_states.shape
        query_states, key_states, value_states = (
            proj(hidden_states).view(b, T, self.num_heads, self.head_dim).transpose(1, 2)
            for proj in (self.q_proj, self.k_proj, self.v_proj))  # (b, h, T, hd) each
        past = 0
        if past_key_values is not None:
            past = past_key_values.get_seq_length(self.layer_idx)
            if self.bug == "updates-twice":
                past_key_values.update(key_states, value_states, self.layer_idx)
            key_states, value_states = past_key_values.update(key_states, value_states, self.layer_idx)  # (b, h, S, hd)
        S = key_states.shape[2]
        attn_weights = query_states @ key_states.transpose(2, 3) / math.sqrt(self.head_dim)  # (b, h, T, S)
        i = torch.arange(T)[:, None] + (0 if self.bug == "mask-ignores-past" else past)  # (T, 1): the positions
        attn_weights = attn_weights.masked_fill(torch.arange(S)[None, :] > i, float("-inf"))  # (b, h, T, S)
        attn_weights = F.softmax(attn_weights, dim=-1)  # (b, h, T, S)
        attn_output = (attn_weights @ value_states).transpose(1, 2).reshape(b, T, -1)  # (b, T, h·hd)
        attn_output = self.o_proj(attn_output)  # (b, T, hidden)
        if self.returns_cache:
            return attn_output, attn_weights, past_key_values
        return attn_output, attn_weights


class Conv1D(nn.Module):
    """GPT-2's Conv1D (transformers.pytorch_utils): a Linear whose weight is stored (nx, nf)."""

    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)  # (nx, nf)
        self.bias = nn.Parameter(torch.zeros(nf))  # (nf,)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.weight.shape[1],)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)  # (B·T, nf)
        return x.view(size_out)  # (B, T, nf)


class GPT2StyleAttention(nn.Module):
    """GPT-2's attention built from Conv1D layers, as a wrapper around the library's layer looks to attnviz: no
    width attribute and no nn.Linear, so the input width cannot be read off the module."""

    def __init__(self, n_embd=64, n_head=4, n_positions=64):
        super().__init__()
        self.c_attn = Conv1D(3 * n_embd, n_embd)
        self.c_proj = Conv1D(n_embd, n_embd)
        self.heads = n_head
        self.register_buffer("bias", torch.tril(torch.ones(n_positions, n_positions, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 × (B, T, C)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))  # (B, h, T, hd)
        w = q @ k.transpose(-1, -2) / math.sqrt(v.shape[-1])  # (B, h, T, T)
        w = w.masked_fill(~self.bias[:T, :T], float("-inf"))  # (B, h, T, T)
        y = F.softmax(w, dim=-1) @ v  # (B, h, T, hd)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))  # (B, T, C)


class QueryKeyValue(nn.Module):
    """The Annotated Transformer's signature: ``forward(query, key, value, mask=None)``, self-attention when all
    three are x."""

    def __init__(self, d_model=32, h=4):
        super().__init__()
        self.d_k, self.h = d_model // h, h
        self.linears = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(4)])

    def forward(self, query, key, value, mask=None):
        B = query.size(0)
        query, key, value = [lin(t).view(B, -1, self.h, self.d_k).transpose(1, 2)  # (B, h, n, d_k)
                             for lin, t in zip(self.linears, (query, key, value))]
        scores = query @ key.transpose(-2, -1) / math.sqrt(self.d_k)  # (B, h, n, n)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)  # (B, h, n, n)
        x = F.softmax(scores, dim=-1) @ value  # (B, h, n, d_k)
        return self.linears[-1](x.transpose(1, 2).contiguous().view(B, -1, self.h * self.d_k))  # (B, n, d_model)


class TakesMaskCosSin(nn.Module):
    """llama3's GroupedQueryAttention signature: the model hands the layer its mask and rotary tables,
    ``forward(x, mask, cos, sin)``."""

    def __init__(self, d_in=32, num_heads=4):
        super().__init__()
        self.heads, self.head_dim = num_heads, d_in // num_heads
        self.qkv = nn.Linear(d_in, 3 * d_in)

    def forward(self, x, mask, cos, sin):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)  # 3 × (B, h, T, hd)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)  # (B, h, T, hd)
        s = (q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)).masked_fill(mask[:T, :T], -torch.inf)  # (B, h, T, T)
        return (F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)  # (B, T, C)


class BuiltOnMeta(CausalSelfAttention):
    """nanoGPT's attention built on the meta device (shapes, no values), as a large model is built before its
    weights are loaded — and never loaded."""

    def __init__(self, n_embd=32, n_head=4, block_size=16, dropout=0.0):
        with torch.device("meta"):
            super().__init__(n_embd, n_head, block_size, dropout, flash=False)


class MaskedByCaller(nn.Module):
    """A Hugging Face-style attention layer: it says ``is_causal = True``, but masks only through the
    ``attention_mask`` its model would build and pass; called alone, ``forward(x)`` masks nothing."""

    def __init__(self, d_in=16, d_out=16, num_heads=4):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.is_causal = True
        self.qkv = nn.Linear(d_in, 3 * d_out)
        self.o_proj = nn.Linear(d_out, d_out)

    def forward(self, x, attention_mask=None):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # (b, n, d_out) each
        q, k, v = (t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))  # (b, h, n, hd)
        scores = q @ k.transpose(2, 3) / self.head_dim ** 0.5  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
        if attention_mask is not None:
            scores = scores + attention_mask  # (b, h, n, n)
        weights = torch.softmax(scores, dim=-1)  # (b, h, n, n)
        context = (weights @ v).transpose(1, 2).reshape(b, n, -1)  # (b, h, n, hd) -> (b, n, d_out)
        return self.o_proj(context)  # (b, n, d_out)



class WrapsMaskedByCaller(nn.Module):
    """A block that calls a ``MaskedByCaller`` layer as ``self.attn(x)``, without the mask."""

    def __init__(self, d_in=16):
        super().__init__()
        self.attn = MaskedByCaller(d_in, d_in)

    def forward(self, x):
        return self.attn(x)  # (b, n, d_in)



class KeepMaskOffByOne(nn.Module):
    """Bug: nanoGPT's keep-mask built with ``torch.tril(…, diagonal=1)`` and applied as ``masked_fill(bias == 0, …)``:
    every token also sees the next one (``inline``: the keep-mask is built in the forward)."""

    def __init__(self, n_embd=32, n_head=4, block_size=16, inline=False):
        super().__init__()
        self.n_head, self.n_embd, self.inline = n_head, n_embd, inline
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        keep = torch.tril(torch.ones(block_size, block_size), diagonal=1)  # (block_size, block_size)
        self.register_buffer("bias", keep.view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, nh, T, T)
        if self.inline:
            keep = torch.ones(T, T).tril(diagonal=1)  # (T, T)
            att = att.masked_fill(keep == 0, float("-inf"))  # (B, nh, T, T)
        else:
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))  # (B, nh, T, T)
        att = F.softmax(att, dim=-1)  # (B, nh, T, T)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)  # (B, nh, T, hs) -> (B, T, C)
        return self.c_proj(y)  # (B, T, C)



class SDPAFloatMaskBelow(nn.Module):
    """Bug: a float additive mask for SDPA with −∞ below the diagonal (``.tril(-1)`` where ``.triu(1)`` belongs):
    it hides the past and shows the future."""

    def __init__(self, d_in=16, d_out=16, num_heads=4):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(d_in, 3 * d_out)
        self.proj = nn.Linear(d_out, d_out)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # (b, n, d_out) each
        q, k, v = (t.view(b, n, self.num_heads, -1).transpose(1, 2) for t in (q, k, v))  # (b, h, n, head_dim)
        mask = torch.full((n, n), float("-inf")).tril(-1)  # (n, n): −∞ below the diagonal
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (b, h, n, head_dim)
        return self.proj(y.transpose(1, 2).reshape(b, n, -1))  # (b, n, d_out)



class MHAWithoutBatchFirst(nn.Module):
    """Bug: ``nn.MultiheadAttention`` built without ``batch_first=True`` and fed (batch, n, d): it reads the batch as
    the tokens and attends across the items (``masked``: with a causal attn_mask, which torch refuses: it is
    (n, n), not (batch, batch))."""

    def __init__(self, embed_dim=32, num_heads=4, masked=True):
        super().__init__()
        self.mha = nn.MultiheadAttention(embed_dim, num_heads)
        self.masked = masked

    def forward(self, x):
        n = x.shape[1]
        if not self.masked:
            return self.mha(x, x, x, need_weights=False)[0]  # (b, n, d)
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n): True above the diagonal
        return self.mha(x, x, x, attn_mask=mask, need_weights=False)[0]  # (b, n, d)



class SequenceFirst(nn.Module):
    """Bug: ``nn.MultiheadAttention``'s default (n, batch, d) layout kept, the causal mask sized from ``x.shape[0]``
    as for that layout, and fed (batch, n, d): it reads one token of n items, which the mask does not hide."""

    def __init__(self, d_in=32, num_heads=4):
        super().__init__()
        self.mha = nn.MultiheadAttention(d_in, num_heads)

    def forward(self, x):
        n = x.shape[0]
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)  # (n, n): True above the diagonal
        return self.mha(x, x, x, attn_mask=mask)[0]


class CentredValues(nn.Module):
    """Bug: the values are projected from x centred over the whole sequence (x − its mean over the tokens), so every
    token's value depends on later tokens, though the causal mask is right."""

    def __init__(self, d_in=16, d_out=16):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)

    def forward(self, x):
        n = x.shape[1]
        q, k = self.W_query(x), self.W_key(x)  # (b, n, d_out) each
        v = self.W_value(x - x.mean(dim=1, keepdim=True))  # (b, n, d_out)
        s = (q @ k.transpose(1, 2)) / k.shape[-1] ** 0.5  # (b, n, d_out) @ (b, d_out, n) -> (b, n, n)
        s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1), -torch.inf)  # (b, n, n)
        return torch.softmax(s, dim=-1) @ v  # (b, n, n) @ (b, n, d_out) -> (b, n, d_out)


class GQAPairing(nn.Module):
    """Grouped-query attention whose K and V heads are repeated each its own way (``keys``, ``values``: "interleave",
    ``repeat_interleave(r, dim=1)``: K1, K1, K2, K2; or "repeat", ``.repeat(1, r, 1, 1)``: K1, K2, K1, K2).  Alike, a
    consistent design; mixed, query head h reads K group h // r but V group h % g (or the reverse): a bug."""

    def __init__(self, d_model=16, n_heads=8, n_kv_heads=2, keys="interleave", values="repeat"):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, d_model // n_heads
        self.keys, self.values = keys, values
        self.wq = nn.Linear(d_model, d_model, bias=False)
        self.wk = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        b, n, _ = x.shape
        r = self.n_heads // self.n_kv_heads
        q = self.wq(x).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        k = self.wk(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        v = self.wv(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        k = k.repeat_interleave(r, dim=1) if self.keys == "interleave" else k.repeat(1, r, 1, 1)  # (b, h, n, hd)
        v = v.repeat_interleave(r, dim=1) if self.values == "interleave" else v.repeat(1, r, 1, 1)  # (b, h, n, hd)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, n, hd)
        return self.wo(o.transpose(1, 2).reshape(b, n, -1))  # (b, n, d_model)


class SharedValuesOnly(nn.Module):
    """Every query head its own keys, but the values of 2 heads shared by 4 query heads (repeat_interleave): no such
    module is in use; nothing pairs keys with values here, so nothing can pair them wrongly."""

    def __init__(self, d_model=16, n_heads=4, n_kv_heads=2):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, d_model // n_heads
        self.wq = nn.Linear(d_model, d_model, bias=False)
        self.wk = nn.Linear(d_model, d_model, bias=False)
        self.wv = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.wq(x).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        k = self.wk(x).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        v = self.wv(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        v = v.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)  # (b, h, n, hd)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, n, hd)
        return self.wo(o.transpose(1, 2).reshape(b, n, -1))  # (b, n, d_model)


class BroadcastGQA(nn.Module):
    """A user's grouped-query attention that broadcasts its 2 K/V heads over 4 query heads instead of repeating
    them: its Trace has fewer K/V heads than query heads.  ``mask``: "causal" (the future hidden) or "padding" (an
    additive −1e9, finite, on the last key)."""

    def __init__(self, d_model=16, n_heads=4, n_kv_heads=2, mask="causal"):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim, self.mask = n_heads, n_kv_heads, d_model // n_heads, mask
        self.wq = nn.Linear(d_model, d_model, bias=False)
        self.wk = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)

    def forward(self, x):
        b, n, _ = x.shape
        group = self.n_heads // self.n_kv_heads
        q = self.wq(x).view(b, n, self.n_kv_heads, group, self.head_dim).permute(0, 2, 3, 1, 4)  # (b, g, s, n, hd)
        k = self.wk(x).view(b, n, self.n_kv_heads, 1, self.head_dim).permute(0, 2, 3, 1, 4)  # (b, g, 1, n, hd)
        v = self.wv(x).view(b, n, self.n_kv_heads, 1, self.head_dim).permute(0, 2, 3, 1, 4)  # (b, g, 1, n, hd)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (b, g, s, n, n)
        if self.mask == "padding":
            padding = torch.zeros(n)  # (n,)
            padding[-1] = -1e9
            scores = scores + padding  # (b, g, s, n, n): the last key pushed down
        else:
            future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n)
            scores = scores.masked_fill(future, -torch.inf)  # (b, g, s, n, n)
        weights = torch.softmax(scores, dim=-1)  # (b, g, s, n, n)
        return (weights @ v).permute(0, 3, 1, 2, 4).reshape(b, n, -1)  # (b, g, s, n, hd) -> (b, n, h·hd)



class EinsumAttention(nn.Module):
    """Correct causal multi-head attention written with einsum for Q·Kᵀ and for weights·V.  ``layout``: "heads"
    (q, k, v (b, h, n, hd): "bhid,bhjd->bhij", then "bhij,bhjd->bhid"), "tokens" (q, k, v (b, n, h, hd) as the
    projection puts them out, no transpose: "bihd,bjhd->bhij", then "bhij,bjhd->bihd"), or "values-first" (weights·V
    with V the first operand: "bhjd,bhij->bhid")."""

    def __init__(self, d_in=16, num_heads=4, layout="heads"):
        super().__init__()
        self.num_heads, self.head_dim, self.layout = num_heads, d_in // num_heads, layout
        self.qkv = nn.Linear(d_in, 3 * d_in)
        self.out_proj = nn.Linear(d_in, d_in)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim).unbind(2)  # (b, n, h, hd) each
        future = torch.ones(n, n, dtype=torch.bool).triu(1)  # (n, n)
        if self.layout == "tokens":
            s = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(self.head_dim)  # (b, h, n, n)
            w = s.masked_fill(future, float("-inf")).softmax(dim=-1)  # (b, h, n, n)
            y = torch.einsum("bhij,bjhd->bihd", w, v)  # (b, n, h, hd)
            return self.out_proj(y.reshape(b, n, d))
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (b, h, n, hd) each
        s = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(self.head_dim)  # (b, h, n, n)
        w = s.masked_fill(future, float("-inf")).softmax(dim=-1)  # (b, h, n, n)
        if self.layout == "values-first":
            y = torch.einsum("bhjd,bhij->bhid", v, w)  # (b, h, n, hd)
        else:
            y = torch.einsum("bhij,bhjd->bhid", w, v)  # (b, h, n, hd)
        return self.out_proj(y.transpose(1, 2).reshape(b, n, d))


class BaddbmmAttention(nn.Module):
    """Bloom / GPT-NeoX / Falcon style: heads folded into the batch, (b·h, n, hd), and the scores made by
    ``torch.baddbmm(mask, q, kᵀ, alpha=1/√hd)`` — the scale in ``alpha``, the additive causal mask as its input.
    ``alpha``: the scale given (None: 1/√hd); ``declare_heads``: keep the head count as ``num_heads`` (else as
    ``h``, a name attnviz does not read)."""

    def __init__(self, d_in=16, num_heads=4, alpha=None, declare_heads=True):
        super().__init__()
        self.head_dim = d_in // num_heads
        if declare_heads:
            self.num_heads = num_heads
        else:
            self.h = num_heads
        self.alpha = 1 / math.sqrt(self.head_dim) if alpha is None else alpha
        self.qkv = nn.Linear(d_in, 3 * d_in)
        self.out_proj = nn.Linear(d_in, d_in)

    def forward(self, x):
        b, n, d = x.shape
        h = getattr(self, "num_heads", None) or self.h
        q, k, v = self.qkv(x).view(b, n, 3, h, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        q, k, v = (t.reshape(b * h, n, self.head_dim) for t in (q, k, v))  # (b·h, n, hd) each
        mask = torch.zeros(n, n).masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))  # (n, n)
        s = torch.baddbmm(mask.expand(b * h, n, n), q, k.transpose(1, 2), alpha=self.alpha)  # (b·h, n, n)
        y = torch.bmm(s.softmax(dim=-1), v).view(b, h, n, self.head_dim)  # (b, h, n, hd)
        return self.out_proj(y.transpose(1, 2).reshape(b, n, d))


class BloomAttention(nn.Module):
    """Bloom's attention as Hugging Face writes it (eager): heads folded into the batch, the scores made by
    ``alibi.baddbmm(batch1=q, batch2=k, beta=1.0, alpha=1/√hd)`` on (b·h, n, hd), viewed as (b, h, n, n) to mask
    (``finfo.min``) and take the softmax, viewed back as (b·h, n, n) for ``torch.bmm`` with V.  ``scaled``: pass
    ``alpha=1/√hd`` (False: 1.0, the scale forgotten)."""

    def __init__(self, hidden_size=16, n_head=4, scaled=True):
        super().__init__()
        self.num_heads, self.head_dim = n_head, hidden_size // n_head
        self.inv_norm_factor = 1.0 / math.sqrt(self.head_dim) if scaled else 1.0
        self.query_key_value = nn.Linear(hidden_size, 3 * hidden_size)
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden_states):
        b, n, d = hidden_states.shape
        fused = self.query_key_value(hidden_states).view(b, n, self.num_heads, 3, self.head_dim)  # (b, n, h, 3, hd)
        q, k, v = fused.unbind(3)  # (b, n, h, hd) each
        q = q.transpose(1, 2).reshape(b * self.num_heads, n, self.head_dim)  # (b·h, n, hd)
        k = k.permute(0, 2, 3, 1).reshape(b * self.num_heads, self.head_dim, n)  # (b·h, hd, n)
        v = v.transpose(1, 2).reshape(b * self.num_heads, n, self.head_dim)  # (b·h, n, hd)
        alibi = torch.zeros(b * self.num_heads, 1, n)  # (b·h, 1, n)
        scores = alibi.baddbmm(batch1=q, batch2=k, beta=1.0, alpha=self.inv_norm_factor)  # (b·h, n, n)
        scores = scores.view(b, self.num_heads, n, n)  # (b, h, n, n)
        causal = torch.ones(n, n, dtype=torch.bool).triu(1)  # (n, n)
        scores = torch.masked_fill(scores, causal, torch.finfo(scores.dtype).min)  # (b, h, n, n)
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(hidden_states.dtype)  # (b, h, n, n)
        probs = probs.view(b * self.num_heads, n, n)  # (b·h, n, n)
        context = torch.bmm(probs, v).view(b, self.num_heads, n, self.head_dim)  # (b, h, n, hd)
        return self.dense(context.permute(0, 2, 1, 3).reshape(b, n, d))  # (b, n, d)


class HeadMaskAfterSoftmax(nn.Module):
    """nanoGPT's manual attention with Hugging Face GPT-2's head mask: ``att = att * head_mask`` after the softmax, a
    (1, h, 1, 1) multiplier of 1s and 0s (head pruning; ``pruned``: the heads zeroed).  ``query_mask``: multiply by a
    (b, 1, n, 1) of 1s instead (padded queries zeroed after the softmax; here no query is padded)."""

    def __init__(self, n_embd=16, n_head=4, block_size=16, pruned=(1,), query_mask=False):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd, self.pruned, self.query_mask = n_head, n_embd, pruned, query_mask
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, nh, T, T)
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))  # (B, nh, T, T)
        att = F.softmax(att, dim=-1)  # (B, nh, T, T)
        if self.query_mask:
            att = att * torch.ones(B, 1, T, 1)  # (B, nh, T, T): no query padded
        else:
            head_mask = torch.ones(1, self.n_head, 1, 1)  # (1, nh, 1, 1)
            head_mask[:, list(self.pruned)] = 0
            att = att * head_mask  # (B, nh, T, T)
        y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MaskAfterSoftmax(nn.Module):
    """nanoGPT's attention with the bug of masking after the softmax: ``att = F.softmax(att, -1)`` then
    ``att.masked_fill(bias == 0, 0.0)`` — the weights of each row no longer sum to 1, and every weight is divided by a
    sum over the future keys too.  ``renormalise``: divide each row by its sum afterwards (a correct causal
    attention, if a roundabout one).  ``dropout``: nanoGPT's ``attn_dropout`` (an ``nn.Dropout``) after the mask."""

    def __init__(self, n_embd=16, n_head=4, block_size=16, renormalise=False, dropout=None):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd, self.renormalise = n_head, n_embd, renormalise
        self.attn_dropout = None if dropout is None else nn.Dropout(dropout)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, nh, T, T)
        att = F.softmax(att, dim=-1)  # (B, nh, T, T)
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, 0.0)  # (B, nh, T, T)
        if self.renormalise:
            att = att / att.sum(dim=-1, keepdim=True)  # (B, nh, T, T)
        if self.attn_dropout is not None:
            att = self.attn_dropout(att)  # (B, nh, T, T)
        y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class TrilAfterSoftmax(nn.Module):
    """Attention that zeroes the future after the softmax with no mask buffer: ``att = att.tril()`` (``how="tril"``)
    or ``att * torch.tril(torch.ones(T, T))`` (``how="mul"``) — the rows no longer sum to 1, and every weight is
    divided by a sum over the future keys too."""

    def __init__(self, n_embd=16, n_head=4, how="tril"):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd, self.how = n_head, n_embd, how

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)  # (B, nh, T, hs)
        att = F.softmax((q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1)), dim=-1)  # (B, nh, T, T)
        att = att.tril() if self.how == "tril" else att * torch.tril(torch.ones(T, T))  # (B, nh, T, T)
        y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class WiderEachCall(nn.Module):
    """Correct causal attention whose output gains a feature at every call after the first (a running memory
    concatenated to it): the rules that compare two forwards' outputs cannot subtract them."""

    def __init__(self, d_in=16):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_in, bias=False)
        self.W_key = nn.Linear(d_in, d_in, bias=False)
        self.W_value = nn.Linear(d_in, d_in, bias=False)
        self.calls = 0

    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, n, d) each
        s = (q @ k.transpose(1, 2)) / k.shape[-1] ** 0.5  # (b, n, n)
        s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1), -torch.inf)  # (b, n, n)
        context = torch.softmax(s, dim=-1) @ v  # (b, n, d)
        memory = torch.zeros(*x.shape[:2], self.calls)  # (b, n, calls)
        self.calls += 1
        return torch.cat([context, memory], dim=-1)  # (b, n, d + calls)


class NaiveSoftmax(nn.Module):
    """Causal multi-head attention with the book's ``softmax_naive`` (3.3.1) written in place of ``torch.softmax``:
    ``torch.exp(s) / torch.exp(s).sum(dim=-1, keepdim=True)``; ``shared_exp``: one ``e = torch.exp(s)`` used twice."""

    def __init__(self, d_in=16, d_out=16, num_heads=4, shared_exp=False):
        super().__init__()
        self.num_heads, self.head_dim, self.shared_exp = num_heads, d_out // num_heads, shared_exp
        self.qkv = nn.Linear(d_in, 3 * d_out)
        self.proj = nn.Linear(d_out, d_out)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, n, hd)
        s = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))  # (b, h, n, n)
        if self.shared_exp:
            e = torch.exp(s)  # (b, h, n, n)
            w = e / e.sum(dim=-1, keepdim=True)  # (b, h, n, n)
        else:
            w = torch.exp(s) / torch.exp(s).sum(dim=-1, keepdim=True)  # (b, h, n, n)
        return self.proj((w @ v).transpose(1, 2).reshape(b, n, -1))  # (b, h, n, hd) -> (b, n, d_out)


class StableNaiveSoftmax(NaiveSoftmax):
    """A hand-written softmax that subtracts the row maximum and masks after the exponential (correct, but not the
    one exp/sum pattern attnviz reads as a softmax)."""

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, n, hd)
        s = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
        e = torch.exp(s - s.amax(dim=-1, keepdim=True)) * torch.ones(n, n).tril()  # (b, h, n, n)
        w = e / e.sum(dim=-1, keepdim=True)  # (b, h, n, n)
        return self.proj((w @ v).transpose(1, 2).reshape(b, n, -1))  # (b, h, n, hd) -> (b, n, d_out)


class FoldedHeads(nn.Module):
    """Heads folded into the batch after a transpose, as OPT's, BART's and Whisper's eager attention and xformers'
    reference attention write it: the queries scaled by head_dim ** -0.5 as they leave their projection, then (b, n, d)
    viewed (b, n, h, hd), transposed and reshaped (b·h, n, hd); ``torch.bmm`` for Q·Kᵀ and for ·V; the context viewed
    back (b, h, n, hd), permuted and viewed (b, n, d) for the output projection (``merge="reshape_as"``: transposed
    and ``reshape_as(x)``).  ``bug="heads-mixed"``: the context reshaped to (b, n, d) without putting the heads back
    after the tokens, which mixes heads with tokens."""

    def __init__(self, embed_dim=16, num_heads=4, merge="view", bug=None):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.merge, self.bug = merge, bug

    def forward(self, x):
        b, n, d = x.shape
        h, hd = self.num_heads, self.head_dim
        queries = self.q_proj(x) * self.scaling  # (b, n, d)
        queries, keys, values = (t.view(b, n, h, hd).transpose(1, 2).reshape(b * h, n, hd)
                                 for t in (queries, self.k_proj(x), self.v_proj(x)))  # (b·h, n, hd) each
        attn_weights = torch.bmm(queries, keys.transpose(1, 2))  # (b·h, n, hd) @ (b·h, hd, n) -> (b·h, n, n)
        attn_weights = attn_weights.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        attn_weights = F.softmax(attn_weights, dim=-1)  # (b·h, n, n)
        attn_output = torch.bmm(attn_weights, values)  # (b·h, n, n) @ (b·h, n, hd) -> (b·h, n, hd)
        if self.bug == "heads-mixed":
            attn_output = attn_output.reshape_as(x) if self.merge == "reshape_as" else attn_output.view(b, n, d)
        elif self.merge == "reshape_as":
            attn_output = attn_output.view(b, h, n, hd).transpose(1, 2).reshape_as(x)  # (b, n, d)
        else:
            attn_output = attn_output.view(b, h, n, hd).permute(0, 2, 1, 3).contiguous().view(b, n, d)  # (b, n, d)
        return self.out_proj(attn_output)  # (b, n, d)


class RotaryFromCaller(nn.Module):
    """A layer written as Hugging Face's are: its model computes the rotary tables and hands them over,
    ``forward(x, position_embeddings=None)`` with ``position_embeddings = (cos, sin)``; called alone, it unpacks
    None."""

    def __init__(self, d_in=16, num_heads=4):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_in // num_heads
        self.qkv = nn.Linear(d_in, 3 * d_in)

    def forward(self, x, position_embeddings=None):
        b, n, d = x.shape
        cos, sin = position_embeddings  # (n, hd) each, from the model
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # 3 × (b, h, n, hd)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)  # (b, h, n, hd)
        s = (q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)).masked_fill(
            torch.ones(n, n, dtype=torch.bool).triu(1), -torch.inf)  # (b, h, n, n)
        return (F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, n, d)  # (b, n, d)


class RelativeBias(nn.Module):
    """Causal attention with a learned bias per head and distance added to the scores (T5's and Swin's relative
    position bias, unbucketed): a correct attention, but not softmax(mask(QKᵀ/√d))·V."""

    def __init__(self, d_in=16, num_heads=4, context_length=16):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_in // num_heads
        self.qkv = nn.Linear(d_in, 3 * d_in)
        self.proj = nn.Linear(d_in, d_in)
        self.rel_bias = nn.Embedding(context_length, num_heads)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # 3 × (b, h, n, hd)
        distance = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).clamp(min=0)  # (n, n): how far back
        bias = self.rel_bias(distance).permute(2, 0, 1)  # (h, n, n)
        s = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + bias  # (b, h, n, n)
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -torch.inf)  # (b, h, n, n)
        return self.proj((F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, n, d))  # (b, n, d)


# ----------------------------------------------------------------- what two testers wrote (the checker got them wrong)

class FusedHeads(nn.Module):
    """One fused qkv projection split into heads, a causal 0/1 buffer (1 = may see), and the merge back: the base
    of the testers' variants below, which differ only in how the forward masks and scales."""

    def __init__(self, d_in=64, num_heads=4, context_length=64, dropout=0.0, variant="masked_fill"):
        super().__init__()
        self.h, self.hd = num_heads, d_in // num_heads
        self.variant = variant
        self.qkv = nn.Linear(d_in, 3 * d_in)
        self.proj = nn.Linear(d_in, d_in)
        self.drop = nn.Dropout(dropout)
        self.register_buffer("mask", torch.tril(torch.ones(context_length, context_length)))  # (ctx, ctx)
        self.register_buffer("masked_bias", torch.tensor(-1e4))  # transformers 4.x GPT2Attention's

    def split(self, x):
        b, n, d = x.shape
        return self.qkv(x).view(b, n, 3, self.h, self.hd).permute(2, 0, 3, 1, 4)  # 3 × (b, h, n, hd)

    def merge(self, y):
        b, h, n, hd = y.shape
        return self.proj(y.transpose(1, 2).reshape(b, n, h * hd))  # (b, h, n, hd) -> (b, n, d)

    def forward(self, x):
        q, k, v = self.split(x)  # (b, h, n, hd) each
        b, n, _ = x.shape
        keep = self.mask[:n, :n]  # (n, n) 1 = may see
        if self.variant == "bert-1e4":  # BERT's extended attention mask, (1 - mask) * -10000.0, added to the scores
            extended = torch.ones(b, n)[:, None, None, :] * keep[None, None]  # (b, 1, n, n)
            s = q @ k.transpose(-1, -2) / math.sqrt(self.hd) + (1.0 - extended) * -10000.0  # (b, h, n, n)
        elif self.variant == "where-masked-bias":  # GPT-2's torch.where(causal_mask, w, masked_bias)
            s = torch.matmul(q, k.transpose(-1, -2)) / (v.size(-1) ** 0.5)  # (b, h, n, n)
            s = torch.where(keep.bool(), s, self.masked_bias.to(s.dtype))  # (b, h, n, n)
        elif self.variant == "sdpa-float-1e4":  # SDPA's float attn_mask, added to the scores
            return self.merge(F.scaled_dot_product_attention(q, k, v, attn_mask=(1 - keep) * -10000.0))
        elif self.variant == "scale-q-and-k":  # Whisper's qkv_attention: q and k each scaled by hd ** -0.25
            q, k = q * self.hd ** -0.25, k * self.hd ** -0.25  # (b, h, n, hd) each
            s = (q @ k.transpose(-1, -2)).masked_fill(keep == 0, float("-inf"))  # (b, h, n, n)
        else:
            s = (q @ k.transpose(-1, -2) / math.sqrt(self.hd)).masked_fill(keep == 0, float("-inf"))  # (b, h, n, n)
        return self.merge(self.drop(F.softmax(s, dim=-1)) @ v)  # (b, n, d)


class ViewNoTranspose(nn.Module):
    """Heads split with ``view`` but never transposed: q, k and v are (b, n, h, hd), so the scores are (b, n, h, h) —
    attention over the heads of each token, the classic bug."""

    def __init__(self, d_in=64, num_heads=4, context_length=32):
        super().__init__()
        self.h = num_heads
        self.W = nn.Linear(d_in, 3 * d_in)
        self.out = nn.Linear(d_in, d_in)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), 1).bool())

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.W(x).chunk(3, dim=-1)  # (b, n, d) each
        q = q.view(b, n, self.h, d // self.h)  # (b, n, h, hd): missing .transpose(1, 2)
        k = k.view(b, n, self.h, d // self.h)  # (b, n, h, hd)
        v = v.view(b, n, self.h, d // self.h)  # (b, n, h, hd)
        s = q @ k.transpose(-2, -1) / math.sqrt(d // self.h)  # (b, n, h, h)
        s = s.masked_fill(self.mask[: self.h, : self.h], -torch.inf)  # (b, n, h, h)
        w = torch.softmax(s, dim=-1)  # (b, n, h, h)
        return self.out((w @ v).reshape(b, n, d))  # (b, n, d)


class NanochatGQA(nn.Module):
    """Grouped-query attention with a KV cache, its sizes kept under nanochat's names (``n_head``, ``n_kv_head``,
    ``head_dim``); ``caches_repeated``: K and V repeated to every query head before they are cached."""

    def __init__(self, d_in, num_heads, num_kv_groups, caches_repeated=False):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = num_heads, num_kv_groups, d_in // num_heads
        self.c_q = nn.Linear(d_in, d_in, bias=False)
        self.c_k = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False)
        self.c_v = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False)
        self.c_proj = nn.Linear(d_in, d_in, bias=False)
        self.caches_repeated = caches_repeated
        self.k_cache = self.v_cache = None

    def reset_cache(self):
        self.k_cache = self.v_cache = None

    def forward(self, x, use_cache=False):
        b, n, d = x.shape
        q = self.c_q(x).view(b, n, self.n_head, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        k = self.c_k(x).view(b, n, self.n_kv_head, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        v = self.c_v(x).view(b, n, self.n_kv_head, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        repeat = self.n_head // self.n_kv_head
        if self.caches_repeated:
            k, v = k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1)  # (b, h, n, hd)
        if use_cache:
            if self.k_cache is not None:
                k = torch.cat([self.k_cache, k], 2)  # (b, g or h, cached + n, hd)
                v = torch.cat([self.v_cache, v], 2)  # (b, g or h, cached + n, hd)
            self.k_cache, self.v_cache = k, v
        if not self.caches_repeated:
            k, v = k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1)  # (b, h, nk, hd)
        nk = k.shape[2]
        s = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)  # (b, h, n, nk)
        keep = torch.ones(n, nk, dtype=torch.bool).tril(diagonal=nk - n)  # (n, nk)
        w = torch.softmax(s.masked_fill(~keep, float("-inf")), -1)  # (b, h, n, nk)
        return self.c_proj((w @ v).transpose(1, 2).reshape(b, n, d))  # (b, n, d)


class DeepSeekNamedMLA(nn.Module):
    """Latent attention with a KV cache, its sizes under DeepSeek-V3's names (``dim``, ``n_heads``,
    ``kv_lora_rank``, ``v_head_dim``; no d_out or head_dim); ``cache_full``: the up-projected K and V cached
    instead of the latent."""

    def __init__(self, d_in, num_heads, latent_dim, cache_full=False):
        super().__init__()
        self.dim, self.n_heads, self.kv_lora_rank = d_in, num_heads, latent_dim
        self.v_head_dim = d_in // num_heads
        self.wq = nn.Linear(d_in, d_in, bias=False)
        self.wkv_a = nn.Linear(d_in, latent_dim, bias=False)
        self.wk_b = nn.Linear(latent_dim, d_in, bias=False)
        self.wv_b = nn.Linear(latent_dim, d_in, bias=False)
        self.wo = nn.Linear(d_in, d_in, bias=False)
        self.cache_full = cache_full
        self.kv_cache = None

    def reset_cache(self):
        self.kv_cache = None

    def forward(self, x, use_cache=False):
        b, n, d = x.shape
        h, hd = self.n_heads, self.v_head_dim
        c = self.wkv_a(x)  # (b, n, latent)
        if self.cache_full:
            kv = torch.cat([self.wk_b(c), self.wv_b(c)], -1)  # (b, n, 2d)
            if use_cache:
                kv = kv if self.kv_cache is None else torch.cat([self.kv_cache, kv], 1)  # (b, nk, 2d)
                self.kv_cache = kv
            k, v = kv.split(d, -1)  # (b, nk, d) each
        else:
            if use_cache:
                c = c if self.kv_cache is None else torch.cat([self.kv_cache, c], 1)  # (b, nk, latent)
                self.kv_cache = c
            k, v = self.wk_b(c), self.wv_b(c)  # (b, nk, d) each
        nk = k.shape[1]
        q = self.wq(x).view(b, n, h, hd).transpose(1, 2)  # (b, h, n, hd)
        k = k.view(b, nk, h, hd).transpose(1, 2)  # (b, h, nk, hd)
        v = v.view(b, nk, h, hd).transpose(1, 2)  # (b, h, nk, hd)
        s = q @ k.transpose(2, 3) / math.sqrt(hd)  # (b, h, n, nk)
        keep = torch.ones(n, nk, dtype=torch.bool).tril(nk - n)  # (n, nk)
        w = torch.softmax(s.masked_fill(~keep, float("-inf")), -1)  # (b, h, n, nk)
        return self.wo((w @ v).transpose(1, 2).reshape(b, n, d))  # (b, n, d)


class SingleHeadCausal(nn.Module):
    """The book's SelfAttention_v2 with a causal mask and no heads: scores (b, n, n).  ``bug``: "softmax-dim-0" (the
    softmax over the batch), "mask-not-sliced" (the (context, context) mask used whole, not [:n, :n])."""

    def __init__(self, d_in=64, d_out=64, context_length=64, bug=None):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))
        self.bug = bug

    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, n, d_out) each
        s = q @ k.transpose(1, 2)  # (b, n, n)
        n = x.shape[1]
        mask = self.mask.bool() if self.bug == "mask-not-sliced" else self.mask.bool()[:n, :n]  # (n, n) or (ctx, ctx)
        s = s.masked_fill(mask, -torch.inf)  # (b, n, n)
        w = torch.softmax(s / k.shape[-1] ** 0.5, dim=0 if self.bug == "softmax-dim-0" else -1)  # (b, n, n)
        return w @ v  # (b, n, d_out)


class CachesByDefault(NanochatGQA):
    """NanochatGQA whose forward caches unless told not to, as inference code often does: ``forward(x,
    use_cache=True)``; ``forward(x, use_cache=False)`` is the uncached forward."""

    def forward(self, x, use_cache=True):
        return super().forward(x, use_cache=use_cache)  # (b, n, d)


class HFStyleConfigAttention(nn.Module):
    """A Llama port that reads a Hugging Face-style config, as transformers' ``LlamaAttention(config)`` does:
    ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``, ``head_dim`` (if it has one),
    ``max_position_embeddings``, ``attention_dropout``."""

    def __init__(self, config):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", self.hidden_size // self.num_heads)
        self.max_position_embeddings = config.max_position_embeddings
        self.attention_dropout = config.attention_dropout
        self.q_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=False)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        k = self.k_proj(x).view(b, n, self.num_key_value_heads, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        v = self.v_proj(x).view(b, n, self.num_key_value_heads, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        dropout = self.attention_dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True, enable_gqa=True)  # (b, h, n, hd)
        return self.o_proj(y.transpose(1, 2).reshape(b, n, -1))  # (b, n, hidden_size)


class HFStyleLayerAttention(nn.Module):
    """A GPT-2-like layer written as Hugging Face's are: built ``(config, layer_idx=None)``, as its model builds each
    layer, with a manual softmax and ``nn.Dropout(config.attention_dropout)`` on the weights, and a forward that takes
    what a transformers model passes (``attention_mask``, ``past_key_value``, ``use_cache`` …) and returns
    ``(output, weights or None, present)``.  ``config.attn_bug = "dropout-before-mask"``: the dropout acts on the
    scaled scores, before the mask and the softmax."""

    def __init__(self, config, layer_idx=None):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.hidden_size // self.num_heads
        self.layer_idx = layer_idx
        self.bug = getattr(config, "attn_bug", None)
        self.q_proj = nn.Linear(self.hidden_size, self.hidden_size)
        self.k_proj = nn.Linear(self.hidden_size, self.hidden_size)
        self.v_proj = nn.Linear(self.hidden_size, self.hidden_size)
        self.o_proj = nn.Linear(self.hidden_size, self.hidden_size)
        self.attn_dropout = nn.Dropout(getattr(config, "attention_dropout", 0.0))

    def _shape(self, t, n, b):
        return t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2).contiguous()  # (b, h, n, hd)

    def forward(self, hidden_states, attention_mask=None, past_key_value=None, output_attentions=False,
                use_cache=False):
        b, n, _ = hidden_states.size()
        q = self._shape(self.q_proj(hidden_states), n, b)  # (b, h, n, hd)
        k = self._shape(self.k_proj(hidden_states), n, b)  # (b, h, n, hd)
        v = self._shape(self.v_proj(hidden_states), n, b)  # (b, h, n, hd)
        if past_key_value is not None:
            k = torch.cat([past_key_value[0], k], dim=2)  # (b, h, m, hd)
            v = torch.cat([past_key_value[1], v], dim=2)  # (b, h, m, hd)
        present = (k, v) if use_cache else None
        m = k.shape[2]
        w = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)  # (b, h, n, m)
        if self.bug == "dropout-before-mask":
            w = self.attn_dropout(w)
        causal = torch.ones(n, m, dtype=torch.bool, device=hidden_states.device).tril(m - n)  # (n, m)
        w = w.masked_fill(~causal, torch.finfo(w.dtype).min)
        if attention_mask is not None:
            w = w + attention_mask
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)  # (b, h, n, m)
        if self.bug != "dropout-before-mask":
            w = self.attn_dropout(w)
        y = (w @ v).transpose(1, 2).reshape(b, n, self.hidden_size)  # (b, n, hidden_size)
        return self.o_proj(y), (w if output_attentions else None), present


class HFStyleRotaryAttention(HFStyleConfigAttention):
    """HFStyleConfigAttention with q and k rotated at the config's ``rope_theta``, a name attnviz's config object
    does not have."""

    def __init__(self, config):
        super().__init__(config)
        cos, sin = rope_angles(self.head_dim, self.max_position_embeddings, config.rope_theta)
        self.register_buffer("cos", cos)  # (context, hd)
        self.register_buffer("sin", sin)  # (context, hd)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        k = self.k_proj(x).view(b, n, self.num_key_value_heads, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        v = self.v_proj(x).view(b, n, self.num_key_value_heads, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        q, k = rotate(q, self.cos, self.sin), rotate(k, self.cos, self.sin)  # (b, h, n, hd), (b, g, n, hd)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (b, h, n, hd)
        return self.o_proj(y.transpose(1, 2).reshape(b, n, -1))  # (b, n, hidden_size)


# ---------------------------------------------------------------- the scale applied before the attention call

class ScaledBeforeTheCall(nn.Module):
    """q or k multiplied by the scale before the scores are taken (lucidrains' and OPT's habit), before an SDPA call
    or a manual ``q @ kᵀ``, and before rotary or after it.  ``how``:

    * "sdpa-q-divided" (a bug: q / √hd, and SDPA divides by √hd again), "sdpa-k-scaled" (a bug: k × hd^-0.5, and SDPA
      again), "sdpa-scale-one" (q × hd^-0.5, SDPA told scale=1.0), "manual-twice" (a bug: q / √hd, the scores / √hd);
    * "rope-manual" (q × hd^-0.5, then q and k rotated, the scores not scaled again), "rope-sdpa" (the same into SDPA
      with scale=1.0), "rope-sdpa-twice" (a bug: the same into SDPA's own scale);
    * "normed" (a bug: q × hd^-0.5 and then an RMSNorm of q, which undoes the scale; the scores not scaled again)."""

    def __init__(self, d_model=64, n_heads=4, context_length=32, how="sdpa-q-divided"):
        super().__init__()
        self.n_heads, self.head_dim, self.how = n_heads, d_model // n_heads, how
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        cos, sin = rope_angles(self.head_dim, context_length)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        hd, how = self.head_dim, self.how
        future = torch.ones(n, n, dtype=torch.bool).triu(1)  # (n, n)
        if how == "sdpa-q-divided":
            y = F.scaled_dot_product_attention(q / math.sqrt(hd), k, v, is_causal=True)  # (b, h, n, hd)
        elif how == "sdpa-k-scaled":
            y = F.scaled_dot_product_attention(q, k * hd ** -0.5, v, is_causal=True)  # (b, h, n, hd)
        elif how == "sdpa-scale-one":
            y = F.scaled_dot_product_attention(q * hd ** -0.5, k, v, is_causal=True, scale=1.0)  # (b, h, n, hd)
        elif how == "manual-twice":
            s = (q / math.sqrt(hd)) @ k.transpose(-1, -2) / math.sqrt(hd)  # (b, h, n, n)
            y = s.masked_fill(future, float("-inf")).softmax(-1) @ v  # (b, h, n, hd)
        elif how in ("rope-manual", "rope-sdpa", "rope-sdpa-twice"):
            q = rotate(q * hd ** -0.5, self.cos, self.sin)  # (b, h, n, hd)
            k = rotate(k, self.cos, self.sin)  # (b, h, n, hd)
            if how == "rope-manual":
                y = (q @ k.transpose(-1, -2)).masked_fill(future, float("-inf")).softmax(-1) @ v  # (b, h, n, hd)
            else:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                   scale=1.0 if how == "rope-sdpa" else None)  # (b, h, n, hd)
        elif how == "normed":
            q = F.rms_norm(q * hd ** -0.5, (hd,))  # (b, h, n, hd): the norm undoes the scale
            y = (q @ k.transpose(-1, -2)).masked_fill(future, float("-inf")).softmax(-1) @ v  # (b, h, n, hd)
        return self.out_proj(y.transpose(1, 2).reshape(b, n, d))  # (b, n, d)


class AbsorbedMLA(nn.Module):
    """Multi-head latent attention in DeepSeek-V3's absorbed form (its model.py, ``attn_impl="absorb"``): W_UK folded
    into the queries, the scores taken against the latent ``c_kv`` itself (q·k = q·(W_UK c) = (W_UKᵀ q)·c), W_UV applied
    after the weights; the same outputs as the naive form.  The scale is 1/√qk_head_dim, the per-head width, not the
    latent's.  ``rope``: DeepSeek's decoupled rotary part, its scores added; ``layout``: "bhst" scores (batch, heads,
    queries, keys), or DeepSeek's own "bsht" (heads between the queries and the keys); ``bug="latent-scale"``: the
    scale taken from the latent's width (1/√kv_lora_rank); ``bug="unrotated-keys"``: the rotary part's keys ``k_pe``
    left as they are (only ``q_pe`` turned); ``declares_head_dim=False``: the per-head width kept under a name attnviz
    does not know."""

    def __init__(self, dim=64, n_heads=4, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                 rope=False, layout="bhst", bug=None, declares_head_dim=True):
        super().__init__()
        self.n_heads, self.kv_lora_rank, self.layout, self.bug = n_heads, kv_lora_rank, layout, bug
        self.nope, self.rope, self.v_head_dim = qk_nope_head_dim, qk_rope_head_dim if rope else 0, v_head_dim
        width = self.nope + self.rope
        if declares_head_dim:
            self.qk_head_dim = width
        else:
            self.qk_width = width
        self.wq = nn.Linear(dim, n_heads * width, bias=False)
        self.wkv_a = nn.Linear(dim, kv_lora_rank + self.rope, bias=False)
        self.kv_norm = nn.RMSNorm(kv_lora_rank)
        self.wkv_b = nn.Linear(kv_lora_rank, n_heads * (self.nope + v_head_dim), bias=False)
        self.wo = nn.Linear(n_heads * v_head_dim, dim, bias=False)
        self.softmax_scale = (kv_lora_rank if bug == "latent-scale" else width) ** -0.5

    def rotated(self, x):
        """x (b, s, h, r) turned by its position's angles, halves rotated together."""
        cos, sin = rope_angles(x.shape[-1], x.shape[1])  # (s, r) each
        return rotate(x.transpose(1, 2), cos, sin).transpose(1, 2)  # (b, s, h, r)

    def forward(self, x):
        b, s, _ = x.shape
        scores_eq = "bshc,btc->bhst" if self.layout == "bhst" else "bshc,btc->bsht"
        q = self.wq(x).view(b, s, self.n_heads, self.nope + self.rope)  # (b, s, h, qk)
        q_nope, q_pe = torch.split(q, [self.nope, self.rope], dim=-1)  # (b, s, h, nope), (b, s, h, rope)
        kv, k_pe = torch.split(self.wkv_a(x), [self.kv_lora_rank, self.rope], dim=-1)  # (b, s, c), (b, s, rope)
        wkv_b = self.wkv_b.weight.view(self.n_heads, -1, self.kv_lora_rank)  # (h, nope + v, c)
        q_nope = torch.einsum("bshd,hdc->bshc", q_nope, wkv_b[:, :self.nope])  # (b, s, h, c): W_UK absorbed
        kv = self.kv_norm(kv)  # (b, s, c)
        scores = torch.einsum(scores_eq, q_nope, kv)  # (b, h, s, t) or (b, s, h, t)
        if self.rope:
            q_pe = self.rotated(q_pe)  # (b, s, h, r)
            if self.bug != "unrotated-keys":
                k_pe = self.rotated(k_pe.unsqueeze(2)).squeeze(2)  # (b, t, r)
            scores = scores + torch.einsum(scores_eq.replace("c", "r"), q_pe, k_pe)  # (b, h, s, t) or (b, s, h, t)
        scores = scores * self.softmax_scale
        mask = torch.full((s, s), float("-inf")).triu_(1)  # (s, t)
        scores = scores + (mask if self.layout == "bhst" else mask.unsqueeze(1))  # (b, h, s, t) or (b, s, h, t)
        weights = scores.softmax(dim=-1, dtype=torch.float32).type_as(x)
        context = torch.einsum("bhst,btc->bshc" if self.layout == "bhst" else "bsht,btc->bshc", weights, kv)
        context = torch.einsum("bshc,hdc->bshd", context, wkv_b[:, -self.v_head_dim:])  # (b, s, h, v)
        return self.wo(context.flatten(2))  # (b, s, dim)


class ContentPlusPosition(nn.Module):
    """Transformer-XL-style scores, a content term plus a position term (Dai et al. 2019, its terms (a) + (c) and
    (b) + (d)): (q_i + u)·k_j + (q_i + v)·r_j, ``r`` a learned table of one vector per key position shared by the
    heads, u and v learned per head; causal, scaled by 1/√head_dim.  A correct attention: softmax(mask(QKᵀ/√d))·V with
    Q = [q + u | q + v] and K = [k | r]."""

    def __init__(self, d_in=32, num_heads=4, context_length=16):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_in // num_heads
        self.W_query = nn.Linear(d_in, d_in, bias=False)
        self.W_key = nn.Linear(d_in, d_in, bias=False)
        self.W_value = nn.Linear(d_in, d_in, bias=False)
        self.out_proj = nn.Linear(d_in, d_in)
        self.pos_table = nn.Parameter(torch.randn(context_length, self.head_dim))  # (n, hd): r_j
        self.content_bias = nn.Parameter(torch.randn(num_heads, 1, self.head_dim))  # (h, 1, hd): u
        self.position_bias = nn.Parameter(torch.randn(num_heads, 1, self.head_dim))  # (h, 1, hd): v
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())

    def forward(self, x):
        b, n, d_in = x.shape
        queries = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        keys = self.W_key(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        values = self.W_value(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        content = (queries + self.content_bias) @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
        position = (queries + self.position_bias) @ self.pos_table[:n].T  # (b, h, n, hd) @ (hd, n) -> (b, h, n, n)
        attn_scores = content + position  # (b, h, n, n)
        attn_scores = attn_scores.masked_fill(self.mask[:n, :n], -torch.inf)  # (b, h, n, n)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, n)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, d_in)  # (b, n, d_in)
        return self.out_proj(context_vec)  # (b, n, d_in)


# ------------------------------------------------------------ what a QA engineer wrote (the checker misnamed the cause)

class RollingWindowCache(nn.Module):
    """Mistral-style sliding-window attention with a rolling KV cache: a decode step attends, unmasked, over the cache
    and its own key, so the cache keeps the last W − 1 keys.  ``bug``: ``"keeps-window"`` keeps the last W, the
    classic off-by-one (the step then sees W + 1 keys); ``"keeps-window-minus-two"`` keeps W − 2 (it sees W − 1)."""

    def __init__(self, d_in=64, num_heads=4, sliding_window=3, bug=None):
        super().__init__()
        self.h, self.hd, self.sliding_window = num_heads, d_in // num_heads, sliding_window
        self.bug = bug
        self.qkv = nn.Linear(d_in, 3 * d_in, bias=False)
        self.proj = nn.Linear(d_in, d_in, bias=False)
        self.reset_cache()

    def reset_cache(self):
        self.cache_k = self.cache_v = None

    def forward(self, x, use_cache=False):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, self.hd).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        window = self.sliding_window
        if use_cache and self.cache_k is not None:
            k = torch.cat([self.cache_k, k], dim=2)  # (b, h, cached + n, hd)
            v = torch.cat([self.cache_v, v], dim=2)  # (b, h, cached + n, hd)
        if use_cache:
            keep = {"keeps-window": window, "keeps-window-minus-two": window - 2}.get(self.bug, window - 1)
            self.cache_k, self.cache_v = k[:, :, -keep:], v[:, :, -keep:]  # (b, h, ≤ keep, hd) each
        s = q @ k.transpose(-1, -2) / math.sqrt(self.hd)  # (b, h, n, nk)
        if n > 1:  # a prefill: causal and windowed; one new token sees the whole cache
            nk = k.shape[2]
            q_pos, k_pos = torch.arange(nk - n, nk)[:, None], torch.arange(nk)[None, :]  # (n, 1), (1, nk)
            s = s.masked_fill((k_pos > q_pos) | (q_pos - k_pos >= window), float("-inf"))  # (b, h, n, nk)
        return self.proj((s.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))  # (b, n, d)


class MetaStyleCache(nn.Module):
    """Meta's Llama reference attention, simplified: K/V written into buffers allocated once at
    (max_batch_size, max_seq_len, n_kv_heads, head_dim), ``start_pos`` the next free slot, rotary at ``start_pos``,
    and the keys read back as ``cache_k[:b, :start_pos + n]``.  ``bug="advances-twice"``: ``start_pos`` is advanced
    after the write and again at the end of the forward."""

    def __init__(self, dim=64, n_heads=4, n_kv_heads=2, max_seq_len=32, max_batch_size=2, bug=None):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        cache_shape = (max_batch_size, max_seq_len, n_kv_heads, self.head_dim)
        self.register_buffer("cache_k", torch.zeros(cache_shape), persistent=False)
        self.register_buffer("cache_v", torch.zeros(cache_shape), persistent=False)
        cos, sin = rope_angles(self.head_dim, 2 * max_seq_len)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.start_pos = 0
        self.bug = bug

    def reset_cache(self):
        self.cache_k.zero_()
        self.cache_v.zero_()
        self.start_pos = 0

    def forward(self, x, use_cache=False):
        b, n, dim = x.shape
        start_pos = self.start_pos if use_cache else 0
        xq = self.wq(x).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        xk = self.wk(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        xv = self.wv(x).view(b, n, self.n_kv_heads, self.head_dim)  # (b, n, g, hd)
        xq, xk = rotate(xq, self.cos, self.sin, start_pos), rotate(xk, self.cos, self.sin, start_pos)
        xk = xk.transpose(1, 2)  # (b, n, g, hd)
        if use_cache:
            self.cache_k[:b, start_pos:start_pos + n] = xk
            self.cache_v[:b, start_pos:start_pos + n] = xv
            keys, values = self.cache_k[:b, :start_pos + n], self.cache_v[:b, :start_pos + n]  # (b, nk, g, hd)
            self.start_pos += n
        else:
            keys, values = xk, xv  # (b, n, g, hd)
        repeat = self.n_heads // self.n_kv_heads
        keys = keys.transpose(1, 2).repeat_interleave(repeat, dim=1)  # (b, h, nk, hd)
        values = values.transpose(1, 2).repeat_interleave(repeat, dim=1)  # (b, h, nk, hd)
        scores = xq @ keys.transpose(2, 3) / math.sqrt(self.head_dim)  # (b, h, n, nk)
        if n > 1:
            mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)  # (n, n)
            scores = scores + torch.hstack([torch.zeros(n, keys.shape[2] - n), mask])  # (b, h, n, nk)
        out = F.softmax(scores.float(), dim=-1).type_as(xq) @ values  # (b, h, n, hd)
        if use_cache and self.bug == "advances-twice":
            self.start_pos += n
        return self.wo(out.transpose(1, 2).reshape(b, n, dim))  # (b, n, dim)


class LlamaCache(nn.Module):
    """Grouped-query attention with rotary embeddings and a KV cache the module holds (``k_cache``, ``v_cache``, the
    keys rotated), rotated at ``pos``; the mask comes from the cache's length.  The forward starts a new cache when
    ``k_cache`` is None.  ``bug``: ``"reset-clears-k-only"`` (the reset empties ``k_cache`` alone — still correct, as
    the forward then replaces ``v_cache`` too), ``"reset-forgets-position"`` (the reset keeps ``pos``)."""

    def __init__(self, d_model=64, n_heads=4, n_kv_heads=2, context_length=64, bug=None):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)
        cos, sin = rope_angles(self.head_dim, context_length)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.k_cache = self.v_cache = None
        self.pos = 0
        self.bug = bug

    def reset_cache(self):
        self.k_cache = None
        if self.bug != "reset-clears-k-only":
            self.v_cache = None
        if self.bug != "reset-forgets-position":
            self.pos = 0

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        k = self.k_proj(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        v = self.v_proj(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
        start = self.pos if use_cache else 0
        q, k = rotate(q, self.cos, self.sin, start), rotate(k, self.cos, self.sin, start)
        if use_cache:
            if self.k_cache is None:
                self.k_cache, self.v_cache = k, v  # (b, g, n, hd) each
            else:
                self.k_cache = torch.cat([self.k_cache, k], dim=2)  # (b, g, cached + n, hd)
                self.v_cache = torch.cat([self.v_cache, v], dim=2)  # (b, g, cached + n, hd)
            k, v = self.k_cache, self.v_cache
            self.pos += n
        repeat = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)  # (b, h, nk, hd)
        nk = k.shape[2]
        hidden = torch.arange(nk)[None, :] > torch.arange(nk - n, nk)[:, None]  # (n, nk): query i is key nk - n + i
        s = (q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)).masked_fill(hidden, float("-inf"))  # (b, h, n, nk)
        return self.o_proj((torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, n, -1))  # (b, n, d_model)


class BFloat16SDPA(nn.Module):
    """A float32 module that runs its attention in bfloat16 through SDPA, as one does for the fused kernels
    (``scale``: SDPA's, None for 1/√head_dim)."""

    def __init__(self, d_in=64, num_heads=4, scale=None):
        super().__init__()
        self.h, self.hd, self.scale = num_heads, d_in // num_heads, scale
        self.qkv = nn.Linear(d_in, 3 * d_in, bias=False)
        self.proj = nn.Linear(d_in, d_in, bias=False)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, self.hd).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        y = F.scaled_dot_product_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), is_causal=True,
                                           scale=self.scale)  # (b, h, n, hd)
        return self.proj(y.float().transpose(1, 2).reshape(b, n, d))  # (b, n, d)


class HalfScoresSoftmax(nn.Module):
    """A float32 module whose softmax runs on its scores cast to float16, ``softmax(s.half())``, with no upcast."""

    def __init__(self, d_in=64, num_heads=4):
        super().__init__()
        self.h, self.hd = num_heads, d_in // num_heads
        self.qkv = nn.Linear(d_in, 3 * d_in, bias=False)
        self.proj = nn.Linear(d_in, d_in, bias=False)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, self.hd).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        s = q @ k.transpose(-1, -2) / math.sqrt(self.hd)  # (b, h, n, n)
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))  # (b, h, n, n)
        w = F.softmax(s.half(), dim=-1).float()  # (b, h, n, n)
        return self.proj((w @ v).transpose(1, 2).reshape(b, n, d))  # (b, n, d)


class OutProjFirst(nn.Module):
    """Qwen3's widths — heads × head_dim = 128 is not hidden_size = 64 — with ``o_proj`` created before ``q_proj``,
    and no width kept as an attribute: the module's first nn.Linear takes 128, its input is 64 wide."""

    def __init__(self, hidden_size=64, num_heads=8, num_key_value_heads=2, head_dim=16):
        super().__init__()
        self.o_proj = nn.Linear(num_heads * head_dim, hidden_size, bias=False)
        self.q_proj = nn.Linear(hidden_size, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_key_value_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_key_value_heads * head_dim, bias=False)
        self.h, self.g, self.hd = num_heads, num_key_value_heads, head_dim

    def forward(self, x):
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.h, self.hd).transpose(1, 2)  # (b, h, n, hd)
        k = self.k_proj(x).view(b, n, self.g, self.hd).transpose(1, 2)  # (b, g, n, hd)
        v = self.v_proj(x).view(b, n, self.g, self.hd).transpose(1, 2)  # (b, g, n, hd)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (b, h, n, hd)
        return self.o_proj(y.transpose(1, 2).reshape(b, n, -1))  # (b, n, h·hd) -> (b, n, hidden_size)


class EinsumProjections(nn.Module):
    """A learner's einsum attention: W_Q, W_K, W_V as (heads, d_model, d_head) parameters (TransformerLens's layout),
    an nn.Linear output projection, heads × d_head = 128 wide where d_model is 64, and no width kept as an attribute:
    its only nn.Linear takes 128, and nothing the forward calls before it says 64."""

    def __init__(self, d_model=64, n_heads=8, d_head=16):
        super().__init__()
        self.W_Q, self.W_K, self.W_V = (nn.Parameter(torch.randn(n_heads, d_model, d_head) / math.sqrt(d_model))
                                        for _ in range(3))
        self.W_O = nn.Linear(n_heads * d_head, d_model)

    def forward(self, x):
        b, n, _ = x.shape
        q = torch.einsum("bnd,hde->bhne", x, self.W_Q)  # (b, n, d_model) x (h, d_model, d_head) -> (b, h, n, d_head)
        k = torch.einsum("bnd,hde->bhne", x, self.W_K)  # (b, h, n, d_head)
        v = torch.einsum("bnd,hde->bhne", x, self.W_V)  # (b, h, n, d_head)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, n, d_head)
        return self.W_O(y.transpose(1, 2).reshape(b, n, -1))  # (b, n, h·d_head) -> (b, n, d_model)


# ---------------------------------------------------------------- a scale the config declares, or the module itself

class Gemma3Layer(nn.Module):
    """transformers' own ``Gemma3Attention`` (eager) from a small config, in the wrapper a user writes to call it as
    forward(x): rotary angles for the full-attention layer and the additive causal mask its model would build.
    ``query_pre_attn_scalar``: the config's scale, 1/√query_pre_attn_scalar — Gemma-2/3 27B set it to hidden ÷ heads
    (144, 168) against head_dim 128, so it need not be head_dim."""

    def __init__(self, hidden_size=64, num_heads=8, num_kv_heads=2, head_dim=8, query_pre_attn_scalar=12):
        super().__init__()
        from transformers import Gemma3TextConfig  # imported here: the other modules of this file need no transformers
        from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention, Gemma3RotaryEmbedding
        config = Gemma3TextConfig(hidden_size=hidden_size, num_attention_heads=num_heads,
                                  num_key_value_heads=num_kv_heads, head_dim=head_dim,
                                  query_pre_attn_scalar=query_pre_attn_scalar, intermediate_size=4 * hidden_size,
                                  num_hidden_layers=1, vocab_size=100, max_position_embeddings=128,
                                  layer_types=["full_attention"])
        config._attn_implementation = "eager"
        self.self_attn = Gemma3Attention(config, layer_idx=0)
        self.rotary_emb = Gemma3RotaryEmbedding(config)

    def forward(self, x):
        b, n, _ = x.shape
        positions = torch.arange(n)[None].expand(b, n)  # (b, n)
        cos, sin = self.rotary_emb(x, positions, "full_attention")  # (b, n, head_dim) each
        future = torch.ones(n, n, dtype=torch.bool).triu(1)  # (n, n)
        mask = torch.zeros(n, n).masked_fill(future, float("-inf"))[None, None]  # (1, 1, n, n)
        return self.self_attn(x, (cos, sin), mask)[0]  # (b, n, hidden_size)


def yarn_get_mscale(scale=1.0, mscale=1.0):
    """YaRN's attention temperature (DeepSeek-V2's modeling code): 0.1 · mscale · ln(scale) + 1 for a context
    stretched ``scale`` times."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


class DeepSeekV2YarnMLA(nn.Module):
    """DeepSeek-V2's MLA as its modeling code writes it (q_lora_rank None, K and V up from the latent, decoupled
    rotary): with YaRN in the config's ``rope_scaling``, ``softmax_scale = q_head_dim ** -0.5 · mscale²`` where
    mscale = yarn_get_mscale(factor, mscale_all_dim).  ``config``: an object with DeepSeek's config names.
    ``yarn_mscale=False``: a port that forgets the mscale², its scale q_head_dim ** -0.5 whatever the config says."""

    def __init__(self, config, yarn_mscale=True):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.qk_nope_head_dim, self.qk_rope_head_dim = config.qk_nope_head_dim, config.qk_rope_head_dim
        self.v_head_dim, self.kv_lora_rank = config.v_head_dim, config.kv_lora_rank
        self.q_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.q_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(config.hidden_size, self.kv_lora_rank + self.qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = nn.RMSNorm(self.kv_lora_rank)
        self.kv_b_proj = nn.Linear(self.kv_lora_rank, self.num_heads * (self.qk_nope_head_dim + self.v_head_dim),
                                   bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.v_head_dim, config.hidden_size, bias=False)
        self.softmax_scale = self.q_head_dim ** (-0.5)
        if config.rope_scaling is not None and yarn_mscale:
            mscale_all_dim = config.rope_scaling.get("mscale_all_dim", 0)
            scaling_factor = config.rope_scaling["factor"]
            if mscale_all_dim:
                mscale = yarn_get_mscale(scaling_factor, mscale_all_dim)
                self.softmax_scale = self.softmax_scale * mscale * mscale
        cos, sin = rope_angles(self.qk_rope_head_dim, config.max_position_embeddings)
        self.register_buffer("cos", cos, persistent=False)  # (context, rope_dim)
        self.register_buffer("sin", sin, persistent=False)  # (context, rope_dim)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.num_heads, self.q_head_dim).transpose(1, 2)  # (b, h, n, q_head_dim)
        q_nope, q_pe = q.split([self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)  # (b, h, n, nope), (…, rope)
        compressed_kv = self.kv_a_proj_with_mqa(x)  # (b, n, kv_lora_rank + rope)
        compressed_kv, k_pe = compressed_kv.split([self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        k_pe = k_pe.view(b, n, 1, self.qk_rope_head_dim).transpose(1, 2)  # (b, 1, n, rope)
        kv = self.kv_b_proj(self.kv_a_layernorm(compressed_kv))  # (b, n, h·(nope + v_head_dim))
        kv = kv.view(b, n, self.num_heads, self.qk_nope_head_dim + self.v_head_dim).transpose(1, 2)
        k_nope, value_states = kv.split([self.qk_nope_head_dim, self.v_head_dim], dim=-1)  # (b, h, n, nope), (…, v)
        q_pe, k_pe = rotate(q_pe, self.cos, self.sin), rotate(k_pe, self.cos, self.sin)  # (b, h|1, n, rope)
        query_states = torch.cat([q_nope, q_pe], dim=-1)  # (b, h, n, q_head_dim)
        key_states = torch.cat([k_nope, k_pe.expand(b, self.num_heads, n, -1)], dim=-1)  # (b, h, n, q_head_dim)
        attn_weights = query_states @ key_states.transpose(2, 3) * self.softmax_scale  # (b, h, n, n)
        future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)  # (n, n)
        attn_weights = attn_weights.masked_fill(future, float("-inf"))  # (b, h, n, n)
        attn_weights = torch.softmax(attn_weights, dim=-1, dtype=torch.float32)  # (b, h, n, n)
        attn_output = attn_weights @ value_states  # (b, h, n, n) @ (b, h, n, v) -> (b, h, n, v)
        return self.o_proj(attn_output.transpose(1, 2).reshape(b, n, -1))  # (b, n, hidden_size)


class GemmaStyleAttention(nn.Module):
    """Gemma's attention as a port writes it from the model's config (``hidden_size``, ``num_attention_heads``,
    ``head_dim``, ``query_pre_attn_scalar``), kept as ``self.config``: q multiplied by query_pre_attn_scalar ** -0.5
    before the product, as Gemma does.  ``scale="head_dim"``: the scores divided by √head_dim instead, the book's —
    what a port from the book's code keeps, whatever the config says."""

    def __init__(self, config, scale="config"):
        super().__init__()
        self.config, self.scale = config, scale
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        width = self.num_heads * self.head_dim
        self.q_proj = nn.Linear(config.hidden_size, width, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, width, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, width, bias=False)
        self.o_proj = nn.Linear(width, config.hidden_size, bias=False)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = (proj(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))  # (b, h, n, hd) each
        if self.scale == "config":
            q = q * self.config.query_pre_attn_scalar ** -0.5  # (b, h, n, hd)
            scores = q @ k.transpose(2, 3)  # (b, h, n, n)
        else:
            scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)  # (b, h, n, n)
        future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)  # (n, n)
        weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)  # (b, h, n, n)
        context = (weights @ v).transpose(1, 2).reshape(b, n, -1)  # (b, n, h·hd)
        return self.o_proj(context)  # (b, n, hidden_size)


class CustomScale(nn.Module):
    """A scale written into the module itself: the scores scaled by temperature ** -0.5, kept as ``self.scaling`` —
    a number the module claims, which neither a config nor a name models declare their scale under says."""

    def __init__(self, d_model=16, n_heads=4, temperature=32):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.scaling = temperature ** -0.5
        self.is_causal = True
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.o = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        o = F.scaled_dot_product_attention(q, k, v, is_causal=self.is_causal, scale=self.scaling)  # (b, h, n, hd)
        return self.o(o.transpose(1, 2).reshape(b, n, d))  # (b, n, d_model)


class SDPACache(nn.Module):
    """Multi-head attention with a KV cache the module holds (``k_cache``, ``v_cache``) and SDPA.  ``mask``:
    ``"is_causal"`` passes ``is_causal=n > 1`` over the cache (SDPA aligns it to the top-left: right for a prefill or
    one token, wrong for a chunk of 2 or more after a non-empty cache), ``"explicit"`` an attn_mask whose rows start at
    the cached tokens' count.  ``one_token``: the cached forward refuses more than one token after the cache, as a
    decode loop written for one token a step does."""

    def __init__(self, d_model=32, n_heads=4, mask="explicit", one_token=False):
        super().__init__()
        self.n_heads, self.head_dim, self.mask, self.one_token = n_heads, d_model // n_heads, mask, one_token
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.reset_cache()

    def reset_cache(self):
        self.k_cache = self.v_cache = None

    def forward(self, x, use_cache=False):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        if use_cache:
            if self.k_cache is not None:
                if self.one_token and n != 1:
                    raise ValueError(f"decode one token at a time after the prefill, got {n}")
                k = torch.cat([self.k_cache, k], dim=2)  # (b, h, cached + n, hd)
                v = torch.cat([self.v_cache, v], dim=2)  # (b, h, cached + n, hd)
            self.k_cache, self.v_cache = k, v
        if self.mask == "is_causal":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=n > 1)  # (b, h, n, hd)
        else:
            nk = k.shape[2]
            allowed = torch.arange(nk)[None, :] <= torch.arange(nk - n, nk)[:, None]  # (n, nk): query i is key nk-n+i
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # (b, h, n, hd)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))  # (b, n, d)


class RollingRotaryCache(nn.Module):
    """Mistral-style sliding-window attention with rotary embeddings and a rolling KV cache that keeps the last
    W − 1 keys (rotated) before the next token, rotated at ``pos``.  ``bug="offset-from-cache-length"``: the rotary
    offset is the cache's length — right until the window drops a key, then capped at W − 1."""

    def __init__(self, d_model=32, n_heads=4, sliding_window=3, context_length=64, bug=None):
        super().__init__()
        self.n_heads, self.head_dim, self.sliding_window, self.bug = n_heads, d_model // n_heads, sliding_window, bug
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        cos, sin = rope_angles(self.head_dim, context_length)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.reset_cache()

    def reset_cache(self):
        self.k_cache = self.v_cache = None
        self.pos = 0

    def forward(self, x, use_cache=False):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        cached = 0 if not use_cache or self.k_cache is None else self.k_cache.shape[2]
        start = (cached if self.bug == "offset-from-cache-length" else self.pos) if use_cache else 0
        q, k = rotate(q, self.cos, self.sin, start), rotate(k, self.cos, self.sin, start)
        if cached:
            k = torch.cat([self.k_cache, k], dim=2)  # (b, h, cached + n, hd)
            v = torch.cat([self.v_cache, v], dim=2)  # (b, h, cached + n, hd)
        nk = k.shape[2]
        behind = torch.arange(nk - n, nk)[:, None] - torch.arange(nk)[None, :]  # (n, nk): how far back each key is
        allowed = (behind >= 0) & (behind < self.sliding_window)  # (n, nk)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # (b, h, n, hd)
        if use_cache:
            keep = self.sliding_window - 1
            self.k_cache, self.v_cache = k[:, :, -keep:], v[:, :, -keep:]  # (b, h, W - 1, hd) each
            self.pos += n
        return self.out(out.transpose(1, 2).reshape(b, n, d))  # (b, n, d)


class CachesRepeated(nn.Module):
    """Grouped-query attention with a KV cache that caches K and V after ``repeat_interleave``, its K/V head count kept
    as ``self.groups`` (a name attnviz does not know: only ``check_module``'s ``sizes`` say it)."""

    def __init__(self, d_model=64, heads=8, groups=2):
        super().__init__()
        self.heads, self.groups, self.hd = heads, groups, d_model // heads
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.kv = nn.Linear(d_model, 2 * groups * self.hd, bias=False)
        self.o = nn.Linear(d_model, d_model, bias=False)
        self.reset_cache()

    def reset_cache(self):
        self.ck = self.cv = None

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        q = self.q(x).view(b, n, self.heads, self.hd).transpose(1, 2)  # (b, heads, n, hd)
        k, v = self.kv(x).view(b, n, 2, self.groups, self.hd).permute(2, 0, 3, 1, 4)  # each (b, groups, n, hd)
        r = self.heads // self.groups
        k, v = k.repeat_interleave(r, 1), v.repeat_interleave(r, 1)  # (b, heads, n, hd): repeated before caching
        past = 0
        if use_cache:
            if self.ck is not None:
                past = self.ck.shape[2]
                k, v = torch.cat([self.ck, k], 2), torch.cat([self.cv, v], 2)  # (b, heads, past + n, hd)
            self.ck, self.cv = k, v
        allowed = torch.arange(k.shape[2])[None, :] <= torch.arange(past, past + n)[:, None]  # (n, past + n)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # (b, heads, n, hd)
        return self.o(y.transpose(1, 2).reshape(b, n, -1))  # (b, n, d_model)


class ReturnsWeightsFirst(ReturnsTuple):
    """Returns (weights, output): the attention weights first, per head as multi-head layers give them."""

    def forward(self, x):
        output, weights = super().forward(x)  # (b, n, d_out), (b, n, n)
        return weights.unsqueeze(1), output  # (b, 1, n, n), (b, n, d_out)


class ReturnsDict(ReturnsTuple):
    """Returns {"hidden_states": output}, a dict as a Hugging Face-style layer's output does."""

    def forward(self, x):
        output, _ = super().forward(x)  # (b, n, d_out)
        return {"hidden_states": output}


class CachesWhenToldNot(nn.Module):
    """A KV-cached layer (cache_k/cache_v, reset_cache) whose forward forgot its ``if use_cache``: every forward, told
    use_cache=False too, appends its keys and values to the cache and attends to all of it.  ``log=True``: no cache,
    only a log of every key seen (``keys_seen``), never read back: right attention on the whole sequence, and a
    cached step (use_cache=True) that sees only its own token."""

    def __init__(self, d_in=16, num_heads=4, log=False):
        super().__init__()
        self.num_heads, self.head_dim, self.log = num_heads, d_in // num_heads, log
        self.W_query, self.W_key, self.W_value, self.out_proj = (nn.Linear(d_in, d_in, bias=False) for _ in range(4))
        self.reset_cache()

    def reset_cache(self):
        self.cache_k = self.cache_v = None
        self.keys_seen = torch.empty(0, self.head_dim)  # (0, hd)

    def attend(self, x):
        b, n, _ = x.shape
        q, k, v = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                   for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        past = 0
        if self.log:  # every key seen, batch and heads flattened, kept for later inspection
            self.keys_seen = torch.cat([self.keys_seen, k.reshape(-1, self.head_dim)])  # (seen + b·h·n, hd)
        else:
            past = 0 if self.cache_k is None else self.cache_k.shape[2]
            self.cache_k = k if self.cache_k is None else torch.cat([self.cache_k, k], dim=2)  # (b, h, past + n, hd)
            self.cache_v = v if self.cache_v is None else torch.cat([self.cache_v, v], dim=2)  # (b, h, past + n, hd)
            k, v = self.cache_k, self.cache_v  # (b, h, past + n, hd) each
        allowed = torch.arange(k.shape[2])[None, :] <= torch.arange(past, past + n)[:, None]  # (n, past + n)
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # (b, h, n, hd)
        return self.out_proj(context.transpose(1, 2).reshape(b, n, -1))  # (b, n, d_in)

    def forward(self, x, use_cache=False):
        return self.attend(x)  # the bug: caches whatever use_cache says


class AlwaysCaches(CachesWhenToldNot):
    """CachesWhenToldNot whose forward takes no use_cache: it caches on every call."""

    def forward(self, x):
        return self.attend(x)


class PreallocatedBuffers(nn.Module):
    """Llama-style KV cache: ``cache_k``/``cache_v`` buffers of (max_batch_size, num_heads, context_length, head_dim)
    allocated once, the new keys and values written at ``ptr`` and read back as ``cache_k[:b, :, :ptr]``; the reset
    only moves ``ptr`` back to 0 (the slots past it are never read).  ``lazy=True``: the buffers start as None and the
    first forward that writes allocates them, as the book's optimized cache does.  ``bug="ignores-use-cache"``: the
    forward forgot its ``if use_cache`` — told use_cache=False too, it writes at ptr, advances it and attends to the
    cache: the buffers never change shape, a second uncached forward reads the first one's keys, and a write past
    context_length raises."""

    def __init__(self, d_in=16, d_out=32, context_length=16, num_heads=4, max_batch_size=2, lazy=False, bug=None):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.context_length, self.max_batch_size, self.bug = context_length, max_batch_size, bug
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        shape = (max_batch_size, num_heads, context_length, self.head_dim)
        self.register_buffer("cache_k", None if lazy else torch.zeros(shape), persistent=False)  # (max_b, h, ctx, hd)
        self.register_buffer("cache_v", None if lazy else torch.zeros(shape), persistent=False)  # (max_b, h, ctx, hd)
        self.ptr = 0

    def reset_cache(self):
        self.ptr = 0

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries, keys, values = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        start = 0
        if use_cache or self.bug == "ignores-use-cache":
            if self.cache_k is None:
                shape = (self.max_batch_size, self.num_heads, self.context_length, self.head_dim)
                self.cache_k, self.cache_v = torch.zeros(shape), torch.zeros(shape)  # (max_b, h, ctx, hd) each
            start = self.ptr
            self.cache_k[:b, :, start:start + n] = keys
            self.cache_v[:b, :, start:start + n] = values
            self.ptr = start + n
            keys, values = self.cache_k[:b, :, :self.ptr], self.cache_v[:b, :, :self.ptr]  # (b, h, ptr, hd) each
        hidden = torch.arange(keys.shape[2])[None, :] > torch.arange(start, start + n)[:, None]  # (n, nk)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, nk) -> (b, h, n, nk)
        attn_scores = attn_scores.masked_fill(hidden, -torch.inf)  # (b, h, n, nk)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, nk)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)


class KeepsWhatItSaw(nn.Module):
    """Causal attention whose state legitimately changes in an uncached forward: rotary tables built on the first call
    (``cos``/``sin`` None until then, rebuilt for a longer input), a forward counter ``calls``, and the last weights
    kept for plotting (``last_attn_weights``).  ``dropout_in_eval=True``: ``F.dropout(p=0.5)`` without
    ``training=self.training``, so two forwards of one input differ in eval mode too."""

    def __init__(self, d_in=16, d_out=32, num_heads=4, dropout_in_eval=False):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.cos = self.sin = None
        self.calls = 0
        self.last_attn_weights = None
        self.dropout_in_eval = dropout_in_eval

    def forward(self, x):
        b, n, _ = x.shape
        self.calls += 1
        if self.cos is None or self.cos.shape[0] < n:
            self.cos, self.sin = rope_angles(self.head_dim, n)  # (n, hd) each
        queries, keys, values = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        queries, keys = rotate(queries, self.cos, self.sin), rotate(keys, self.cos, self.sin)  # (b, h, n, hd) each
        hidden = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n)
        attn_scores = queries @ keys.transpose(2, 3) / self.head_dim ** 0.5  # (b, h, n, hd) @ (b, h, hd, n)
        attn_weights = torch.softmax(attn_scores.masked_fill(hidden, -torch.inf), dim=-1)  # (b, h, n, n)
        if self.dropout_in_eval:
            attn_weights = F.dropout(attn_weights, p=0.5)  # (b, h, n, n)
        self.last_attn_weights = attn_weights  # (b, h, n, n)
        return (attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)


class KeepsItsWeights(nn.Module):
    """The book's multi-head attention that keeps a copy of its attention weights for plotting, the way users do.
    ``keep`` says how: "detach" ``self.last_attn_weights = attn_weights.detach()``, "detach-clone", "clone", "cpu",
    "numpy" (``.detach().cpu().numpy()``), "append" ``self.maps.append(attn_weights.detach())``, "scores" (the scaled
    and masked scores, ``.detach()``, before the softmax), "scores-cpu" (``attn_scores.cpu()`` of Q·Kᵀ, before the
    scale), None (no copy).  ``rotary``: q and k turned by their positions first.
    ``bug``: "values-rotated" turns the values too (a rotary bug); "weights-scaled" divides the weights by √head_dim
    after the softmax (so rows sum to 1/√head_dim)."""

    def __init__(self, d_in=32, d_out=32, context_length=64, dropout=0.0, num_heads=4, keep="detach", rotary=False,
                 bug=None):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))
        cos, sin = rope_angles(self.head_dim, context_length)  # (context_length, hd) each
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)
        self.keep, self.rotary, self.bug = keep, rotary, bug
        self.last_attn_weights = self.last_attn_scores = None
        self.maps = []

    def forward(self, x):
        b, n, _ = x.shape
        queries = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        keys = self.W_key(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        values = self.W_value(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        if self.rotary:
            queries, keys = rotate(queries, self.cos, self.sin), rotate(keys, self.cos, self.sin)  # (b, h, n, hd) each
        if self.bug == "values-rotated":
            values = rotate(values, self.cos, self.sin)  # (b, h, n, hd)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
        if self.keep == "scores-cpu":
            self.last_attn_scores = attn_scores.cpu()  # (b, h, n, n)
        attn_scores = attn_scores.masked_fill(self.mask.bool()[:n, :n], -torch.inf)  # (b, h, n, n)
        attn_scores = attn_scores / self.head_dim ** 0.5  # (b, h, n, n)
        if self.keep == "scores":
            self.last_attn_scores = attn_scores.detach()  # (b, h, n, n)
        attn_weights = torch.softmax(attn_scores, dim=-1)  # (b, h, n, n)
        if self.keep == "detach":
            self.last_attn_weights = attn_weights.detach()  # (b, h, n, n)
        elif self.keep == "detach-clone":
            self.last_attn_weights = attn_weights.detach().clone()  # (b, h, n, n)
        elif self.keep == "clone":
            self.last_attn_weights = attn_weights.clone()  # (b, h, n, n)
        elif self.keep == "cpu":
            self.last_attn_weights = attn_weights.cpu()  # (b, h, n, n)
        elif self.keep == "numpy":
            self.last_attn_weights = attn_weights.detach().cpu().numpy()  # (b, h, n, n)
        elif self.keep == "append":
            self.maps.append(attn_weights.detach())  # (b, h, n, n) each
        if self.bug == "weights-scaled":
            attn_weights = attn_weights / self.head_dim ** 0.5  # (b, h, n, n): rows sum to 1/√hd
        attn_weights = self.dropout(attn_weights)  # (b, h, n, n)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)


class SoftCappedAttention(nn.Module):
    """Gemma 2's soft-capped scores in a port of its own: the scaled scores squashed to cap · tanh(s / cap) before
    the causal mask and the softmax, written as ``written`` says — "inline": ``torch.tanh(s / cap) * cap``; "steps":
    ``s = s / cap; s = torch.tanh(s); s = s * cap`` (transformers' Gemma 2); "reciprocal": ``cap * torch.tanh(s *
    (1 / cap))``.  ``divide_by``: what the scores are divided by, √head_dim (None) or another number (head_dim: a
    bug)."""

    def __init__(self, d_model=64, n_heads=4, cap=50.0, written="inline", divide_by=None):
        super().__init__()
        self.n_heads, self.head_dim, self.cap, self.written = n_heads, d_model // n_heads, cap, written
        self.divide_by = divide_by or math.sqrt(self.head_dim)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        s = q @ k.transpose(-1, -2) / self.divide_by  # (b, h, n, n)
        if self.written == "inline":
            s = torch.tanh(s / self.cap) * self.cap  # (b, h, n, n)
        elif self.written == "steps":
            s = s / self.cap  # (b, h, n, n)
            s = torch.tanh(s)  # (b, h, n, n)
            s = s * self.cap  # (b, h, n, n)
        else:
            s = self.cap * torch.tanh(s * (1 / self.cap))  # (b, h, n, n)
        future = torch.ones(n, n, dtype=torch.bool).triu(1)  # (n, n)
        w = torch.softmax(s.masked_fill(future, float("-inf")), dim=-1)  # (b, h, n, n)
        return self.o((w @ v).transpose(1, 2).reshape(b, n, d))  # (b, n, d_model)


class HFLayer(nn.Module):
    """One of transformers' own attention classes (eager) from its small config, in the wrapper a user writes to
    call it as forward(x): rotary angles and the additive causal mask its model would build.  ``rotary`` None: a
    class that turns q and k by its own table (GPT-J's), given the positions instead of the angles."""

    def __init__(self, attention, rotary, config, rotary_extra=()):
        super().__init__()
        config._attn_implementation = "eager"
        self.self_attn = attention(config, layer_idx=0)
        self.rotary_emb = None if rotary is None else rotary(config)
        self.rotary_extra = rotary_extra

    def forward(self, x):
        b, n, _ = x.shape
        positions = torch.arange(n)[None].expand(b, n)  # (b, n)
        if self.rotary_emb is not None:
            cos, sin = self.rotary_emb(x, positions, *self.rotary_extra)  # (b, n, head_dim) each
        future = torch.ones(n, n, dtype=torch.bool).triu(1)  # (n, n)
        mask = torch.zeros(n, n).masked_fill(future, float("-inf"))[None, None]  # (1, 1, n, n)
        if self.rotary_emb is None:
            return self.self_attn(x, attention_mask=mask, position_ids=positions)[0]  # (b, n, hidden_size)
        return self.self_attn(x, (cos, sin), mask)[0]  # (b, n, hidden_size)


class DeclaredSoftCap(nn.Module):
    """Gemma 2's soft-capped attention whose cap is declared one way and applied as the forward says, as ports get it
    wrong: the cap kept as ``self.attn_logit_softcapping`` (``declared="attribute"``), in the model's config dict
    ``self.cfg`` (``"config"``), or only taken by the constructor and written into the forward's numbers
    (``"argument"``: kept nowhere).  ``applied``: the cap the forward uses — None: the declared one (right); a number
    (``30.0``, copied from another model: a bug); ``0``: no cap at all (a bug).  ``divided`` False: the cap written
    ``torch.tanh(s) * cap``, the division inside the tanh left out (a bug).  ``masked_first``: the causal mask
    added before the cap, which turns its −∞ into −cap (a bug)."""

    def __init__(self, d_model=64, n_heads=4, attn_logit_softcapping=50.0, declared="attribute", applied=None,
                 divided=True, masked_first=False):
        super().__init__()
        self.n_heads, self.head_dim, self.divided = n_heads, d_model // n_heads, divided
        self.masked_first = masked_first
        if declared == "attribute":
            self.attn_logit_softcapping = attn_logit_softcapping
        elif declared == "config":
            self.cfg = {"emb_dim": d_model, "n_heads": n_heads, "attn_logit_softcapping": attn_logit_softcapping}
        self.cap_in_forward = attn_logit_softcapping if applied is None else applied
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        s = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (b, h, n, n)
        if self.masked_first:
            s = s + torch.full((n, n), float("-inf")).triu(1)  # (b, h, n, n)
        if self.cap_in_forward and not self.divided:
            s = torch.tanh(s) * self.cap_in_forward  # (b, h, n, n)
        elif self.cap_in_forward:
            s = torch.tanh(s / self.cap_in_forward) * self.cap_in_forward  # (b, h, n, n)
        future = torch.ones(n, n, dtype=torch.bool).triu(1)  # (n, n)
        w = torch.softmax(s if self.masked_first else s.masked_fill(future, float("-inf")), dim=-1)  # (b, h, n, n)
        return self.o((w @ v).transpose(1, 2).reshape(b, n, d))  # (b, n, d_model)


class Gemma2Layer(HFLayer):
    """transformers' own ``Gemma2Attention`` (``attn_logit_softcapping`` set)."""

    def __init__(self, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16, softcap=50.0):
        from transformers import Gemma2Config  # imported here: the other modules of this file need no transformers
        from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention, Gemma2RotaryEmbedding
        config = Gemma2Config(hidden_size=hidden_size, num_attention_heads=num_heads,
                              num_key_value_heads=num_kv_heads, head_dim=head_dim, query_pre_attn_scalar=head_dim,
                              attn_logit_softcapping=softcap, intermediate_size=4 * hidden_size,
                              num_hidden_layers=1, vocab_size=100, max_position_embeddings=128,
                              layer_types=["full_attention"])
        super().__init__(Gemma2Attention, Gemma2RotaryEmbedding, config)


class SinkAttention(nn.Module):
    """Causal attention with an attention sink, as GPT-OSS writes it: a learned logit per head concatenated to each
    row of masked scores, the softmax over the keys and that column, the column dropped after it (each row then gives
    the sink what it does not give the keys).  ``sink_first``: the sink's column before the keys (dropped with
    ``[..., 1:]``); ``divide_by``: what the scores are divided by, √head_dim (None) or another number (a bug);
    ``drop``: the column dropped after the softmax — "sink" (right) or "key" (a key's column instead of the sink's:
    a bug); ``sinks_as``: how the forward uses ``self.sinks`` — "column" (right); bugs: "flipped" (the heads' logits
    in reverse order, a port that numbers its heads from the other end), "first" (head 0's logit for every head, as
    a port of a one-sink model writes ``self.sinks[:1]``), "repeat" (the column built with ``.repeat(n)`` where
    ``repeat_interleave(n)`` was meant: it changes from query to query), "added" (added to every score of its head's
    rows, the softmax over the keys alone)."""

    def __init__(self, d_model=64, n_heads=4, sink_first=False, divide_by=None, drop="sink", sinks_as="column"):
        super().__init__()
        self.n_heads, self.head_dim, self.sink_first, self.drop = n_heads, d_model // n_heads, sink_first, drop
        self.divide_by, self.sinks_as = divide_by or math.sqrt(self.head_dim), sinks_as
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.o = nn.Linear(d_model, d_model, bias=False)
        self.sinks = nn.Parameter(torch.randn(n_heads))  # (h,): trained sinks are not zero

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        s = q @ k.transpose(-1, -2) / self.divide_by  # (b, h, n, n)
        if self.sinks_as == "added":
            s = s + self.sinks.reshape(1, -1, 1, 1)  # (b, h, n, n): a constant per row
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))  # (b, h, n, n)
        if self.sinks_as == "added":
            return self.o((torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, n, d))  # (b, n, d_model)
        if self.sinks_as == "flipped":
            sink = self.sinks.flip(0).reshape(1, -1, 1, 1).expand(b, -1, n, 1)  # (b, h, n, 1)
        elif self.sinks_as == "first":
            sink = self.sinks[:1].reshape(1, 1, 1, 1).expand(b, self.n_heads, n, 1)  # (b, h, n, 1)
        elif self.sinks_as == "repeat":
            sink = self.sinks.repeat(n).view(1, self.n_heads, n, 1).expand(b, -1, -1, -1)  # (b, h, n, 1)
        else:
            sink = self.sinks.reshape(1, -1, 1, 1).expand(b, -1, n, 1)  # (b, h, n, 1)
        joined = torch.cat([sink, s] if self.sink_first else [s, sink], dim=-1)  # (b, h, n, n + 1)
        probs = torch.softmax(joined, dim=-1)  # (b, h, n, n + 1)
        sink_dropped = (self.drop == "sink") == self.sink_first  # which end goes: the sink's, or a key's
        w = probs[..., 1:] if sink_dropped else probs[..., :-1]  # (b, h, n, n)
        return self.o((w @ v).transpose(1, 2).reshape(b, n, d))  # (b, n, d_model)


class GptOssLayer(HFLayer):
    """transformers' own ``GptOssAttention`` (attention sinks), its sinks drawn as trained ones are (not zero)."""

    def __init__(self, hidden_size=64, num_heads=4, num_kv_heads=2):
        from transformers import GptOssConfig  # imported here: the other modules of this file need no transformers
        from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention, GptOssRotaryEmbedding
        config = GptOssConfig(hidden_size=hidden_size, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                              head_dim=hidden_size // num_heads, intermediate_size=4 * hidden_size,
                              num_hidden_layers=1, vocab_size=100, num_local_experts=2, max_position_embeddings=128,
                              layer_types=["full_attention"])
        super().__init__(GptOssAttention, GptOssRotaryEmbedding, config)
        with torch.no_grad():
            self.self_attn.sinks.normal_()


class DictConfigAttention(nn.Module):
    """Causal multi-head attention built from a config dict, as the book's ``TransformerBlock(cfg)`` reads one:
    ``cfg["emb_dim"]``, ``cfg["n_heads"]``, ``cfg["drop_rate"]``, ``cfg["qkv_bias"]``, and ``cfg.get`` / ``in`` for
    what a config may leave out."""

    def __init__(self, cfg):
        super().__init__()
        self.num_heads, self.head_dim = cfg["n_heads"], cfg["emb_dim"] // cfg["n_heads"]
        self.W_query = nn.Linear(cfg["emb_dim"], cfg["emb_dim"], bias=cfg["qkv_bias"])
        self.W_key = nn.Linear(cfg["emb_dim"], cfg["emb_dim"], bias=cfg["qkv_bias"])
        self.W_value = nn.Linear(cfg["emb_dim"], cfg["emb_dim"], bias=cfg["qkv_bias"])
        self.out_proj = nn.Linear(cfg["emb_dim"], cfg["emb_dim"])
        self.dropout = nn.Dropout(cfg.get("drop_rate", 0.0))
        self.norm_qk = "qk_norm" in cfg and cfg["qk_norm"]

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = (proj(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                   for proj in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        scores = q @ k.transpose(2, 3) / self.head_dim ** 0.5  # (b, h, n, n)
        future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)  # (n, n)
        weights = self.dropout(torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1))  # (b, h, n, n)
        return self.out_proj((weights @ v).transpose(1, 2).reshape(b, n, d))  # (b, n, d)


class OwnConfigAttention(DictConfigAttention):
    """DictConfigAttention whose config defaults to None and which then builds its own dict, whole — with a key no
    config of attnviz's has (``rope_base``), as the book's notebooks' blocks do."""

    def __init__(self, cfg=None):
        cfg = cfg or {"emb_dim": 32, "n_heads": 2, "drop_rate": 0.0, "qkv_bias": False, "rope_base": 10_000.0}
        super().__init__(cfg)
        self.cfg, self.rope_base = cfg, cfg["rope_base"]


class GemmaCore(nn.Module):
    """Gemma's grouped-query attention as a port writes it: q multiplied by ``self.scaling``, which is
    query_pre_attn_scalar ** -0.5 when one is given, else head_dim ** -0.5."""

    def __init__(self, d_in, num_heads, head_dim, query_pre_attn_scalar=None):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, head_dim
        self.W_query = nn.Linear(d_in, num_heads * head_dim, bias=False)
        self.W_key = nn.Linear(d_in, head_dim, bias=False)
        self.W_value = nn.Linear(d_in, head_dim, bias=False)
        self.out_proj = nn.Linear(num_heads * head_dim, d_in, bias=False)
        if query_pre_attn_scalar is not None:
            self.scaling = query_pre_attn_scalar ** -0.5
        else:
            self.scaling = head_dim ** -0.5

    def forward(self, x):
        b, n, _ = x.shape
        q = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        k = self.W_key(x).view(b, n, 1, self.head_dim).transpose(1, 2)  # (b, 1, n, hd)
        v = self.W_value(x).view(b, n, 1, self.head_dim).transpose(1, 2)  # (b, 1, n, hd)
        scores = (q * self.scaling) @ k.transpose(2, 3)  # (b, h, n, n)
        future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)  # (n, n)
        weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)  # (b, h, n, n)
        return self.out_proj((weights @ v).transpose(1, 2).reshape(b, n, -1))  # (b, n, d_in)


class GemmaCoreNoRoot(GemmaCore):
    """GemmaCore whose scale is 1 / query_pre_attn_scalar: the square root forgotten."""

    def __init__(self, d_in, num_heads, head_dim, query_pre_attn_scalar=None):
        super().__init__(d_in, num_heads, head_dim, query_pre_attn_scalar)
        if query_pre_attn_scalar is not None:
            self.scaling = 1 / query_pre_attn_scalar


class GemmaScalarAttention(nn.Module):
    """GemmaCore called as forward(x) by a wrapper that takes ``query_pre_attn_scalar`` and keeps it nowhere;
    ``root=False``: GemmaCoreNoRoot's."""

    def __init__(self, d_in=64, num_heads=4, head_dim=16, query_pre_attn_scalar=24, root=True):
        super().__init__()
        self.att = (GemmaCore if root else GemmaCoreNoRoot)(d_in, num_heads, head_dim, query_pre_attn_scalar)

    def forward(self, x):
        return self.att(x)  # (b, n, d_in)


class GemmaCfgDictAttention(GemmaScalarAttention):
    """GemmaScalarAttention keeping its model's config dict as ``self.cfg`` (as the notebooks' models do), with
    ``query_pre_attn_scalar`` in it; ``scale="head_dim"``: the core divides by √head_dim, whatever the dict says."""

    def __init__(self, d_in=64, num_heads=4, head_dim=16, query_pre_attn_scalar=24, scale="config"):
        super().__init__(d_in, num_heads, head_dim, query_pre_attn_scalar if scale == "config" else None)
        self.cfg = {"emb_dim": d_in, "n_heads": num_heads, "head_dim": head_dim,
                    "query_pre_attn_scalar": query_pre_attn_scalar}


class GraniteLayer(HFLayer):
    """transformers' own GraniteAttention: the scores × ``config.attention_multiplier`` (granite-3.0-8b: 1/head_dim)."""

    def __init__(self, hidden_size=64, num_heads=4, num_kv_heads=2, attention_multiplier=0.0625):
        from transformers import GraniteConfig  # imported here: the other modules of this file need no transformers
        from transformers.models.granite.modeling_granite import GraniteAttention, GraniteRotaryEmbedding
        config = GraniteConfig(hidden_size=hidden_size, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                               intermediate_size=4 * hidden_size, num_hidden_layers=1, vocab_size=100,
                               attention_multiplier=attention_multiplier)
        super().__init__(GraniteAttention, GraniteRotaryEmbedding, config)


class Gemma3nLayer(HFLayer):
    """transformers' own Gemma3nTextAttention: q and k RMS-normalised, ``self.scaling = 1.0`` (no 1/√head_dim)."""

    def __init__(self, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16):
        from transformers import Gemma3nTextConfig
        from transformers.models.gemma3n.modeling_gemma3n import Gemma3nRotaryEmbedding, Gemma3nTextAttention
        config = Gemma3nTextConfig(hidden_size=hidden_size, num_attention_heads=num_heads,
                                   num_key_value_heads=num_kv_heads, head_dim=head_dim,
                                   intermediate_size=4 * hidden_size, num_hidden_layers=1, vocab_size=100,
                                   layer_types=["full_attention"], num_kv_shared_layers=0,
                                   hidden_size_per_layer_input=8, vocab_size_per_layer_input=100,
                                   activation_sparsity_pattern=[0.0], altup_num_inputs=2, laurel_rank=4)
        super().__init__(Gemma3nTextAttention, Gemma3nRotaryEmbedding, config, ("full_attention",))


class Ministral3Layer(HFLayer):
    """transformers' own Ministral3Attention with its default config: YaRN rope (mscale_all_dim = 1, factor 16),
    head_dim 128, and the scores ÷ √head_dim all the same."""

    def __init__(self, hidden_size=64, num_heads=4, num_kv_heads=2):
        from transformers import Ministral3Config
        from transformers.models.ministral3.modeling_ministral3 import Ministral3Attention, Ministral3RotaryEmbedding
        config = Ministral3Config(hidden_size=hidden_size, num_attention_heads=num_heads,
                                  num_key_value_heads=num_kv_heads, intermediate_size=4 * hidden_size,
                                  num_hidden_layers=1, vocab_size=100)
        super().__init__(Ministral3Attention, Ministral3RotaryEmbedding, config)

    def forward(self, x):
        b, n, _ = x.shape
        positions = torch.arange(n)[None].expand(b, n)  # (b, n)
        cos, sin = self.rotary_emb(x, positions)  # (b, n, head_dim) each
        future = torch.ones(n, n, dtype=torch.bool).triu(1)  # (n, n)
        mask = torch.zeros(n, n).masked_fill(future, float("-inf"))[None, None]  # (1, 1, n, n)
        return self.self_attn(x, (cos, sin), mask, positions)[0]  # (b, n, hidden_size)


class NormedUnscaledAttention(nn.Module):
    """A user's own attention that RMS-normalises q and k (``q_norm``, ``k_norm``, as Qwen3 and OLMo 2 do) and keeps
    ``self.scaling = 1.0``: the √head_dim forgotten — or Gemma 3n's design copied; the check cannot tell which."""

    def __init__(self, d_in=64, num_heads=4):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_in // num_heads
        self.qkv = nn.Linear(d_in, 3 * d_in, bias=False)
        self.q_norm, self.k_norm = nn.RMSNorm(self.head_dim), nn.RMSNorm(self.head_dim)
        self.out_proj = nn.Linear(d_in, d_in, bias=False)
        self.scaling = 1.0

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, n, hd)
        q, k = self.q_norm(q), self.k_norm(k)  # (b, h, n, hd) each
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scaling)  # (b, h, n, hd)
        return self.out_proj(o.transpose(1, 2).reshape(b, n, d))  # (b, n, d_in)


class PastArgument(nn.Module):
    """GPT-2's original cache convention (minGPT forks' too): ``forward(x, past=None) -> (out, present)``, the
    caller holding the cache as a (k, v) tuple.  ``bug="mask-ignores-past"``: the mask is built as if the new tokens
    started at position 0."""

    def __init__(self, n_embd=32, n_head=4, bug=None):
        super().__init__()
        self.n_head, self.n_embd = n_head, n_embd
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.bug = bug

    def attend(self, x, past):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)  # (B, T, C) each
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, h, T, hs)
        cached = 0
        if past is not None:
            cached = past[0].shape[2]
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)  # (B, h, cached + T, hs) each
        start = 0 if self.bug == "mask-ignores-past" else cached
        keep = torch.arange(k.shape[2])[None, :] <= torch.arange(start, start + T)[:, None]  # (T, cached + T)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)  # (B, h, T, hs)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C)), (k, v)  # (B, T, C), present

    def forward(self, x, past=None):
        return self.attend(x, past)


class KVCacheArgument(PastArgument):
    """The same, the cache argument named ``kv_cache``: ``forward(x, kv_cache=None) -> (out, new_kv_cache)``."""

    def forward(self, x, kv_cache=None):
        return self.attend(x, kv_cache)


class PastOffset(nn.Module):
    """A ``past`` that counts the tokens before this call rather than holding a cache: ``forward(x, past=0)``, the
    positions (a learned table, GPT-2's ``wpe``) starting at ``past``; the module keeps no KV cache."""

    def __init__(self, n_embd=32, n_head=4, context_length=64):
        super().__init__()
        self.n_head, self.n_embd = n_head, n_embd
        self.wpe = nn.Embedding(context_length, n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x, past=0):  # past: how many tokens came before this call
        B, T, C = x.size()
        x = x + self.wpe(torch.arange(past, past + T))  # (B, T, C) + (T, C) -> (B, T, C)
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)  # (B, T, C) each
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, h, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, h, T, hs)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))  # (B, T, C)


class LowPrecisionCache(nn.Module):
    """Computes in float32 and keeps its KV cache in ``cache_dtype`` (bfloat16: half the memory), casting it back
    up to attend.  ``bug="drops-oldest"``: the cached step leaves out the first token's keys and values."""

    def __init__(self, n_embd=32, n_head=4, cache_dtype=torch.bfloat16, bug=None):
        super().__init__()
        self.n_head, self.n_embd, self.cache_dtype, self.bug = n_head, n_embd, cache_dtype, bug
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.k_cache = self.v_cache = None

    def reset_cache(self):
        self.k_cache = self.v_cache = None

    def forward(self, x, use_cache=False):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)  # (B, T, C) each
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, h, T, hs)
        past = 0
        if use_cache:
            if self.k_cache is not None:
                past = self.k_cache.shape[2]
                k = torch.cat([self.k_cache.float(), k], dim=2)  # (B, h, past + T, hs)
                v = torch.cat([self.v_cache.float(), v], dim=2)  # (B, h, past + T, hs)
            self.k_cache, self.v_cache = k.to(self.cache_dtype), v.to(self.cache_dtype)  # (B, h, past + T, hs) each
        keep = torch.arange(k.shape[2])[None, :] <= torch.arange(past, past + T)[:, None]  # (T, past + T)
        if self.bug == "drops-oldest" and past > 0:
            keep[:, 0] = False  # (T, past + T): the first token's key hidden from every cached step
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)  # (B, h, T, hs)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))  # (B, T, C)


class WindowSizedCache(PreallocatedCache):
    """A preallocated KV cache of ``window_size`` slots (default: the context), which no mask applies: not an
    attention window.  It is the book's optimized class only while ``window_size`` is at least the tokens cached — it
    does not shift an overflowing cache to keep the last ``window_size`` tokens, as the book's class does."""

    def __init__(self, d_in=16, d_out=32, context_length=16, num_heads=4, window_size=None):
        super().__init__(d_in, d_out, context_length, num_heads)
        self.window_size = window_size or context_length

    def forward(self, x, use_cache=False):
        if use_cache and self.cache_k is None:
            self.cache_k = torch.zeros(x.shape[0], self.num_heads, self.window_size, self.head_dim)  # (b, h, W, hd)
            self.cache_v = torch.zeros_like(self.cache_k)  # (b, h, W, hd)
        return super().forward(x, use_cache)


# ---------------------------------------------------------------- rotary where it hides, and widths that coincide

class GPTJLayer(HFLayer):
    """transformers' own ``GPTJAttention``: interleaved rotary on the first ``rotary_dim`` features of each head, by
    its own sin/cos table (``embed_positions``) at the positions it is given."""

    def __init__(self, n_embd=64, n_head=4, rotary_dim=8):
        from transformers import GPTJConfig  # imported here: the other modules of this file need no transformers
        from transformers.models.gptj.modeling_gptj import GPTJAttention
        config = GPTJConfig(n_embd=n_embd, n_head=n_head, rotary_dim=rotary_dim, n_positions=128, vocab_size=100,
                            n_layer=1)
        super().__init__(GPTJAttention, None, config)


class InterleavedInner(nn.Module):
    """GPT-J's attention written by hand: each head's first ``rotary_dim`` features turned in neighbouring pairs
    (``rotate_every_two``) by a sin/cos table kept as ``embed_positions``."""

    def __init__(self, d_model=32, num_heads=4, rotary_dim=4, context_length=64):
        super().__init__()
        self.h, self.hd, self.rotary_dim = num_heads, d_model // num_heads, rotary_dim
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        inv_freq = 1.0 / 10_000 ** (torch.arange(0, rotary_dim, 2).float() / rotary_dim)  # (rd/2,)
        angles = torch.arange(context_length).float()[:, None] * inv_freq[None, :]  # (ctx, rd/2)
        self.register_buffer("embed_positions", torch.cat([angles.sin(), angles.cos()], dim=-1), persistent=False)

    @staticmethod
    def rotate_every_two(x):
        pairs = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1)  # (..., rd/2, 2)
        return pairs.flatten(-2)  # (..., rd)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, self.hd).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        sin, cos = self.embed_positions[:n].repeat_interleave(2, dim=-1).chunk(2, dim=-1)  # (n, rd) each
        rd = self.rotary_dim
        q = torch.cat([q[..., :rd] * cos + self.rotate_every_two(q[..., :rd]) * sin, q[..., rd:]], dim=-1)
        k = torch.cat([k[..., :rd] * cos + self.rotate_every_two(k[..., :rd]) * sin, k[..., rd:]], dim=-1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, n, hd)
        return self.out(out.transpose(1, 2).reshape(b, n, d))  # (b, n, d)


class WrapsInnerAttention(nn.Module):
    """A block that calls its attention submodule: the outer forward names nothing of rotary's."""

    def __init__(self, d_model=32, num_heads=4):
        super().__init__()
        self.attn = InterleavedInner(d_model, num_heads)

    def forward(self, x):
        return self.attn(x)  # (b, n, d_model)


class NeoXPartialRotary(nn.Module):
    """GPT-NeoX's attention: a fused query_key_value, rotary (rotate_half) on the first ``rotary_ndims`` =
    ``rotary_pct`` × head_dim features of each head, its table built for that width.  ``keep_width``: False keeps
    the rotated width under no name of rotary's."""

    def __init__(self, d_in=16, d_out=64, num_heads=2, rotary_pct=0.5, base=10_000, context_length=64,
                 keep_width=True):
        super().__init__()
        self.h, self.hd = num_heads, d_out // num_heads
        width = int(self.hd * rotary_pct)
        if keep_width:
            self.rotary_ndims, self.rotary_pct = width, rotary_pct
        else:
            self.r = width
        self.query_key_value = nn.Linear(d_in, 3 * d_out)
        self.dense = nn.Linear(d_out, d_in)
        self.register_buffer("cos_cached", rope_angles(width, context_length, base)[0], persistent=False)
        self.register_buffer("sin_cached", rope_angles(width, context_length, base)[1], persistent=False)

    def forward(self, x):
        b, n, _ = x.shape
        qkv = self.query_key_value(x).view(b, n, self.h, 3 * self.hd).permute(0, 2, 1, 3)  # (b, h, n, 3·hd)
        q, k, v = qkv.chunk(3, dim=-1)  # (b, h, n, hd) each
        r = self.cos_cached.shape[-1]
        q = torch.cat([rotate(q[..., :r], self.cos_cached, self.sin_cached), q[..., r:]], dim=-1)  # (b, h, n, hd)
        k = torch.cat([rotate(k[..., :r], self.cos_cached, self.sin_cached), k[..., r:]], dim=-1)  # (b, h, n, hd)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, n, hd)
        return self.dense(out.transpose(1, 2).reshape(b, n, -1))  # (b, n, d_in)


class RotaryOwnBase(nn.Module):
    """Rotary over head_dim with an uncommon base (1000), kept as ``self.theta`` (Meta's argument's name), or, with
    ``keep_base=False``, written into the tables only."""

    def __init__(self, d_in=32, num_heads=2, theta=1000.0, context_length=64, keep_base=True):
        super().__init__()
        self.h, self.hd = num_heads, d_in // num_heads
        if keep_base:
            self.theta = theta
        self.wqkv = nn.Linear(d_in, 3 * d_in, bias=False)
        self.wo = nn.Linear(d_in, d_in, bias=False)
        cos, sin = rope_angles(self.hd, context_length, theta)  # (ctx, hd) each
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.wqkv(x).view(b, n, 3, self.h, self.hd).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        q, k = rotate(q, self.cos, self.sin), rotate(k, self.cos, self.sin)  # (b, h, n, hd) each
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, n, hd)
        return self.wo(out.transpose(1, 2).reshape(b, n, d))  # (b, n, d)


class RotaryFreqBase(RotaryOwnBase):
    """RotaryOwnBase built with its base under llama.cpp's name, ``rope_freq_base``, kept as ``self.freq_base``: names
    attnviz does not read."""

    def __init__(self, d_in=32, num_heads=2, rope_freq_base=1000.0):
        super().__init__(d_in, num_heads, theta=rope_freq_base, keep_base=False)
        self.freq_base = rope_freq_base


class HeadRMSNorm(nn.Module):
    """RMSNorm over each head's features, with a learned scale."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.scale = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.scale  # (..., dim)


class QKNormRotary(nn.Module):
    """Qwen3's attention: q_norm and k_norm (trained-looking scales, not all 1) on each head, and rotary.
    ``norm_after_rope``: the norms applied after the rotation, not before it (a port's ordering bug)."""

    def __init__(self, d_in=64, num_heads=4, head_dim=16, context_length=64, norm_after_rope=False):
        super().__init__()
        self.h, self.hd, self.norm_after_rope = num_heads, head_dim, norm_after_rope
        self.W_query = nn.Linear(d_in, num_heads * head_dim, bias=False)
        self.W_key = nn.Linear(d_in, num_heads * head_dim, bias=False)
        self.W_value = nn.Linear(d_in, num_heads * head_dim, bias=False)
        self.out_proj = nn.Linear(num_heads * head_dim, d_in, bias=False)
        self.q_norm, self.k_norm = HeadRMSNorm(head_dim), HeadRMSNorm(head_dim)
        with torch.no_grad():
            self.q_norm.scale.uniform_(0.5, 1.5)
            self.k_norm.scale.uniform_(0.5, 1.5)
        cos, sin = rope_angles(head_dim, context_length, 1_000_000.0)  # (ctx, hd) each
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.W_query(x).view(b, n, self.h, self.hd).transpose(1, 2)  # (b, h, n, hd)
        k = self.W_key(x).view(b, n, self.h, self.hd).transpose(1, 2)  # (b, h, n, hd)
        v = self.W_value(x).view(b, n, self.h, self.hd).transpose(1, 2)  # (b, h, n, hd)
        if not self.norm_after_rope:
            q, k = self.q_norm(q), self.k_norm(k)  # (b, h, n, hd) each
        q, k = rotate(q, self.cos, self.sin), rotate(k, self.cos, self.sin)  # (b, h, n, hd) each
        if self.norm_after_rope:
            q, k = self.q_norm(q), self.k_norm(k)  # (b, h, n, hd) each
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, n, hd)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, -1))  # (b, n, d_in)


class LayerKind(enum.Enum):
    GLOBAL = 1
    LOCAL_SLIDING = 2


class KindAttention(nn.Module):
    """google/gemma_pytorch's way: every layer keeps ``sliding_window_size``, but only a ``LOCAL_SLIDING`` layer
    (``attn_type``) takes the caller's local mask."""

    def __init__(self, d_model=32, num_heads=4, sliding_window_size=4, attn_type=LayerKind.GLOBAL):
        super().__init__()
        self.h, self.hd = num_heads, d_model // num_heads
        self.attn_type, self.sliding_window_size = attn_type, sliding_window_size
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, mask, local_mask):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, self.hd).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        if self.attn_type == LayerKind.LOCAL_SLIDING and self.sliding_window_size is not None:
            mask = local_mask  # (n, n)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.hd) + mask  # (b, h, n, n)
        return self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))  # (b, n, d)


class KindLayer(nn.Module):
    """The wrapper a user writes around :class:`KindAttention`: the global (causal) mask and the local one, built
    from its own ``window``.  ``local``: a sliding layer; ``forget_window``: the local mask is the causal one (a
    bug on a sliding layer)."""

    def __init__(self, d_model=32, num_heads=4, sliding_window_size=4, local=False, forget_window=False):
        super().__init__()
        kind = LayerKind.LOCAL_SLIDING if local else LayerKind.GLOBAL
        self.attn = KindAttention(d_model, num_heads, sliding_window_size, kind)
        self.window = sliding_window_size
        self.forget_window = forget_window

    def forward(self, x):
        n = x.shape[1]
        mask = torch.full((n, n), float("-inf")).triu(1)  # (n, n): the future hidden
        behind = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # (n, n): query minus key position
        local = mask if self.forget_window else mask.masked_fill(behind >= self.window, float("-inf"))  # (n, n)
        return self.attn(x, mask, local)  # (b, n, d_model)


# ------------------------------------------------- a window_size that is the KV cache's length, and real windows

class CacheLengthMHA(nn.Module):
    """The book's optimized KV-cache MultiHeadAttention (ch04/03_kv-cache), as a learner types it: ``window_size``
    (default: the context) is the length of the KV cache it allocates once, not an attention window — the uncached
    forward attends to every earlier token, and a cached step that overflows the cache shifts out its oldest keys.
    ``bug="drops-newest"``: an overflowing step overwrites the newest cached keys instead.  ``bug="sized-by-context"``:
    the cache is allocated context_length long and overflows against its own size, so it keeps more than W tokens.
    ``bug="one-slot-short"``: the cache is allocated W − 1 long (a rolling window's W − 1 kept before the new token),
    so a full cache's step attends to W − 1 keys."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, window_size=None, bug=None):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.window_size = window_size or context_length
        self.register_buffer("cache_k", None, persistent=False)
        self.register_buffer("cache_v", None, persistent=False)
        self.ptr_cur = 0
        self.context_length, self.bug = context_length, bug

    def forward(self, x, use_cache=False):
        b, num_tokens, _ = x.shape
        queries, keys_new, values_new = (w(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
                                         for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        if use_cache:
            assert num_tokens <= self.window_size, "the chunk is longer than the KV cache"
            if self.cache_k is None or self.cache_k.size(0) != b:
                length = {"sized-by-context": self.context_length,
                          "one-slot-short": self.window_size - 1}.get(self.bug, self.window_size)
                self.cache_k = torch.zeros(b, self.num_heads, length, self.head_dim)  # (b, h, W, hd)
                self.cache_v = torch.zeros_like(self.cache_k)  # (b, h, W, hd)
                self.ptr_cur = 0
            overflow = self.ptr_cur + num_tokens - self.cache_k.size(2)
            if overflow > 0 and self.bug != "drops-newest":  # shift the oldest tokens out
                self.cache_k[:, :, :-overflow] = self.cache_k[:, :, overflow:].clone()  # (b, h, W, hd)
                self.cache_v[:, :, :-overflow] = self.cache_v[:, :, overflow:].clone()  # (b, h, W, hd)
            if overflow > 0:
                self.ptr_cur -= overflow
            self.cache_k[:, :, self.ptr_cur:self.ptr_cur + num_tokens] = keys_new  # (b, h, n, hd) into (b, h, W, hd)
            self.cache_v[:, :, self.ptr_cur:self.ptr_cur + num_tokens] = values_new  # (b, h, n, hd) into (b, h, W, hd)
            self.ptr_cur += num_tokens
            keys, values = self.cache_k[:, :, :self.ptr_cur], self.cache_v[:, :, :self.ptr_cur]  # (b, h, k, hd) each
        else:
            keys, values = keys_new, values_new  # (b, h, n, hd) each
            self.ptr_cur = 0
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, k) -> (b, h, n, k)
        offset = keys.shape[2] - num_tokens  # the cached tokens before the new ones
        mask_bool = torch.arange(num_tokens)[:, None] + offset < torch.arange(keys.shape[2])[None, :]  # (n, k)
        attn_scores.masked_fill_(mask_bool, -torch.inf)  # (b, h, n, k): the future hidden
        attn_weights = self.dropout(torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1))  # (b, h, n, k)
        context_vec = (attn_weights @ values).transpose(1, 2).contiguous().view(b, num_tokens, self.d_out)  # (b, n, d)
        return self.out_proj(context_vec)  # (b, n, d_out)

    def reset_cache(self):
        self.cache_k, self.cache_v = None, None


class LayerKVCache(nn.Module):
    """One layer's KV cache object, as torchtune's and Meta's ``KVCache`` modules are written (an ``nn.Module``, so it
    moves with the model) with the methods of Hugging Face's ``DynamicCache`` and the book's ``KVCache``: ``update``
    stores the new keys and values and hands back all it keeps — the last ``window_size``, the oldest shifted out, as
    the book's optimized class keeps them —, ``get_seq_length`` counts them, ``reset`` empties it.  It has no
    forward: the attention calls its methods."""

    def __init__(self, window_size):
        super().__init__()
        self.window_size = window_size
        self.register_buffer("keys", None, persistent=False)
        self.register_buffer("values", None, persistent=False)

    def update(self, keys_new, values_new):
        if self.keys is not None:
            keys_new = torch.cat([self.keys, keys_new], dim=2)  # (b, h, kept + n, hd)
            values_new = torch.cat([self.values, values_new], dim=2)  # (b, h, kept + n, hd)
        self.keys, self.values = keys_new[:, :, -self.window_size:], values_new[:, :, -self.window_size:]  # ≤ W each
        return self.keys, self.values

    def get_seq_length(self):
        return 0 if self.keys is None else self.keys.shape[2]

    def reset(self):
        self.keys, self.values = None, None


class HeldCacheMHA(nn.Module):
    """The book's MultiHeadAttention holding its KV cache in a cache object (``self.kv_cache = LayerKVCache(W)``)
    rather than in buffers of its own: ``window_size`` (default: the context) is the cache's length, not an attention
    window — the uncached forward attends to every earlier token, a cached step to the W tokens the cache keeps.  Its
    own code never reads the window: the cache keeps it."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, window_size=None):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.kv_cache = LayerKVCache(window_size or context_length)
        self.ptr_current_pos = 0

    def forward(self, x, use_cache=False):
        b, num_tokens, _ = x.shape
        queries, keys, values = (w(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        start = 0
        if use_cache:
            keys, values = self.kv_cache.update(keys, values)  # (b, h, ≤ W, hd) each
            start = self.ptr_current_pos
            self.ptr_current_pos += num_tokens
        k = keys.shape[2]
        query_pos = torch.arange(start, start + num_tokens)[:, None]  # (n, 1)
        key_pos = torch.arange(start + num_tokens - k, start + num_tokens)[None, :]  # (1, k)
        attn_scores = (queries @ keys.transpose(2, 3)).masked_fill(key_pos > query_pos, -torch.inf)  # (b, h, n, k)
        attn_weights = self.dropout(torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1))  # (b, h, n, k)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)

    def reset_cache(self):
        self.kv_cache.reset()
        self.ptr_current_pos = 0


class HeldCacheChecksItsChunk(HeldCacheMHA):
    """:class:`HeldCacheMHA` whose cached forward first checks that its chunk fits the cache's window."""

    def forward(self, x, use_cache=False):
        if use_cache:
            assert x.shape[1] <= self.kv_cache.window_size, "the chunk is longer than the KV cache"
        return super().forward(x, use_cache)


class PlainKVCache:
    """One layer's KV cache written as the book's ``KVCache`` (rasbt/LLMs-from-scratch, ``pkg/llms_from_scratch/
    kv_cache/utils.py``) and Hugging Face's ``DynamicCache`` are: a plain Python object, not an ``nn.Module``, with
    ``update``, ``get_seq_length`` and ``reset``; ``update`` keeps the last ``window_size`` keys and values, the oldest
    shifted out, and hands back the last ``window_size`` of those it kept and the new ones.  ``bug="keeps-too-few"``:
    it keeps two fewer than ``window_size``."""

    def __init__(self, window_size, bug=None):
        self.window_size = window_size
        self.keys, self.values = None, None
        self.bug = bug

    def update(self, keys_new, values_new):
        if self.keys is not None:
            keys_new = torch.cat([self.keys, keys_new], dim=2)  # (b, h, kept + n, hd)
            values_new = torch.cat([self.values, values_new], dim=2)  # (b, h, kept + n, hd)
        keep = self.window_size - 2 if self.bug == "keeps-too-few" else self.window_size
        self.keys, self.values = keys_new[:, :, -keep:], values_new[:, :, -keep:]  # ≤ W each
        return keys_new[:, :, -self.window_size:], values_new[:, :, -self.window_size:]  # ≤ W each

    def get_seq_length(self):
        return 0 if self.keys is None else self.keys.shape[2]

    def reset(self):
        self.keys, self.values = None, None


def causal_context(queries, keys, values, start):
    """softmax(QKᵀ/√hd)·V for ``queries`` at positions start … start + n − 1 over the last ``keys`` up to them, the
    future hidden: (b, h, n, hd)."""
    num_tokens, k = queries.shape[2], keys.shape[2]
    query_pos = torch.arange(start, start + num_tokens)[:, None]  # (n, 1)
    key_pos = torch.arange(start + num_tokens - k, start + num_tokens)[None, :]  # (1, k)
    attn_scores = (queries @ keys.transpose(2, 3)).masked_fill(key_pos > query_pos, -torch.inf)  # (b, h, n, k)
    return torch.softmax(attn_scores / queries.shape[-1] ** 0.5, dim=-1) @ values  # (b, h, n, hd)


class PlainCacheMHA(nn.Module):
    """:class:`HeldCacheMHA` holding its cache in a plain object (``self.kv_cache = PlainKVCache(W)``), as code
    written after the book's and Hugging Face's caches holds one: ``window_size`` is the cache's length."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, window_size=None, bug=None):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.kv_cache = PlainKVCache(window_size or context_length, bug=bug)
        self.ptr_current_pos = 0

    def forward(self, x, use_cache=False):
        b, num_tokens, _ = x.shape
        queries, keys, values = (w(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        start = 0
        if use_cache:
            keys, values = self.kv_cache.update(keys, values)  # (b, h, ≤ W, hd) each
            start = self.ptr_current_pos
            self.ptr_current_pos += num_tokens
        context_vec = causal_context(queries, keys, values, start).transpose(1, 2)  # (b, n, h, hd)
        return self.out_proj(context_vec.reshape(b, num_tokens, self.d_out))  # (b, n, d_out)

    def reset_cache(self):
        self.kv_cache.reset()
        self.ptr_current_pos = 0


class PlainCachePerLayerMHA(nn.Module):
    """:class:`PlainCacheMHA` keeping its plain cache objects in a dict, one per layer, and using its own layer's
    (``self.kv_caches[self.layer_idx]``), as a model that hands each layer its cache keeps them."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, window_size=None, layer_idx=0,
                 n_layers=2):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.kv_caches = {i: PlainKVCache(window_size or context_length) for i in range(n_layers)}
        self.layer_idx, self.ptr_current_pos = layer_idx, 0

    def forward(self, x, use_cache=False):
        b, num_tokens, _ = x.shape
        queries, keys, values = (w(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        start = 0
        if use_cache:
            keys, values = self.kv_caches[self.layer_idx].update(keys, values)  # (b, h, ≤ W, hd) each
            start = self.ptr_current_pos
            self.ptr_current_pos += num_tokens
        context_vec = causal_context(queries, keys, values, start).transpose(1, 2)  # (b, n, h, hd)
        return self.out_proj(context_vec.reshape(b, num_tokens, self.d_out))  # (b, n, d_out)

    def reset_cache(self):
        for cache in self.kv_caches.values():
            cache.reset()
        self.ptr_current_pos = 0


class CacheLengthRotary(nn.Module):
    """The book's optimized KV-cache MultiHeadAttention with rotary embeddings (Llama's halves layout), as a learner
    adds them to it: ``window_size`` is the KV cache's length, the cache shifts its oldest keys out once full, and the
    new queries and keys are rotated at ``pos``, a count of the tokens fed.  ``bug="fill-pointer-angles"``: they are
    rotated at ``ptr_cur``, the cache's fill pointer, which the shift moves back: right until the cache is full."""

    def __init__(self, d_in=16, d_out=16, context_length=16, num_heads=4, window_size=4, bug=None):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.window_size = window_size or context_length
        cos, sin = rope_angles(self.head_dim, context_length)
        self.register_buffer("cos", cos, persistent=False)  # (context_length, head_dim)
        self.register_buffer("sin", sin, persistent=False)  # (context_length, head_dim)
        self.register_buffer("cache_k", None, persistent=False)
        self.register_buffer("cache_v", None, persistent=False)
        self.ptr_cur, self.pos, self.bug = 0, 0, bug

    def forward(self, x, use_cache=False):
        b, num_tokens, _ = x.shape
        queries, keys_new, values_new = (w(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
                                         for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        if use_cache:
            if self.cache_k is None or self.cache_k.size(0) != b:
                self.cache_k = torch.zeros(b, self.num_heads, self.window_size, self.head_dim)  # (b, h, W, hd)
                self.cache_v = torch.zeros_like(self.cache_k)  # (b, h, W, hd)
                self.ptr_cur, self.pos = 0, 0
            if self.ptr_cur + num_tokens > self.window_size:  # shift the oldest tokens out
                overflow = self.ptr_cur + num_tokens - self.window_size
                self.cache_k[:, :, :-overflow] = self.cache_k[:, :, overflow:].clone()  # (b, h, W, hd)
                self.cache_v[:, :, :-overflow] = self.cache_v[:, :, overflow:].clone()  # (b, h, W, hd)
                self.ptr_cur -= overflow
            start = self.ptr_cur if self.bug == "fill-pointer-angles" else self.pos
            queries = rotate(queries, self.cos, self.sin, start)  # (b, h, n, hd)
            keys_new = rotate(keys_new, self.cos, self.sin, start)  # (b, h, n, hd)
            self.cache_k[:, :, self.ptr_cur:self.ptr_cur + num_tokens] = keys_new  # (b, h, n, hd) into (b, h, W, hd)
            self.cache_v[:, :, self.ptr_cur:self.ptr_cur + num_tokens] = values_new  # (b, h, n, hd) into (b, h, W, hd)
            self.ptr_cur += num_tokens
            self.pos += num_tokens
            keys, values = self.cache_k[:, :, :self.ptr_cur], self.cache_v[:, :, :self.ptr_cur]  # (b, h, k, hd) each
        else:
            queries = rotate(queries, self.cos, self.sin)  # (b, h, n, hd)
            keys, values = rotate(keys_new, self.cos, self.sin), values_new  # (b, h, n, hd) each
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, k) -> (b, h, n, k)
        offset = keys.shape[2] - num_tokens  # the cached tokens before the new ones
        mask_bool = torch.arange(num_tokens)[:, None] + offset < torch.arange(keys.shape[2])[None, :]  # (n, k)
        attn_scores.masked_fill_(mask_bool, -torch.inf)  # (b, h, n, k): the future hidden
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, k)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)

    def reset_cache(self):
        self.cache_k, self.cache_v = None, None


class WindowSizeSWA(nn.Module):
    """Sliding-window attention whose window is called ``window_size`` (query i sees keys i - W + 1 … i, cached or
    not), with a KV cache that keeps the last W tokens.  ``bug="window-never-applied"``: the mask hides the future
    alone."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, window_size=3, bug=None):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.window_size, self.bug = window_size, bug
        self.cache_k = self.cache_v = None

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries, keys, values = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        if use_cache:
            if self.cache_k is not None:
                keys = torch.cat([self.cache_k, keys], dim=2)  # (b, h, cached + n, hd)
                values = torch.cat([self.cache_v, values], dim=2)  # (b, h, cached + n, hd)
            self.cache_k, self.cache_v = keys[:, :, -self.window_size:], values[:, :, -self.window_size:]  # ≤ W
        k = keys.shape[2]
        diff = torch.arange(k - n, k)[:, None] - torch.arange(k)[None, :]  # (n, k): how far back each key is
        too_far = diff >= self.window_size  # (n, k)
        hidden = diff < 0 if self.bug == "window-never-applied" else (diff < 0) | too_far  # (n, k)
        attn_scores = (queries @ keys.transpose(2, 3)).masked_fill(hidden, -torch.inf)  # (b, h, n, k)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, k)
        return self.out_proj((attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out))  # (b, n, d_out)

    def reset_cache(self):
        self.cache_k = self.cache_v = None


class WindowSizeTrim(nn.Module):
    """A ``window_size`` read only where the forward caches, as the book's optimized MultiHeadAttention reads its
    KV cache's length: the cache keeps the last W tokens, the new ones included, so a cached step attends to at most W
    keys; every mask hides the future alone.  ``cfg``: a config dict it keeps as ``self.cfg``."""

    def __init__(self, d_in=16, d_out=16, num_heads=4, window_size=3, cfg=None):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.window_size, self.cfg = window_size, cfg
        self.cache_k = self.cache_v = None
        self.ptr_current_pos = 0

    def cached(self, keys, values, n):
        """The keys and values a cached forward attends to (the last W, the new ones included), and the first new
        token's position."""
        if self.cache_k is not None:
            keys = torch.cat([self.cache_k, keys], dim=2)  # (b, h, cached + n, hd)
            values = torch.cat([self.cache_v, values], dim=2)  # (b, h, cached + n, hd)
        self.cache_k, self.cache_v = keys[:, :, -self.window_size:], values[:, :, -self.window_size:]  # ≤ W each
        start = self.ptr_current_pos
        self.ptr_current_pos += n
        return self.cache_k, self.cache_v, start

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries, keys, values = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        start = 0
        if use_cache:
            keys, values, start = self.cached(keys, values, n)  # (b, h, ≤ W, hd) each
        k = keys.shape[2]
        diff = torch.arange(start, start + n)[:, None] - torch.arange(start + n - k, start + n)[None, :]  # (n, k)
        attn_scores = (queries @ keys.transpose(2, 3)).masked_fill(diff < 0, -torch.inf)  # (b, h, n, k)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, k)
        return self.out_proj((attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out))  # (b, n, d_out)

    def reset_cache(self):
        self.cache_k = self.cache_v = None
        self.ptr_current_pos = 0


class WindowSizeTrimMasked(WindowSizeTrim):
    """A ``window_size`` that the cached forwards also mask with, as the book's bonus class caches its window — a
    cached forward sees the W − 1 cached keys before its chunk and the chunk, the keys W or more behind hidden, and the
    cache keeps the last W —, while the uncached mask hides the future alone: a window forgotten in the uncached
    mask."""

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries, keys, values = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        start, hidden_far = 0, None
        if use_cache:
            if self.cache_k is not None:
                keys = torch.cat([self.cache_k, keys], dim=2)  # (b, h, cached + n, hd)
                values = torch.cat([self.cache_v, values], dim=2)  # (b, h, cached + n, hd)
            self.cache_k, self.cache_v = keys[:, :, -self.window_size:], values[:, :, -self.window_size:]  # ≤ W each
            keep = self.window_size + n - 1  # the keys the chunk's first query sees, and the chunk
            keys, values = keys[:, :, -keep:], values[:, :, -keep:]  # (b, h, ≤ W + n − 1, hd) each
            start = self.ptr_current_pos
            self.ptr_current_pos += n
            hidden_far = self.window_size
        k = keys.shape[2]
        diff = torch.arange(start, start + n)[:, None] - torch.arange(start + n - k, start + n)[None, :]  # (n, k)
        hidden = diff < 0  # (n, k)
        if hidden_far is not None:
            hidden = hidden | (diff >= hidden_far)  # (n, k)
        attn_scores = (queries @ keys.transpose(2, 3)).masked_fill(hidden, -torch.inf)  # (b, h, n, k)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, k)
        return self.out_proj((attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out))  # (b, n, d_out)


class WindowSizeTrimBand(WindowSizeTrim):
    """:class:`WindowSizeTrimMasked` with its cached forwards' window mask made by a method of its own that is given
    the window, ``self.band(diff, self.window_size)``: a window forgotten in the uncached mask."""

    def band(self, diff, far):
        """The hidden cells (n, k) of a sliding window of ``far`` keys: the future and the keys far or more behind."""
        return (diff < 0) | (diff >= far)

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries, keys, values = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        start = 0
        if use_cache:
            keys, values, start = self.cached(keys, values, n)  # (b, h, ≤ W, hd) each
        k = keys.shape[2]
        diff = torch.arange(start, start + n)[:, None] - torch.arange(start + n - k, start + n)[None, :]  # (n, k)
        hidden = self.band(diff, self.window_size) if use_cache else diff < 0  # (n, k)
        attn_scores = (queries @ keys.transpose(2, 3)).masked_fill(hidden, -torch.inf)  # (b, h, n, k)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, k)
        return self.out_proj((attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out))  # (b, n, d_out)


class WindowSizeTrimOwnBand(WindowSizeTrimBand):
    """:class:`WindowSizeTrimBand` whose mask method reads the window itself, called as ``self.band(diff, None)``."""

    def band(self, diff, far):
        return (diff < 0) | (diff >= self.window_size)


class SlidingWindowMHA(WindowSizeTrim):
    pass


class SlidingWindowAttentionWithCache(WindowSizeTrim):
    pass


class DocumentedTrim(WindowSizeTrim):
    """Sliding-window attention over the last window_size tokens."""


class TrimFromArgument(WindowSizeTrim):
    def __init__(self, d_in=16, d_out=16, num_heads=4, sliding_window=3):
        super().__init__(d_in, d_out, num_heads)
        self.window_size = sliding_window


class LowPrecisionScratch(nn.Module):
    """Computes and caches in float32, and keeps each cached step's context in bfloat16 (``last_context``, for a
    display: half the memory) — a lower-precision tensor that is not the cache.  ``bug="cached-scale"``: a cached
    step divides the scores by √head_dim rounded to one decimal (2.8 for √8), its outputs off by about 1e-3."""

    def __init__(self, n_embd=32, n_head=4, bug=None):
        super().__init__()
        self.n_head, self.n_embd, self.bug = n_head, n_embd, bug
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.k_cache = self.v_cache = self.last_context = None

    def reset_cache(self):
        self.k_cache = self.v_cache = None

    def forward(self, x, use_cache=False):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)  # (B, T, C) each
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, h, T, hs)
        past = 0
        if use_cache:
            if self.k_cache is not None:
                past = self.k_cache.shape[2]
                k = torch.cat([self.k_cache, k], dim=2)  # (B, h, past + T, hs)
                v = torch.cat([self.v_cache, v], dim=2)  # (B, h, past + T, hs)
            self.k_cache, self.v_cache = k, v  # (B, h, past + T, hs) each
        scale = math.sqrt(k.shape[-1])
        if use_cache and past > 0 and self.bug == "cached-scale":
            scale = round(scale, 1)  # √8 = 2.83 taken as 2.8
        att = (q @ k.transpose(-2, -1)) / scale  # (B, h, T, past + T)
        hidden = torch.arange(k.shape[2])[None, :] > torch.arange(past, past + T)[:, None]  # (T, past + T)
        y = att.masked_fill(hidden, float("-inf")).softmax(dim=-1) @ v  # (B, h, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        if use_cache:
            self.last_context = y.detach().to(torch.bfloat16)  # (B, T, C): kept for a display
        return self.c_proj(y)  # (B, T, C)


class WeightlessScaled(nn.Module):
    """No weights and no constructor of its own: q = k = v = x, the scores divided by √d_in, the future hidden."""

    def forward(self, x):
        n = x.shape[1]
        attn_scores = x @ x.transpose(1, 2) / x.shape[-1] ** 0.5  # (b, n, d) @ (b, d, n) -> (b, n, n)
        future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n)
        attn_weights = attn_scores.masked_fill(future, float("-inf")).softmax(dim=-1)  # (b, n, n)
        return attn_weights @ x  # (b, n, n) @ (b, n, d) -> (b, n, d)


class WeightlessUnscaled(nn.Module):
    """The book's simplified self-attention (3.3) made causal: no weights, the scores not scaled."""

    def forward(self, x):
        n = x.shape[1]
        attn_scores = x @ x.transpose(1, 2)  # (b, n, d) @ (b, d, n) -> (b, n, n)
        future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n)
        attn_weights = attn_scores.masked_fill(future, float("-inf")).softmax(dim=-1)  # (b, n, n)
        return attn_weights @ x  # (b, n, n) @ (b, n, d) -> (b, n, d)


class WeightlessSDPA(nn.Module):
    """No weights: x as query, key and value of scaled_dot_product_attention, which divides by √d_in itself."""

    def forward(self, x):
        return F.scaled_dot_product_attention(x, x, x, is_causal=True)  # (b, n, d)


class WeightlessOverD(nn.Module):
    """No weights, the scores divided by d_in without the square root."""

    def forward(self, x):
        n = x.shape[1]
        attn_scores = x @ x.transpose(1, 2) / x.shape[-1]  # (b, n, d) @ (b, d, n) -> (b, n, n)
        future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n)
        attn_weights = attn_scores.masked_fill(future, float("-inf")).softmax(dim=-1)  # (b, n, n)
        return attn_weights @ x  # (b, n, n) @ (b, n, d) -> (b, n, d)


class ZeroFilledMask(nn.Module):
    """The book's MultiHeadAttention with the future filled with 0 instead of −∞: ``s.masked_fill(mask, 0.0)`` (the
    copy is kept) before ÷ √head_dim — a score of 0 still gets weight, so every query sees the future."""

    def __init__(self, d_in=16, d_out=16, context_length=16, num_heads=4):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, n, _ = x.shape
        q = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        k = self.W_key(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        v = self.W_value(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        s = q @ k.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
        s = s.masked_fill(self.mask.bool()[:n, :n], 0.0)  # (b, h, n, n): 0, not -inf, above the diagonal
        w = torch.softmax(s / self.head_dim ** 0.5, dim=-1)  # (b, h, n, n)
        return self.out_proj((w @ v).transpose(1, 2).contiguous().view(b, n, -1))  # (b, n, d_out)


class MaskedFillCopy(MyMultiHeadAttention):
    """The book's MultiHeadAttention typed with ``masked_fill`` (no underscore): it means to mask the future (its mask
    buffer is triangular) and does not."""

    def __init__(self, d_in=16, d_out=16, context_length=16, dropout=0.0, num_heads=4, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias, bug="masked-fill-copy")


class CausalFlashAttention(nn.Module):
    """nanoGPT's CausalSelfAttention, its flash path alone, calling SDPA with ``is_causal=False`` (a bug: nothing
    hides the future, and nothing but its name says it should)."""

    def __init__(self, n_embd=16, n_head=2):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)  # (B, T, C) each
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal=False)  # bug: the flash path unmasked
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))  # (B, T, C)


class FlashWithUnusedBias(CausalFlashAttention):
    """The same with nanoGPT's causal ``bias`` buffer registered for its slow path: the buffer says causal."""

    def __init__(self, n_embd=16, n_head=2, block_size=16):
        super().__init__(n_embd, n_head)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))


class WrappedMHABoolMask(nn.Module):
    """nn.MultiheadAttention given a boolean attn_mask (True = hide): ``mask`` "future" (right), "past" (bug:
    tril(…, -1), the past hidden) or "kept" (bug: the future's complement, SDPA's convention: the past and the
    diagonal hidden)."""

    def __init__(self, embed_dim=16, num_heads=2, mask="future"):
        super().__init__()
        self.mask = mask
        self.mha = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)

    def forward(self, x):
        n = x.shape[1]
        future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n): True above the diagonal
        attn_mask = {"future": future, "past": torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1),
                     "kept": ~future}[self.mask]
        out, _ = self.mha(x, x, x, attn_mask=attn_mask, need_weights=False)  # (b, n, embed_dim)
        return out


class CausalMHA(nn.Module):
    """nn.MultiheadAttention (batch_first) made causal as learners write it, ``how``: "bool" (a boolean triu mask, True
    = hide), "float" (−∞ above the diagonal), "hint" (the boolean mask and ``is_causal=True``); bugs: "hint-only"
    (``is_causal=True`` and no mask), "hint-past" (``is_causal=True`` with a mask that hides the past) and
    "hint-window" (``is_causal=True`` with a sliding window of 3, which torch's general path ignores); and
    "hint-window-weights", the same with ``need_weights=True``, where both of torch's paths apply the window."""

    def __init__(self, embed_dim=16, num_heads=2, how="bool"):
        super().__init__()
        self.how = how
        self.mha = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)

    def forward(self, x):
        n = x.shape[1]
        future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n): True above the diagonal
        attn_mask = {"bool": future, "hint": future, "hint-only": None,
                     "float": torch.zeros(n, n).masked_fill(future, float("-inf")),
                     "hint-past": torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1),
                     "hint-window": future | torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-3)}[
            self.how.removesuffix("-weights")]
        out, _ = self.mha(x, x, x, attn_mask=attn_mask, need_weights=self.how.endswith("-weights"),
                          is_causal=self.how.startswith("hint"))  # (b, n, embed_dim)
        return out


class DiagonalHidden(nn.Module):
    """Bug: a mask one off — each query hides itself too (Hugging Face's additive ``torch.finfo.min`` triangle built
    with ``triu(0)``, or ``q_pos <= k_pos`` with −∞ as in an MLA port): query 0 hides every key.  ``fill``: "min"
    (finite: query 0's softmax spreads over every key, the future's too) or "-inf" (query 0's weights are NaN)."""

    def __init__(self, hidden_size=16, num_heads=2, fill="min"):
        super().__init__()
        self.num_heads, self.head_dim, self.fill = num_heads, hidden_size // num_heads, fill
        self.q_proj = nn.Linear(hidden_size, hidden_size)
        self.k_proj = nn.Linear(hidden_size, hidden_size)
        self.v_proj = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden_states):
        b, n, _ = hidden_states.shape
        q, k, v = (p(hidden_states).view(b, n, -1, self.head_dim).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))  # (b, h, n, hd) each
        s = q @ k.transpose(2, 3) * self.head_dim ** -0.5  # (b, h, n, n)
        if self.fill == "min":
            s = s + torch.full((n, n), torch.finfo(s.dtype).min).triu(0)  # bug: triu(1) hides only the future
        else:
            pos = torch.arange(n)
            s = s.masked_fill(pos[:, None] <= pos[None, :], -torch.inf)  # bug: < hides only the future
        w = torch.softmax(s, dim=-1)  # (b, h, n, n)
        return (w @ v).transpose(1, 2).reshape(b, n, -1)  # (b, n, hidden_size)


class RotaryLayouts(nn.Module):
    """Llama-style attention whose rotary table and rotation each pair features their own way: ``table`` "half"
    (``torch.cat([angles, angles])``, Hugging Face's) or "interleaved" (``angles.repeat_interleave(2)``, Meta's
    complex pairs as real numbers); ``rotation`` "half" (``rotate_half``) or "interleaved" (``x[..., ::2]``,
    ``x[..., 1::2]``).  Alike, a rotary embedding; mixed, a bug of ports that take one from each."""

    def __init__(self, d_model=32, n_heads=2, context_length=16, table="half", rotation="half"):
        super().__init__()
        self.n_heads, self.head_dim, self.rotation = n_heads, d_model // n_heads, rotation
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        inv_freq = 1.0 / 10_000.0 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim)  # (hd/2,)
        angles = torch.arange(context_length).float()[:, None] * inv_freq[None, :]  # (context, hd/2)
        angles = torch.cat([angles, angles], -1) if table == "half" else angles.repeat_interleave(2, dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)  # (context, hd)
        self.register_buffer("sin", angles.sin(), persistent=False)  # (context, hd)

    def rotate(self, x):
        if self.rotation == "half":
            half = x.shape[-1] // 2
            return torch.cat([-x[..., half:], x[..., :half]], dim=-1)  # (b, h, n, hd)
        return torch.stack([-x[..., 1::2], x[..., ::2]], dim=-1).flatten(-2)  # (b, h, n, hd)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        cos, sin = self.cos[:n], self.sin[:n]  # (n, hd)
        q, k = q * cos + self.rotate(q) * sin, k * cos + self.rotate(k) * sin  # (b, h, n, hd)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, n, hd)
        return y.transpose(1, 2).reshape(b, n, d)  # (b, n, d_model)


class LearnerCausalAttention(nn.Module):
    """The book's CausalAttention (section 3.5.3) as a learner types it: one head, dropout on the weights."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys, queries, values = self.W_key(x), self.W_query(x), self.W_value(x)  # (b, n, d_out) each
        attn_scores = queries @ keys.transpose(1, 2)  # (b, n, d_out) @ (b, d_out, n) -> (b, n, n)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (b, n, n)
        attn_weights = self.dropout(attn_weights)
        return attn_weights @ values  # (b, n, n) @ (b, n, d_out) -> (b, n, d_out)


class LearnerMHAWrapper(nn.Module):
    """The book's MultiHeadAttentionWrapper (section 3.6.1): its heads, one CausalAttention each, concatenated."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [LearnerCausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)])

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)  # (b, n, num_heads * d_out)


class LearnerEvalDropoutHead(LearnerCausalAttention):
    """The book's CausalAttention with the dropout typed as ``F.dropout(w, p)``, without ``training=``: it drops in
    eval mode too (a learner's bug)."""

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys, queries, values = self.W_key(x), self.W_query(x), self.W_value(x)  # (b, n, d_out) each
        attn_scores = queries @ keys.transpose(1, 2)  # (b, n, d_out) @ (b, d_out, n) -> (b, n, n)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (b, n, n)
        attn_weights = F.dropout(attn_weights, p=self.dropout.p)  # training defaults to True
        return attn_weights @ values  # (b, n, n) @ (b, n, d_out) -> (b, n, d_out)


class LearnerEvalDropoutWrapper(nn.Module):
    """The book's MultiHeadAttentionWrapper over heads that drop in eval mode too."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [LearnerEvalDropoutHead(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)])

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)  # (b, n, num_heads * d_out)


class SmallGPT(nn.Module):
    """A small GPT a learner writes after chapter 4: pre-norm blocks of MyMultiHeadAttention and a feed-forward, each
    with a residual; ``last_bug``: one of MyMultiHeadAttention's bugs in the last block's attention alone (the first
    blocks are right); ``first_bug``: one in the first block's alone."""

    def __init__(self, d_in=16, num_heads=4, n_layers=2, context_length=16, last_bug=None, first_bug=None):
        super().__init__()
        self.d_in = d_in
        self.norms = nn.ModuleList(nn.LayerNorm(d_in) for _ in range(n_layers))
        bugs = [first_bug, *[None] * (n_layers - 2), last_bug]
        self.attns = nn.ModuleList(MyMultiHeadAttention(d_in, d_in, context_length, 0.0, num_heads, bug=bug)
                                   for bug in bugs)
        self.ffs = nn.ModuleList(nn.Sequential(nn.Linear(d_in, 4 * d_in), nn.GELU(), nn.Linear(4 * d_in, d_in))
                                 for _ in range(n_layers))

    def forward(self, x):
        for norm, attn, ff in zip(self.norms, self.attns, self.ffs):
            x = x + attn(norm(x))  # (b, n, d_in)
            x = x + ff(x)  # (b, n, d_in)
        return x


class TransformerBlock(nn.Module):
    """The book's chapter 4 block: x + att(norm1(x)), then x + ff(norm2(x)); ``att``: the block's attention layer."""

    def __init__(self, att, d_in):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_in), nn.LayerNorm(d_in)
        self.att = att
        self.ff = nn.Sequential(nn.Linear(d_in, 4 * d_in), nn.GELU(), nn.Linear(4 * d_in, d_in))

    def forward(self, x):
        x = x + self.att(self.norm1(x))  # (b, n, d_in)
        return x + self.ff(self.norm2(x))  # (b, n, d_in)


class LocalGlobalGPT(nn.Module):
    """A small GPT whose blocks alternate local and global attention, as Gemma's and GPT-OSS's do: the first block's
    attention a sliding window (LearnerSWA), the second the book's MultiHeadAttention (MyMultiHeadAttention)."""

    def __init__(self, d_in=16, num_heads=2, context_length=16, sliding_window_size=3):
        super().__init__()
        self.d_in = d_in
        self.trf_blocks = nn.Sequential(
            TransformerBlock(LearnerSWA(d_in, d_in, context_length, 0.0, num_heads, sliding_window_size), d_in),
            TransformerBlock(MyMultiHeadAttention(d_in, d_in, context_length, 0.0, num_heads), d_in))

    def forward(self, x):
        return self.trf_blocks(x)  # (b, n, d_in)


def masked_softmax(attn_scores, mask_bool):
    """The causal softmax a learner factors out of their attention: the future filled with −∞, then normalised."""
    attn_scores = attn_scores.masked_fill(mask_bool, -torch.inf)  # (b, h, n, n)
    return torch.softmax(attn_scores, dim=-1)  # (b, h, n, n)


class HelperMethodAttention(nn.Module):
    """Multi-head attention whose forward splits the heads and hands them to a method of its own, ``attend``, which
    calls a function of the file, :func:`masked_softmax`."""

    def __init__(self, d_in=16, d_out=16, context_length=16, dropout=0.0, num_heads=4):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_qkv = nn.Linear(d_in, 3 * d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def attend(self, queries, keys, values):
        n = queries.shape[2]
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
        attn_weights = masked_softmax(attn_scores / self.head_dim ** 0.5, self.mask.bool()[:n, :n])  # (b, h, n, n)
        return self.dropout(attn_weights) @ values  # (b, h, n, n) @ (b, h, n, hd) -> (b, h, n, hd)

    def forward(self, x):
        b, n, _ = x.shape
        queries, keys, values = (t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                 for t in self.W_qkv(x).split(self.d_out, dim=-1))  # (b, h, n, hd) each
        context_vec = self.attend(queries, keys, values).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)


class WindowThenFull(nn.Module):
    """A window layer (LearnerSWA, ``sliding_window_size`` W), then a plain MyMultiHeadAttention that keeps no window
    attribute at all, each with a residual; ``window_bug``: LearnerSWA's bug in the window layer; ``full_first``: the
    plain layer comes first."""

    def __init__(self, d_in=16, num_heads=2, sliding_window_size=3, window_bug=None, full_first=False):
        super().__init__()
        self.d_in = d_in
        window = LearnerSWA(d_in, d_in, 16, 0.0, num_heads, sliding_window_size, bug=window_bug)
        full = MyMultiHeadAttention(d_in, d_in, 16, 0.0, num_heads)
        self.layers = nn.ModuleList([full, window] if full_first else [window, full])

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)  # (b, n, d_in)
        return x


class CachedWindowBesideFull(nn.Module):
    """Two cached layers, each with a residual: the learner's sliding-window layer (LearnerCachedSWA, whose cache
    keeps the last W tokens) and the book's cached MultiHeadAttention (LearnerCachedMHA), which keeps no window
    attribute at all and whose cache keeps every token; ``window_keeps_all``: the window layer's cache keeps every
    token too (a bug)."""

    def __init__(self, d_in=16, num_heads=2, sliding_window_size=3, window_keeps_all=False):
        super().__init__()
        self.d_in = d_in
        self.window = LearnerCachedSWA(d_in, d_in, 16, 0.0, num_heads, sliding_window_size,
                                       bug="keeps-all" if window_keeps_all else None)
        self.full = LearnerCachedMHA(d_in, d_in, 16, 0.0, num_heads)

    def forward(self, x, use_cache=False):
        x = x + self.window(x, use_cache=use_cache)  # (b, n, d_in)
        return x + self.full(x, use_cache=use_cache)  # (b, n, d_in)

    def reset_kv_cache(self):
        self.window.reset_cache()
        self.full.reset_cache()


class CachedLayers(nn.Module):
    """Cached attention layers (each a learner's class that takes ``use_cache`` and has ``reset_cache()``: the book's
    cached MultiHeadAttention, its GQA, its sliding-window attention), one after the other with a residual, as a
    model passes ``use_cache`` to its layers and ``reset_kv_cache()`` resets them all."""

    def __init__(self, *layers, d_in=16):
        super().__init__()
        self.d_in = d_in
        self.layers = nn.ModuleList(layers)

    def forward(self, x, use_cache=False):
        for layer in self.layers:
            x = x + layer(x, use_cache=use_cache)  # (b, n, d_in)
        return x

    def reset_kv_cache(self):
        for layer in self.layers:
            layer.reset_cache()


class WrapsCachedAttention(nn.Module):
    """A block that wraps one cached attention and hands it ``use_cache`` and the reset: it keeps no window or size of
    its own."""

    def __init__(self, attn, d_in=16):
        super().__init__()
        self.d_in = d_in
        self.attn = attn

    def forward(self, x, use_cache=False):
        return self.attn(x, use_cache=use_cache)  # (b, n, d_in)

    def reset_cache(self):
        self.attn.reset_cache()


class PastWindow(PastArgument):
    """:class:`PastArgument` with a sliding window of ``sliding_window_size`` W (None: full attention): query i sees
    keys i − W + 1 … i, and the present it hands back keeps the last W tokens' keys and values, all the window needs;
    ``keeps_all``: it hands back every token's (the mask still applies W)."""

    def __init__(self, n_embd=32, n_head=4, sliding_window_size=None, keeps_all=False, bug=None):
        super().__init__(n_embd, n_head, bug)
        self.sliding_window_size, self.keeps_all = sliding_window_size, keeps_all

    def attend(self, x, past):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)  # (B, T, C) each
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, h, T, hs)
        cached = 0
        if past is not None:
            cached = past[0].shape[2]
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)  # (B, h, cached + T, hs) each
        start = 0 if self.bug == "mask-ignores-past" else cached
        behind = torch.arange(start, start + T)[:, None] - torch.arange(k.shape[2])[None, :]  # (T, cached + T)
        window = self.sliding_window_size
        keep = behind >= 0 if window is None else (behind >= 0) & (behind < window)  # (T, cached + T)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)  # (B, h, T, hs)
        kept = k.shape[2] if window is None or self.keeps_all else window
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C)), (k[:, :, -kept:], v[:, :, -kept:])  # (B, T, C), present


class PastLayers(nn.Module):
    """Residual attention layers whose caches the caller holds, GPT-2's legacy way: ``forward(x,
    past_key_values=None) -> (out, presents)``, one (k, v) per layer, each layer given its own; ``layers``: built
    :class:`PastArgument` or :class:`PastWindow` layers."""

    def __init__(self, *layers, n_embd=32):
        super().__init__()
        self.d_in = n_embd
        self.layers = nn.ModuleList(layers)

    def forward(self, x, past_key_values=None):
        pasts = past_key_values or [None] * len(self.layers)
        presents = []
        for layer, past in zip(self.layers, pasts):
            out, present = layer.attend(x, past)  # (B, T, C), (k, v)
            x = x + out  # (B, T, C)
            presents.append(present)
        return x, tuple(presents)
