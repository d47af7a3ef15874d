"""Map images: a map's values coloured on a Plotly colour scale and handed to Plotly as a ``go.Image`` of a PNG.

Plotly draws a heatmap by colouring every cell in the browser and encoding the canvas as a PNG; an image trace whose
``source`` is a PNG is drawn as it is.  A map that Plotly would draw as a heatmap of colours only (its hover and clicks
come from the cell overlay, ``figures.cell_overlay``) is therefore sent as that PNG: the server colours it with the
colour scale's own samples (``plotly.colors.sample_colorscale``, linear in RGB as plotly.js interpolates a heatmap)
and Pillow encodes it.  Masked cells (NaN) are transparent, so the plot's background shows through them as it does
through a heatmap's gaps.  An image trace has no colour bar: :func:`colour_bar` is a trace that draws only one."""

from __future__ import annotations

import base64
import functools
import io

import numpy as np

LEVELS = 256  # colours sampled from a scale: one per 8-bit step, finer than a PNG's channels


@functools.lru_cache(maxsize=8)
def _palette(scale: tuple) -> np.ndarray:
    """(LEVELS, 3) uint8: the colour scale (Plotly's (position, colour) pairs) sampled at LEVELS even steps."""
    from plotly.colors import sample_colorscale, unlabel_rgb

    samples = sample_colorscale([list(pair) for pair in scale], np.linspace(0.0, 1.0, LEVELS).tolist())
    return np.rint(np.array([unlabel_rgb(colour) for colour in samples], dtype=np.float64)).astype(np.uint8)


def colour(values: np.ndarray, zmin: float, zmax: float, scale: tuple) -> np.ndarray:
    """(rows, cols, 4) uint8 RGBA of a (rows, cols) map: each value's colour on ``scale`` over ``zmin … zmax``
    (clipped, as Plotly clips a heatmap's), NaN fully transparent."""
    values = np.asarray(values, dtype=np.float32)  # (rows, cols)
    masked = np.isnan(values)  # (rows, cols)
    span = (zmax - zmin) or 1.0
    position = np.clip((np.where(masked, zmin, values) - zmin) / span, 0.0, 1.0)  # (rows, cols) in 0 … 1
    rgba = np.empty(values.shape + (4,), dtype=np.uint8)  # (rows, cols, 4)
    rgba[..., :3] = _palette(scale)[np.rint(position * (LEVELS - 1)).astype(np.intp)]  # (rows, cols, 3)
    rgba[..., 3] = np.where(masked, 0, 255)
    return rgba


def png_source(rgba: np.ndarray) -> str:
    """A ``data:image/png;base64,…`` URL of an (rows, cols, 4) uint8 image, at Pillow's fastest compression: the
    maps are encoded on every draw (sizes and times: benchmarks/README.md, "Maps as images")."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgba), "RGBA").save(buffer, format="PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def map_image(values: np.ndarray, zmin: float, zmax: float, scale: tuple, *, x0: float = 0, y0: float = 0,
              name: str = "") -> dict:
    """An image trace of a (rows, cols) map whose cell (i, j) is centred at (x0 + j, y0 + i), as a heatmap's with
    ``x0``/``y0`` and unit steps.  It takes no hover: a cell overlay or the figure's other traces say the values."""
    return {"type": "image", "source": png_source(colour(values, zmin, zmax, scale)), "x0": x0, "y0": y0,
            "dx": 1, "dy": 1, "name": name, "hoverinfo": "skip"}


def colour_bar(zmin: float, zmax: float, scale: tuple, colorbar: dict) -> dict:
    """A trace that draws only a colour bar for ``scale`` over ``zmin … zmax`` (an image trace has none): a scatter
    without points whose marker colours span the range."""
    return {"type": "scatter", "name": "colour bar", "x": [None], "y": [None], "mode": "markers",
            "showlegend": False, "hoverinfo": "skip",
            "marker": {"color": [zmin, zmax], "cmin": zmin, "cmax": zmax, "colorscale": scale, "showscale": True,
                       "colorbar": colorbar}}
