"""Margins that hold a figure's labels: wider for longer labels, escaped text measured as shown, and the token heatmaps
asking for them (Chromium checks that Plotly then finds nothing to widen: tests/browser/test_pages.py)."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz import pipeline
from attnviz.config import AttentionConfig
from attnviz.explain import attention_sums, explain_weight
from attnviz.views import explain_figures, figures, generation_figures, head_figures, margins


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
    layout = figures.attention_heatmap(values, tokens, "weights", width=figures.FOCUSED_MAP_PX).layout
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



def test_axes_whose_labels_the_margins_hold_skip_plotlys_overflow_test():
    """Plotly tests every numeric axis' tick labels against the figure's edges, once per label it places; an axis whose
    margin holds its labels turns that test off, on every figure with token tick labels."""
    trace = pipeline.run("the cat sat on the mat because it was warm", AttentionConfig(variant="mha", d_in=8, d_out=8,
                                                                                         num_heads=2))
    keys = [f"{i}:·token{i}" for i in range(30)]
    z = generation_figures.new_rows([np.full(29, 1 / 29), np.full(30, 1 / 30)], 30)
    explanation = explain_weight(trace, 1, 6, 4)
    figures_with_token_labels = [
        figures.attention_heatmap(trace.attention_map("weights", 0), trace.tokens, "weights",
                                  width=figures.FOCUSED_MAP_PX),
        generation_figures.rows_figure(z, keys[-2:], keys, prompt_length=28, title="rows"),
        explain_figures.row_softmax_figure(explanation, trace.tokens),
        explain_figures.summed_attention_figure(attention_sums(trace, 0, queries=[3, 4]), trace.tokens),
    ]
    for fig in figures_with_token_labels:
        labelled = [axis for name, axis in fig.layout.to_plotly_json().items()
                    if name[1:5] == "axis" and axis.get("ticktext") is not None and axis.get("showticklabels", True)]
        assert labelled, fig.layout.title.text
        assert all(axis["ticklabeloverflow"] == "allow" for axis in labelled), fig.layout.title.text


def test_a_score_grid_turns_its_head_labels_where_upright_ones_would_overlap_and_makes_room_for_them():
    from attnviz.views import head_figures

    few = head_figures.score_grid({"induction": np.zeros((2, 4)), "previous_token": np.zeros((2, 4))})
    many = head_figures.score_grid({name: np.zeros((12, 12)) for name in ("induction", "previous_token",
                                                                           "duplicate_token", "first_token")})
    assert few.layout.xaxis.tickangle == 0 and many.layout.xaxis.tickangle == -90
    # the labels' box, no more: automargin off for that axis, so Plotly widens no margin (tests/browser measures it)
    assert many.layout.margin.b == margins.labels_under(["H11"], angle=90)
    assert few.layout.margin.b == margins.labels_under(["H3"], angle=0) < margins.labels_under(["H3"], angle=90)
    assert many.layout.xaxis.automargin is False and few.layout.xaxis.automargin is False
    assert many.layout.margin.l == margins.beside(["L11"], title=False) and many.layout.margin.pad == 0
    assert many.layout.margin.r == margins.COLORBAR_PX


def test_bar_and_line_charts_hold_their_numbers_titles_and_a_legend_at_their_foot():
    from attnviz.views import head_figures, intervention_figures

    loss = np.linspace(3.0, 1.0, 19)
    knocked = intervention_figures.ablated_loss_figure(loss, loss + 1, T=8, label="L0H1").layout
    assert knocked.margin.l == margins.beside_numbers(0, 4.0) < margins.beside()  # "4.0", not "−0.0025"
    assert knocked.legend.yref == "container"
    # one entry a row, at any page width: the margin holds both rows under the axis
    assert (knocked.legend.entrywidth, knocked.legend.entrywidthmode) == (1, "fraction")
    assert knocked.margin.b == margins.under_axis() + 2 * margins.LEGEND_ENTRY_PX + margins.LEGEND_PAD_PX
    bars = figures.entropy_bars(["·a", "·extraordinarily"], np.ones(2), np.ones(2)).layout
    assert bars.margin.b == (margins.labels_under(["0: ·a", "1: ·extraordinarily"], angle=60)
                             + 2 * margins.LEGEND_ENTRY_PX + margins.LEGEND_PAD_PX)  # the labels, then two rows
    assert (bars.legend.entrywidth, bars.legend.entrywidthmode) == (1, "fraction")
    assert head_figures.position_loss(loss * 10, 8).layout.margin.l == margins.beside(["30"])


def test_a_number_axis_margin_holds_the_labels_plotly_writes_and_no_more():
    """The left margin of a chart of numbers from 0 holds its tick labels at the finest step Plotly could pick,
    "25" for losses up to 26, "0.36" for bars up to 0.38, and never more than any number's (NaN, ∞, 1e-7)."""
    assert margins.number_labels(0, 26) == ["0", "26", "2", "24", "26"]
    assert margins.number_labels(0, 0.38) == ["0.00", "0.38", "0.02", "0.36", "0.40"]
    assert margins.beside_numbers(0, 26) == margins.beside(["25"]) < margins.beside_numbers(0, 0.38) < margins.beside()
    for high in (float("nan"), float("inf"), 1e-7, 1234567.0):
        assert margins.beside_numbers(0, high) == margins.beside()


