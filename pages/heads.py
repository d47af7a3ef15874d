"""Heads: every head as a thumbnail, one focused head at full resolution, the shape diagram beside."""

import streamlit as st

from attnviz import ui
from attnviz.attention import MAP_STAGES
from attnviz.ui import head_labels, module_check
from attnviz.views import figures

ctx = ui.setup("Heads", layer_views=True)
if ctx is None:
    st.stop()

st.title("Attention heads")


def layer_views(ctx: ui.Context) -> None:
    """What depends on the layer: a new layer reruns only this (``ui.by_layer``, a fragment)."""
    trace, config = ctx.trace, ctx.trace.config
    st.caption(f"{ui.weights_caption(ctx)} · {'causal mask' if config.causal else 'no mask'} · {trace.n} tokens · "
               f"device {trace.device}")

    stage = st.segmented_control(
        "Show", MAP_STAGES, format_func=figures.MAP_TITLES.get, **ui.page_bind("heads_stage", "weights")
    ) or "weights"

    grid_col = ui.beside_shape_diagram(trace, highlight=stage)
    with grid_col:
        click = ui.chart(ui.heads_grid_figure(ctx, stage), key="heads_grid", clicks=True,
                         config=ui.plotly_config("attnviz-heads"))  # kept on the page: a new layer or text updates it
        ui.focus_from_click(click, trace.num_heads)

    ui.focused_head(ctx.key, stage)  # a fragment: moving the focus redraws only this part (and, with a model, its knock-out)
    module_check.check_panel(ctx)  # a user's module: the rules on its code

    st.subheader("Head statistics")
    st.caption("Computed from the attention weights of every head; each bar spans the range the statistic can "
               "take for this many tokens (hover a header for it). Click a row to focus that head; click a column "
               "header to sort.")
    picked = st.dataframe(ui.head_stats_table(ctx), on_select="rerun", selection_mode="single-row", key="heads_stats",
                          column_config=ui.stats_column_config(trace.n), hide_index=True, height="content")
    ui.focus_from_row(picked, trace.num_heads)
    head_labels.section(ctx)  # each head's type, its first-token mass; every layer's scores for a checkpoint

    if ctx.checkpoint:
        every_layer_scores = ui.layers_overview(ctx)  # opt-in: one more pass, one layer's maps at a time
        if every_layer_scores is not None:
            head_labels.every_layer(every_layer_scores)
        ui.prefetch_next_layer(ctx, stage)  # stepping to the next layer: what it draws is computed while this one is read


ui.by_layer(ctx, layer_views)
if ctx.checkpoint:
    ui.next_token_panel(ctx)  # the model's output: the same for every layer, so outside the layer's fragment
