"""Does ``st.plotly_chart`` update a chart in place when its figure changes, or draw it anew?

    python benchmarks/plotly_remount.py            # 6 reruns each way; writes results/plotly_remount.json

A one-chart Streamlit app (this file, run by ``streamlit run``) draws a 256 × 256 ``float32`` heatmap with a
transparent ``scattergl`` overlay of one point a cell — the Heads page's focused map — under a fixed ``key``. A
number input reruns it with a new figure (``z`` from another seed: a layer switch), the same without the overlay
(``plain``), or the same figure (a click that changes nothing the map shows). In Chromium, the driver marks the
chart's DOM node, counts the WebGL contexts created (``HTMLCanvasElement.getContext``) and times the number's
Enter → the run ended and the chart drawn, polled per animation frame.

What it shows: a new figure is a new chart (a new DOM node, new WebGL contexts, Plotly's whole first draw), as
``st.plotly_chart``'s element id hashes the figure; the same figure keeps the node.  So every view that changes on
a layer switch is drawn from scratch: that is the floor the Heads page's layer switch sits on.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import browser as bb  # noqa: E402  benchmarks/browser.py

SIZE = 256
MODES = (("new", 256), ("plain", 256), ("same", 256), ("new", 128), ("plain", 128))


def app() -> None:
    import streamlit as st

    mode = st.query_params.get("mode", "new")
    size = int(st.query_params.get("size", SIZE))
    count = int(st.number_input("rerun", value=0))
    seed = 0 if mode == "same" else count
    z = np.random.default_rng(seed).random((size, size), dtype=np.float32)  # (size, size)
    keys = np.tile(np.arange(size, dtype=np.int16), size)  # (size²,)
    queries = np.repeat(np.arange(size, dtype=np.int16), size)  # (size²,)
    figure = {"data": [{"type": "heatmap", "z": z, "hoverinfo": "skip"},
                       {"type": "scattergl", "x": keys, "y": queries, "mode": "markers", "marker": {"opacity": 0},
                        "hoverinfo": "none"}],
              "layout": {"height": 500, "yaxis": {"autorange": "reversed"}}}
    if mode == "plain":  # the heatmap alone
        figure["data"] = figure["data"][:1]
    st.plotly_chart(figure, key="map", on_select="rerun")
    st.caption(f"run {count}")


MARK_JS = """() => {
  document.querySelector('.js-plotly-plot').__mark = (window.__marks = (window.__marks || 0) + 1);
  if (!window.__gl) {
    window.__gl = 0;
    const original = HTMLCanvasElement.prototype.getContext;
    HTMLCanvasElement.prototype.getContext = function (...args) {
      if (String(args[0]).includes('webgl')) window.__gl++;
      return original.apply(this, args);
    };
  }
  return window.__gl;
}"""
DRAWN_JS = bb.caption_drawn_js(".js-plotly-plot .main-svg")


def drive(reruns: int) -> dict:
    from checkpoint import machine
    from playwright.sync_api import sync_playwright

    result = {"machine": machine(), "size": SIZE, "reruns": reruns}
    with bb.streamlit_server("remount", "benchmarks/plotly_remount.py") as server, sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=bb.CHROMIUM, args=bb.CHROMIUM_ARGS, headless=True)
        for mode, size in MODES:
            def measure(page, count):
                before = page.evaluate(MARK_JS)
                mark = page.evaluate("() => window.__marks")
                ms = bb.enter_number(page, count, DRAWN_JS)
                page.wait_for_timeout(300)  # a remount's WebGL contexts (outside the timed interval)
                return {"ms": round(ms), "same_node": page.evaluate(
                    "(mark) => document.querySelector('.js-plotly-plot').__mark === mark", mark),
                    "webgl_contexts_created": page.evaluate("() => window.__gl") - before}

            samples = bb.number_reruns(chromium, f"{server.url}/?mode={mode}&size={size}", reruns, DRAWN_JS, measure)
            mode = f"{mode} {size}"
            result[mode] = {"samples": samples, "median_ms": round(statistics.median(s["ms"] for s in samples)),
                            "node_kept": sum(s["same_node"] for s in samples)}
            print(f"{mode} figure: median {result[mode]['median_ms']} ms, node kept {result[mode]['node_kept']} of "
                  f"{reruns}, WebGL contexts created {[s['webgl_contexts_created'] for s in samples]}", flush=True)
        chromium.close()
    return result


if __name__ == "__main__":
    bb.app_or_driver(app, drive, __doc__, 6, ROOT / "benchmarks" / "results" / "plotly_remount.json")
