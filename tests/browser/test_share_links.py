"""Share links of long texts: a text of GPT-2's full 1,024-token context is in the Share link and the address bar, so
the link opened in a new session and a reload show its view; a longer paste's link and address bar hold its part shown
(its first 1,024 tokens) and say so; a text whose part shown is too long for a URL is warned about where the link is
copied."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from helpers.browser import (
    commit_text,
    expect,
    query_of,
    share_link,
    sidebar,
    text_box,
    visit,
    wait_idle,
)
from helpers.texts import english_text

pytestmark = pytest.mark.browser


def shows_tokens(page, n: str) -> None:
    expect(page.get_by_test_id("stMain").get_by_text(re.compile(rf"· {n} tokens ·")).first).to_be_visible()


def test_a_typed_1024_token_text_survives_a_reload_and_its_link_opens_its_window_elsewhere(page, base_url, browser):
    text = english_text()
    visit(page, f"{base_url}/?head=3")
    commit_text(page, text)
    shows_tokens(page, "1,024")
    assert query_of(page.url)["text"] == text  # the address bar holds it
    link = share_link(page)
    assert query_of(link)["text"] == text and query_of(link)["head"] == "3", link[:200]
    assert not sidebar(page).get_by_test_id("stAlertContainer").count()  # no warning: the text is in the link

    page.reload()
    wait_idle(page)
    shows_tokens(page, "1,024")
    expect(text_box(page)).to_have_value(text)

    other = browser.new_context(viewport=page.viewport_size)  # another session, as the link's recipient has
    try:
        fresh = other.new_page()
        visit(fresh, link + "&row=300&col=100")  # the 256 × 256 window, which only a text over 256 tokens has
        shows_tokens(fresh, "1,024")
        expect(text_box(fresh)).to_have_value(text)
        assert {"head": "3", "row": "300", "col": "100"}.items() <= query_of(fresh.url).items(), fresh.url[-80:]
        assert not fresh.get_by_test_id("stMain").get_by_text("Ignored URL parameter").count()
    finally:
        other.close()


def test_a_long_paste_is_in_the_link_and_the_address_bar_as_the_part_shown_and_the_box_keeps_it_whole(page, base_url):
    """20,000 characters (4,445 tokens): the link and the address bar hold the first 1,024 tokens (the part shown,
    ~5 kB), the sidebar says so, the text box keeps the whole paste, and a reload opens the part shown."""
    text = english_text(4445)
    visit(page, f"{base_url}/?head=3")
    commit_text(page, text)
    shows_tokens(page, "1,024")
    shown = query_of(page.url)["text"]
    assert text.startswith(shown) and 4000 < len(shown) < len(text)
    expect(text_box(page)).to_have_value(text)
    link = share_link(page)
    assert query_of(link)["text"] == shown and query_of(link)["head"] == "3"
    note = sidebar(page).get_by_test_id("stAlertContainer").filter(has_text="holds only the part of your text")
    expect(note).to_be_visible()
    expect(sidebar(page).get_by_test_id("stAlertContainer").filter(has_text="not in this link")).to_have_count(0)
    page.reload()
    wait_idle(page)
    shows_tokens(page, "1,024")
    expect(text_box(page)).to_have_value(shown)


def test_a_text_too_long_for_a_url_is_warned_about_where_the_link_is_copied(page, base_url):
    visit(page, f"{base_url}/?text={quote('=' * 4001)}")  # 64 tokens, all shown: 12,003 bytes in a URL
    link = share_link(page)
    assert "text" not in query_of(link)
    warning = sidebar(page).get_by_test_id("stAlertContainer").filter(has_text="Your text is not in this link")
    expect(warning).to_be_visible()
    expect(warning).to_contain_text("opens the default sentence")
