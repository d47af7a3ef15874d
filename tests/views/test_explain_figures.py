"""The figures of why a cell has its weight and of several tokens' summed attention: what they draw adds up to
the explanation, token text is escaped, long sequences get numeric axes with few ticks."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import plotly.io as pio
import pytest

from attnviz import pipeline
from attnviz.config import AttentionConfig
from attnviz.explain import attention_sums, explain_weight
from attnviz.views import explain_figures, margins
from attnviz.views.explain_figures import (
    HIGHLIGHT,
    NEGATIVE,
    POSITIVE,
    products_figure,
    row_softmax_figure,
    summed_attention_figure,
)
from attnviz.views.figures import COLUMN_LABEL_PX

HOSTILE = "<script>alert(1)</script> <b>bold</b> & <img src=x onerror=alert(2)> the end"


@pytest.fixture(scope="module")
def hostile_trace():
    return pipeline.run(HOSTILE, AttentionConfig(variant="mha", d_in=32, d_out=32, num_heads=4, seed=3))


def flat(title: str) -> str:
    """A wrapped title as one line (its line breaks and the no-break spaces that keep a name on its number's line as
    spaces)."""
    return title.replace("<br>", " ").replace("\u00a0", " ")


def all_text(fig) -> str:
    return json.dumps(json.loads(pio.to_json(fig)))


@pytest.mark.parametrize(("variant", "heads"), [("mha", 4), ("mha_wrapper", 2), ("causal", 1)])
def test_products_figure_has_one_bar_per_dimension_that_add_up_to_the_score(variant, heads):
    trace = pipeline.run("The cat sat on the mat.", AttentionConfig(variant=variant, d_in=24, d_out=24,
                                                                     num_heads=heads))
    explanation = explain_weight(trace, heads - 1, 5, 2)
    fig = products_figure(explanation)
    (bars,) = fig.data
    assert bars.type == "bar" and len(bars.y) == explanation.head_dim == 24 // heads
    assert np.asarray(bars.y).dtype == np.float32 and np.asarray(bars.x).dtype == np.float32
    assert np.array_equal(bars.y, explanation.products)
    assert np.isclose(np.sum(bars.y), explanation.score, rtol=1e-5)
    title = flat(fig.layout.title.text)
    # the numbers the page's line beside the chart writes (ui.why: four decimals), so both read the same score
    assert f"score {explanation.score:.4f}" in title and f"scaled {explanation.scaled:.4f}" in title
    assert f"÷ √{explanation.head_dim}" in title and f"weight {explanation.weight:.4f}" in title
    assert np.array_equal(np.asarray(bars.customdata)[:, 0], explanation.query_vector)
    assert list(bars.marker.color) == [POSITIVE if p >= 0 else NEGATIVE for p in explanation.products]


def test_bar_colours_are_colour_strings(hostile_trace):
    """plotly.js warns, with a stack trace, once a bar for a numeric colour array on a bar trace: every bar trace's
    colours — the products', the row's and the sums' — are colour strings, with no colour scale."""
    explanation = explain_weight(hostile_trace, 1, 9, 4)
    sums = attention_sums(hostile_trace, 3, queries=[5, 7], keys=[1])
    figures = [products_figure(explanation), row_softmax_figure(explanation, hostile_trace.tokens),
               summed_attention_figure(sums, hostile_trace.tokens)]
    bars = [trace for fig in figures for trace in fig.data if trace.type == "bar"]
    assert len(bars) == 6  # products; the row's seen keys, hidden keys and weights; the two sums
    for trace in bars:
        assert trace.marker.colorscale is None
        assert all(isinstance(color, str) and color.startswith("#") for color in trace.marker.color)


def test_every_figure_is_valid_plotly(hostile_trace):
    """The builders skip Plotly's validation for speed: the same dicts must pass it."""
    import plotly.graph_objects as go

    explanation = explain_weight(hostile_trace, 1, 9, 9)
    masked = explain_weight(hostile_trace, 1, 2, 9)
    figures = [products_figure(explanation), products_figure(masked), row_softmax_figure(masked, hostile_trace.tokens),
               summed_attention_figure(attention_sums(hostile_trace, 1, queries=[1, 2], keys=[0]),
                                       hostile_trace.tokens),
               summed_attention_figure(attention_sums(hostile_trace, 1, keys=[0]), hostile_trace.tokens)]
    for fig in figures:
        assert go.Figure(fig.to_dict()).to_dict()["data"]  # raises on an invalid property


