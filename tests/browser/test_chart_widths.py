"""Charts across the page in a real Chromium at 800 and 1,400 px: the Compare page's saturation chart, the Induction
lab's loss charts, the Pitfall lab's leak bars and a bug's bars fill the page's column, drawn once in the margins they
asked for (nothing Plotly had to widen at a narrow window: a tick label past the edge, a legend on more rows than its
margin holds), their legend clear of the axis above it; and under a chart's numbered x axis, its numbers and title
and no empty band before its legend or its foot."""

from __future__ import annotations

import urllib.parse

import pytest
from helpers.browser import bands_under_axes, grown_margins, visit

pytestmark = pytest.mark.browser

BUNDLED = urllib.parse.quote("bundled model")

# each chart's column, the margins its figure asked for and those Plotly drew, its plot, its legend's box and the foot
# of what its x axes write under the plot, labels and titles (the figure's coordinates)
_CHARTS = """(titles) => [...document.querySelectorAll('[data-testid=stPlotlyChart]')].flatMap((chart) => {
  const gd = chart.querySelector('.js-plotly-plot');
  const layout = gd && gd._fullLayout;
  const title = ((layout && layout.title && layout.title.text) || '').replace(/<[^>]*>/g, ' ');
  if (!layout || !titles.some((t) => title.includes(t))) return [];
  const column = chart.closest('[data-testid=stVerticalBlock]').getBoundingClientRect();
  const figure = gd.getBoundingClientRect();
  const box = (el) => { if (!el) return null; const b = el.getBoundingClientRect();
    return {top: b.top - figure.top, bottom: b.bottom - figure.top}; };
  const under = [...gd.querySelectorAll('g.xaxislayer-above text, text.xtitle, text.x2title, text.x3title')]
    .map(box);
  return [{title, column: column.width, figure: figure.width, height: figure.height,
           asked: {l: layout.margin.l, r: layout.margin.r, t: layout.margin.t, b: layout.margin.b},
           drawn: {l: layout._size.l, r: layout._size.r, t: layout._size.t, b: layout._size.b},
           plot: layout._size.w, legend: box(gd.querySelector('.legend')),
           axisBottom: Math.max(0, ...under.map((b) => b.bottom))}];
})"""


@pytest.mark.parametrize("width", [800, 1400])
@pytest.mark.parametrize(("route", "titles"), [
    ("compare", ["Softmax saturation"]),
    (f"induction?weights={BUNDLED}", ["loss at each position", "knocked out vs intact"]),
    ("pitfalls", ["perturb token"]),
    ("pitfalls?bug=rope_queries_only", ["the first token at every position"]),  # three series in its legend
], ids=["compare saturation", "induction losses", "pitfall leak bars", "pitfall rotary bars"])
def test_a_chart_across_the_page_fills_its_column_in_the_margins_it_asked_for(page, base_url, route, titles, width):
    page.set_viewport_size({"width": width, "height": 1000})
    visit(page, f"{base_url}/{route}")
    charts = page.evaluate(_CHARTS, titles)
    assert len(charts) == len(titles), [chart["title"] for chart in charts]
    for chart in charts:
        name = chart["title"][:40]
        assert abs(chart["figure"] - chart["column"]) <= 1, (name, chart)  # across its column, no wider
        assert chart["drawn"] == chart["asked"], (name, chart)  # drawn once: no margin grown
        # the plot takes the column but for the margins it asked for: no band Plotly added beside or under it
        assert abs(chart["plot"] - (chart["column"] - chart["asked"]["l"] - chart["asked"]["r"])) <= 1, (name, chart)
        legend = chart["legend"]
        if legend is not None:  # under the axis title, inside the figure
            assert chart["axisBottom"] <= legend["top"] and legend["bottom"] <= chart["height"] + 1, (name, chart)


BAND_PX = 12  # the most a chart leaves empty under its axis' title (its margin's room for what is under the axis)


@pytest.mark.parametrize("width", [800, 1400])
@pytest.mark.parametrize(("route", "texts"), [
    ("compare", ["Softmax saturation"]),
    (f"induction?weights={BUNDLED}", ["loss at each position", "knocked out vs intact"]),
    ("tokens", ["embedding (", "input = token"]),
    ("generate", ["KV cache of the sidebar"]),
    ("heads?cell=3,1", ["Σ q[d]·k[d]"]),  # the "why this weight" products of the linked cell
], ids=["compare saturation", "induction losses", "tokens embeddings", "generate kv cache", "heads products"])
def test_a_chart_s_margin_under_its_axis_holds_its_numbers_and_title_and_no_empty_band(page, base_url, route, texts,
                                                                                        width):
    """Under a chart's x axis, its numbers, then its title, then the legend or the figure's foot: no band left empty
    between them (a margin made for more than Plotly draws there), none widened by Plotly (drawn twice)."""
    page.set_viewport_size({"width": width, "height": 1000})
    visit(page, f"{base_url}/{route}")
    charts = bands_under_axes(page, texts)
    assert charts, texts
    assert grown_margins(page) == []
    for chart in charts:
        assert chart["lowest"] > chart["plotBottom"] and 0 <= chart["band"] <= BAND_PX, chart


# the Induction lab's stripe map: its figure, its plot, its cells (the map's image) and its legend, in the figure's px
_STRIPE_MAP = """() => [...document.querySelectorAll('[data-testid=stPlotlyChart]')].filter(
    (chart) => chart.textContent.includes('stripe A[i')).map((chart) => {
  const gd = chart.querySelector('.js-plotly-plot');
  const size = gd._fullLayout._size;
  const figure = gd.getBoundingClientRect();
  const cells = gd.querySelector('g.heatmaplayer g.hm image, g.imagelayer g.im image').getBoundingClientRect();
  const legend = gd.querySelector('.legend').getBoundingClientRect();
  return {figure: figure.width, column: chart.parentElement.getBoundingClientRect().width,
          plot: {w: size.w, h: size.h}, cells: {w: cells.width, h: cells.height},
          band: legend.top - cells.bottom};
})"""


@pytest.mark.parametrize("width", [800, 1400])
def test_the_stripe_map_s_square_cells_fill_its_plot_with_its_legend_under_them(page, base_url, width):
    page.set_viewport_size({"width": width, "height": 1000})
    visit(page, f"{base_url}/induction?weights={BUNDLED}")
    (stripe,) = page.evaluate(_STRIPE_MAP)
    assert stripe["figure"] <= stripe["column"] + 1, stripe
    assert abs(stripe["cells"]["w"] - stripe["cells"]["h"]) <= 1, stripe  # square cells
    # the column does not shrink the figure its height was made for: the cells fill the plot both ways
    cells, plot = stripe["cells"], stripe["plot"]
    assert abs(cells["w"] - plot["w"]) <= 1 and abs(cells["h"] - plot["h"]) <= 1, stripe
    assert 0 <= stripe["band"] <= 6, stripe  # the legend right under the cells
    assert grown_margins(page) == []
