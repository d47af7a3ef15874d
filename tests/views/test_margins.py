"""Margins that hold a figure's labels: wider for longer labels, escaped text measured as shown, and the token heatmaps
asking for them (Chromium checks that Plotly then finds nothing to widen: tests/browser/test_pages.py)."""

from __future__ import annotations

import numpy as np

from attnviz.views import figures, generation_figures, margins


def test_a_longer_label_or_a_title_needs_a_wider_margin():
    assert margins.beside(["·a"]) < margins.beside(["·extraordinarily"])
    assert margins.beside(["·a"], title=False) + margins.TITLE_PX == margins.beside(["·a"])
    assert margins.beside() == margins.TICK_PAD_PX + margins.NUMBER_PX + margins.TITLE_PX  # numbers
    word = ["·extraordinarily"]
    assert margins.across(word, angle=0) < margins.across(word, angle=60) < margins.across(word, angle=90)


def test_escaped_labels_are_measured_as_plotly_shows_them():
    assert margins.text_px(["&lt;b&gt;"]) == margins.text_px(["<b>"]) == 3 * margins.CHAR_PX
    assert margins.text_px([]) == 0


def test_a_token_heatmap_asks_for_room_for_its_labels_colour_bar_and_legend():
    tokens = ["·short", "·extraordinarily", "·a"] * 4
    values = np.tril(np.full((12, 12), 1 / 12, dtype=np.float32))
    layout = figures.attention_heatmap(values, tokens, "weights").layout
    longest = margins.text_px(["·extraordinarily"])
    assert layout.margin.l >= longest + margins.TITLE_PX
    assert layout.margin.t >= longest * np.sin(np.radians(60))  # the key labels are turned 60° above the map
    assert layout.margin.r == margins.COLORBAR_PX and layout.margin.b == margins.LEGEND_BELOW_PX


def test_the_generation_rows_map_asks_for_room_for_its_labels():
    keys = [f"{i}:·token{i}" for i in range(30)]
    z = generation_figures.new_rows([np.full(29, 1 / 29), np.full(30, 1 / 30)], 30)
    layout = generation_figures.rows_figure(z, keys[-2:], keys, prompt_length=28, title="rows").layout
    assert layout.margin.l >= margins.text_px(keys[-2:]) and layout.margin.b >= margins.text_px(keys) * 0.8
    assert layout.margin.r == margins.COLORBAR_PX
