"""How many times each chart of the Heads page is drawn in a layer switch, and what Streamlit's second draw costs.

    python benchmarks/switch_draws.py            # 6 switches a round, 2 rounds; writes results/switch_draws.json

The Heads page at 1,024 tokens of a GPT-2-small-shaped checkpoint (as ``checkpoint.py --checkpoint-browser``), in
Chromium. A script added to the page wraps ``Plotly.react`` (``st.plotly_chart`` draws through it) and counts, a
switch, each chart's calls and the heatmap draws (``canvas.toDataURL``, one a heatmap trace a draw). Streamlit's
``PlotlyChart`` calls ``Plotly.react`` twice for a new figure: once when it mounts it, once more from the effect that
themes the figure again (``plotly_draws.py``). Every other round skips that second call: the wrapper hands the chart
its new copy of the figure without drawing it, so the chart's update callback finds nothing new. The switch's time
with and without the second draw is so measured in the same run: the Layer option's pointerdown to the page drawn
(``checkpoint.switch_layer_in_browser``), and the browser's main thread busy in that time.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

PROBE_JS = """
(() => {
  window.__draws = {log: [], skipSecond: false};
  const original = HTMLCanvasElement.prototype.toDataURL;
  HTMLCanvasElement.prototype.toDataURL = function (...args) {
    window.__draws.log.push('draw');
    return original.apply(this, args);
  };
  const wrap = () => {
    const Plotly = window.Plotly;
    if (!Plotly || Plotly.__counted) return !!Plotly;
    Plotly.__counted = true;
    const react = Plotly.react;
    Plotly.react = function (gd, figure, ...rest) {
      gd.__reacts = (gd.__reacts || 0) + 1;
      const data = Array.isArray(figure) ? figure : figure.data;
      window.__draws.log.push('react ' + gd.__reacts + ' ' + data.map((trace) => trace.type).join('+'));
      if (window.__draws.skipSecond && gd.__reacts === 2) {  // the figure drawn already, as a new copy
        gd.data = data;  // what the chart's update callback hands back as its new state: no third call
        gd.layout = Array.isArray(figure) ? rest[0] : figure.layout;
        return Promise.resolve(gd);
      }
      return react.call(this, gd, figure, ...rest);
    };
    return true;
  };
  const timer = setInterval(() => { if (wrap()) clearInterval(timer); }, 1);
})();
"""


def per_chart(log: list[str]) -> dict[str, dict[str, int]]:
    """{chart's trace types: {"reacts": calls, "draws": heatmap draws}} from a switch's log (a draw belongs to the
    ``Plotly.react`` call before it)."""
    charts: dict[str, dict[str, int]] = {}
    current = None
    for entry in log:
        if entry.startswith("react "):
            _, _, current = entry.split(" ", 2)
            charts.setdefault(current, {"reacts": 0, "draws": 0})["reacts"] += 1
        elif current is not None:
            charts[current]["draws"] += 1
    return charts


def main(switches: int = 6, rounds: int = 2) -> dict:
    import browser as bb  # benchmarks/browser.py
    import checkpoint as ck  # benchmarks/checkpoint.py
    from playwright.sync_api import sync_playwright

    result: dict = {"machine": ck.machine(), "switches_a_round": switches, "rounds": []}
    folder = Path(tempfile.mkdtemp(prefix="attnviz-bench-")) / "gpt2-small-random"
    try:
        ck.write_checkpoint(folder, ck.SMALL)
        env = {"ATTNVIZ_CHECKPOINTS": str(folder.parent), "HF_HUB_CACHE": str(folder.parent / "no-hf-cache")}
        query = urllib.parse.urlencode({"weights": folder.name, "text": ck.text_of_tokens(1024, 0)})
        drawn_js = ck._drawn_js(bb)
        for index in range(2 * rounds):
            skip = index % 2 == 1
            with bb.streamlit_server("draws", "app.py", env=env) as server, sync_playwright() as playwright:
                chromium = playwright.chromium.launch(executable_path=bb.CHROMIUM, args=bb.CHROMIUM_ARGS,
                                                      headless=True)
                _, page, frames = bb.open_tab(chromium, server, query, PROBE_JS)
                page.wait_for_function("(marker) => document.querySelector('[data-testid=stMain]').innerText"
                                       ".includes(marker)", arg="1024 tokens", polling="raf")
                page.evaluate(f"() => {{ window.__draws.skipSecond = {str(skip).lower()}; }}")
                samples = []
                for switch in range(switches):
                    page.evaluate("() => { window.__draws.log = []; }")
                    b = ck.switch_layer_in_browser(page, frames, switch + 1, drawn_js, after_ms=1500)
                    samples.append({"ms": round(b["t1"] - b["t0"]), "busy": round(frames.busy_since_reset()["busy"]),
                                    "charts": per_chart(page.evaluate("() => window.__draws.log"))})
                chromium.close()
            entry = {"second_react": "skipped" if skip else "as Streamlit does it", "samples": samples,
                     "median_ms": statistics.median(s["ms"] for s in samples),
                     "median_busy_ms": statistics.median(s["busy"] for s in samples)}
            result["rounds"].append(entry)
            print(f"second Plotly.react {entry['second_react']}: median {entry['median_ms']} ms, browser busy "
                  f"{entry['median_busy_ms']} ms; charts {samples[-1]['charts']}", flush=True)
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)
    return result


if __name__ == "__main__":
    if "--help" in sys.argv or "-h" in sys.argv:
        print(__doc__)
        raise SystemExit(0)
    os.chdir(ROOT)
    out = main()
    (ROOT / "benchmarks" / "results" / "switch_draws.json").write_text(json.dumps(out, indent=1) + "\n")
