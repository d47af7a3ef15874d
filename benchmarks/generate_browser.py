"""The Generate page in a real Chromium: the time from a click on Step to the step drawn, with up to 256 tokens cached.

    python benchmarks/generate_browser.py                 # 3 rounds of 20 steps, the bundled model
    python benchmarks/generate_browser.py --rounds 5 --steps 10 --label after
    python benchmarks/generate_browser.py --app-root /tmp/before --label before   # another checkout

The bundled model (2 layers × 2 heads, context 256).  The prompt is a text of exactly ``256 − steps`` GPT-2 tokens
(``payload.text_of_tokens``) and ``new_tokens`` = ``steps``, so step k has ``256 − steps + k`` tokens cached and the
last step 256.  One Streamlit server (``streamlit run app.py``, waited for ``/_stcore/health``), Debian's Chromium
(``/usr/bin/chromium``, ``--no-sandbox``) driven by Playwright; one tab opens ``/generate?weights=bundled model&
text=…&new_tokens=…`` and waits until the prefill is drawn (not timed: it generates every step).

**Click → drawn.**  Timed inside the page with ``performance.now()``: from the ``pointerdown`` on Step (a capture
listener) to the first animation frame (``requestAnimationFrame`` polling, no fixed sleep) at which

1. ``stApp`` is ``data-test-script-state="notRunning"``, no spinner or status widget shows, nothing in the main area
   is ``data-stale="true"``;
2. the main area says ``Step k of N`` (the new step's marker);
3. the step's Plotly charts — the rows map ("query row over the cached keys") and the top 5 — each fired
   ``plotly_afterplot`` after the click (or were created after it) and are drawn (their heatmap image / bar paths);
   a visible ``stDataFrame`` has its canvas.

Phases: ``start`` click → script state running, ``run`` running → notRunning, ``draw`` the rest.  Between rounds
**Prefill** takes the stepper back to step 0 (not timed).  The server's CPU time per step (``/proc/<pid>/stat``
utime + stime across the click → drawn interval) separates Python's share from the browser's.  The load average is
recorded before and after: the machine is shared.  Writes ``results/generate_browser[_<label>].json``.  Target:
each step drawn ≤ 0.3 s with 256 tokens cached.

``--ablation R``: instead, copies of the app with parts of the Generate page's step left out or replaced
(:data:`ABLATIONS`, ``browser.app_copy``), each on its own server, R rounds each, the copies taking turns — what
each part of a step costs in the browser.  ``--floor``: the same timing on ``benchmarks/generate_floor_app.py``
(a fragment redrawing one heatmap of the step's rows: the least a Streamlit page can do per step).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from browser import (  # noqa: E402  (the Heads benchmark's server, Chromium settings and in-page instrumentation)
    ARM_JS,
    CHROMIUM,
    CHROMIUM_ARGS,
    INIT_JS,
    PLOTLY_DRAWN,
    RESULTS,
    VIEWPORT,
    FrameCounter,
    app_copy,
    machine,
    streamlit_server,
)
from payload import text_of_tokens  # noqa: E402

CONTEXT = 256  # the bundled model's context
TIMEOUT_MS = 300_000

# Returns true (and stamps t1) once step ``marker`` is drawn: conditions 1-3 of the module docstring.
STEP_DRAWN_JS = """
(marker) => {
  const b = window.__bench;
  if (b.t0 === null) return false;
  const app = document.querySelector('[data-testid=stApp]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (document.querySelector('[data-testid=stStatusWidget], [data-testid=stSpinner]')) return false;
  const main = document.querySelector('[data-testid=stMain]');
  if (!main || main.querySelector('[data-stale=true]')) return false;
  if (!main.innerText.includes(marker)) return false;
  const charts = [...main.querySelectorAll('.js-plotly-plot')].filter((gd) => {
    const text = gd.querySelector('.gtitle') ? gd.querySelector('.gtitle').textContent : '';
    return text.includes('query row over the cached keys') || text.includes('the top 5');
  });
  if (!charts.some((gd) => gd.querySelector('.gtitle').textContent.includes('query row'))) return false;
  for (const gd of charts) {
    if (gd.__benchOld && !gd.__benchRedraws) return false;
    if (!(PLOTLY_DRAWN)(gd)) return false;
  }
  for (const table of main.querySelectorAll('[data-testid=stDataFrame]')) {
    if (table.checkVisibility() && !table.querySelector('canvas')) return false;
  }
  b.t1 = performance.now();
  b.armed = false;
  return true;
}
""".replace("PLOTLY_DRAWN", PLOTLY_DRAWN.strip())

IDLE_AT_JS = """
(marker) => {
  const app = document.querySelector('[data-testid=stApp]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (document.querySelector('[data-testid=stStatusWidget], [data-testid=stSpinner]')) return false;
  const main = document.querySelector('[data-testid=stMain]');
  if (!main || main.querySelector('[data-stale=true]') || !main.innerText.includes(marker)) return false;
  return [...main.querySelectorAll('.js-plotly-plot')].every(PLOTLY_DRAWN);
}
""".replace("PLOTLY_DRAWN", PLOTLY_DRAWN.strip())


GENERATE = "attnviz/ui/generate.py"

ABLATIONS = {  # name -> (file, patches): (old, new) replaces the first old in that file
    "as is": (GENERATE, []),
    "the map at a fixed height, cells not square": ("attnviz/views/generation_figures.py", [
        ('"height": min(220 + 18 * max(steps, 6), 700)', '"height": 420'),
        ('"scaleanchor": "x", "constrain": "domain"', '"constrain": "domain"')]),
    "the whole prompt above each step": (GENERATE, [("PROMPT_SHOWN = 40", "PROMPT_SHOWN = 1024")]),
    "no cost section": (GENERATE, [("    st.divider()\n    cost_section(page_run, sizes)", "    pass")]),
    "no cache table": (GENERATE, [
        ('st.dataframe(cache, hide_index=True, width="content"', "(lambda *a, **k: None)(cache")]),
    "no top 5 table": (GENERATE, [('st.dataframe(top_k_frame(', "(lambda *a, **k: None)(top_k_frame(")]),
    "no metrics (the new token and the bytes held)": (GENERATE, [
        ('            st.metric("New token", _pieces', '            (lambda *a, **k: None)("New token", _pieces'),
        ('        st.metric("KV cache held"', '        (lambda *a, **k: None)("KV cache held"')]),
}


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (and its threads), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def step_once(page, frames: FrameCounter, server, marker: str) -> dict:
    main = page.get_by_test_id("stMain")
    page.evaluate(ARM_JS)
    frames.reset()
    cpu_before = cpu_seconds(server.process.pid)
    main.get_by_role("button", name="Step").click()
    page.wait_for_function(STEP_DRAWN_JS, arg=marker, polling="raf", timeout=TIMEOUT_MS)
    cpu_after = cpu_seconds(server.process.pid)
    b = page.evaluate("window.__bench")
    start = (b["runStart"] or b["t1"]) - b["t0"]
    run = (b["runEnd"] or b["t1"]) - (b["runStart"] or b["t1"])
    total = b["t1"] - b["t0"]
    return {"ms": total, "start": start, "run": run, "draw": total - start - run, "bytes": frames.bytes,
            "server_cpu_ms": (cpu_after - cpu_before) * 1e3, **frames.busy_since_reset()}


def open_generate(browser, url: str, query: str, steps: int, path: str = "/generate"):
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.add_init_script(INIT_JS)
    frames = FrameCounter(page)
    page.goto(f"{url}{path}?{query}")
    page.wait_for_function(IDLE_AT_JS, arg=f"Step 0 of {steps}", polling="raf", timeout=TIMEOUT_MS)
    return context, page, frames


def steps_round(page, frames, server, steps: int, first: bool) -> list[dict]:
    """Prefill (unless ``first``), then ``steps`` timed steps."""
    if not first:
        page.get_by_test_id("stMain").get_by_role("button", name="Prefill").click()
        page.wait_for_function(IDLE_AT_JS, arg=f"Step 0 of {steps}", polling="raf", timeout=TIMEOUT_MS)
    samples = []
    for k in range(1, steps + 1):
        sample = step_once(page, frames, server, f"Step {k} of {steps}")
        sample.update(step=k, cached=CONTEXT - steps + k)
        samples.append(sample)
    return samples


def ablation(browser, query: str, steps: int, rounds: int) -> dict[str, list[dict]]:
    import contextlib

    results: dict[str, list[dict]] = {name: [] for name in ABLATIONS}
    with contextlib.ExitStack() as stack:
        tabs = {}
        for name, (path, patches) in ABLATIONS.items():
            folder = stack.enter_context(app_copy(patches, path))
            server = stack.enter_context(streamlit_server(name.replace(" ", "-"), "app.py", cwd=folder))
            context, page, frames = open_generate(browser, server.url, query, steps)
            tabs[name] = (server, page, frames)
        for round_ in range(rounds):
            for name, (server, page, frames) in tabs.items():
                samples = steps_round(page, frames, server, steps, first=round_ == 0)
                results[name] += samples
                print(f"{name}: round {round_} median {statistics.median(s['ms'] for s in samples):.0f} ms "
                      f"(browser busy {statistics.median(s['busy'] for s in samples):.0f}, server CPU "
                      f"{statistics.median(s['server_cpu_ms'] for s in samples):.0f})", flush=True)
    return results


def _commit(root: Path) -> str:
    import subprocess

    marker = root / "COMMIT"  # a `git archive` copy: write the commit there
    if marker.exists():
        return marker.read_text().strip()
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                          text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --steps steps (Prefill between them)")
    parser.add_argument("--steps", type=int, default=20, help="new tokens: the last step has 256 tokens cached")
    parser.add_argument("--label", default="", help="a suffix for the results file (e.g. before, after)")
    parser.add_argument("--app-root", type=Path, default=ROOT,
                        help="time another checkout's app.py (e.g. a `git archive` of an earlier commit)")
    parser.add_argument("--floor", action="store_true", help="time benchmarks/generate_floor_app.py instead")
    parser.add_argument("--ablation", type=int, default=0, metavar="ROUNDS", help="time the ABLATIONS copies instead")
    args = parser.parse_args(argv)
    args.app_root = args.app_root.resolve()
    os.chdir(args.app_root)  # payload and attnviz are imported from ROOT; the server runs app_root's app.py

    from playwright.sync_api import sync_playwright

    from attnviz import tokens

    prompt = text_of_tokens(CONTEXT - args.steps)
    assert len(tokens.encode(prompt)) == CONTEXT - args.steps
    query = urllib.parse.urlencode({"weights": "bundled model", "text": prompt, "new_tokens": args.steps},
                                   quote_via=urllib.parse.quote)
    info = {**machine(), "commit": _commit(args.app_root)}
    settings = {**vars(args), "app_root": str(args.app_root)}
    if args.ablation:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            results = ablation(browser, query, args.steps, args.ablation)
            browser.close()
        info["load_after"] = os.getloadavg()
        summary = {name: {"median_ms": statistics.median(s["ms"] for s in samples), "n": len(samples),
                          "median_browser_busy_ms": statistics.median(s["busy"] for s in samples),
                          "median_server_cpu_ms": statistics.median(s["server_cpu_ms"] for s in samples)}
                   for name, samples in results.items()}
        print(json.dumps({**summary, "load_before": info["load_before"], "load_after": info["load_after"]}, indent=1))
        name = f"generate_browser_ablation_{args.label}.json" if args.label else "generate_browser_ablation.json"
        RESULTS.joinpath(name).write_text(json.dumps({"machine": info, "args": settings, "summary": summary,
                                                      "samples": results}, indent=1) + "\n")
        print(f"wrote {RESULTS / name}")
        return 0
    samples: list[dict] = []
    script = "benchmarks/generate_floor_app.py" if args.floor else "app.py"
    with streamlit_server("attnviz", script, cwd=args.app_root) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        context, page, frames = open_generate(browser, server.url, query, args.steps,
                                              path="/" if args.floor else "/generate")
        for round_ in range(args.rounds):
            for sample in steps_round(page, frames, server, args.steps, first=round_ == 0):
                sample["round"] = round_
                samples.append(sample)
                print(f"round {round_} step {sample['step']:2d} ({sample['cached']} cached): {sample['ms']:6.0f} ms "
                      f"(start {sample['start']:.0f} + run {sample['run']:.0f} + draw {sample['draw']:.0f}; server "
                      f"CPU {sample['server_cpu_ms']:.0f}, browser busy {sample['busy']:.0f}), {sample['bytes']:,} B",
                      flush=True)
        browser.close()
    info["load_after"] = os.getloadavg()
    at_256 = [s["ms"] for s in samples if s["cached"] == CONTEXT]
    summary = {
        "median_ms": statistics.median(s["ms"] for s in samples), "n": len(samples),
        "median_ms_256_cached": statistics.median(at_256), "n_256_cached": len(at_256),
        "median_run_ms": statistics.median(s["run"] for s in samples),
        "median_draw_ms": statistics.median(s["draw"] for s in samples),
        "median_server_cpu_ms": statistics.median(s["server_cpu_ms"] for s in samples),
        "median_browser_busy_ms": statistics.median(s["busy"] for s in samples),
        "median_bytes": statistics.median(s["bytes"] for s in samples),
    }
    print(json.dumps({**summary, "load_before": info["load_before"], "load_after": info["load_after"]}, indent=1))
    name = f"generate_browser_{args.label}.json" if args.label else "generate_browser.json"
    RESULTS.joinpath(name).write_text(json.dumps({"machine": info, "args": settings, "summary": summary,
                                                  "samples": samples}, indent=1) + "\n")
    print(f"wrote {RESULTS / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
