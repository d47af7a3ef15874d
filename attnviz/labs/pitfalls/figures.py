"""Pitfall lab, the figures: Plotly builders for the lab's heatmaps, bar charts and the leak detector.

Pure Plotly: they take results and labels, never run a model, never touch Streamlit.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from attnviz.labs.pitfalls.catalogue import PITFALLS, PitfallResult
from attnviz.labs.pitfalls.detectors import Observation
from attnviz.views import figures, margins

LEAK_COLOR, STILL_COLOR, PERTURBED_COLOR, AFTER_COLOR = "#d62728", "#7f7f7f", "#ff7f0e", "#1f77b4"
TOO_SMALL_TO_SEE = 1e-4  # a bar below this can't be seen: the cache chart labels it, a bar chart's legend says so
UPRIGHT_LABELS_PX = 400  # the widest row of upright category labels a bar chart has room for on a page
# the leak detector's colours, in its legend's order: what a bar of each colour says
LEAK_LEGEND = {PERTURBED_COLOR: "the perturbed token", STILL_COLOR: "before it, exactly 0 (no leak)",
               LEAK_COLOR: "before it, moved (a leak)", AFTER_COLOR: "after it (free to move)"}


# --------------------------------------------------------------------------- figures

def weights_figure(observation: Observation, tokens, *, head: int = 0, stage: str = "weights",
                   dropout: float = 0.0, width: int = figures.PAIR_MAP_PX) -> go.Figure:
    """One head's weights; cells whose score really was −∞ (masked) are grey — what is drawn is what the
    code did, so an ineffective mask shows as coloured cells above the diagonal.  No title (pages say
    which version it is): at this size a title would collide with the key-token axis on top.  Its cells are hovered,
    never selected (the lab explains no cell): their overlay is :func:`~attnviz.views.figures.undrawn_points`, no
    node a cell.  ``width``: the chart's (the page's column for it): its cells are square across it, and its key
    tokens' labels as many as that width holds without overlapping."""
    values = observation.maps[stage][head].astype(np.float32).copy()  # (n, n)
    values[np.isneginf(observation.maps["masked"][head])] = np.nan  # masked by the code -> grey gap
    fig = figures.attention_heatmap(values, tokens[: values.shape[0]], stage, causal=False, dropout=dropout,
                                    title_px=0, width=width)
    nan_rows, nan_cols = np.nonzero(np.isnan(observation.maps[stage][head]))  # computed NaN, not a masked gap
    if nan_rows.size:
        fig.add_trace(go.Scatter(x=nan_cols, y=nan_rows, mode="text",  # (key, query) positions, as the map's
                                 text=["NaN"] * nan_rows.size, textfont={"color": LEAK_COLOR, "size": 11},
                                 name="NaN", showlegend=False, hoverinfo="skip"))
    fig.update_traces(figures.undrawn_points(), selector={"xaxis": "x2"})  # the cell overlay: hover only
    fig.update_layout(title={"text": ""})
    return fig


def _bar_layout(title: str, labels: list[str], y_title: str, *, legend_labels: list[str],
                above_plot: int = 0, angle: float = 60, high: float | None = None) -> dict:
    """A bar chart's layout: its title under the modebar's row, on as many lines as a chart
    :data:`~attnviz.views.figures.PAIR_MAP_PX` wide needs (the page's column beside the sidebar in a 900 px window is
    wider), ``above_plot`` px under it, ``labels`` under the bars (turned ``angle``°, 0: upright) and the legend at
    the figure's foot, its entries ``legend_labels`` one a row whatever the page's width; margins that hold them all
    and no more, so Plotly draws the chart once and leaves no band under the labels.  ``high``: the tallest bar, whose
    numbers the left margin is made for (None: any number's width)."""
    title = margins.wrapped_title(title, figures.PAIR_MAP_PX, 13)
    top = margins.title_top(title.count("<br>") + 1, size=13, above_plot=above_plot)
    legend_layout, legend_px = margins.legend_one_a_row(legend_labels)
    below = margins.labels_under(labels, angle=angle) + legend_px
    left = margins.beside() if high is None else margins.beside_numbers(0.0, high)
    return {"title": margins.title(title, 13), "yaxis_title": y_title, "height": 190 + top + below,
            "xaxis": {"automargin": False},  # the bottom margin holds the labels: none is widened
            "margin": {"l": left, "r": margins.TURNED_LABELS_PX, "t": top, "b": below},
            "legend": legend_layout}


