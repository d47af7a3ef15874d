"""Charts whose token labels are turned, with an axis title, in a real Chromium at 800 and 1,400 px: the Heads page's
token map and "why this weight" panel (its products, the softmax over the row, several tokens summed), the Steps
page's pair, the Compare page's cards and the Induction lab's stripe map.  Around each turned axis its labels, then its
title, then the figure's foot, the next panel's title or the chart's title (with the title's gap): no band left empty
(a margin made for more than Chromium draws there), nothing clipped or overlapping, no margin widened by Plotly (drawn
twice); over the products chart's bars, its title then the bars' names, no band between them.  Under the charts whose
token or head labels have no axis title (the Steps page's entropy bars, the Pitfall lab's bar charts, the layers ×
heads score grids and the knock-out grid, upright or turned), the labels end where the legend or the figure's foot
begins."""

from __future__ import annotations

import re
import urllib.parse

import pytest
from helpers.browser import (
    bands_under_axes,
    grown_margins,
    runs,
    serving_checkpoints,
    visit,
    wait_expanded,
    wait_idle,
)

from attnviz.views.margins import TITLE_GAP_PX

pytestmark = pytest.mark.browser

BAND_PX = 6  # the most a chart leaves empty beside a turned axis' title (or over the products' names)
TEXT = urllib.parse.quote("The cat sat on the mat because the cat was tired")

# Each chart holding one of the given strings: its height, plot, chart title (with its subtitle), panel titles, bars'
# names and legend, and each x axis' side, angle, tick labels and title: boxes [top, bottom] in the figure's px.
_AROUND_AXES = """(texts) => [...document.querySelectorAll('[data-testid=stPlotlyChart]')].flatMap((chart) => {
  const gd = chart.querySelector('.js-plotly-plot');
  const layout = gd && gd._fullLayout;
  if (!layout || !layout._size || !texts.some((text) => chart.textContent.includes(text))) return [];
  const figure = gd.getBoundingClientRect();
  const box = (el) => { const b = el.getBoundingClientRect();
    return b.height > 0 ? [b.top - figure.top, b.bottom - figure.top] : null; };
  const span = (els) => { const boxes = els.map(box).filter(Boolean);
    return boxes.length ? [Math.min(...boxes.map((b) => b[0])), Math.max(...boxes.map((b) => b[1]))] : null; };
  const axes = Object.keys(layout).filter((key) => /^xaxis\\d*$/.test(key)).map((key) => layout[key]).map((ax) => ({
    id: ax._id, side: ax.side, angle: ax.tickangle,
    ticks: span([...gd.querySelectorAll(`g.xaxislayer-above g.${ax._id}tick text`)]),
    title: span([...gd.querySelectorAll(`text.${ax._id}title`)])}));
  const legend = gd.querySelector('.legend');
  return [{chart: ((layout.title && layout.title.text) || '').replace(/<[^>]*>/g, ' ').slice(0, 60),
           height: layout.height, plot: [layout._size.t, layout._size.t + layout._size.h],
           title: span([...gd.querySelectorAll('.g-gtitle text, .g-gtitle-subtitle text')]),
           panels: [...gd.querySelectorAll('g.annotation text')].map(box).filter(Boolean),
           names: span([...gd.querySelectorAll('.barlayer text')]), legend: legend && box(legend), axes}];
})"""


def _turned_axes(chart: dict) -> list[dict]:
    return [axis for axis in chart["axes"]
            if axis["ticks"] and axis["title"] and axis["angle"] not in (0, "auto")]


def _bands(chart: dict) -> list[tuple[str, float]]:
    """The px left empty beside each turned axis' title, and over the products chart's bars' names."""
    bands = []
    for axis in _turned_axes(chart):
        (tick_top, tick_bottom), (title_top, title_bottom) = axis["ticks"], axis["title"]
        if axis["side"] == "top":  # labels over the map, its title over them, the chart's title over that
            assert title_bottom <= tick_top + 1 and chart["title"][1] <= title_top, (axis, chart)
            bands.append((f"over {axis['id']}", title_top - chart["title"][1] - TITLE_GAP_PX))
        else:  # its labels, its title, then the next panel's title (with its gap), the legend or the figure's foot
            assert tick_bottom <= title_top + 1 and title_bottom <= chart["height"], (axis, chart)
            after = [(top - TITLE_GAP_PX) for top, _ in chart["panels"] if top >= title_bottom - 1]
            after += [chart["legend"][0]] if chart["legend"] and chart["legend"][0] >= title_bottom else []
            bands.append((f"under {axis['id']}", min(after, default=chart["height"]) - title_bottom))
    if chart["names"] is not None:  # the products: its title, then the highest of the bars' names, in the plot
        assert chart["plot"][0] <= chart["names"][0] and chart["names"][1] <= chart["plot"][1], chart
        bands.append(("over the bars", chart["names"][0] - chart["title"][1] - TITLE_GAP_PX))
    return bands


