"""Steps: one head through QKᵀ → ÷√dₖ → mask → softmax → dropout → ·V, before/after, next to the
live shape diagram with the viewed stage highlighted; the bonus variants' latent, rotation and K/V repeat first."""

import streamlit as st

from attnviz import ui
from attnviz.stats import row_entropy
from attnviz.views import figures, source, steps

PAIR_WIDTH = 330  # px: a map with its labels and colour bar; two fit beside the diagram at 1,400 px, one at 1,100

ctx = ui.setup(draws_link=True)  # after its head, stage and window are bound
if ctx is None:
    st.stop()
trace, config = ctx.trace, ctx.trace.config

st.title("Attention step by step")
st.caption(ui.weights_caption(ctx) + (" · the attention reads norm1(the block's input), the LayerNorm'd residual stream"
                                      if ctx.checkpoint else ""))
labels = steps.stage_labels(trace)
ui.within_layer_from_url("steps", trace, labels, "masked")  # a session's first visit: the link's head, stage, window
stage = st.segmented_control(
    "Stage", list(labels), format_func=labels.get,
    **ui.page_bind("steps_stage", "masked", lambda s: s in labels, url=ui.STAGE)
) or "masked"
ui.url_notices("steps_stage")

view_col = ui.beside_shape_diagram(trace, highlight=stage)

