"""A new 1,024-token text through ``pipeline.run`` (uncached: tokenize, embed, the seeded module's recorded
forward) for each bonus variant (GQA, MQA, MLA, SWA, and GQA/MHA with rotary positions) against MHA, at
GPT-2 small's sizes (768, 12 heads) with the sidebar's defaults for the new settings.

Every repetition draws a new random text and runs every variant on it, in turn, so the machine's load falls on
all of them alike; each variant's time is the median over the repetitions, and its ratio is taken against MHA's
median from the same run.  Modules are built before timing (a user's new text finds them built).

    python benchmarks/variants.py [--repeats 15] [--out benchmarks/results/variants.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from attnviz import pipeline, tokens, variants  # noqa: E402
from attnviz.config import AttentionConfig  # noqa: E402
from attnviz.urlstate import DEFAULTS  # noqa: E402

SIZES = {"d_in": 768, "d_out": 768, "num_heads": 12, "dropout": 0.1}
NEW_SETTINGS = {key: DEFAULTS[key] for key in ("num_kv_groups", "latent_dim", "sliding_window_size")}  # the sidebar's
RUNS = {
    variants.MHA: AttentionConfig(variant=variants.MHA, **SIZES),
    **{name: AttentionConfig(variant=name, **SIZES, **{key: value for key, value in NEW_SETTINGS.items()
                                                       if key in variants.get(name).settings})
       for name in variants.MODERN},
    f"{variants.MHA} + rotary": AttentionConfig(variant=variants.MHA, positions="rotary", **SIZES),
    f"{variants.GQA} + rotary": AttentionConfig(variant=variants.GQA, num_kv_groups=DEFAULTS["num_kv_groups"],
                                                positions="rotary", **SIZES),
}
WORDS = ("attention", "query", "key", "value", "head", "token", "layer", "model", "window", "group", "latent",
         "rotary", "the", "a", "of", "and", "to", "in", "is", "sees", "every", "step", "journey", "one")


def new_text(rng: random.Random, n_tokens: int = 1024) -> str:
    """A random text of at least ``n_tokens`` GPT-2 tokens (the run keeps the first 1,024)."""
    words = []
    while len(tokens.encode(" ".join(words))) < n_tokens:
        words.extend(rng.choice(WORDS) for _ in range(200))
    return " ".join(words)


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            model = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "variants.md")
    args = parser.parse_args()
    rng = random.Random(0)
    for config in RUNS.values():  # build every module (and the embedding table) before timing
        pipeline.run(new_text(rng), config)
    times: dict[str, list[float]] = {name: [] for name in RUNS}
    load_before = os.getloadavg()
    for _ in range(args.repeats):
        text = new_text(rng)
        for name, config in RUNS.items():
            start = time.perf_counter()
            trace = pipeline.run(text, config)
            times[name].append(time.perf_counter() - start)
            assert trace.n == 1024
    load_after = os.getloadavg()
    mha = statistics.median(times[variants.MHA])
    lines = [
        "# A new 1,024-token text per variant (`python benchmarks/variants.py`)",
        "",
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC · {machine()} · load average "
        f"{load_before[0]:.1f} → {load_after[0]:.1f} (a machine shared with other engineers' work: absolute times "
        "move with the load; the ratios come from one run, the variants interleaved)",
        "",
        f"GPT-2 small sizes (768, 12 heads), `pipeline.run` uncached, median of {args.repeats} new texts; defaults: "
        f"num_kv_groups {DEFAULTS['num_kv_groups']}, latent_dim {DEFAULTS['latent_dim']}, "
        f"sliding_window_size {DEFAULTS['sliding_window_size']}, rope_base 10,000.",
        "",
        "| variant | median (ms) | min (ms) | × mha |",
        "|---|---:|---:|---:|",
    ]
    for name, samples in times.items():
        median = statistics.median(samples)
        lines.append(f"| {name} | {median * 1000:.1f} | {min(samples) * 1000:.1f} | {median / mha:.2f} |")
    report = "\n".join(lines) + "\n"
    print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)


if __name__ == "__main__":
    main()
