"""Real-browser helpers: a fresh Streamlit server, Debian's Chromium settings, and waits for a run to finish drawing.

tests/browser/conftest.py builds its fixtures from these; browser tests import them from here (a server listing a
test's own checkpoints: :func:`serving_checkpoints`).  No browser is ever
downloaded: Playwright launches ``/usr/bin/chromium``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

try:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import Locator, Page, expect, sync_playwright
except ImportError:  # reported by _missing()
    sync_playwright = None
    Locator = Page = PlaywrightError = expect = None  # the tests import expect from here

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "tests" / "browser" / "artifacts"
# Screenshots go to the artifacts folder (the README's images to its images/ subfolder: some share a name with a
# page's screenshot); ATTNVIZ_UPDATE_SCREENSHOTS=1 writes docs/screenshots (docs/pages.md shows them) and the
# README's images in docs/images (tests/browser/test_readme_images.py).
UPDATE_SCREENSHOTS = os.environ.get("ATTNVIZ_UPDATE_SCREENSHOTS") == "1"
SCREENSHOTS = REPO / "docs" / "screenshots" if UPDATE_SCREENSHOTS else ARTIFACTS
README_IMAGES = REPO / "docs" / "images" if UPDATE_SCREENSHOTS else ARTIFACTS / "images"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]
VIEWPORT = {"width": 1400, "height": 1000}
MAP_DRAWN = "g.heatmaplayer g.hm image, g.imagelayer g.im image"  # a map Plotly drew: a heatmap's or an image trace's
SERVER_START_TIMEOUT = 60.0
IDLE_TIMEOUT_MS = 30_000  # the first run of a session computes a GPT-2-size embedding
REQUIRE_BROWSER = os.environ.get("ATTNVIZ_REQUIRE_BROWSER") == "1"




# --------------------------------------------------------------------------- the Streamlit server

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no server output)"
    return "\n".join(text.splitlines()[-lines:]) or "(no server output)"


class Server:
    def __init__(self, process: subprocess.Popen, url: str, log: Path):
        self.process, self.url, self.log = process, url, log

    def tail(self) -> str:
        return _tail(self.log)


@contextlib.contextmanager
def start_server(script_args: tuple[str, ...] = ()) -> Iterator[Server]:
    """A fresh ``streamlit run app.py [-- script_args]`` on a free port; yields once /_stcore/health answers 200."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_dir = Path(tempfile.mkdtemp(prefix="attnviz-server-"))
    log = log_dir / "server.log"
    command = [
        sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
        "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
        "--server.fileWatcherType", "none",
    ]
    if script_args:
        command += ["--", *script_args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env)
    server = Server(process, url, log)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while True:
            if process.poll() is not None:
                pytest.fail(f"streamlit exited with code {process.returncode} before it was healthy; "
                            f"output:\n{server.tail()}", pytrace=False)
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit was not healthy within {SERVER_START_TIMEOUT:.0f} s; output:\n"
                            f"{server.tail()}", pytrace=False)
            time.sleep(0.25)
        yield server
        if process.poll() is not None:
            pytest.fail(f"streamlit crashed during the tests (exit code {process.returncode}); output:\n"
                        f"{server.tail()}", pytrace=False)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


# --------------------------------------------------------------------------- the browser

# Counts the script runs the page has seen (transitions of stApp's data-test-script-state to
# "running"), so a test can wait for *the* rerun its action caused, not a stale idle state. One callback can
# carry several changes of the attribute: a change's new value is the next change's old value (the last one's is
# the attribute's value now), so a run that began and ended before the callback ran still counts.
RUN_COUNTER = """
(() => {
  window.__attnvizRuns = 0;
  new MutationObserver((records) => {
    records.forEach((record, i) => {
      const next = records.slice(i + 1).find((later) => later.target === record.target);
      const value = next ? next.oldValue : record.target.getAttribute('data-test-script-state');
      if (value === 'running' && record.oldValue !== 'running') window.__attnvizRuns += 1;
    });
  }).observe(document, {subtree: true, attributes: true, attributeOldValue: true,
                        attributeFilter: ['data-test-script-state']});
})();
"""


# --------------------------------------------------------------------------- waits and checks

