"""The Heads page's views of one layer: the caption, the stage, the thumbnail grid beside the shape diagram, the
focused head, a user module's Check panel (none on the last valid view kept under a message: its verdict would read
as one on the settings that failed), the head statistics and types and, for a checkpoint, every layer's heads and
the next layer computed ahead.  ``pages/heads.py`` draws them with ``ui.draw_layer_views`` (a fragment)."""

from __future__ import annotations

import functools

import streamlit as st

from attnviz.attention import MAP_STAGES
from attnviz.tokens import counted
from attnviz.ui import head_labels, module_check
from attnviz.ui.checkpoint import layers_overview
from attnviz.ui.focus import focus_from_grid, focus_from_row
from attnviz.ui.frame import (
    Context,
    beside_shape_diagram,
    book_listing_note,
    plotly_config,
    weights_caption,
)
from attnviz.ui.heads import (
    focused_head,
    head_selector,
    head_stats_table,
    heads_grid_figure,
    prefetch_next_layer,
    stats_columns,
    within_layer_from_url,
)
from attnviz.ui.share import file_name, layer_part
from attnviz.ui.state import page_bind, url_notices
from attnviz.urlstate import STAGE
from attnviz.words import markdown_escape


def draw(page_run: Context) -> None:
    """Everything on the Heads page that depends on the layer: a new layer reruns only this."""
    from attnviz.views import steps

    trace, config = page_run.trace, page_run.trace.config
    # the shown layer's own mask: a checkpoint's schedule may mix window and full layers
    mask = (f"sliding-window mask (W = {trace.window})" if trace.window is not None
            else "causal mask" if trace.hides_future else steps.LEAK_CAPTION if trace.leaks_future else "no mask")
    st.caption(f"{weights_caption(page_run)} · {mask} · {counted(trace.n)} · device {trace.device}")
    book_listing_note(config)  # a 3.3/3.4 class masked by the sidebar: the mask is attnviz's, not the book's

    within_layer_from_url("heads", trace, MAP_STAGES, "weights")  # a session's first visit: the link's
    titles = {name: steps.stage_title(trace, name) for name in MAP_STAGES}  # format_func keeps no trace
    stage = st.segmented_control(
        "Show", MAP_STAGES, format_func=titles.get,
        help="The stages of the attention, as this run computed them: a step that did nothing here says so (the "
             "causal mask off: masked = scaled; dropout off — eval mode, p = 0, or none in this class: dropped = "
             "weights).",
        **page_bind("heads_stage", "weights", url=STAGE)
    ) or "weights"
    url_notices("heads_stage")

    grid_col = beside_shape_diagram(trace, highlight=stage)
    with grid_col:
        st.plotly_chart(heads_grid_figure(page_run, stage), key="heads_grid", selection_mode="points", width="content",
                        on_select=functools.partial(focus_from_grid, trace.num_heads),
                        config=plotly_config(file_name("attnviz-heads", layer_part(config), "grid", stage)))

    url_notices("heads_focus")
    head = head_selector("heads_focus", trace.num_heads, config.head_label)  # the grid marks it
    # a fragment: moving the window or selecting cells redraws only this part (and, with a model, its knock-out)
    focused_head(page_run.trace_key, stage, head, page_run.link)
    # a user's module: the rules on its code, drawn here after the rest (it can be slow); the book's classes: nothing
    check_slot = st.container() if trace.module_run is not None and not page_run.stale else None
    if trace.module_run is not None and page_run.stale:  # under the message of settings that cannot run
        st.caption(f":material/info: The last valid view's module, {markdown_escape(trace.module_run.class_name)}, "
                   "is not checked here: its verdict would read as one on the settings chosen now.")

    st.subheader("Head statistics")
    st.caption("Computed from the attention weights of every head; each bar spans the range the statistic can "
               "take for this many tokens (hover a header for it). Select a row to focus that head; click a column "
               "header to sort; search and CSV download are in the table's toolbar.")
    stats = head_stats_table(page_run)
    st.dataframe(stats, key="heads_stats", column_config=stats_columns(trace.n), hide_index=True,
                 on_select=functools.partial(focus_from_row, "heads_stats", list(stats["head"])),
                 selection_mode="single-row")
    head_labels.section(page_run)  # each head's type, its first-token mass; every layer's scores for a checkpoint

    if page_run.checkpoint:
        every_layer_scores = layers_overview(page_run)  # opt-in: one more pass, one layer's maps at a time
        if every_layer_scores is not None:
            head_labels.every_layer(every_layer_scores, page_run.trace)
        # stepping to the next layer: what it draws is computed while this one is read
        prefetch_next_layer(page_run, stage)
    if check_slot is not None:
        module_check.check_panel(page_run.trace, check_slot)