def _bars(tokens, series: list[tuple[str, np.ndarray, str]], title: str, y_title: str,
          reference: float | None = None) -> go.Figure:
    labels = figures.position_labels(tokens)
    fig = go.Figure([go.Bar(x=labels[: len(values)], y=values, name=name + _invisible_note(values), marker_color=color,
                            text=["0" if value == 0 else "" for value in values], textposition="outside")
                     for name, values, color in series])  # exact zeros would otherwise be invisible
    if reference is not None:
        fig.add_hline(y=reference, line_dash="dot", line_color="black")
    ticktext = [figures.safe_label(t) for t in tokens[: len(series[0][1])]]
    # the legend one series a row, whatever the page's width (a narrow page's column wraps three onto three rows)
    fig.update_layout(barmode="group", **_bar_layout(title, ticktext, y_title,
                                                     legend_labels=[trace.name for trace in fig.data]))
    fig.update_xaxes(type="category", tickangle=-60, tickmode="array", tickvals=labels[: len(series[0][1])],
                     ticktext=ticktext)
    return fig


def _invisible_note(values) -> str:
    """A series' legend note where none of its bars can be seen: its largest value ("≤ 1e-06", float32 round-off of
    a correct version; :func:`_too_small_to_see`), so that its entry does not stand for bars that are not there; ""
    where a bar shows, or where all are 0 (each bar says so)."""
    finite = np.abs(np.asarray(values, dtype=np.float64))
    finite = finite[np.isfinite(finite)]
    size = _too_small_to_see(float(finite.max())) if finite.size else ""
    return f" (≤ {size})" if size not in ("", "0") else ""


def row_sums_figure(result: PitfallResult, tokens) -> go.Figure:
    """(2) Row sums of the weights (mean over heads): 1 for the correct code, not for the bug."""
    return _bars(tokens, [("correct: row sums", result.correct.details["row_sums"], AFTER_COLOR),
                          ("bug: row sums", result.buggy.details["row_sums"], LEAK_COLOR),
                          ("bug: column sums", result.buggy.details["column_sums"], STILL_COLOR)],
                 "sum of each query's weights (mean over heads); dotted line = 1", "sum", reference=1.0)


def entropy_figure(result: PitfallResult, tokens) -> go.Figure:
    """(3) Entropy of each query's weights (mean over heads), ÷√head_dim vs ÷√d_out."""
    setup = result.setup
    return _bars(tokens, [(f"÷√head_dim = ÷√{setup.head_dim}", result.correct.details["entropy"], AFTER_COLOR),
                          (f"÷√d_out = ÷√{setup.d_out}", result.buggy.details["entropy"], LEAK_COLOR)],
                 "entropy of each query's weights (nats, mean over heads; higher = flatter)", "nats")


def call_difference_figure(result: PitfallResult, tokens) -> go.Figure:
    """(6) max |output of call 1 − output of call 2| per position."""
    return _bars(tokens, [("correct (eval mode)", result.correct.details["call_delta"], AFTER_COLOR),
                          ("bug (training mode)", result.buggy.details["call_delta"], LEAK_COLOR)],
                 "same input, two calls: max |Δ output| per position (0 = identical)", "max |Δ output|")


