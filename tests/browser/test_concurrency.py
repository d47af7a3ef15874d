"""Eight simultaneous sessions on one fresh server stay isolated.

Eight browser contexts in one Chromium are eight Streamlit sessions.  Each opens the Heads page
from a shared link with its own short text (words no other session uses, each a single GPT-2
token after a space) and its own settings (variant, head count, causal mask, seed).  All eight
are navigated at once; then each page must show no exception, its own tokens on the focused
heatmap, one thumbnail per head of its own, its own settings given by the URL, and none of the other
sessions' words anywhere in its DOM (text, SVG, form values, URL).  Then every session changes
one setting at the same time (half type a new text, half toggle the causal mask) and the checks
run again.  A background thread polls ``/_stcore/health`` throughout; every poll must succeed.

The race it guards against (attnviz/ui/__init__.py imports pandas before any figure is built): on a fresh
server, a session building Plotly figures while another session's thread imports pandas (or numpy) for the
first time shows "AttributeError: partially initialized module 'pandas' has no attribute 'Series'".  That crash is
reported as PandasImportRaceError, after every other check has run.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from helpers.browser import ARTIFACTS, RUN_COUNTER, VIEWPORT, PlaywrightError, exception_text, runs, wait_idle

from attnviz.urlstate import settings_from_query, url_value

pytestmark = pytest.mark.browser

LOAD_TIMEOUT_MS = 90_000  # eight first runs at once on two cores (each embeds a 50257 × 768 table)
SETTLE_S = 10.0  # after idle, how long the page may take to show its expected figures

# Each word is one GPT-2 token after a space (" volcano" -> 1 id) and occurs nowhere in the app's
# source, so finding it in a page can only mean that some session's text reached that page.
WORDS = (
    "volcano", "glacier", "canyon", "violin", "lobster", "desert", "jungle", "marsh", "island", "mango", "comet",
    "lantern", "kettle", "velvet", "rocket", "tiger", "pirate", "wizard", "dragon", "castle", "forest", "thunder",
    "copper", "marble", "crystal", "rabbit", "salmon", "turtle", "spider", "candle", "planet", "pepper", "banana",
    "tomato", "camel", "hammer",
)


@dataclass(frozen=True)
class Session:
    index: int
    words: tuple[str, ...]
    variant: str
    heads: int
    causal: bool
    seed: int

    @property
    def text(self) -> str:
        return "The " + " ".join(self.words)

    @property
    def pieces(self) -> list[str]:
        return ["The"] + [f"·{word}" for word in self.words]

    def params(self) -> dict[str, str]:
        return {"text": self.text, "variant": self.variant, "num_heads": str(self.heads),
                "causal": str(self.causal).lower(), "seed": str(self.seed)}


# (variant, heads): every head count a 768-wide layer offers up to 16, both multi-head
# implementations, and one single-head variant.
SETUPS = [("causal", 1), ("mha", 2), ("mha_wrapper", 3), ("mha", 4), ("mha", 6), ("mha_wrapper", 8),
          ("mha", 12), ("mha", 16)]
WORD_COUNTS = [2, 3, 4, 2, 3, 4, 2, 3]  # different token counts too
NEW_WORDS = 3  # sessions 0, 2, 4, 6 type a new text of this many words; 1, 3, 5, 7 toggle the mask


def initial_sessions() -> list[Session]:
    sessions, used = [], 0
    for index, ((variant, heads), count) in enumerate(zip(SETUPS, WORD_COUNTS, strict=True)):
        sessions.append(Session(index, tuple(WORDS[used : used + count]), variant, heads,
                                causal=index % 2 == 0, seed=1000 + 37 * index))
        used += count
    return sessions


def changed_sessions(sessions: list[Session]) -> list[Session]:
    used = sum(len(s.words) for s in sessions)
    changed = []
    for s in sessions:
        if s.index % 2 == 0:
            changed.append(replace(s, words=tuple(WORDS[used : used + NEW_WORDS])))
            used += NEW_WORDS
        else:
            changed.append(replace(s, causal=not s.causal))
    assert used <= len(WORDS)
    return changed


# --------------------------------------------------------------------------- the known crash

KNOWN_CRASH = "partially initialized module 'pandas' has no attribute 'Series'"


class PandasImportRaceError(AssertionError):
    """The known app crash: sessions building Plotly figures while another session imports pandas."""


# --------------------------------------------------------------------------- the health poller

class HealthPoller(threading.Thread):
    """GET /_stcore/health every 0.2 s until stopped; remembers every failure."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url = f"{url}/_stcore/health"
        self.polls = 0
        self.slowest = 0.0
        self.failures: list[str] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        while not self._stop_event.is_set():
            began = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    body = response.read()
                    if response.status != 200 or body.strip() != b"ok":
                        self.failures.append(f"t={began - start:.1f}s: HTTP {response.status} {body[:80]!r}")
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
                self.failures.append(f"t={began - start:.1f}s: {type(exc).__name__}: {exc}")
            self.polls += 1
            self.slowest = max(self.slowest, time.monotonic() - began)
            self._stop_event.wait(0.2)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)


