"""The Pitfall lab's clicks in Chromium at a 1,024-token text (the lab runs its first 64 tokens), this checkout (after)
against another checkout's app (before), alternating in the same minutes:
``python benchmarks/pitfall_clicks.py BEFORE_DIR [ROUNDS] [CLICKS]`` (BEFORE_DIR: a ``git archive`` export of the
other commit).  Each round starts each app's server in turn (ports 8851–8859, headless), opens a tab at
``/pitfalls?text=<1,024 tokens>`` (the default settings: the book's MultiHeadAttention, GPT-2 small's shape) and
times, ``CLICKS`` times each:

* **bug**: *Switch on a bug* → "masked_fill (no _)" (its two maps, the leak detector with the bug), then → "no bug"
  (the table of bugs, the leak detector of the book's code); each a sample, reported apart (``picked``);
* **token**: with masked_fill picked, the *Perturbed token j* slider's thumb focused and → (or ←) pressed: j moves
  between 32 and 33;
* **variant**: the sidebar's *Attention variant* → grouped-query, then → multi-head again (a new trace of 1,024
  tokens the first time, cached after).

Each time runs from the action (``pointerdown`` or the arrow's ``keydown``, capture, stamped in the page with
``performance.now()``) to the first animation frame at which the page is drawn (``DRAWN_JS``, polled per frame): a
script run (the page's or a fragment's) started after the action has ended (``stApp``'s
``data-test-script-state=notRunning``), no spinner, status widget or stale element shows, the main area shows the
action's marker (the bug's title, the "no bug" notice), the leak detector's chart names the perturbed token in its
title and has drawn since the action (a bug and a token change it; the lab's classes do not follow the variant:
there the marker is the lab's note that it runs MultiHeadAttention with grouped-query's sizes, shown or gone), and
every chart and table of the main
area is drawn (``browser.PLOTLY_DRAWN``, ``browser.OTHERS_DRAWN``).  A chart whose figure did not change need not
draw again: that is what a fragment saves.  Reported per sample: ``ms`` and its phases (``start``: action →
running, ``run``: running → notRunning, ``draw``: the rest), the websocket bytes, the renderer's main-thread busy
time.  The rounds and medians go to ``results/pitfall_clicks.json``."""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import time
import urllib.parse
from pathlib import Path

from browser import (
    ARM_JS,
    CHROMIUM,
    CHROMIUM_ARGS,
    IDLE_JS,
    INIT_JS,
    OTHERS_DRAWN,
    PLOTLY_DRAWN,
    RESULTS,
    SETTLE_S,
    VIEWPORT,
    FrameCounter,
    Server,
    machine,
)
from payload import text_of_tokens

from attnviz.labs.pitfalls.catalogue import PITFALLS
from attnviz.variants import GQA, LABELS, MHA

HERE = Path(__file__).resolve().parent
PORTS = range(8851, 8860)
BUG = "masked_fill"
NO_BUG_MARKER = "No bug switched on"
VARIANTS = (LABELS[GQA], LABELS[MHA])  # the sidebar's options, in turn
VARIANT_NOTE = f"heads of {LABELS[GQA]}"  # the lab's note under grouped-query: it runs MultiHeadAttention
TIMEOUT_MS = 120_000  # a click that takes longer is broken
TOKENS = (33, 32)  # the slider's j after →, after ←

# The arrow keys stamp the action too (INIT_JS stamps a pointer press and Ctrl+Enter).
ARROW_JS = """
document.addEventListener('keydown', (event) => {
  const b = window.__bench;
  if (b && b.armed && b.t0 === null && (event.key === 'ArrowRight' || event.key === 'ArrowLeft')) {
    b.t0 = performance.now();
  }
}, true);
"""

