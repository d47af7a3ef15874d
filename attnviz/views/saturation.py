"""The Compare page's "Why ÷√dₖ?" chart: softmax saturation against dₖ, with and without the scaling, from the
statistics :mod:`attnviz.ablation` computes, and the words that go with it."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnviz.ablation import METRICS, MODES
from attnviz.views import margins

MODE_NAMES = {"scaled": "softmax(q·k ÷ √dₖ)", "unscaled": "softmax(q·k) — no scaling"}
MODE_COLORS = {"scaled": "#1f77b4", "unscaled": "#d62728"}
METRIC_TITLES = {
    "variance": "variance of the scores",
    "entropy": "mean row entropy (nats)",
    "max_weight": "mean max weight per row",
}
# the panels' titles, on two lines each: one line runs into its neighbour's over a panel a third of a narrow page
PANEL_TITLES = {
    "variance": "variance of<br>the scores",
    "entropy": "mean row entropy<br>(nats)",
    "max_weight": "mean max weight<br>per row",
}
EXPLANATION = (
    "Each score q·k is a sum of dₖ products. With q and k entries of variance 1 its variance is dₖ, so "
    "without scaling a bigger head spreads the scores further apart and softmax **saturates**: nearly all "
    "the weight lands on one key (entropy → 0, max weight → 1) and the gradients through softmax vanish. "
    "Dividing by √dₖ keeps the variance at 1 for every dₖ. Lines: random q, k with N(0, 1) entries, as many "
    "tokens as this run. ★: this run's head {head} ({variant}) at its own dₖ = {dk}; its q, k entries are not "
    "N(0, 1) (their spread comes from the embedding and weight initialisation), so the stars need not sit on "
    "the lines."
)
NO_RUN = "No ★ for this run. {why}"  # a run that recorded no queries and keys
LEGEND_PER_ROW = 2  # the legend's entries a row (a mode's line and its star), at any page width
# an entry's share of the plot's width: a little under 1 / LEGEND_PER_ROW, as Plotly starts a new row before
# entries and the gaps between them fill the plot (at 0.49 it draws one entry a row)
LEGEND_ENTRY_SHARE = 0.45
LEGEND_ROW_PX = 24  # a row of the legend: its stars are taller than a line's sample
SPACING = 0.08  # between the panels, a share of the plot's width
PANEL_TITLE_PX = 13  # the panels' titles
TICK_FONT_PX = 10  # the dₖ axes' labels
TICK_GAP_PX = 8  # between two dₖ labels


PLOT_PX = 206  # the three panels' height, between their titles and their dₖ axes


def _powers_px(values) -> int:
    """The widest label of a log axis labelled at each power of 10 (``dtick=1``) that spans ``values``: Plotly writes
    0.001 … 1000 whole and the others with an SI prefix ("10k", "100µ"), four characters at most."""
    positive = [float(v) for v in values if np.isfinite(v) and v > 0]
    if not positive:
        return margins.NUMBER_PX
    powers = range(math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive))) + 1)
    return margins.text_px(f"{10.0 ** k:g}" if -3 <= k <= 3 else "100k" for k in powers)


def _dk_labels(dks: list[int], panel_px: float) -> list[str]:
    """A label at every k-th dₖ (1, then every k-th after it), k the fewest that keeps the labels apart in a panel
    ``panel_px`` wide: eleven side by side run together in a panel a third of a narrow page."""
    widest = margins.text_px(str(d) for d in dks) * TICK_FONT_PX / 12
    every = 1
    while every < len(dks) and panel_px * every / max(1, len(dks) - 1) < widest + TICK_GAP_PX:
        every += 1
    return [str(d) if index % every == 0 else "" for index, d in enumerate(dks)]


def panel_width(left: int, right: int, width: int = margins.PAGE_MIN_PX) -> float:
    """A panel's width in px in a chart ``width`` px wide (the narrowest page's) with these left and right margins."""
    return (width - left - right) * (1 - 2 * SPACING) / 3


def scaling_ablation_figure(ablation: dict, run: dict | None = None, plot_px: int = PLOT_PX) -> go.Figure:
    """Three panels vs dₖ (log₂ x axis): score variance, mean row entropy, mean max weight, each with
    and without ÷√dₖ; ``run`` (from ``ablation.run_point``) is drawn as highlighted stars (its dₖ is in the
    legend and the hover; the ticks stay at the ablation's dₖ values so they never collide).

    The margins hold the axes' labels and the legend (at the figure's foot, a mode's line and its star a row), so
    Plotly draws it once; ``plot_px``: the panels' height, to which the figure adds them.  The chart is drawn across
    the page: its title and the panels' titles are broken into lines, and its dₖ labels spaced, for the narrowest page
    (:data:`~attnviz.views.margins.PAGE_MIN_PX`), so they read at any width."""
    dks = [int(d) for d in ablation["dk"]]
    variances = [*ablation["scaled"]["variance"], *ablation["unscaled"]["variance"]]
    if run is not None:
        variances += [run["scaled"]["variance"], run["unscaled"]["variance"]]
    labels_px = math.ceil(margins.text_px([str(dks[-1])]) * TICK_FONT_PX / 12)  # the last dₖ's, centred on the edge
    left, right = margins.TICK_PAD_PX + min(_powers_px(variances), margins.NUMBER_PX), max(10, labels_px // 2 + 4)
    panel_px = panel_width(left, right)
    titles = [PANEL_TITLES[m] for m in METRICS]
    fig = make_subplots(rows=1, cols=3, subplot_titles=titles, horizontal_spacing=SPACING)
    fig.update_annotations(font={"size": PANEL_TITLE_PX})  # the panels' titles: the only annotations yet
    for col, metric in enumerate(METRICS, start=1):
        for mode in MODES:
            fig.add_trace(go.Scatter(
                x=ablation["dk"], y=ablation[mode][metric], mode="lines+markers", name=MODE_NAMES[mode],
                legendgroup=mode, showlegend=col == 1, line={"color": MODE_COLORS[mode]},
                hovertemplate=f"dₖ = %{{x}}<br>{METRIC_TITLES[metric]} %{{y:.4g}}<extra>{MODE_NAMES[mode]}</extra>",
            ), row=1, col=col)
            if run is not None:
                fig.add_trace(go.Scatter(
                    x=[run["dk"]], y=[run[mode][metric]], mode="markers", name=f"this run, {mode} (dₖ = {run['dk']})",
                    legendgroup=f"run-{mode}", showlegend=col == 1,
                    marker={"symbol": "star", "size": 16, "color": MODE_COLORS[mode],
                            "line": {"color": "black", "width": 1.5}},
                    hovertemplate=f"this run, head {run['head']}<br>dₖ = %{{x}}<br>{METRIC_TITLES[metric]} "
                                  f"%{{y:.4g}}<extra>{MODE_NAMES[mode]}</extra>",
                ), row=1, col=col)
    fig.add_hline(y=ablation["uniform_entropy"], line={"dash": "dot", "color": "grey"}, row=1, col=2,
                  annotation_text="uniform", annotation_position="bottom left")
    fig.update_xaxes(type="log", tickvals=dks, ticktext=_dk_labels(dks, panel_px), tickangle=0,
                     tickfont={"size": TICK_FONT_PX},
                     title=margins.axis_title("dₖ (log₂ scale)"), **margins.LABELS_HELD)
    # a label at each power of 10 only: Plotly's own log ticks add 2 and 5 between them, and "1000 5 2 100 5 2 10"
    # reads as one run of numbers
    fig.update_yaxes(type="log", dtick=1, row=1, col=1)
    fig.update_yaxes(range=[0, 1.05], row=1, col=3)
    mask = "causal rows" if ablation["causal"] else "all keys"
    title = margins.wrapped_title(f"Softmax saturation vs dₖ — random q, k ~ N(0, 1), {ablation['num_tokens']} "
                                  f"tokens, {mask}, seed {ablation['seed']}", margins.PAGE_MIN_PX, 13)
    title_lines = max(title.count("<br>") for title in titles) + 1
    legend_rows = math.ceil(sum(trace.showlegend is not False for trace in fig.data) / LEGEND_PER_ROW)
    margin = {"l": left, "r": right,
              "t": margins.title_top(title.count("<br>") + 1, size=13,
                                     above_plot=margins.SUBPLOT_TITLE_PX * title_lines),
              "b": margins.under_axis(TICK_FONT_PX) + legend_rows * LEGEND_ROW_PX + margins.LEGEND_PAD_PX}
    fig.update_layout(
        title=margins.title(title, 13), height=margins.height(plot_px, margin), margin=margin,
        legend={**margins.LEGEND_AT_FOOT, "entrywidth": LEGEND_ENTRY_SHARE, "entrywidthmode": "fraction"},
    )
    return fig
