"""Five ways to compute the same multi-head attention, with the same weights, and a timer for them.

* ``MultiHeadAttention``           the book's class (3.6.2): three projections, explicit QKᵀ/mask/softmax;
* ``MultiHeadAttentionWrapper``    the book's wrapper (3.6.1): ``num_heads`` CausalAttention heads, outputs
  concatenated — followed here by the MHA's ``out_proj`` so that all five compute the same function;
* ``fused QKV``                    one ``nn.Linear(d_in, 3·d_out)`` for queries, keys and values (as nanoGPT),
  then the book's explicit attention arithmetic;
* ``nn.MultiheadAttention``        PyTorch's module (batch_first), ``in_proj_weight = cat(W_q, W_k, W_v)``;
* ``SDPA``                         the fused projection + ``F.scaled_dot_product_attention`` (one kernel).

Everything starts from one book ``MultiHeadAttention`` created after ``torch.manual_seed(seed)``; the other
four copy its weights, so their outputs agree with it to float rounding (tests/test_implementations.py).
Pure PyTorch: no Streamlit here (attnviz/ui/benchmark.py draws the results).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional

from attnviz import attention
from attnviz.rng import seeded

BOOK_MHA = "MultiHeadAttention (book)"
WRAPPER = "MultiHeadAttentionWrapper + out_proj (book)"
FUSED = "fused QKV (one Linear)"
TORCH_MHA = "torch.nn.MultiheadAttention"
SDPA = "F.scaled_dot_product_attention"
NOISY_SPREAD = 3.0  # a row whose slowest timed call took more than this many times its fastest is noise, not code


class FusedQKVAttention(nn.Module):
    """The book's MultiHeadAttention with W_query, W_key, W_value fused into one ``qkv`` Linear.

    ``use_sdpa``: replace the explicit scores → mask → softmax → dropout → ·V by one
    ``F.scaled_dot_product_attention`` call.
    """

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, causal: bool = True,
                 use_sdpa: bool = False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)  # rows: W_query, W_key, W_value
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))  # (ctx, ctx)
        self.causal = causal
        self.use_sdpa = use_sdpa

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, n, d_in)
        qkv = self.qkv(x)  # (b, n, d_in) -> (b, n, 3·d_out)
        if self.use_sdpa:
            dropout_p = self.dropout.p if self.training else 0.0
            return self.out_proj(sdpa_context(qkv, self.num_heads, causal=self.causal, dropout_p=dropout_p))
        queries, keys, values = split_qkv(qkv, self.num_heads)  # 3 × (b, h, n, hd)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
        attn_scores = attn_scores / keys.shape[-1] ** 0.5  # (b, h, n, n)
        if self.causal:
            mask_bool = self.mask.bool()[:num_tokens, :num_tokens]  # (n, n)
            attn_scores.masked_fill_(mask_bool, -torch.inf)  # (b, h, n, n)
        attn_weights = torch.softmax(attn_scores, dim=-1)  # (b, h, n, n)
        attn_weights = self.dropout(attn_weights)  # (b, h, n, n)
        context_vec = attn_weights @ values  # (b, h, n, n) @ (b, h, n, hd) -> (b, h, n, hd)
        context_vec = context_vec.transpose(1, 2).contiguous().view(b, num_tokens, self.d_out)  # -> (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)


def split_qkv(qkv: torch.Tensor, num_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused projection's output (b, n, 3·d_out), rows W_query, W_key, W_value, as queries, keys and values
    split into heads: 3 × (b, h, n, hd)."""
    b, n, three_d = qkv.shape
    qkv = qkv.view(b, n, 3, num_heads, three_d // (3 * num_heads))  # (b, n, 3, h, hd)
    return tuple(qkv.permute(2, 0, 3, 1, 4))  # 3 × (b, h, n, hd)


def sdpa_context(qkv: torch.Tensor, num_heads: int, *, causal: bool = True, dropout_p: float = 0.0) -> torch.Tensor:
    """QKᵀ ÷ √head_dim, causal mask, softmax, dropout and ·V of the fused projection's output (b, n, 3·d_out) in one
    ``F.scaled_dot_product_attention`` call, the heads concatenated again: (b, n, d_out) — what goes into out_proj."""
    queries, keys, values = split_qkv(qkv, num_heads)  # 3 × (b, h, n, hd)
    context = functional.scaled_dot_product_attention(queries, keys, values, dropout_p=dropout_p,
                                                      is_causal=causal)  # (b, h, n, hd)
    b, h, n, hd = context.shape
    return context.transpose(1, 2).reshape(b, n, h * hd)  # (b, h, n, hd) -> (b, n, d_out)


class TorchMultiheadAttention(nn.Module):
    """``torch.nn.MultiheadAttention`` (batch_first) behind the book's ``forward(x)`` signature."""

    def __init__(self, d_out, context_length, dropout, num_heads, causal: bool = True):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_out, num_heads, dropout=dropout, bias=True, batch_first=True)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length, dtype=torch.bool),
                                                diagonal=1))  # (ctx, ctx), True = hidden
        self.causal = causal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        num_tokens = x.shape[1]  # (b, n, d_out)
        mask = self.mask[:num_tokens, :num_tokens] if self.causal else None  # (n, n)
        context_vec, _ = self.attn(x, x, x, attn_mask=mask, need_weights=False, is_causal=self.causal)  # (b, n, d_out)
        return context_vec


