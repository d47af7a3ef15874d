"""The canvas chart's bytes (views.canvas): what the browser draws is exactly what the figure builders made —
the values cell for cell, the token labels as plain text, the ticks, the hover template, the click regions."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest

from attnviz.views import canvas, figures

TOKENS = ["<b>bold</b>", "·cat", "·&amp;", "·cat", "·milk", "·<script>"]


def causal_weights(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((n, n)).astype(np.float32)  # (n, n)
    scores[np.triu_indices(n, k=1)] = -np.inf
    weights = np.exp(scores - scores.max(-1, keepdims=True))  # (n, n)
    return weights / weights.sum(-1, keepdims=True)


def test_a_token_heatmap_crosses_as_its_values_labels_ticks_and_hover_template():
    weights = causal_weights(6)
    fig = figures.attention_heatmap(weights, TOKENS, "weights", title="head 2: weights")
    payload = canvas.pack(fig, config={"toImageButtonOptions": {"format": "svg", "filename": "x"}})
    header, values = canvas.unpack(payload)

    (heat,) = [trace for trace in fig.data if trace.type == "heatmap"]
    np.testing.assert_array_equal(values, np.asarray(heat.z, dtype=np.float32))  # NaN where the figure has gaps
    assert np.isnan(values[np.triu_indices(6, k=1)]).all() and np.isfinite(values[np.tril_indices(6)]).all()
    assert values.dtype == np.float32 and len(payload) < 8 + 4096 + 4 * values.size  # 4 bytes a cell
    assert header["x"] == header["y"] == [f"{i}: {t}" for i, t in enumerate(TOKENS)]  # plain text, unescaped
    assert [text for _, text in header["xaxis"]["ticks"]] == TOKENS  # the browser sets them as text
    assert [at for at, _ in header["xaxis"]["ticks"]] == list(range(6))
    assert header["xaxis"]["title"] == "key token" and header["yaxis"]["title"] == "query token"
    assert header["xaxis"]["angle"] == -60 and header["reversed"]  # key tokens on top, query 0 at the top
    assert header["hover"] == heat.hovertemplate  # "query %{y}<br>key %{x}<br>weights %{z:.4f}…"
    assert (header["zmin"], header["zmax"]) == (0.0, 1.0)
    assert header["colorscale"] == [[float(at), color] for at, color in heat.colorscale]
    assert header["masked"] == figures.MASKED_COLOR and header["background"] == figures.MASKED_COLOR
    assert header["title"] == ["head 2: weights"] and header["colorbar"]["title"] == "weights"
    assert header["config"]["toImageButtonOptions"]["format"] == "svg" and not header["clicks"]
    assert not header["regions"]


def test_no_mask_no_masked_legend_and_scores_keep_their_signed_range():
    scores = np.random.default_rng(1).standard_normal((5, 5)).astype(np.float32) * 3  # (5, 5)
    header, values = canvas.unpack(canvas.pack(
        figures.attention_heatmap(scores, TOKENS[:5], "scores", causal=False)))
    np.testing.assert_array_equal(values, scores)
    assert header["masked"] is None
    assert header["zmin"] == pytest.approx(-np.abs(scores).max()) and header["zmax"] == pytest.approx(np.abs(scores).max())


def test_a_window_of_a_long_map_ticks_its_own_positions():
    n, size = 300, 100
    weights = causal_weights(n)
    tokens = [f"t{i}" for i in range(n)]
    fig = figures.attention_heatmap(weights[150:250, 50:150], tokens, "weights", row_offset=150, col_offset=50)
    header, values = canvas.unpack(canvas.pack(fig))
    assert values.shape == (size, size)
    assert header["x"][0] == "50: t50" and header["y"][0] == "150: t150"
    for at, text in header["xaxis"]["ticks"]:  # each tick stands at its own column
        assert text == f"t{50 + at}"
    assert len(header["xaxis"]["ticks"]) <= 40


def test_the_grid_s_tiles_are_its_click_regions_and_its_marks_survive():
    maps = np.stack([causal_weights(8, seed) for seed in range(12)])  # (12, 8, 8)
    grid = figures.mark_focus(figures.heads_grid(maps, "weights"), 5)
    header, values = canvas.unpack(canvas.pack(grid, clicks=True))
    meta = grid.layout.meta
    assert header["regions"] == [[x0, y0, meta["size"], meta["size"], head] for head, (x0, y0) in enumerate(meta["tiles"])]
    assert header["clicks"] and header["region_hover"] == "head %{customdata}: click to focus<extra></extra>"
    assert header["hover"] is None  # the mosaic itself is not hovered: its tiles are
    for head, (x0, y0) in enumerate(meta["tiles"]):  # every tile holds exactly its head's pooled map
        tile = values[y0 : y0 + meta["size"], x0 : x0 + meta["size"]]
        np.testing.assert_array_equal(tile, figures.pooled_display(maps[head][None], "weights", True, 64)[0][0])
    titles = [note["text"] for note in header["annotations"]]
    assert titles == ["head 0", "head 1", "head 2", "head 3", "head 4", "▶ head 5"] + [f"head {h}" for h in range(6, 12)]
    outlined = [shape for shape in header["shapes"] if shape["line"] == "#d62728"]
    assert len(outlined) == 1 and not outlined[0]["below"]  # the focus outline, over the tile
    assert sum(shape["below"] for shape in header["shapes"]) == 12  # one grey underlay a tile: its masked cells
    assert header["reversed"] and not header["xaxis"]["visible"]


def test_the_overview_is_square_with_its_window_outlined():
    matrix = causal_weights(512)
    fig = figures.overview_heatmap(matrix, "weights", causal=True, window=(0, 256, 256))
    header, values = canvas.unpack(canvas.pack(fig))
    assert values.shape == (128, 128) and header["square"] and header["colorbar"] is None
    assert "×4" in header["hover"]
    (outline,) = header["shapes"]
    assert (outline["x0"], outline["x1"], outline["y0"], outline["y1"]) == (63.5, 127.5, -0.5, 63.5)


def test_the_digest_follows_the_figure():
    weights = causal_weights(6)
    one = canvas.unpack(canvas.pack(figures.attention_heatmap(weights, TOKENS)))[0]["digest"]
    again = canvas.unpack(canvas.pack(figures.attention_heatmap(weights.copy(), TOKENS)))[0]["digest"]
    other = weights.copy()
    other[5, 0] += 1e-6
    changed = canvas.unpack(canvas.pack(figures.attention_heatmap(other, TOKENS)))[0]["digest"]
    relabelled = canvas.unpack(canvas.pack(figures.attention_heatmap(weights, ["a"] * 6)))[0]["digest"]
    assert one == again and len({one, changed, relabelled}) == 3


def test_values_start_on_a_four_byte_boundary():
    for n in range(1, 9):  # header lengths vary with the labels
        payload = canvas.pack(figures.attention_heatmap(causal_weights(n), ["x" * n] * n))
        length = int.from_bytes(payload[4:8], "little")
        assert (8 + length) % 4 == 0 and len(payload) == 8 + length + 4 * n * n


def test_an_axis_runs_down_only_when_the_figure_says_so():
    values = np.arange(6, dtype=np.float32).reshape(2, 3)  # (2, 3)
    heat = {"type": "heatmap", "z": values, "zmin": 0.0, "zmax": 5.0, "colorscale": [[0, "#000000"], [1, "#ffffff"]]}
    for yaxis, down in (({"autorange": "reversed"}, True), ({"range": [1.5, -0.5]}, True),
                        ({"range": [0.5, 2.5]}, False), ({}, False)):
        header, _ = canvas.header_and_values({"data": [heat], "layout": {"yaxis": yaxis}})
        assert header["reversed"] is down, yaxis


@pytest.mark.parametrize("fig", [
    go.Figure(go.Bar(x=[1, 2], y=[3, 4])),
    go.Figure([go.Heatmap(z=[[1.0]]), go.Heatmap(z=[[2.0]])]),
    go.Figure(go.Heatmap(z=[1.0, 2.0])),
    b"AVH0",
], ids=["bar", "two heatmaps", "1-D z", "not a figure"])
def test_anything_else_is_refused(fig):
    with pytest.raises((ValueError, TypeError, AttributeError)):
        canvas.unpack(fig) if isinstance(fig, bytes) else canvas.pack(fig)
