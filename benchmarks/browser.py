"""The Heads page at 1024 tokens in a real Chromium: attnviz vs a naive one-heatmap-per-head page.

    python benchmarks/browser.py                    # 3 cold + 5 warm runs per app, 5 settings changes
    python benchmarks/browser.py --warm 7 --changes 9
    # only: a fresh server's first page vs the floor app
    python benchmarks/browser.py --only-first-paint --first-paint 5
    python benchmarks/browser.py --app-root DIR       # time another checkout's app.py (e.g. a `git archive`)
    python benchmarks/browser.py --click 9            # only: a click on a cell of the focused map → its products

One run starts two Streamlit servers on free ports: the project's ``app.py`` and
``benchmarks/naive_heads_app.py`` (same ``pipeline.run`` and cache, then 12 × ``go.Heatmap(z=float64
1024×1024)``, one ``st.plotly_chart`` each).  Chromium is Debian's ``/usr/bin/chromium`` driven by Playwright.

**Commit → drawn.**  Every measured run opens a new tab (= a new Streamlit session) at ``/`` with the
default six-word sentence and waits until it is drawn; then fills the sidebar's Text area with a text of
exactly 1024 GPT-2 tokens and presses Ctrl+Enter.  The time is measured inside the page with
``performance.now()``: from the Ctrl+Enter ``keydown`` (capture listener) to the first animation frame at
which the page is **drawn**:

1. ``stApp`` has ``data-test-script-state="notRunning"`` and at least one script run started after the
   key press (a MutationObserver counts transitions to ``running``; a run so fast that React never
   painted "running" counts when the page has charts, as condition 3 then proves a new run's data);
2. no element in the main area is ``data-stale="true"``, no spinner or status widget is shown;
3. every Plotly chart in the main area (``st.plotly_chart``: ``.js-plotly-plot``) is *fresh* — created after the
   key press, or an existing chart that fired ``plotly_afterplot`` after it — and *drawn* (``PLOTLY_DRAWN``): it
   has ``_fullLayout`` and its ``.main-svg``, one ``g.heatmaplayer g.hm image`` per heatmap trace of its
   ``_fullData``, one ``g.imagelayer g.im image`` with its ``href`` set per image trace, bar paths if it has bar
   traces, a ``g.scatterlayer g.trace`` if it has SVG scatter traces and a WebGL canvas if it has ``scattergl``
   traces (the focused map's cell overlay above 4,096 cells);
4. every Graphviz chart has an ``svg g.node``; every visible ``st.dataframe`` (``stDataFrame``, drawn by Glide
   data grid) shows its ``canvas`` (a table in a collapsed expander is never drawn by the browser);
5. the main area shows the text's token count (``1024 tokens``) — so the charts are the new run's.

Plotly renders a heatmap into a canvas and sets the resulting PNG as the ``<image>``'s href; the time
does not include the browser decoding and painting that image in later frames (this favours the naive
page, whose images are 1024×1024).

Before each key press the script waits ``SETTLE_S`` (3 s): runs of the two apps alternate, and the
naive page leaves its server and Chromium busy for seconds (146 MB of messages to free) — without the
pause that spilled into the next attnviz run (benchmarks/README.md, "Heads page at 1024 tokens").

*Warm* runs commit a text the server has already run (pipeline and figure caches hold it), so they
measure serialising, sending and drawing.  *Cold* runs commit a 1024-token text the server has never seen
(a different text per run): ``pipeline.run`` is included (the module and embedding caches are warm).

**Settings change.**  Default sentence; toggle "Causal mask" in the sidebar, or pick 4 ↔ 12 heads; the
time runs from the click (``pointerdown``, capture) to the same drawn state, where condition 5's text is
the new setting in the page's caption ("no mask ·" / "causal mask ·", "4 heads ×" / "12 heads ×").

**Websocket bytes.**  CDP ``Network.webSocketFrameReceived``: the decoded payload of every frame the page
receives from the key press (or click) to drawn, plus 300 ms.

**First paint of a fresh server** (``--first-paint N``, also part of the full run).  A new server for every
sample (``streamlit run``, waited for ``/_stcore/health``), then a new tab opens ``/``: the time runs from the
navigation's start (``performance.timeOrigin``) to the first animation frame at which the page is drawn
(conditions 1-4 above, with no key press, and the page's marker: "6 tokens" for attnviz's default sentence,
"one chart" for the floor).  The floor, ``benchmarks/floor_app.py``, is the smallest Streamlit page that draws what
the first page's focused map draws: it imports torch and Plotly and draws one 6 × 6 Plotly heatmap (the default
sentence's 6 tokens) with ``st.plotly_chart``; samples of the two alternate, so both see the same machine.  The
issue's target: attnviz ≤ 1.2 × the floor.

**A click on a cell → its products drawn** (``--click N``, alone).  A server of the project's ``app.py`` and a tab at
``/?text=<1024 tokens>`` (the default settings: the book's MultiHeadAttention, GPT-2 small's shape, 12 heads of
64 dimensions); once drawn, the focused head's map (the chart whose axis is titled "key token": a 256 × 256 window
of the 1,024-token map, its cell overlay a ``scattergl``) is scrolled into view and clicked N times, each on
another unmasked cell (key ≤ query).  The cell's page position is computed from Plotly's axes:
``.main-svg``'s bounding rectangle + ``gd._fullLayout.xaxis._offset + xaxis.l2p(key)`` (and ``yaxis`` for the
query).  A cell is ~1.3 px wide at this size, and Plotly's click picks the point it hovers, so the mouse first
moves onto the cell, as a user's does, and the script waits until Plotly hovers it or a neighbour (≤ 2 positions
away; ``gd._hoverdata``): that hovered cell is the one clicked and reported.  After a 1 s settle and the hover (both
outside the interval) the time runs from the button's ``pointerdown`` (capture) to the first animation frame at
which the column beside the map shows the markdown line ``score q·k = Σ products = …`` under the title naming
"(query i, key j)" and the products chart (y axis title ``q[d]·k[d]``) names the same cell in its title and has
drawn one bar path per dimension (``ms``: the target).  Reported too: ``complete_ms``, the frame at which the
fragment's run has ended and every chart of the main area is drawn (the row's softmax charts too); and whether the
bars add up to the score the page shows (checked after the interval).  Results: ``results/click.json``.

**Peak RSS** of each server process: ``VmHWM`` from ``/proc/<pid>/status`` at the end (peak over the run).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from payload import text_of_tokens  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1400, "height": 1000}
N = 1024
TIMEOUT_MS = 300_000
RESULTS = ROOT / "benchmarks" / "results"

# --------------------------------------------------------------------------- servers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, name: str, process: subprocess.Popen, url: str, log: Path):
        self.name, self.process, self.url, self.log = name, process, url, log

    def status(self, field: str) -> int:
        """A ``/proc/<pid>/status`` field in bytes (VmRSS, VmHWM)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise KeyError(field)


