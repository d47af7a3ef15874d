"""Map images: a map's PNG shows each cell in its colour on the Plotly colour scale, masked cells transparent, and a
token map's image and its cell overlay (the hover) describe the same cells."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.maps import cells_shown, colour_range, images, pixels
from plotly.colors import get_colorscale, hex_to_rgb, unlabel_rgb

from attnviz.views import figures, map_image


def reference_colour(scale: str, position: float) -> np.ndarray:
    """The colour at ``position`` (0 … 1) of a named Plotly scale: linear in RGB between its two stops."""
    stops = get_colorscale(scale)
    where = [float(p) for p, _ in stops]
    rgb = [np.array(hex_to_rgb(c) if c.startswith("#") else unlabel_rgb(c), dtype=float) for _, c in stops]
    upper = next(i for i, p in enumerate(where) if p >= position)
    if upper == 0:
        return rgb[0]
    lower = upper - 1
    share = (position - where[lower]) / (where[upper] - where[lower])
    return rgb[lower] + share * (rgb[upper] - rgb[lower])


@pytest.mark.parametrize("scale", [figures.WEIGHT_SCALE, figures.SCORE_SCALE])
def test_each_value_gets_its_colour_on_the_plotly_scale(scale):
    zmin, zmax = -2.0, 6.0
    positions = np.arange(256) / 255  # one value a colour level
    values = (zmin + positions * (zmax - zmin)).astype(np.float32).reshape(16, 16)
    rgba = map_image.colour(values, zmin, zmax, figures.colorscale(scale))
    assert rgba.shape == (16, 16, 4) and rgba.dtype == np.uint8
    expected = np.array([reference_colour(scale, p) for p in positions]).reshape(16, 16, 3)
    assert np.abs(rgba[..., :3].astype(float) - expected).max() <= 1.0  # rounding to 8 bits
    assert (rgba[..., 3] == 255).all()


def test_values_beyond_the_range_take_its_end_colours_and_masked_cells_are_transparent():
    scale = figures.colorscale(figures.WEIGHT_SCALE)
    values = np.array([[-5.0, 0.0, np.nan], [1.0, 9.0, np.nan]], dtype=np.float32)
    rgba = map_image.colour(values, 0.0, 1.0, scale)
    np.testing.assert_array_equal(rgba[0, 0], rgba[0, 1])  # below zmin: zmin's colour
    np.testing.assert_array_equal(rgba[1, 1], rgba[1, 0])  # above zmax: zmax's colour
    assert list(rgba[:, 2, 3]) == [0, 0] and (rgba[:, :2, 3] == 255).all()
    flat = map_image.colour(np.full((2, 2), 3.0, np.float32), 3.0, 3.0, scale)  # an empty range draws, no error
    assert (flat[..., 3] == 255).all()


def test_the_png_holds_exactly_the_coloured_cells():
    rng = np.random.default_rng(0)
    values = rng.random((37, 53)).astype(np.float32)
    values[rng.random(values.shape) < 0.2] = np.nan
    scale = figures.colorscale(figures.SCORE_SCALE)
    image = map_image.map_image(values, 0.0, 1.0, scale, x0=10, y0=20, name="m")
    assert (image["type"], image["x0"], image["y0"], image["dx"], image["dy"]) == ("image", 10, 20, 1, 1)
    np.testing.assert_array_equal(pixels(image), map_image.colour(values, 0.0, 1.0, scale))


@pytest.mark.parametrize("stage", ["scores", "masked", "weights"])
@pytest.mark.parametrize("n", [6, 80])  # transparent markers over the cells, and text points above 64 × 64
def test_a_token_maps_image_shows_the_cells_its_hover_names(stage, n):
    """The image is the colours of exactly the values the overlay's hover gives, each at its own cell, and
    transparent exactly where the hover says the cell is masked."""
    rng = np.random.default_rng(n)
    scores = rng.normal(size=(n + 10, n + 10)).astype(np.float32)
    masked = np.where(np.triu(np.ones_like(scores, dtype=bool), k=1), -np.inf, scores)
    weights = np.exp(masked - masked.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    matrix = {"scores": scores, "masked": masked, "weights": weights}[stage][5 : 5 + n, 3 : 3 + n]
    fig = figures.attention_heatmap(matrix, [f"t{i}" for i in range(n + 10)], stage, row_offset=5, col_offset=3,
                                    width=figures.FOCUSED_MAP_PX)
    (image,) = images(fig)
    shown = cells_shown(fig)  # (n, n): the hover's values, NaN where it says masked
    expected = figures.display_values(matrix, stage, causal=False)
    if stage == "weights":
        expected[np.arange(3, 3 + n)[None, :] > np.arange(5, 5 + n)[:, None]] = np.nan
    np.testing.assert_array_equal(shown, expected)
    zmin, zmax = colour_range(fig)
    assert (zmin, zmax) == figures.color_range(stage, expected)[:2]
    scale = figures.colorscale(figures.color_range(stage, expected)[2])
    np.testing.assert_array_equal(pixels(image), map_image.colour(shown, zmin, zmax, scale))
    assert ((pixels(image)[..., 3] == 0) == np.isnan(shown)).all()
