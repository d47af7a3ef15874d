"""Does the Train page's live view survive a loaded machine?  How often Chromium's page goes blank while it trains.

    python benchmarks/train_live_blank.py [--runs 14] [--seconds 60] [--hogs 2] [--steps 400] [--log DIR]

One server (``app.py``, headless, on 127.0.0.1) and Debian's Chromium through Playwright, 1400 × 1000, with
``--hogs`` busy Python processes (``while True: pass``) beside them for the whole measurement.  Each run opens a new
tab at ``/train``, sets the steps (the browser test's 400), presses **Start training** and watches for ``--seconds``
(or until the run ends): a run *fails* when the page logs Streamlit's "Bad delta path index" (or any other page
error) or its main area loses its title (the blank page).  Every run's websocket traffic is decoded (``ForwardMsg``
kinds, fragment ids, delta paths, finish statuses) into ``--log DIR/run-N.txt`` so a failure's sequence can be read.
The hogs, the server and the browser are stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, cpu_hogs, streamlit_server  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402
from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402

STEP_JS = """() => {
  const bar = document.querySelector('[data-testid=stMain] [data-testid=stProgress]');
  const match = bar && bar.innerText.match(/(\\w+): step (\\d+) of/);
  return match ? [match[1], Number(match[2])] : null;
}"""
BLANK_JS = "() => !document.querySelector('[data-testid=stMain] h1')"


def describe_forward(raw: bytes) -> str:
    msg = ForwardMsg()
    msg.ParseFromString(raw)
    kind = msg.WhichOneof("type")
    meta = msg.metadata
    run = meta.run if meta.HasField("run") else None
    rid = run.script_run_id[:6] if run is not None else ""
    frags = ",".join(f[:6] for f in run.fragment_ids) if run is not None else ""
    text = f"{kind} run={rid} frags={frags}"
    if kind == "ref_hash":
        text += f" path={list(meta.delta_path)} ref={msg.ref_hash[:8]}"
    if kind == "delta":
        delta = msg.delta
        dkind = delta.WhichOneof("type")
        sub = ""
        if dkind == "new_element":
            sub = delta.new_element.WhichOneof("type")
        elif dkind == "add_block":
            sub = delta.add_block.WhichOneof("type") or ""
        text += f" path={list(meta.delta_path)} {dkind}:{sub} frag={delta.fragment_id[:6]}"
    elif kind == "script_finished":
        text += f" status={ForwardMsg.ScriptFinishedStatus.Name(msg.script_finished)}"
    elif kind == "auto_rerun":
        text += f" interval={msg.auto_rerun.interval} frag={msg.auto_rerun.fragment_id[:6]}"
    elif kind == "stop_auto_rerun":
        text += f" frags={[f[:6] for f in msg.stop_auto_rerun.fragment_ids]}"
    elif kind == "session_status_changed":
        text += f" running={msg.session_status_changed.script_is_running}"
    return text


def describe_back(raw: bytes) -> str:
    msg = BackMsg()
    msg.ParseFromString(raw)
    kind = msg.WhichOneof("type")
    text = f"BACK {kind}"
    if kind == "rerun_script":
        text += f" frag={msg.rerun_script.fragment_id[:6]} auto={getattr(msg.rerun_script, 'is_auto_rerun', '?')}"
    return text


def one_run(browser, url: str, index: int, seconds: float, steps: int, log_dir: Path) -> dict:
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(120_000)
    page = context.new_page()
    errors: list[str] = []
    lines: list[str] = []
    t0 = time.monotonic()

    def note(text: str) -> None:
        lines.append(f"{time.monotonic() - t0:8.3f} {text}")

    def on_ws(ws):
        def received(payload):
            try:
                note(describe_forward(payload if isinstance(payload, bytes) else payload.encode()))
            except Exception as exc:  # noqa: BLE001 — an undecodable frame is logged as such
                note(f"?? {exc}")

        def sent(payload):
            try:
                note(describe_back(payload if isinstance(payload, bytes) else payload.encode()))
            except Exception as exc:  # noqa: BLE001
                note(f"BACK ?? {exc}")

        ws.on("framereceived", received)
        ws.on("framesent", sent)

    def on_console(message):
        if message.type == "error":
            errors.append(message.text)
            note(f"CONSOLE {message.text}")

    page.on("websocket", on_ws)
    page.on("console", on_console)
    page.on("pageerror", lambda error: (errors.append(f"pageerror: {error}"), note(f"PAGEERROR {error}")))
    result = {"run": index, "failed": False, "blank": False, "errors": [], "last": None}
    try:
        page.goto(f"{url}/train")
        main = page.get_by_test_id("stMain")
        box = main.get_by_role("spinbutton", name="Training steps")
        box.fill(str(steps))
        box.press("Enter")
        page.wait_for_function("() => document.querySelector('[data-testid=stApp]')"
                               ".getAttribute('data-test-script-state') === 'notRunning'")
        note("CLICK start")
        main.get_by_role("button", name="Start training").click()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            page.wait_for_timeout(500)
            shown = page.evaluate(STEP_JS)
            result["last"] = shown
            if page.evaluate(BLANK_JS):
                result["blank"] = True
            if any("Bad delta" in e or e.startswith("pageerror") for e in errors) or result["blank"]:
                break
            if shown and shown[0] in ("Finished", "Stopped", "Failed"):
                break
        stop = main.get_by_role("button", name="Stop")
        if stop.count() and stop.is_enabled():
            stop.click()
            page.wait_for_timeout(1000)
    finally:
        bad = [e for e in errors if "Bad delta" in e or e.startswith("pageerror") or "delta path" in e]
        result["errors"] = bad[:3]
        result["failed"] = bool(bad) or result["blank"]
        (log_dir / f"run-{index}.txt").write_text("\n".join(lines) + "\n")
        context.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=14)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--hogs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--log", type=Path, default=Path("/tmp/attnviz-train-live"))
    args = parser.parse_args()
    args.log.mkdir(parents=True, exist_ok=True)
    results = []
    with cpu_hogs(args.hogs), streamlit_server("attnviz", "app.py") as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            for index in range(args.runs):
                result = one_run(browser, server.url, index, args.seconds, args.steps, args.log)
                results.append(result)
                print(json.dumps(result), flush=True)
        finally:
            browser.close()
    failed = sum(r["failed"] for r in results)
    print(f"{failed} of {len(results)} runs failed (hogs: {args.hogs}, steps: {args.steps}, {args.seconds:.0f} s each)")


if __name__ == "__main__":
    main()
