"""The app under AppTest — opened by a link, with URL parameters on a page (:func:`open_app`) — and what a run drew,
read through AppTest's public API (``at.main``, ``at.sidebar``, ``at.get``).

Plotly figures reach the browser as JSON; AppTest hands that JSON back (``chart.proto.spec``).  NumPy arrays
in it are base64 blobs (``{"dtype", "bdata", "shape"}``), lists otherwise: :func:`decode` reads both.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np

APP = Path(__file__).resolve().parents[2] / "app.py"
TIMEOUT = 120  # seconds a run may take: a session's first run builds a GPT-2-size embedding


def open_app(page: str | None = None, *, timeout: float = TIMEOUT, **query):
    """``app.py`` in AppTest as a new session opened by a link: these URL parameters (``num_heads="4"``,
    ``text="…"``) on ``page`` (a script, ``"pages/steps.py"``; None: the default page, Heads), run once.
    ``timeout``: the seconds each run may take."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=timeout)
    for key, value in query.items():
        at.query_params[key] = value
    if page is not None:
        at.switch_page(page)
    return at.run()


def no_exception(at) -> None:
    """The run raised nothing (no exception element on the page)."""
    assert not at.exception, [e.value for e in at.exception]


def sidebar_notices(at) -> str:
    """The sidebar's warnings as the user reads them (the app escapes Markdown in them)."""
    return " ".join(w.value for w in at.sidebar.warning).replace("\\", "")


def link_notices(at) -> str:
    """The notices about the link's values, as the user reads them: at the top of the main area, where a user opening
    a link looks; none is left in the sidebar.  The app gives these, and no other notice, a link's icon (a weights
    option gone from the list has the icon of what went)."""
    assert not [w for w in at.sidebar.warning if w.icon == ":material/link:"]
    return " ".join(w.value for w in at.main.warning if w.icon == ":material/link:").replace("\\", "")


def main_warnings(at) -> str:
    """The main area's warnings as the user reads them (the app escapes Markdown in them)."""
    return " ".join(w.value for w in at.main.warning).replace("\\", "")


def share_link(at) -> str:
    """The URL of the sidebar's Share link ("Link to this view": the code block that holds a query)."""
    links = [code.value for code in at.sidebar.code if "?" in code.value]
    assert links, "no Share link in the sidebar"
    return links[0]


def decode(array) -> np.ndarray:
    """Plotly's JSON array: a list, or {"dtype", "bdata", "shape"} for NumPy arrays."""
    if isinstance(array, dict):
        data = np.frombuffer(base64.b64decode(array["bdata"]), dtype=np.dtype(array["dtype"]))
        shape = [int(s) for s in str(array.get("shape", len(data))).split(",")]
        return data.reshape(shape)
    return np.asarray(array, dtype=float)


def page_elements(at):
    """Every element of an AppTest run, in page order: the main area's, then the sidebar's (iterating an AppTest
    ``Block`` walks its elements depth first)."""
    yield from at.main
    yield from at.sidebar


def page_text(at) -> str:
    """Everything an AppTest run sent the browser, as text: every element's message (its body, label, help, options),
    with Markdown's escapes taken out (``srv\\_modules`` reads ``srv_modules``)."""
    from google.protobuf import text_format

    protos = [element.proto for element in page_elements(at) if getattr(element, "proto", None) is not None]
    return "\n".join(text_format.MessageToString(proto, as_utf8=True) for proto in protos).replace("\\", "")


def plotly_figures(at) -> list[dict]:
    """Every figure an AppTest run drew with ``st.plotly_chart``, as the JSON the browser gets, in page order."""
    charts = [element for element in page_elements(at) if getattr(element, "type", None) == "plotly_chart"]
    return [json.loads(chart.proto.spec) for chart in charts]


def grid(at, *columns: str):
    """The first ``st.dataframe`` of the run whose columns include ``columns`` (``grid(at, "rank", "token")``): its
    ``.value`` is the DataFrame, ``json.loads(.proto.columns)`` its column config.  A table drawn another way (a
    Markdown table, ``st.table``) is not found: the assertion says which grids there were."""
    found = next((frame for frame in at.dataframe if set(columns) <= set(frame.value.columns)), None)
    assert found is not None, f"no st.dataframe with {columns}; grids: {[list(f.value.columns) for f in at.dataframe]}"
    return found


def grid_columns(at, *columns: str) -> dict:
    """The column config of :func:`grid` ``(at, *columns)``: {column: its config (type, width, format, help …)}."""
    return json.loads(grid(at, *columns).proto.columns or "{}")


def check_panel_results(at) -> dict[str, str]:
    """The Heads page's Check panel's verdicts as its table shows them: {rule: "pass", "fail" or "skip"}."""
    table = next(frame.value for frame in at.table if "rule" in frame.value.columns)
    return dict(zip(table["rule"], table["result"]))


