"""Packs a heatmap figure of ``attnviz.views.figures`` into the bytes the canvas chart draws (``attnviz.ui.charts``,
``attnviz/ui/js/heatmap.js``): a JSON header — title, axes and their token ticks, colour scale and bar, shapes,
annotations, hover templates, click regions — followed by the heatmap's values as little-endian float32 (NaN: a
gap, drawn as the background).  A map crosses the websocket as 4 bytes a cell and the browser colours it into a
canvas itself, without Plotly.js.

The figure builders stay the one place that says what a map shows; this module only reads what they wrote.  It
knows the figures they make: one heatmap trace, at most a "masked" legend entry and, on the thumbnail grid, the
scatter whose points report clicks (its tiles, ``layout.meta``, become click regions).  Anything else raises
``ValueError``.

    ┌──────┬───────────────┬──────────────────┬─────────┬────────────────────────────┐
    │ AVH1 │ header length │ header (UTF-8)   │ padding │ values, float32 rows × cols │
    │ 4 B  │ uint32 LE     │ JSON             │ to 4 B  │ row-major                   │
    └──────┴───────────────┴──────────────────┴─────────┴────────────────────────────┘
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import struct

import numpy as np

MAGIC = b"AVH1"
_TAG = re.compile(r"<[^>]*>")


def _plain(text) -> str:
    """Plotly's label markup (escaped entities, ``<sup>`` …) as the plain text it displays; the browser sets it
    as text, never as HTML."""
    return html.unescape(_TAG.sub("", str(text)))


def _title(title) -> list[str]:
    text = (title or {}).get("text", "") if isinstance(title, dict) else (title or "")
    return [_plain(line) for line in str(text).split("<br>") if _plain(line)]


def _ticks(axis: dict, labels: list[str] | None) -> list[list]:
    """[[cell index, tick text], …] of an axis whose ``tickvals`` are category labels (or cell indices)."""
    if axis.get("visible") is False or axis.get("showticklabels") is False:
        return []
    values, texts = list(axis.get("tickvals") or []), list(axis.get("ticktext") or [])
    index = {label: i for i, label in enumerate(labels)} if labels is not None else {}
    ticks = []
    for value, text in zip(values, texts, strict=False):
        at = index.get(value) if labels is not None else value
        if at is not None:
            ticks.append([int(at), _plain(text)])
    return ticks


def _axis(axis: dict, labels: list[str] | None) -> dict:
    title = axis.get("title") or {}
    return {"title": _plain(title.get("text", "") if isinstance(title, dict) else title),
            "ticks": _ticks(axis, labels), "angle": axis.get("tickangle", 0), "side": axis.get("side"),
            "visible": axis.get("visible", True) is not False}


def _descending(axis_range) -> bool:
    """An explicit axis range that runs from high to low (the grid's y axis: row 0 on top)."""
    return axis_range is not None and len(axis_range) == 2 and axis_range[0] > axis_range[1]


def _shape(shape: dict) -> dict:
    line = shape.get("line") or {}
    return {"x0": float(shape["x0"]), "x1": float(shape["x1"]), "y0": float(shape["y0"]), "y1": float(shape["y1"]),
            "fill": shape.get("fillcolor"), "line": line.get("color") if line.get("width", 1) else None,
            "width": line.get("width", 1), "below": shape.get("layer") == "below"}


def _annotation(note: dict) -> dict:
    return {"x": float(note["x"]), "y": float(note["y"]), "text": _plain(note.get("text", "")),
            "size": (note.get("font") or {}).get("size", 12), "bottom": note.get("yanchor") == "bottom"}


def header_and_values(figure: dict) -> tuple[dict, np.ndarray]:
    """(header, (rows, cols) float32 values) of a heatmap figure's dict (its traces' and layout's ``to_plotly_json()``)."""
    traces, layout = figure.get("data") or [], dict(figure.get("layout") or {})
    heatmaps = [t for t in traces if t.get("type") == "heatmap"]
    clickable = [t for t in traces if t.get("type") == "scatter" and t.get("customdata") is not None]
    legend = [t for t in traces if t.get("type") == "scatter" and t.get("name") == "masked"]
    if len(heatmaps) != 1 or len(heatmaps) + len(clickable) + len(legend) != len(traces):
        raise ValueError("the canvas chart draws one heatmap (with a masked legend entry or a click overlay)")
    heat = heatmaps[0]
    values = np.asarray(heat["z"], dtype="<f4")  # (rows, cols)
    if values.ndim != 2:
        raise ValueError("a heatmap's z must be 2-D")
    rows, cols = values.shape
    if heat.get("zmin") is None or heat.get("zmax") is None or heat.get("colorscale") is None:
        raise ValueError("the canvas chart draws a heatmap with its colour range and scale set (zmin, zmax, colorscale)")
    x = [_plain(v) for v in heat["x"]] if heat.get("x") is not None else None
    y = [_plain(v) for v in heat["y"]] if heat.get("y") is not None else None
    raw_x = list(heat["x"]) if heat.get("x") is not None else None
    raw_y = list(heat["y"]) if heat.get("y") is not None else None
    x_axis, y_axis = dict(layout.get("xaxis") or {}), dict(layout.get("yaxis") or {})
    colorbar = None
    if heat.get("showscale", True) is not False:
        bar = heat.get("colorbar") or {}
        colorbar = {"title": _plain((bar.get("title") or {}).get("text", "")), "thickness": bar.get("thickness", 12),
                    "len": bar.get("len", 1)}
    hover = None if heat.get("hoverinfo") == "skip" else heat.get("hovertemplate") or "%{y}<br>%{x}<br>%{z}"
    regions, region_hover = [], None
    if clickable:
        meta = layout.get("meta") or {}
        size = int(meta["size"])
        regions = [[int(x0), int(y0), size, size, head] for head, (x0, y0) in enumerate(meta["tiles"])]
        region_hover = clickable[0].get("hovertemplate")
    header = {
        "rows": rows, "cols": cols, "zmin": float(heat["zmin"]), "zmax": float(heat["zmax"]),
        "colorscale": [[float(at), str(color)] for at, color in heat["colorscale"]], "colorbar": colorbar,
        "hover": hover, "hoverongaps": heat.get("hoverongaps", True) is not False, "x": x, "y": y,
        "xaxis": _axis(x_axis, raw_x), "yaxis": _axis(y_axis, raw_y),
        "reversed": y_axis.get("autorange") == "reversed" or _descending(y_axis.get("range")),  # row 0 on top
        "square": y_axis.get("scaleanchor") == "x",
        "title": _title(layout.get("title")), "height": int(layout.get("height") or 450),
        "margin": {side: int((layout.get("margin") or {}).get(side, 40)) for side in "lrtb"},
        "background": layout.get("plot_bgcolor") or "white",
        "shapes": [_shape(s) for s in layout.get("shapes") or ()],
        "annotations": [_annotation(a) for a in layout.get("annotations") or ()],
        "masked": (legend[0].get("marker") or {}).get("color") if legend else None,
        "regions": regions, "region_hover": region_hover,
    }
    return header, values


def pack(fig, *, config: dict | None = None, clicks: bool = False) -> bytes:
    """The canvas chart's bytes for ``fig`` (a ``go.Figure`` or its dict).  ``config``: the modebar's, as
    ``ui.frame.plotly_config`` gives it (``toImageButtonOptions``: format, filename, scale).  ``clicks``: a click
    on a region is reported.  The header's ``digest`` lets the browser skip a figure it has drawn already."""
    figure = fig if isinstance(fig, dict) else {  # its arrays as they are (to_plotly_json would base64 them)
        "data": [trace.to_plotly_json() for trace in fig.data], "layout": fig.layout.to_plotly_json()}
    header, values = header_and_values(figure)
    header["config"] = config or {}
    header["clicks"] = clicks
    body = np.ascontiguousarray(values, dtype="<f4").tobytes()  # (rows, cols) row-major
    described = json.dumps(header, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()
    header["digest"] = hashlib.blake2b(described + body, digest_size=12).hexdigest()
    encoded = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
    encoded += b" " * (-(8 + len(encoded)) % 4)  # the values start on a 4-byte boundary
    return MAGIC + struct.pack("<I", len(encoded)) + encoded + body


def unpack(payload: bytes) -> tuple[dict, np.ndarray]:
    """(header, (rows, cols) values) of :func:`pack`'s bytes — what the browser reads."""
    if payload[:4] != MAGIC:
        raise ValueError("not a canvas chart's bytes")
    (length,) = struct.unpack("<I", payload[4:8])
    header = json.loads(payload[8 : 8 + length].decode())
    values = np.frombuffer(payload, dtype="<f4", offset=8 + length, count=header["rows"] * header["cols"])
    return header, values.reshape(header["rows"], header["cols"])
