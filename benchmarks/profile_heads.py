"""Where the server's time goes when the Heads page draws a new 1024-token text (a sampling profile).

    pip install py-spy                       # a sampling profiler (not a project dependency)
    python benchmarks/profile_heads.py       # profile one cold rerun, print the time per function
    python benchmarks/profile_heads.py --runs 5 --no-profile   # only time cold reruns

The Heads page runs in ``streamlit.testing.v1.AppTest`` (in this process): first the default sentence and one
1024-token text (imports, embedding table and module built, caches warm), then a new session commits a text
of exactly 1024 GPT-2 tokens the process has never seen — the cold path of ``benchmarks/browser.py`` without
the browser.  ``py-spy record --pid <this process>`` samples that rerun (500 Hz, active samples only) and
the script prints, per function, the seconds of samples whose stack contains it (inclusive), for attnviz's
own functions and the Plotly/Streamlit/NumPy calls they make.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from payload import text_of_tokens  # noqa: E402

RATE = 500  # samples per second
FRAME = re.compile(r"(.*) \((.*?):\d+\)$")


def heads_page(text: str | None):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    if text is not None:
        at.query_params["text"] = text
    return at


def inclusive(raw: Path) -> tuple[collections.Counter, int]:
    """Samples per function (file-qualified), counted once per stack, from py-spy's ``--format raw``."""
    totals: collections.Counter = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not any("exec_func_with_error_handling" in frame for frame in frames):
            continue  # not the script thread
        samples += int(count)
        seen = set()
        for frame in frames:
            match = FRAME.match(frame)
            if not match:
                continue
            name = f"{match.group(1)}  {match.group(2).split('site-packages/')[-1].replace(str(ROOT) + '/', '')}"
            if name not in seen:
                seen.add(name)
                totals[name] += int(count)
    return totals, samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="cold reruns (a new text each); the first is profiled")
    parser.add_argument("--no-profile", action="store_true", help="only time the reruns")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args(argv)
    profile = not args.no_profile and shutil.which("py-spy") is not None
    if not args.no_profile and not profile:
        print("py-spy not found (pip install py-spy): timing only", file=sys.stderr)
    for warm in (None, text_of_tokens(1024, variant=97)):
        at = heads_page(warm)
        at.run()
        assert not at.exception, at.exception
    raw = Path(tempfile.mkdtemp(prefix="attnviz-profile-")) / "heads.raw"
    times = []
    for index in range(args.runs):
        at = heads_page(text_of_tokens(1024, variant=200 + index))
        spy = None
        if profile and index == 0:
            spy = subprocess.Popen(["py-spy", "record", "--pid", str(os.getpid()), "--format", "raw", "-r", str(RATE),
                                    "-o", str(raw)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.5)  # attached
        start = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - start)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait()
        assert not at.exception, at.exception
    print(f"cold 1024-token reruns (AppTest, s): {', '.join(f'{t:.3f}' for t in times)}; "
          f"load average {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    if profile:
        totals, samples = inclusive(raw)
        print(f"\nscript thread: {samples / RATE:.3f} s of samples\n\n| s (inclusive) | function |\n|---:|---|")
        shown = 0
        for name, count in totals.most_common():
            if name.split("  ")[1].startswith(("attnviz/", "pages/", "plotly/", "numpy/", "streamlit/elements/",
                                               "_plotly_utils/", "torch/nn/")) and shown < args.top:
                print(f"| {count / RATE:.3f} | `{name.replace('  ', '` ')} |")
                shown += 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
