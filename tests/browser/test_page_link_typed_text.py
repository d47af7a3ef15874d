"""A text typed into the sidebar's Text area and not committed (no Ctrl+Enter) when a page link is clicked.

The click blurs the Text area, which commits the text, and starts a page switch: Streamlit's frontend sends the
page switch first (with the widgets' values it holds) and the commit's rerun after it, for the page it still shows.
Whichever wins, the user sees a drawn page holding the typed text — the page clicked, or at worst the page left,
whose link then works — never a blank page, never the text thrown away.

Each test opens its own browser context, i.e. its own Streamlit session.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from helpers.browser import assert_no_exception, expect, runs, sidebar, text_box, visit, wait_idle

pytestmark = [pytest.mark.slow, pytest.mark.browser]

TYPED = "The cat sat on the mat"
PAGES = {  # a page link's label -> the page's path and its title
    "Heads": ("/", "Attention heads"),
    "Steps": ("/steps", "Attention step by step"),
    "Shapes": ("/shapes", "Tensor shapes through the pipeline"),
    "Tokens": ("/tokens", "Tokens and embeddings"),
    "Generate": ("/generate", "Generate, token by token, with a KV cache"),
    "Compare variants": ("/compare", "Compare variants"),
}


def type_without_committing(page, text: str) -> None:
    """Replace the Text area's text by typing, the box keeping the focus: nothing is committed yet."""
    box = text_box(page)
    box.click()
    box.press("Control+a")
    box.press_sequentially(text)
    expect(box).to_be_focused()


def click_link_and_wait(page, label: str) -> None:
    """Click the sidebar's link to ``label`` and wait until a run has drawn the page whole (no script running, an
    element in the main area, every chart drawn): a blank page fails here."""
    before = runs(page)
    sidebar(page).get_by_test_id("stPageLink-NavLink").filter(has_text=label).click()
    wait_idle(page, after=before)
    assert_no_exception(page)


def shown(page) -> str:
    """The label of the page the main area shows, by its title; its path must be the URL's."""
    title = page.get_by_test_id("stMain").locator("h1").first.inner_text()
    label = next((label for label, (_, page_title) in PAGES.items() if title.startswith(page_title)), None)
    assert label is not None, f"the main area shows no page's title: {title!r}"
    assert urlsplit(page.url).path == PAGES[label][0], f"{label} is drawn at {page.url}"
    return label


def assert_holds_typed_text(page) -> None:
    expect(text_box(page)).to_have_value(TYPED)
    assert parse_qs(urlsplit(page.url).query).get("text") == [TYPED], page.url


@pytest.mark.parametrize(("start", "target"), [
    ("Heads", "Steps"), ("Heads", "Shapes"), ("Heads", "Tokens"), ("Heads", "Generate"), ("Heads", "Compare variants"),
    ("Steps", "Shapes"),
], ids=lambda label: label.split()[0].lower())
def test_a_page_link_clicked_with_the_text_typed_not_committed_keeps_the_text(page, base_url, start, target):
    """The page clicked opens with the typed text; or, where the commit's rerun of the page left came after the
    click, that page holds the text and a second click opens the page clicked with it."""
    visit(page, base_url + PAGES[start][0])
    type_without_committing(page, TYPED)

    click_link_and_wait(page, target)
    now = shown(page)
    assert now in (target, start), f"clicked {target} on {start}, {now} is shown"
    assert_holds_typed_text(page)
    if now == start:  # the click was swallowed by the commit's rerun: the link works on the next try
        click_link_and_wait(page, target)
        assert shown(page) == target
        assert_holds_typed_text(page)
