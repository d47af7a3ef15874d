"""The Compare page in Chromium: a new 1,024-token text (Ctrl+Enter in a fresh tab → every chart drawn, as
``browser.py --cold`` times the Heads page), this checkout (after) against another checkout's app (before),
alternating in the same minutes: ``python benchmarks/compare_page.py BEFORE_DIR [ROUNDS] [TEXTS]`` (BEFORE_DIR: a
``git archive`` export of the other commit).  Each text is new to both servers; the rounds and medians go to
``results/compare_page_ab.json``."""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from browser import (
    ARM_JS,
    CHROMIUM,
    CHROMIUM_ARGS,
    IDLE_JS,
    INIT_JS,
    RESULTS,
    SETTLE_S,
    TIMEOUT_MS,
    VIEWPORT,
    FrameCounter,
    machine,
    streamlit_server,
    wait_drawn,
)
from payload import text_of_tokens

HERE = Path(__file__).resolve().parent
MARKER = "This run has 1,024 tokens"  # the page's notice once the new text's run is drawn


def commit_on_compare(browser, url: str, text: str) -> dict:
    """Ctrl+Enter → drawn for one text on the Compare page, in a fresh session."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.add_init_script(INIT_JS)
    frames = FrameCounter(page)
    try:
        page.goto(f"{url}/compare")
        page.wait_for_function(IDLE_JS, polling="raf")
        time.sleep(SETTLE_S)
        box = page.locator("[data-testid=stSidebar] textarea").first
        box.fill(text)
        page.evaluate(ARM_JS)
        frames.reset()
        box.press("Control+Enter")
        return wait_drawn(page, MARKER, frames)
    finally:
        context.close()


def main() -> int:
    from playwright.sync_api import sync_playwright

    before, rounds, texts = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2, int(
        sys.argv[3]) if len(sys.argv) > 3 else 3
    apps = {"after": HERE.parent, "before": Path(before)}
    samples, variant = [], 100
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for round_ in range(1, rounds + 1):
            for app in ("after", "before") if round_ % 2 else ("before", "after"):  # each first in turn
                with streamlit_server(app, "app.py", cwd=apps[app]) as server:
                    for _ in range(texts):
                        variant += 1  # a text neither server has seen
                        sample = commit_on_compare(browser, server.url, text_of_tokens(1024, variant))
                        samples.append({"app": app, "round": round_, **sample})
                        print(app, round_, f"{sample['ms']:.0f} ms (run {sample['run']:.0f})", flush=True)
        browser.close()
    summary = {"what": f"the Compare page: a new 1,024-token text → drawn, this checkout (after) and {before} "
                       f"(before) alternating, {rounds} rounds of {texts} texts each",
               "samples": samples, "machine": machine()}
    for app in apps:
        summary[f"{app}_median_ms"] = round(statistics.median(s["ms"] for s in samples if s["app"] == app))
        summary[f"{app}_median_run_ms"] = round(statistics.median(s["run"] for s in samples if s["app"] == app))
    (RESULTS / "compare_page_ab.json").write_text(json.dumps(summary, indent=1))
    print({key: value for key, value in summary.items() if key.endswith("ms")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
