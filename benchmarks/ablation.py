"""How long does the Induction lab's knock-out grid take?  Every head knocked out alone, Δ loss on the repeat.

    python benchmarks/ablation.py              # the bundled model (T = 40) and a GPT-2-small-shaped model (T = 50)

``models.ablation_grid`` runs each layer once from its cached input with one batch row per head.  The GPT-2-small
shape (12 layers × 12 heads, d = 768, 50,257-token vocabulary) has random weights: the time does not depend on
them.  Median of ``--repeats`` runs after one warm-up; targets: bundled ≤ 1 s, GPT-2 small at T = 50 (101 tokens)
≤ 10 s.
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
sys.path.insert(0, str(ROOT))

from attnviz import models  # noqa: E402
from attnviz.head_types import repeated_random_tokens  # noqa: E402


def cpu_name() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def timed(model, T: int, repeats: int) -> float:
    ids = repeated_random_tokens(T, 0, bos=True)
    models.ablation_grid(model, ids, T)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        models.ablation_grid(model, ids, T)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"# {datetime.date.today()} · {cpu_name()} · {os.cpu_count()} cores · "
          f"torch {torch.__version__} · {torch.get_num_threads()} threads · median of {args.repeats}")
    bundled = models.load_checkpoint(str(models.BUNDLED))
    print(f"bundled model (2 layers × 2 heads), T = 40: {timed(bundled, 40, args.repeats):.3f} s (target 1 s)")
    torch.manual_seed(0)
    small = models.GPTModel({**models.GPT_CONFIG_124M, "drop_rate": 0.0, "qkv_bias": True}).eval()
    print(f"GPT-2-small shape (12 × 12), T = 50: {timed(small, 50, args.repeats):.3f} s (target 10 s)")


if __name__ == "__main__":
    main()