# Drawn after a click in the lab (module docstring): arg = {marker, absent, token, fresh}: the main area shows
# ``marker`` and not ``absent``; ``fresh`` false (the variant, which the lab's classes do not follow): the leak chart
# need not draw again.
DRAWN_JS = """
(arg) => {
  const b = window.__bench;
  if (b.t0 === null) return false;
  const app = document.querySelector('[data-testid=stApp]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (document.querySelector('[data-testid=stStatusWidget], [data-testid=stSpinner]')) return false;
  const main = document.querySelector('[data-testid=stMain]');
  if (!main || main.querySelector('[data-stale=true]')) return false;
  if (!main.innerText.includes(arg.marker) || (arg.absent && main.innerText.includes(arg.absent))) return false;
  const charts = [...main.querySelectorAll('.js-plotly-plot')];
  const leak = charts.find((gd) => (gd.querySelector('.gtitle') || {}).textContent?.startsWith('perturb token'));
  if (!leak || !leak.querySelector('.gtitle').textContent.startsWith(`perturb token ${arg.token} `)) return false;
  if (arg.fresh && leak.__benchOld && !leak.__benchRedraws) return false;  // this run's leak chart, drawn since
  if (!charts.every(PLOTLY_DRAWN) || !(OTHERS_DRAWN)(main)) return false;
  b.t1 = performance.now();
  b.armed = false;
  return true;
}
""".replace("PLOTLY_DRAWN", PLOTLY_DRAWN.strip()).replace("OTHERS_DRAWN", OTHERS_DRAWN.strip())


# What the page shows when it is not drawn in time (for the error).
STATE_JS = """
() => {
  const main = document.querySelector('[data-testid=stMain]');
  return {bench: window.__bench, state: document.querySelector('[data-testid=stApp]')
            .getAttribute('data-test-script-state'),
          stale: main.querySelectorAll('[data-stale=true]').length, text: main.innerText.slice(0, 400),
          exception: [...main.querySelectorAll('[data-testid=stException]')].map((e) => e.innerText.slice(0, 400)),
          titles: [...main.querySelectorAll('.js-plotly-plot .gtitle')].map((t) => t.textContent.slice(0, 40))};
}
"""


@contextlib.contextmanager
def server_on(port: int, cwd: Path):
    """``streamlit run app.py`` in ``cwd`` on ``port`` (127.0.0.1, headless, no file watcher); yields once healthy."""
    import browser

    ports = iter([port])
    chosen, browser.free_port = browser.free_port, lambda: next(ports)
    try:
        with browser.streamlit_server(cwd.name, "app.py", cwd=cwd) as server:
            yield server
    finally:
        browser.free_port = chosen


def timed(page, frames: FrameCounter, act, marker: str, token: int, fresh: bool = True, absent: str = "") -> dict:
    """Arm the page, ``act()`` and wait until it is drawn (``DRAWN_JS``): the sample's ms and phases."""
    page.evaluate(ARM_JS)
    frames.reset()
    act()
    try:
        page.wait_for_function(DRAWN_JS, arg={"marker": marker, "absent": absent, "token": token, "fresh": fresh},
                               polling="raf", timeout=TIMEOUT_MS)
    except Exception as exc:
        raise RuntimeError(f"not drawn ({marker!r}, token {token}): {page.evaluate(STATE_JS)}") from exc
    page.wait_for_timeout(300)
    b = page.evaluate("window.__bench")
    start = (b["runStart"] or b["t1"]) - b["t0"]
    run = (b["runEnd"] or b["t1"]) - (b["runStart"] or b["t1"])
    total = b["t1"] - b["t0"]
    return {"ms": total, "start": start, "run": run, "draw": total - start - run, "bytes": frames.bytes,
            **frames.busy_since_reset()}


