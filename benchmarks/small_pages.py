"""The Compare page and the Pitfall lab's KV-cache bugs at the default six-token sentence, opened from a link in a
fresh tab, this checkout (after) against another checkout's app (before), alternating in the same minutes:
``python benchmarks/small_pages.py BEFORE_DIR [ROUNDS] [NAME]`` (BEFORE_DIR: a ``git archive`` export of the other
commit).

Each round starts each app's server in turn (headless, no file watcher), opens its Heads page once (a server's first
page, not timed), then opens each of :data:`LINKS` in turn in a new tab (a new session), in that order, as a teacher
clicking through them does: the caches fill as they would.  Each sample runs from the navigation's start to the first
animation frame at which the page is drawn (``browser.IDLE_JS``: no script running, nothing stale, no spinner, every
chart and table of the main area drawn); ``run`` is its script run (first run started → last run ended).  The rounds
and medians go to ``results/NAME.json`` (default ``small_pages``)."""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from browser import CHROMIUM, CHROMIUM_ARGS, IDLE_JS, INIT_JS, RESULTS, VIEWPORT, machine, streamlit_server

HERE = Path(__file__).resolve().parent
TIMEOUT_MS = 180_000
LINKS = (  # the teacher's links, then two pages of the same minutes that this change leaves alone
    "/compare",
    "/compare?seed=5",
    "/compare?text=The cat sat on the mat",
    "/pitfalls?bug=cache_position",
    "/pitfalls?bug=cache_reset",
    "/pitfalls?bug=cache_reset&seed=9",
    "/pitfalls?bug=cache_too_little",
    "/pitfalls?bug=masked_fill",
    "/steps",
)


def open_link(browser, url: str) -> dict:
    """A new tab at ``url``: ms from navigation start to drawn, and the script run's ms."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.add_init_script(INIT_JS)
    try:
        page.goto(url)
        page.wait_for_function(IDLE_JS, polling="raf", timeout=TIMEOUT_MS)
        drawn = page.evaluate("performance.now()")
        b = page.evaluate("window.__bench")
        return {"ms": drawn, "run": (b.get("lastRunEnd") or drawn) - (b.get("firstRunStart") or drawn),
                "runs": b["runs"]}
    finally:
        context.close()


def main() -> int:
    from playwright.sync_api import sync_playwright

    before, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
    name = sys.argv[3] if len(sys.argv) > 3 else "small_pages"
    apps = {"after": HERE.parent, "before": Path(before).resolve()}
    samples = []
    summary = {"what": f"fresh tab at each link → drawn, default settings, this checkout (after) and {before} "
                       f"(before) alternating, {rounds} rounds", "machine": machine()}
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for round_ in range(1, rounds + 1):
            for app in ("after", "before") if round_ % 2 else ("before", "after"):  # each first in turn
                with streamlit_server(app, "app.py", cwd=apps[app]) as server:
                    open_link(browser, server.url + "/")  # the server's first page: imports, warm-up
                    for link in LINKS:
                        time.sleep(1.0)  # the last tab's teardown is over
                        sample = {"app": app, "round": round_, "link": link, **open_link(browser, server.url + link)}
                        samples.append(sample)
                        print(app, round_, f"{link:40s} {sample['ms']:6.0f} ms (run {sample['run']:.0f})", flush=True)
        browser.close()
    summary["load_after"] = list(__import__("os").getloadavg())
    summary["medians_ms"] = {
        link: {app: {field: round(statistics.median(s[field] for s in samples if s["app"] == app and s["link"] == link))
                     for field in ("ms", "run")} for app in apps} for link in LINKS}
    summary["samples"] = samples
    (RESULTS / f"{name}.json").write_text(json.dumps(summary, indent=1))
    for link, by_app in summary["medians_ms"].items():
        print(f"{link:40s} after {by_app['after']['ms']:6d} ms (run {by_app['after']['run']:5d})   "
              f"before {by_app['before']['ms']:6d} ms (run {by_app['before']['run']:5d})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