def test_a_number_axis_margin_holds_the_tick_plotly_s_autorange_adds_past_the_largest_value():
    """Bars up to 950 (or 97): Plotly's autorange pads the axis past the largest bar to a tick with one more digit,
    "1000" ("100"), which the margin holds, so Plotly draws the chart once; bars up to 940 reach no such tick."""
    assert margins.beside_numbers(0, 950) == margins.beside(["1000"])
    assert margins.beside_numbers(0, 97) == margins.beside(["100"])
    assert margins.beside_numbers(-950, 0) == margins.beside(["−1000"])
    assert margins.beside_numbers(0, 940) == margins.beside(["940"])


def test_a_long_knocked_out_label_breaks_into_legend_rows_the_margin_holds():
    """Knocking out many heads names them all: the label breaks into lines that fit the narrowest page's plot, and
    the margin under the axis holds every line, so Plotly neither cuts it nor draws the chart twice."""
    from attnviz.views import intervention_figures

    loss = np.linspace(3.0, 1.0, 19)
    heads = ", ".join(f"L{layer}H{head}" for layer in range(4) for head in range(4))
    figure = intervention_figures.ablated_loss_figure(loss, loss + 1, T=8, label=heads)
    layout = figure.layout
    plot_px = margins.PAGE_MIN_PX - layout.margin.l - layout.margin.r
    names = [trace.name for trace in figure.data]
    lines = [line for name in names for line in name.split("<br>")]
    assert len(lines) > 2 and all(margins.title_px(line, margins.LEGEND_FONT_PX) + margins.LEGEND_SAMPLE_PX
                                  <= plot_px for line in lines)
    assert "".join(lines).replace(" ", "") == "".join(names).replace("<br>", "").replace(" ", "")  # nothing dropped
    assert layout.margin.b == margins.under_axis() + len(lines) * margins.LEGEND_ENTRY_PX + margins.LEGEND_PAD_PX


def test_a_long_token_is_cut_in_its_tick_label_and_whole_in_its_hover():
    piece = "<0x20><0xF0><0x9F><0x91>"
    layout = figures.attention_heatmap(np.full((2, 2), 0.5, dtype=np.float32), [piece, "·a"], "weights",
                                       causal=False, width=figures.FOCUSED_MAP_PX).layout
    assert layout.xaxis.ticktext[0] == figures.safe_label(piece[: figures.TICK_LABEL_CHARS - 1] + "…")
    assert figures.safe_label(piece) in layout.xaxis2.ticktext[0]  # the overlay's hover names the whole piece
    assert figures.tick_label("·a") == "·a" and figures.tick_label("<b>") == "&lt;b&gt;"