class Wrapped(nn.Module):
    """The book's MultiHeadAttentionWrapper followed by an output projection (the MHA's ``out_proj``)."""

    def __init__(self, wrapper: attention.MultiHeadAttentionWrapper, out_proj: nn.Linear):
        super().__init__()
        self.wrapper = wrapper
        self.out_proj = out_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.wrapper(x))  # (b, n, d_in) -> (b, n, h·hd) -> (b, n, d_out)


def book_mha(d_in: int, d_out: int, num_heads: int, *, context_length: int = 1024, dropout: float = 0.0,
             qkv_bias: bool = False, causal: bool = True, seed: int = 123) -> attention.MultiHeadAttention:
    """The reference: the book's MultiHeadAttention right after ``torch.manual_seed(seed)`` (under the RNG lock)."""
    with seeded(seed):
        return attention.MultiHeadAttention(d_in, d_out, context_length, dropout, num_heads, qkv_bias, causal=causal)


def _projections(mha: attention.MultiHeadAttention) -> list[nn.Linear]:
    return [mha.W_query, mha.W_key, mha.W_value]


def wrapper_like(mha: attention.MultiHeadAttention) -> attention.MultiHeadAttentionWrapper:
    """A book wrapper (eval mode) with MHA's heads, head size, mask, dropout and bias setting; its weights are
    drawn under the RNG lock and meant to be overwritten by :func:`copy_heads_from_mha`."""
    d_in, context_length = mha.W_query.in_features, mha.mask.shape[0]
    with seeded():  # creating it draws random numbers
        wrapper = attention.MultiHeadAttentionWrapper(d_in, mha.head_dim, context_length, mha.dropout.p,
                                                      mha.num_heads, mha.W_query.bias is not None, causal=mha.causal)
    return wrapper.eval()


def copy_heads_from_mha(wrapper: attention.MultiHeadAttentionWrapper,
                        mha: attention.MultiHeadAttention) -> attention.MultiHeadAttentionWrapper:
    """Give head h of ``wrapper`` rows h·hd … (h+1)·hd of MHA's W_query, W_key and W_value (in place).

    ``nn.Linear.weight`` is (out, in), so a head's slice of the output features is a block of rows.
    """
    head_dim = mha.head_dim
    with torch.no_grad():
        for h, head in enumerate(wrapper.heads):
            rows = slice(h * head_dim, (h + 1) * head_dim)
            for target, source in zip((head.W_query, head.W_key, head.W_value), _projections(mha)):
                target.weight.copy_(source.weight[rows])  # (d_out, d_in)[rows] -> (hd, d_in)
                if source.bias is not None:
                    target.bias.copy_(source.bias[rows])  # (d_out,)[rows] -> (hd,)
    return wrapper


