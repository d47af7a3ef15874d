"""A head picked in the Heads page's *Focused head* selectbox at 1,024 tokens → the page drawn, in Chromium, for two
copies of the app alternating (this tree and another commit's export): what redrawing the grid with its ▶ mark costs
a pick.

    git archive <commit> | tar -x -C /tmp/before
    python benchmarks/head_pick.py /tmp/before --rounds 2

Each round starts a server of each copy (the order alternates), opens ``/?text=<1,024 tokens>`` (the default settings:
the book's MultiHeadAttention, GPT-2 small's shape, 12 heads) and picks heads 3, 7, 1, 9 and 5 in turn, 1.5 s apart.
The selectbox's list is opened first; the interval runs from the press on the option (a ``pointerdown``, stamped in
the page) to the first frame where no script runs, every chart is drawn (``browser.IDLE_JS``) and the focused map's
title names the picked head, polled each animation frame.  Each sample also records the grid's ▶ mark then.

Results: ``results/head_pick.json`` (the samples, the medians, the machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import urllib.parse
from pathlib import Path

from browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    IDLE_JS,
    INIT_JS,
    RESULTS,
    ROOT,
    TIMEOUT_MS,
    VIEWPORT,
    N,
    machine,
    streamlit_server,
    text_of_tokens,
)

PICKS = (3, 7, 1, 9, 5)

DONE_JS = """
(head) => {
  const b = window.__bench;
  if (b.t0 === null || b.runs <= b.runsBefore) return false;
  if (!((IDLE))()) return false;
  const main = document.querySelector('[data-testid=stMain]');
  const titles = [...main.querySelectorAll('.js-plotly-plot text.gtitle')].map((t) => t.textContent);
  if (!titles.some((t) => t.startsWith('head ' + head + ':'))) return false;
  b.t1 = performance.now();
  b.marked = [...main.querySelectorAll('text.annotation-text')].map((t) => t.textContent).filter(
    (t) => t.startsWith('▶'));
  return true;
}
""".replace("(IDLE)", IDLE_JS.strip())

ARM_JS = "() => { const b = window.__bench; b.t0 = null; b.t1 = null; b.armed = true; b.runsBefore = b.runs; }"


def picks(browser, root: Path, text: str) -> list[dict]:
    """Every pick of :data:`PICKS` on a fresh server of the app in ``root``."""
    samples = []
    with streamlit_server(root.name, "app.py", cwd=root) as server:
        context = browser.new_context(viewport=VIEWPORT)
        context.set_default_timeout(TIMEOUT_MS)
        try:
            page = context.new_page()
            page.add_init_script(INIT_JS)
            page.goto(f"{server.url}/?{urllib.parse.urlencode({'text': text})}")
            page.wait_for_function("(marker) => document.querySelector('[data-testid=stMain]')?.innerText"
                                   ".includes(marker)", arg=f"{N} tokens", polling="raf")
            page.wait_for_function(IDLE_JS, polling="raf")
            focus = page.get_by_test_id("stMain").get_by_role("combobox", name="Focused head")
            for head in PICKS:
                time.sleep(1.5)  # settle (outside the interval)
                focus.scroll_into_view_if_needed()
                focus.click()
                option = page.get_by_test_id("stSelectboxVirtualDropdown").get_by_role(
                    "option", name=f"head {head}", exact=True)
                option.wait_for(state="visible")
                page.evaluate(ARM_JS)
                option.click()
                page.wait_for_function(DONE_JS, arg=head, polling="raf", timeout=TIMEOUT_MS)
                b = page.evaluate("window.__bench")
                samples.append({"head": head, "ms": b["t1"] - b["t0"], "marked": b["marked"]})
                print(f"{root}: head {head} {samples[-1]['ms']:.0f} ms, grid marks {b['marked']}", flush=True)
        finally:
            context.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("other", type=Path, help="another copy of the app (an exported commit)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS / "head_pick.json")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    copies = {"this tree": ROOT, "other": args.other.resolve()}
    results = {name: [] for name in copies}
    text = text_of_tokens(N)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for round_ in range(args.rounds):
            order = list(copies.items()) if round_ % 2 == 0 else list(reversed(copies.items()))
            for name, root in order:
                results[name] += picks(browser, root, text)
        browser.close()
    medians = {name: statistics.median(s["ms"] for s in samples) for name, samples in results.items()}
    for name, value in medians.items():
        print(f"{name}: median {value:.0f} ms over {len(results[name])} picks")
    args.out.write_text(json.dumps({"machine": machine(), "other": str(args.other), "medians_ms": medians,
                                    "samples": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
