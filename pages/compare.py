"""Compare: the same tokens through every variant side by side (the book's six and the bonus GQA, MQA, MLA, SWA),
the equivalences between implementations (wrapper and MHA, MHA and SDPA, …) measured live, and why the
scores are divided by √dₖ."""

import dataclasses

import streamlit as st

from attnviz import ui, variants
from attnviz.labs import compare
from attnviz.tokens import counted
from attnviz.ui import compute, lab_selectors
from attnviz.views import saturation

page_run = ui.setup()
if page_run is None:
    st.stop()
trace, config = page_run.trace, page_run.trace.config
d_out, num_heads = ((config.d_out, config.num_heads) if page_run.stale
                    else (page_run.settings["d_out"], page_run.settings["num_heads"]))
base = compare.base_config(config, d_out, num_heads)


with st.spinner("Running every variant…"):
    result = compute.comparison(page_run.trace_key, dataclasses.astuple(base))

st.title("Compare variants")
st.caption(f"{counted(result.n)} · {compare.seeds_caption(result)} · eval mode (dropout off) · CPU · "
           f"{compare.heads_caption(result)}")
if result.truncated:
    st.info(f"This run has {result.total_tokens:,} tokens; this page compares the first {result.n} "
            "to keep the cost down.", icon="✂️")

st.subheader("Equivalences, computed now")
for index, check in enumerate(result.checks):
    if index % 3 == 0:
        columns = st.columns(3)
    with columns[index % 3].container(border=True):
        st.markdown(f"**{check.title}**")
        st.badge(check.badge, icon=check.icon, color=check.color)
        st.caption(compare.CHECK_NOTES[check.key])
        if check.key == "wrapper_mha":
            with st.expander("Why the raw outputs differ"):
                st.markdown(compare.raw_difference_note(check))

if trace.module_run is not None:  # the user's module beside the book's MultiHeadAttention on the same embeddings
    st.subheader(f"{trace.module_run.class_name} beside the book's MultiHeadAttention")
    st.caption("The same tokens and input embeddings; each with its own seeded weights, so the maps differ in "
               "values — compare the mask, how peaked the rows are, the shapes.")
    mine, book = st.columns(2)
    with mine:
        st.plotly_chart(compare.module_heatmap(trace, how="head 0"), config=ui.plotly_config("attnviz-compare-module"))
    with book:
        mha = next(v for v in result.variants if v.variant == variants.MHA)
        st.plotly_chart(compare.variant_heatmap(mha, result.tokens, "head 0", causal=base.causal, width=None),
                        config=ui.plotly_config("attnviz-compare-mha"))
    st.dataframe(compare.module_vs_mha_rows(trace, mha), hide_index=True)

if config.rotary:
    st.caption("Rotary positions: the input embeddings have no learned positions, so the classes without rotation "
               "(3.3–3.6.1, MLA) see no position information here.")
st.subheader("Every variant on the same tokens")
how = lab_selectors.heatmap_choice()
st.caption(compare.SCALE_NOTE)
ui.share_link(page_run.link)  # now that the URL holds the map this run draws
with st.container(horizontal=True, gap="medium"):  # as many maps a row as fit: one on a phone, three or more wide
    for variant in result.variants:
        with st.container(width=compare.MAP_WIDTH):
            causal = variant.config.causal  # the sidebar's, or at the book's toy example its listing's
            fig = compare.variant_heatmap(variant, result.tokens, how, causal=causal, current=config.variant)
            st.plotly_chart(fig, config=ui.plotly_config(f"attnviz-compare-{variant.variant}"))
            st.caption(compare.variant_caption(variant, causal=causal, seed=result.book_listing))

st.subheader("Why ÷√dₖ?")
random_qk, run, no_run = compute.scaling(page_run.trace_key)
if run is None:
    st.markdown(saturation.EXPLANATION.split(" ★:")[0])
    st.caption(saturation.NO_RUN.format(why=no_run))
else:
    st.markdown(saturation.EXPLANATION.format(dk=run["dk"], head=run["head"], variant=ui.variant_label(config)))
st.plotly_chart(saturation.scaling_ablation_figure(random_qk, run),
                config=ui.plotly_config("attnviz-scaling-ablation"))
