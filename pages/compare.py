"""Compare: the same tokens through all six variants side by side, equivalences measured live, and
why the scores are divided by √dₖ."""

import dataclasses

import streamlit as st

from attnviz import ablation, compare, ui
from attnviz.pipeline import AttentionConfig

ctx = ui.setup("Compare variants")
if ctx is None:
    st.stop()
trace, config = ctx.trace, ctx.trace.config
d_out, num_heads = (config.d_out, config.num_heads) if ctx.stale else (ctx.settings["d_out"], ctx.settings["num_heads"])
base = compare.base_config(config, d_out, num_heads)


@st.cache_resource(max_entries=4, ttl=3600, show_spinner=False)
def comparison(text: str, config_values: tuple, _trace) -> compare.Comparison:
    return compare.compare_trace(_trace, AttentionConfig(*config_values))


@st.cache_resource(max_entries=8, ttl=3600, show_spinner=False)
def scaling(text: str, config_values: tuple, _trace) -> tuple[dict, dict]:
    queries, keys = ablation.trace_qk(_trace, head=0, max_tokens=compare.MAX_TOKENS)
    causal, seed = _trace.config.causal, _trace.config.seed
    random_qk = ablation.scaling_ablation(num_tokens=len(queries), seed=seed, causal=causal)
    return random_qk, ablation.run_point(queries, keys, causal=causal, head=0)


with st.spinner("Running every variant…"):
    result = comparison(trace.text, dataclasses.astuple(base), trace)

st.title("Compare variants")
st.caption(f"{result.n} tokens · the same input embeddings and seed {base.seed} for every variant · eval mode "
           f"(dropout off) · CPU · {compare.heads_text(base.num_heads)} of {base.d_out // base.num_heads} for the multi-head ones")
if result.truncated:
    st.info(f"This run has {result.total_tokens:,} tokens; this page compares the first {result.n} "
            "to keep the cost down.", icon="✂️")

st.subheader("Equivalences, computed now")
for column, check in zip(st.columns(3), result.checks):
    with column.container(border=True):
        st.markdown(f"**{check.title}**")
        st.badge(check.badge, icon=check.icon, color=check.color)
        st.caption(compare.CHECK_NOTES[check.key])
        if check.key == "wrapper_mha":
            with st.expander("Why the raw outputs differ"):
                st.markdown(compare.raw_difference_note(check))

st.subheader("Every variant on the same tokens")
how = st.segmented_control("Heatmap shows", compare.MAP_CHOICES, **ui.page_bind("compare_map", "head 0")) or "head 0"
columns = st.columns(3)
for index, variant in enumerate(result.variants):
    with columns[index % 3]:
        fig = compare.variant_heatmap(variant, result.tokens, how, causal=base.causal, current=config.variant)
        st.plotly_chart(fig, config=ui.plotly_config(f"attnviz-compare-{variant.variant}"))
        st.caption(f"output {variant.output_shape} · {compare.heads_text(variant.heads)}")

st.subheader("Why ÷√dₖ?")
random_qk, run = scaling(trace.text, dataclasses.astuple(config), trace)
st.markdown(ablation.EXPLANATION.format(dk=run["dk"], head=run["head"], variant=ui.variant_label(config)))
st.plotly_chart(ablation.scaling_ablation_figure(random_qk, run), config=ui.plotly_config("attnviz-scaling-ablation"))
