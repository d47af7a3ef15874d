"""The focused head, set by a selection: a click on a tile of the thumbnail grid or a selected row of a table with a
row per head.  Both are ``on_select`` callbacks, so the head is set before the rerun draws the focused head's
selectbox, and the URL's ``head`` follows it as it follows the selectbox (the Share link drawn by that rerun too)."""

from __future__ import annotations

import streamlit as st

from attnviz.ui.state import set_page_widget
from attnviz.urlstate import HEAD


def focus_from_grid(num_heads: int, chart_key: str = "heads_grid", key: str = "heads_focus") -> None:
    """``on_select`` of the thumbnail grid: the clicked tile's head (its invisible overlay's ``customdata``) is
    focused before the rerun draws the focused head's selectbox."""
    points = st.session_state[chart_key].selection.get("points", []) if chart_key in st.session_state else []
    head = points[0].get("customdata") if points else None
    if isinstance(head, list):
        head = head[0] if head else None
    if isinstance(head, int | float) and not isinstance(head, bool):
        _set_focus(key, int(head), num_heads)


def focus_from_row(table_key: str, heads: list[int], key: str = "heads_focus") -> None:
    """``on_select`` of a table with a row per head: the selected row's head is focused before the rerun draws the
    focused head's selectbox (``heads``: each row's head; Streamlit reports a row by its position in the data,
    whatever order the user sorted it into)."""
    rows = st.session_state[table_key].selection.get("rows", []) if table_key in st.session_state else []
    if rows and isinstance(rows[0], int) and 0 <= rows[0] < len(heads):
        _set_focus(key, heads[rows[0]], len(heads))


def _set_focus(key: str, head: int, num_heads: int) -> bool:
    """Focus ``head`` if it is one of this run's heads, with the URL's ``head``; True if it is."""
    if not 0 <= head < num_heads:
        return False
    set_page_widget(key, head, HEAD, 0)  # head 0: the page's default, as page_bind's
    return True