def test_products_figure_names_the_largest_products():
    trace = pipeline.run("The cat sat on the mat.", AttentionConfig(variant="mha", d_in=64, d_out=64, num_heads=2))
    explanation = explain_weight(trace, 0, 4, 1)
    fig = products_figure(explanation, top=3)
    named = [d for d, text in enumerate(fig.data[0].text) if text]
    magnitudes, largest = np.abs(explanation.products), fig.layout.meta["largest"]
    assert len(largest) == 3 and magnitudes[largest].min() >= np.delete(magnitudes, largest).max()
    assert largest[0] in named and set(named) <= set(largest)  # less a name that would overlap a larger one's
    assert all(fig.data[0].text[d] == f"d{d}" for d in named)


def test_the_products_axis_reaches_the_highest_bar_or_name_and_the_lowest_and_no_further():
    """The products chart's y axis ends where its highest bar or the name over it ends (and its lowest bar or the
    name under it): nothing cut, no band left over the bars under the title (Plotly's autorange would add a name's
    height and more at both ends)."""
    trace = pipeline.run("The cat sat on the mat.", AttentionConfig(variant="mha", d_in=64, d_out=64, num_heads=2))
    explanation = explain_weight(trace, 0, 4, 1)
    for products in (explanation.products, np.abs(explanation.products), -np.abs(explanation.products)):
        fig = products_figure(dataclasses.replace(explanation, products=products))
        layout, named = fig.layout, fig.layout.meta["named"]
        low, high = layout.yaxis.range
        px = (layout.height - layout.margin.t - layout.margin.b) / (high - low)  # a unit of the axis
        name_px = [explain_figures.NAME_PX if d in named else 0 for d in range(products.shape[0])]
        tops = [max(0.0, v) * px + (room if v >= 0 else 0) for v, room in zip(products, name_px)]
        bottoms = [min(0.0, v) * px - (room if v < 0 else 0) for v, room in zip(products, name_px)]
        assert max(tops) == pytest.approx(high * px, abs=0.5) and min(bottoms) == pytest.approx(low * px, abs=0.5)


def test_a_product_past_float32s_range_has_no_bar_and_the_axis_holds_the_others():
    """A product of inf (q[d]·k[d] past float32's range) or NaN has no bar: the y axis spans the finite bars (not
    0 … inf, which draws none), no name sits on a bar that is not there, and the subtitle says which are missing."""
    trace = pipeline.run("The cat sat on the mat.", AttentionConfig(variant="mha", d_in=64, d_out=64, num_heads=2))
    explanation = explain_weight(trace, 0, 4, 1)
    finite = np.delete(explanation.products, [3, 5])
    for missing in ((np.inf, -np.inf), (np.inf, np.nan)):
        products = explanation.products.copy()
        products[[3, 5]] = missing
        fig = products_figure(dataclasses.replace(explanation, products=products))
        low, high = fig.layout.yaxis.range or (np.nan, np.nan)
        assert low <= finite.min() and finite.max() <= high < 2 * np.abs(finite).max(), (missing, low, high)
        assert not fig.data[0].text[3] and not fig.data[0].text[5]
        assert (f"No bar for d3 = inf, d5 = {missing[1]}" in
                flat(fig.layout.title.subtitle.text).replace("\u00a0", " "))


def _shown_names_overlapping(fig) -> list[tuple[str, str]]:
    """The pairs of a products figure's bar names ("d89", "d90") that overlap at the panel's width
    (explain_figures.PANEL_PX): on one side of 0 (a name sits above a product ≥ 0, under one < 0), centred on its bar,
    each as wide as its text needs (margins.text_px: 7 px a character, where Plotly draws them at 10 px)."""
    bars, layout = fig.data[0], fig.layout
    products = np.asarray(bars.y)  # (hd,)
    bar_px = (explain_figures.PANEL_PX - layout.margin.l - layout.margin.r) / products.shape[0]
    named = [d for d, text in enumerate(bars.text) if text]
    return [(bars.text[a], bars.text[b]) for i, a in enumerate(named) for b in named[i + 1:]
            if (products[a] >= 0) == (products[b] >= 0)
            and abs(a - b) * bar_px < (margins.text_px([bars.text[a]]) + margins.text_px([bars.text[b]])) / 2]


