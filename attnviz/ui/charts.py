"""A heatmap that stays on the page between script runs: ``chart(fig, key=…)`` draws one of ``attnviz.views.figures``'
heatmaps with a canvas (a Streamlit component, ``js/heatmap.js``), and the next run's figure under the same key is
drawn into the same chart, so a new layer or text updates the maps in place.

``views.canvas`` packs the figure as a JSON header and float32 values (4 bytes a cell); the browser colours them
into a canvas of one pixel a cell, drawn with its ticks, colour bar and titles as SVG around it — no Plotly.js, whose
redraw of a 256 × 256 heatmap with 256 token categories took 30–100 ms.  Hover shows the figure's hover template
(query, key, value), a modebar downloads PNG or SVG (``plotly_config``'s ``toImageButtonOptions``) or goes
fullscreen, and a click on a region of the thumbnail grid is returned to the script."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from attnviz.views import canvas

_JS = Path(__file__).parent / "js"
_CSS = """
.attnviz-chart { position: relative; width: 100%; overflow: hidden; }
.attnviz-chart:fullscreen { background: var(--st-background-color, white); }
.attnviz-chart > svg { position: absolute; left: 0; top: 0; pointer-events: none; }
.attnviz-chart > .attnviz-plot { position: absolute; }
.attnviz-chart canvas.attnviz-map { display: block; width: 100%; height: 100%; image-rendering: pixelated; }
.attnviz-chart > .hovertext { position: absolute; display: none; pointer-events: none; z-index: 2;
  padding: 4px 8px; border-radius: 4px; font-size: 12px; line-height: 1.4; white-space: pre;
  background: rgba(38, 39, 48, 0.92); color: white; }
.attnviz-chart > .modebar { position: absolute; top: 2px; right: 2px; display: flex; gap: 2px; opacity: 0;
  transition: opacity 0.2s; z-index: 3; }
.attnviz-chart:hover > .modebar, .attnviz-chart:focus-within > .modebar { opacity: 1; }
.attnviz-chart .modebar-btn { display: inline-flex; padding: 3px; cursor: pointer; color: #7f7f7f; border-radius: 3px; }
.attnviz-chart .modebar-btn:hover { color: #444; background: rgba(127, 127, 127, 0.15); }
"""
_component = st.components.v2.component(
    "attnviz_chart", js=(_JS / "heatmap.js").read_text(encoding="utf-8"), css=_CSS, isolate_styles=False)


def _no_op() -> None:
    """A click reruns the script (Streamlit reruns on a trigger that has a callback)."""


def chart(fig, *, key: str, config: dict | None = None, clicks: bool = False) -> dict | None:
    """Draw ``fig`` (a heatmap ``go.Figure`` of ``views.figures``, or its dict) under ``key``; with ``clicks``, the
    clicked region's ``{"customdata": …}`` (the grid's head) in the run the click started, else None."""
    data = canvas.pack(fig, config=config, clicks=clicks)
    if not clicks:
        _component(data=data, key=key)
        return None
    result = _component(data=data, key=key, on_click_change=_no_op)
    return getattr(result, "click", None)
