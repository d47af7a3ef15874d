"""Does the server's memory plateau?  300 distinct inputs through real page loads, RSS after each.

    python benchmarks/memory.py                     # 300 inputs, writes benchmarks/results/memory.csv (+ .png)
    python benchmarks/memory.py --inputs 60 --seed 1

One ``streamlit run app.py`` process; one Chromium (Playwright).  Input i is a URL with the settings as
query parameters (``?text=…&variant=…&num_heads=…``, the names of the sidebar's widget keys), opened in a
new tab — a new Streamlit session, as a shared link would be — and the tab is closed once the page is
drawn (same readiness as benchmarks/browser.py, plus "no exception shown").  After each input the
server's ``VmRSS`` and ``VmHWM`` are read from ``/proc/<pid>/status``.

The inputs are deterministic (``--seed``): texts of 3 to ~1000 GPT-2 tokens (about one in four near the
1024-token limit), all six variants, several head counts, both causal settings, four weight seeds, now and
then GPT-2 medium, on the Heads page (most), Steps or Tokens.  No two inputs are the same, so every input
misses the trace cache; what stays bounded is decided by the caches' bounds (the trace cache: bytes).

Plateau test: a least-squares slope of RSS over the last half of the inputs, in MB per 100 inputs, and
the maximum of the last quarter against the maximum of the second quarter.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import random
import statistics
import sys
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from browser import CHROMIUM, CHROMIUM_ARGS, IDLE_JS, VIEWPORT, app_copy, machine, streamlit_server  # noqa: E402
from payload import text_of_tokens  # noqa: E402

from attnviz import variants  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
TARGET_BYTES = 1.5 * 2**30
WORDS = ["river", "stone", "light", "window", "morning", "signal", "quiet", "garden", "paper", "engine", "bridge",
         "summer", "letter", "forest", "number", "winter", "market", "candle", "harbor", "story", "mountain",
         "question", "silver", "orange"]
HEADS = {768: [1, 2, 3, 4, 6, 8, 12, 16, 24], 1024: [1, 2, 4, 8, 16, 32]}
PAGES = ("",) * 6 + ("steps", "tokens")  # "" = the Heads page at /


def inputs(count: int, seed: int) -> list[dict]:
    """``count`` distinct input settings (URL parameters) and the page to open."""
    rng = random.Random(seed)
    chosen, seen = [], set()
    while len(chosen) < count:
        index = len(chosen)
        if rng.random() < 0.25:
            text = text_of_tokens(rng.randint(950, 1024), variant=index + 1)
        else:
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 60)))
        d_model = 1024 if rng.random() < 0.15 else 768
        settings = {
            "text": text,
            "variant": rng.choice(list(variants.LABELS)),
            "preset": "gpt2-medium" if d_model == 1024 else "gpt2-small",
            "num_heads": str(rng.choice(HEADS[d_model])),
            "causal": rng.choice(["true", "false"]),
            "seed": str(rng.choice([123, 0, 7, 2024])),
        }
        key = tuple(sorted(settings.items()))
        if key in seen:
            continue
        seen.add(key)
        chosen.append({"page": rng.choice(PAGES), "settings": settings})
    return chosen


DRAWN_OR_FAILED_JS = """
(idle) => {
  if (document.querySelector('[data-testid=stException]')) return 'exception';
  return idle() ? 'drawn' : false;
}
"""


def load(context, base_url: str, item: dict, timeout_ms: int) -> str:
    """Open one input in a new tab, wait until drawn (or an exception shows), close the tab."""
    url = f"{base_url}/{item['page']}?{urllib.parse.urlencode(item['settings'])}"
    page = context.new_page()
    try:
        page.goto(url)
        handle = page.wait_for_function(f"({DRAWN_OR_FAILED_JS})({IDLE_JS})", polling=100, timeout=timeout_ms)
        outcome = handle.json_value()
        if outcome == "exception":
            outcome += ": " + page.locator("[data-testid=stException]").first.inner_text()[:200]
        return outcome
    finally:
        page.close()


def slope_mb_per_100(values: list[float]) -> float:
    """Least-squares slope of ``values`` (bytes) against their index, in MB per 100 inputs."""
    xs = range(len(values))
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(values)
    numerator = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, values))
    denominator = sum((x - mean_x) ** 2 for x in xs) or 1.0
    return numerator / denominator * 100 / 2**20


def ascii_plot(values: list[float], width: int = 60, height: int = 12) -> str:
    """RSS (MB) against input number, as text."""
    step = max(1, len(values) // width)
    columns = [max(values[i : i + step]) for i in range(0, len(values), step)]
    top, bottom = max(columns), min(columns)
    rows = []
    for level in range(height, -1, -1):
        threshold = bottom + (top - bottom) * level / height
        label = f"{threshold / 2**20:7.0f} MB |"
        rows.append(label + "".join("█" if value >= threshold else " " for value in columns))
    rows.append(" " * 11 + "+" + "-" * len(columns))
    rows.append(" " * 12 + f"input 1 … {len(values)} ({step} per column, max of each)")
    return "\n".join(rows)


def png_plot(rows: list[dict], path: Path, browser) -> None:
    """RSS against input number as a PNG: a Plotly figure drawn by the same Chromium (no kaleido)."""
    import plotly.graph_objects as go

    x = [int(r["input"]) for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=[float(r["rss_mb"]) for r in rows], name="VmRSS after the page",
                             mode="lines+markers", marker={"size": 4, "color": "#1f77b4"}, line={"color": "#1f77b4"}))
    fig.add_trace(go.Scatter(x=x, y=[float(r["hwm_mb"]) for r in rows], name="VmHWM (peak so far)",
                             mode="lines", line={"color": "#d62728"}))
    long_inputs = [r for r in rows if int(r["tokens"]) >= 900]
    fig.add_trace(go.Scatter(x=[int(r["input"]) for r in long_inputs], y=[float(r["rss_mb"]) for r in long_inputs],
                             name="input with ≥ 900 tokens", mode="markers",
                             marker={"size": 7, "symbol": "x", "color": "#ff7f0e"}))
    fig.add_hline(y=TARGET_BYTES / 2**20, line_dash="dot", line_color="#2ca02c", annotation_text="1.5 GB target")
    fig.update_layout(title="attnviz server RSS after each page load (distinct inputs)", width=900, height=450,
                      template="plotly_white",
                      xaxis_title="input", yaxis_title="MB", margin={"l": 60, "r": 20, "t": 50, "b": 50})
    html = fig.to_html(include_plotlyjs=True, full_html=True)
    page = browser.new_page(viewport={"width": 920, "height": 470})
    try:
        page.set_content(html)
        page.wait_for_function("document.querySelector('.js-plotly-plot .main-svg')")
        page.locator(".js-plotly-plot").first.screenshot(path=str(path))
    finally:
        page.close()


# Do closed sessions keep their Traces?  Variants of the app (see benchmarks/README.md, "Memory").
PINNING_VARIANTS = {
    "as is": ([], "attnviz/ui/share.py", {}),
    "disconnected sessions dropped at once (server.disconnectedSessionTTL = 0)": (
        [], "attnviz/ui/share.py", {"STREAMLIT_SERVER_DISCONNECTED_SESSION_TTL": "0"}),
    "before the fix: the download buttons' data closes over the Trace": (
        [("functools.partial(_export, export.trace_npz, trace_key(trace))",
          "lambda: export.trace_npz(trace)"),
         ("functools.partial(_export, export.weights_csv, trace_key(trace), head, stage)",
          "lambda: export.weights_csv(trace, head, stage)")],
        "attnviz/ui/share.py", {}),
}


def pinning(count: int, wait: float, only: list[str] | None = None) -> None:
    """``count`` distinct 1024-token Heads pages (GPT-2 small, 12 heads), each tab closed once drawn, on each
    variant of PINNING_VARIANTS (a patched copy of the app); RSS after each page, then once more after ``wait``
    seconds and two more page loads (Streamlit expires stored sessions lazily, when the next one is stored)."""
    from playwright.sync_api import sync_playwright

    for label, (patches, path, env) in PINNING_VARIANTS.items():
        if only and not any(word in label for word in only):
            continue
        with contextlib.ExitStack() as stack:
            folder = stack.enter_context(app_copy(patches, path)) if patches else ROOT
            server = stack.enter_context(streamlit_server("pinning", "app.py", cwd=folder, env=env))
            playwright = stack.enter_context(sync_playwright())
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            context = browser.new_context(viewport=VIEWPORT)
            rss = []
            for index in range(count):
                item = {"page": "", "settings": {"text": text_of_tokens(1024, variant=100 + index)}}
                load(context, server.url, item, 300_000)
                rss.append(server.status("VmRSS") / 2**20)
            time.sleep(wait)
            for text in ("one more", "and another"):  # the first tab's close expires the stored sessions
                load(context, server.url, {"page": "", "settings": {"text": text}}, 300_000)
            time.sleep(2)
            after = server.status("VmRSS") / 2**20
            browser.close()
            print(f"{label}: RSS after each page (MB): {', '.join(f'{v:.0f}' for v in rss)}; "
                  f"{wait:.0f} s later + two pages: {after:.0f} MB", flush=True)


def summarize(rows: list[dict], baseline_mb: float | None, elapsed: float | None) -> None:
    rss = [float(row["rss_mb"]) * 2**20 for row in rows]
    half, quarter = len(rss) // 2, max(1, len(rss) // 4)
    peak = max(float(row["hwm_mb"]) for row in rows) * 2**20
    failures = [row for row in rows if row["outcome"] != "drawn"]
    slope = slope_mb_per_100(rss[half:])
    second_quarter, last_quarter = max(rss[quarter : 2 * quarter]), max(rss[-quarter:])
    took = f" in {elapsed / 60:.1f} min" if elapsed else ""
    print(f"\n{len(rows)} inputs{took} ({sum(int(r['tokens']) >= 900 for r in rows)} with ≥ 900 tokens); "
          f"failures: {len(failures)}")
    before = f"before {baseline_mb:.0f} MB, " if baseline_mb else ""
    print(f"RSS: {before}after input 1 {rss[0] / 2**20:.0f} MB, max {max(rss) / 2**20:.0f} MB, "
          f"final {rss[-1] / 2**20:.0f} MB; peak (VmHWM) {peak / 2**20:.0f} MB — "
          f"{'meets' if peak <= TARGET_BYTES else 'misses'} the ≤ 1.5 GB target")
    print(f"slope over the last half: {slope:+.1f} MB per 100 inputs; "
          f"max of 2nd quarter {second_quarter / 2**20:.0f} MB, "
          f"max of last quarter {last_quarter / 2**20:.0f} MB")
    jumps = sorted(range(1, len(rows)), key=lambda i: rss[i] - rss[i - 1], reverse=True)[:6]
    print("largest RSS increases (input: +MB, page, variant, preset, heads, tokens):")
    for i in sorted(jumps):
        row = rows[i]
        print(f"  {row['input']}: {(rss[i] - rss[i - 1]) / 2**20:+.0f} MB, {row['page']}, {row['variant']}, "
              f"{row['preset']}, {row['num_heads']} heads, {row['tokens']} tokens")
    print(ascii_plot(rss))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per page load")
    parser.add_argument("--out", type=Path, default=RESULTS / "memory.csv")
    parser.add_argument("--from-csv", action="store_true", help="only summarize and plot an existing --out CSV")
    parser.add_argument("--pinning", type=int, default=0, metavar="PAGES",
                        help="experiment: do closed sessions keep their Traces? (see pinning())")
    parser.add_argument("--only", nargs="*", default=None, help="with --pinning: variants whose label has a word")
    parser.add_argument("--wait", type=float, default=130.0,
                        help="with --pinning: seconds before the last reading (closed sessions are kept 120 s)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="experiment: extra environment for the server, e.g. ATTNVIZ_TRACE_CACHE_MB=256")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from attnviz import tokens

    if args.pinning:
        print(json.dumps(machine()), flush=True)
        pinning(args.pinning, wait=args.wait, only=args.only)
        return 0
    png = args.out.with_suffix(".png")
    if args.from_csv:
        with open(args.out, newline="") as handle:
            rows = list(csv.DictReader(handle))
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            png_plot(rows, png, browser)
            browser.close()
        summarize(rows, None, None)
        return 0

    items = inputs(args.inputs, args.seed)
    info = machine()
    print(json.dumps(info), flush=True)
    rows: list[dict] = []
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        env = dict(item.split("=", 1) for item in args.env)
        if env:
            print(f"experiment: server environment {env}", flush=True)
        server = stack.enter_context(streamlit_server("memory", "app.py", cwd=ROOT, env=env))
        playwright = stack.enter_context(sync_playwright())
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        context = browser.new_context(viewport=VIEWPORT)
        baseline = server.status("VmRSS")
        print(f"server pid {server.process.pid}, RSS before any page: {baseline / 2**20:.0f} MB", flush=True)
        for number, item in enumerate(items, start=1):
            begin = time.monotonic()
            outcome = load(context, server.url, item, int(args.timeout * 1000))
            settings = item["settings"]
            row = {
                "input": number, "page": item["page"] or "heads", "variant": settings["variant"],
                "preset": settings["preset"], "num_heads": settings["num_heads"], "causal": settings["causal"],
                "seed": settings["seed"], "tokens": min(len(tokens.encode(settings["text"])), 1024),
                "seconds": round(time.monotonic() - begin, 2), "outcome": outcome,
                "rss_mb": round(server.status("VmRSS") / 2**20, 1), "hwm_mb": round(server.status("VmHWM") / 2**20, 1),
            }
            rows.append(row)
            if number % 10 == 0 or outcome != "drawn":
                print(f"{number:4d} {row['page']:7s} {row['variant']:18s} n={row['tokens']:4d} {row['seconds']:5.1f}s "
                      f"RSS {row['rss_mb']:7.1f} MB  peak {row['hwm_mb']:7.1f} MB  {outcome}", flush=True)
        elapsed = time.monotonic() - started
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        with contextlib.suppress(Exception):
            png_plot(rows, png, browser)
        context.close()
        browser.close()

    summarize(rows, baseline / 2**20, elapsed)
    print(f"CSV: {args.out}" + (f", PNG: {png}" if png.exists() else ""))
    print(f"load average after: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
