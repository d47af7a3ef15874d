"""The Benchmark page in a real Chromium: nothing runs until the button is pressed; then five bars; Stop ends a long
run."""

from __future__ import annotations

import pytest
from helpers.browser import assert_no_exception, expect, runs, save_screenshot, wait_idle

pytestmark = pytest.mark.browser


def test_benchmark_page_times_five_implementations_on_demand(page, base_url):
    page.goto(f"{base_url}/benchmark")
    wait_idle(page)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.locator("h1")).to_contain_text("Implementations benchmark")
    expect(main.get_by_text("CPU only on this machine")).to_be_visible()
    expect(main.locator("[data-testid=stPlotlyChart]")).to_have_count(0)  # no work before the button
    n_box = main.get_by_role("textbox", name="Tokens n", exact=True)
    n_box.fill("16")
    n_box.press("Enter")
    wait_idle(page)
    before = runs(page)
    main.get_by_role("button", name="Run benchmark").click()
    wait_idle(page, after=before, timeout=120_000)
    assert_no_exception(page)
    bars = main.locator("[data-testid=stPlotlyChart] g.barlayer g.point")
    expect(bars).to_have_count(5, timeout=30_000)  # Plotly draws after the run ends: slow on a busy machine
    expect(main.get_by_role("button", name="Stop")).to_have_count(0)  # shown only while the timing runs
    save_screenshot(page, "benchmark")


def start_long_run(page, main) -> None:
    for name, value in (("Tokens n", "1024"), ("Timed repeats", "100")):  # 505 calls: minutes on this machine
        box = main.get_by_role("textbox", name=name, exact=True)
        box.fill(value)
        box.press("Enter")
        wait_idle(page)
    main.get_by_role("button", name="Run benchmark").click()
    expect(main.get_by_test_id("stProgress")).to_contain_text("left", timeout=60_000)  # running, with its estimate


def test_stop_ends_a_long_run_and_keeps_the_earlier_results(page, base_url):
    page.goto(f"{base_url}/benchmark")
    wait_idle(page)
    main = page.get_by_test_id("stMain")
    start_long_run(page, main)
    before = runs(page)
    main.get_by_role("button", name="Stop").click()
    wait_idle(page, after=before, timeout=30_000)  # the click reruns the page, which ends the timing
    assert_no_exception(page)
    expect(main.get_by_text("Stopped: nothing of that run was kept.")).to_be_visible()
    expect(main.get_by_test_id("stProgress")).to_have_count(0)
    expect(main.get_by_text("Nothing is timed until you press Run benchmark.")).to_be_visible()


@pytest.mark.parametrize("how", ["a setting", "another page"])
def test_a_run_cut_short_by_a_setting_or_a_page_switch_says_so(page, base_url, how):
    """A sidebar change (or another page) reruns the script, which ends the timing: the page says the run it started
    did not finish, not "Nothing is timed until you press Run benchmark.", and says it once."""
    page.goto(f"{base_url}/benchmark")
    wait_idle(page)
    main = page.get_by_test_id("stMain")
    start_long_run(page, main)
    before = runs(page)
    sidebar = page.get_by_test_id("stSidebar")
    if how == "a setting":
        sidebar.get_by_text("Causal mask").click()
    else:
        sidebar.get_by_test_id("stPageLink-NavLink").filter(has_text="Compare variants").click()
        wait_idle(page, after=before, timeout=60_000)
        before = runs(page)
        sidebar.get_by_test_id("stPageLink-NavLink").filter(has_text="Benchmark").click()
    wait_idle(page, after=before, timeout=60_000)
    assert_no_exception(page)
    expect(main.get_by_text("The benchmark you started did not finish")).to_be_visible()
    expect(main.get_by_test_id("stProgress")).to_have_count(0)
    expect(main.get_by_role("textbox", name="Tokens n", exact=True)).to_have_value("1024")  # the page's inputs are kept
    before = runs(page)
    main.get_by_role("textbox", name="Tokens n", exact=True).fill("8")
    main.get_by_role("textbox", name="Tokens n", exact=True).press("Enter")
    wait_idle(page, after=before)
    expect(main.get_by_text("The benchmark you started did not finish")).to_have_count(0)  # said once