def wrapper_from(mha: attention.MultiHeadAttention) -> Wrapped:
    """The wrapper whose head h uses rows h·hd … (h+1)·hd of the MHA's W_query, W_key, W_value, then MHA's out_proj."""
    wrapper = copy_heads_from_mha(wrapper_like(mha), mha)
    with seeded():
        out_proj = nn.Linear(mha.d_out, mha.d_out)
    out_proj.load_state_dict(mha.out_proj.state_dict())
    return Wrapped(wrapper, out_proj)


def fused_from(mha: attention.MultiHeadAttention, use_sdpa: bool = False,
               causal: bool | None = None) -> FusedQKVAttention:
    """Fused QKV module with ``qkv.weight = cat(W_query, W_key, W_value)`` and the same ``out_proj``.

    ``use_sdpa``: attnviz's one ``F.scaled_dot_product_attention`` path; ``causal`` overrides MHA's mask flag."""
    d_in = mha.W_query.in_features
    has_bias = mha.W_query.bias is not None
    with seeded():  # creating it draws random numbers (overwritten below)
        fused = FusedQKVAttention(d_in, mha.d_out, mha.mask.shape[0], mha.dropout.p, mha.num_heads, has_bias,
                                  causal=mha.causal if causal is None else causal, use_sdpa=use_sdpa)
    with torch.no_grad():
        fused.qkv.weight.copy_(torch.cat([p.weight for p in _projections(mha)], dim=0))  # (3·d_out, d_in)
        if has_bias:
            fused.qkv.bias.copy_(torch.cat([p.bias for p in _projections(mha)]))  # (3·d_out,)
        fused.out_proj.load_state_dict(mha.out_proj.state_dict())
    return fused


def torch_mha_from(mha: attention.MultiHeadAttention) -> TorchMultiheadAttention:
    """nn.MultiheadAttention with ``in_proj_weight = cat(W_q, W_k, W_v)`` and ``out_proj`` copied.

    nn.MultiheadAttention projects a query of width ``embed_dim = d_out``: it needs ``d_in == d_out``.
    """
    d_in = mha.W_query.in_features
    if d_in != mha.d_out:
        raise ValueError(f"nn.MultiheadAttention needs d_in == d_out (got {d_in} and {mha.d_out}).")
    with seeded():  # creating it draws random numbers (overwritten below)
        module = TorchMultiheadAttention(mha.d_out, mha.mask.shape[0], mha.dropout.p, mha.num_heads,
                                         causal=mha.causal)
    with torch.no_grad():
        module.attn.in_proj_weight.copy_(torch.cat([p.weight for p in _projections(mha)], dim=0))  # (3·d_out, d_in)
        if mha.W_query.bias is not None:
            module.attn.in_proj_bias.copy_(torch.cat([p.bias for p in _projections(mha)]))
        else:
            module.attn.in_proj_bias.zero_()
        module.attn.out_proj.weight.copy_(mha.out_proj.weight)
        module.attn.out_proj.bias.copy_(mha.out_proj.bias)
    return module


def build_all(d_in: int, d_out: int, num_heads: int, *, causal: bool = True, seed: int = 123,
              context_length: int = 1024, device: str = "cpu") -> dict[str, nn.Module]:
    """name -> module (eval mode, on ``device``), all with the book MHA's weights.

    ``nn.MultiheadAttention`` is left out when ``d_in != d_out`` (it cannot project a wider input).
    """
    with seeded(seed):  # creating the copies draws random numbers too (overwritten, but drawn)
        mha = book_mha(d_in, d_out, num_heads, context_length=context_length, causal=causal, seed=seed)
        modules = {BOOK_MHA: mha, WRAPPER: wrapper_from(mha), FUSED: fused_from(mha)}
        if d_in == d_out:
            modules[TORCH_MHA] = torch_mha_from(mha)
        modules[SDPA] = fused_from(mha, use_sdpa=True)
    return {name: module.to(device).eval() for name, module in modules.items()}


class Row(NamedTuple):
    name: str
    median_ms: float
    times_ms: tuple[float, ...]


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()


