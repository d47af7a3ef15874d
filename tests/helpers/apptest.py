"""What an AppTest run drew, read through AppTest's public API (``at.main``, ``at.sidebar``, ``at.get``).

Plotly figures reach the browser as JSON; AppTest hands that JSON back (``chart.proto.spec``).  NumPy arrays
in it are base64 blobs (``{"dtype", "bdata", "shape"}``), lists otherwise: :func:`decode` reads both.
"""

from __future__ import annotations

import base64
import json

import numpy as np


def decode(array) -> np.ndarray:
    """Plotly's JSON array: a list, or {"dtype", "bdata", "shape"} for NumPy arrays."""
    if isinstance(array, dict):
        data = np.frombuffer(base64.b64decode(array["bdata"]), dtype=np.dtype(array["dtype"]))
        shape = [int(s) for s in str(array.get("shape", len(data))).split(",")]
        return data.reshape(shape)
    return np.asarray(array, dtype=float)


def canvas_figure(payload: bytes) -> dict:
    """What a canvas chart (``ui.chart``) draws, read back from its bytes (``views.canvas.unpack``) in the shape of
    the Plotly figure it was packed from: the heatmap (z, x, y, zmin, zmax), the title's lines joined by
    ``<br>``, the annotations' text, the "masked" legend entry and, for the thumbnail grid, its tiles (``meta``) and
    click regions (a "select head" trace)."""
    from attnviz.views import canvas

    header, values = canvas.unpack(payload)
    heatmap = {"type": "heatmap", "z": values, "x": header["x"], "y": header["y"], "zmin": header["zmin"],
               "zmax": header["zmax"], "hovertemplate": header["hover"]}
    layout = {"title": {"text": "<br>".join(header["title"])}, "height": header["height"],
              "annotations": [{"text": note["text"]} for note in header["annotations"]]}
    for axis, labels in (("xaxis", header["x"]), ("yaxis", header["y"])):  # the ticks the chart draws
        ticks = header[axis]["ticks"]
        layout[axis] = {"title": {"text": header[axis]["title"]}, "ticktext": [text for _, text in ticks],
                        "tickvals": [labels[at] if labels else at for at, _ in ticks]}
    data = [heatmap]
    if header["masked"]:  # the legend's "masked" entry
        data.append({"type": "scatter", "name": "masked", "marker": {"color": header["masked"]}})
    if header["regions"]:  # the grid's click regions, one per tile
        layout["meta"] = {"tiles": [[x0, y0] for x0, y0, *_ in header["regions"]], "size": header["regions"][0][2]}
        data.append({"type": "scatter", "name": "select head", "customdata": [r[4] for r in header["regions"]],
                     "hovertemplate": header["region_hover"]})
    return {"data": data, "layout": layout}


def page_elements(at):
    """Every element of an AppTest run, in page order: the main area's, then the sidebar's (iterating an AppTest
    ``Block`` walks its elements depth first)."""
    yield from at.main
    yield from at.sidebar


def plotly_figures(at) -> list[dict]:
    """Every figure an AppTest run drew (``st.plotly_chart``'s, as the JSON the browser gets, and attnviz's canvas
    charts, ``ui.chart``, as ``canvas_figure`` reads them back), in page order."""
    found: list[dict] = []
    for node in page_elements(at):
        if getattr(node, "type", None) == "plotly_chart":
            found.append(json.loads(node.proto.spec))
        elif getattr(node, "type", None) == "bidi_component" and node.proto.component_name == "attnviz_chart":
            found.append(canvas_figure(node.proto.bytes))
    return found


def attnviz_tables(at) -> list[dict]:
    """Every table an AppTest run drew with ``attnviz.ui.tables.table`` (the JSON the browser gets: ``columns``,
    ``rows``, ``clicks``, ``csv_name``), each with its rows as a pandas DataFrame under ``"frame"``, in page order."""
    import pandas as pd

    found: list[dict] = []
    for node in at.get("bidi_component"):
        if node.proto.component_name == "attnviz_table":
            data = json.loads(node.proto.json)
            data["frame"] = pd.DataFrame(data["rows"], columns=[column["name"] for column in data["columns"]])
            found.append(data)
    return found
