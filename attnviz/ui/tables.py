"""A table that stays on the page between script runs: ``table(frame, key=…, columns=…)`` draws a pandas DataFrame
as a plain HTML table (a Streamlit component, ``js/table.js``), and the next run's data under the same key is drawn
into the same table.  A header click sorts (again: the other way), a column can draw each value as a bar on a fixed
range, a row click calls back into the script, and a toolbar searches the rows and downloads them as CSV.

Why not ``st.dataframe``: its data grid (~90 React components and a canvas each) was re-rendered by the browser
several times per script run; at 1024 tokens the Heads page's two grids were the largest part of the browser's work
after a new text that was not a map (benchmarks/README.md).  A dozen rows need no virtualised grid."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

_JS = Path(__file__).parent / "js"
_CSS = """
.attnviz-table { position: relative; width: fit-content; max-width: 100%; overflow-x: auto; font-size: 14px; }
.attnviz-table > .attnviz-toolbar { display: flex; gap: 4px; justify-content: flex-end; padding-bottom: 2px;
  opacity: 0; transition: opacity 0.2s; }
.attnviz-table:hover > .attnviz-toolbar, .attnviz-table:focus-within > .attnviz-toolbar { opacity: 1; }
.attnviz-table .attnviz-search { font: inherit; font-size: 12px; padding: 1px 6px; width: 10em; color: inherit;
  background: transparent; border: 1px solid rgba(128, 128, 128, 0.35); border-radius: 4px; }
.attnviz-table .attnviz-csv { font: inherit; font-size: 12px; padding: 1px 8px; cursor: pointer; color: inherit;
  background: transparent; border: 1px solid rgba(128, 128, 128, 0.35); border-radius: 4px; }
.attnviz-table table { border-collapse: collapse; color: inherit; margin: 0; }
.attnviz-table th, .attnviz-table td { padding: 4px 10px; border: 1px solid rgba(128, 128, 128, 0.2);
  white-space: nowrap; text-align: left; }
.attnviz-table th { font-weight: 400; opacity: 0.75; cursor: pointer; user-select: none; }
.attnviz-table .attnviz-number { text-align: right; font-variant-numeric: tabular-nums; }
.attnviz-table .attnviz-bar-cell { display: flex; align-items: center; gap: 8px; }
.attnviz-table .attnviz-bar { flex: 1; min-width: 56px; height: 6px; border-radius: 3px;
  background: rgba(128, 128, 128, 0.2); overflow: hidden; }
.attnviz-table .attnviz-bar-fill { height: 100%; background: var(--st-primary-color, #ff4b4b); }
.attnviz-table tr.attnviz-clickable { cursor: pointer; }
.attnviz-table tr.attnviz-clickable:hover, .attnviz-table tr.attnviz-picked { background: rgba(128, 128, 128, 0.12); }
"""
_component = st.components.v2.component(
    "attnviz_table", js=(_JS / "table.js").read_text(encoding="utf-8"), css=_CSS, isolate_styles=False)


@dataclass(frozen=True)
class Column:
    """How one column is drawn: ``digits`` after the point (None: the value as it is), ``bar`` a (low, high) range to
    draw each value as a bar on, ``help`` shown when the pointer is on its header."""

    digits: int | None = None
    bar: tuple[float, float] | None = None
    help: str | None = None


def _value(value):
    """A cell as JSON: integers and finite floats as numbers, a missing or infinite number empty, a flag as its
    word, anything else as its text."""
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value) if math.isfinite(value) else None
    if value is None or value is pd.NA:
        return None
    return str(value)


def payload(frame, columns: dict[str, Column] | None = None, *, clicks: bool = False, csv_name: str = "table.csv") -> dict:
    """What the browser gets for ``frame`` (a pandas DataFrame; its index is not shown): every column with its kind
    ("bar", "number" or "text"), digits, range and help, and the rows as lists."""
    columns = columns or {}
    specs = []
    for name in frame.columns:
        column = columns.get(name, Column())
        numeric = frame[name].dtype.kind in "iuf"
        kind = "bar" if column.bar is not None else "number" if numeric else "text"
        low, high = column.bar if column.bar is not None else (None, None)
        specs.append({"name": str(name), "kind": kind, "digits": column.digits, "low": low, "high": high,
                      "help": column.help})
    rows = [[_value(value) for value in row] for row in frame.itertuples(index=False, name=None)]
    return {"columns": specs, "rows": rows, "clicks": clicks, "csv_name": csv_name}


def _row(state) -> int | None:
    """The clicked row in a table's widget state (its trigger value "row"), if any."""
    row = state.get("row") if hasattr(state, "get") else getattr(state, "row", None)
    return int(row) if isinstance(row, int | float) and not isinstance(row, bool) else None


def table(frame, *, key: str, columns: dict[str, Column] | None = None,
          on_row: Callable[[int], object] | None = None, csv_name: str = "table.csv") -> None:
    """Draw ``frame`` under ``key``.  With ``on_row``, its rows are clickable: a click calls ``on_row(position of the
    row in frame)`` as a callback, before the rerun it starts draws anything (so it may set any widget's value)."""
    data = payload(frame, columns, clicks=on_row is not None, csv_name=csv_name)
    if on_row is None:
        _component(data=data, key=key)
        return

    def clicked() -> None:
        row = _row(st.session_state.get(key))
        if row is not None:
            on_row(row)

    _component(data=data, key=key, on_row_change=clicked)