def time_implementations(d_in: int, d_out: int, num_heads: int, n: int, device: str = "cpu", repeats: int = 5, *,
                         causal: bool = True, seed: int = 123, warmup: int = 1,
                         progress: Callable[[int, int, str], None] | None = None) -> list[Row]:
    """Forward time of each implementation on one (1, n, d_in) input, in milliseconds.

    Rounds are interleaved (each round runs every implementation once), so load from elsewhere hits
    all of them alike; ``warmup`` untimed rounds come first.  ``progress(done, total, name)`` is called
    after every call.  Returns one Row per implementation (name, median, every timed call), in ``build_all``'s order.
    """
    if n < 1 or repeats < 1:
        raise ValueError("n and repeats must be at least 1")
    modules = build_all(d_in, d_out, num_heads, causal=causal, seed=seed, context_length=max(n, 1), device=device)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(1, n, d_in, generator=generator).to(device)  # (1, n, d_in)
    times: dict[str, list[float]] = {name: [] for name in modules}
    total, done = (warmup + repeats) * len(modules), 0
    with torch.inference_mode():
        for round_index in range(warmup + repeats):
            for name, module in modules.items():
                _synchronize(device)
                start = time.perf_counter()
                module(x)  # (1, n, d_in) -> (1, n, d_out)
                _synchronize(device)
                elapsed = (time.perf_counter() - start) * 1e3
                if round_index >= warmup:
                    times[name].append(elapsed)
                done += 1
                if progress is not None:
                    progress(done, total, name)
    return [Row(name, statistics.median(values), tuple(values)) for name, values in times.items()]


def device_words(device: str) -> str:
    """The device the timings ran on, in words: on a CPU with the torch threads of the thread that times ("cpu, 2
    torch threads"), the count a timing in Python has to match."""
    if device != "cpu":
        return device
    threads = torch.get_num_threads()
    return f"cpu, {threads} torch thread{'s' if threads != 1 else ''}"


def progress_text(done: int, total: int, name: str, elapsed_s: float) -> str:
    """The benchmark's progress line after ``done`` of ``total`` calls (the last one ``name``) in ``elapsed_s``
    seconds, with the time left at the pace so far: "12/30: SDPA · about 40 s left"."""
    text = f"{done}/{total}: {name}"
    if 0 < done < total:
        left = elapsed_s / done * (total - done)
        text += f" · about {left:.0f} s left" if left < 120 else f" · about {left / 60:.0f} min left"
    return text


def noisy_rows(rows: list[Row], spread: float = NOISY_SPREAD) -> list[Row]:
    """The rows whose timed calls spread widely: the slowest more than ``spread`` times the fastest.  The code did
    the same work every call, so such a spread is the machine (another program using the CPU), and the medians and
    their ranking may not hold on the next run.  One timed call has no spread to judge."""
    return [row for row in rows if len(row.times_ms) > 1 and max(row.times_ms) > spread * min(row.times_ms)]


def noise_note(rows: list[Row]) -> str | None:
    """What the page says under noisy timings (:func:`noisy_rows`): which rows, their range, and that the ranking
    may not hold; None when every row is steady."""
    noisy = noisy_rows(rows)
    if not noisy:
        return None
    ranges = "; ".join(f"{row.name} {min(row.times_ms):,.1f}–{max(row.times_ms):,.1f} ms" for row in noisy)
    return (f"The timings are noisy: one call took over {NOISY_SPREAD:g}× another of the same work ({ranges}) — "
            "another program using the CPU? The ranking may not hold on another run, nor the × fastest column: "
            "close what else is running, or raise Timed repeats, and run again.")


def results_table(rows: list[Row]):
    """The benchmark's table: implementation, median ms, × the fastest, every timed call (pandas)."""
    import pandas as pd

    fastest = min(row.median_ms for row in rows)
    return pd.DataFrame({
        "implementation": [row.name for row in rows],
        "median ms": [round(row.median_ms, 3) for row in rows],
        "× fastest": [round(row.median_ms / fastest, 2) for row in rows],
        "all times ms": [", ".join(f"{t:.2f}" for t in row.times_ms) for row in rows],
    })