@contextlib.contextmanager
def streamlit_server(name: str, script: str, timeout: float = 90.0, cwd: Path = ROOT,
                     env: dict[str, str] | None = None) -> Iterator[Server]:
    """``streamlit run <script>`` (in ``cwd``, ``env`` added to the environment) on a free port, headless;
    yields once /_stcore/health answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = Path(tempfile.mkdtemp(prefix=f"attnviz-bench-{name}-")) / "server.log"
    command = [sys.executable, "-m", "streamlit", "run", script, "--server.headless", "true",
               "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
               "--server.fileWatcherType", "none"]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{name} server exited ({process.returncode}):\n{log.read_text()[-2000:]}")
            with contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError), \
                    urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} server not healthy in {timeout:.0f} s:\n{log.read_text()[-2000:]}")
            time.sleep(0.25)
        yield Server(name, process, url, log)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)


@contextlib.contextmanager
def cpu_hogs(count: int) -> Iterator[None]:
    """``count`` busy Python processes (``while True: pass``) for the block: a machine whose cores are taken."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


# --------------------------------------------------------------------------- in-page instrumentation

# Installed in every tab before any script: counts script runs; arm() marks the charts present now,
# counts their later redraws, and stamps the first key press / pointer press after it.
INIT_JS = """
(() => {
  window.__bench = {runs: 0, t0: null, t1: null, armed: false, runStart: null, runEnd: null};
  new MutationObserver((records) => {
    for (const r of records) {
      if (!r.target.getAttribute) continue;
      const state = r.target.getAttribute('data-test-script-state'), b = window.__bench;
      if (state === 'running' && r.oldValue !== 'running') {
        b.runs += 1;
        if (b.firstRunStart === undefined) b.firstRunStart = performance.now();
        if (b.t0 !== null && b.runStart === null) b.runStart = performance.now();
      }
      if (state === 'notRunning' && r.oldValue === 'running' && b.runStart !== null) b.runEnd = performance.now();
      if (state === 'notRunning' && r.oldValue === 'running') b.lastRunEnd = performance.now();
    }
  }).observe(document, {subtree: true, attributes: true, attributeOldValue: true,
                        attributeFilter: ['data-test-script-state']});
  const stamp = (event) => {
    const b = window.__bench;
    if (!b.armed || b.t0 !== null) return;
    if (event.type === 'keydown' && !(event.key === 'Enter' && (event.ctrlKey || event.metaKey))) return;
    b.t0 = performance.now();
  };
  document.addEventListener('keydown', stamp, true);
  document.addEventListener('pointerdown', stamp, true);
})();
"""

ARM_JS = """
() => {
  const b = window.__bench;
  b.t0 = null; b.t1 = null; b.runStart = null; b.runEnd = null; b.armed = true; b.runsBefore = b.runs;
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    gd.__benchOld = true; gd.__benchRedraws = 0;
    if (!gd.__benchListening && gd.on) {
      gd.on('plotly_afterplot', () => { if (window.__bench.t0 !== null) gd.__benchRedraws += 1; });
      gd.__benchListening = true;
    }
  }
}
"""

# A JS function (gd) => bool: a Plotly chart has drawn its data (module docstring, condition 3)
PLOTLY_DRAWN = """
(gd) => {
  if (!gd._fullLayout || !gd._fullData || !gd.querySelector('.main-svg')) return false;
  const count = (type) => gd._fullData.filter((t) => t.type === type && t.visible === true).length;
  if (gd.querySelectorAll('g.heatmaplayer g.hm image').length < count('heatmap')) return false;
  if ([...gd.querySelectorAll('g.imagelayer g.im image')].filter((i) => i.getAttribute('href')).length
      < count('image')) return false;
  if (count('bar') && !gd.querySelector('g.barlayer g.trace.bars path')) return false;
  if (count('scatter') && !gd.querySelector('g.scatterlayer g.trace')) return false;
  if (count('scattergl') && !gd.querySelector('.gl-container canvas')) return false;
  return true;
}
"""

# A JS function (main) => bool: every Graphviz chart and every visible data grid of the main area is drawn
# (condition 4)
OTHERS_DRAWN = """
(main) => {
  for (const graph of main.querySelectorAll('[data-testid=stGraphVizChart]')) {
    if (!graph.querySelector('svg g.node')) return false;
  }
  for (const table of main.querySelectorAll('[data-testid=stDataFrame]')) {
    if (table.checkVisibility() && !table.querySelector('canvas')) return false;
  }
  return true;
}
"""

# Returns true (and stamps t1) once the page is drawn; see the module docstring, conditions 1-5.
DRAWN_JS = """
(marker) => {
  const b = window.__bench;
  if (b.t0 === null) return false;
  const app = document.querySelector('[data-testid=stApp]');
  // a run started after the action: seen as a script-state change, or (a fast run whose "running" state
  // React never painted) as every chart redrawn with new data, checked below
  if (b.runs <= b.runsBefore && !document.querySelector('[data-testid=stMain] .js-plotly-plot')) return false;
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (document.querySelector('[data-testid=stStatusWidget], [data-testid=stSpinner]')) return false;
  const main = document.querySelector('[data-testid=stMain]');
  if (!main || main.querySelector('[data-stale=true]')) return false;
  if (marker && !main.innerText.includes(marker)) return false;
  for (const gd of main.querySelectorAll('.js-plotly-plot')) {
    if (gd.__benchOld && !gd.__benchRedraws) return false;
    if (!(PLOTLY_DRAWN)(gd)) return false;
  }
  if (!(OTHERS_DRAWN)(main)) return false;
  b.t1 = performance.now();
  b.armed = false;
  return true;
}
""".replace("PLOTLY_DRAWN", PLOTLY_DRAWN.strip()).replace("OTHERS_DRAWN", OTHERS_DRAWN.strip())

