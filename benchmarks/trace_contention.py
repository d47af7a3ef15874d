"""Why a new 1,024-token text's trace takes longer in the server than in a process of its own: the book's traced forward
timed inside the server while Chromium commits the text, Chromium's CPU time meanwhile, and the same forward timed in
this process.

    python benchmarks/trace_contention.py            # 6 cold texts in Chromium, 6 in this process
    python benchmarks/trace_contention.py --texts 8 --window-ms 120

**In the server.**  A copy of the app (``browser.app_copy``) whose ``attnviz/producers/book.py::_forward`` — the
book's module called with its recorder, the trace's forward — writes one line a call to the server's log: its wall
time, the CPU time of the calling thread and of the whole server process (torch's two intra-op threads), the minor
page faults, and the involuntary context switches (the kernel took a core from the server's threads).  Each text is
committed as ``browser.py --cold`` commits it (a fresh tab, the default settings, Ctrl+Enter), and the CPU time of
every Chromium process (``/proc/<pid>/stat``'s utime + stime, 10 ms ticks) is read right before the key press and
``--window-ms`` after it, while the server traces (the fragment sends nothing before its trace).

**In this process.**  The same wrapper around the same function, ``pipeline.run`` on other cold texts of the same
length and the default settings, after ``memory.tune_memory()`` (the server's malloc settings).

Results: ``results/trace_contention.json`` (the samples, the medians, the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import browser as B  # noqa: E402

FORWARD = "def _forward(input_embeddings: torch.Tensor, config: AttentionConfig, device: str):\n"
# The timed wrapper the server's copy gets in place of FORWARD's line; the original body becomes ``_untimed_forward``.
TIMED = '''def _forward(input_embeddings, config, device):
    import json, resource, sys, time
    wall, thread, process = time.perf_counter(), time.thread_time(), time.process_time()
    before = resource.getrusage(resource.RUSAGE_SELF)
    out = _untimed_forward(input_embeddings, config, device)
    after = resource.getrusage(resource.RUSAGE_SELF)
    print("FORWARD " + json.dumps({"n": int(input_embeddings.shape[1]), "wall_ms": (time.perf_counter() - wall) * 1e3,
          "thread_cpu_ms": (time.thread_time() - thread) * 1e3, "process_cpu_ms": (time.process_time() - process) * 1e3,
          "minor_faults": after.ru_minflt - before.ru_minflt,
          "involuntary_switches": after.ru_nivcsw - before.ru_nivcsw}), file=sys.stderr, flush=True)
    return out


def _untimed_forward(input_embeddings: torch.Tensor, config: AttentionConfig, device: str):
'''
TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def chromium_cpu_s() -> dict[int, float]:
    """utime + stime (s) of every Chromium process, by pid."""
    times = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            if "(chromium" not in text and "(chrome" not in text:
                continue
            fields = text.rsplit(")", 1)[1].split()
            times[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) * TICK_S
        except (OSError, ValueError, IndexError):
            continue
    return times


def in_server(texts: list[str], window_ms: float) -> tuple[list[dict], list[float]]:
    """(the server's forward lines, Chromium's CPU ms in the window) for each text committed in Chromium."""
    from playwright.sync_api import sync_playwright

    patch = (FORWARD, TIMED)
    chromium_ms = []
    with B.app_copy([patch], path="attnviz/producers/book.py") as folder, \
            B.streamlit_server("attnviz-timed", "app.py", cwd=folder) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=B.CHROMIUM, args=B.CHROMIUM_ARGS, headless=True)
        try:
            B.commit_text(browser, server, B.text_of_tokens(B.N, variant=900))  # the module and embedding caches
            for text in texts:
                context, page, frames = B.open_tab(browser, server)
                try:
                    time.sleep(B.SETTLE_S)
                    box = page.locator("[data-testid=stSidebar] textarea").first
                    box.fill(text)
                    page.evaluate(B.ARM_JS)
                    frames.reset()
                    before = chromium_cpu_s()
                    box.press("Control+Enter")
                    time.sleep(window_ms / 1e3)
                    after = chromium_cpu_s()
                    chromium_ms.append(sum(after[pid] - before[pid] for pid in after if pid in before) * 1e3)
                    B.wait_drawn(page, f"{B.N} tokens", frames)
                finally:
                    context.close()
        finally:
            browser.close()
        lines = re.findall(r"^FORWARD (.*)$", server.log.read_text(), flags=re.MULTILINE)
    forwards = [sample for sample in map(json.loads, lines) if sample["n"] == B.N]
    return forwards[-len(texts):], chromium_ms


def in_process(texts: list[str]) -> list[dict]:
    """The same timed forward for each text, ``pipeline.run`` in this process (the server's malloc settings)."""
    import contextlib
    import io

    from attnviz import pipeline, urlstate
    from attnviz.producers import book
    from attnviz.ui import memory

    memory.tune_memory()
    untimed = book._forward
    namespace = {"_untimed_forward": untimed}
    exec(TIMED.split("\n\n\ndef _untimed_forward")[0], namespace)  # the wrapper alone, around book's own function
    timed = namespace["_forward"]
    config = urlstate.config_from_settings(urlstate.DEFAULTS).validate()
    samples = []
    book._forward = timed
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            pipeline.run(B.text_of_tokens(B.N, variant=950), config)  # warm
        for text in texts:
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                pipeline.run(text, config)
            samples.append(json.loads(err.getvalue().split("FORWARD ", 1)[1]))
    finally:
        book._forward = untimed
    return samples


def summary(samples: list[dict]) -> dict:
    return {field: statistics.median(sample[field] for sample in samples)
            for field in ("wall_ms", "thread_cpu_ms", "process_cpu_ms", "minor_faults", "involuntary_switches")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=6, help="cold texts in the server, and as many in this process")
    parser.add_argument("--window-ms", type=float, default=120.0,
                        help="Chromium's CPU is read this long after the key press (the trace runs meanwhile)")
    parser.add_argument("--out", type=Path, default=B.RESULTS / "trace_contention.json")
    args = parser.parse_args(argv)
    machine = B.machine()
    print(json.dumps(machine))
    server, chromium_ms = in_server([B.text_of_tokens(B.N, variant=901 + i) for i in range(args.texts)],
                                    args.window_ms)
    alone = in_process([B.text_of_tokens(B.N, variant=931 + i) for i in range(args.texts)])
    result = {"machine": machine, "window_ms": args.window_ms, "server": server, "chromium_cpu_ms": chromium_ms,
              "in_process": alone, "server_median": summary(server), "in_process_median": summary(alone),
              "chromium_cpu_ms_median": statistics.median(chromium_ms)}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print("\n| the traced forward at 1,024 tokens (medians) | in the server, Chromium committing | in this process |")
    print("|---|---:|---:|")
    for field in ("wall_ms", "thread_cpu_ms", "process_cpu_ms", "minor_faults", "involuntary_switches"):
        print(f"| {field} | {result['server_median'][field]:,.0f} | {result['in_process_median'][field]:,.0f} |")
    print(f"\nChromium's CPU time in the {args.window_ms:.0f} ms after the key press: median "
          f"{result['chromium_cpu_ms_median']:.0f} ms (all: {', '.join(f'{ms:.0f}' for ms in chromium_ms)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