_IDLE = """
() => {
  const app = document.querySelector('[data-testid=stApp]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  const busy = '[data-testid=stStatusWidget], [data-testid=stSpinner], [data-testid=stSkeleton]';
  if (document.querySelector(busy)) return false;
  if (!document.querySelector('[data-testid=stMain] [data-testid=stElementContainer]')) return false;
  if (document.querySelector('[data-testid=stMain] [data-stale=true]')) return false;
  // every st.plotly_chart has drawn its data
  const charts = [...document.querySelectorAll('[data-testid=stPlotlyChart]')];
  const drawn = charts.every((chart) => chart.querySelector('.main-svg')
      && chart.querySelector(
        'g.heatmaplayer g.hm image, g.imagelayer g.im image, g.barlayer g.trace.bars path, '
        + 'g.scatterlayer g.trace path.js-line'));
  const graphs = [...document.querySelectorAll('[data-testid=stGraphVizChart]')];
  return drawn && graphs.every((graph) => graph.querySelector('svg g.node'));
}
"""


@contextlib.contextmanager
def serving_checkpoints(folder: Path, script_args: tuple[str, ...] = ()) -> Iterator[Server]:
    """:func:`start_server` on a server that lists the checkpoints a test wrote in ``folder`` (ATTNVIZ_CHECKPOINTS)
    and none from this machine's Hugging Face cache (HF_HUB_CACHE points into ``folder``, where there is none)."""
    env = {"ATTNVIZ_CHECKPOINTS": str(folder), "HF_HUB_CACHE": str(folder / "no-hf-cache")}
    with mock.patch.dict(os.environ, env), start_server(script_args) as running:  # the server inherits them
        yield running


def runs(page: Page) -> int:
    """How many script runs this page has seen start (see RUN_COUNTER)."""
    return page.evaluate("window.__attnvizRuns || 0")


def wait_idle(page: Page, *, after: int | None = None, timeout: float = IDLE_TIMEOUT_MS) -> None:
    """Wait until no script runs, no spinner/status widget shows, and every chart has drawn.

    ``after``: a :func:`runs` count taken before an action; first wait (briefly) for a run to
    start after it, so the idle state of the previous run is not mistaken for the new one.
    """
    if after is not None:
        with contextlib.suppress(PlaywrightError):
            page.wait_for_function(f"(window.__attnvizRuns || 0) > {after}", timeout=5_000)
    try:
        page.wait_for_function(_IDLE, timeout=timeout)
    except PlaywrightError as exc:
        raise AssertionError(f"page {page.url} did not become idle with all charts drawn within "
                             f"{timeout / 1000:.0f} s: {exc}\n{exception_text(page)}") from None


def wait_past_double_click(chart: Locator) -> None:
    """Wait until a click on the Plotly chart in ``chart`` (an ``st.plotly_chart``) is a click of its own: Plotly counts
    a mousedown within ``doubleClickDelay`` (300 ms) of the one before on the same plot as a double click, wherever on
    the plot it is, and a double click resets the axes and clears the selection."""
    chart.locator(".js-plotly-plot").evaluate(
        "(gd) => new Promise((resolve) => { const wait = () => Date.now() - (gd._mouseDownTime || 0)"
        " > gd._context.doubleClickDelay ? resolve() : requestAnimationFrame(wait); wait(); })")


_SETTLED = """(el) => new Promise((resolve) => {
    // the expander is open, runs no animation or transition, and its height held for two frames
    let last = -1, same = 0;
    const tick = () => {
        const height = el.getBoundingClientRect().height;
        const moving = el.getAnimations({subtree: true}).some((a) => a.playState === "running");
        same = el.open && !moving && height === last ? same + 1 : 0;
        last = height;
        if (same >= 2) resolve(true); else requestAnimationFrame(tick);
    };
    tick();
})"""


def wait_expanded(expander: Locator, timeout: float = IDLE_TIMEOUT_MS) -> None:
    """Wait until a ``st.expander`` (its ``<details>`` element) is open and done animating: a click during
    the opening animation can land beside the button it aimed at."""
    expander.evaluate(_SETTLED, timeout=timeout)


def exception_text(page: Page) -> str:
    shown = page.locator("[data-testid=stException]")
    return "\n---\n".join(shown.all_inner_texts()) if shown.count() else ""


def assert_no_exception(page: Page) -> None:
    text = exception_text(page)
    assert not text, f"Streamlit shows an exception on {page.url}:\n{text}"