@pytest.mark.parametrize("head_dim", [8, 16, 32, 64, 128])
def test_the_products_names_never_overlap_at_the_panels_width(head_dim):
    """At every head_dim the app draws, the bar names of the largest products stay apart on the panel beside the map
    (explain_figures.PANEL_PX): a name that would overlap a larger product's on the same side is left out, the largest
    is always named, and the hover still names every bar.  Hand-made products put the five largest side by side (d89 …
    d93 at head_dim 128)."""
    trace = pipeline.run("The cat sat on the mat because it was warm",
                         AttentionConfig(variant="mha", d_in=16, d_out=2 * head_dim, num_heads=2, seed=1))
    explanation = explain_weight(trace, 0, 8, 3)
    adjacent = np.full(head_dim, 0.01, dtype=np.float32)  # (hd,)
    first = min(89, head_dim - 5)
    adjacent[first:first + 5] = [5.0, 4.0, 3.0, -2.5, 2.0]  # four above 0 side by side, one under it
    for products in (explanation.products, adjacent):
        fig = products_figure(dataclasses.replace(explanation, products=products))
        named = [d for d, text in enumerate(fig.data[0].text) if text]
        assert _shown_names_overlapping(fig) == [], (head_dim, named)
        largest = fig.layout.meta["largest"]
        assert largest[0] in named and set(named) <= set(largest) and named == sorted(fig.layout.meta["named"])
        assert "dimension %{x}" in fig.data[0].hovertemplate
    if head_dim >= 32:  # bars narrower than a name: d89, then the largest under 0, d92 (at 128)
        assert fig.layout.meta["named"][:2] == [first, first + 3]


def test_a_wrapped_products_title_never_parts_a_name_from_its_number():
    """The title wraps at spaces: "head", "query" and "key" stay on the line of their number."""
    trace = pipeline.run("The cat sat on the mat. The cat sat on the mat.",
                         AttentionConfig(variant="mha", d_in=32, d_out=32, num_heads=4))
    lines = products_figure(explain_weight(trace, 0, 13, 9)).layout.title.text.split("<br>")
    assert len(lines) > 2  # wrapped
    assert not any(line.rstrip().endswith(("head", "query", "key", "→ key", "score", "scaled", "weight", "takes"))
                   for line in lines)
    assert "head\u00a00" in " ".join(lines) and "query\u00a013" in " ".join(lines)


WHY_PANEL_AT_800_PX = explain_figures.PANEL_PX  # the "why this weight" column: an 800 px window gives it its width


def test_why_this_weights_titles_fit_the_panel_of_an_800_px_window():
    """Plotly cuts a title at its figure's edge: every line of the products' and the softmax's titles (13 px), their
    subtitles (11 px) and the panels' titles (12 px, from the figure's left edge) fits the panel at 800 px (under the
    map there, in a column as wide as beside it)."""
    trace = pipeline.run("The cat sat on the mat. The cat sat on the mat.",
                         AttentionConfig(variant="mha", d_in=256, d_out=256, num_heads=4))  # ÷ √64
    explanation = explain_weight(trace, 0, 13, 9)
    products, row = products_figure(explanation), row_softmax_figure(explanation, trace.tokens)
    for title, size in ((products.layout.title.text, 13), (products.layout.title.subtitle.text or "", 11),
                        (row.layout.title.text, 13)):
        assert margins.TITLE_INSET_PX + margins.title_px(title, size) <= WHY_PANEL_AT_800_PX, title
    for annotation in row.layout.annotations:  # from the figure's left edge, as the title
        assert annotation.x == 0 and annotation.xanchor == "left"
        left = row.layout.margin.l + annotation.xshift
        assert left >= 0 and left + margins.title_px(annotation.text, 12) <= WHY_PANEL_AT_800_PX, annotation.text


def test_masked_cell_title_says_why_and_never_nan():
    trace = pipeline.run("The cat sat on the mat.", AttentionConfig(variant="mha", d_in=16, d_out=16, num_heads=2))
    explanation = explain_weight(trace, 1, 2, 4)
    fig = products_figure(explanation)
    assert "masked: weight 0" in flat(fig.layout.title.text)
    assert "causal mask hides it" in flat(fig.layout.title.subtitle.text)
    assert np.isfinite(np.asarray(fig.data[0].y)).all()
    row = row_softmax_figure(explanation, trace.tokens)
    assert all(np.isfinite(np.asarray(bar.y)).all() for bar in row.data)
    seen, unseen, weights = row.data  # the keys query 2 sees, the keys the mask hides, the weights
    assert list(seen.x) == [0, 1, 2] and list(unseen.x) == list(range(3, trace.n))
    assert np.asarray(unseen.y).tolist() == [0.0] * (trace.n - 3)  # hidden keys drawn at 0, not −∞
    assert "−∞" in unseen.hovertemplate and "mask hides" in unseen.hovertemplate
    assert np.flatnonzero(np.asarray(unseen.marker.color) == HIGHLIGHT).tolist() == [1]  # key 4, the clicked one


AXIS_TITLE_PX = 14  # an axis title's font size in Streamlit's Plotly theme


