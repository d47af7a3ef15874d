"""The Compare page's "Why ÷√dₖ?" chart: softmax saturation against dₖ, with and without the scaling, from the
statistics :mod:`attnviz.ablation` computes, and the words that go with it."""

from __future__ import annotations

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
LEGEND_ROWS = 2  # the legend's four entries: room for them on two rows under the axes, however narrow the page


PLOT_PX = 206  # the three panels' height, between their titles and their dₖ axes


def scaling_ablation_figure(ablation: dict, run: dict | None = None, plot_px: int = PLOT_PX) -> go.Figure:
    """Three panels vs dₖ (log₂ x axis): score variance, mean row entropy, mean max weight, each with
    and without ÷√dₖ; ``run`` (from ``ablation.run_point``) is drawn as highlighted stars (its dₖ is in the
    legend and the hover; the ticks stay at the ablation's dₖ values so they never collide).

    The margins hold the axes' labels and the legend (at the figure's foot), so Plotly draws it once; ``plot_px``:
    the panels' height, to which the figure adds them."""
    dks = [int(d) for d in ablation["dk"]]
    fig = make_subplots(rows=1, cols=3, subplot_titles=[METRIC_TITLES[m] for m in METRICS],
                        horizontal_spacing=0.08)
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
    # a label at every other dₖ (1, 4, 16 …): eleven side by side run together in a panel a third of a narrow page
    labels = [str(d) if index % 2 == 0 else "" for index, d in enumerate(dks)]
    fig.update_xaxes(type="log", tickvals=dks, ticktext=labels, tickangle=0, tickfont={"size": 10},
                     title={"text": "dₖ (log₂ scale)", "standoff": 4}, **margins.LABELS_HELD)
    # a label at each power of 10 only: Plotly's own log ticks add 2 and 5 between them, and "1000 5 2 100 5 2 10"
    # reads as one run of numbers
    fig.update_yaxes(type="log", dtick=1, row=1, col=1)
    fig.update_yaxes(range=[0, 1.05], row=1, col=3)
    mask = "causal rows" if ablation["causal"] else "all keys"
    margin = {"l": margins.beside(title=False), "r": 10,
              "t": margins.title_top(size=13, above_plot=margins.SUBPLOT_TITLE_PX),
              "b": margins.across([], angle=0) + LEGEND_ROWS * margins.LEGEND_ROW_PX}
    fig.update_layout(
        title=margins.title(f"Softmax saturation vs dₖ — random q, k ~ N(0, 1), {ablation['num_tokens']} tokens, "
                            f"{mask}, seed {ablation['seed']}", 13),
        height=margins.height(plot_px, margin), margin=margin, legend=margins.LEGEND_AT_FOOT,
    )
    return fig
