"""Which Train-page recipes form an induction head, and at which step, for several seeds (headless).

    python benchmarks/train_page_recipes.py NAME MAX_STEPS '{"seq_len": 64, "batch_size": 64}' [0,1,2,3,4]

Each seed trains ``live_train.page_config(seed=…, **overrides)`` on one torch thread (two seeds at a time, one per
core, as the Train page's training beside a browser) and stops at the first probe (every ``probe_every`` steps
of the recipe; an override like any other field) whose best induction score on the page's probe reaches 0.5, or
after MAX_STEPS.  Appends one JSON line per recipe to
``results/train_page_recipes.jsonl``: for each seed the step (None: not within MAX_STEPS), seconds, and the last
best score.  The overrides apply on top of the page's recipe (``live_train.RECOMMENDED``) at the time of the run;
benchmarks/README.md ("Numbers moved out of the code") says which recipe and probe interval the older lines ran with.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "train_page_recipes.jsonl"
THRESHOLD = 0.5


def one_seed(args: tuple) -> tuple[int, dict]:
    max_steps, overrides, seed = args
    sys.path.insert(0, str(ROOT))
    import torch

    from attnviz.labs import live_train
    from attnviz.labs.train import train

    torch.set_num_threads(1)
    cfg = live_train.page_config(seed=seed, **overrides)
    result: dict = {"step": None}
    stop = {"now": False}
    start = time.perf_counter()

    def on_step(step: int, loss: float, scores: dict | None) -> None:
        if scores is not None:
            best = float(scores["induction"].max())
            result.update(best=best, last=step, loss=loss)
            if best >= THRESHOLD and result["step"] is None:
                result.update(step=step, s=round(time.perf_counter() - start, 1))
                stop["now"] = True
        if step + 1 >= max_steps:
            stop["now"] = True

    train(cfg, on_step=on_step, should_stop=lambda: stop["now"])
    return seed, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the recipe's name in the results file")
    parser.add_argument("max_steps", type=int, help="stop a seed after this many steps")
    parser.add_argument("overrides", type=json.loads,
                        help='JSON overrides of the page\'s recipe, e.g. \'{"seq_len": 64}\'')
    parser.add_argument("seeds", nargs="?", default="0,1,2,3,4", help="comma-separated seeds (default 0,1,2,3,4)")
    args = parser.parse_args(argv)
    name, max_steps, overrides = args.name, args.max_steps, args.overrides
    seeds = [int(s) for s in args.seeds.strip("[]").split(",")]
    with ProcessPoolExecutor(2) as pool:
        found = dict(pool.map(one_seed, [(max_steps, overrides, seed) for seed in seeds]))
    line = {"name": name, "over": overrides, "res": {str(k): v for k, v in sorted(found.items())}}
    with RESULTS.open("a") as out:
        out.write(json.dumps(line) + "\n")
    print(name, " | ".join(f"seed {k}: {v['step']} ({v.get('s')} s) best {v.get('best', 0):.2f}"
                           for k, v in sorted(found.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
