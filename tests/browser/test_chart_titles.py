"""Chart titles in a real Chromium: on a touch screen (no pointer that hovers) Plotly shows the modebar always, over
the figure's top right corner; every title sits clear of it, and its buttons stay on top.  The Steps page's map titles
in the narrowest column fit it in as few lines as their words need."""

from __future__ import annotations

import pytest
from helpers.browser import IDLE_TIMEOUT_MS, RUN_COUNTER, assert_no_exception, grown_margins, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Each chart's title (with its subtitle) and modebar as boxes, whether the modebar shows only on hover, and whether
# each of its buttons is the element on top at its centre (the chart scrolled into view first).
_TITLES_AND_MODEBARS = """() => [...document.querySelectorAll('[data-testid=stMain] .js-plotly-plot')].map((gd) => {
  gd.scrollIntoView({block: 'center'});
  const box = (el) => { const r = el.getBoundingClientRect(); return {x: r.x, y: r.y, w: r.width, h: r.height}; };
  const parts = [...gd.querySelectorAll('text.gtitle, text.gtitle-subtitle')].map(box).filter((b) => b.w > 0);
  const title = parts.length ? {x: Math.min(...parts.map((b) => b.x)), y: Math.min(...parts.map((b) => b.y)),
                                w: Math.max(...parts.map((b) => b.x + b.w)) - Math.min(...parts.map((b) => b.x)),
                                h: Math.max(...parts.map((b) => b.y + b.h)) - Math.min(...parts.map((b) => b.y))}
                              : null;
  const bar = gd.querySelector('.modebar');
  const buttons = bar ? [...bar.querySelectorAll('.modebar-btn')] : [];
  const onTop = buttons.map((button) => { const b = box(button);
    const hit = document.elementFromPoint(b.x + b.w / 2, b.y + b.h / 2); return !!hit && button.contains(hit); });
  return {text: gd.querySelector('text.gtitle')?.textContent || '', title, modebar: bar ? box(bar) : null,
          onHover: !!bar && bar.classList.contains('modebar--hover'), buttons: buttons.length, onTop};
})"""


def _overlap(a: dict, b: dict) -> bool:
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
            and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])


@pytest.fixture
def touch_page(browser):
    """A session in a context with a touch screen and no mouse: CSS ``(hover: none)``, where Plotly shows the modebar
    always (its ``displayModeBar: "hover"``, the default, becomes ``true``)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, has_touch=True)
    context.set_default_timeout(IDLE_TIMEOUT_MS)
    tab = context.new_page()
    tab.add_init_script(RUN_COUNTER)
    yield tab
    context.close()


@pytest.mark.parametrize("width", [1400, 1920])
@pytest.mark.parametrize(("route", "charts"), [("compare", 11), ("steps", 2)])
def test_every_chart_title_is_clear_of_the_modebar_shown_over_its_corner(touch_page, base_url, route, charts, width):
    """Compare's ten maps a third of the page wide and the Steps page's before/after pair: each title (its second
    line too) lies outside the modebar's box, which shows always here, and every button is the element on top at its
    centre (nothing covers it). The room is made up front: no chart draws twice."""
    page = touch_page
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto(f"{base_url}/{route}")
    wait_idle(page)
    assert_no_exception(page)
    shown = page.evaluate(_TITLES_AND_MODEBARS)
    assert len(shown) == charts, [chart["text"] for chart in shown]
    for chart in shown:
        chart_name = chart["text"][:60]
        assert chart["title"] is not None and chart["modebar"] is not None, chart_name
        assert not chart["onHover"], f"{chart_name}: the modebar shows only on hover, not always as on a touch screen"
        assert not _overlap(chart["title"], chart["modebar"]), (chart_name, chart["title"], chart["modebar"])
        assert chart["buttons"] >= 3 and all(chart["onTop"]), (chart_name, chart["onTop"])  # zoom, pan, reset …
    assert grown_margins(page) == []


# Each chart's title lines as Chromium draws them in the chart's own title font, and the fewest lines its words need
# (the words filled into lines of the chart's width, less the title's inset, measured the same way).
_TITLE_LINES = """(inset) => [...document.querySelectorAll('[data-testid=stMain] [data-testid=stPlotlyChart]')]
.map((chart) => {
  const title = chart.querySelector('text.gtitle');
  if (!title) return null;
  const room = chart.getBoundingClientRect().width - inset;
  const probe = title.cloneNode(false);  // in the weight its lines are drawn in (a <b> title's tspans are bold)
  probe.style.fontWeight = getComputedStyle(title.querySelector('tspan:not(:has(tspan))') || title).fontWeight;
  title.parentNode.appendChild(probe);
  const width = (text) => { probe.textContent = text; return probe.getComputedTextLength(); };
  const spans = [...title.querySelectorAll('tspan.line')];
  const lines = (spans.length ? spans : [title]).map((line) => line.textContent);
  let fewest = [];
  for (const word of lines.join(' ').split(' ')) {
    const joined = fewest.length ? `${fewest[fewest.length - 1]} ${word}` : word;
    if (fewest.length && width(joined) <= room) fewest[fewest.length - 1] = joined; else fewest.push(word);
  }
  const drawn = lines.map(width);
  probe.remove();
  return {lines, widths: drawn, room, fewest: fewest.length};
}).filter((chart) => chart)"""


@pytest.mark.parametrize("query", ["variant=simplified&stage=masked", "variant=swa&stage=weights",
                                   "variant=causal&causal=false&stage=weights", "variant=simplified&stage=scaled",
                                   "variant=swa&sliding_window_size=1024&stage=weights"])
def test_the_steps_maps_titles_fit_the_narrowest_column_in_as_few_lines_as_they_need(page, base_url, query):
    """At 864 px, with the sidebar open, the Steps page's maps are their narrowest (steps.NARROWEST_MAP_PX): every
    title line fits its map as Chromium draws it, and a title takes at most one line more than its words need there
    (a break between phrases may cost a line; a width estimate too wide would break titles that fit)."""
    from attnviz.views import margins, steps

    page.set_viewport_size({"width": 864, "height": 1000})
    page.goto(f"{base_url}/steps?{query}")
    wait_idle(page)
    assert_no_exception(page)
    charts = page.evaluate(_TITLE_LINES, margins.TITLE_INSET_PX)
    assert charts, "no chart title on the page"
    for chart in charts:
        assert chart["room"] == steps.NARROWEST_MAP_PX - margins.TITLE_INSET_PX, chart
        assert max(chart["widths"]) <= chart["room"], chart
        assert len(chart["lines"]) <= chart["fewest"] + 1, chart
        if chart["fewest"] == 1:  # it fits on one line: it is drawn on one
            assert len(chart["lines"]) == 1, chart
