"""What a map figure draws, read back from the figure (a ``go.Figure`` or the JSON the browser gets).

A map is an image trace (a PNG of its coloured cells, ``attnviz.views.map_image``) plus, for a token map, the cell
overlay whose hover names each cell's value (``figures.cell_overlay``): :func:`cells_shown` reads the values from the
overlay, :func:`pixels` decodes an image, and ``tests/views/test_map_image.py`` checks that the two agree.
"""

from __future__ import annotations

import base64
import io

import numpy as np

from helpers.apptest import decode


def as_dict(fig) -> dict:
    """A figure as a dict of traces and layout (a ``go.Figure``'s arrays stay NumPy arrays)."""
    return fig if isinstance(fig, dict) else fig.to_plotly_json()


def images(fig) -> list[dict]:
    """The figure's image traces, in order."""
    return [trace for trace in as_dict(fig)["data"] if trace["type"] == "image"]


def pixels(image: dict) -> np.ndarray:
    """(rows, cols, 4) uint8 RGBA of an image trace's PNG source."""
    from PIL import Image

    header, _, data = image["source"].partition(",")
    assert header == "data:image/png;base64"
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGBA"))


def cells_shown(fig) -> np.ndarray:
    """(rows, cols) float32 of a token map: each cell's value as its overlay's hover gives it, NaN where the overlay
    says the cell is masked.  Rows and columns start at the map's first query and key positions."""
    overlay = [trace for trace in as_dict(fig)["data"] if trace.get("name") in ("cells", "masked cells")]
    keys = [decode(trace["x"]).astype(int) for trace in overlay]
    queries = [decode(trace["y"]).astype(int) for trace in overlay]
    col0, row0 = min(k.min() for k in keys), min(q.min() for q in queries)
    rows, cols = max(q.max() for q in queries) - row0 + 1, max(k.max() for k in keys) - col0 + 1
    assert sum(k.size for k in keys) == rows * cols  # every cell once: visible or masked
    values = np.full((rows, cols), np.nan, dtype=np.float32)
    for trace, k, q in zip(overlay, keys, queries):
        if trace["name"] == "cells":
            values[q - row0, k - col0] = decode(trace["customdata"])
    return values


def colour_range(fig) -> tuple[float, float]:
    """(cmin, cmax) of the figure's colour bar: the values its maps' colours span."""
    (bar,) = [trace for trace in as_dict(fig)["data"]
              if trace["type"] == "scatter" and trace.get("marker", {}).get("showscale")]
    return bar["marker"]["cmin"], bar["marker"]["cmax"]