def visible_lines(title: str) -> list[str]:
    """A Plotly title's lines as the browser shows them (entities as one character)."""
    import html

    return [html.unescape(line) for line in title.split("<br>")]


def test_the_titles_break_into_lines_the_panel_beside_the_map_holds():
    """Plotly does not wrap a title: the explanation's long lines (the softmax's formula, the mask's reason, the
    selected tokens) and the titles over its panels come broken at spaces into lines that fit the panel's width in
    pixels (one rule for all, not a count of characters), all words kept; the axis titles, centred under their plots,
    lie inside the panel."""
    text = "Your journey starts with one step and then another step and many more steps on the long road ahead"
    trace = pipeline.run(text, AttentionConfig(variant="mha", d_in=16, d_out=16, num_heads=2))
    masked, seen = explain_weight(trace, 1, 2, 9), explain_weight(trace, 1, 9, 2)
    sums = attention_sums(trace, 1, queries=range(3, trace.n), keys=range(0, trace.n, 2))
    figures = [products_figure(masked), products_figure(seen), row_softmax_figure(seen, trace.tokens),
               row_softmax_figure(masked, trace.tokens), summed_attention_figure(sums, trace.tokens)]
    titles = [(fig.layout.title.text, 13) for fig in figures]
    titles += [(fig.layout.title.subtitle.text, 11) for fig in figures[:2] if fig.layout.title.subtitle.text]
    titles += [(note.text, 12) for fig in figures for note in fig.layout.annotations]
    assert len(titles) >= 10
    room = explain_figures.PANEL_PX - margins.TITLE_INSET_PX  # a title starts that far in from the figure's edge
    for title, size in titles:
        assert all(margins.title_px(line, size) <= room for line in visible_lines(title)), title
    row_titles = [note.text for note in figures[2].layout.annotations]
    assert row_titles == ["row 9: scaled scores (the softmax's input)", "softmax over row 9: the weights (sum to 1)"]
    for fig in figures:
        plot = (fig.layout.margin.l, explain_figures.PANEL_PX - fig.layout.margin.r)
        for axis in (fig.layout[name] for name in fig.layout if name.startswith("xaxis")):
            half = margins.title_px(axis.title.text or "", AXIS_TITLE_PX) / 2
            assert half <= sum(plot) / 2 <= explain_figures.PANEL_PX - half, axis.title.text
    assert "causal mask hides it (−∞ before the softmax), so its weight is 0" in " ".join(
        visible_lines(figures[0].layout.title.subtitle.text))
    assert "÷ Σ over the row's visible keys of exp(scaled)" in " ".join(visible_lines(figures[2].layout.title.text))


def test_simplified_class_says_what_stands_in_and_that_nothing_scales():
    trace = pipeline.run("The cat sat", AttentionConfig(variant="simplified", d_in=8, causal=False))
    fig = products_figure(explain_weight(trace, 0, 2, 0))
    assert "÷ 1 (no scaling)" in flat(fig.layout.title.text)
    assert "stand in for the query and the key" in flat(fig.layout.title.subtitle.text)


def test_hostile_token_text_is_escaped_everywhere(hostile_trace):
    angled = [p for p, piece in enumerate(hostile_trace.tokens) if "<" in piece or "&" in piece]
    assert len(angled) >= 2
    explanation = explain_weight(hostile_trace, 2, angled[-1], angled[0])
    sums = attention_sums(hostile_trace, 2, queries=range(hostile_trace.n), keys=[0, 1, 2])
    for fig in (products_figure(explanation), row_softmax_figure(explanation, hostile_trace.tokens),
                summed_attention_figure(sums, hostile_trace.tokens)):
        text = all_text(fig)
        assert "<script" not in text and "<img" not in text and "<b>" not in text
        assert "&lt;" in text


def test_row_softmax_figure_is_row_i_with_key_j_highlighted(hostile_trace):
    explanation = explain_weight(hostile_trace, 1, 6, 4)
    fig = row_softmax_figure(explanation, hostile_trace.tokens)
    scaled, hidden, weights = fig.data
    assert np.array_equal(weights.y, hostile_trace.steps["weights"][0, 1, 6])
    assert np.array_equal(scaled.y, hostile_trace.steps["scaled"][0, 1, 6, :7])
    assert list(hidden.x) == list(range(7, hostile_trace.n))
    assert np.isclose(np.sum(weights.y), 1.0, atol=1e-5)
    assert list(weights.customdata) == [explain_figures.safe_label(token) for token in hostile_trace.tokens]
    for bars in (scaled, weights):
        assert np.flatnonzero(np.asarray(bars.marker.color) == HIGHLIGHT).tolist() == [4]
    assert [shape.x0 for shape in fig.layout.shapes] == [4, 4]


