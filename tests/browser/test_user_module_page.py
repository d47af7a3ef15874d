"""Your own module in a real Chromium: a fresh server started with ``-- --module path.py:Class``; its very first
request draws the module's heads, the Check panel and, on Steps, the module's own source."""

from __future__ import annotations

import urllib.parse

import pytest
from helpers.browser import REPO, assert_no_exception, expect, save_screenshot, start_server, wait_idle
from helpers.check_table import ALL_PASS, RULE_COUNT

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
    expect(main).to_contain_text(ALL_PASS)
    rules = main.get_by_test_id("stTable").filter(has_text="evidence")
    expect(rules).to_contain_text("the hidden cells are exactly the future (above the diagonal)")  # read whole
    assert rules.evaluate("t => t.scrollWidth <= t.clientWidth + 1")  # wrapped, not cut off or scrolled
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


SLOW_MODULE = '''
import time

import torch
from torch import nn


class SlowAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.qkv = nn.Linear(d_in, 3 * d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        time.sleep(0.4)  # left in from debugging
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1) / self.head_dim ** 0.5).masked_fill(self.mask.bool()[:n, :n], -torch.inf)
        return self.out_proj((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, n, -1))
'''


def test_stop_the_check_keeps_the_rules_done_and_the_others_run_when_asked(page, browser_available, tmp_path):
    """A module that sleeps 0.4 s a forward (18 forwards on 15 tokens): Stop the check stops the run within a
    forward, the rows done stay, and Check the other rules finishes it."""
    path = tmp_path / "slow_attention.py"
    path.write_text(SLOW_MODULE)
    with start_server(("--module", f"{path}:SlowAttention")) as slow_server:
        text = "Your journey starts with one step and then another step and then one more step"
        page.goto(url(slow_server, variant="Your module: SlowAttention", text=text))
        main = page.get_by_test_id("stMain")
        expect(main.get_by_text("forwards done")).to_be_visible(timeout=120_000)
        expect(main.get_by_text("the rules run up to 18 forwards")).to_be_visible()  # said before the rules run
        main.get_by_role("link", name="Stop the check").click()
        expect(main.get_by_text("The check stopped after")).to_be_visible(timeout=10_000)
        wait_idle(page)
        assert_no_exception(page)
        assert f"All {RULE_COUNT} rules" not in main.inner_text()
        main.get_by_role("button", name="Check the other").click()
        expect(main.get_by_text(ALL_PASS)).to_be_visible(timeout=120_000)
        expect(main.get_by_text("The check stopped after")).to_have_count(0)
        save_screenshot(page, "user-module-check-resumed")
