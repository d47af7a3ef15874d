"""How many times does ``st.plotly_chart`` draw a new figure?

    python benchmarks/plotly_draws.py            # 4 reruns a variant; writes results/plotly_draws.json

A one-chart Streamlit app (this file, run by ``streamlit run``) draws a new 64 × 64 heatmap on every rerun (a
number input's value seeds it, as a layer switch brings new maps), titled "map", with ``theme="streamlit"`` or
``theme=None``, with or without ``on_select="rerun"``, and as built (Plotly's automargin on), with margins that
need no automargin, or also with what ``Plotly.react`` needs to skip an unchanged redraw (``layout.datarevision``,
``z`` as a list, not a binary array, and no title). In Chromium, the driver counts the heatmap's draws by
Plotly's ``canvas.toDataURL`` calls (one a heatmap trace a draw, whenever it happens, so no draw is missed however
soon it follows the chart's mount) and reads the title the chart shows once the run has ended and the page has
been idle for a second.

What it shows: Streamlit (1.67) draws every new figure at least twice — its ``PlotlyChart`` themes the figure again
in an effect after its first draw and sets it as new state, and Plotly draws new binary arrays anew — three times
with its theme (``results/plotly_draws.json``), where the title ends bolded twice ("<b><b>map"). The third draw is
Plotly's automargin (margins that hold the labels, as ``attnviz/views/margins.py`` sets, take it away). The second
stays whatever the figure: the theme effect's copy gives the layout a new ``template`` object, which ``Plotly.react``
takes as changed, and a binary array decodes to a new typed array, which it also takes as changed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import browser as bb  # noqa: E402  benchmarks/browser.py

# (theme, on_select="rerun", figure)
VARIANTS = (("streamlit", False, "built"), ("none", False, "built"), ("streamlit", True, "built"),
            ("streamlit", False, "margins"), ("streamlit", True, "margins"), ("streamlit", False, "immutable"),
            ("none", False, "immutable"))


def app() -> None:
    import streamlit as st

    theme = None if st.query_params.get("theme") == "none" else "streamlit"
    select = st.query_params.get("select") == "1"
    built = st.query_params.get("figure", "built")
    count = int(st.number_input("rerun", value=0))
    z = np.random.default_rng(count).random((64, 64), dtype=np.float32)  # (64, 64): new maps every rerun
    figure = {"data": [{"type": "heatmap", "z": z}], "layout": {"title": {"text": "map"}, "height": 400}}
    if built in ("margins", "immutable"):  # margins that hold the tick labels and the colour bar
        figure["layout"] |= {"xaxis": {"automargin": False}, "yaxis": {"automargin": False},
                             "margin": {"l": 40, "r": 100, "t": 40, "b": 30}}
    if built == "immutable":  # what lets Plotly.react skip data it has drawn
        figure["layout"] |= {"datarevision": count, "title": None}
        figure["data"][0]["z"] = z.tolist()
    st.plotly_chart(figure, key="map", theme=theme, **({"on_select": "rerun"} if select else {}))
    st.caption(f"run {count}")


COUNT_JS = """() => {
  if (!window.__draws) {
    window.__draws = 0;
    const original = HTMLCanvasElement.prototype.toDataURL;
    HTMLCanvasElement.prototype.toDataURL = function (...args) { window.__draws++; return original.apply(this, args); };
  }
  return window.__draws;
}"""
DRAWN_JS = bb.caption_drawn_js(".js-plotly-plot g.heatmaplayer image")


def drive(reruns: int) -> dict:
    from checkpoint import machine
    from playwright.sync_api import sync_playwright

    result = {"machine": machine(), "reruns": reruns}
    with bb.streamlit_server("draws", "benchmarks/plotly_draws.py") as server, sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=bb.CHROMIUM, args=bb.CHROMIUM_ARGS, headless=True)
        for theme, select, built in VARIANTS:
            def measure(page, count):
                before = page.evaluate("() => window.__draws")
                bb.enter_number(page, count, DRAWN_JS)
                page.wait_for_timeout(1000)  # a later draw, if any (not a timing: the count is what is read)
                return {"draws": page.evaluate("() => window.__draws") - before,
                        "title": page.evaluate("() => document.querySelector('.js-plotly-plot').layout.title?.text")}

            url = f"{server.url}/?theme={theme}&select={int(select)}&figure={built}"
            samples = bb.number_reruns(chromium, url, reruns, DRAWN_JS, measure, init_script=f"({COUNT_JS})()")
            name = f"theme={theme}, on_select={'rerun' if select else 'ignore'}, figure {built}"
            result[name] = samples
            print(f"{name}: draws a rerun {[s['draws'] for s in samples]}, title {samples[-1]['title']!r}", flush=True)
        chromium.close()
    return result


if __name__ == "__main__":
    bb.app_or_driver(app, drive, __doc__, 4, ROOT / "benchmarks" / "results" / "plotly_draws.json")