def test_a_1024_token_row_uses_numeric_positions_and_few_ticks():
    text = " ".join(["token"] * 1100)
    trace = pipeline.run(text, AttentionConfig(variant="mha", d_in=8, d_out=8, num_heads=2))
    assert trace.n == 1024
    explanation = explain_weight(trace, 1, 1000, 999)
    fig = row_softmax_figure(explanation, trace.tokens)
    lines = [trace for trace in fig.data if trace.mode == "lines"]  # a row this long is a step line, not 1,024 bars
    assert len(lines) == 3 and not [trace for trace in fig.data if trace.type == "bar"]
    assert [len(line.x) for line in lines] == [1001, 23, 1024]  # keys 0 … 1000 seen, 1001 … 1023 hidden; weights
    assert all(np.asarray(line.x).dtype == np.float32 for line in lines)
    assert [list(dots.x) for dots in fig.data if dots.mode == "markers"] == [[999.0], [], [999.0]]  # key j marked
    np.testing.assert_allclose(lines[2].y, explanation.row_weights, atol=1e-6)
    assert len(fig.layout.xaxis.tickvals) <= explain_figures.MAX_TICKS
    assert fig.layout.xaxis.type != "category"
    sums = attention_sums(trace, 0, queries=range(500, 1024))
    summed = summed_attention_figure(sums, trace.tokens)
    assert len([t for t in summed.data if t.mode == "lines"]) == 1
    assert len(summed.layout.xaxis.tickvals) <= explain_figures.MAX_TICKS
    assert "and 516 more" in flat(summed.layout.annotations[0].text)


@pytest.mark.parametrize("n", [8, 256, 1024])
def test_a_panels_key_labels_fit_beside_each_other_in_the_panel(n):
    """The panel beside the focused map has a plot area of ~170 px: its turned token labels are as many as that
    holds side by side (not 256 overlapping into a grey strip), evenly spaced, and a short row keeps every one."""
    tokens = [f"t{i}" for i in range(n)]
    axis = explain_figures._token_axis(tokens, n)
    shown, plot_px = len(axis["tickvals"]), explain_figures.PANEL_PLOT_PX  # the panel's plot area
    assert shown * COLUMN_LABEL_PX <= plot_px, shown
    assert shown == n if n * COLUMN_LABEL_PX <= plot_px else shown >= 4
    assert len(set(np.diff(axis["tickvals"]))) <= 1 and axis["ticktext"] == [tokens[p] for p in axis["tickvals"]]


def test_summed_attention_figure_draws_both_selections(hostile_trace):
    sums = attention_sums(hostile_trace, 3, queries=[5, 7], keys=[1])
    fig = summed_attention_figure(sums, hostile_trace.tokens)
    by_key, by_query = fig.data
    assert np.array_equal(by_key.y, sums.per_key_mean)
    assert np.allclose(np.asarray(by_key.customdata)[:, 1].astype(float), sums.per_key_sum)
    assert np.array_equal(by_query.y, sums.per_query_total)
    assert np.flatnonzero(np.asarray(by_query.marker.color) == HIGHLIGHT).tolist() == [5, 7]
    assert np.flatnonzero(np.asarray(by_key.marker.color) == HIGHLIGHT).tolist() == [1]
    # each title names its positions right after what they are: the queries (not after "per key"), the keys
    per_key, per_query = (flat(annotation.text) for annotation in fig.layout.annotations[:2])
    assert per_key.startswith("weights of the 2 selected queries (5 “") and per_key.endswith("), averaged per key")
    assert "7 “" in per_key and per_key.count("per key") == 1
    assert per_query.startswith("weights each query gives the 1 selected key (1 “")
    assert per_query.endswith(") in total")


def test_summed_attention_figure_of_one_query_and_one_key_says_query_and_key(hostile_trace):
    fig = summed_attention_figure(attention_sums(hostile_trace, 3, queries=[5], keys=[1]), hostile_trace.tokens)
    assert "of the 1 selected query (5 “" in flat(fig.layout.annotations[0].text)
    assert "the 1 selected key (1 “" in flat(fig.layout.annotations[1].text)


def test_summed_attention_figure_of_keys_only(hostile_trace):
    sums = attention_sums(hostile_trace, 0, keys=[2])
    fig = summed_attention_figure(sums, hostile_trace.tokens)
    assert len(fig.data) == 1 and np.array_equal(fig.data[0].y, sums.per_query_total)