def test_a_map_shows_no_more_query_labels_than_its_height_holds():
    tokens = ["<0xF0><0x9F><0x91><0x8B>"] * 38  # long byte pieces: a tall top margin leaves a short plot
    layout = figures.attention_heatmap(np.tril(np.full((38, 38), 1 / 38, dtype=np.float32)), tokens, "weights",
                                       width=figures.FOCUSED_MAP_PX).layout
    plot_height = layout.height - layout.margin.t - layout.margin.b
    assert len(layout.yaxis.tickvals) <= plot_height // figures.ROW_LABEL_PX < 38
    assert len(layout.xaxis.tickvals) <= plot_height // figures.COLUMN_LABEL_PX < 38
    assert len(layout.xaxis2.tickvals) == len(layout.yaxis2.tickvals) == 38  # every cell still hoverable
    short = figures.attention_heatmap(np.tril(np.full((6, 6), 1 / 6, dtype=np.float32)), ["·a"] * 6, "weights",
                                      width=figures.FOCUSED_MAP_PX)
    assert len(short.layout.yaxis.tickvals) == 6


def test_the_score_curves_panel_titles_stay_apart_at_700_px():
    """The Train page's two score panels in a 700 px window (the chart 680 px wide): each title's widest line,
    centred over its panel as Plotly places it, stays inside the figure and clear of the other title (one-line
    titles would overlap); the top margin holds its lines."""
    fig = head_figures.score_curves([0, 10], np.zeros((2, 2, 4)), np.zeros((2, 2, 4)), threshold=0.4)
    layout, width = fig.layout, 680
    plot_px = width - layout.margin.l - layout.margin.r
    titles = sorted((note for note in layout.annotations if note.xref == "paper" and note.yref == "paper"),
                    key=lambda note: note.x)
    assert [note.text.split(":")[0] for note in titles] == ["induction", "previous-token"]
    extents = []
    for note in titles:
        lines = [line.strip() for line in note.text.split("<br>")]
        centre, half = layout.margin.l + note.x * plot_px, margins.text_px(lines) / 2
        extents.append((centre - half, centre + half))
        assert layout.margin.t >= len(lines) * 1.3 * note.font.size + 10, note.text  # the lines above the plot
    (left_start, left_end), (right_start, right_end) = extents
    assert left_start >= 0 and left_end < right_start and right_end <= width, extents
    assert "on repeated random tokens" in titles[0].text and "on held-out text" in titles[1].text  # nothing dropped


def _titled_figures() -> list:
    """A figure of every builder that titles one: maps, grids, bars, lines and the Why-this-weight panels."""
    from attnviz import ablation
    from attnviz.labs.implementations import Row
    from attnviz.views import checkpoint_view, intervention_figures, saturation

    trace = pipeline.run("the cat sat on the mat because it was warm", AttentionConfig(variant="mha", d_in=8, d_out=8,
                                                                                         num_heads=2))
    weights = trace.attention_map("weights", 0)  # (n, n)
    explanation = explain_weight(trace, 1, 6, 4)
    keys = [f"{i}:·token{i}" for i in range(30)]
    z = generation_figures.new_rows([np.full(29, 1 / 29), np.full(30, 1 / 30)], 30)
    loss = np.linspace(3.0, 1.0, 19)
    long_maps = np.tril(np.ones((4, 300, 300), dtype=np.float32))  # (heads, n, n): downsampled, a two-line heading
    return [
        figures.attention_heatmap(weights, trace.tokens, "weights", title="head 0: weights = softmax(masked)",
                                  width=figures.FOCUSED_MAP_PX),
        figures.heads_grid(np.stack([weights] * 2), "weights"),
        figures.heads_grid(long_maps, "weights"),
        figures.overview_heatmap(long_maps[0], "weights", causal=True, window=(0, 0, 64)),
        figures.entropy_bars(trace.tokens, np.ones(trace.n), np.ones(trace.n)),
        figures.embedding_heatmap(np.ones((trace.n, 8), dtype=np.float32), trace.tokens, title="token embedding"),
        figures.benchmark_bars([Row("MultiHeadAttention", 1.0, (1.0,))], "6 tokens"),
        explain_figures.products_figure(explanation),
        explain_figures.row_softmax_figure(explanation, trace.tokens),
        explain_figures.summed_attention_figure(attention_sums(trace, 0, queries=[3, 4]), trace.tokens),
        generation_figures.rows_figure(z, keys[-2:], keys, prompt_length=28, title="rows"),
        generation_figures.kv_bytes_figure([1024, 2048], {"MHA": [1, 2]}, title="KV cache"),
        intervention_figures.ablation_grid_figure(np.zeros((2, 2)), 2.0),
        intervention_figures.ablated_loss_figure(loss, loss + 1, T=8, label="L0H1"),
        head_figures.stripe_grid(np.tril(np.ones((2, 2, 9, 9))), 4, title="every head on [BOS] + x + x"),
        head_figures.score_grid({"induction": np.zeros((2, 4))}, title="final scores"),
        head_figures.loss_curve([0, 1], [3.0, 2.0]),
        head_figures.position_loss(loss, 8),
        checkpoint_view.overview_figure(np.zeros((2, 2, 12, 12), dtype=np.float32), 12),
        saturation.scaling_ablation_figure(ablation.scaling_ablation(dks=(1, 2, 4, 8), num_tokens=6, seed=1)),
    ]


