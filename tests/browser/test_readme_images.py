"""The README's images, taken in a real Chromium: every run checks each image's page and framing and writes the
images to tests/browser/artifacts/images; ``ATTNVIZ_UPDATE_SCREENSHOTS=1 python -m pytest
tests/browser/test_readme_images.py`` writes them to docs/images instead.

Each keeps the framing the README shows: the Heads page's first screen (heads.png, 1400 × 1000), a clicked cell
taken apart (why-this-weight.png, 1010 × 579), the README's example module down to the end of its Check panel
(user-module.png), the Induction lab's knock-out grid over its loss curves (ablation-grid.png) and a head's weights
beside its ‖weight × value‖ map (value-weighted.png).  docs/images/modern.png is taken by
tests/browser/test_modern_pages.py.
"""

from __future__ import annotations

import io
import re
import urllib.parse

import pytest
from helpers.browser import (
    README_IMAGES,
    VIEWPORT,
    assert_no_exception,
    expect,
    fit_viewport,
    park_pointer,
    runs,
    start_server,
    wait_idle,
)
from PIL import Image

from .test_pages import cell_centre, click_cell, focused_chart

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CAT = "The cat sat on the mat. The cat sat on the mat."
BUNDLED = "bundled model"
MODULE = "docs/examples/my_attention.py:MultiHeadAttention"  # the README's `--module`
FIRST_RUN_MS = 120_000  # a fresh server builds the GPT-2-size embedding table first, on a shared machine


def heads_url(base_url: str, **query: str) -> str:
    return f"{base_url}/?{urllib.parse.urlencode(query)}"


def size_of(path) -> tuple[int, int]:
    with Image.open(path) as image:
        return image.size


def image_path(name: str):
    """Where the image ``name``.png goes: docs/images with ATTNVIZ_UPDATE_SCREENSHOTS=1, else the artifacts."""
    README_IMAGES.mkdir(parents=True, exist_ok=True)
    return README_IMAGES / f"{name}.png"


def save_clip(page, name: str, clip: dict) -> None:
    """``clip`` (page pixels) of the page as the image ``name``.png, at whole pixels."""
    clip = {key: round(value) for key, value in clip.items()}
    path = image_path(name)
    page.screenshot(path=str(path), clip=clip, animations="disabled", caret="hide")
    assert size_of(path) == (clip["width"], clip["height"])


def save_stacked(name: str, *parts) -> None:
    """The elements ``parts`` (locators), each screenshot alone, one under the other, as the image ``name``.png."""
    shots = []
    for part in parts:
        part.scroll_into_view_if_needed()
        shots.append(Image.open(io.BytesIO(part.screenshot(animations="disabled", caret="hide"))).convert("RGB"))
    stacked = Image.new("RGB", (max(shot.width for shot in shots), sum(shot.height for shot in shots)), "white")
    top = 0
    for shot in shots:
        stacked.paste(shot, (0, top))
        top += shot.height
    stacked.save(image_path(name), optimize=True)


def test_heads(page, base_url):
    """The Heads page's first screen: four heads of the book's MultiHeadAttention on a sentence said twice, the shape
    diagram of this run beside the grid."""
    page.goto(heads_url(base_url, text=CAT, num_heads="4"))
    wait_idle(page, timeout=FIRST_RUN_MS)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.locator("h1")).to_contain_text("Attention heads")
    expect(main).to_contain_text("4 heads × 192")
    expect(main.locator(".attnviz-flow")).to_contain_text("(1, 4, 14, 14)")
    path = image_path("heads")
    page.screenshot(path=str(path), animations="disabled", caret="hide")
    assert size_of(path) == (VIEWPORT["width"], VIEWPORT["height"])


