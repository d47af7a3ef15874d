"""Helpers shared by the test modules (import them with ``from conftest import …``).

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


def plotly_figures(at) -> list[dict]:
    """Every Plotly figure an AppTest run drew, as the JSON the browser would get."""
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
