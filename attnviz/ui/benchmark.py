"""The Benchmark page: the five implementations timed on this machine when the user presses Run, with a Stop, the
last results kept in the session, a word when a run was stopped or cut short by a rerun, and a warning when a row's
timed calls spread so widely that the ranking may not hold.  The tokens and repeats are number boxes
(:mod:`attnviz.ui.number_box`): Run times what they show, or, with one that holds no number in its range, nothing.  A
mask or device the sidebar disables (a user's module, the sliding window's mask) is timed as the book's multi-head
attention runs it, and a value set aside is named."""

from __future__ import annotations

import time

import streamlit as st

from attnviz import variants
from attnviz.config import MAX_CONTEXT_LENGTH, available_devices, resolve_device
from attnviz.labs import implementations
from attnviz.ui.frame import Context, plotly_config
from attnviz.ui.number_box import bounded_box, box_number, span
from attnviz.urlstate import DEFAULTS, ignored, url_value
from attnviz.views import figures
from attnviz.words import amount, markdown_escape

STARTED = "benchmark_started"  # session_state: set while a timing runs, so the next run knows a rerun cut it short
STOPPED = "benchmark_stopped"  # session_state: the Stop button's click
RESULTS = "benchmark_results"  # session_state: the last finished run's rows and what they timed


def show(page_run: Context) -> None:
    """The page below its title: what is timed, the two inputs, Run (and Stop while it runs), the results."""
    settings = page_run.settings
    d_in, d_out, num_heads = int(settings["d_in"]), int(settings["d_out"]), int(settings["num_heads"])
    timed, set_aside = _timed_settings(settings, page_run.config.spec)
    device, _ = resolve_device(timed["device"])
    st.markdown(
        f"Five implementations of the same multi-head attention (d_in {d_in}, d_out {d_out}, "
        f"{amount(num_heads, 'head')}, "
        f"{'causal' if timed['causal'] else 'not causal'}), built with the same weights, timed on one "
        f"(1, n, {d_in}) input. Device: **{implementations.device_words(device)}**."
    )
    if page_run.config.module is not None:  # its mask and device toggles are disabled: they are the module's
        st.caption("Your module is not timed here: these are five ways to write the book's multi-head attention, "
                   "with the sidebar's sizes and seed. The sidebar's mask and device are your module's, so they do "
                   f"not apply: the five are timed {'with' if timed['causal'] else 'without'} the causal mask, on "
                   f"the device above.{set_aside}")
    elif settings["variant"] != variants.MHA:
        applies = ("its sizes, mask and device do" if page_run.config.spec.not_applicable("causal") is None else
                   "its sizes and device do; its mask is the variant's, so the five are timed with the causal mask")
        st.caption("The sidebar's *Attention variant* does not apply here: these are five ways to write multi-head "
                   f"attention; {applies}.{set_aside}")
    st.caption("Dropout does not apply: the five are timed in eval mode, without dropout.")
    if available_devices() == ["auto", "cpu"]:
        st.caption("CPU only on this machine (no CUDA or MPS): GPU timings would differ a lot.")
    if d_in != d_out:
        st.caption("nn.MultiheadAttention is left out: it needs d_in == d_out.")

    n_col, repeats_col = st.columns(2, vertical_alignment="top")  # a box's warning under it, the other box level
    boxes = {"benchmark_n": ("Tokens n", (1, MAX_CONTEXT_LENGTH), 256), "benchmark_repeats": ("Timed repeats",
                                                                                            (1, 100), 5)}
    texts, refused = {}, False
    for col, (key, (label, bounds, default)) in zip((n_col, repeats_col), boxes.items()):
        texts[key], problem = bounded_box(col, label, key, default, bounds, help=f"{span(bounds)}.")
        if problem is not None:  # Run times what the boxes show, or nothing
            col.warning(markdown_escape(f"{problem}: Run benchmark times nothing until the box holds a number in "
                                        "that range."), icon=":material/block:")
            refused = True

    cut_short = st.session_state.pop(STARTED, False)  # still set: a rerun ended the timing before it finished
    if st.button("Run benchmark", key="benchmark_run", type="primary", disabled=refused):
        cut_short = False
        st.session_state[RESULTS] = _time({**settings, **timed}, device, box_number(texts["benchmark_n"]),
                                          box_number(texts["benchmark_repeats"]))

    if st.session_state.pop(STOPPED, False):
        st.info("Stopped: nothing of that run was kept.", icon=":material/stop:")
    elif cut_short:
        st.info("The benchmark you started did not finish: a setting changed or another page was opened while it "
                "ran, which ends the timing. Nothing of it was kept; press Run benchmark to time again.",
                icon=":material/info:")
    _results(st.session_state.get(RESULTS))