IDLE_JS = """
() => {
  const app = document.querySelector('[data-testid=stApp]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  const main = document.querySelector('[data-testid=stMain]');
  if (!main || main.querySelector('[data-stale=true]')) return false;
  if (!main.querySelector('.js-plotly-plot, [data-testid=stHeading]')) return false;
  if (document.querySelector('[data-testid=stStatusWidget], [data-testid=stSpinner]')) return false;
  return [...main.querySelectorAll('.js-plotly-plot')].every(PLOTLY_DRAWN) && (OTHERS_DRAWN)(main);
}
""".replace("PLOTLY_DRAWN", PLOTLY_DRAWN.strip()).replace("OTHERS_DRAWN", OTHERS_DRAWN.strip())


class FrameCounter:
    """Decoded bytes of the websocket frames a tab receives (CDP Network.webSocketFrameReceived), and the
    renderer main thread's busy time (CDP Performance.getMetrics: TaskDuration, ScriptDuration)."""

    def __init__(self, page):
        self.bytes = 0
        self.frames = 0
        self.session = page.context.new_cdp_session(page)
        self.session.on("Network.webSocketFrameReceived", self._received)
        self.session.send("Network.enable")
        self.session.send("Performance.enable")
        self.metrics_before: dict[str, float] = {}

    def metrics(self) -> dict[str, float]:
        return {m["name"]: m["value"] for m in self.session.send("Performance.getMetrics")["metrics"]}

    def busy_since_reset(self) -> dict[str, float]:
        """Milliseconds the renderer's main thread spent in tasks / in JavaScript since reset()."""
        now = self.metrics()
        return {name: (now[key] - self.metrics_before[key]) * 1e3
                for name, key in (("busy", "TaskDuration"), ("js", "ScriptDuration"), ("layout", "LayoutDuration"),
                                  ("style", "RecalcStyleDuration"))}

    def _received(self, event) -> None:
        response = event["response"]
        data = response.get("payloadData", "")
        size = len(base64.b64decode(data)) if response.get("opcode") == 2 else len(data.encode())
        self.bytes += size
        self.frames += 1

    def reset(self) -> None:
        self.bytes = self.frames = 0
        self.metrics_before = self.metrics()


def caption_drawn_js(selector: str) -> str:
    """JS for ``page.wait_for_function(js, arg=caption)`` in a one-chart benchmark app: the page shows ``caption``,
    its run has ended and ``selector`` (its chart, drawn) matches."""
    return ("(marker) => document.body.innerText.includes(marker)\n"
            "  && document.querySelector('[data-testid=stApp]').getAttribute('data-test-script-state') === 'notRunning'"
            f"\n  && !!document.querySelector({json.dumps(selector)})")


def enter_number(page, value: int, drawn_js: str) -> float:
    """In a one-chart benchmark app: type ``value`` into its number input, press Enter and wait until ``drawn_js``
    holds for the caption ``run {value}``; the ms from Enter to drawn (polled per animation frame)."""
    number = page.locator("input[type=number]")
    number.fill(str(value))
    started = time.perf_counter()
    number.press("Enter")
    page.wait_for_function(drawn_js, arg=f"run {value}", polling="raf", timeout=TIMEOUT_MS)
    return (time.perf_counter() - started) * 1000


def number_reruns(chromium, url: str, reruns: int, drawn_js: str, measure, init_script: str | None = None) -> list:
    """Open ``url`` (a one-chart benchmark app) in a new tab and wait for its run 0, then rerun it ``reruns`` times
    by its number input, a second apart: ``measure(page, count)`` enters the number (:func:`enter_number`) and
    returns that rerun's sample."""
    page = chromium.new_page(viewport=VIEWPORT)
    if init_script:
        page.add_init_script(init_script)
    page.goto(url)
    page.wait_for_function(drawn_js, arg="run 0", polling="raf", timeout=TIMEOUT_MS)
    samples = []
    for count in range(1, reruns + 1):
        time.sleep(1.0)  # settle: the last rerun's work is over (outside any timed interval)
        samples.append(measure(page, count))
    page.close()
    return samples


def app_or_driver(app, drive, doc: str, reruns: int, out: Path) -> None:
    """The ``__main__`` of a one-file benchmark that is its own Streamlit app: run by ``streamlit run``, it draws
    ``app()``; run by ``python``, it calls ``drive(--reruns)`` and writes the result to ``--out`` (default ``out``)."""
    from streamlit import runtime

    if runtime.exists():
        app()
        return
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--reruns", type=int, default=reruns)
    parser.add_argument("--out", default=str(out))
    args = parser.parse_args()
    Path(args.out).write_text(json.dumps(drive(args.reruns), indent=1) + "\n")


