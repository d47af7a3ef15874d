"""A checkpoint of the book's grouped-query GPT (``ch04/04_gqa``: attnviz's GPTModel with random weights and the
book's cfg, written here) in a real Chromium: picked under Weights in the sidebar, the Heads page draws every query
head's map without an exception and says the grouping, and the Generate page draws its cache."""

from __future__ import annotations

import pytest
from helpers.browser import (
    assert_no_exception,
    choose_option,
    expect,
    runs,
    serving_checkpoints,
    sidebar,
    visit,
    wait_idle,
)

pytestmark = [pytest.mark.slow, pytest.mark.browser]

NAME = "gqa.pth"


@pytest.fixture(scope="module")
def server(tmp_path_factory, browser_available):
    import torch
    from helpers.checkpoints import book_modern_cfg, random_modern_gpt

    folder = tmp_path_factory.mktemp("modern-checkpoints")
    model = random_modern_gpt("grouped-query", seed=2, num_kv_groups=2)
    torch.save({"model_state_dict": model.state_dict(), "cfg": book_modern_cfg(model)}, folder / NAME)
    with serving_checkpoints(folder) as running:
        yield running


def test_a_grouped_query_checkpoint_picked_in_the_sidebar_draws_every_query_head(page, server):
    visit(page, f"{server.url}/?text=one%20two%20three%20four%20five")
    before = runs(page)
    choose_option(page, sidebar(page).get_by_role("combobox", name="Weights"), NAME)
    wait_idle(page, after=before)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.get_by_test_id("stCaptionContainer").filter(
        has_text="grouped-query attention: 2 K/V heads, each shared by 2 query heads").first).to_be_visible()
    expect(sidebar(page).get_by_text("Grouped-query attention (the book's bonus ch04/04_gqa)")).to_be_visible()
    grid = main.locator("[data-testid=stPlotlyChart]").filter(has_text="K/V 1").first
    expect(grid).to_be_visible()
    for head in range(4):
        expect(grid.get_by_text(f"head {head}", exact=False).first).to_be_visible()
    flow = main.locator(".attnviz-flow")
    expect(flow).to_contain_text("(1, 2, 5, 64)")  # the K/V heads before the repeat

    before = runs(page)
    sidebar(page).get_by_test_id("stPageLink-NavLink").filter(has_text="Generate").click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(main.get_by_text("of its 2 K/V heads", exact=False).first).to_be_visible()