# --------------------------------------------------------------------------- reading a page

# Everything the checks need, read in one go: the heads grid (the chart whose subplot titles read
# "head N"), the focused heatmap (axis titled "key token"), the shape diagram, the caption, and the
# whole DOM's text (textContent includes SVG text) plus every form value.
_SNAPSHOT = """
() => {
  const main = document.querySelector('[data-testid=stMain]');
  const charts = [...main.querySelectorAll('[data-testid=stPlotlyChart]')];
  const headTitle = /^(▶ )?head \\d+$/;
  const titles = (chart) => [...chart.querySelectorAll('text.annotation-text')].map((t) => t.textContent.trim())
      .filter((t) => headTitle.test(t));
  const grids = charts.filter((chart) => titles(chart).length > 0);
  const focused = charts.filter(
      (chart) => [...chart.querySelectorAll('text')].some((t) => t.textContent === 'key token'));
  const last = focused[focused.length - 1];
  const caption = main.querySelector('[data-testid=stCaptionContainer]');
  return {
    grids: grids.length,
    gridTitles: grids.length ? titles(grids[0]) : [],
    thumbnails: grids.length ? grids[0].querySelectorAll('g.imagelayer g.im image').length : 0,
    xTicks: last ? [...last.querySelectorAll('g.xtick text')].map((t) => t.textContent) : [],
    yTicks: last ? [...last.querySelectorAll('g.ytick text')].map((t) => t.textContent) : [],
    legend: last ? [...last.querySelectorAll('g.legend')].map((g) => g.textContent).join(' ') : '',
    diagram: [...main.querySelectorAll('.attnviz-flow')].map((s) => s.textContent).join(' '),
    caption: caption ? caption.textContent : '',
    textArea: (document.querySelector('[data-testid=stSidebar] textarea') || {}).value,
  };
}
"""

_ALL_TEXT = """
() => document.documentElement.textContent + '\\n'
    + [...document.querySelectorAll('textarea, input')].map((e) => e.value).join('\\n')
"""


def snapshot(page) -> dict:
    return page.evaluate(_SNAPSHOT)


def words_on_page(page) -> set[str]:
    """Every lower-case word in the page: DOM text and SVG text of all frames, form values, the URL."""
    texts = [page.url]
    for frame in page.frames:
        with contextlib.suppress(PlaywrightError):  # a frame being torn down
            texts.append(frame.evaluate(_ALL_TEXT))
    return set(re.findall(r"[a-z]+", "\n".join(texts).lower()))


def query(page) -> dict[str, str]:
    return {key: values[-1] for key, values in parse_qs(urlsplit(page.url).query).items()}