def check_panel_command(at, folder) -> list[str]:
    """The arguments after ``python -m attnviz check`` of the command the Check panel's caption prints, the module's
    file (which the caption names without its folder) in ``folder``."""
    caption = next(c.value for c in at.caption if "attnviz check" in c.value)
    argv = re.search(r"`python -m attnviz check ([^`]+)`", caption).group(1).split()
    return [f"{folder}/{argv[0]}", *argv[1:]]


def figure(at, title: str) -> dict:
    """The first figure of :func:`plotly_figures` whose title holds ``title`` ("KV cache of", "head 0: weights")."""
    drawn = plotly_figures(at)
    titles = [fig["layout"].get("title", {}).get("text", "") for fig in drawn]
    found = next((fig for fig, text in zip(drawn, titles) if title in text), None)
    assert found is not None, f"no figure titled {title!r} among {titles}"
    return found


def recorded_spinners(monkeypatch) -> list[tuple[str, bool]]:
    """The (text, show_time) of every ``st.spinner`` the app opens from now on (AppTest does not keep spinners)."""
    import streamlit

    spinners, real = [], streamlit.spinner

    def spinner(text="", *args, **kwargs):
        spinners.append((text, kwargs.get("show_time", False)))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(streamlit, "spinner", spinner)
    return spinners


def recorded_downloads(monkeypatch) -> list[str]:
    """The ``file_name`` of every ``st.download_button`` the app draws from now on (AppTest's button holds only the
    id of its deferred file)."""
    import streamlit

    names, real = [], streamlit.download_button

    def download_button(*args, **kwargs):
        names.append(kwargs.get("file_name"))
        return real(*args, **kwargs)

    monkeypatch.setattr(streamlit, "download_button", download_button)
    return names


def follow_link(at, script: str):
    """What a click on the sidebar's link to ``script`` does in the browser: the URL becomes the link's (the settings
    and that page's own parameters as it last left them), then that page runs.  AppTest's ``switch_page`` alone
    keeps the URL of the page before."""
    from urllib.parse import parse_qsl

    from attnviz.ui import navigation

    title = next(entry.title for entry in navigation.PAGES if entry.script == script and not entry.hidden)
    link = next(link.proto for link in at.sidebar.get("page_link") if link.proto.label == title)
    for key in list(at.query_params):
        del at.query_params[key]
    for key, value in parse_qsl(link.query_string, keep_blank_values=True):
        at.query_params[key] = value
    return at.switch_page(script).run()


class ShownLabels:
    """What each selectbox and select slider of an AppTest session reads in the browser, run after run.  Streamlit's
    frontend keeps the label a widget holds while the widget (its key) stays on the page: the option the user picked,
    or the value a run sends it (the proto's ``set_value`` and ``raw_value``: a value set through the Session State,
    one restored on coming back to the page); a run that only gives the options new labels leaves the old label in the
    widget.  A box shows the label it holds; a slider whose options lack it shows its ``default`` option instead (and
    keeps holding the old label).  A widget new to the page shows its ``default`` option.  Call :meth:`read` after
    every run, :meth:`pick` for the user's own choice."""

    def __init__(self, at=None) -> None:
        self._shown: dict[str, str] = {}  # widget id -> the label the browser holds
        if at is not None:
            self.read(at)

    def read(self, at) -> ShownLabels:
        for box in at.selectbox:
            proto = box.proto
            if proto.set_value:
                self._shown[proto.id] = proto.raw_value
            elif proto.id not in self._shown and proto.options:
                self._shown[proto.id] = proto.options[proto.default]
        for slider in at.select_slider:
            proto = slider.proto
            if proto.set_value:
                self._shown[proto.id] = proto.raw_value[0]
            elif proto.id not in self._shown:
                self._shown[proto.id] = proto.options[int(proto.default[0])]
        return self

    @staticmethod
    def _widget(at, key: str):
        """The selectbox or the select slider ``key``."""
        try:
            return at.selectbox(key=key)
        except KeyError:
            return at.select_slider(key=key)

    def pick(self, at, key: str, value):
        """The user picks ``value`` in the widget ``key`` (it shows that option's label); the run that follows is
        read."""
        widget = self._widget(at, key)
        self._shown[widget.proto.id] = widget.format_func(value)
        widget.set_value(value)
        self.read(at.run())
        return at

    def of(self, at, key: str) -> str:
        """The label the widget ``key`` shows after the last run read."""
        widget = self._widget(at, key)
        held = self._shown[widget.proto.id]
        if widget.type == "select_slider" and held not in widget.proto.options:
            return widget.proto.options[int(widget.proto.default[0])]
        return held

    def agree(self, at, key: str) -> bool:
        """Whether the widget ``key`` shows its value's label as this run formats it."""
        widget = self._widget(at, key)
        return self.of(at, key) == widget.format_func(widget.value)
