"""What does tracing a user's module cost?  ``tracing.trace_module`` vs the module's plain forward.

    python benchmarks/tracing.py                       # n = 1024, d = 768, 12 heads, 15 rounds
    python benchmarks/tracing.py --n 256 --repeats 30

Modules (written as users write them, in tests/helpers/user_modules.py and attnviz.attention):

* ``book MHA``      the book's MultiHeadAttention (manual softmax, in-place masked_fill_);
* ``nanoGPT manual`` nanoGPT's CausalSelfAttention, manual path (fused c_attn, masked_fill(bias == 0), softmax);
* ``nanoGPT SDPA``  the same with F.scaled_dot_product_attention(is_causal=True): tracing computes its weights
  explicitly (SDPA never materialises them), extra work by nature.

Columns: milliseconds, the median of per-round times, each round timing the plain forward (``torch.no_grad``)
and ``trace_module`` on the same (1, n, d) input one after the other; ``ratio`` is the median of per-round
ratios.  The target: ratio ≤ 1.5 for the two manual modules at n = 1024.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from helpers import user_modules as um  # noqa: E402

from attnviz import attention, tracing  # noqa: E402


def modules(d: int, heads: int, n: int) -> dict:
    torch.manual_seed(0)
    return {
        "book MHA": attention.MultiHeadAttention(d, d, n, 0.0, heads).eval(),
        "nanoGPT manual": um.CausalSelfAttention(d, heads, n, flash=False).eval(),
        "nanoGPT SDPA": um.CausalSelfAttention(d, heads, n, flash=True).eval(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--d", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    x = torch.randn(1, args.n, args.d)  # (1, n, d)
    print(f"# {datetime.date.today()} · {platform.processor() or platform.machine()} · {os.cpu_count()} cores · "
          f"torch {torch.__version__} · {torch.get_num_threads()} threads · n = {args.n}, d = {args.d}, "
          f"{args.heads} heads, {args.repeats} rounds")
    print(f"{'module':<16} {'plain ms':>9} {'traced ms':>10} {'ratio':>6}")
    for name, module in modules(args.d, args.heads, args.n).items():
        for _ in range(2):  # warm-up
            with torch.no_grad():
                module(x)
            tracing.trace_module(module, x)
        plain, traced, ratios = [], [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            with torch.no_grad():
                module(x)
            middle = time.perf_counter()
            tracing.trace_module(module, x)
            end = time.perf_counter()
            plain.append(middle - start)
            traced.append(end - middle)
            ratios.append((end - middle) / (middle - start))
        print(f"{name:<16} {statistics.median(plain) * 1e3:>9.1f} {statistics.median(traced) * 1e3:>10.1f} "
              f"{statistics.median(ratios):>6.2f}")


if __name__ == "__main__":
    main()
