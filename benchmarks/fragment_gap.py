"""The mechanism behind the Train page's blank page, on its own: a polled fragment whose layout grows, under load.

    python benchmarks/fragment_gap.py [--runs 6] [--seconds 20] [--hogs 2]

Serves ``benchmarks/fragment_gap_app.py`` (a fragment polled every 0.2 s that writes a line, on alternate runs two
captions more, then a large Plotly chart whose bytes never change, so Streamlit sends it as a reference to the
browser's cached copy) twice — its layout growing (``FIXED=0``) and the same four slots on every run with
``st.empty()`` where there is nothing (``FIXED=1``) — with ``--hogs`` busy Python processes beside them.  For each,
``--runs`` new tabs watch the page for ``--seconds``; a run fails when the page throws (Streamlit's "Bad delta path
index") or its title is gone.  Debian's Chromium through Playwright; hogs, servers and browser stopped at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, cpu_hogs, streamlit_server  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

HERE = Path(__file__).resolve().parent


def failures(browser, url: str, runs: int, seconds: float) -> int:
    failed = 0
    for _ in range(runs):
        context = browser.new_context(viewport=VIEWPORT)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))  # noqa: B023 — one page per iteration
        page.goto(url)
        start = time.monotonic()
        while time.monotonic() - start < seconds and not errors:
            page.wait_for_timeout(250)
        blank = page.evaluate("() => !document.querySelector('[data-testid=stMain] h1')")
        failed += bool(errors) or blank
        print(f"  {'FAILED' if errors or blank else 'ok'} {errors[:1]}", flush=True)
        context.close()
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--hogs", type=int, default=2)
    args = parser.parse_args()
    with cpu_hogs(args.hogs), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            for fixed in ("0", "1"):
                with streamlit_server("fragment-gap", "fragment_gap_app.py", cwd=HERE,
                                      env={"FIXED": fixed}) as server:
                    print(f"FIXED={fixed}", flush=True)
                    failed = failures(browser, server.url, args.runs, args.seconds)
                    print(f"FIXED={fixed}: {failed} of {args.runs} runs failed", flush=True)
        finally:
            browser.close()


if __name__ == "__main__":
    main()