with view_col:
    ui.url_notices("steps_focus", "steps_row0", "steps_col0")
    head = ui.head_selector("steps_focus", trace.num_heads)
    row0, col0, size = ui.window_selector("steps", trace.n, overview=False)
    ui.share_link(ctx.link)  # now that the URL holds the head, stage and window this run draws
    step = steps.step_text(config, stage, trace.module_run)
    st.markdown(f"**{step['what']}**")
    st.code(step["code"], language="python")

    def crop(name):
        return trace.attention_map(name, head)[row0 : row0 + size, col0 : col0 + size]

    dropout = config.effective_dropout  # the colour scale of kept, rescaled weights

    def shared(*names):
        """One colour range for a before/after pair of score maps, so equal values look equal."""
        return figures.shared_range([crop(name) for name in names])

    def heatmap(name, title, **extra):
        fig = figures.attention_heatmap(crop(name) if isinstance(name, str) else name, trace.tokens,
                                        extra.pop("as_stage", name), causal=config.causal, dropout=dropout,
                                        title=title, row_offset=row0, col_offset=col0, height=430, **extra)
        st.plotly_chart(fig, config=ui.plotly_config(f"attnviz-head{head}-{title.split()[0]}"))

    def pair():
        """Two places for a before/after pair: side by side where two maps fit, one above the other on a narrow
        page (two columns of a narrow page leave each map's cells too narrow a strip to read)."""
        row = st.container(horizontal=True, gap="medium")
        return row.container(width=PAIR_WIDTH), row.container(width=PAIR_WIDTH)

    before, after = pair()
    if stage == "latent":
        st.caption(f"latent: `{steps.shape_of(trace, 'latent')}` — {config.latent_width} numbers per token, where "
                   f"multi-head attention caches keys and values: 2 × d_out = {2 * config.d_out}.")
        st.code("\n".join(filter(None, (source.stage_code(config.variant, name) for name in ("keys", "values")))),
                language="python")  # the up-projections from the latent
        st.dataframe(steps.latent_table(trace), height=300)
    elif stage == "rotated_queries":
        q_table, k_table = steps.rotation_tables(trace, head)
        st.caption(f"RoPE base {config.rope_base:,}; head {head} uses K/V head {config.kv_group(head)}. Position 0 "
                   "is not turned; later positions turn further.")
        st.dataframe(q_table)  # the page's width: a map's card cut the numbers of its columns
        st.dataframe(k_table)
    elif stage == "kv_repeat":
        st.caption(f"{config.kv_groups} K/V heads for {config.heads} query heads: groups of {config.group_size}.")
        st.dataframe(steps.group_table(config), hide_index=True, height=300)
    elif stage == "scores":
        with before:
            st.dataframe(steps.qk_table(trace, head), height=430)
        with after:
            heatmap("scores", "scores = Q·Kᵀ (before scaling)")
    elif stage == "scaled":
        st.caption("Both panels use the same colour scale: the division shrinks every score toward 0.")
        with before:
            heatmap("scores", "before: scores", zrange=shared("scores"))
        with after:
            heatmap("scaled", f"after: scores ÷ √{config.head_dim}", zrange=shared("scores"))
        # softmax of what the model saw, with and without the division
        with_scale, without_scale = steps.softmax_with_and_without_scaling(crop("scores"), crop("masked"))
        st.markdown("**Softmax with vs without ÷√dₖ** — without it, large dₖ pushes softmax toward one-hot "
                    "(saturation: low entropy, tiny gradients).")
        left, right = pair()
        with left:
            heatmap(with_scale, "softmax(scores ÷ √dₖ)", as_stage="weights")
        with right:
            heatmap(without_scale, "softmax(scores) — no scaling", as_stage="weights")
        st.plotly_chart(figures.entropy_bars(trace.tokens[row0:], row_entropy(with_scale), row_entropy(without_scale)),
                        config=ui.plotly_config("attnviz-entropy"))
    elif stage == "masked":
        if not config.causal:
            st.info("The causal mask is off: masked = scaled, every token sees every other token.")
        with before:
            heatmap("scaled", "before: scaled scores", zrange=shared("scaled"))
        with after:
            heatmap("masked", "after: masked (grey = −∞)" if config.window is None
                    else f"after: window W = {config.window} (grey = −∞)", zrange=shared("scaled"))
    elif stage == "weights":
        with before:
            heatmap("masked", "before: masked scores")
        with after:
            heatmap("weights", "after: softmax — each row sums to 1")
    elif stage == "dropped":
        if not config.dropout_runs:
            st.info(steps.dropout_off_reason(config))
        dropped_range = (0.0, 1.0 / (1.0 - dropout))  # both on 0…1/(1−p): a doubled weight looks brighter
        with before:
            heatmap("weights", "before: weights", zrange=dropped_range)
        with after:
            heatmap("dropped", f"after: dropout (p = {config.dropout:g})" if config.dropout_runs
                    else "after: dropout off — unchanged", zrange=dropped_range)
        if config.dropout_runs:
            st.caption(f"Kept weights are multiplied by 1/(1−p) = {1 / (1 - config.dropout):.4f}; "
                       f"dropped ones are exactly 0.")
        st.plotly_chart(figures.difference_heatmap(crop("dropped"), crop("weights"), trace.tokens,
                                                   title="difference: dropped − weights", row_offset=row0,
                                                   col_offset=col0),
                        config=ui.plotly_config("attnviz-dropout-difference"))
    else:
        with before:
            heatmap("dropped", "attention weights used")
        with after:
            st.markdown(f"context = weights @ values: `{steps.shape_of(trace, 'context')}`  \n"
                        f"output: `{steps.shape_of(trace, 'output')}`")
            st.dataframe(steps.context_table(trace, head), height=300)
        st.markdown(f"**Output of the module** `{steps.shape_of(trace, 'output')}`"
                    + (" (after `out_proj`)" if config.spec.out_proj else ""))
        st.dataframe(steps.vector_table(trace, trace.output[0], "output vector"), height=300)

run = trace.module_run  # a user's module: its own source
with st.expander(f"Source of {run.class_name if run else source.CLASSES[config.variant].__name__} — read from the "
                 "running module", expanded=run is not None):
    code, line = source.module_marked_source(run, stage) if run else source.marked_source(config.variant, stage)
    st.caption(source.line_caption(line, run))
    st.code(code, language="python", line_numbers=run is None)  # the gutter counts from 1, not from the file's line
