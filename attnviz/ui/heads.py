"""The Heads page's widgets: the thumbnail grid (pooled once per input) with the focused head marked, the head
statistics table and its columns (a bar per cell), the focused head (a fragment) with its window sliders, its map's
cell selections and what they explain, and the next layer computed ahead.  A click on the grid or a table row sets
the focused head in :mod:`attnviz.ui.focus`.  The focused head, the stage and the window follow the URL (``head``,
``stage``, ``row``, ``col``; the Steps page's too): read on a session's first visit of the page
(:func:`within_layer_from_url`), written with the values a run draws; so does the cell clicked on the focused map
(``cell``), which a link or a reload explains again."""

from __future__ import annotations

import functools

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from attnviz.background import after_the_browser_draws, yield_to_pages
from attnviz.config import AttentionConfig
from attnviz.ui.cache import cached_trace, prefetch_trace, trace_key, trace_of
from attnviz.ui.frame import Context, plotly_config
from attnviz.ui.share import download_head_csv, file_name, layer_part, share_link
from attnviz.ui.state import (
    forget_page_params,
    page_bind,
    page_param_notice,
    page_widgets_from_url,
    set_page_param,
    took_outside,
    took_page_param,
    url_notices,
)
from attnviz.urlstate import (
    CELL,
    COL,
    HEAD,
    ROW,
    STAGE,
    cell_text,
    ignored,
    parse_cell,
    parse_head,
    parse_stage,
    parse_window_start,
    url_text,
)
from attnviz.words import amount

WINDOW = 256  # largest side drawn at full resolution (every cell hoverable)


@st.cache_resource(max_entries=32, ttl=3600, show_spinner=False)
def _grid_figure(text: str, config: AttentionConfig, stage: str):
    from attnviz.views import figures, steps

    trace = cached_trace(text, config)
    config = trace.config
    # as many tiles a row as a narrow window leaves each as wide as its title; heads that share K/V heads side by side
    labels = [grid_label(config, head) for head in range(trace.num_heads)]
    return figures.heads_grid(trace.steps[stage][0], stage, causal=trace.hides_future,
                              dropout=config.effective_dropout,
                              group=config.group_size,
                              hidden=trace.hidden_cells(), window=trace.window,
                              stage_title=steps.stage_title(trace, stage), labels=labels)


def grid_label(config, head: int) -> str:
    """A thumbnail's title: ``head 5``, with its K/V group on a second line where heads share K/V heads
    (``head 5<br>K/V 1``: on one line it is wider than a tile of a narrow page)."""
    return f"head {head}" if config.kv_groups == config.heads else f"head {head}<br>K/V {config.kv_group(head)}"


def heads_grid_figure(page_run: Context, stage: str):
    """The thumbnail grid of all heads, pooled once per input (cached), the focused head marked (head 0 when the
    session's focused head is not one of this run's heads: fewer heads than when it was picked)."""
    from attnviz.views import figures

    grid = _grid_figure(*page_run.trace_key, stage)
    page_bind("heads_focus", 0, _is_head(page_run.trace.num_heads))  # the selectbox's fallback, applied before the grid
    return figures.mark_focus(grid, st.session_state["heads_focus"])


@st.cache_resource(max_entries=16, ttl=3600, show_spinner=False)
def _head_stats(text: str, config: AttentionConfig):
    import pandas as pd

    from attnviz import stats

    trace = cached_trace(text, config)
    table = pd.DataFrame(stats.head_statistics(trace.steps["weights"][0], causal=trace.hides_future))
    table.insert(0, "head", range(len(table)))
    return table


def head_stats_table(page_run: Context):
    """Per-head statistics of the weights (cached with the trace)."""
    return _head_stats(*page_run.trace_key)


STAT_COLUMN_PX = 115  # six statistics and the head beside each other in the page's 820 px column: all in view


def stats_columns(n: int) -> dict:
    """``st.dataframe`` column config: each statistic as a bar on the range it can take for ``n`` tokens
    (``stats.stat_range``), its meaning and range in the header's help."""
    from attnviz import stats

    columns = {"head": st.column_config.NumberColumn("head", help="Select a row to focus that head.", width="small")}
    for name, text in stats.STATS.items():
        low, high = stats.stat_range(name, n)
        columns[name] = st.column_config.ProgressColumn(name, help=f"{text}. Bar: {low:g} … {high:.4g}",
                                                        format="%.4f", min_value=float(low), max_value=float(high),
                                                        width=STAT_COLUMN_PX)
    return columns


