"""Do other sessions stay responsive while the Train page trains?  Time what a page rerun computes with 0, 1
and 2 trainings running in the same process (the Train page's jobs: attnviz.labs.live_train through a JobBoard,
each in its own thread with one torch thread), interleaved, and report the ratios.

    python benchmarks/train_responsiveness.py [--rounds 12] [--n 256 1024] [--no-training-heap]

Memory as in the server: malloc tuned (``attnviz.ui.memory.tune_memory``) and each training inside
``memory.training_heap()`` as the Train page starts it (``--no-training-heap``: without it).

The page work is ``pipeline.run(text, config)`` for GPT-2 small's shape (768/12 heads, causal MHA) on n
tokens — what a Heads page rerun computes when its trace is not cached — timed on the main thread like a
Streamlit script thread.  The trainings run the Train page's default recipe (``live_train.page_config()``)
until told to stop; their step rate is reported too.  Results: benchmarks/results/train_responsiveness.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnviz import pipeline, tokens  # noqa: E402
from attnviz.config import preset_config  # noqa: E402
from attnviz.labs import live_train
from attnviz.labs.jobs import JobBoard  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "train_responsiveness.json"


def page_work(text: str, config) -> float:
    start = time.perf_counter()
    pipeline.run(text, config)
    return time.perf_counter() - start


def steps_of(job) -> int:
    return sum(entry.get("step") is not None for entry in list(job.progress))


def work(cfg, heap: bool):
    """A training job's work, inside ``memory.training_heap()`` as the Train page runs it (``heap``)."""
    from attnviz.ui import memory

    plain = live_train.training_work(cfg)
    return memory.in_training_heap(plain) if heap else plain


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--n", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--no-training-heap", action="store_true", help="trainings without memory.training_heap()")
    args = parser.parse_args()
    from attnviz.ui import memory

    tuned = memory.tune_memory()  # as every page of the server does
    config = preset_config("gpt2-small")
    texts = {n: " the" * n for n in args.n}  # exactly n tokens
    for n in args.n:
        assert len(tokens.encode(texts[n])) == n
        page_work(texts[n], config)  # warm the module and embedding caches

    board = JobBoard(max_running=2, idle_timeout=1e9)
    cfg = live_train.page_config(steps=live_train.MAX_STEPS)
    times: dict[int, dict[int, list[float]]] = {n: {0: [], 1: [], 2: []} for n in args.n}
    rates: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(args.rounds):
        for trainings in (0, 1, 2):
            jobs = [board.start(f"bench-{k}", work(cfg, heap=not args.no_training_heap)) for k in range(trainings)]
            for job in jobs:  # past the start-up (snapshot, tokenizing the corpus): training steps
                while steps_of(job) < 3:
                    job._done.wait(0.05)
            counted = [steps_of(job) for job in jobs]
            started = time.perf_counter()
            for n in args.n:
                times[n][trainings].append(page_work(texts[n], config))
            if jobs:
                elapsed = time.perf_counter() - started
                rates[trainings].append(sum(steps_of(j) - c for j, c in zip(jobs, counted)) / elapsed / len(jobs))
            for job in jobs:
                job.stop()
                job.join()
                board.forget(job.owner)

    result = {
        "date": datetime.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(), "load_average": os.getloadavg(), "rounds": args.rounds,
        "threads_per_training": live_train.THREADS, "malloc_tuned": tuned, "training_heap": not args.no_training_heap,
        "recipe": {k: v for k, v in vars(cfg).items() if k != "steps"},
        "page_ms": {n: {k: round(1000 * statistics.median(v), 1) for k, v in by.items()} for n, by in times.items()},
        "ratio_vs_alone": {n: {k: round(statistics.median(v) / statistics.median(by[0]), 2) for k, v in by.items()}
                           for n, by in times.items()},
        "steps_per_second_per_training": {k: round(statistics.median(v), 2) for k, v in rates.items()},
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print("| n | alone ms | 1 training ms | 2 trainings ms | ratio 1 | ratio 2 |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in args.n:
        ms, ratio = result["page_ms"][n], result["ratio_vs_alone"][n]
        print(f"| {n} | {ms[0]} | {ms[1]} | {ms[2]} | {ratio[1]}× | {ratio[2]}× |")
    print("training steps/s (each):", result["steps_per_second_per_training"], "load", result["load_average"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
