"""Real-GPT-2 speed and memory: the Heads page with a checkpoint at 1024 tokens, a layer switch, server RSS,
and a GPT-2-XL-shaped checkpoint loaded and run on this machine.

    python benchmarks/checkpoint.py               # GPT-2-small-shaped checkpoint (written to a temp folder)
    python benchmarks/checkpoint.py --xl          # also GPT-2-XL-shaped (6.2 GB fp32 in /tmp, deleted after)
    python benchmarks/checkpoint.py --xl-only
    python benchmarks/checkpoint.py --checkpoint-browser 4   # a layer switch in Chromium
    python benchmarks/checkpoint.py --floor-browser 3        # ... against Streamlit's floor for it

**The checkpoints** are written by this script, one tensor at a time: random weights (normal, std 0.02;
LayerNorm scales near 1) in Hugging Face's GPT-2 layout — ``model.safetensors``
(``transformer.h.{i}.attn.c_attn.weight`` as Conv1D
``(d, 3d)`` …, no ``lm_head``: tied to ``wte``) + ``config.json`` — the same files ``hf download
openai-community/gpt2`` puts on disk, read by ``attnviz.models.load_checkpoint``.  No download.

**Small (GPT-2 small: 12 layers, 12 heads, 768 wide, 1024 positions), in one process:**

* *bare forward*: ``GPTModel(idx)`` of the loaded checkpoint on 1024 tokens, no recorder, no grad, timed
  right before and right after every paint (the CPU is shared: each paint is compared with the mean of its
  two neighbours, and the median of those ratios is reported);
* *Heads page painted*: Streamlit's AppTest runs the real ``app.py`` (Heads page) with the checkpoint
  listed by ``ATTNVIZ_CHECKPOINTS`` and ``?weights=<name>``; a new 1024-token text the server has never
  seen is committed and ``AppTest.run()`` returns when the script run is finished — every element of the
  page (grid, focused head, statistics table, next-token panel) has been computed and serialised.  This is
  the server's side of a paint; the browser's drawing of the same page is measured by
  ``benchmarks/browser.py`` (≈ 0.2–0.4 s at 1024 tokens for the book's classes, the same figures).
  The model is already loaded (a first run with another text loads it);
* *layer switch*: after a painted run, the Layer selectbox is set to another layer and ``run()`` timed:
  ``pipeline.run`` reruns that block's norm1 + attention from the kept block inputs;
* *peak RSS* of this process (``VmHWM``), which is what a server holding the model, the trace cache and
  the kept block inputs peaks at (plus AppTest's own small overhead).

**XL (48 layers, 25 heads, 1600 wide), in a child process** (so its peak RSS is the load's): the file is
written, then the child loads it (``load_checkpoint``), runs ``trace_layer`` on 1024 tokens (one layer's
every step + the whole path + top-5) and ``switch_layer``; it reports the load time, the run times and its
peak RSS.  The files are deleted afterwards.  Check ``free -g`` first: writing needs one tensor's memory (plus
the file's pages in the page cache), loading peaks near 2× the model (6.2 GB) while the file is mapped.

**Layer switch in a real browser** (``--checkpoint-browser N``): the same small checkpoint, a real
``streamlit run app.py`` with ``ATTNVIZ_CHECKPOINTS``, Debian's Chromium via Playwright, helpers from
``benchmarks/browser.py``.  A tab opens the Heads page at ``?weights=<name>&text=<1024 tokens>`` and waits until
it is drawn; then N times: open the sidebar's Layer selectbox (scrolled into view first, as
``tests/browser/conftest.choose_option``), arm, click a layer not shown before (1, 2, …), and time from the
option's ``pointerdown`` to the first animation frame at which the script run has ended, every Plotly chart of the
main area (``st.plotly_chart``) has drawn its new data and every visible ``st.dataframe`` its canvas, and the caption
says ``layer L of 12`` (``browser.DRAWN_JS``, polled every frame; no fixed sleep).  Phases:
to the script's start, the script run (server), drawing after it (browser).  Results:
``results/checkpoint_browser.json``.

**The browser's floor for a layer switch** (``--floor-browser R``): R rounds; each round times 2 switches of the
app (as above), then 2 of ``benchmarks/floor_switch_app.py`` with its two charts (the Heads page's thumbnail
grid and 256 × 256 focused window, built by the same figure builders from maps computed when the page first
loads: no model, no attention run, no tables, no other widget) drawn by ``st.plotly_chart`` (``charts``: the Heads
page's own way of drawing them), and 2 of the same page with its caption only (``ATTNVIZ_FLOOR=bare``: what any
Streamlit rerun costs here).  Same clicks, same timing, same machine.  It prints the app's median over the charts
floor's and over the bare floor's.
Results: ``results/checkpoint_browser_floor.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"

SMALL = {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024}
XL = {"n_layer": 48, "n_head": 25, "n_embd": 1600, "n_positions": 1024}
VOCAB = 50257


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _gpt2_tensors(sizes: dict) -> list[tuple[str, tuple[int, ...], float, float]]:
    """(Hugging Face name, shape, std, mean) of every tensor of a GPT-2 (no lm_head: tied to wte)."""
    d = sizes["n_embd"]
    specs = [("transformer.wte.weight", (VOCAB, d), 0.02, 0.0),
             ("transformer.wpe.weight", (sizes["n_positions"], d), 0.02, 0.0)]
    for i in range(sizes["n_layer"]):
        h = f"transformer.h.{i}."
        specs += [
            (h + "ln_1.weight", (d,), 0.1, 1.0), (h + "ln_1.bias", (d,), 0.02, 0.0),
            # Conv1D (in, out)
            (h + "attn.c_attn.weight", (d, 3 * d), 0.02, 0.0), (h + "attn.c_attn.bias", (3 * d,), 0.02, 0.0),
            (h + "attn.c_proj.weight", (d, d), 0.02, 0.0), (h + "attn.c_proj.bias", (d,), 0.02, 0.0),
            (h + "ln_2.weight", (d,), 0.1, 1.0), (h + "ln_2.bias", (d,), 0.02, 0.0),
            (h + "mlp.c_fc.weight", (d, 4 * d), 0.02, 0.0), (h + "mlp.c_fc.bias", (4 * d,), 0.02, 0.0),
            (h + "mlp.c_proj.weight", (4 * d, d), 0.02, 0.0), (h + "mlp.c_proj.bias", (d,), 0.02, 0.0),
        ]
    specs += [("transformer.ln_f.weight", (d,), 0.1, 1.0), ("transformer.ln_f.bias", (d,), 0.02, 0.0)]
    return specs


def write_checkpoint(folder: Path, sizes: dict, seed: int = 0) -> Path:
    """A random GPT-2 of ``sizes`` as a Hugging Face folder: fp32 ``model.safetensors`` + ``config.json``.

    The safetensors file is written as the format specifies (8-byte little-endian header length, JSON header
    of dtype/shape/data_offsets, then the raw little-endian tensors), one tensor at a time, so writing a
    6.2 GB XL needs one tensor's memory, not the model's."""
    import struct

    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    specs = _gpt2_tensors(sizes)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _, _ in specs:
        size = int(np.prod(shape)) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    rng = np.random.default_rng(seed)
    with open(folder / "model.safetensors", "wb") as out:
        out.write(struct.pack("<Q", len(encoded)))
        out.write(encoded)
        for _, shape, std, mean in specs:
            out.write((rng.standard_normal(shape, dtype=np.float32) * np.float32(std) + np.float32(mean)).tobytes())
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": VOCAB,
              "n_positions": sizes["n_positions"], "n_ctx": sizes["n_positions"], "n_embd": sizes["n_embd"],
              "n_layer": sizes["n_layer"], "n_head": sizes["n_head"], "layer_norm_epsilon": 1e-5,
              "activation_function": "gelu_new"}
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


def text_of_tokens(count: int, seed: int) -> str:
    """A text of exactly ``count`` GPT-2 tokens, different for every seed (English from pydoc_data)."""
    import random
    from pydoc_data.topics import topics

    from attnviz import tokens

    keys = sorted(topics)
    random.Random(seed).shuffle(keys)
    ids: list[int] = []
    for key in keys:
        ids += tokens.encode(topics[key])
        if len(ids) > count + 50:
            break
    for end in range(count, count + 50):  # a decode/encode round trip that keeps exactly ``count`` tokens
        text = tokens.decode(ids[:end])
        if len(tokens.encode(text)) == count:
            return text
    raise RuntimeError("no text of exactly that many tokens")


def machine() -> dict:
    import torch

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"date": datetime.datetime.now().isoformat(timespec="minutes"), "cpu": cpu, "cores": os.cpu_count(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
            "load_average": os.getloadavg()}


# ============================== small: the app with a checkpoint ==============================


def small(repeats: int) -> dict:
    import torch

    folder = Path(tempfile.mkdtemp(prefix="attnviz-bench-")) / "gpt2-small-random"
    try:
        started = time.perf_counter()
        write_checkpoint(folder, SMALL)
        print(f"wrote {folder} ({(folder / 'model.safetensors').stat().st_size / 2**20:.0f} MB) "
              f"in {time.perf_counter() - started:.1f} s", flush=True)
        os.environ["ATTNVIZ_CHECKPOINTS"] = str(folder.parent)
        os.environ["HF_HUB_CACHE"] = str(folder.parent / "no-hf-cache")

        from streamlit.testing.v1 import AppTest

        from attnviz import tokens, weights

        started = time.perf_counter()
        model = weights.load(str(folder))
        load_s = time.perf_counter() - started
        texts = [text_of_tokens(1024, seed) for seed in range(repeats + 1)]
        idx = torch.tensor([tokens.encode(texts[0])])  # (1, 1024)

        def forward() -> float:
            """In a new thread, as Streamlit runs a script (torch's thread pool behaves per thread)."""
            took = []

            def run() -> None:
                with torch.no_grad():
                    started = time.perf_counter()
                    model(idx)  # (1, n) -> (1, n, vocab)
                    took.append(time.perf_counter() - started)

            thread = threading.Thread(target=run)
            thread.start()
            thread.join()
            return took[0]

        forward()  # warm-up
        forwards: list[float] = []

        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
        at.query_params["weights"] = folder.name
        at.query_params["text"] = "warm up: the model is loaded by this first run"
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert folder.name in at.caption[0].value, at.caption[0].value

        paints, switches, ratios = [], [], []
        for number, text in enumerate(texts[1:]):
            before = forward()  # the bare forward right before and right after each paint: the same CPU load
            at.sidebar.text_area(key="text").set_value(text)
            started = time.perf_counter()
            at.run()
            paints.append(time.perf_counter() - started)
            assert not at.exception, [e.value for e in at.exception]
            assert "1,024 tokens" in at.caption[0].value, at.caption[0].value
            after = forward()
            forwards += [before, after]
            ratios.append(paints[-1] / ((before + after) / 2))
            layer = 5 + number % 6
            at.sidebar.selectbox(key="layer").set_value(layer)
            started = time.perf_counter()
            at.run()
            switches.append(time.perf_counter() - started)
            assert f"layer {layer} of 12" in at.caption[0].value, at.caption[0].value
            at.sidebar.selectbox(key="layer").set_value(0).run()  # back to layer 0 for the next text
            print(f"  run {number}: bare forward {before:.2f} s, paint {paints[-1]:.2f} s, bare forward {after:.2f} s "
                  f"(ratio {ratios[-1]:.2f}), layer switch {switches[-1]:.2f} s, RSS {rss_mb():.0f} MB, "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
        forward_s, paint_s, switch_s = (statistics.median(x) for x in (forwards, paints, switches))
        return {
            "checkpoint": "GPT-2-small-shaped, random weights, fp32 safetensors, " + json.dumps(SMALL),
            "tokens": 1024, "load_s": round(load_s, 2),
            "bare_forward_s": [round(x, 3) for x in forwards], "heads_page_s": [round(x, 3) for x in paints],
            "heads_page_over_forward_per_run": [round(x, 2) for x in ratios],
            "layer_switch_s": [round(x, 3) for x in switches],
            "median_bare_forward_s": round(forward_s, 3), "median_heads_page_s": round(paint_s, 3),
            "median_layer_switch_s": round(switch_s, 3),
            "median_heads_page_over_forward": round(statistics.median(ratios), 2),
            "peak_rss_mb": round(peak_rss_mb()), "final_rss_mb": round(rss_mb()),
        }
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)


# ============================== small: a layer switch in a real browser ==============================


def _drawn_js(bb, marker_proves_run: bool = False) -> str:
    """``browser.DRAWN_JS`` (a visible ``st.dataframe`` must show its canvas: one in a collapsed expander of the
    checkpoint's Heads page is never drawn by the browser).

    ``marker_proves_run``: without DRAWN_JS's "a run started" condition, for pages with no chart whose run can be
    too fast for React to paint "running" (the caption's new layer proves the new run)."""
    js = bb.DRAWN_JS
    if marker_proves_run:
        run = ("  if (b.runs <= b.runsBefore && !document.querySelector('[data-testid=stMain] .js-plotly-plot')) "
               "return false;\n")
        assert run in js
        js = js.replace(run, "")
    return js


def switch_layer_in_browser(page, frames, layer: int, drawn_js: str, after_ms: int = 300) -> dict:
    """Settle 1 s, open the sidebar's Layer selectbox, arm the page's timer (``browser.ARM_JS``) and the frame
    counter, click ``layer`` and wait until ``drawn_js`` holds for the caption ``layer L of 12``, then ``after_ms``
    more (websocket frames after drawn); returns the page's ``window.__bench`` (t0 = the option's pointerdown,
    t1 = drawn; no sleep inside that interval)."""
    import browser as bb  # benchmarks/browser.py
    from playwright.sync_api import Error as PlaywrightError

    time.sleep(1.0)  # settle before the action (outside the timed interval)
    combobox = page.locator("[data-testid=stSidebar] [data-testid=stSelectbox]", has_text="Layer")
    combobox.scroll_into_view_if_needed()
    item = page.get_by_test_id("stSelectboxVirtualDropdown").get_by_role("option", name=str(layer), exact=True)
    for attempt in range(3):  # as tests/browser/conftest.choose_option
        combobox.click()
        try:
            item.wait_for(state="visible", timeout=3_000)
            break
        except PlaywrightError:
            if attempt == 2:
                raise
            page.keyboard.press("Escape")
    page.evaluate(bb.ARM_JS)
    frames.reset()
    item.click()
    page.wait_for_function(drawn_js, arg=f"layer {layer} of 12", polling="raf", timeout=bb.TIMEOUT_MS)
    if after_ms:
        page.wait_for_timeout(after_ms)  # websocket frames after drawn (outside the timed interval)
    return page.evaluate("window.__bench")


def browser_switch(switches: int, floor: str | None = None, app_root: Path = ROOT) -> dict:
    """Layer selectbox → the Heads page drawn again, in Chromium, ``switches`` times (see the docstring).

    ``floor``: the same clicks and timing on ``benchmarks/floor_switch_app.py`` instead (``"charts"``: its two
    charts of precomputed maps by ``st.plotly_chart``; ``"bare"``: its caption only).  ``app_root``: the checkout
    whose ``app.py`` is timed (another commit's worktree, for a comparison in one run)."""
    import urllib.parse

    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import browser as bb  # benchmarks/browser.py

    drawn_js = _drawn_js(bb, marker_proves_run=floor == "bare")  # the bare floor has no chart
    folder = Path(tempfile.mkdtemp(prefix="attnviz-bench-")) / "gpt2-small-random"
    try:
        write_checkpoint(folder, SMALL)
        env = {"ATTNVIZ_CHECKPOINTS": str(folder.parent), "HF_HUB_CACHE": str(folder.parent / "no-hf-cache")}
        text = text_of_tokens(1024, 0)
        query = urllib.parse.urlencode({"weights": folder.name, "text": text})
        samples: list[dict] = []
        script, marker = "app.py", "1,024 tokens"
        if floor is not None:
            script, query = "benchmarks/floor_switch_app.py", ""
            env = {"ATTNVIZ_FLOOR": floor}
        cwd = ROOT if floor is not None else app_root
        with bb.streamlit_server("checkpoint", script, env=env, cwd=cwd) as server, sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=bb.CHROMIUM, args=bb.CHROMIUM_ARGS, headless=True)
            started = time.perf_counter()
            context, page, frames = bb.open_tab(chromium, server, query)
            page.wait_for_function("(marker) => document.querySelector('[data-testid=stMain]').innerText"
                                   ".includes(marker)", arg=marker, polling="raf")
            print(f"first page (load + 1024-token paint): {time.perf_counter() - started:.1f} s", flush=True)
            for index in range(switches):
                layer = index + 1  # a layer this text has not shown yet
                b = switch_layer_in_browser(page, frames, layer, drawn_js)
                start = (b["runStart"] or b["t1"]) - b["t0"]
                run = (b["runEnd"] or b["t1"]) - (b["runStart"] or b["t1"])
                sample = {"ms": b["t1"] - b["t0"], "start": start, "run": run, "draw": b["t1"] - b["t0"] - start - run,
                          "bytes": frames.bytes, **frames.busy_since_reset()}
                sample["layer"] = layer
                sample["server_rss_mb"] = round(server.status("VmRSS") / 2**20)
                samples.append(sample)
                print(f"  switch to layer {layer}: {bb.show(sample)}, load {os.getloadavg()[0]:.1f}", flush=True)
            peak = round(server.status("VmHWM") / 2**20)
            context.close()
            chromium.close()
        return {
            "app": script + (f" (ATTNVIZ_FLOOR={floor})" if floor else ""),
            "checkpoint": "GPT-2-small-shaped, random weights, fp32 safetensors, " + json.dumps(SMALL),
            "tokens": 1024, "method": "Layer option pointerdown -> the run ended, every st.plotly_chart and visible "
                                      "st.dataframe of the main area drawn again (benchmarks/browser.py DRAWN_JS, "
                                      "polled per animation frame)",
            "switches": samples,
            "median_ms": round(statistics.median(s["ms"] for s in samples)),
            "median_phases_ms": {k: round(statistics.median(s[k] for s in samples)) for k in ("start", "run", "draw")},
            "median_browser_busy_ms": round(statistics.median(s["busy"] for s in samples)),
            "median_bytes": round(statistics.median(s["bytes"] for s in samples)),
            "server_peak_rss_mb": peak,
        }
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)