def fit_viewport(page: Page, max_height: int = 2400) -> None:
    """Grow the viewport to the whole app, up to ``max_height`` (the main area scrolls inside the page, so a page
    screenshot shows only what the viewport holds), and wait for Plotly to draw again."""
    height = page.evaluate(
        "() => Math.max(document.querySelector('[data-testid=stMain]').scrollHeight,"
        " document.querySelector('[data-testid=stSidebarContent]')?.scrollHeight || 0)")
    page.set_viewport_size({"width": VIEWPORT["width"], "height": max(VIEWPORT["height"], min(height, max_height))})
    page.wait_for_timeout(500)  # Plotly redraws on resize
    wait_idle(page)


def park_pointer(page: Page) -> None:
    """The pointer to the main area's blank bottom right corner: the tooltip of the button clicked last covers what
    is above that button while the pointer stays on it."""
    size = page.viewport_size
    page.mouse.move(size["width"] - 2, size["height"] - 2)
    page.wait_for_timeout(300)  # the tooltip fades out


def save_screenshot(page: Page, name: str, max_height: int = 2400) -> Path:
    """The whole app, up to ``max_height``, as ``name``.png in SCREENSHOTS, with no tooltip."""
    fit_viewport(page, max_height)
    park_pointer(page)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), animations="disabled", caret="hide")
    page.set_viewport_size(VIEWPORT)
    return path


def save_screenshot_at(page: Page, name: str) -> Path:
    """The whole page at the viewport's width (:func:`save_screenshot` uses the default width), up to 4,000 px tall,
    as ``name``.png in SCREENSHOTS."""
    width = page.viewport_size["width"]
    height = page.evaluate("() => document.querySelector('[data-testid=stMain]').scrollHeight")
    page.set_viewport_size({"width": width, "height": max(1000, min(height, 4000))})
    page.wait_for_timeout(500)  # Plotly redraws on resize
    wait_idle(page)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), animations="disabled", caret="hide")
    return path


def choose_option(page: Page, combobox: Locator, option: str, attempts: int = 3) -> None:
    """Open a ``st.selectbox`` and click ``option``.  The dropdown closes when its container scrolls, and
    Playwright scrolls a combobox low in the sidebar into view just before clicking it: scroll first, and
    open it again if the list did not stay open (polled, no fixed sleep)."""
    combobox.scroll_into_view_if_needed()
    item = page.get_by_test_id("stSelectboxVirtualDropdown").get_by_role("option", name=option, exact=True)
    for attempt in range(attempts):
        combobox.click()
        try:
            item.wait_for(state="visible", timeout=3_000)
        except PlaywrightError:
            if attempt == attempts - 1:
                raise
            page.keyboard.press("Escape")
            continue
        item.click()
        return


# Plotly's automargin draws a figure again when a label, colour bar or legend sticks out of its margins: a chart
# drawn in one pass has the margins its figure asked for.
_GROWN_MARGINS = """() => [...document.querySelectorAll('.js-plotly-plot')].flatMap((gd) => {
  const layout = gd._fullLayout;
  if (!layout || !layout._size) return [];
  const grown = ['l', 'r', 't', 'b'].filter((side) => layout._size[side] > layout.margin[side]);
  const title = ((layout.title && layout.title.text) || '').replace(/<[^>]*>/g, '').slice(0, 60);
  const sides = grown.map((s) => `${s} ${layout.margin[s]} → ${layout._size[s]}`).join(', ');
  return grown.length ? [`${title}: ${sides}`] : [];
})"""


def grown_margins(page: Page) -> list[str]:
    """The page's Plotly charts whose margins Plotly had to widen (so drew twice), with the sides it widened."""
    return page.evaluate(_GROWN_MARGINS)