def open_tab(browser, server: Server, query: str = "", init_script: str | None = None):
    """A new context + tab on the server's default page (with ``query``, an encoded query string), drawn; with a
    websocket frame counter.  ``init_script``: more JavaScript to run in the page before its own, after INIT_JS."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.add_init_script(INIT_JS)
    if init_script is not None:
        page.add_init_script(init_script)
    frames = FrameCounter(page)
    page.goto(f"{server.url}/?{query}" if query else server.url + "/")
    page.wait_for_function(IDLE_JS, polling="raf")
    return context, page, frames


def wait_drawn(page, marker: str | None, frames: FrameCounter) -> dict:
    """Milliseconds from the stamped action to drawn (see DRAWN_JS), split into phases:
    ``start`` action → script state running, ``run`` running → notRunning (the last run), ``draw`` the rest;
    and ``bytes``: websocket payload received from the action to drawn + 300 ms."""
    page.wait_for_function(DRAWN_JS, arg=marker, polling="raf", timeout=TIMEOUT_MS)
    page.wait_for_timeout(300)
    b = page.evaluate("window.__bench")
    start = (b["runStart"] or b["t1"]) - b["t0"]
    run = (b["runEnd"] or b["t1"]) - (b["runStart"] or b["t1"])
    total = b["t1"] - b["t0"]
    return {"ms": total, "start": start, "run": run, "draw": total - start - run, "bytes": frames.bytes,
            **frames.busy_since_reset()}


SETTLE_S = 3.0  # before each measured commit: the other server and tab finish their work (GC, teardown)


def bare_forward_ms(repeats: int = 5) -> float:
    """The book's MultiHeadAttention forward at n = 1024 (GPT-2 small's shape: 768 wide, 12 heads, causal, eval, no
    recorder, inference mode) in this process: median of ``repeats`` calls after a warm-up, milliseconds.  What a new
    1024-token text is compared with (cold commit / bare forward, measured right after each commit)."""
    import torch

    from attnviz.attention import MultiHeadAttention

    torch.manual_seed(0)
    module = MultiHeadAttention(768, 768, context_length=N, dropout=0.0, num_heads=12).eval()
    x = torch.randn(1, N, 768)
    times = []
    with torch.inference_mode():
        module(x)
        for _ in range(repeats):
            start = time.perf_counter()
            module(x)
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def commit_text(browser, server: Server, text: str) -> dict:
    """Ctrl+Enter → drawn (see wait_drawn) for one text in a fresh session."""
    context, page, frames = open_tab(browser, server)
    time.sleep(SETTLE_S)
    try:
        box = page.locator("[data-testid=stSidebar] textarea").first
        box.fill(text)
        page.evaluate(ARM_JS)
        frames.reset()
        box.press("Control+Enter")
        return wait_drawn(page, f"{N:,} tokens", frames)
    finally:
        context.close()


# The Heads page's caption after the i-th causal toggle from the default (on): the new run's content is shown.
CAUSAL_MARKERS = ("no mask ·", "causal mask ·")


def change_settings(browser, server: Server, changes: int) -> dict[str, list[dict]]:
    """Default sentence: toggle causal, and switch 12 ↔ 4 heads, ``changes`` times each."""
    context, page, frames = open_tab(browser, server)
    results: dict[str, list[dict]] = {"causal toggle": [], "heads 12 ↔ 4": []}
    try:
        sidebar = page.locator("[data-testid=stSidebar]")
        for index in range(changes):
            page.evaluate(ARM_JS)
            frames.reset()
            sidebar.locator("[data-testid=stCheckbox]", has_text="Causal mask").locator("label").click()
            results["causal toggle"].append(wait_drawn(page, CAUSAL_MARKERS[index % 2], frames))

            heads = "4" if index % 2 == 0 else "12"
            sidebar.locator("[data-testid=stSelectbox]", has_text="Heads").click()
            option = page.get_by_role("option", name=heads, exact=True)
            page.evaluate(ARM_JS)
            frames.reset()
            option.click()
            results["heads 12 ↔ 4"].append(wait_drawn(page, f"{heads} heads ×", frames))
    finally:
        context.close()
    return results


# Drawn, for a tab that just opened: as DRAWN_JS without an action (every chart is new), from navigation start.
FIRST_PAINT_JS = """
(marker) => {
  const app = document.querySelector('[data-testid=stApp]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (!window.__bench || window.__bench.runs < 1) return false;
  if (document.querySelector('[data-testid=stStatusWidget], [data-testid=stSpinner]')) return false;
  const main = document.querySelector('[data-testid=stMain]');
  if (!main || main.querySelector('[data-stale=true]') || !main.innerText.includes(marker)) return false;
  if (!main.querySelector('.js-plotly-plot')) return false;  // at least one chart
  if (![...main.querySelectorAll('.js-plotly-plot')].every(PLOTLY_DRAWN) || !(OTHERS_DRAWN)(main)) return false;
  window.__bench.t1 = performance.now();
  return true;
}
""".replace("PLOTLY_DRAWN", PLOTLY_DRAWN.strip()).replace("OTHERS_DRAWN", OTHERS_DRAWN.strip())

FIRST_PAINT_MARKERS = {"attnviz": "6 tokens", "floor": "one chart"}

# After drawn: the first frame with no element still a loading skeleton (Streamlit fetches each widget type's code
# when the first such widget arrives; the floor page has none).  Reported beside the target, not part of it.
COMPLETE_JS = """
() => {
  if (document.querySelector('[data-testid=stSkeleton]')) return false;
  window.__bench.t2 = performance.now();
  return true;
}
"""


def first_paint(browser, name: str, script: str, cwd: Path) -> dict:
    """A fresh server (``script`` in ``cwd``), then a new tab at ``/``: ms from navigation start to drawn."""
    with streamlit_server(f"first-{name}", script, cwd=cwd) as server:
        context = browser.new_context(viewport=VIEWPORT)
        context.set_default_timeout(TIMEOUT_MS)
        try:
            page = context.new_page()
            page.add_init_script(INIT_JS)
            page.goto(server.url + "/")
            page.wait_for_function(FIRST_PAINT_JS, arg=FIRST_PAINT_MARKERS[name], polling="raf", timeout=TIMEOUT_MS)
            page.wait_for_function(COMPLETE_JS, polling="raf", timeout=TIMEOUT_MS)
            b = page.evaluate("window.__bench")
            # phases: navigation → the script starts (page load, websocket) → it ends (server) → drawn (browser);
            # complete: no widget left as a loading skeleton (the sidebar's settings)
            return {"ms": b["t1"], "to_script": b.get("firstRunStart"), "script_end": b.get("lastRunEnd"),
                    "complete": b["t2"]}
        finally:
            context.close()


def first_paints(browser, repeats: int, app_root: Path) -> dict[str, list[dict]]:
    """``repeats`` fresh-server first paints of attnviz and of the floor app, alternating."""
    results: dict[str, list[dict]] = {"attnviz": [], "floor": []}
    for index in range(repeats):
        for name, script, cwd in (("attnviz", "app.py", app_root), ("floor", "benchmarks/floor_app.py", ROOT)):
            time.sleep(SETTLE_S)
            results[name].append(first_paint(browser, name, script, cwd))
            r = results[name][-1]
            print(f"first paint {index} {name}: {r['ms']:,.0f} ms (script starts {r['to_script'] or 0:,.0f}, "
                  f"ends {r['script_end'] or 0:,.0f}; no skeleton left at {r['complete']:,.0f})", flush=True)
    return results


def report_first_paint(results: dict[str, list[dict]]) -> None:
    app, floor = median(results["attnviz"]), median(results["floor"])
    ratios = [a["ms"] / f["ms"] for a, f in zip(results["attnviz"], results["floor"])]
    print("\n| fresh server, first page → drawn | median ms | runs ms |\n|---|---:|---|")
    for name in results:
        runs_ms = ", ".join(f"{r['ms']:,.0f}" for r in results[name])
        print(f"| {name} | {median(results[name]):,.0f} | " + runs_ms + " |")
    print(f"first paint / floor: {app / floor:.2f}× (medians; target ≤ 1.2×); per pair "
          + ", ".join(f"{r:.2f}×" for r in ratios))
    print(f"no skeleton left (the sidebar's widgets drawn too), median ms: "
          f"attnviz {median(results['attnviz'], 'complete'):,.0f}, "
          f"floor {median(results['floor'], 'complete'):,.0f}")


# --------------------------------------------------------------------------- a click on a cell → its products

# The page position of (x, y) in data coordinates of a Plotly chart's first pair of axes (the heatmap's).
DATA_TO_PAGE_JS = """
([gd, x, y]) => {
  const full = gd._fullLayout, area = gd.querySelector('.main-svg').getBoundingClientRect();
  return {x: area.left + full.xaxis._offset + full.xaxis.l2p(x), y: area.top + full.yaxis._offset + full.yaxis.l2p(y)};
}
"""

# Returns the cell [query, key] the page explains once the products of a cell near the clicked one are drawn (and
# stamps t1): the markdown lines name it and give the score; the products chart names it and has drawn its bars.
PRODUCTS_DRAWN_JS = """
([query, key, previous, slack]) => {
  const b = window.__bench;
  if (b.t0 === null) return false;
  const main = document.querySelector('[data-testid=stMain]');
  if (!main) return false;
  const near = (q, k) => Math.abs(q - query) <= slack && Math.abs(k - key) <= slack
      && !(q === previous[0] && k === previous[1]);
  let cell = null;
  for (const block of main.querySelectorAll('[data-testid=stMarkdownContainer]')) {
    const m = block.innerText.match(/\\(query (\\d+), key (\\d+)\\)/);
    if (m && near(Number(m[1]), Number(m[2]))) { cell = [Number(m[1]), Number(m[2])]; break; }
  }
  if (cell === null) return false;
  const score = [...main.querySelectorAll('[data-testid=stMarkdownContainer]')].find(
      (block) => block.innerText.trim().startsWith('score q·k = Σ products ='));
  if (!score || score.closest('[data-stale=true]')) return false;
  for (const gd of main.querySelectorAll('.js-plotly-plot')) {
    const full = gd._fullLayout;
    if (!full || !gd._fullData || full.yaxis?.title?.text !== 'q[d]·k[d]') continue;
    // Streamlit's theme wraps the title in <b>; a long title breaks with <br> (after "key 76", say)
    // ... and keeps a name with its number by a no-break space ("key\u00a076")
    const title = (full.title?.text || '').replace(/<br>/g, ' ').replace(/<[^>]*>/g, '').replace(/\u00a0/g, ' ');
    if (!title.startsWith(`query ${cell[0]} `) || !title.includes(`→ key ${cell[1]} `)) return false;
    const bars = gd._fullData[0]._length ?? gd._fullData[0].y.length;
    if (gd.querySelectorAll('g.barlayer g.trace.bars g.point path').length < bars) return false;
    b.t1 = performance.now();
    return cell;
  }
  return false;
}
"""

# After the products: the fragment's run has ended and every chart of the main area is drawn (stamps t2).
CLICK_COMPLETE_JS = """
() => {
  const app = document.querySelector('[data-testid=stApp]'), main = document.querySelector('[data-testid=stMain]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (!main || main.querySelector('[data-stale=true]')) return false;
  if (document.querySelector('[data-testid=stStatusWidget], [data-testid=stSpinner]')) return false;
  if (![...main.querySelectorAll('.js-plotly-plot')].every(PLOTLY_DRAWN)) return false;
  window.__bench.t2 = performance.now();
  return true;
}
""".replace("PLOTLY_DRAWN", PLOTLY_DRAWN.strip())

# The products chart's bars summed, and the score the markdown line shows (checked after the interval).
PRODUCTS_SUM_JS = """
() => {
  const main = document.querySelector('[data-testid=stMain]');
  const gd = [...main.querySelectorAll('.js-plotly-plot')].find(
      (g) => g._fullLayout?.yaxis?.title?.text === 'q[d]·k[d]');
  const line = [...main.querySelectorAll('[data-testid=stMarkdownContainer]')].find(
      (block) => block.innerText.trim().startsWith('score q·k = Σ products ='));
  const m = line && line.innerText.match(/Σ products = (-?\\d+\\.\\d+)/);
  const y = Array.from(gd._fullData[0].y);  // decoded (gd.data keeps the binary array as Streamlit sent it)
  return {sum: y.reduce((a, c) => a + c, 0), bars: y.length, score: m ? Number(m[1]) : null};
}
"""

# The cell [query, key] Plotly hovers (and so a click picks) once it is within ``slack`` positions of the target.
HOVERED_JS = """
([gd, query, key, slack]) => {
  const point = (gd._hoverdata || []).find((p) => ((p.fullData || p.data || {}).name) === 'cells');
  if (!point || Math.abs(point.y - query) > slack || Math.abs(point.x - key) > slack) return false;
  return [Math.round(point.y), Math.round(point.x)];
}
"""

CLICK_SLACK = 2  # a cell is ~1.3 px wide in the 256 × 256 window: Plotly may hover a neighbour of the aimed-at cell


def click_cells(count: int, size: int = 256) -> list[tuple[int, int]]:
    """``count`` different unmasked cells (query, key ≤ query) spread over the focused window, none within
    ``2 · CLICK_SLACK + 1`` positions of the one before (so a picked neighbour is never the previous cell)."""
    cells = []
    for index in range(count):
        query = 24 + (index * 61) % (size - 48)  # 24 … size − 25: away from the window's edges
        key = (index * 37) % (query - 8) + 4
        cells.append((query, key))
    return cells


# The Heads page's focused map: the Plotly chart with the "cells" overlay and a y axis titled "query token" (the
# row-softmax chart beside it also has an axis titled "key token").
FOCUSED_MAP_JS = """
() => [...document.querySelectorAll('[data-testid=stMain] .js-plotly-plot')].find(
    (gd) => (gd._fullData || []).some((t) => t.name === 'cells')
        && gd._fullLayout?.yaxis?.title?.text === 'query token')
"""


def focused_map(page):
    """The focused map's Plotly element (``gd``), as an element handle."""
    return page.wait_for_function(FOCUSED_MAP_JS, polling="raf", timeout=60_000).as_element()


def clicks(browser, app_root: Path, count: int) -> dict:
    """``count`` clicks on cells of the focused map at 1024 tokens → the products drawn (module docstring)."""
    import urllib.parse

    text = text_of_tokens(N)
    cells = click_cells(count)
    samples: list[dict] = []
    with streamlit_server("click", "app.py", cwd=app_root) as server:
        context = browser.new_context(viewport=VIEWPORT)
        context.set_default_timeout(TIMEOUT_MS)
        try:
            page = context.new_page()
            page.add_init_script(INIT_JS)
            frames = FrameCounter(page)
            started = time.perf_counter()
            page.goto(f"{server.url}/?{urllib.parse.urlencode({'text': text})}")
            page.wait_for_function(IDLE_JS, polling="raf")
            page.wait_for_function("(marker) => document.querySelector('[data-testid=stMain]').innerText"
                                   ".includes(marker)", arg=f"{N:,} tokens", polling="raf")
            page.wait_for_function(IDLE_JS, polling="raf")
            print(f"first page (load + 1024-token paint): {time.perf_counter() - started:.1f} s", flush=True)
            gd = focused_map(page)
            gd.scroll_into_view_if_needed()
            overlay = gd.evaluate("(gd) => gd._fullData.map((t) => t.type + ' ' + t.name)")
            previous = [-1, -1]
            for index, (query, key) in enumerate(cells):
                time.sleep(1.0)  # settle (outside the interval)
                gd = focused_map(page)
                gd.scroll_into_view_if_needed()
                where = page.evaluate(DATA_TO_PAGE_JS, [gd, key, query])
                # hover first, as a user does (outside the interval): Plotly's click picks the point it hovers
                page.mouse.move(where["x"] - 3, where["y"] - 3)
                page.mouse.move(where["x"], where["y"], steps=3)
                hovered = page.wait_for_function(HOVERED_JS, arg=[gd, query, key, CLICK_SLACK], polling="raf",
                                                 timeout=30_000).json_value()
                page.evaluate(ARM_JS)
                frames.reset()
                page.mouse.down()
                page.mouse.up()
                shown = page.wait_for_function(PRODUCTS_DRAWN_JS, arg=[*hovered, previous, 0],
                                               polling="raf", timeout=60_000).json_value()
                page.wait_for_function(CLICK_COMPLETE_JS, polling="raf", timeout=TIMEOUT_MS)
                b = page.evaluate("window.__bench")
                check = page.evaluate(PRODUCTS_SUM_JS)
                previous = shown
                sample = {"ms": b["t1"] - b["t0"], "complete_ms": b["t2"] - b["t0"],
                          "run_start_ms": (b["runStart"] - b["t0"]) if b["runStart"] else None,
                          "run_end_ms": (b["runEnd"] - b["t0"]) if b["runEnd"] else None,
                          "aimed_at": [query, key], "hovered": hovered, "shown": shown, "bars": check["bars"],
                          "bars_sum": check["sum"], "score": check["score"],
                          "sum_matches": check["score"] is not None and abs(check["sum"] - check["score"]) < 1e-3,
                          "bytes": frames.bytes, **frames.busy_since_reset()}
                samples.append(sample)
                print(f"click {index} aimed at (query {query}, key {key}), hovered {tuple(hovered)} → "
                      f"shown {tuple(shown)}: products {sample['ms']:,.0f} ms, "
                      f"complete {sample['complete_ms']:,.0f} ms, {check['bars']} bars, Σ {check['sum']:.4f} vs score "
                      f"{check['score']} (browser main thread busy {sample['busy']:,.0f} ms), "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
        finally:
            context.close()
    return {"tokens": N, "settings": "app defaults: the book's MultiHeadAttention, d 768, 12 heads (head_dim 64), "
                                     "causal; focused head 0, its 256 × 256 window at (0, 0)",
            "focused_map_traces": overlay,
            "method": "pointerdown on the cell's page position (Plotly axes l2p) -> the markdown line and the products "
                      "chart name the cell and its bars are drawn (polled per animation frame); complete = the "
                      "fragment's run ended and every chart drawn",
            "clicks": samples, "median_ms": statistics.median(s["ms"] for s in samples),
            "median_complete_ms": statistics.median(s["complete_ms"] for s in samples),
            "all_ms": [round(s["ms"]) for s in samples], "target_ms": 300}


# --------------------------------------------------------------------------- ablation

# Where does the browser's time go?  Copies of the app with parts of the Heads page's layer views
# (attnviz/ui/heads_views.py's draw) left out: (old, new) replaces the first ``old``; (old, None) cuts draw() there.
ABLATION_FILE = "attnviz/ui/heads_views.py"
_NO_DIAGRAM = ("grid_col = beside_shape_diagram(trace, highlight=stage)", "grid_col = st.container()")
_NO_GRID = ('st.plotly_chart(heads_grid_figure(page_run, stage), key="heads_grid"',
            'None and st.plotly_chart(heads_grid_figure(page_run, stage), key="heads_grid"')
_NO_STATS_TABLE = ('st.dataframe(stats, key="heads_stats"', 'None and st.dataframe(stats, key="heads_stats"')
_NO_TYPES = ("head_labels.section(page_run)", "None")
_FOCUSED = "focused_head(page_run.trace_key, stage, head, page_run.link)"
ABLATIONS = {
    "as is": [],
    "no shape diagram": [_NO_DIAGRAM],
    "no head statistics": [('st.subheader("Head statistics")', None)],
    "neither": [_NO_DIAGRAM, ('st.subheader("Head statistics")', None)],
    "grid only (no diagram, focused view, statistics)": [_NO_DIAGRAM, (_FOCUSED, None)],
    "no heads grid": [_NO_GRID],
    "no focused head": [(_FOCUSED, "None")],
    "no statistics table": [_NO_STATS_TABLE],
    "sidebar and caption only": [("stage = st.segmented_control(", None)],
    "no head-types table": [_NO_TYPES],
    "no tables": [_NO_STATS_TABLE, _NO_TYPES],
}


@contextlib.contextmanager
def app_copy(patches: list[tuple[str, str | None]], path: str = ABLATION_FILE) -> Iterator[Path]:
    """app.py, pages/ and attnviz/ copied to a temporary folder, with the file ``path`` patched
    (``(old, new)``: replace the first ``old``; ``(old, None)``: cut the file from ``old`` on)."""
    import shutil

    with tempfile.TemporaryDirectory(prefix="attnviz-copy-") as folder:
        target = Path(folder)
        shutil.copy(ROOT / "app.py", target / "app.py")
        for package in ("pages", "attnviz"):
            shutil.copytree(ROOT / package, target / package, ignore=shutil.ignore_patterns("__pycache__"))
        patched = target / path
        source = patched.read_text()
        for old, new in patches:
            if old not in source:
                raise RuntimeError(f"{path} changed: {old!r} not found; update the patch")
            source = source[: source.index(old)] if new is None else source.replace(old, new, 1)
        patched.write_text(source)
        yield target


def toggles(browser, server: Server, count: int) -> list[dict]:
    context, page, frames = open_tab(browser, server)
    results = []
    try:
        for index in range(count):
            page.evaluate(ARM_JS)
            frames.reset()
            page.locator("[data-testid=stSidebar] [data-testid=stCheckbox]", has_text="Causal mask").locator(
                "label").click()
            results.append(wait_drawn(page, CAUSAL_MARKERS[index % 2], frames))
    finally:
        context.close()
    return results


def ablation(browser, repeats: int, only: list[str] | None = None, toggles_only: bool = False) -> None:
    text = text_of_tokens(N)
    print("\n| heads page variant | causal toggle ms (6 tokens) | main thread busy ms | warm 1024 commit ms "
          "| main thread busy ms |")
    print("|---|---:|---:|---:|---:|")
    for name, patches in ABLATIONS.items():
        if only and not any(word in name for word in only):
            continue
        with app_copy(patches) as folder, streamlit_server(name, "app.py", cwd=folder) as server:
            changes = toggles(browser, server, repeats + 1)[1:]  # the first toggle computes causal=False
            commits = []
            if not toggles_only:
                commit_text(browser, server, text)  # warm the text
                commits = [commit_text(browser, server, text) for _ in range(repeats)]
            print(f"| {name} | {median(changes):,.0f} | {median(changes, 'busy'):,.0f} | {median(commits):,.0f} "
                  f"| {median(commits, 'busy'):,.0f} |", flush=True)


# --------------------------------------------------------------------------- report


def machine() -> dict:
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        for line in subprocess.check_output(["lscpu"], text=True).splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    mem = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
               if line.startswith("MemTotal:"))
    from importlib.metadata import version

    import plotly
    import streamlit
    import torch

    chromium = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "cpu": model, "cores": os.cpu_count(), "ram_gib": round(mem / 1024**2, 1),
        "date": datetime.datetime.now().isoformat(timespec="minutes"),
        "python": platform.python_version(), "torch": torch.__version__, "streamlit": streamlit.__version__,
        "plotly": plotly.__version__, "playwright": version("playwright"), "chromium": chromium,
        "load_before": os.getloadavg(),
    }


def median(samples: list[dict], field: str = "ms") -> float:
    return statistics.median(sample[field] for sample in samples) if samples else float("nan")


def show(sample: dict) -> str:
    return (f"{sample['ms']:,.0f} ms (start {sample['start']:,.0f} + run {sample['run']:,.0f} + draw "
            f"{sample['draw']:,.0f}; browser main thread busy {sample['busy']:,.0f}, JS {sample['js']:,.0f}), "
            f"{sample['bytes']:,} B")


def phases(samples: list[dict]) -> str:
    return " + ".join(f"{median(samples, field):,.0f}" for field in ("start", "run", "draw"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", type=int, default=3, help="cold runs per app (a new text each)")
    parser.add_argument("--warm", type=int, default=5, help="warm runs per app")
    parser.add_argument("--changes", type=int, default=5, help="settings changes of each kind")
    parser.add_argument("--skip-naive", action="store_true")
    parser.add_argument("--ablation", type=int, default=0, metavar="REPEATS",
                        help="only time copies of the app with parts of the Heads page left out")
    parser.add_argument("--only", nargs="*", default=None, help="with --ablation: variants whose name has a word")
    parser.add_argument("--toggles-only", action="store_true", help="with --ablation: skip the 1024-token commits")
    parser.add_argument("--first-paint", type=int, default=3, metavar="N",
                        help="fresh-server first paints per app (attnviz, floor); alone with --only-first-paint")
    parser.add_argument("--only-first-paint", action="store_true", help="measure only the fresh-server first paint")
    parser.add_argument("--app-root", type=Path, default=ROOT,
                        help="folder whose app.py is timed (default: this checkout), e.g. a `git archive` of a commit")
    parser.add_argument("--click", type=int, default=0, metavar="N",
                        help="only: N clicks on cells of the focused map at 1024 tokens → the products drawn "
                        "(results/click.json, or --out)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the samples are written "
                        "(default results/browser.json; --click: results/click.json)")
    args = parser.parse_args(argv)
    app_root = args.app_root.resolve()
    if args.out is None:
        args.out = RESULTS / ("click.json" if args.click else "browser.json")
    if args.click:
        from playwright.sync_api import sync_playwright

        info = machine()
        info["app_root"] = str(app_root)
        print(json.dumps(info), flush=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            result = clicks(browser, app_root, args.click)
            browser.close()
        info["load_after"] = os.getloadavg()
        print(f"\nclick on a cell → products drawn at {N} tokens: median {result['median_ms']:,.0f} ms "
              f"(target ≤ 300 ms); all: {', '.join(str(ms) for ms in result['all_ms'])} ms; whole fragment drawn: "
              f"median {result['median_complete_ms']:,.0f} ms")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"machine": info, "click": result}, indent=1) + "\n")
        print(f"wrote {args.out}")
        return 0
    if args.ablation:
        from playwright.sync_api import sync_playwright

        print(json.dumps(machine()), flush=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            ablation(browser, args.ablation, args.only, args.toggles_only)
            browser.close()
        return 0
    from playwright.sync_api import sync_playwright

    from attnviz import tokens

    info = machine()
    info["app_root"] = str(app_root)
    print(json.dumps(info), flush=True)
    if args.only_first_paint:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            paints = first_paints(browser, args.first_paint, app_root)
            browser.close()
        report_first_paint(paints)
        info["load_after"] = os.getloadavg()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"machine": info, "first_paint": paints}, indent=1))
        return 0
    warm_text = text_of_tokens(N)
    cold_texts = [text_of_tokens(N, variant=i + 1) for i in range(args.cold)]
    for text in [warm_text, *cold_texts]:
        assert len(tokens.encode(text)) == N, len(tokens.encode(text))
    names = ["attnviz"] + ([] if args.skip_naive else ["naive"])
    scripts = {"attnviz": "app.py", "naive": "benchmarks/naive_heads_app.py"}
    samples: dict[str, dict[str, list]] = {name: {"cold": [], "warm": []} for name in names}
    with contextlib.ExitStack() as stack:
        servers = {name: stack.enter_context(streamlit_server(name, scripts[name], cwd=app_root if name == "attnviz"
                                                                else ROOT)) for name in names}
        playwright = stack.enter_context(sync_playwright())
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        stack.callback(browser.close)
        for index, text in enumerate(cold_texts):  # never seen by either server
            for name in names:
                result = commit_text(browser, servers[name], text)
                if name == "attnviz":  # the bare forward right after, on the same machine state
                    result["bare_forward_ms"] = bare_forward_ms()
                samples[name]["cold"].append(result)
                print(f"cold {index} {name}: {show(result)}"
                      + (f" · bare forward {result['bare_forward_ms']:.0f} ms, "
                         f"ratio {result['ms'] / result['bare_forward_ms']:.1f}×"
                         if "bare_forward_ms" in result else ""), flush=True)
        for name in names if args.warm else ():  # make the warm text warm
            commit_text(browser, servers[name], warm_text)
        for index in range(args.warm):
            for name in names:
                result = commit_text(browser, servers[name], warm_text)
                samples[name]["warm"].append(result)
                print(f"warm {index} {name}: {show(result)}", flush=True)
        changes = change_settings(browser, servers["attnviz"], args.changes)
        for kind, values in changes.items():
            print(f"{kind}: " + "; ".join(show(value) for value in values), flush=True)
        peaks = {name: {"VmHWM": server.status("VmHWM"), "VmRSS": server.status("VmRSS")}
                 for name, server in servers.items()}
        paints = first_paints(browser, args.first_paint, app_root) if args.first_paint else {}
    info["load_after"] = os.getloadavg()

    print("\n1024-token text committed (Ctrl+Enter) → drawn; medians; phases = to script start + script run + "
          "drawing after the run\n")
    print("| page | cold ms | warm ms | warm phases ms | warm runs ms | websocket MB per commit | peak RSS MB |")
    print("|---|---:|---:|---|---|---:|---:|")
    for name in names:
        warm = samples[name]["warm"]
        print(f"| {name} | {median(samples[name]['cold']):,.0f} | {median(warm):,.0f} | {phases(warm)} | "
              + ", ".join(f"{sample['ms']:,.0f}" for sample in warm)
              + f" | {median(warm, 'bytes') / 1e6:.2f} | {peaks[name]['VmHWM'] / 2**20:,.0f} |")
    ratios = [sample["ms"] / sample["bare_forward_ms"] for sample in samples["attnviz"]["cold"]]
    if ratios:
        print(f"\nnew 1024-token text (cold) / bare book MHA forward at n = 1024, each right after its commit: "
              f"median {statistics.median(ratios):.1f}× ({', '.join(f'{r:.1f}' for r in ratios)}); target ≤ 6×")
    if "naive" in names:
        for kind in ("cold", "warm"):
            speedup = median(samples["naive"][kind]) / median(samples["attnviz"][kind])
            print(f"speedup ({kind}): {speedup:.1f}×")
    print("\n| settings change (default sentence) | median ms | phases ms | runs ms | websocket kB |")
    print("|---|---:|---|---|---:|")
    for kind, values in changes.items():
        print(f"| {kind} | {median(values):,.0f} | {phases(values)} | "
              + ", ".join(f"{value['ms']:,.0f}" for value in values) + f" | {median(values, 'bytes') / 1e3:,.0f} |")
    if paints:
        report_first_paint(paints)
    print(f"\nload average after: {', '.join(f'{v:.2f}' for v in info['load_after'])}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(
        {"machine": info, "samples": samples, "settings_changes": changes, "rss": peaks, "first_paint": paints},
        indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
