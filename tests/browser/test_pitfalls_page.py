"""The Pitfall lab in a real Chromium: the leak verdict is visible, switching on a bug shows it next to the
book's code, the screenshot for the README is saved, and the Share link opens the bug picked."""

from __future__ import annotations

import pytest
from helpers.browser import (
    MAP_DRAWN,
    assert_no_exception,
    expect,
    grown_margins,
    query_of,
    runs,
    save_screenshot,
    share_link,
    wait_idle,
)

from attnviz.labs.pitfalls.catalogue import PITFALLS, label

pytestmark = pytest.mark.browser


def test_pitfalls_page_shows_verdicts_and_a_bug_next_to_the_books_code(page, base_url):
    page.goto(f"{base_url}/pitfalls")
    wait_idle(page)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.locator("h1")).to_contain_text("Pitfall lab")
    expect(main.get_by_text("Verdict: no leak", exact=True)).to_be_visible()
    assert grown_margins(page) == []  # the leak chart drawn in one pass: its margins hold its labels

    before = runs(page)
    main.get_by_role("radio", name="masked_fill (no _)").click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(main.get_by_text("Verdict: leaks into positions 0, 1, 2", exact=True)).to_be_visible()
    alerts = main.get_by_test_id("stAlert")
    expect(alerts.filter(has_text="Detected:")).to_contain_text("the future leaks")
    expect(alerts.filter(has_text="Check passed:")).to_contain_text("no leak")
    expect(main.get_by_test_id("stCode").first).to_contain_text("attn_scores.masked_fill(mask_bool, -torch.inf)")
    expect(main.locator("[data-testid=stPlotlyChart]").filter(has=page.locator(MAP_DRAWN))).to_have_count(2)
    assert grown_margins(page) == []


    path = save_screenshot(page, "pitfalls")
    assert path.stat().st_size > 20_000, f"{path} looks empty"

    before = runs(page)
    main.get_by_role("radio", name="softmax dim=-2").click()  # two maps and a bar chart of the row sums
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(main.locator("[data-testid=stPlotlyChart]").filter(has_text="sum of each query's weights")).to_have_count(1)
    assert grown_margins(page) == []

    before = runs(page)
    main.get_by_role("radio", name="rotary on q only").click()  # the correct rotary's bars are round-off
    wait_idle(page, after=before)
    assert_no_exception(page)
    bars = main.locator("[data-testid=stPlotlyChart]").filter(has_text="the first token at every position")
    expect(bars.locator("g.legend")).to_contain_text("correct: score off its diagonal (≤ ")
    assert grown_margins(page) == []  # the longer legend entry still fits the room kept for it


def test_the_share_link_opens_the_bug_picked(page, base_url, browser):
    """A bug picked on the Pitfall lab is in the Share link of that run; the link opened in a new session (a new
    browser context, as the link's recipient has) shows that bug, with no notice."""
    page.goto(f"{base_url}/pitfalls")
    wait_idle(page)
    main = page.get_by_test_id("stMain")
    before = runs(page)
    main.get_by_role("radio", name=label("mask_diagonal")).click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    link = share_link(page)
    assert query_of(link)["bug"] == "mask_diagonal"

    other = browser.new_context(viewport=page.viewport_size)
    try:
        fresh = other.new_page()
        fresh.goto(link)
        wait_idle(fresh)
        assert_no_exception(fresh)
        shown = fresh.get_by_test_id("stMain")
        expect(shown.get_by_role("radio", name=label("mask_diagonal"))).to_be_checked()
        expect(shown.get_by_role("radio", name="no bug")).not_to_be_checked()
        expect(shown.locator("h3").first).to_contain_text(PITFALLS["mask_diagonal"].title)
        expect(shown.get_by_test_id("stAlert").filter(has_text="The link's")).to_have_count(0)
    finally:
        other.close()
