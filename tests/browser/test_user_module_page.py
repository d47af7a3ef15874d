"""Your own module in a real Chromium: a fresh server started with ``-- --module path.py:Class``; its very first
request draws the module's heads, the Check panel and, on Steps, the module's own source."""

from __future__ import annotations

import urllib.parse

import pytest
from helpers.browser import REPO, assert_no_exception, expect, save_screenshot, start_server, wait_idle

pytestmark = pytest.mark.browser

SPEC = "tests/helpers/user_modules.py:CausalSelfAttention"
LABEL = "Your module: CausalSelfAttention"


@pytest.fixture(scope="module")
def server(browser_available):
    with start_server(("--module", SPEC, "--module", "tests/helpers/user_modules.py:Raises")) as running:
        yield running


def url(server, route: str = "", **query) -> str:
    params = {"variant": LABEL, "d_in": "64", "d_out": "64", "num_heads": "4",
              "text": "Your journey starts with one step", **query}
    return f"{server.url}/{route}?{urllib.parse.urlencode(params)}"


def test_the_first_request_draws_the_module_and_its_checks(page, server):
    page.goto(url(server))  # the server's first request
    wait_idle(page)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.locator("h1")).to_contain_text("Attention heads")
    expect(main).to_contain_text("CausalSelfAttention, 4 heads × 16 · your code, traced")
    expect(main).to_contain_text("Check CausalSelfAttention")
    expect(main).to_contain_text("All 8 rules pass or do not apply.")
    expect(main.locator(".attnviz-op").first).to_be_visible()  # its own op path beside the grid
    assert main.locator("[data-testid=stPlotlyChart]").count() >= 2  # the grid and the focused head
    assert (REPO / "docs").is_dir()
    save_screenshot(page, "user-module")


def test_steps_shows_the_modules_own_source(page, server):
    page.goto(url(server, "steps"))
    wait_idle(page)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main).to_contain_text("class CausalSelfAttention(nn.Module):")
    expect(main).to_contain_text("◀ this stage")


def test_a_module_that_raises_says_why_and_keeps_the_text(page, server):
    page.goto(url(server, variant="Your module: Raises", text="my own words"))
    wait_idle(page)
    assert_no_exception(page)
    expect(page.get_by_test_id("stMain")).to_contain_text("the forward raised RuntimeError")
    expect(page.get_by_test_id("stSidebar").locator("textarea")).to_have_value("my own words")