def prefetch_next_layer(page_run: Context, stage: str) -> bool:
    """With a checkpoint, compute what the Heads page draws of the next layer — its trace, thumbnail grid, head
    statistics and head types — in a background thread, once the browser has drawn this page
    (``background.after_the_browser_draws``): stepping to it is then cache hits.
    Only if that trace fits in the trace cache beside every other input's (``cache.prefetch_trace``).  True when a
    thread started (not for the last layer)."""
    import dataclasses
    import logging
    import threading

    from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx
    from streamlit.runtime.scriptrunner_utils.exceptions import ScriptControlException

    from attnviz.ui import head_labels

    trace = page_run.trace
    if trace.model is None or page_run.stale or trace.model.layer + 1 >= trace.model.n_layers:
        return False
    text = page_run.settings["text"]  # what setup() looks the next layer up by: the sidebar's text and config
    wanted = dataclasses.replace(page_run.config, layer=trace.model.layer + 1)

    def work() -> None:
        after_the_browser_draws()  # this layer first: the browser draws it while the server is idle
        yield_to_pages()  # the script threads come first
        try:
            upcoming = prefetch_trace(text, wanted, trace)  # None: it would evict another input's trace (or this one)
            if upcoming is None:
                return
            key = trace_key(upcoming)  # what the page's caches are keyed by
            _grid_figure(*key, stage)
            _head_stats(*key)
            head_labels._trace_scores(*key)
        except (Exception, ScriptControlException):  # only saves time: the page's own run reports any problem
            logging.getLogger(__name__).debug("prefetching layer %s failed", wanted, exc_info=True)

    thread = threading.Thread(target=work, name="attnviz-prefetch", daemon=True)
    add_script_run_ctx(thread, get_script_run_ctx())
    thread.start()
    return True


def _is_head(num_heads: int):
    """Whether a kept focused head is one of ``num_heads`` (the head count may have shrunk since)."""
    return lambda head: isinstance(head, int) and 0 <= head < num_heads


def head_selector(key: str, num_heads: int, label=lambda head: f"head {head}", why_not: str | None = None) -> int:
    """Focused-head selector (persisted, followed by the URL's ``head``); falls back to head 0 when the head count
    shrinks.  Its box reads ``label(head)`` of this run (a K/V group that another variant drops: ``page_bind``'s
    ``labels``).  ``why_not``: the view shows no head (a stage without a head dimension): the box is disabled, its
    help says why, and it keeps its head, in the URL too, for the views that show one."""
    bind = page_bind(key, 0, _is_head(num_heads), url=HEAD, labels=tuple(label(head) for head in range(num_heads)))
    if num_heads == 1:
        st.caption("One head.")
        return 0
    return st.selectbox("Focused head", list(range(num_heads)), format_func=label, disabled=why_not is not None,
                        help=why_not, **bind)


def window_selector(prefix: str, n: int, overview: bool = True, caption: str | None = None,
                    helps: tuple[str | None, str | None] = (None, None), why_not: str | None = None
                    ) -> tuple[int, int, int]:
    """(row0, col0, size) of the full-resolution window, its sliders followed by the URL's ``row`` and ``col``; the
    whole map when n ≤ WINDOW (the URL then has neither).  A view that uses the window otherwise gives its own
    ``caption`` and the sliders' ``helps``; ``why_not``: the view has no window (a stage without a map): the sliders
    are disabled, their help says why, and they keep their place, in the URL too, for the views that have one."""
    if n <= WINDOW:
        forget_page_params(ROW, COL)
        return 0, 0, n
    last = n - WINDOW
    st.caption(caption or (
        f"{amount(n, 'token')}: the focused view shows a {WINDOW}×{WINDOW} window at full resolution "
        "(every cell hoverable); move it with the sliders." + (" The overview is max-pooled." if overview else "")
    ))
    cols = st.columns(2)
    in_range = lambda value: isinstance(value, int) and 0 <= value <= last  # noqa: E731
    row_help, col_help = (why_not, why_not) if why_not else helps
    row0 = cols[0].slider("First query row", 0, last, disabled=why_not is not None, help=row_help,
                          **page_bind(f"{prefix}_row0", 0, in_range, url=ROW))
    col0 = cols[1].slider("First key column", 0, last, disabled=why_not is not None, help=col_help,
                          **page_bind(f"{prefix}_col0", 0, in_range, url=COL))
    return row0, col0, WINDOW


def within_layer_from_url(prefix: str, trace, stages, default_stage: str) -> None:
    """A session's first visit of the Heads (``prefix`` "heads") or Steps ("steps") page: its focused head, stage
    and window take the URL's ``head``, ``stage``, ``row`` and ``col`` where this run has them (a head of its layer,
    one of the page's ``stages``, a window position on its map); a value it has not is refused with the page's
    notice (:func:`url_notices`), and the page shows its default."""
    window = functools.partial(parse_window_start, n=trace.n, window=WINDOW)
    page_widgets_from_url(prefix, {
        f"{prefix}_focus": (HEAD, functools.partial(parse_head, num_heads=trace.num_heads), "showing head 0"),
        f"{prefix}_stage": (STAGE, functools.partial(parse_stage, stages=tuple(stages)), f"showing {default_stage}"),
        f"{prefix}_row0": (ROW, window, "the window starts at row 0"),
        f"{prefix}_col0": (COL, window, "the window starts at column 0"),
    })


