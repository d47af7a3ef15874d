"""Real-browser fixtures: a fresh Streamlit server per module (and on demand), Debian's Chromium
driven by Playwright's sync API; the helpers they use are in tests/helpers/browser.py.

No browser is ever downloaded: Playwright launches ``/usr/bin/chromium``.  Without it (or without
the ``playwright`` package) the suite is skipped with the reason — unless ``ATTNVIZ_REQUIRE_BROWSER=1``
(set by ``.ci/run``), in which case every browser test fails with that reason.
"""

from __future__ import annotations

import contextlib
import re
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers.browser import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    IDLE_TIMEOUT_MS,
    REQUIRE_BROWSER,
    RUN_COUNTER,
    VIEWPORT,
    Page,
    PlaywrightError,
    Server,
    start_server,
    sync_playwright,
)


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


def _outside(url: str) -> bool:
    parsed = urllib.parse.urlsplit(url)
    return parsed.scheme in ("http", "https", "ws", "wss") and parsed.hostname not in ("127.0.0.1", "localhost")


@pytest.fixture
def page(browser, request) -> Iterator[Page]:
    """A new browser context (= a new Streamlit session).  On failure: screenshot + HTML in artifacts/.  A test may
    give the context's options (``@pytest.mark.parametrize("page", [{"has_touch": True}], indirect=True)``)."""
    context = browser.new_context(viewport=VIEWPORT, **getattr(request, "param", {}))
    context.set_default_timeout(IDLE_TIMEOUT_MS)
    tab = context.new_page()
    tab.add_init_script(RUN_COUNTER)
    console: list[str] = []
    tab.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
    tab.on("pageerror", lambda error: console.append(f"pageerror: {error}"))
    outside: list[str] = []  # requests the page made to any host but the test's server: the app must work offline
    tab.on("request", lambda sent: outside.append(sent.url) if _outside(sent.url) else None)
    yield tab
    report = getattr(request.node, "report_call", None)
    if report is not None and report.passed:
        assert outside == [], f"the page requested {outside}: nothing may be fetched from the internet"
    if report is not None and report.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        name = re.sub(r"[^\w.-]+", "_", request.node.name)
        with contextlib.suppress(PlaywrightError):
            tab.screenshot(path=str(ARTIFACTS / f"{name}.png"))
            (ARTIFACTS / f"{name}.html").write_text(tab.content())
        (ARTIFACTS / f"{name}.console.txt").write_text(f"url: {tab.url}\n" + "\n".join(console))
    context.close()



