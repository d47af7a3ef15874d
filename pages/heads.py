"""Heads: every head as a thumbnail, one focused head at full resolution, the shape diagram beside."""

import streamlit as st

from attnviz import figures, stats, ui
from attnviz.attention import MAP_STAGES

ctx = ui.setup("Heads")
if ctx is None:
    st.stop()
trace, config = ctx.trace, ctx.trace.config

st.title("Attention heads")
st.caption(f"{ui.variant_label(config)} · {trace.n} tokens · device {trace.device}")

stage = st.segmented_control(
    "Show", MAP_STAGES, format_func=figures.MAP_TITLES.get, **ui.page_bind("heads_stage", "weights")
) or "weights"

grid_col = ui.beside_shape_diagram(trace, highlight=stage)
with grid_col:
    event = st.plotly_chart(ui.heads_grid_figure(ctx, stage), key="heads_grid", on_select="rerun",
                            selection_mode="points", config=ui.plotly_config("attnviz-heads"))
    ui.focus_from_click(event, trace.num_heads)


@st.fragment
def focused_head():
    head = ui.head_selector("heads_focus", trace.num_heads)
    row0, col0, size = ui.window_selector("heads", trace.n)
    matrix = trace.attention_map(stage, head)
    window = matrix[row0 : row0 + size, col0 : col0 + size]
    fig = figures.attention_heatmap(
        window, trace.tokens, stage, causal=config.causal, dropout=config.active_dropout,
        title=f"head {head}: {figures.MAP_TITLES[stage]}", row_offset=row0, col_offset=col0,
    )
    if size < trace.n:
        overview_col, window_col = st.columns([1, 2])
        overview_col.plotly_chart(
            figures.overview_heatmap(matrix, stage, causal=config.causal, dropout=config.active_dropout,
                                     window=(row0, col0, size)),
            config=ui.plotly_config(f"attnviz-head{head}-overview"),
        )
        window_col.plotly_chart(fig, config=ui.plotly_config(f"attnviz-head{head}-{stage}"))
    else:
        st.plotly_chart(fig, config=ui.plotly_config(f"attnviz-head{head}-{stage}"))
    ui.download_head_csv(trace, head, stage)


focused_head()

st.subheader("Head statistics")
st.caption("Computed from the attention weights of every head. Click a row to focus that head; click a "
           "column header to sort.")
table = ui.head_stats_table(ctx)
metric = st.selectbox("Bar chart of", list(stats.STATS), **ui.page_bind("heads_metric", "entropy"))
stats_col, bars_col = st.columns([3, 2])
with stats_col:
    picked = st.dataframe(table, on_select="rerun", selection_mode="single-row", key="heads_stats",
                          column_config=ui.stats_column_config(), hide_index=True)
    ui.focus_from_row(picked, trace.num_heads)
with bars_col:
    st.plotly_chart(figures.head_stat_bars(table["head"].to_numpy(), table[metric].to_numpy(), metric,
                                           stats.STATS[metric]), config=ui.plotly_config(f"attnviz-head-{metric}"))
