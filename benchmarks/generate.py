"""How much faster is greedy generation with the KV cache?  200 new tokens, GPT-2-small shape, cache vs no cache.

    python benchmarks/generate.py                 # 200 new tokens after "Hello, I am", median of --repeats runs

``models.generate(model, ids, 200, use_cache=…)`` on a random ``GPTModel(GPT_CONFIG_124M)`` (12 layers × 12 heads,
d = 768, context 1,024, 50,257-token vocabulary: the time does not depend on the weights), eval mode, on the CPU.
Both runs are timed without keeping the attention weights (``keep_weights=False``: generation alone), and the cached
run also with them (what the Generate page asks for).  Writes ``results/generate.md``.  Target: the cache ≥ 3×.
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

from attnviz import models, tokens  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from ablation import cpu_name  # noqa: E402  (the machine's CPU, as the ablation benchmark reports it)


def timed(model, ids: list[int], new: int, repeats: int, **kwargs) -> tuple[float, list[int]]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = models.generate(model, ids, new, **kwargs)
        times.append(time.perf_counter() - start)
        print(f"  {kwargs}: {times[-1]:.2f} s", flush=True)
    return statistics.median(times), result.token_ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new", type=int, default=200, help="new tokens (default 200)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each (median; default 3)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "generate.md"))
    args = parser.parse_args()

    torch.manual_seed(123)
    model = models.GPTModel(models.GPT_CONFIG_124M).eval()
    ids = tokens.encode("Hello, I am")
    models.generate(model, ids, 5)  # warm-up
    cached, cached_ids = timed(model, ids, args.new, args.repeats, keep_weights=False)
    recorded, _ = timed(model, ids, args.new, args.repeats, keep_weights=True)
    uncached, uncached_ids = timed(model, ids, args.new, args.repeats, use_cache=False, keep_weights=False)
    assert cached_ids == uncached_ids, "the cache changed the generated tokens"
    load = os.getloadavg()
    lines = [
        f"# Generation with and without the KV cache ({datetime.date.today().isoformat()})",
        "",
        f"`python benchmarks/generate.py --new {args.new} --repeats {args.repeats}`: {args.new} new tokens after "
        f"\"Hello, I am\" ({len(ids)} tokens), random GPT-2-small-shaped `GPTModel`, median of {args.repeats}.",
        "",
        f"Machine: {cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} intra-op threads), Python {platform.python_version()}; load average "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} at the end. The machine is shared with other work while "
        "this runs: the times are noisy, the ratio less so.",
        "",
        "| run | seconds | tokens/s |",
        "|---|---:|---:|",
        f"| without the cache (`use_cache=False`) | {uncached:.2f} | {args.new / uncached:.1f} |",
        f"| with the cache | {cached:.2f} | {args.new / cached:.1f} |",
        f"| with the cache, keeping every step's weights (the Generate page) | {recorded:.2f} | "
        f"{args.new / recorded:.1f} |",
        "",
        f"Speed-up of the cache: **{uncached / cached:.1f}×** (target ≥ 3×); keeping the weights: "
        f"{uncached / recorded:.1f}×. Same tokens both ways.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