def leak_figure(report: dict, tokens) -> go.Figure:
    """|Δ output| per position after perturbing token j, each bar coloured by what it means: orange = token j, grey =
    before it and exactly 0, red = before it and moved (a leak), blue = after it (free to move).  The legend names
    every colour the chart draws, and only those (its entries are markers with no data: the bars stay one trace), one
    a row, so that the margin under the bars holds it at any page width; the left margin holds the bars' numbers."""
    delta, j = report["delta"], report["j"]
    leaked = set(report["leaked"])
    labels = figures.position_labels(tokens)[: len(delta)]
    colors = [PERTURBED_COLOR if p == j else LEAK_COLOR if p in leaked else STILL_COLOR if p < j else AFTER_COLOR
              for p in range(len(delta))]
    text = ["NaN" if math.isnan(d) else "0" if d == 0 else f"{d:.2g}" for d in delta]
    shown = np.where(np.isnan(delta), 0.0, delta)
    ticktext = [figures.safe_label(t) for t in tokens[: len(delta)]]
    fig = go.Figure(go.Bar(x=labels, y=shown, marker_color=colors, text=text, textposition="outside",
                           cliponaxis=False, showlegend=False,
                           hovertemplate="%{x}<br>max |Δ output| %{text}<extra></extra>"))
    meanings = [meaning for color, meaning in LEAK_LEGEND.items() if color in colors]
    for color, meaning in LEAK_LEGEND.items():
        if color in colors:
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=meaning, hoverinfo="skip",
                                     marker={"symbol": "square", "size": 12, "color": color}))
    fig.update_layout(**_bar_layout(f"perturb token {j} — max |Δ output| at every position", ticktext,
                                    "max |Δ output|", above_plot=10, high=float(shown.max(initial=0.0)),
                                    legend_labels=meanings))
    fig.update_xaxes(type="category", tickangle=-60, tickmode="array", tickvals=labels, ticktext=ticktext)
    return fig


def rotary_figure(result: PitfallResult, tokens) -> go.Figure:
    """(10), (11) One token repeated at every position: each row's largest departure of a score from its
    diagonal (i − j), and each output's distance from position 0's — both 0 for rotary on q and k."""
    return _bars(tokens, [("correct: score off its diagonal", result.correct.details["score_spread"], AFTER_COLOR),
                          ("bug: score off its diagonal", result.buggy.details["score_spread"], LEAK_COLOR),
                          ("bug: |output − output 0|", result.buggy.details["output_spread"], STILL_COLOR)],
                 "the first token at every position: 0 = the score depends on i − j only / the output on no "
                 "position", "largest difference")


def _too_small_to_see(value: float | None) -> str:
    """A bar's label where the bar is too small to see: "0", or its size (float32 round-off, "1e-07")."""
    if value is None or not value < TOO_SMALL_TO_SEE:  # none (the step raised), NaN, or a visible bar
        return ""
    return "0" if value == 0 else f"{value:.0e}"


def cache_figure(result: PitfallResult) -> go.Figure:
    """(12)–(14) Largest |cached − uncached| output of every cached forward: sequence 1's prefill and tokens,
    then sequence 2's after the reset, numbered as the verdicts number them (0 everywhere for a correct cache; a
    missing bar: the step raised)."""
    labels = [label for label, _ in result.correct.details["steps"]]
    fig = go.Figure([go.Bar(x=[label for label, _ in version.details["steps"]],
                            y=[value for _, value in version.details["steps"]], name=name, marker_color=color,
                            text=[_too_small_to_see(value) for _, value in version.details["steps"]],
                            textposition="outside", textangle=-90)  # a correct cache's bars are round-off: their
                     # size is written, upright along its bar, where side by side two labels would run into each other
                     for name, version, color in (("correct", result.correct, AFTER_COLOR),
                                                  ("bug", result.buggy, LEAK_COLOR))])
    angle = 0 if margins.text_px(labels) * len(labels) <= UPRIGHT_LABELS_PX else 60  # turned only where crowded
    fig.update_layout(barmode="group", **_bar_layout("cached vs uncached: max |Δ output| of each cached forward "
                                                     "(sequence 1, then sequence 2 after the reset)", labels,
                                                     "max |Δ output|", angle=angle,
                                                     legend_labels=[trace.name for trace in fig.data]))
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=labels, tickangle=-angle)
    return fig


def extra_figure(result: PitfallResult, tokens) -> go.Figure | None:
    """The pitfall's own chart under the two heatmaps (row sums, entropy, call difference, rotary's repeated
    token, the cached steps), None if it has none."""
    if PITFALLS[result.key].figure == "cache":
        return cache_figure(result)
    builder = {"row_sums": row_sums_figure, "entropy": entropy_figure, "dropout": call_difference_figure,
               "rotary": rotary_figure}.get(PITFALLS[result.key].figure)
    return None if builder is None else builder(result, tokens)
