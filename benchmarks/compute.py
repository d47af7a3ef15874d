"""How much does recording every intermediate cost?  Plain book forward vs traced forward vs run() vs SDPA.

    python benchmarks/compute.py                 # n = 6, 64, 256, 1024; GPT-2 small (d = 768, 12 heads), causal, CPU
    python benchmarks/compute.py --sizes 1024 --repeats 30
    python benchmarks/compute.py --profile       # + torch.profiler tables and a cProfile of run() at the largest n

Columns (milliseconds, median of at least ``--repeats`` rounds, or of ``--min-seconds`` of rounds for small n,
after ``--warmup``; the variants are interleaved round by round so that load from other processes hits them alike):

* ``plain``    the book's ``MultiHeadAttention`` forward, no recorder, under ``torch.inference_mode``;
* ``traced``   the same module called with a ``Recorder`` (every intermediate kept), under inference_mode;
* ``_forward`` ``book._forward``: what ``run()`` does for the attention part (train flag; RNG lock and state only
  when dropout runs);
* ``run()``    ``pipeline.run(text, config)`` end to end: tokenize, embed, forward, NumPy, token pieces;
  the module and embedding caches are warm (``cold run()`` is printed once per n, with them cleared);
* ``sdpa``     attnviz's one SDPA path, ``implementations.fused_from(module, use_sdpa=True)``: the same weights
  (W_query/W_key/W_value fused into one Linear) around ``F.scaled_dot_product_attention(is_causal=True)``.

Ratios are medians of per-round ratios (each round times every variant once).  The target:
``run()`` / ``plain`` ≤ 1.5 at n = 1024.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from attnviz import attention, pipeline, tokens  # noqa: E402
from attnviz.config import AttentionConfig, preset_config  # noqa: E402
from attnviz.labs import implementations
from attnviz.producers import book  # noqa: E402
from attnviz.text import prepare_text  # noqa: E402

TARGET_RATIO = 1.5


def text_of(n: int) -> str:
    """A text of exactly ``n`` GPT-2 tokens ("the the the …": one token per word)."""
    text = "the" + " the" * (n - 1)
    assert len(tokens.encode(text)) == n
    return text


def variants(n: int, config: AttentionConfig):
    """name -> zero-argument callable, all on the same module, input and weights as ``run()``."""
    text = text_of(n)
    _, token_ids, _ = prepare_text(text, config.context_length)
    x, _ = book._embed(token_ids, config, [])  # (1, n, d_in), the embeddings run() feeds the module
    module, _ = book._seeded_module(replace(config, train=False, device="auto"), "cpu")  # run()'s cached module
    module.eval()

    def plain():
        with torch.inference_mode():
            return module(x)  # (1, n, d_out)

    def traced():
        recorder = attention.Recorder()
        with torch.inference_mode():
            output = module(x, recorder)  # (1, n, d_out)
        return recorder, output  # the intermediates are freed outside the timed call, as for _forward and run()

    def forward():
        return book._forward(x, config, "cpu")

    def run():
        return pipeline.run(text, config)

    fused_sdpa = implementations.fused_from(module, use_sdpa=True).eval()

    def sdpa():
        with torch.inference_mode():
            return fused_sdpa(x)

    # same numbers before timing anything
    reference = plain()
    assert torch.equal(traced()[1], reference)
    assert torch.allclose(sdpa(), reference, atol=1e-5), (sdpa() - reference).abs().max()
    assert run().n == n
    return {"plain": plain, "traced": traced, "_forward": forward, "run()": run, "sdpa": sdpa}


def time_interleaved(functions: dict, repeats: int, warmup: int, min_seconds: float) -> dict[str, list[float]]:
    """Seconds per call; each round calls every function once, in a shuffled order.

    At least ``repeats`` rounds, more for small n, until the rounds add up to ``min_seconds`` (≤ 1000).
    """
    start = time.perf_counter()
    for function in functions.values():
        for _ in range(warmup):
            function()
    per_round = (time.perf_counter() - start) / max(warmup, 1)
    repeats = max(repeats, min(1000, int(min_seconds / per_round)))
    times = {name: [] for name in functions}
    order = list(functions)
    rng = random.Random(0)
    for _ in range(repeats):
        rng.shuffle(order)
        for name in order:
            start = time.perf_counter()
            result = functions[name]()
            times[name].append(time.perf_counter() - start)
            del result  # free the trace before the next call, as a page switch would
    return times


def cold_run_ms(n: int, config: AttentionConfig) -> float:
    """run() right after the module and embedding caches were cleared (a new seed/size in the app)."""
    book._seeded_module.cache_clear()
    book._embedding_layer.cache_clear()
    start = time.perf_counter()
    pipeline.run(text_of(n), config)
    return (time.perf_counter() - start) * 1e3


def paired_ratio(times: dict[str, list[float]], name: str) -> float:
    return statistics.median(a / b for a, b in zip(times[name], times["plain"]))


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{model}, {os.cpu_count()} logical CPUs, torch threads {torch.get_num_threads()}; "
        f"Python {platform.python_version()}, torch {torch.__version__}"
    )


def profile(n: int, config: AttentionConfig) -> None:
    """Where the time goes: torch.profiler op tables (plain vs traced) and cProfile of run()."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    functions = variants(n, config)
    for name in ("plain", "traced"):
        with torch_profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            for _ in range(5):
                functions[name]()
        print(f"\n### torch.profiler, {name}, n = {n}, 5 calls\n")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(5):
        functions["run()"]()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
    print(f"\n### cProfile, run(), n = {n}, 5 calls (by own time)\n")
    print(out.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[6, 64, 256, 1024])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--min-seconds", type=float, default=2.0, help="time each n for at least this long")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--profile", action="store_true", help="also profile the largest n")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    config = preset_config("gpt2-small", device="cpu")  # d = 768, 12 heads, causal, dropout 0, eval
    print(f"Machine: {machine()}")
    print(f"Load average before: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(
        f"Config: d_in = d_out = {config.d_out}, {config.num_heads} heads, causal, CPU; "
        f"median of ≥ {args.repeats} rounds\n"
    )
    columns = ("plain", "traced", "_forward", "run()", "sdpa")
    print(
        "| n | "
        + " | ".join(f"{c} ms" for c in columns)
        + " | traced / plain | run() / plain | sdpa / plain | cold run() ms |"
    )
    print("|" + "---:|" * (len(columns) + 5))
    worst = {}
    for n in args.sizes:
        times = time_interleaved(variants(n, config), args.repeats, args.warmup, args.min_seconds)
        cold = cold_run_ms(n, config)
        medians = [statistics.median(times[c]) * 1e3 for c in columns]
        ratios = [paired_ratio(times, name) for name in ("traced", "run()", "sdpa")]
        worst[n] = ratios[1]
        print(
            f"| {n} | "
            + " | ".join(f"{m:.2f}" for m in medians)
            + " | "
            + " | ".join(f"{r:.2f}×" for r in ratios)
            + f" | {cold:.0f} |"
        )
    print(f"\nLoad average after: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    largest = max(args.sizes)
    verdict = "meets" if worst[largest] <= TARGET_RATIO else "misses"
    print(f"run() / plain at n = {largest}: {worst[largest]:.2f}× — {verdict} the ≤ {TARGET_RATIO}× target")
    if args.profile:
        profile(largest, config)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
