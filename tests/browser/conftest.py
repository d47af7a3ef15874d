"""Real-browser fixtures: a fresh Streamlit server per module (and on demand), Debian's Chromium
driven by Playwright's sync API, and helpers that wait for a run to finish drawing.

No browser is ever downloaded: Playwright launches ``/usr/bin/chromium``.  Without it (or without
the ``playwright`` package) the suite is skipped with the reason — unless ``ATTNVIZ_REQUIRE_BROWSER=1``
(set by ``.ci/run``), in which case every browser test fails with that reason.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

try:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import Locator, Page, expect, sync_playwright
except ImportError:  # reported by _missing()
    sync_playwright = None
    Locator = Page = PlaywrightError = expect = None  # the tests import expect from here

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
# Screenshots go to the artifacts folder; ATTNVIZ_UPDATE_SCREENSHOTS=1 writes docs/screenshots (docs/pages.md shows them).
SCREENSHOTS = REPO / "docs" / "screenshots" if os.environ.get("ATTNVIZ_UPDATE_SCREENSHOTS") == "1" else ARTIFACTS
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]
VIEWPORT = {"width": 1400, "height": 1000}
SERVER_START_TIMEOUT = 60.0
IDLE_TIMEOUT_MS = 30_000  # the first run of a session computes a GPT-2-size embedding
REQUIRE_BROWSER = os.environ.get("ATTNVIZ_REQUIRE_BROWSER") == "1"


def _missing() -> str | None:
    problems = []
    if sync_playwright is None:
        problems.append("the 'playwright' Python package is not installed (pip install -r requirements-dev.txt)")
    if not CHROMIUM.exists():
        problems.append(f"{CHROMIUM} is missing (apt-get install chromium; Playwright's own download is not used)")
    return "; ".join(problems) or None


def pytest_collection_modifyitems(config, items):
    """Without a browser, skip at collection (no server is started) — unless it is required."""
    problem = _missing()
    if problem is None or REQUIRE_BROWSER:
        return
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.skip(reason=f"browser tests skipped: {problem}"))


@pytest.fixture(scope="session")
def browser_available() -> None:
    """Every browser fixture depends on this: under ATTNVIZ_REQUIRE_BROWSER=1 a missing browser fails."""
    problem = _missing()
    if problem is not None:
        if REQUIRE_BROWSER:
            pytest.fail(f"ATTNVIZ_REQUIRE_BROWSER=1 but the browser tests cannot run: {problem}", pytrace=False)
        pytest.skip(f"browser tests skipped: {problem}")


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


@pytest.fixture(scope="module")
def server(browser_available) -> Iterator[Server]:
    """One server for a test module (sessions are per browser page, so tests do not share state)."""
    with start_server() as running:
        yield running


@pytest.fixture(scope="module")
def base_url(server: Server) -> str:
    return server.url


@pytest.fixture
def fresh_server(browser_available) -> Iterator[Callable[[], Server]]:
    """Start extra servers that no browser has talked to yet (stopped after the test)."""
    with contextlib.ExitStack() as stack:
        yield lambda: stack.enter_context(start_server())


# --------------------------------------------------------------------------- the browser

# Counts the script runs the page has seen (transitions of stApp's data-test-script-state to
# "running"), so a test can wait for *the* rerun its action caused, not a stale idle state.
_RUN_COUNTER = """
(() => {
  window.__attnvizRuns = 0;
  new MutationObserver((records) => {
    for (const record of records) {
      if (record.target.getAttribute && record.target.getAttribute('data-test-script-state') === 'running'
          && record.oldValue !== 'running') window.__attnvizRuns += 1;
    }
  }).observe(document, {subtree: true, attributes: true, attributeOldValue: true,
                        attributeFilter: ['data-test-script-state']});
})();
"""


@pytest.fixture(scope="session")
def browser(browser_available):
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture
def page(browser, request) -> Iterator[Page]:
    """A new browser context (= a new Streamlit session).  On failure: screenshot + HTML in artifacts/."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(IDLE_TIMEOUT_MS)
    tab = context.new_page()
    tab.add_init_script(_RUN_COUNTER)
    console: list[str] = []
    tab.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
    tab.on("pageerror", lambda error: console.append(f"pageerror: {error}"))
    yield tab
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        name = re.sub(r"[^\w.-]+", "_", request.node.name)
        with contextlib.suppress(PlaywrightError):
            tab.screenshot(path=str(ARTIFACTS / f"{name}.png"))
            (ARTIFACTS / f"{name}.html").write_text(tab.content())
        (ARTIFACTS / f"{name}.console.txt").write_text(f"url: {tab.url}\n" + "\n".join(console))
    context.close()


# --------------------------------------------------------------------------- helpers

_IDLE = """
() => {
  const app = document.querySelector('[data-testid=stApp]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (document.querySelector('[data-testid=stStatusWidget], [data-testid=stSpinner], [data-testid=stSkeleton]')) return false;
  if (!document.querySelector('[data-testid=stMain] [data-testid=stElementContainer]')) return false;
  if (document.querySelector('[data-testid=stMain] [data-stale=true]')) return false;
  // every st.plotly_chart has drawn its data
  const charts = [...document.querySelectorAll('[data-testid=stPlotlyChart]')];
  const drawn = charts.every((chart) => chart.querySelector('.main-svg')
      && chart.querySelector('g.heatmaplayer g.hm image, g.barlayer g.trace.bars path, g.scatterlayer g.trace path.js-line'));
  const graphs = [...document.querySelectorAll('[data-testid=stGraphVizChart]')];
  return drawn && graphs.every((graph) => graph.querySelector('svg g.node'));
}
"""


def runs(page: Page) -> int:
    """How many script runs this page has seen start (see _RUN_COUNTER)."""
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


def save_screenshot(page: Page, name: str, max_height: int = 2400) -> Path:
    """The whole app (the main area scrolls inside the page, so the viewport is grown to fit)."""
    height = page.evaluate(
        "() => Math.max(document.querySelector('[data-testid=stMain]').scrollHeight,"
        " document.querySelector('[data-testid=stSidebarContent]')?.scrollHeight || 0)")
    page.set_viewport_size({"width": VIEWPORT["width"], "height": max(VIEWPORT["height"], min(height, max_height))})
    page.wait_for_timeout(500)  # Plotly redraws on resize
    wait_idle(page)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), animations="disabled", caret="hide")
    page.set_viewport_size(VIEWPORT)
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
