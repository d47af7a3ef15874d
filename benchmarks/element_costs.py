"""What each element of the checkpoint's Heads page costs Chromium to redraw on a layer switch.

    python benchmarks/element_costs.py              # every variant below, 6 switches each
    python benchmarks/element_costs.py --switches 8 --only "" grid window

Each variant is ``benchmarks/element_cost_app.py`` with some elements (``ATTNVIZ_ELEMENTS``) on a fresh server;
a new tab opens it, then the sidebar's Layer selectbox is switched ``--switches`` times, clicked and timed as in
``benchmarks/checkpoint.py --checkpoint-browser`` (option ``pointerdown`` → the caption says ``layer L of 12`` and
every chart and table is drawn again: ``browser.DRAWN_JS``, polled every animation frame, no fixed sleep inside
the interval).  Reported per variant: the median time and the median time Chromium's renderer main thread was busy
(CDP ``Performance.getMetrics`` TaskDuration).  The maps are precomputed, so the server's part of a switch is a
cache lookup and the figure builders: what is left is what the browser pays for each element.  The variant with
no element is what any Streamlit rerun costs here; subtract it.  Results: ``results/element_costs.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import browser as bb  # noqa: E402  benchmarks/browser.py
from checkpoint import _drawn_js, machine, switch_layer_in_browser  # noqa: E402

VARIANTS = ["", "sidebar", "share", "links", "grid", "grid_image", "window", "window_plain", "overview", "table",
            "select_slider", "sliders", "grid,window,overview", "merged"]


def switches(chromium, elements: str, count: int) -> list[dict]:
    """``count`` layer switches of the element-cost app showing ``elements``: ms and browser busy ms each."""
    js = _drawn_js(bb, marker_proves_run=True)  # the caption-only variant has no chart
    with bb.streamlit_server("elements", "benchmarks/element_cost_app.py",
                             env={"ATTNVIZ_ELEMENTS": elements}) as server:
        context = chromium.new_context(viewport=bb.VIEWPORT)
        context.set_default_timeout(bb.TIMEOUT_MS)
        try:
            page = context.new_page()
            page.add_init_script(bb.INIT_JS)
            frames = bb.FrameCounter(page)
            page.goto(server.url + "/")
            page.wait_for_function("() => (document.querySelector('[data-testid=stMain]')?.innerText || '')"
                                   ".includes('layer 0 of 12') && document.querySelector('[data-testid=stApp]')"
                                   ".getAttribute('data-test-script-state') === 'notRunning'", polling="raf")
            if page.locator("[data-testid=stException]").count():
                raised = page.locator("[data-testid=stException]").inner_text()
                raise RuntimeError(f"{elements}: the app raised: {raised}")
            samples = []
            for index in range(count):
                b = switch_layer_in_browser(page, frames, index % 11 + 1, js, after_ms=0)  # busy: to drawn
                samples.append({"ms": round(b["t1"] - b["t0"]), "busy": round(frames.busy_since_reset()["busy"])})
            return samples
        finally:
            context.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--switches", type=int, default=6)
    parser.add_argument("--only", nargs="*", default=None, help="variants (comma-separated element lists)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "element_costs.json")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    results = {"machine": machine(), "method": __doc__.split("\n\n")[2], "variants": {}}
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=bb.CHROMIUM, args=bb.CHROMIUM_ARGS, headless=True)
        for elements in (VARIANTS if args.only is None else args.only):
            samples = switches(chromium, elements, args.switches)
            row = {"samples": samples, "median_ms": statistics.median(s["ms"] for s in samples),
                   "median_busy_ms": statistics.median(s["busy"] for s in samples)}
            results["variants"][elements or "(caption only)"] = row
            print(f"{elements or '(caption only)':24s} median {row['median_ms']:5.0f} ms, browser busy "
                  f"{row['median_busy_ms']:5.0f} ms  ({', '.join(str(s['ms']) for s in samples)})", flush=True)
        chromium.close()
    bare = results["variants"].get("(caption only)")
    if bare:
        print("\nbusy above a caption-only rerun (median ms):")
        for name, row in results["variants"].items():
            print(f"  {name:24s} {row['median_busy_ms'] - bare['median_busy_ms']:+5.0f}")
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
