"""The Compare page in a real Chromium: a map per variant drawn, live badges, no exception; saves
docs/screenshots/compare.png."""

from __future__ import annotations

import pytest
from helpers.browser import MAP_DRAWN, assert_no_exception, expect, grown_margins, save_screenshot, wait_idle

pytestmark = pytest.mark.browser


def test_compare_page_draws_every_variant_with_green_badges(page, base_url):
    page.goto(f"{base_url}/compare")
    wait_idle(page)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.locator("h1")).to_contain_text("Compare variants")
    heatmaps = main.locator("[data-testid=stPlotlyChart]").filter(has=page.locator(MAP_DRAWN))
    expect(heatmaps).to_have_count(10)
    for title in ("Simplified self-attention", "Self-attention v1", "Self-attention v2", "Causal attention",
                  "Multi-head wrapper", "Multi-head attention", "Grouped-query attention", "Multi-query attention",
                  "Multi-head latent attention", "Sliding-window attention"):
        expect(heatmaps.filter(has_text=title)).to_have_count(1)
    badges = main.locator(".stMarkdownBadge", has_text="max |Δ| = ")
    expect(badges).to_have_count(6)  # wrapper, SDPA, masking routes, GQA, SWA, rotary shift
    for badge in badges.all():
        expect(badge).to_contain_text("equal · max |Δ| = ")
        expect(badge.get_by_role("img", name="check_circle icon")).to_have_count(1)  # the green check
    expect(main.get_by_text("differ · max |Δ|")).to_have_count(0)
    ablation = main.locator("[data-testid=stPlotlyChart]").filter(has_text="Softmax saturation")
    expect(ablation.locator("g.scatterlayer g.trace path.js-line")).to_have_count(6)  # 3 panels × with/without
    assert grown_margins(page) == []  # every chart drawn in one pass: its margins hold its labels and legend
    path = save_screenshot(page, "compare")
    assert path.stat().st_size > 20_000, f"{path} looks empty"


@pytest.mark.parametrize(("width", "per_row"), [(1400, 3), (700, 2)])
def test_the_maps_keep_a_readable_width_and_as_many_a_row_as_fit(page, base_url, width, per_row):
    """A narrow window (700 px) gets fewer maps a row, each as wide as on a wide one, not three slivers; the two-line
    titles stay clear of the key-token axis title."""
    page.set_viewport_size({"width": width, "height": 1400})
    page.goto(f"{base_url}/compare?text=The%20cat%20sat%20on%20the%20mat")
    wait_idle(page)
    assert_no_exception(page)
    heatmaps = page.get_by_test_id("stMain").locator("[data-testid=stPlotlyChart]").filter(has=page.locator(MAP_DRAWN))
    expect(heatmaps).to_have_count(10)
    boxes = [chart.bounding_box() for chart in heatmaps.all()]
    assert min(box["width"] for box in boxes) >= 280, [box["width"] for box in boxes]
    first_row = [box for box in boxes if abs(box["y"] - boxes[0]["y"]) < 5]
    assert len(first_row) == per_row
    for chart in heatmaps.all()[:2]:
        subtitle = chart.locator("text.gtitle").bounding_box()
        axis_title = chart.locator("text.xtitle").bounding_box()
        assert subtitle["y"] + subtitle["height"] <= axis_title["y"] + 1, (subtitle, axis_title)
    assert grown_margins(page) == []


# the words of an element's text that the browser broke across two lines (a Range over a word gives a rectangle a line)
BROKEN_WORDS = """(element) => {
    const broken = [], walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (const word of node.textContent.matchAll(/\\S+/g)) {
            const range = document.createRange();
            range.setStart(node, word.index);
            range.setEnd(node, word.index + word[0].length);
            const lines = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
            if (lines.size > 1) broken.push(word[0]);
        }
    }
    return broken;
}"""


def test_in_a_narrow_window_each_equivalence_card_shows_its_number_whole_and_breaks_no_word(page, base_url):
    """At 900 px beside the sidebar the cards go one a row, each as wide as at 1,400 px: the badge shows the measured
    max |Δ| whole (not "equal · ma…"), and a title breaks between words, never inside an identifier
    (scaled_dot_product_attention, num_kv_groups)."""
    page.set_viewport_size({"width": 900, "height": 1400})
    page.goto(f"{base_url}/compare")
    wait_idle(page)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    badges = main.locator(".stMarkdownBadge", has_text="max |Δ| = ")
    expect(badges).to_have_count(6)
    for badge in badges.all():
        shown, whole = badge.evaluate("(b) => [b.clientWidth, b.scrollWidth]")
        assert whole <= shown, (badge.inner_text(), shown, whole)  # nothing cut off behind an ellipsis
    titles = main.locator("[data-testid=stMarkdownContainer] strong").filter(has_text=" = ")
    expect(titles).to_have_count(6)
    assert {title.inner_text(): title.evaluate(BROKEN_WORDS) for title in titles.all()} == \
        {title.inner_text(): [] for title in titles.all()}


@pytest.mark.parametrize("width", [700, 800, 1400])
def test_the_why_scaling_panels_labels_are_clear_of_each_other_and_inside_the_chart(page, base_url, width):
    """The variance panel (log axis) labels the powers of 10 only, not Plotly's 2 and 5 between them; the dₖ labels
    of each panel stand apart (every third dₖ, as a panel a third of the page beside the sidebar at 800 px holds);
    every panel's title lies inside the chart, at 700 and 800 px as at 1,400 px."""
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto(f"{base_url}/compare")
    wait_idle(page)
    assert_no_exception(page)
    chart = page.get_by_test_id("stMain").locator("[data-testid=stPlotlyChart]").filter(has_text="Softmax saturation")
    chart.scroll_into_view_if_needed()
    labels = chart.locator(".js-plotly-plot").evaluate("""(gd) => Object.fromEntries(['x', 'x2', 'x3', 'y'].map(
        (axis) => [axis, [...gd.querySelectorAll(`g.${axis}tick text`)].filter((t) => t.textContent).map((t) => {
            const box = t.getBoundingClientRect();
            return [t.textContent, box.left, box.right];
        })]))""")
    assert [text for text, _, _ in labels["y"]] == ["1", "10", "100", "1000"]  # bottom up, one a decade
    for axis in ("x", "x2", "x3"):
        assert [text for text, _, _ in labels[axis]] == ["1", "8", "64", "512"]
        assert all(left[2] + 4 <= right[1] for left, right in zip(labels[axis], labels[axis][1:])), labels[axis]
    box = chart.bounding_box()
    for title in chart.locator("text.annotation-text").filter(has_text="mean").all() + \
            chart.locator("text.annotation-text").filter(has_text="variance").all():
        edges = title.bounding_box()
        assert box["x"] <= edges["x"] and edges["x"] + edges["width"] <= box["x"] + box["width"], (edges, box)
    assert grown_margins(page) == []
