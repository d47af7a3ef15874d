"""The bonus variants in a real Chromium: the Heads and Steps pages with grouped-query attention and rotary
positions, and with a sliding window — drawn, no exception, the added stages reachable; saves
docs/images/modern.png (the README's image) when ATTNVIZ_UPDATE_SCREENSHOTS=1."""

from __future__ import annotations

import shutil

import pytest
from helpers.browser import REPO, SCREENSHOTS, assert_no_exception, expect, runs, save_screenshot, wait_idle

pytestmark = pytest.mark.browser

FIRST_RUN_MS = 120_000  # a fresh server builds the GPT-2-size embedding table first, on a shared machine
TEXT = "Your journey starts with one step and then another step"


def test_heads_page_draws_every_head_of_gqa_with_rotary(page, base_url):
    page.goto(f"{base_url}/?text={TEXT}&variant=gqa&num_kv_groups=4&positions=rotary&rope_base=500000")
    wait_idle(page, timeout=FIRST_RUN_MS)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.locator("h1")).to_contain_text("Attention heads")
    sidebar = page.get_by_test_id("stSidebar")
    expect(sidebar.get_by_text("K/V groups (num_kv_groups)")).to_have_count(1)
    expect(sidebar.get_by_text("RoPE base (rope_base)")).to_have_count(1)
    expect(main.locator(".attnviz-stage[data-stage=kv_repeat]")).to_have_count(1)  # the compact shape flow


def test_steps_page_shows_the_window_and_the_rotation(page, base_url):
    page.goto(f"{base_url}/steps?text={TEXT}&variant=swa&sliding_window_size=3&positions=rotary")
    wait_idle(page, timeout=FIRST_RUN_MS)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.locator("h1")).to_contain_text("Attention step by step")
    expect(main.get_by_text("0 ≤ i − j < W").first).to_be_visible()  # the default stage: the window mask
    expect(main.get_by_text("mask_bool = (diff < 0) | (diff >= window)").first).to_be_visible()
    before = runs(page)
    main.get_by_text("0 · rotate q, k", exact=True).click()
    wait_idle(page, after=before, timeout=FIRST_RUN_MS)
    assert_no_exception(page)
    expect(main.get_by_text("apply_rope(queries").first).to_be_visible()
    page.goto(f"{base_url}/steps?text={TEXT}&variant=swa&sliding_window_size=3")
    wait_idle(page, timeout=FIRST_RUN_MS)
    path = save_screenshot(page, "modern")
    assert path.stat().st_size > 20_000, f"{path} looks empty"
    if SCREENSHOTS.parent.name == "docs":  # ATTNVIZ_UPDATE_SCREENSHOTS=1: the README's image too
        shutil.copy(path, REPO / "docs" / "images" / "modern.png")


@pytest.mark.parametrize("width", [900, 1400])
def test_the_rotation_stage_fits_the_page_its_tables_need_no_sideways_scroll(page, base_url, width):
    """The rotary stage's pair figures, angle heatmap and both tables (the pair's two numbers before and after, not
    64 numbers a cell) lie inside the page's main column at 900 and 1,400 px, and no table scrolls sideways."""
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto(f"{base_url}/steps?text={TEXT}&variant=gqa&positions=rotary&stage=rotated_queries&head=5")
    wait_idle(page, timeout=FIRST_RUN_MS)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    charts, tables = main.get_by_test_id("stPlotlyChart"), main.get_by_test_id("stDataFrame")
    expect(charts).to_have_count(3)  # q's pair, k's pair, the angles
    expect(tables).to_have_count(2)  # q's and k's pair, before and after
    column = main.locator("[data-testid=stMainBlockContainer]").bounding_box()
    for element in [*charts.all(), *tables.all()]:
        element.scroll_into_view_if_needed()
        box = element.bounding_box()
        left, right = column["x"] - 1, column["x"] + column["width"] + 1
        assert left <= box["x"] and box["x"] + box["width"] <= right, (box, column)
    for table in tables.all():
        scroller = table.locator(".dvn-scroller").first
        assert scroller.evaluate("s => s.scrollWidth <= s.clientWidth + 1"), "the table scrolls sideways"


@pytest.mark.parametrize("width", [900, 1400])
def test_the_latent_stage_wraps_its_code_and_its_table_needs_no_sideways_scroll(page, base_url, width):
    """At 900 and 1,400 px the latent stage's code (its W_UK/W_UV lines) wraps in its code block, which needs no
    sideways scroll, and the one table of latent vectors, under the shape diagram, lies inside the page's main column,
    its vector column whole, with no sideways scroll."""
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto(f"{base_url}/steps?text={TEXT}&variant=mla&stage=latent")
    wait_idle(page, timeout=FIRST_RUN_MS)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    code = main.get_by_test_id("stCode").filter(has_text="self.W_UK(latent)").first  # the stage's, then the source's
    assert code.locator("pre").evaluate("p => p.scrollWidth <= p.clientWidth + 1"), "the code scrolls sideways"
    table = main.get_by_test_id("stDataFrame")
    expect(table).to_have_count(1)
    table.scroll_into_view_if_needed()
    column, box = main.locator("[data-testid=stMainBlockContainer]").bounding_box(), table.bounding_box()
    assert column["x"] - 1 <= box["x"] and box["x"] + box["width"] <= column["x"] + column["width"] + 1, (box, column)
    scroller = table.locator(".dvn-scroller").first
    assert scroller.evaluate("s => s.scrollWidth <= s.clientWidth + 1"), "the table scrolls sideways"
