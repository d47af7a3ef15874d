"""Pitfall lab, the bugs: seven classic attention bugs, each one line away from the book's MultiHeadAttention.

Pure torch: no figures, no Streamlit.
"""

from __future__ import annotations

import torch
from torch import nn

from attnviz.attention import MultiHeadAttention, Recorder, record

# --------------------------------------------------------------------------- the correct code, with hooks

class LabMultiHeadAttention(MultiHeadAttention):
    """The book's ``MultiHeadAttention.forward`` line for line; the five lines the pitfalls change are
    methods, so a bug is a one-method subclass.  Bitwise equal to the book's class (tested)."""

    def forward(self, x: torch.Tensor, trace: Recorder | None = None) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, n, d_in)
        keys = self.W_key(x)  # (b, n, d_in) -> (b, n, d_out)
        queries = self.W_query(x)  # (b, n, d_out)
        values = self.W_value(x)  # (b, n, d_out)
        record(trace, "queries", queries)
        record(trace, "keys", keys)
        record(trace, "values", values)

        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, n, d_out) -> (b, n, h, hd)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, n, h, hd)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, n, h, hd)
        keys = keys.transpose(1, 2)  # (b, n, h, hd) -> (b, h, n, hd)
        queries = queries.transpose(1, 2)  # (b, h, n, hd)
        values = values.transpose(1, 2)  # (b, h, n, hd)

        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
        record(trace, "scores", attn_scores)
        attn_scores = self.scale(attn_scores, keys)  # (b, h, n, n)
        record(trace, "scaled", attn_scores, copy=self.causal)  # copy: masked in place next
        if self.causal:
            mask_bool = self.mask_bool(num_tokens)  # (n, n)
            self.mask_scores(attn_scores, mask_bool)  # in place -> (b, h, n, n)
        record(trace, "masked", attn_scores)
        attn_weights = self.softmax(attn_scores)  # (b, h, n, n)
        record(trace, "weights", attn_weights)
        attn_weights = self.dropout(attn_weights)  # (b, h, n, n)
        record(trace, "dropped", attn_weights)

        context_vec = (attn_weights @ values).transpose(1, 2)  # (b, h, n, n) @ (b, h, n, hd) -> (b, n, h, hd)
        record(trace, "context", context_vec.transpose(1, 2))  # per head: (b, h, n, hd)
        context_vec = self.merge_heads(context_vec, b, num_tokens)  # (b, n, h, hd) -> (b, n, d_out)
        context_vec = self.out_proj(context_vec)  # (b, n, d_out) -> (b, n, d_out)
        record(trace, "output", context_vec)
        return context_vec

    def scale(self, attn_scores: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return attn_scores / keys.shape[-1] ** 0.5  # ÷√head_dim -> (b, h, n, n)

    def mask_bool(self, num_tokens: int) -> torch.Tensor:
        return self.mask.bool()[:num_tokens, :num_tokens]  # (ctx, ctx) -> (n, n)

    def mask_scores(self, attn_scores: torch.Tensor, mask_bool: torch.Tensor) -> None:
        attn_scores.masked_fill_(mask_bool, -torch.inf)  # in place -> (b, h, n, n)

    def softmax(self, attn_scores: torch.Tensor) -> torch.Tensor:
        return torch.softmax(attn_scores, dim=-1)  # (b, h, n, n), each row sums to 1

    def merge_heads(self, context_vec: torch.Tensor, b: int, num_tokens: int) -> torch.Tensor:
        return context_vec.contiguous().view(b, num_tokens, self.d_out)  # (b, n, h, hd) -> (b, n, d_out)


# --------------------------------------------------------------------------- the seven bugs

class MaskedFillWithoutUnderscore(LabMultiHeadAttention):
    """(1) ``masked_fill`` returns a masked copy that nobody keeps: the scores are never masked."""

    def mask_scores(self, attn_scores: torch.Tensor, mask_bool: torch.Tensor) -> None:
        attn_scores.masked_fill(mask_bool, -torch.inf)  # BUG: a new (b, h, n, n) tensor, thrown away


class SoftmaxOverWrongDim(LabMultiHeadAttention):
    """(2) softmax over the queries (dim=-2): columns sum to 1, rows don't."""

    def softmax(self, attn_scores: torch.Tensor) -> torch.Tensor:
        return torch.softmax(attn_scores, dim=-2)  # BUG: (b, h, n, n), each *column* sums to 1


class ScaleByDOut(LabMultiHeadAttention):
    """(3) ÷√d_out (the whole width, or a stale ``d_k`` from an earlier cell) instead of ÷√head_dim."""

    def scale(self, attn_scores: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return attn_scores / self.d_out ** 0.5  # BUG: ÷√d_out -> (b, h, n, n)


class MaskIncludesDiagonal(LabMultiHeadAttention):
    """(4) ``triu(..., diagonal=0)`` masks the diagonal too: token 0 can see nothing at all."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, causal: bool = True):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias, causal)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=0))  # BUG


class ViewWithoutContiguous(LabMultiHeadAttention):
    """(5) ``.view`` on the transposed context: its memory is not laid out as (b, n, d_out)."""

    def merge_heads(self, context_vec: torch.Tensor, b: int, num_tokens: int) -> torch.Tensor:
        return context_vec.view(b, num_tokens, self.d_out)  # BUG: no .contiguous() -> (b, n, d_out) or error


class MaskNotSliced(LabMultiHeadAttention):
    """(7) the whole (context_length, context_length) mask on an (n, n) score matrix."""

    def mask_bool(self, num_tokens: int) -> torch.Tensor:
        return self.mask.bool()  # BUG: (ctx, ctx), not sliced to (n, n)


def forgot_eval(module: nn.Module) -> nn.Module:
    """(6) The caller never runs ``module.eval()``: a new module is in training mode, dropout active."""
    return module.train()
