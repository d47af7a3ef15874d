"""attnviz.ui.tables: what the browser gets for a table (its columns' kinds, digits and bar ranges, its rows as JSON
values), and that a row click reaches the script's callback with the row's position."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from attnviz.ui import tables


def test_payload_says_how_each_column_is_drawn_and_sends_every_row():
    frame = pd.DataFrame({"head": np.arange(3), "type": ["—", "previous-token 0.93", "<b>x</b>"],
                          "entropy": np.array([0.5, 1.0, 1.5], dtype=np.float32)})
    data = tables.payload(frame, {"entropy": tables.Column(digits=4, bar=(0.0, math.log(6)), help="nats")},
                          clicks=True, csv_name="stats.csv")
    assert [(c["name"], c["kind"], c["digits"]) for c in data["columns"]] == [
        ("head", "number", None), ("type", "text", None), ("entropy", "bar", 4)]
    entropy = data["columns"][2]
    assert (entropy["low"], entropy["high"], entropy["help"]) == (0.0, pytest.approx(math.log(6)), "nats")
    assert data["rows"] == [[0, "—", 0.5], [1, "previous-token 0.93", 1.0], [2, "<b>x</b>", 1.5]]  # text as text
    assert data["clicks"] and data["csv_name"] == "stats.csv"
    json.dumps(data, allow_nan=False)  # what Streamlit sends: plain JSON


def test_payload_sends_a_missing_or_infinite_number_as_an_empty_cell_and_keeps_python_types():
    frame = pd.DataFrame({"a": [np.nan, np.inf, -np.inf, 2.5], "b": [True, False, True, False],
                          "c": pd.array([1, None, 3, 4], dtype="Int64")})
    rows = tables.payload(frame)["rows"]
    assert [row[0] for row in rows] == [None, None, None, 2.5]
    assert [row[1] for row in rows] == ["True", "False", "True", "False"]  # a flag is shown as its word
    assert [row[2] for row in rows] == [1, None, 3, 4]  # pandas' missing integer too
    assert all(type(row[0]) in (float, type(None)) and type(row[2]) in (int, type(None)) for row in rows)
    json.dumps(rows, allow_nan=False)


def test_a_click_on_a_row_calls_back_with_its_position(monkeypatch):
    """The trigger value "row" in the table's widget state reaches ``on_row``; anything else does not."""
    drawn, calls = {}, []

    def component(*, data, key, on_row_change=None):
        drawn.update(data=data, key=key, callback=on_row_change)

    monkeypatch.setattr(tables, "_component", component)
    state = {}
    monkeypatch.setattr(tables.st, "session_state", state)
    tables.table(pd.DataFrame({"head": [0, 1, 2]}), key="t", on_row=calls.append)
    assert drawn["data"]["clicks"] and drawn["key"] == "t"
    for value in ({"row": 2}, {"row": 1.0}, {"row": None}, {"row": True}, {"row": "2"}, {}, None):
        state["t"] = value
        drawn["callback"]()
    assert calls == [2, 1]
    tables.table(pd.DataFrame({"head": [0]}), key="u")  # no on_row: rows are not clickable, no callback
    assert not drawn["data"]["clicks"] and drawn["callback"] is None
