"""What a selection on the focused head's map explains: one clicked cell's weight taken apart (q_i · k_j per
dimension, ÷ the scale, the softmax over its row; ``attnviz.explain_weight``), or several cells — a box or lasso
on the map, or tokens picked by name — summed (the selected queries' attention per key, what each query gives the
selected keys; ``attnviz.explain.attention_sums``)."""

from __future__ import annotations

import streamlit as st

from attnviz.explain import ExplainError, WeightExplanation, attention_sums, explain_weight, hidden_among
from attnviz.trace import Trace
from attnviz.ui.frame import plotly_config
from attnviz.ui.share import file_name, layer_part
from attnviz.views import explain_figures
from attnviz.words import amount, markdown_escape


def selected_cells(event, n: int) -> list[tuple[int, int]]:
    """The (query, key) cells of a map selection (``st.plotly_chart``'s event: its overlay's points, x = key and
    y = query), in order, without repeats; points outside an n-token map (a stale selection) are dropped."""
    cells: dict[tuple[int, int], None] = {}
    for point in (event or {}).get("selection", {}).get("points", []):
        x, y = point.get("x"), point.get("y")
        if isinstance(x, int | float) and isinstance(y, int | float) and 0 <= y < n and 0 <= x < n:
            cells[(int(y), int(x))] = None
    return list(cells)


def _file_name(trace: Trace, head: int, *parts: str) -> str:
    """A chart's download name, in the Heads page's scheme: ``attnviz-heads[-layer1]-head5-q3-k1-products``."""
    return file_name("attnviz-heads", layer_part(trace.config), f"head{head}", *parts)


def _position(tokens: tuple[str, ...]):
    return lambda position: f"{position}: {tokens[position]}"


PICKS = ("heads_pick_queries", "heads_pick_keys")  # the pickers' widget keys
PICKED_ON = "heads_pick_tokens"  # the tokens the picks were made on


def token_picker(trace: Trace, on_pick=None) -> tuple[list[int], list[int]] | None:
    """The expander of tokens picked by name: the query and key positions chosen there while it is open, or None.
    ``on_pick``: the pickers' ``on_change`` (the Heads page's: picks replace the map's selection).

    Picks belong to the tokens they were made on: a new text empties both pickers before they are drawn, so that a
    picker never shows (nor sums) a position by a piece the text no longer has."""
    if st.session_state.get(PICKED_ON) != trace.tokens:
        clear_picks()
        st.session_state[PICKED_ON] = trace.tokens
    with st.expander("Sum attention over tokens picked by name", key="heads_pick", on_change="rerun") as picker:
        if picker.open:
            queries = st.multiselect("Query tokens", range(trace.n), format_func=_position(trace.tokens),
                                     key=PICKS[0], max_selections=trace.n, on_change=on_pick)
            keys = st.multiselect("Key tokens", range(trace.n), format_func=_position(trace.tokens),
                                  key=PICKS[1], max_selections=trace.n, on_change=on_pick)
            if queries or keys:
                return list(queries), list(keys)
    return None


def clear_picks() -> None:
    """Both pickers empty (before they are drawn, or in a callback)."""
    for key in PICKS:
        st.session_state[key] = []


def explain(trace: Trace, head: int, cells: list[tuple[int, int]],
            picked: tuple[list[int], list[int]] | None) -> WeightExplanation | None:
    """Tokens picked by name summed, else one selected cell explained (its summary and products chart; the
    explanation is returned for :func:`row_chart`), several summed, or how to select."""
    if picked is not None:
        _sums(trace, head, *picked)
    elif len(cells) == 1:
        return _one_cell(trace, head, *cells[0])
    elif len(cells) > 1:
        _sums(trace, head, sorted({q for q, _ in cells}), sorted({k for _, k in cells}))
        if hidden_among(trace, head, cells).all():
            st.caption(f"Every one of the {len(cells)} selected cells is masked — a key hidden from its query — so "
                       "each has weight 0: what these queries give these keys is 0. The bars above show where the "
                       "selected queries look instead.")
    else:
        st.markdown("**Why this weight?**")
        st.caption("Click a cell of the map: its query · key product is taken apart dimension by dimension, "
                   "scaled, and pushed through the softmax of its row. Select several cells with the box or lasso "
                   "(modebar) to sum the attention of those queries and keys.")
    return None


def _one_cell(trace: Trace, head: int, query: int, key: int) -> WeightExplanation | None:
    try:
        why = explain_weight(trace, head, query, key)
    except ExplainError as exc:
        st.info(markdown_escape(str(exc)), icon=":material/info:")
        return None
    st.markdown(f"**Why head {head} gives “{markdown_escape(why.query_token)}” → “{markdown_escape(why.key_token)}”"
                f" (query {query}, key {key}) its weight**")
    if why.masked:
        st.warning(markdown_escape(why.reason or "The mask hides this key."), icon=":material/block:")
    taken = f" → the softmax takes **{why.masked_score:.4f}**" if why.input_changed and not why.masked else ""
    st.markdown(f"score q·k = Σ products = **{why.score:.4f}** · {markdown_escape(why.scaling)} → scaled "
                f"**{why.scaled:.4f}**{taken} · softmax over row {query} → weight **{why.weight:.4f}**")
    for note in why.notes:  # what stands in for q and k (the class without W_query or W_key): the chart's subtitle
        if note:
            st.caption(markdown_escape(note))
    st.plotly_chart(explain_figures.products_figure(why),
                    config=plotly_config(_file_name(trace, head, f"q{query}", f"k{key}", "products")))
    return why


def row_chart(trace: Trace, why: WeightExplanation | None) -> None:
    """The explained cell's row: its scaled scores and their softmax (nothing when no one cell is explained)."""
    if why is not None:
        st.plotly_chart(explain_figures.row_softmax_figure(why, trace.tokens),
                        config=plotly_config(_file_name(trace, why.head, f"row{why.query}")))


def _sums(trace: Trace, head: int, queries: list[int], keys: list[int]) -> None:
    try:
        sums = attention_sums(trace, head, queries=queries or None, keys=keys or None)
    except ExplainError as exc:
        st.info(markdown_escape(str(exc)), icon=":material/info:")
        return
    st.markdown(f"**{amount(len(sums.queries), 'query', 'queries')}, {amount(len(sums.keys), 'key')} selected** "
                f"(head {head})")
    st.plotly_chart(explain_figures.summed_attention_figure(sums, trace.tokens),
                    config=plotly_config(_file_name(trace, head, "sums")))