# Under a chart's horizontal axes: the foot of the lowest text drawn there (tick labels, axis titles) and where the
# bottom margin's room for them ends (its legend's top where the legend sits under the plot, else the figure's foot),
# in the figure's px; each chart whose text holds one of the given strings.
_UNDER_AXES = """(texts) => [...document.querySelectorAll('[data-testid=stPlotlyChart]')].flatMap((chart) => {
  const gd = chart.querySelector('.js-plotly-plot');
  const layout = gd && gd._fullLayout;
  if (!layout || !layout._size || !texts.some((text) => chart.textContent.includes(text))) return [];
  const figure = gd.getBoundingClientRect();
  const plotBottom = layout._size.t + layout._size.h;
  const drawn = [...gd.querySelectorAll('g.xaxislayer-above text, text[class^=x][class$=title]')]
    .map((el) => el.getBoundingClientRect()).filter((box) => box.height > 0).map((box) => box.bottom - figure.top);
  const legend = gd.querySelector('.legend');
  const legendTop = legend ? legend.getBoundingClientRect().top - figure.top : null;
  const title = ((layout.title && layout.title.text) || '').replace(/<[^>]*>/g, ' ');
  return [{chart: (title || chart.textContent).slice(0, 60), lowest: Math.max(0, ...drawn), plotBottom,
           end: legendTop !== null && legendTop > plotBottom ? legendTop : figure.height}];
})"""


def bands_under_axes(page: Page, texts: list[str]) -> list[dict]:
    """The charts holding one of ``texts``, each with ``band``: the px left empty between the lowest text under its
    axes and the end of the bottom margin's room for it (the legend under it, or the figure's foot)."""
    return [{**chart, "band": chart["end"] - chart["lowest"]} for chart in page.evaluate(_UNDER_AXES, texts)]


# What scrolls sideways: the page's main area (or the document) wider than the window, and each data grid (by its
# column names, which the grid also writes into a hidden table for screen readers) wider inside than its box.
_SIDEWAYS = """() => {
  const main = document.querySelector('[data-testid=stMain]');
  const root = document.documentElement;
  const out = {page: Math.max(main.scrollWidth - main.clientWidth, root.scrollWidth - root.clientWidth), grids: {}};
  for (const grid of main.querySelectorAll('[data-testid=stDataFrame]')) {
    const scroller = grid.querySelector('.dvn-scroller');
    const names = [...grid.querySelectorAll('th')].map((th) => th.textContent).join(' | ');
    if (scroller) out.grids[names] = scroller.scrollWidth - scroller.clientWidth;
  }
  return out;
}"""


def sideways(page: Page, width: int) -> dict:
    """At a window ``width`` px wide (the height kept): how many px the page scrolls sideways (``"page"``) and how
    many each data grid scrolls inside itself (``"grids"``: {"rank | token | probability": px}); 0 where nothing
    does.  The page is not run again: Streamlit lays it out anew, and Plotly redraws its charts."""
    page.set_viewport_size({"width": width, "height": page.viewport_size["height"]})
    page.wait_for_timeout(500)  # the grid measures its box again after a resize
    wait_idle(page)
    return page.evaluate(_SIDEWAYS)


def step_generation(page: Page, step: int, steps: int = 20) -> None:
    """Click the Generate page's Step and wait for its run: step ``step`` of ``steps`` is shown, with no exception,
    and its badge says it equals the uncached forward."""
    main = page.get_by_test_id("stMain")
    before = runs(page)
    main.get_by_role("button", name="Step").click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(main.get_by_text(f"Step {step} of {steps}")).to_be_visible()
    expect(main.get_by_text("Equals the uncached forward")).to_be_visible()


def share_link(page: Page) -> str:
    """The sidebar's "Link to this view" (Share & export opened first if it is closed)."""
    sidebar = page.get_by_test_id("stSidebar")
    details = sidebar.locator("details").filter(has_text="Share & export")
    if details.get_attribute("open") is None:
        sidebar.get_by_text("Share & export").click()
        wait_expanded(details)
    return sidebar.get_by_test_id("stCode").first.inner_text().strip()


def query_of(link: str) -> dict[str, str]:
    """A URL's parameters, each with its last value."""
    return {key: values[-1] for key, values in urllib.parse.parse_qs(urllib.parse.urlsplit(link).query).items()}


def sidebar(page: Page) -> Locator:
    return page.get_by_test_id("stSidebar")


def text_box(page: Page) -> Locator:
    return sidebar(page).get_by_role("textbox", name="Text", exact=True)


def commit_text(page: Page, text: str) -> None:
    """Type into the sidebar text area and commit with Ctrl+Enter, then wait for the rerun."""
    before = runs(page)
    box = text_box(page)
    box.fill(text)
    box.press("Control+Enter")
    wait_idle(page, after=before)


def visit(page: Page, url: str) -> None:
    """Open ``url``, wait until its run has ended, and check that it raised nothing."""
    page.goto(url)
    wait_idle(page)
    assert_no_exception(page)
