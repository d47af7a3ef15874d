"""Knock-outs in a real Chromium with the bundled model: the Induction lab's grid and curves, the Heads page's
knock-out and ‖weight × value‖ map (the README's screenshots are saved from here)."""

from __future__ import annotations

import urllib.parse

import pytest
from helpers.browser import (
    ARTIFACTS,
    assert_no_exception,
    choose_option,
    expect,
    grown_margins,
    runs,
    save_screenshot,
    wait_idle,
)

pytestmark = pytest.mark.browser

BUNDLED = "bundled model"


def test_the_induction_lab_grid_and_a_knock_out_of_two_heads(page, base_url):
    page.goto(f"{base_url}/induction?{urllib.parse.urlencode({'weights': BUNDLED})}")
    wait_idle(page)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main).to_contain_text("Knock heads out: which ones does the model need?")
    expect(main.get_by_test_id("stPlotlyChart").filter(has_text="knock out one head")).to_be_attached()
    expect(main.get_by_test_id("stPlotlyChart").filter(has_text="knocked out vs intact")).to_be_attached()
    assert grown_margins(page) == []  # the score grid, the loss, the knock-out grid and curves: each drawn once
    save_screenshot(page, "ablation-grid")
    for name, text in (("ablation-grid-chart", "knock out one head"), ("ablation-loss-chart", "knocked out vs intact")):
        chart = main.get_by_test_id("stPlotlyChart").filter(has_text=text)
        chart.scroll_into_view_if_needed()
        chart.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def open_what_it_does(page) -> None:
    """Open the Heads page's "What this attention does" expander (it computes nothing until then)."""
    main = page.get_by_test_id("stMain")
    before = runs(page)
    main.get_by_test_id("stExpander").filter(has_text="What this attention does").locator("summary").click()
    wait_idle(page, after=before)
    assert_no_exception(page)


def test_the_heads_page_knocks_out_the_focused_head_and_weighs_by_values(page, base_url):
    query = {"weights": BUNDLED, "text": "The cat sat on the mat. The cat sat on the"}
    page.goto(f"{base_url}/?{urllib.parse.urlencode(query)}")
    wait_idle(page)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main).to_contain_text("What this attention does")
    expect(main).not_to_contain_text("log-probability of")  # collapsed: nothing computed
    open_what_it_does(page)
    expect(main).to_contain_text("log-probability of")
    expect(main).to_contain_text("without L0H0")
    before = runs(page)
    choose_option(page, main.get_by_role("combobox", name="Focused head"), "head 1")  # reruns the fragment only
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(main).to_contain_text("without L0H1")  # the knock-out follows the focus
    before = runs(page)
    main.get_by_role("tab", name="‖weight × value‖").click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(main.get_by_test_id("stPlotlyChart").filter(has_text="head 1: ‖weight × value‖")).to_be_visible()
    pair = main.get_by_test_id("stHorizontalBlock").filter(has=page.get_by_test_id("stPlotlyChart").filter(
        has_text="‖weight × value‖"))
    pair.last.scroll_into_view_if_needed()
    pair.last.screenshot(path=str(ARTIFACTS / "value-weighted-pair.png"))
    before = runs(page)
    main.get_by_role("tab", name="Rollout, logit lens").click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(main.get_by_test_id("stPlotlyChart").filter(has_text="rollout through layers")).to_be_visible()
