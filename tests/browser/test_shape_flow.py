"""The compact shape flow beside the Heads and Steps views, laid out by a real Chromium: at a narrow and a wide
window every stage name stays on one line (unless the name alone is wider than the column), every shape stays on one
line ("(1, 1024, 768)", never "(1, / 1024, 768)") and no box leaves its column.  Saves a screenshot of the flow at
each width (artifacts/shape-flow-<page>-<variant>-<width>.png)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from helpers.browser import ARTIFACTS, assert_no_exception, wait_idle
from helpers.texts import english_text

pytestmark = pytest.mark.browser

FIRST_RUN_MS = 120_000  # a fresh server builds the GPT-2-size embedding table first, on a shared machine
TEXT = "Your journey starts with one step"
# each stage box's name (<b>): how many lines it takes, and how far its box reaches past the flow's column
_MEASURE = """() => [...document.querySelectorAll('.attnviz-flow')].flatMap(flow => {
    const column = flow.parentElement.getBoundingClientRect();
    return [...flow.querySelectorAll('.attnviz-stage')].map(box => {
        const name = box.querySelector('b');
        const lines = new Set([...name.getClientRects()].map(rect => Math.round(rect.top))).size;
        const shape = box.querySelector('code');
        const shapeLines = new Set([...shape.getClientRects()].map(rect => Math.round(rect.top))).size;
        const past = box.getBoundingClientRect().right - column.right;
        name.style.whiteSpace = 'nowrap';
        const whole = name.getBoundingClientRect().width;  // the name on one line, however its box is laid out
        name.style.whiteSpace = '';
        return {stage: box.dataset.stage, name: name.textContent, lines, past, fits: whole + 12 <= column.width,
                shape: shape.textContent, shapeLines};
    });
})"""


@pytest.mark.parametrize(("path", "variant"), [("", "gqa"), ("", "mla"), ("", "mqa"), ("", "mha"), ("steps", "gqa")])
@pytest.mark.parametrize("width", [1100, 1400])
def test_flow_names_stay_whole_at_a_narrow_and_a_wide_window(page, base_url, path, variant, width):
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto(f"{base_url}/{path}?text={TEXT}&variant={variant}&positions=rotary" if variant != "mla"
              else f"{base_url}/{path}?text={TEXT}&variant={variant}")
    wait_idle(page, timeout=FIRST_RUN_MS)
    assert_no_exception(page)
    flow = page.locator(".attnviz-flow").first
    flow.wait_for()
    ARTIFACTS.mkdir(exist_ok=True)
    flow.screenshot(path=str(ARTIFACTS / f"shape-flow-{path or 'heads'}-{variant}-{width}.png"))
    boxes = page.evaluate(_MEASURE)
    assert {box["stage"] for box in boxes} >= {"queries", "keys", "values", "scores", "output"}, boxes
    # a name is one word ("rotated_queries" too): it takes one line wherever it fits the column
    broken = [box for box in boxes if box["lines"] > 1 and box["fits"]]
    assert not broken, broken
    outside = [box for box in boxes if box["past"] > 1]
    assert not outside, outside
    split = [box for box in boxes if box["shapeLines"] > 1]  # a shape is one line wherever its box is
    assert not split, split


@pytest.mark.parametrize("path", ["", "steps"])
@pytest.mark.parametrize("width", [1100, 1600])
def test_gpt2_small_shapes_at_the_full_context_stay_on_one_line(page, base_url, path, width):
    """GPT-2 small's sizes at its full context: queries, keys and values of (1, 1024, 768), 12 heads."""
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto(f"{base_url}/{path}?text={quote(english_text(1024))}")
    wait_idle(page, timeout=FIRST_RUN_MS)
    assert_no_exception(page)
    flow = page.locator(".attnviz-flow").first
    flow.wait_for()
    ARTIFACTS.mkdir(exist_ok=True)
    flow.screenshot(path=str(ARTIFACTS / f"shape-flow-{path or 'heads'}-1024-{width}.png"))
    boxes = page.evaluate(_MEASURE)
    assert {box["stage"]: box["shape"] for box in boxes}["keys"] == "(1, 1024, 768)", boxes
    split = [box for box in boxes if box["shapeLines"] > 1]
    assert not split, split
    outside = [box for box in boxes if box["past"] > 1]
    assert not outside, outside
