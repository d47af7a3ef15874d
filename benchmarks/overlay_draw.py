"""What the focused map's cell overlay costs Plotly to draw, and which cell a pointer over it picks.

    python benchmarks/overlay_draw.py            # 6 rounds; writes results/overlay_draw.json

A static page in Chromium (Plotly's own bundle, no Streamlit) draws the Heads page's focused map at 1,024 tokens —
``figures.attention_heatmap`` of a 256 × 256 window at rows 300…555, keys 100…355, half of it masked — into a new
``div`` each time and times ``Plotly.newPlot`` to the next animation frame, rounds alternating between:

- ``text`` — the overlay as ``attention_heatmap`` builds it: text points without text (Plotly draws none of them);
- ``markers`` — the same overlay as invisible markers, with ``marker.maxdisplayed`` (also drawn as no node);
- ``scattergl`` — the same overlay as invisible WebGL markers (what the page used before);
- ``none`` — the heatmap alone (what no overlay would cost).

Then for each kind it moves the pointer to the centres of a few cells and reads the hover's query and key: markers
are picked within 3 px of the pointer (Plotly's hover distance for markers), a text point within half a pixel.
"""

from __future__ import annotations

import copy
import json
import re
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CELLS = ((50, 20), (10, 200), (128, 127), (77, 33), (200, 60), (255, 0))  # (query, key) within the window
ROWS, COLS = 300, 100  # the window's first query row and key column


def figures_by_kind() -> dict[str, dict]:
    import plotly.io as pio

    from attnviz.views import figures

    rng = np.random.default_rng(0)
    weights = rng.random((256, 256)).astype(np.float32)  # (256, 256)
    tokens = [f"t{i}" for i in range(1024)]
    base = json.loads(pio.to_json(figures.attention_heatmap(weights, tokens, "weights", validate=False,
                                                            row_offset=ROWS, col_offset=COLS,
                                                            width=figures.FOCUSED_MAP_PX), validate=False))
    overlay = [i for i, trace in enumerate(base["data"]) if trace.get("name") in ("cells", "masked cells")]

    def kind(change):
        spec = copy.deepcopy(base)
        change(spec)
        spec["layout"]["clickmode"] = "event+select"
        return spec

    def markers(gl: bool):
        def change(spec):
            for i in overlay:
                spec["data"][i].update(type="scattergl" if gl else "scatter", mode="markers",
                                       marker={"opacity": 0, "size": 6, **({} if gl else {"maxdisplayed": 1})})
        return change

    def none(spec):
        spec["data"] = [trace for i, trace in enumerate(spec["data"]) if i not in overlay]

    return {"text": kind(lambda spec: None), "markers": kind(markers(False)), "scattergl": kind(markers(True)),
            "none": kind(none)}


DRAW_JS = """async (spec) => {
  const host = document.getElementById('host'), old = host.firstChild;
  if (old) { Plotly.purge(old); old.remove(); }
  const gd = document.createElement('div'); gd.id = 'plot'; host.appendChild(gd);
  await new Promise(r => requestAnimationFrame(r));
  const t0 = performance.now();
  await Plotly.newPlot(gd, spec.data, spec.layout, {});
  await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  return performance.now() - t0;
}"""
CELL_JS = """([row, col]) => {
  const gd = document.getElementById('plot'), full = gd._fullLayout;
  const area = gd.querySelector('.main-svg').getBoundingClientRect();
  return [area.left + full.xaxis._offset + full.xaxis.l2p(col), area.top + full.yaxis._offset + full.yaxis.l2p(row)];
}"""


def main() -> None:
    import argparse
    import os

    import plotly
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import browser as bb  # benchmarks/browser.py
    from checkpoint import machine

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    specs = figures_by_kind()
    bundle = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    page_file = Path(os.environ.get("TMPDIR", "/tmp")) / "attnviz-overlay-draw.html"
    page_file.write_text("<html><body><div id='host' style='width:900px'></div></body></html>")
    times: dict[str, list[float]] = {kind: [] for kind in specs}
    picked: dict[str, list] = {}
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=bb.CHROMIUM, args=bb.CHROMIUM_ARGS, headless=True)
        page = chromium.new_page(viewport={"width": 1200, "height": 900})
        page.goto(page_file.as_uri())
        page.add_script_tag(content=bundle.read_text())
        for _ in range(args.rounds):
            for kind, spec in specs.items():
                times[kind].append(page.evaluate(DRAW_JS, spec))
        for kind, spec in specs.items():
            if kind == "none":
                continue
            page.evaluate(DRAW_JS, spec)
            picked[kind] = []
            for row, col in CELLS:
                x, y = page.evaluate(CELL_JS, [ROWS + row, COLS + col])
                page.mouse.move(x, y)
                page.wait_for_selector("#plot .hovertext")
                hover = re.search(r"query (\d+): \S+key (\d+): ", page.locator("#plot .hovertext").text_content())
                picked[kind].append({"aimed": [ROWS + row, COLS + col], "hovered": [int(hover[1]), int(hover[2])]})
                page.mouse.move(5, 5)
        chromium.close()
    result = {"machine": machine(), "rounds": args.rounds,
              "draw_ms": {kind: {"median": round(statistics.median(ts)), "all": [round(t) for t in ts]}
                          for kind, ts in times.items()},
              "picked": picked}
    for kind, ts in result["draw_ms"].items():
        off = [abs(p["hovered"][0] - p["aimed"][0]) + abs(p["hovered"][1] - p["aimed"][1])
               for p in picked.get(kind, [])]
        print(f"{kind:10} newPlot median {ts['median']} ms {ts['all']}" + (f"; cells off by {off}" if off else ""))
    out = ROOT / "benchmarks" / "results" / "overlay_draw.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