@st.cache_resource(max_entries=8, ttl=3600, show_spinner=False)
def _focused_figures(text: str, config: AttentionConfig, stage: str, head: int, row0: int, col0: int, size: int):
    """The focused head's overview (None when the window is the whole map) and its window's map, built once for a
    click's rerun, which draws them unchanged."""
    from attnviz.views import figures, steps

    trace = cached_trace(text, config)
    config = trace.config
    matrix = trace.attention_map(stage, head)  # (n, n)
    window = matrix[row0 : row0 + size, col0 : col0 + size]  # (size, size)
    hidden = trace.hidden_cells(head)
    fig = figures.attention_heatmap(
        window, trace.tokens, stage, causal=trace.hides_future, dropout=config.effective_dropout,
        title=f"{config.head_label(head)}: {steps.stage_title(trace, stage)}",
        row_offset=row0,
        col_offset=col0,
        validate=False, uirevision=f"{head}-{stage}-{row0}-{col0}", width=figures.FOCUSED_MAP_PX,
        hidden=None if hidden is None else hidden[row0 : row0 + size, col0 : col0 + size],
    )
    if size == trace.n:
        return None, fig
    return figures.overview_heatmap(matrix, stage, causal=trace.hides_future, dropout=config.effective_dropout,
                                    window=(row0, col0, size), validate=False, hidden=hidden), fig


def _map_key(identity: tuple, fresh: bool = False) -> str:
    """The focused map's widget key: the same while the map drawn is the same map (``identity``: trace, head, stage,
    window) run after run, a new one whenever another map is drawn in its place, or the same one afresh (``fresh``: the
    URL gives a cell this page did not write, an entry of the browser's history).

    The browser draws a map that comes back (the weights map after the scores map, a text after another) without the
    selection made on it before, so its widget must hold none either: under its old key it would, since Streamlit
    keeps the state of a widget in this fragment when only the layer's fragment around it reruns."""
    drawn = st.session_state.get("heads_map_drawn")  # (identity, generation) of the map drawn last
    if drawn is None or drawn[0] != identity or fresh:
        drawn = (identity, 0 if drawn is None else drawn[1] + 1)
        st.session_state["heads_map_drawn"] = drawn
    return f"heads_map_{drawn[1]}"


CELL_NOTICE = page_param_notice("heads_cell")  # the page's notice about a link's cell that the map has not


def _cell_from_map(map_key: str, n: int, text_in_url: bool = True) -> None:
    """``on_select`` of the focused map: the URL's ``cell`` is the one cell clicked (none for a box or lasso of several,
    or a selection cleared) before the rerun draws the Share link, so a click is one entry of the browser's history.
    None either where the map's text is too long for the URL (``text_in_url`` False): a link or a reload opens another
    text, and the cell would explain a cell of its map; the session's map keeps its selection.

    A selection of cells is the user's newer choice than tokens picked by name: it empties the pickers, so the panel
    explains the click (as the Share link, which carries the cell and no picks, does) or sums the box."""
    from attnviz.ui import why

    st.session_state.pop(CELL_NOTICE, None)  # the user's own click: the link's refused cell is moot
    cells = why.selected_cells(st.session_state.get(map_key), n)
    if cells:
        why.clear_picks()
    set_page_param(CELL, cell_text(*cells[0]) if len(cells) == 1 and text_in_url else None)


_PICKED = "heads_map_picked"  # tokens were picked by name since the focused map was drawn (_picks_replace_selection)


def _picks_replace_selection() -> None:
    """``on_change`` of the tokens picked by name: they are the user's newer choice than the map's selection, which
    goes — the URL's cell (the Share link would explain a cell the panel no longer does) and the map's own (the map is
    drawn afresh, :func:`_map_key`; only where it holds one, so a pick keeps the zoom of a map without one), so that
    emptying the pickers leaves nothing explained, as the link opens."""
    drawn = st.session_state.get("heads_map_drawn")
    event = st.session_state.get(f"heads_map_{drawn[1]}") if drawn is not None else None
    if (event or {}).get("selection", {}).get("points"):
        st.session_state[_PICKED] = True
    set_page_param(CELL, None)


