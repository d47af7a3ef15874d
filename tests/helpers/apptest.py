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


def page_elements(at):
    """Every element of an AppTest run, in page order: the main area's, then the sidebar's (iterating an AppTest
    ``Block`` walks its elements depth first)."""
    yield from at.main
    yield from at.sidebar


def plotly_figures(at) -> list[dict]:
    """Every figure an AppTest run drew with ``st.plotly_chart``, as the JSON the browser gets, in page order."""
    charts = [element for element in page_elements(at) if getattr(element, "type", None) == "plotly_chart"]
    return [json.loads(chart.proto.spec) for chart in charts]