def test_every_title_starts_under_the_modebars_row_in_a_top_margin_that_holds_it():
    """Plotly draws its modebar over the figure's top right corner (always, on a touch screen): a title's first line
    starts under that row, whatever its lines (Plotly anchors a one-line title by its cap height, a title of several
    lines by its first baseline), and the top margin reaches past its last line (Chromium checks the boxes:
    tests/browser/test_chart_titles.py)."""
    for fig in _titled_figures():
        title, layout = fig.layout.title, fig.layout
        size, lines = title.font.size or margins.THEME_TITLE_PX, title.text.count("<br>") + 1
        assert (title.yref, title.y, title.yanchor) == ("container", 1, "top"), title.text
        rise = size if lines > 1 else 0.3 * size  # how far the first line's top stands above pad.t
        assert title.pad.t - rise >= margins.MODEBAR_PX, title.text
        assert layout.margin.t >= margins.MODEBAR_PX + margins.LINE_EM * size * lines, title.text


def _fixed_height_figures() -> list:
    """(name, figure, plot height in px) of every builder that sets its figure's height itself, not from what it draws:
    the height it sets less the margins it has without a title row (the loss curve's 320 − 50 − 84, the overview's
    300 − 40 − 10, the benchmark bars' 360 − 60 − 84, …)."""
    from attnviz import ablation
    from attnviz.labs.implementations import Row
    from attnviz.views import intervention_figures, saturation

    tokens = ["·the", "·cat", "·sat", "·on", "·the", "·mat"]
    keys = [f"{i}:·token{i}" for i in range(30)]
    z = generation_figures.new_rows([np.full(29, 1 / 29), np.full(30, 1 / 30)], 30)
    loss = np.linspace(3.0, 1.0, 19)
    two_heads = np.zeros((2, 1, 2))  # (probes, layers, heads): a legend shorter than the plot's least height
    return [
        ("overview_heatmap", figures.overview_heatmap(np.tril(np.ones((300, 300))), "weights", causal=True), 250),
        ("embedding_heatmap", figures.embedding_heatmap(np.ones((6, 8)), tokens, title="token embedding"), 226),
        ("benchmark_bars", figures.benchmark_bars([Row("MultiHeadAttention", 1.0, (1.0,))], "6 tokens"), 216),
        ("rows_figure", generation_figures.rows_figure(z, keys[-2:], keys, prompt_length=28, title="rows"), 255),
        ("kv_bytes_figure", generation_figures.kv_bytes_figure([1024, 2048], {"MHA": [1, 2]}, title="KV"), 286),
        ("ablated_loss_figure", intervention_figures.ablated_loss_figure(loss, loss + 1, T=8, label="L0H1"), 206),
        ("loss_curve", head_figures.loss_curve([0, 1], [3.0, 2.0]), 186),
        ("position_loss", head_figures.position_loss(loss, 8), 186),
        ("score_curves", head_figures.score_curves([0, 10], two_heads, two_heads), 226),
        ("scaling_ablation_figure",
         saturation.scaling_ablation_figure(ablation.scaling_ablation(dks=(1, 2, 4, 8), num_tokens=6, seed=1)), 206),
    ]