def _timed_settings(settings: dict, spec: variants.Variant) -> tuple[dict, str]:
    """The mask and device the five are timed with, and a sentence naming what was set aside: a setting the sidebar
    disables for ``spec`` (a user's module decides its own mask and device; the sliding window its mask) times with
    what the book's multi-head attention runs (the causal mask, ``auto``), whatever its disabled widget holds, and a
    value other than that — from the link (``urlstate.ignored``: "Ignored URL parameter causal='false': the five are
    timed with the causal mask."), or kept from another variant ("The sidebar's causal=false is not used.") — is
    named."""
    timed = {"causal": bool(settings["causal"]), "device": settings["device"]}
    set_aside = []
    timed_with = {"causal": "the five are timed with the causal mask.",
                  "device": "the five are timed on the device above."}
    for key, own in (("causal", variants.get(variants.MHA).book_causal), ("device", DEFAULTS["device"])):
        if spec.not_applicable(key) is not None:
            if timed[key] != own:
                value = url_value(key, timed[key])
                set_aside.append(ignored([(key, value)], timed_with[key]) if st.query_params.get(key) == value
                                 else f"The sidebar's {key}={value} is not used.")
            timed[key] = own
    return timed, "".join(f" {sentence}" for sentence in set_aside)


def _time(settings: dict, device: str, n: int, repeats: int) -> dict:
    """Time the implementations under a progress bar with a Stop button; the rows and what they timed.

    A click on Stop reruns the page, which ends this run at its next progress update (Streamlit's own rerun); so
    does any other rerun — a setting changed, another page opened — which the next run then reports (``STARTED``)."""
    d_in, d_out, num_heads = int(settings["d_in"]), int(settings["d_out"]), int(settings["num_heads"])
    st.session_state[STARTED] = True
    stop = st.empty()  # shown while the timing runs
    stop.button("Stop", key="benchmark_stop", icon=":material/stop:", on_click=st.session_state.update,
                kwargs={STOPPED: True}, help="Stops the timing; the results of an earlier run stay.")
    bar = st.progress(0.0, text="Starting…")
    started = time.perf_counter()
    rows = implementations.time_implementations(
        d_in, d_out, num_heads, n, device, repeats, causal=bool(settings["causal"]), seed=int(settings["seed"]),
        progress=lambda done, total, name: bar.progress(
            done / total, text=implementations.progress_text(done, total, name, time.perf_counter() - started)),
    )
    del st.session_state[STARTED]
    bar.empty()
    stop.empty()
    heads = amount(num_heads, "head")
    causal = "causal" if settings["causal"] else "not causal"
    return {"rows": rows, "about": f"n = {n}, {repeats} repeats, d_in {d_in}, d_out {d_out}, {heads}, {causal}, "
                                   f"{implementations.device_words(device)}"}


def _results(results: dict | None) -> None:
    """The last finished run's bars and table, or what to press."""
    if not results:
        st.caption("Nothing is timed until you press Run benchmark.")
        return
    rows = results["rows"]
    note = implementations.noise_note(rows)
    if note is not None:
        st.warning(note, icon=":material/speed:")
    st.plotly_chart(figures.benchmark_bars(rows, results["about"]), config=plotly_config("attnviz-benchmark"))
    # the numbers with the two decimals the bars above write, the fastest's ratio too; sorting, search and CSV
    # download are the grid's own
    st.dataframe(implementations.results_table(rows), hide_index=True, column_config={
        "median ms": st.column_config.NumberColumn(format="%.2f", help="The median of the timed calls, in ms."),
        "× fastest": st.column_config.NumberColumn(format="%.2f", help="The median ÷ the fastest implementation's."),
    })