def expected_view(session: Session) -> dict:
    n = len(session.pieces)
    return {"grids": 1, "gridTitles": ["▶ head 0"] + [f"head {h}" for h in range(1, session.heads)],
            "thumbnails": session.heads, "xTicks": session.pieces, "yTicks": session.pieces,  # a heatmap a head
            "textArea": session.text, "n": n}


def settled_snapshot(page, session: Session) -> dict:
    """The page's snapshot once its own figures show (Plotly may draw a moment after idle)."""
    want = expected_view(session)
    deadline = time.monotonic() + SETTLE_S
    while True:
        seen = snapshot(page)
        if all(seen[key] == want[key] for key in ("thumbnails", "xTicks", "gridTitles", "textArea")):
            return seen
        if exception_text(page):
            return seen
        if time.monotonic() > deadline:
            return seen
        page.wait_for_timeout(250)


def check_session(page, session: Session, owners: dict[int, set[str]], label: str) -> tuple[list[str], bool]:
    """(everything wrong with one session's page, whether it shows the known import-race crash).

    A page that shows the known crash stopped drawing at the heads grid, so only its sidebar, URL
    and foreign words are checked; any other exception is a problem like any other.
    """
    problems = []
    shown = exception_text(page)
    crashed = bool(shown) and KNOWN_CRASH in shown
    if shown and not crashed:
        problems.append(f"Streamlit shows an exception:\n{shown}")
    seen = settled_snapshot(page, session)
    want = expected_view(session)
    if seen["textArea"] != want["textArea"]:
        problems.append(f"text area holds {seen['textArea']!r}, expected {want['textArea']!r}")
    if not crashed:
        for key in ("grids", "gridTitles", "thumbnails", "xTicks", "yTicks"):
            if seen[key] != want[key]:
                problems.append(f"{key}: expected {want[key]!r}, page shows {seen[key]!r}")
        if ("masked" in seen["legend"]) != session.causal:
            problems.append(f"focused heatmap legend {seen['legend']!r} does not match causal={session.causal}")
        n = want["n"]
        if f"{n} tokens" not in seen["caption"]:
            problems.append(f"caption {seen['caption']!r} does not say {n} tokens")
        if session.variant == "mha":
            if f"{session.heads} heads × {768 // session.heads}" not in seen["caption"]:
                problems.append(f"caption {seen['caption']!r} does not say {session.heads} heads")
            if f"(1, {session.heads}, {n}, {n})" not in seen["diagram"]:
                problems.append(f"shape diagram lacks the weights shape (1, {session.heads}, {n}, {n})")
    given = settings_from_query(query(page))[0]  # a setting at its default may be left out of the URL
    for key, value in session.params().items():
        if key == "num_heads" and session.heads == 1:
            continue  # a single-head class sets the heads aside: the URL leaves them out, as its Share link does
        if url_value(key, given[key]) != value:
            problems.append(f"the URL gives {key}={url_value(key, given[key])!r}, expected {value!r} ({page.url})")
    everyone = set().union(*owners.values())
    foreign = (everyone - owners[session.index]) & words_on_page(page)
    if foreign:
        sources = sorted(i for i, words in owners.items() if words & foreign)
        problems.append(f"other sessions' words {sorted(foreign)} (sessions {sources}) appear in this page")
    prefix = (f"[{label}] session {session.index} ({session.variant}, {session.heads} heads, "
              f"causal={session.causal}, seed={session.seed}): ")
    return [prefix + problem for problem in problems], crashed


def check_all(tabs, sessions: list[Session], owners: dict[int, set[str]], label: str) -> list[int]:
    """Check every session; fail on any problem; return the sessions that show the known crash."""
    problems, crashed = [], []
    for tab, session in zip(tabs, sessions, strict=True):
        found, known = check_session(tab, session, owners, label)
        problems += found
        if known:
            crashed.append(session.index)
    assert not problems, "\n".join(problems)
    return crashed


# --------------------------------------------------------------------------- eight sessions