def test_a_chart_of_a_fixed_height_grows_by_its_title_row_and_keeps_its_plot():
    """A title under the modebar's row takes a taller top margin: a chart whose height is set, not drawn from its
    content, adds that margin to its height (margins.height), so its plot is as tall as without the title row."""
    built = _fixed_height_figures()
    plots = {name: fig.layout.height - fig.layout.margin.t - fig.layout.margin.b for name, fig, _ in built}
    assert plots == {name: plot_px for name, _, plot_px in built}


def _token_maps(text: str = "The cat sat on the mat. The cat sat on the mat.") -> list:
    """(name, figure, the width of the column its page draws it in) of every token map of the app, on ``text``."""
    from attnviz.labs import compare
    from attnviz.labs.pitfalls import figures as pitfall_figures
    from attnviz.labs.pitfalls.detectors import Observation
    from attnviz.views import notebook, steps

    trace = pipeline.run(text, AttentionConfig(variant="mha", d_in=8, d_out=8, num_heads=2))
    weights = trace.attention_map("weights", 0)  # (n, n)
    maps = trace.steps["weights"][0]  # (heads, n, n)
    result = compare.VariantResult("mha", trace.config, maps, tuple(trace.output.shape))
    observation = Observation({"weights": maps, "masked": trace.steps["masked"][0]}, None, None)
    two_lines = margins.title_top(2)  # a pair's title room of two lines
    return [
        ("focused map", figures.attention_heatmap(weights, trace.tokens, "weights", width=figures.FOCUSED_MAP_PX),
         figures.FOCUSED_MAP_PX),
        ("notebook", notebook.figures_of(trace)["head"], figures.FOCUSED_MAP_PX),
        ("Steps pair", figures.attention_heatmap(weights, trace.tokens, "weights", scale_below=True,
                                                 width=steps.PAIR_WIDTH), steps.PAIR_WIDTH),
        ("Steps pair, two title lines", figures.attention_heatmap(weights, trace.tokens, "weights", scale_below=True,
                                                                  width=steps.PAIR_WIDTH, title_px=two_lines),
         steps.PAIR_WIDTH),
        ("difference", figures.difference_heatmap(weights, weights, trace.tokens, title="Δ", scale_below=True,
                                                  width=steps.PAIR_WIDTH), steps.PAIR_WIDTH),
        ("Interventions pair", figures.attention_heatmap(weights, trace.tokens, "weights",
                                                         width=figures.PAIR_MAP_PX),
         figures.PAIR_MAP_PX),
        ("Induction stripe", head_figures.stripe_heatmap(weights, trace.tokens, 6, title="head 0"),
         head_figures.STRIPE_MAP_PX),
        ("Compare variant", compare.variant_heatmap(result, trace.tokens), compare.MAP_WIDTH),
        ("Compare beside a module", compare.variant_heatmap(result, trace.tokens, width=figures.PAIR_MAP_PX,
                                                            show_scale=True), figures.PAIR_MAP_PX),
        ("Pitfall", pitfall_figures.weights_figure(observation, trace.tokens), figures.PAIR_MAP_PX),
    ]


