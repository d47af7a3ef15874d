"""Head types in a real Chromium with the bundled model (attnviz/assets/bundled, trained by
``attnviz train``): the Heads page names its previous-token and induction heads on a text that
repeats, with the first-token mass beside them, and draws the layers × heads grid of every score; the
Induction lab shows its induction head on repeated random tokens.  ``ATTNVIZ_UPDATE_SCREENSHOTS=1``
writes docs/screenshots/heads_bundled.png and induction.png."""

from __future__ import annotations

import re
import urllib.parse

import pytest
from helpers.browser import assert_no_exception, expect, grown_margins, runs, save_screenshot, visit, wait_idle

pytestmark = pytest.mark.browser

BUNDLED = "bundled model"
SENTENCE = ("The cat sat on the mat because the mat was warm, and the dog watched the cat from the door. ")
TEXT = SENTENCE * 2  # English written twice: previous-token heads everywhere, an induction head would show too


def test_heads_page_names_the_bundled_models_heads(page, base_url):
    query = urllib.parse.urlencode({"weights": BUNDLED, "text": TEXT})
    visit(page, f"{base_url}/?{query}")
    main = page.get_by_test_id("stMain")
    expect(page.get_by_test_id("stSidebar").get_by_role("combobox", name="Weights")).to_have_value(
        re.compile("Bundled model"))
    expect(main.get_by_text("Head types", exact=True)).to_be_visible()
    layer0 = main.get_by_test_id("stMarkdown").filter(has_text="Heads of layer 0 with a type")
    expect(layer0).to_contain_text(re.compile(r"head \d+: previous-token 0\.[6-9]\d"))
    before = runs(page)  # every layer's types come with the opt-in every-layer pass
    main.get_by_test_id("stCheckbox").filter(has_text=re.compile(r"Show all \d+ layers")).locator("label").click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    every = main.get_by_test_id("stMarkdown").filter(has_text="Every layer")
    # the bundled model's previous-token heads (layer 0) and induction heads (layer 1), named with their scores on a
    # text it never saw
    expect(every).to_contain_text(re.compile(r"L0H\d+ previous-token 0\.[6-9]\d"))
    expect(every).to_contain_text(re.compile(r"L1H\d+ induction 0\.[4-9]\d"))
    grid = main.get_by_test_id("stPlotlyChart").filter(has_text="every layer's heads on this text")
    expect(grid.locator("g.heatmaplayer g.hm image")).to_have_count(4)  # previous, induction, duplicate, first
    assert grown_margins(page) == []  # the score grids drawn in one pass: their margins hold their labels
    expect(main.get_by_test_id("stDataFrame").nth(1).locator("canvas").first).to_be_visible()  # statistics, types
    path = save_screenshot(page, "heads_bundled")
    assert path.stat().st_size > 20_000, f"{path} looks empty"


def test_induction_lab_with_the_bundled_model(page, base_url):
    visit(page, f"{base_url}/induction?weights={urllib.parse.quote(BUNDLED)}")  # opens on its best head, in layer 1
    main = page.get_by_test_id("stMain")
    expect(main.locator("h1")).to_contain_text("Induction lab")
    best = main.get_by_test_id("stMetric").filter(has_text="Best induction score")
    expect(best).to_contain_text(re.compile(r"0\.[7-9]\d"))  # its induction head, on tokens it never saw
    loss = main.get_by_test_id("stMetric").filter(has_text="Loss on the second copy")
    expect(loss).to_contain_text("nats")
    expect(main.get_by_test_id("stPlotlyChart").filter(has_text="loss at each position")).to_be_visible()
    expect(main.get_by_test_id("stPlotlyChart").filter(has_text=re.compile(r"L1H\d: weights on"))).to_be_visible()
    path = save_screenshot(page, "induction")
    assert path.stat().st_size > 20_000, f"{path} looks empty"
