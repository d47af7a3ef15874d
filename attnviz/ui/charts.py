"""A Plotly chart that stays on the page between script runs: ``chart(fig, key=…)`` draws a figure, and the next
run's figure under the same key is drawn into the same chart with ``Plotly.react`` (a Streamlit component,
``js/chart.js``), so a new layer or text updates the heatmaps in place instead of mounting every chart again.

``st.plotly_chart`` gives each figure an identity that hashes the figure itself, so the browser unmounts the old
chart and builds a new one whenever its data changes, and passes the spec through three JSON round trips to theme
it.  Hover, the tick labels, the modebar's PNG/SVG export (``plotly_config``) and a fullscreen button work as they
do there; a click on a point with ``customdata`` is returned to the script (the Heads page's thumbnails).

Plotly.js is Streamlit's own copy (the module ``st.plotly_chart`` loads), else the bundle inside the installed
``plotly`` package, served by this Streamlit server from that package's data folder; no CDN, loaded once per tab."""

from __future__ import annotations

import json
from pathlib import Path

import plotly
import plotly.io
import streamlit as st
import streamlit.components.v1 as components_v1

_PLOTLY_FOLDER = Path(plotly.__file__).parent / "package_data"  # plotly.min.js: the bundle Plotly's to_html inlines
_served = components_v1.declare_component("plotly_js", path=str(_PLOTLY_FOLDER))  # serves the folder; never drawn
PLOTLY_JS = f"component/{_served.name}/plotly.min.js"  # relative to the app's base URL


def _streamlit_plotly_chunk() -> str:
    """The module in which Streamlit's frontend ships Plotly.js (``static/js/PlotlyChart.<hash>.js``, relative to
    the app's base URL), or "" if this Streamlit version has none by that name.  It is the copy ``st.plotly_chart``
    loads (and ``app.py`` preloads while the server starts): using it, a tab compiles one Plotly.js, not two."""
    found = sorted((Path(st.__file__).parent / "static" / "static" / "js").glob("PlotlyChart.*.js"))
    return f"static/js/{found[0].name}" if len(found) == 1 else ""


STREAMLIT_PLOTLY = _streamlit_plotly_chunk()
_component = st.components.v2.component(
    "attnviz_chart", js=(Path(__file__).parent / "js" / "chart.js").read_text(encoding="utf-8"), isolate_styles=False)


def _no_op() -> None:
    """A click reruns the script (Streamlit reruns on a trigger that has a callback)."""


def chart(fig, *, key: str, config: dict | None = None, clicks: bool = False) -> dict | None:
    """Draw ``fig`` (a ``go.Figure`` or its dict) under ``key``; with ``clicks``, the clicked point's
    ``{"customdata": …}`` in the run the click started, else None."""
    data = {"spec": plotly.io.to_json(fig, validate=False), "config": json.dumps(config or {}), "plotly": PLOTLY_JS,
            "streamlit_plotly": STREAMLIT_PLOTLY, "clicks": clicks}
    if not clicks:
        _component(data=data, key=key)
        return None
    result = _component(data=data, key=key, on_click_change=_no_op)
    return getattr(result, "click", None)