def test_why_this_weight(page, base_url):
    """A click on the focused map's cell (query 13 ".", key 9 "·sat"): the map with the cell's hover label, and the
    panel beside it taking the weight apart."""
    page.goto(heads_url(base_url, text=CAT, num_heads="4"))
    wait_idle(page, timeout=FIRST_RUN_MS)
    assert_no_exception(page)
    click_cell(page, 13, 9)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.get_by_text(re.compile(r"query 13, key 9")).first).to_be_visible()
    focus = main.get_by_test_id("stSelectbox").filter(has_text="Focused head")
    focus.evaluate("(box) => box.scrollIntoView({block: 'start'})")  # the image's top at the window's: all in view
    chart = focused_chart(page)
    centre = cell_centre(page, chart, 13, 9)
    page.mouse.move(centre["x"], centre["y"])  # the hover label of the clicked cell
    expect(chart.locator(".hovertext")).to_contain_text("query 13:")
    box = focus.get_by_role("combobox").locator("..").bounding_box()  # the box around the input, below the label
    save_clip(page, "why-this-weight", {"x": box["x"] - 10, "y": box["y"] - 4, "width": 1010, "height": 579})


def test_ablation_grid(page, base_url):
    """The Induction lab with the bundled model: Δ loss with each head knocked out, and the loss per position
    with and without the first one."""
    page.goto(f"{base_url}/induction?{urllib.parse.urlencode({'weights': BUNDLED})}")
    wait_idle(page, timeout=FIRST_RUN_MS)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    grid = main.get_by_test_id("stPlotlyChart").filter(has_text="knock out one head")
    curves = main.get_by_test_id("stPlotlyChart").filter(has_text="knocked out vs intact")
    expect(curves).to_contain_text("without L0H0")
    save_stacked("ablation-grid", grid, curves)  # without the "Knock out together" picker between them


def test_value_weighted(page, base_url):
    """The Heads page with the bundled model, "What this attention does" opened on ‖weight × value‖: head 0's
    weights beside what each weight moves."""
    page.goto(heads_url(base_url, weights=BUNDLED, text="The cat sat on the mat. The cat sat on the"))
    wait_idle(page, timeout=FIRST_RUN_MS)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    before = runs(page)
    main.get_by_test_id("stExpander").filter(has_text="What this attention does").locator("summary").click()
    wait_idle(page, after=before)
    before = runs(page)
    main.get_by_role("tab", name="‖weight × value‖").click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    weighted = page.get_by_test_id("stPlotlyChart").filter(has_text="head 0: ‖weight × value‖")
    expect(main.locator(weighted)).to_be_visible()
    pair = main.get_by_test_id("stHorizontalBlock").filter(has=weighted).last
    pair.scroll_into_view_if_needed()
    pair.screenshot(path=str(image_path("value-weighted")), animations="disabled", caret="hide")


@pytest.fixture
def module_server(browser_available):
    with start_server(("--module", MODULE)) as running:
        yield running


def test_user_module(page, module_server):
    """The README's example module (the book's MultiHeadAttention without ÷√head_dim) on the Heads page, as the
    README's `streamlit run app.py -- --module …` opens it at the sizes of its `attnviz check` line: its op path,
    its four heads and the Check panel, whose scaling rule fails."""
    query = {"d_in": "32", "d_out": "32", "num_heads": "4", "text": "Your journey starts with one step"}
    page.goto(f"{module_server.url}/?{urllib.parse.urlencode(query)}")
    wait_idle(page, timeout=FIRST_RUN_MS)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main).to_contain_text("Your module: MultiHeadAttention, 4 heads × 8 · your code, traced")
    expect(main).to_contain_text("Check MultiHeadAttention")
    rules = main.get_by_test_id("stTable").filter(has_text="evidence")
    expect(rules).to_contain_text("the scores are not scaled")
    fit_viewport(page, max_height=4000)
    park_pointer(page)
    rules_end = rules.bounding_box()
    rules_end = rules_end["y"] + rules_end["height"]  # its op path is long: the page down to the Check panel's end
    save_clip(page, "user-module", {"x": 0, "y": 0, "width": VIEWPORT["width"], "height": rules_end + 12})