@pytest.fixture
def tabs(browser, request):
    """Eight browser contexts (eight Streamlit sessions), each with one page; on failure every page's
    screenshot, HTML and console go to artifacts/."""
    contexts, pages, consoles = [], [], []
    for _ in range(8):
        context = browser.new_context(viewport=VIEWPORT)
        context.set_default_timeout(LOAD_TIMEOUT_MS)
        tab = context.new_page()
        tab.add_init_script(RUN_COUNTER)
        console: list[str] = []
        tab.on("console", lambda message, log=console: log.append(f"{message.type}: {message.text}"))
        tab.on("pageerror", lambda error, log=console: log.append(f"pageerror: {error}"))
        contexts.append(context)
        pages.append(tab)
        consoles.append(console)
    yield pages
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        for index, (tab, console) in enumerate(zip(pages, consoles, strict=True)):
            name = f"{request.node.name}_session{index}"
            with contextlib.suppress(PlaywrightError):
                tab.screenshot(path=str(ARTIFACTS / f"{name}.png"))
                (ARTIFACTS / f"{name}.html").write_text(tab.content())
            (ARTIFACTS / f"{name}.console.txt").write_text(f"url: {tab.url}\n" + "\n".join(console))
    for context in contexts:
        context.close()


def test_eight_simultaneous_sessions_stay_isolated(tabs, fresh_server):
    server = fresh_server()
    sessions = initial_sessions()
    after = changed_sessions(sessions)
    owners = {s.index: set(s.words) | set(t.words) for s, t in zip(sessions, after, strict=True)}
    assert sum(map(len, owners.values())) == len(set().union(*owners.values())), "two sessions share a word"

    poller = HealthPoller(server.url)
    poller.start()
    timings = {}
    try:
        # 1. all eight shared links at once: each goto returns as soon as the HTML arrives, so the
        #    eight sessions' first runs overlap on the server.
        started = time.monotonic()
        for tab, session in zip(tabs, sessions, strict=True):
            tab.goto(f"{server.url}/?{urlencode(session.params())}", wait_until="commit")
        for tab in tabs:
            wait_idle(tab, timeout=LOAD_TIMEOUT_MS)
        timings["load"] = time.monotonic() - started
        crashed = check_all(tabs, sessions, owners, "load")

        # 2. every session changes one setting at once: even ones commit a new text, odd ones
        #    toggle the causal mask; all actions are issued before any rerun is waited for.
        started = time.monotonic()
        counts = [runs(tab) for tab in tabs]
        for tab, old, new in zip(tabs, sessions, after, strict=True):
            sidebar = tab.get_by_test_id("stSidebar")
            if new.text != old.text:
                box = sidebar.get_by_role("textbox", name="Text", exact=True)
                box.fill(new.text)
                box.press("Control+Enter")
            else:
                sidebar.get_by_test_id("stCheckbox").filter(has_text="Causal mask").locator("label").click()
        for tab, count in zip(tabs, counts, strict=True):
            wait_idle(tab, after=count, timeout=LOAD_TIMEOUT_MS)
        timings["change"] = time.monotonic() - started
        crashed_later = check_all(tabs, after, owners, "change")
    finally:
        poller.stop()

    assert server.process.poll() is None, f"streamlit exited during the test:\n{server.tail()}"
    assert poller.polls >= 5, f"the health poller ran only {poller.polls} times"
    assert not poller.failures, (f"/_stcore/health failed {len(poller.failures)} of {poller.polls} times:\n"
                                 + "\n".join(poller.failures[:20]))
    print(f"\nload {timings['load']:.1f} s, change {timings['change']:.1f} s, {poller.polls} health polls, "
          f"slowest {poller.slowest * 1000:.0f} ms")
    if crashed or crashed_later:
        raise PandasImportRaceError(
            f"sessions {crashed} (first load) and {crashed_later} (after the change) showed "
            f"AttributeError: {KNOWN_CRASH}; every other check passed")