def alternating(apps: dict[str, dict], rounds: int, switches: int) -> dict[str, list[dict]]:
    """``rounds`` rounds of :func:`browser_switch` (``switches`` each) of every app in turn — name → its keyword
    arguments (``floor``, ``app_root``) — so that all of them see the same machine; each app's results by round."""
    got: dict[str, list[dict]] = {name: [] for name in apps}
    for _ in range(rounds):
        for name, kwargs in apps.items():
            got[name].append(browser_switch(switches, **kwargs))
            print(f"{name}: round median {got[name][-1]['median_ms']} ms", flush=True)
    return got


def switch_times(rounds: list[dict], key: str = "ms") -> list[int]:
    """Every switch's ``key`` (ms, or the browser's busy ms) over ``rounds`` of :func:`browser_switch`."""
    return [round(switch[key]) for result in rounds for switch in result["switches"]]


def write_result(results: dict, name: str, load_after: bool = False) -> None:
    """``results`` as ``results/<name>`` (with the load average now, ``load_after``)."""
    if load_after:
        results["machine"]["load_after"] = os.getloadavg()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / name).write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {RESULTS / name}")


# ============================== XL: load and run ==============================

_XL_CHILD = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from benchmarks.checkpoint import peak_rss_mb, rss_mb, text_of_tokens
from attnviz import tokens
from attnviz.models import load_checkpoint, switch_layer, trace_layer
out = {"rss_before_load_mb": round(rss_mb())}
started = time.perf_counter()
model = load_checkpoint(sys.argv[1])
out["load_s"] = round(time.perf_counter() - started, 1)
out["peak_rss_after_load_mb"] = round(peak_rss_mb())
out["rss_after_load_mb"] = round(rss_mb())
out["params"] = sum(p.numel() for p in model.parameters())
ids = tokens.encode(text_of_tokens(1024, 0))
started = time.perf_counter()
trace = trace_layer(model, ids, 24)
out["trace_layer_1024_s"] = round(time.perf_counter() - started, 1)
started = time.perf_counter()
switched = switch_layer(model, trace, 47)
out["switch_layer_s"] = round(time.perf_counter() - started, 2)
out["weights_shape"] = list(switched.steps["weights"].shape)
out["peak_rss_mb"] = round(peak_rss_mb())
print(json.dumps(out))
"""


def xl() -> dict:
    free_gb = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    if free_gb < 14:
        raise SystemExit(f"only {free_gb:.1f} GB free: the XL part needs ~14 GB; not run")
    folder = Path(tempfile.mkdtemp(prefix="attnviz-xl-", dir="/tmp")) / "gpt2-xl-random"
    try:
        started = time.perf_counter()
        write_checkpoint(folder, XL)
        size_gb = (folder / "model.safetensors").stat().st_size / 1e9
        write_s = time.perf_counter() - started
        print(f"wrote {folder} ({size_gb:.2f} GB) in {write_s:.0f} s", flush=True)
        child = subprocess.run([sys.executable, "-c", _XL_CHILD, str(folder), str(ROOT)], capture_output=True,
                               text=True, check=False, cwd=ROOT)
        if child.returncode:
            raise SystemExit(f"XL child failed ({child.returncode}):\n{child.stderr[-3000:]}")
        result = json.loads(child.stdout.strip().splitlines()[-1])
        return {"checkpoint": "GPT-2-XL-shaped, random weights, fp32 safetensors, " + json.dumps(XL),
                "file_gb": round(size_gb, 2), "write_s": round(write_s), **result}
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--xl", action="store_true", help="also the GPT-2-XL-shaped checkpoint")
    parser.add_argument("--xl-only", action="store_true")
    parser.add_argument("--checkpoint-browser", type=int, default=0, metavar="N",
                        help="only: N layer switches timed in Chromium (results/checkpoint_browser.json)")
    parser.add_argument("--floor-browser", type=int, default=0, metavar="N",
                        help="only: N rounds of 2 layer switches in Chromium each of the app, "
                        "the floor app with its two "
                        "Plotly charts and the bare floor app (results/checkpoint_browser_floor.json)")
    parser.add_argument("--against", type=Path, metavar="DIR",
                        help="with --checkpoint-browser N: rounds of N switches alternating between this checkout's "
                        "app and DIR's (another commit's worktree); writes results/checkpoint_browser_against.json")
    parser.add_argument("--rounds", type=int, default=3, help="with --against: rounds per app")
    args = parser.parse_args(argv)
    results: dict = {"machine": machine()}
    if args.against and args.checkpoint_browser:
        apps = {"this": ROOT, "against": args.against.resolve()}
        got = alternating({name: {"app_root": root} for name, root in apps.items()}, args.rounds,
                          args.checkpoint_browser)
        results["against"] = {name: {"app_root": str(apps[name]),
                                     "round_medians_ms": [r["median_ms"] for r in rounds],
                                     "switches_ms": switch_times(rounds),
                                     "median_bytes": rounds[0]["median_bytes"]} for name, rounds in got.items()}
        for timed in results["against"].values():  # as the floor's: the median of the switches kept
            timed["median_ms"] = round(statistics.median(timed["switches_ms"]))
        ratio = results["against"]["this"]["median_ms"] / results["against"]["against"]["median_ms"]
        results["ratio this / against"] = round(ratio, 2)
        print(f"this {results['against']['this']['median_ms']} ms, against {results['against']['against']['median_ms']}"
              f" ms: {ratio:.2f}×", flush=True)
        write_result(results, "checkpoint_browser_against.json", load_after=True)
        return 0
    if args.floor_browser:
        runs = alternating({"app": {}, "charts": {"floor": "charts"}, "bare": {"floor": "bare"}}, args.floor_browser, 2)
        results["floor"] = {name: {"app": got[0]["app"], "switches_ms": switch_times(got),
                                   "busy_ms": switch_times(got, "busy"),
                                   "bytes": got[0]["median_bytes"]} for name, got in runs.items()}
        for name, got in results["floor"].items():
            got["median_ms"] = round(statistics.median(got["switches_ms"]))
            print(f"{name}: median {got['median_ms']} ms, {got['switches_ms']}, busy {got['busy_ms']}", flush=True)
        app_ms = results["floor"]["app"]["median_ms"]  # against the floors of this run
        results["ratios"] = {f"app / {name}": round(app_ms / results["floor"][name]["median_ms"], 2)
                             for name in ("charts", "bare")}
        print(" · ".join(f"{name} = {ratio}×" for name, ratio in results["ratios"].items()), flush=True)
        write_result(results, "checkpoint_browser_floor.json", load_after=True)
        return 0
    if args.checkpoint_browser:
        results["browser_layer_switch"] = browser_switch(args.checkpoint_browser)
        print(json.dumps({k: v for k, v in results["browser_layer_switch"].items() if k != "switches"}, indent=1))
        print(f"layer switch at 1024 tokens: median {results['browser_layer_switch']['median_ms']} ms "
              "(target ≤ 600 ms)")
        write_result(results, "checkpoint_browser.json", load_after=True)
        return 0
    if not args.xl_only:
        results["small"] = small(args.repeats)
        print(json.dumps(results["small"], indent=1), flush=True)
    if args.xl or args.xl_only:
        results["xl"] = xl()
        print(json.dumps(results["xl"], indent=1), flush=True)
    write_result(results, "checkpoint_xl.json" if args.xl_only else "checkpoint.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
