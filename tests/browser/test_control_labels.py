"""Every button and selectbox of a page's main area shows its whole label in a real Chromium, in an 800 px window with
the sidebar open as in a wide one: the Train page's Start training and Stop beside the steps and seed boxes, the
Induction lab's Layer and Head boxes with the score each option names."""

from __future__ import annotations

import pytest
from helpers.browser import assert_no_exception, visit

pytestmark = pytest.mark.browser

# each button's label and each selectbox's value in the main area that its box cuts short (its text wider than its box)
_CUT = """() => {
  const main = document.querySelector('[data-testid=stMain]');
  const labels = [...main.querySelectorAll('button .stMarkdownEllipsis')].map((e) => [e.textContent, e]);
  const values = [...main.querySelectorAll('[data-testid=stSelectbox] input[role=combobox]')].map((e) => [e.value, e]);
  return [...labels, ...values].filter(([, e]) => e.scrollWidth > e.clientWidth + 1).map(([text]) => text);
}"""
# what each page must show whole: a control the page draws, by its text
PAGES = {
    "/train": ["Start training", "Stop"],
    "/induction?weights=bundled+model": ["layer 1 · 0.", "head 0 · 0."],  # the best head's layer and head
}


@pytest.mark.parametrize("width", [800, 1400])
def test_buttons_and_selectboxes_show_their_whole_label(page, base_url, width):
    page.set_viewport_size({"width": width, "height": 900})
    for path, controls in PAGES.items():
        visit(page, f"{base_url}{path}")
        assert_no_exception(page)
        main = page.get_by_test_id("stMain")
        shown = main.locator("button").all_inner_texts() + [
            box.input_value() for box in main.get_by_role("combobox").all()]
        assert all(any(control in text for text in shown) for control in controls), (path, shown)
        assert page.evaluate(_CUT) == [], f"{path} at {width} px cuts these labels short"
