"""Benchmark: the book's MultiHeadAttention vs the wrapper, a fused QKV, nn.MultiheadAttention and SDPA,
all with the same weights (attnviz.implementations), timed on this machine when the button is pressed."""

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from attnviz import implementations, pipeline, ui

ctx = ui.setup("Implementations benchmark")
if ctx is None:
    st.stop()
settings = ctx.settings
d_in, d_out, num_heads = int(settings["d_in"]), int(settings["d_out"]), int(settings["num_heads"])
device, _ = pipeline.resolve_device(settings["device"])

st.title("Implementations benchmark")
st.markdown(
    f"Five implementations of the same multi-head attention (d_in {d_in}, d_out {d_out}, {num_heads} heads, "
    f"{'causal' if settings['causal'] else 'not causal'}), built with the same weights, timed on one "
    f"(1, n, {d_in}) input. Device: **{device}**."
)
if pipeline.available_devices() == ["auto", "cpu"]:
    st.caption("CPU only on this machine (no CUDA or MPS): GPU timings would differ a lot.")
if d_in != d_out:
    st.caption("nn.MultiheadAttention is left out: it needs d_in == d_out.")

n_col, repeats_col = st.columns(2)
n = n_col.number_input("Tokens n", min_value=1, max_value=pipeline.MAX_CONTEXT_LENGTH, value=256, step=1,
                       key="benchmark_n")
repeats = repeats_col.number_input("Timed repeats", min_value=1, max_value=100, value=5, step=1,
                                   key="benchmark_repeats")

if st.button("Run benchmark", key="benchmark_run", type="primary"):
    bar = st.progress(0.0, text="Starting…")
    rows = implementations.time_implementations(
        d_in, d_out, num_heads, int(n), device, int(repeats), causal=bool(settings["causal"]),
        seed=int(settings["seed"]),
        progress=lambda done, total, name: bar.progress(done / total, text=f"{done}/{total}: {name}"),
    )
    bar.empty()
    st.session_state["benchmark_results"] = {
        "rows": rows, "about": f"n = {n}, {repeats} repeats, d_in {d_in}, d_out {d_out}, {num_heads} heads, {device}",
    }

results = st.session_state.get("benchmark_results")
if results:
    rows = results["rows"]
    fig = go.Figure(go.Bar(
        x=[row.median_ms for row in rows], y=[row.name for row in rows], orientation="h",
        text=[f"{row.median_ms:.2f} ms" for row in rows], textposition="auto",
        hovertemplate="%{y}<br>median %{x:.3f} ms<extra></extra>",
    ))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title={"text": f"median forward time ({results['about']})"},
                      xaxis_title="milliseconds (lower is faster)", height=360, margin={"l": 10, "r": 10, "t": 60})
    st.plotly_chart(fig, config=ui.plotly_config("attnviz-benchmark"))
    fastest = min(row.median_ms for row in rows)
    st.dataframe(pd.DataFrame({
        "implementation": [row.name for row in rows],
        "median ms": [round(row.median_ms, 3) for row in rows],
        "× fastest": [round(row.median_ms / fastest, 2) for row in rows],
        "all times ms": [", ".join(f"{t:.2f}" for t in row.times_ms) for row in rows],
    }), hide_index=True)
else:
    st.caption("Nothing is timed until you press Run benchmark.")