def session(browser, server: Server, text: str, clicks: int) -> dict[str, list[dict]]:
    """One tab at ``/pitfalls`` with ``text``: the bug, token and variant samples (module docstring)."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.add_init_script(INIT_JS)
    page.add_init_script(ARROW_JS)
    frames = FrameCounter(page)
    samples: dict[str, list[dict]] = {"bug": [], "token": [], "variant": []}
    try:
        page.goto(f"{server.url}/pitfalls?" + urllib.parse.urlencode({"text": text}))
        page.wait_for_function(IDLE_JS, polling="raf")
        main, sidebar = page.get_by_test_id("stMain"), page.get_by_test_id("stSidebar")
        token = 32  # the slider's default: the middle of the lab's 64 tokens

        def pick(label: str):
            return lambda: main.get_by_role("radio", name=label, exact=True).click()

        for _ in range(clicks):
            for name, marker in ((PITFALLS[BUG].label, PITFALLS[BUG].title), ("no bug", NO_BUG_MARKER)):
                time.sleep(1.0)  # settle: the last run's work is over (outside any timed interval)
                samples["bug"].append({"picked": name, **timed(page, frames, pick(name), marker, token)})
        time.sleep(1.0)
        timed(page, frames, pick(PITFALLS[BUG].label), PITFALLS[BUG].title, token)  # not a sample: the bug on
        thumb = main.get_by_role("slider")
        for index in range(clicks):
            time.sleep(1.0)
            key, token = ("ArrowRight", TOKENS[0]) if index % 2 == 0 else ("ArrowLeft", TOKENS[1])
            thumb.focus()
            samples["token"].append(timed(page, frames, lambda key=key: thumb.press(key), PITFALLS[BUG].title, token))
        for index in range(clicks):
            time.sleep(1.0)
            box = sidebar.locator("[data-testid=stSelectbox]", has_text="Attention variant")
            box.scroll_into_view_if_needed()  # the list closes when the sidebar scrolls
            box.click()
            choice = page.get_by_test_id("stSelectboxVirtualDropdown").get_by_role("option", name=VARIANTS[index % 2],
                                                                                  exact=True)
            choice.wait_for(state="visible")
            shown, gone = (VARIANT_NOTE, "") if index % 2 == 0 else (PITFALLS[BUG].title, VARIANT_NOTE)
            samples["variant"].append(timed(page, frames, choice.click, shown, token, fresh=False, absent=gone))
    finally:
        context.close()
    return samples


def main() -> int:
    from playwright.sync_api import sync_playwright

    before, rounds, clicks = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2, int(
        sys.argv[3]) if len(sys.argv) > 3 else 4
    apps = {"after": HERE.parent, "before": Path(before).resolve()}
    text = text_of_tokens(1024)
    samples, ports = [], iter(PORTS[index % len(PORTS)] for index in range(2 * rounds))
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for round_ in range(1, rounds + 1):
            for app in ("after", "before") if round_ % 2 else ("before", "after"):  # each first in turn
                with server_on(next(ports), apps[app]) as server:
                    time.sleep(SETTLE_S)
                    for action, taken in session(browser, server, text, clicks).items():
                        samples += [{"app": app, "round": round_, "action": action, **sample} for sample in taken]
                        print(app, round_, action, [f"{s['ms']:.0f}" for s in taken], flush=True)
        browser.close()
    summary = {"what": f"the Pitfall lab at a 1,024-token text: a bug picked (masked_fill, then no bug), the perturbed "
                       f"token moved (32 ↔ 33, masked_fill on), the variant changed (GQA ↔ MHA) → drawn, this "
                       f"checkout (after) and {before} (before) alternating, {rounds} rounds of {clicks} each",
               "samples": samples, "machine": machine()}
    kinds = {"masked_fill": lambda s: s.get("picked") == PITFALLS[BUG].label,
             "no_bug": lambda s: s.get("picked") == "no bug",
             "token": lambda s: s["action"] == "token", "variant": lambda s: s["action"] == "variant"}
    for app in apps:
        for kind, chosen in kinds.items():
            taken = [s for s in samples if s["app"] == app and chosen(s)]
            for field in ("ms", "run", "draw", "busy"):
                summary[f"{app}_{kind}_median_{field}"] = round(statistics.median(s[field] for s in taken))
    (RESULTS / "pitfall_clicks.json").write_text(json.dumps(summary, indent=1))
    print({key: value for key, value in summary.items() if "_median_" in key})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
