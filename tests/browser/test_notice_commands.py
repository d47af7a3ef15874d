"""A command a page's notice names reads, in a real Chromium, as it is typed: Streamlit's Markdown draws a lone "--"
as a dash, and ``streamlit run app.py — --module …`` would not run."""

from __future__ import annotations

import pytest
from helpers.browser import visit

pytestmark = pytest.mark.browser


def test_a_links_unlisted_module_notice_names_the_command_that_lists_one(page, base_url):
    visit(page, f"{base_url}/?variant=Your+module%3A+Nope")
    notice = page.get_by_test_id("stMain").get_by_test_id("stAlert").filter(has_text="not a module this server offers")
    assert "streamlit run app.py -- --module path/to/file.py:ClassName" in notice.inner_text()