def _pick(page, label: str, option: str) -> None:
    """Pick ``option`` in the Heads page's token picker ``label`` and wait for its run."""
    picker = page.get_by_test_id("stMain").get_by_test_id("stMultiSelect").filter(has_text=label).first
    before = runs(page)
    picker.get_by_role("combobox").click()
    page.keyboard.type(option)
    page.get_by_role("listbox").get_by_role("option").filter(has_text=re.compile(f"^{re.escape(option)}$")).click()
    page.keyboard.press("Escape")
    wait_idle(page, after=before)


def _sum_picked_tokens(page) -> None:
    expander = page.get_by_test_id("stMain").locator("details").filter(has_text="Sum attention over tokens picked")
    before = runs(page)
    expander.locator("summary").click()
    wait_idle(page, after=before)
    wait_expanded(expander)
    for label, option in (("Query tokens", "8: ·cat"), ("Key tokens", "1: ·cat"), ("Key tokens", "2: ·sat")):
        _pick(page, label, option)


@pytest.mark.parametrize("width", [800, 1400])
@pytest.mark.parametrize(("route", "texts", "charts"), [
    ("heads?cell=3,1", ["weights = softmax", "Σ q[d]·k[d]", "of exp(scaled)"], 3),  # the map, the products, the row
    (f"heads?text={TEXT}", ["weights = softmax", "several tokens at once"], 2),  # the map and the sums (picked)
    ("steps", ["before: scaled", "after: masked"], 2),
    ("compare", ["Multi-head attention"], 1),  # a card's two-line title over its key tokens
    (f"induction?weights={urllib.parse.quote('bundled model')}", ["stripe A[i"], 1),
], ids=["heads map products row", "heads sums", "steps pair", "compare card", "induction stripe map"])
def test_a_turned_axis_holds_its_labels_and_title_and_no_empty_band(page, base_url, route, texts, charts, width):
    page.set_viewport_size({"width": width, "height": 1000})
    visit(page, f"{base_url}/{route}")
    if "several tokens at once" in texts:
        _sum_picked_tokens(page)
    found = [chart for chart in page.evaluate(_AROUND_AXES, texts) if _turned_axes(chart) or chart["names"]]
    assert len(found) >= charts, [chart["chart"] for chart in found]
    assert grown_margins(page) == []
    wide = [(chart["chart"], where, round(band, 1)) for chart in found for where, band in _bands(chart)
            if not 0 <= band <= BAND_PX]
    assert not wide, wide


WIDE = "sixteen-heads"  # a checkpoint whose heads are too many for upright labels on the score and knock-out grids
BUNDLED = urllib.parse.quote("bundled model")


@pytest.fixture(scope="module")
def wide_url(tmp_path_factory, browser_available):
    transformers = pytest.importorskip("transformers")
    import torch

    folder = tmp_path_factory.mktemp("checkpoints")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=16, n_embd=256, n_positions=512)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder / WIDE)
    with serving_checkpoints(folder) as running:
        yield running.url


def _show_every_layer(page) -> None:
    """Tick the Heads page's "Show all N layers", whose run draws every layer's score grid."""
    before = runs(page)
    page.get_by_test_id("stMain").get_by_test_id("stCheckbox").filter(
        has_text=re.compile(r"Show all \d+ layers")).locator("label").click()
    wait_idle(page, after=before)


def _assert_labels_end_the_room(page, texts: list[str], charts: int) -> None:
    found = bands_under_axes(page, texts)
    assert len(found) >= charts, [chart["chart"] for chart in found]
    assert grown_margins(page) == []
    wide = [(chart["chart"], round(chart["band"], 1)) for chart in found if not 0 <= chart["band"] <= BAND_PX]
    assert not wide, wide


@pytest.mark.parametrize("width", [800, 1400])
@pytest.mark.parametrize(("route", "texts", "charts"), [
    ("steps?stage=scaled", ["entropy of each query"], 1),
    ("pitfalls?bug=softmax_dim", ["perturb token", "sum of each query"], 2),  # the leak detector's and the bug's
    ("pitfalls?bug=cache_reset", ["cached vs uncached"], 1),  # upright step labels
    (f"induction?weights={BUNDLED}", ["every head on", "knock out one head"], 2),  # upright head labels
], ids=["steps entropy", "pitfall leak and row sums", "pitfall cache", "induction grids upright"])
def test_labels_with_no_axis_title_end_where_the_legend_or_the_foot_begins(page, base_url, route, texts, charts,
                                                                          width):
    page.set_viewport_size({"width": width, "height": 1000})
    visit(page, f"{base_url}/{route}")
    _assert_labels_end_the_room(page, texts, charts)


@pytest.mark.parametrize("width", [800, 1400])
def test_turned_head_labels_end_where_the_grid_ends(page, wide_url, width):
    page.set_viewport_size({"width": width, "height": 1000})
    visit(page, f"{wide_url}/induction?weights={WIDE}")
    _assert_labels_end_the_room(page, ["every head on", "knock out one head"], 2)
    visit(page, f"{wide_url}/heads?weights={WIDE}")
    _show_every_layer(page)
    _assert_labels_end_the_room(page, ["every layer's heads"], 1)