def _linked_cell(n: int) -> list[tuple[int, int]]:
    """The URL's cell — a link's, a reload's, an entry of the history — as the map's selection would give it: [(query,
    key)], or [] when the URL has none.  A cell this ``n``-token map has not (a link's) is refused with the page's
    notice and leaves the URL; a change of the settings, head, stage or window drops the cell before this reads it."""
    raw = st.query_params.get(CELL)
    if raw is None:
        return []
    try:
        cell = parse_cell(str(raw), n)
    except ValueError as exc:
        st.session_state[CELL_NOTICE] = ignored([(CELL, raw)], f"it {exc}; no cell is explained.")
        set_page_param(CELL, None)
        return []
    took_page_param(CELL)
    return [cell]


@st.fragment
def focused_head(key: tuple, stage: str, head: int, link: DeltaGenerator | None = None) -> None:
    """The Heads page's focused head at full resolution (a window of it when n > WINDOW), with its CSV, and beside
    it what a selection of its cells explains: a clicked cell's weight, the sums over a box or lasso.

    A fragment, so moving the window or selecting cells redraws only this part.  The head is picked outside it
    (:func:`head_selector`, in the layer's views): the grid marks the focused head, so picking one redraws the grid too,
    as a click on a tile does.  It takes the trace's key, not the Trace: Streamlit keeps a fragment (and its
    arguments) for the session's lifetime.

    A click on a cell reruns this fragment with the map unchanged: the explanation is drawn first, from the map's
    selection in the session state, and the map after it, so the browser draws the products chart while the server
    writes the map again.  A selection belongs to the map it was made on: the map's widget key is new whenever
    another map is drawn (:func:`_map_key`), and where the map returns another selection than the session state
    held (its figure changed), the map's own is explained in its place.

    The clicked cell is in the URL (``cell``, written by the map's ``on_select``): a link or a reload explains the
    link's cell on a map that shows no selection yet; a click, a box or a lasso replaces it.  The newer of a selection
    on the map and tokens picked by name is explained, the other dropped: a click, a box, a lasso or a link's cell
    empties the pickers; a pick drops the cell and the map's selection (:func:`_picks_replace_selection`).  So the
    page explains what its Share link opens: the cell clicked, or — picks and boxes are not in the URL — none.

    ``link``: the place of the sidebar's Share link, which this fragment fills once the window and the cell are bound
    (the URL holds them), so that the link a rerun of this fragment alone leaves in the sidebar carries them."""
    from attnviz.ui import why
    from attnviz.views import explain_figures, figures

    trace = trace_of(key)
    url_notices("heads_row0", "heads_col0")
    row0, col0, size = window_selector("heads", trace.n)
    linked = _linked_cell(trace.n)
    url_notices("heads_cell")
    if link is not None:
        share_link(link)
    outside, picked_since = took_outside(CELL), st.session_state.pop(_PICKED, False)
    map_key = _map_key((key, head, stage, row0, col0), fresh=outside or picked_since)
    if outside and linked:  # a link's cell, an entry of the history: newer than the session's picks
        why.clear_picks()
    early = why.selected_cells(st.session_state.get(map_key), trace.n) or linked
    # the panel beside the map where the page has room for both at their widths, else under it (Streamlit wraps a
    # horizontal container's elements): the map keeps its square cells, the panel the width its charts are made for
    row = st.container(horizontal=True)
    map_col, why_col = row.container(width=figures.FOCUSED_MAP_PX), row.container(width=explain_figures.PANEL_PX)
    with why_col:
        picked = why.token_picker(trace, on_pick=_picks_replace_selection)
        slot = st.empty()
        with slot.container():
            explained = why.explain(trace, head, early, picked)
    overview, fig = _focused_figures(*key, stage, head, row0, col0, size)
    filename = file_name("attnviz-heads", layer_part(trace.config), f"head{head}", stage)
    with map_col:
        if overview is not None:
            st.plotly_chart(overview, key="heads_map_overview", config=plotly_config(f"{filename}-overview"))
        on_cell = functools.partial(_cell_from_map, map_key, trace.n, url_text(trace.text) is not None)
        event = st.plotly_chart(fig, key=map_key, on_select=on_cell,
                                selection_mode=("points", "box", "lasso"),
                                config=plotly_config(filename))
        st.caption("Drag to zoom (double-click resets); click a cell to see why it has its weight; "
                   "the modebar's box or lasso selects several cells to sum their attention (a drag inside the last "
                   "box or lasso moves it) — while the box or lasso is picked, a click selects nothing: pick zoom or "
                   "pan to click a cell again.")
        download_head_csv(trace, head, stage, filename)
    cells = why.selected_cells(event, trace.n) or linked
    if cells != early and picked is None:  # the session state's was not the map's: draw the map's own
        with slot.container():
            explained = why.explain(trace, head, cells, picked)
    with why_col:
        why.row_chart(trace, explained)
    if trace.model is not None:  # a model's: knock this head out, … (collapsed; imported here, as the pages do)
        from attnviz.ui import interventions

        interventions.heads_section(trace, head, (row0, col0, size))