def test_every_token_map_has_square_cells_that_fill_its_column():
    """A token map (queries × keys, the same tokens on both axes) has square cells, as the book draws the matrix, on
    every page — the Steps page's pairs and difference, Compare's cards and the map beside a module, the Induction
    lab's stripe map, the Pitfall lab's, the interventions', the notebook's — not cells stretched to the page's width
    (which turn a 6-token map into a wide flat band): Plotly keeps the y axis' scale the x axis' (``scaleanchor``),
    and the figure is as tall as square cells across the column its page gives it need, so they fill its plot.  Maps
    side by side with the same title room stay as tall as each other."""
    built = _token_maps()
    for name, fig, width in built:
        layout = fig.layout
        assert layout.yaxis.scaleanchor == "x" and layout.yaxis.constrain == layout.xaxis.constrain == "domain", name
        plot_height = layout.height - layout.margin.t - layout.margin.b  # the margin holds a colour bar under it
        assert plot_height == width - layout.margin.l - layout.margin.r, name  # n × n: a square plot
    heights = {name: fig.layout.height for name, fig, _ in built}
    assert heights["Steps pair"] == heights["difference"] < heights["Steps pair, two title lines"]


@pytest.mark.parametrize(("layers", "heads", "noted"), [(2, 4, True), (2, 4, False), (1, 2, True), (3, 8, True)])
def test_the_train_pages_before_and_after_tiles_are_square_and_fill_their_column(layers, heads, noted):
    """The Train page's grids of every head (before and after training) draw each head's map square, as every other
    token map, in the column the page gives them: a row of tiles spans the column, and each tile is as tall as wide
    (its y axis keeps its x axis' scale), its titles above it."""
    from attnviz.views import head_figures

    maps = np.tril(np.ones((layers, heads, 9, 9)))
    notes = [["previous-token 0.50"] * heads for _ in range(layers)] if noted else None
    layout = head_figures.stripe_grid(maps, 4, title="after 400 steps", notes=notes).layout
    width = head_figures.STRIPE_GRID_PX
    plot_w, plot_h = width - layout.margin.l - layout.margin.r, layout.height - layout.margin.t - layout.margin.b
    for index in range(layers * heads):
        suffix = "" if index == 0 else str(index + 1)
        x, y = layout[f"xaxis{suffix}"], layout[f"yaxis{suffix}"]
        assert y.scaleanchor == f"x{suffix}" and x.constrain == y.constrain == "domain"
        tile_w, tile_h = (x.domain[1] - x.domain[0]) * plot_w, (y.domain[1] - y.domain[0]) * plot_h
        assert abs(tile_w - tile_h) <= 1, (index, tile_w, tile_h)  # square: no band above or below the cells
    row = [layout[f"xaxis{'' if i == 0 else i + 1}"].domain for i in range(heads)]
    assert row[0][0] == 0 and row[-1][1] == pytest.approx(1)  # the tiles span the column
    if layers > 1:  # between two rows, room for the lower row's titles
        room = (layout.yaxis.domain[0] - layout[f"yaxis{heads + 1}"].domain[1]) * plot_h
        assert room >= margins.SUBPLOT_TITLE_PX * (2 if noted else 1)


@pytest.mark.parametrize("n", [2, 1024])
def test_a_token_map_in_a_column_is_square_from_2_tokens_to_1024(n):
    """A map of 2 tokens and one of 1,024 in the Steps page's column: square cells across the column, and as many
    key and query labels as the square holds apart (the 1,024 in a few dozen, not a black band)."""
    from attnviz.views import steps

    tokens = [f"·tok{i}" for i in range(n)]
    values = np.tril(np.ones((n, n), dtype=np.float32)) / np.arange(1, n + 1, dtype=np.float32)[:, None]
    layout = figures.attention_heatmap(values, tokens, "weights", width=steps.PAIR_WIDTH, scale_below=True).layout
    plot_width = steps.PAIR_WIDTH - layout.margin.l - layout.margin.r
    assert layout.height - layout.margin.t - layout.margin.b == plot_width > 150
    assert layout.yaxis.scaleanchor == "x"
    shown_rows, shown_keys = len(layout.yaxis.tickvals), len(layout.xaxis.tickvals)
    if n == 2:
        assert shown_rows == shown_keys == n
    else:
        assert shown_keys >= 4 and shown_rows <= plot_width // figures.ROW_LABEL_PX
    assert shown_keys * figures.COLUMN_LABEL_PX <= plot_width
