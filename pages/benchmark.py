"""Benchmark: the book's MultiHeadAttention vs the wrapper, a fused QKV, nn.MultiheadAttention and SDPA,
all with the same weights (attnviz.labs.implementations), timed on this machine when the button is pressed."""

import time

import streamlit as st

from attnviz import ui
from attnviz.config import MAX_CONTEXT_LENGTH, available_devices, resolve_device
from attnviz.labs import implementations
from attnviz.views import figures

ctx = ui.setup(book_classes=True)
if ctx is None:
    st.stop()
settings = ctx.settings
d_in, d_out, num_heads = int(settings["d_in"]), int(settings["d_out"]), int(settings["num_heads"])
device, _ = resolve_device(settings["device"])

st.title("Implementations benchmark")
st.markdown(
    f"Five implementations of the same multi-head attention (d_in {d_in}, d_out {d_out}, {num_heads} heads, "
    f"{'causal' if settings['causal'] else 'not causal'}), built with the same weights, timed on one "
    f"(1, n, {d_in}) input. Device: **{device}**."
)
if available_devices() == ["auto", "cpu"]:
    st.caption("CPU only on this machine (no CUDA or MPS): GPU timings would differ a lot.")
if d_in != d_out:
    st.caption("nn.MultiheadAttention is left out: it needs d_in == d_out.")

n_col, repeats_col = st.columns(2)
n = n_col.number_input("Tokens n", min_value=1, max_value=MAX_CONTEXT_LENGTH, step=1,
                       **ui.page_bind("benchmark_n", 256))
repeats = repeats_col.number_input("Timed repeats", min_value=1, max_value=100, step=1,
                                   **ui.page_bind("benchmark_repeats", 5))

unfinished = st.session_state.pop("benchmark_started", False)  # set while a timing runs: a rerun cut it short
if st.button("Run benchmark", key="benchmark_run", type="primary"):
    # a click on Stop reruns the page, which ends this run at its next progress update (Streamlit's own rerun);
    # so does any other rerun — a setting changed, another page opened — which the next run then says
    unfinished = False
    st.session_state["benchmark_started"] = True
    stop = st.empty()  # shown while the timing runs
    stop.button("Stop", key="benchmark_stop", icon=":material/stop:", on_click=st.session_state.update,
                kwargs={"benchmark_stopped": True}, help="Stops the timing; the results of an earlier run stay.")
    bar = st.progress(0.0, text="Starting…")
    started = time.perf_counter()
    rows = implementations.time_implementations(
        d_in, d_out, num_heads, int(n), device, int(repeats), causal=bool(settings["causal"]),
        seed=int(settings["seed"]),
        progress=lambda done, total, name: bar.progress(
            done / total, text=implementations.progress_text(done, total, name, time.perf_counter() - started)),
    )
    del st.session_state["benchmark_started"]
    bar.empty()
    stop.empty()
    st.session_state["benchmark_results"] = {
        "rows": rows, "about": f"n = {n}, {repeats} repeats, d_in {d_in}, d_out {d_out}, {num_heads} heads, {device}",
    }

if st.session_state.pop("benchmark_stopped", False):
    st.info("Stopped: nothing of that run was kept.", icon=":material/stop:")
elif unfinished:
    st.info("The benchmark you started did not finish: a setting changed or another page was opened while it ran, "
            "which ends the timing. Nothing of it was kept; press Run benchmark to time again.", icon=":material/info:")
results = st.session_state.get("benchmark_results")
if results:
    rows = results["rows"]
    st.plotly_chart(figures.benchmark_bars(rows, results["about"]), config=ui.plotly_config("attnviz-benchmark"))
    st.dataframe(implementations.results_table(rows), hide_index=True)
else:
    st.caption("Nothing is timed until you press Run benchmark.")
