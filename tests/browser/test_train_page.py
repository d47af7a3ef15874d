"""The Train page in a real Chromium: a training starts, its progress and curves update while it runs (the page
polls; nothing is clicked), Stop stops it, and the model trained so far is offered as weights in the sidebar
and draws on the Heads page.  Waits poll the page, never fixed sleeps.  ``ATTNVIZ_UPDATE_SCREENSHOTS=1``
writes docs/screenshots/train.png."""

from __future__ import annotations

import os
import re

import pytest
from helpers.browser import (
    assert_no_exception,
    bands_under_axes,
    expect,
    grown_margins,
    runs,
    save_screenshot,
    wait_idle,
)

pytestmark = pytest.mark.browser

STEPS = 400
HUGE = "9" * 20  # past 2**53 − 1, the largest whole number a browser's number holds exactly
TRAINING_TIMEOUT_MS = 180_000
# the first steps tokenize the training text (a few seconds on a busy CPU)
FULL_RUN_TIMEOUT_MS = 30 * 60_000  # the default run, on a busy machine

# the step number in the progress text ("Training: step 12 of 400 · …"), -1 before it shows
_STEP = """() => {
  const bar = document.querySelector('[data-testid=stMain] [data-testid=stProgress]');
  const match = bar && bar.innerText.match(/step (\\d+) of/);
  return match ? Number(match[1]) : -1;
}"""
# the loss curve's drawn line (its SVG path) — changes when new steps are drawn
_LOSS_PATH = """() => {
  const charts = [...document.querySelectorAll('[data-testid=stMain] [data-testid=stPlotlyChart]')];
  const loss = charts.find((chart) => (chart.querySelector('.gtitle')?.textContent || '') === 'training loss');
  const line = loss && loss.querySelector('g.scatterlayer g.trace path.js-line');
  return line ? line.getAttribute('d') : '';
}"""


def step_shown(page) -> int:
    return page.evaluate(_STEP)


# the before/after grids: each one's column and figure width, its plot's left and width, and every tile's left, width,
# top and height in px
_GRIDS = """() => [...document.querySelectorAll('[data-testid=stMain] [data-testid=stPlotlyChart]')].flatMap((c) => {
  const title = c.querySelector('.gtitle')?.textContent || '';
  if (!/^(before \\(step 0\\)|after \\d+ steps)$/.test(title)) return [];
  const layout = c.querySelector('.js-plotly-plot')._fullLayout;
  const tiles = Object.keys(layout).filter((key) => /^xaxis\\d*$/.test(key)).map((key) => {
    const x = layout[key], y = layout['y' + key.slice(1)];
    return [x._offset, x._length, y._offset, y._length];
  });
  const column = c.closest('[data-testid=stVerticalBlock]').getBoundingClientRect().width;
  return [{title, column, figure: layout.width, left: layout._size.l, plot: layout._size.w, tiles}];
})"""


def assert_square_tiles(page, width: int) -> None:
    """At a window ``width`` px wide: the before and after grids each fill their column, every head's tile square, a
    row of tiles across the plot."""
    page.set_viewport_size({"width": width, "height": 1000})
    page.wait_for_timeout(500)  # Plotly redraws on resize
    wait_idle(page)
    grids = page.evaluate(_GRIDS)
    assert len(grids) == 2, grids
    for grid in grids:
        assert abs(grid["figure"] - grid["column"]) <= 1, (width, grid)
        assert all(abs(w - h) <= 1 for _, w, _, h in grid["tiles"]), (width, grid)  # no band above or below cells
        first_row = [tile for tile in grid["tiles"] if abs(tile[2] - grid["tiles"][0][2]) < 1]
        start, end = min(x for x, *_ in first_row), max(x + w for x, w, *_ in first_row)
        assert abs(start - grid["left"]) <= 2 and abs(end - grid["left"] - grid["plot"]) <= 2, (width, grid)


# the score curves' column and figure width, the margins asked for, the two panels' widths
_SCORES = """() => [...document.querySelectorAll('[data-testid=stMain] [data-testid=stPlotlyChart]')].flatMap((c) => {
  if (!c.textContent.includes('induction: mean A')) return [];
  const layout = c.querySelector('.js-plotly-plot')._fullLayout;
  const column = c.closest('[data-testid=stVerticalBlock]').getBoundingClientRect().width;
  return [{column, figure: layout.width, margin: {l: layout.margin.l, r: layout.margin.r},
           panels: [layout.xaxis._length, layout.xaxis2._length]}];
})"""


def assert_curves_across(page, width: int) -> None:
    """At a window ``width`` px wide (set by :func:`assert_square_tiles`): the score curves' two panels share the
    column but for the numbers on their left, their legend under them, and under each axis no empty band."""
    (scores,) = page.evaluate(_SCORES)
    assert abs(scores["figure"] - scores["column"]) <= 1, (width, scores)
    room = scores["column"] - scores["margin"]["l"]  # right of the numbers: the panels, nothing beside them
    assert sum(scores["panels"]) >= 0.9 * room and min(scores["panels"]) >= 0.45 * room, (width, scores)
    for chart in bands_under_axes(page, ["induction: mean A", "training loss"]):
        assert chart["lowest"] > chart["plotBottom"] and 0 <= chart["band"] <= 12, (width, chart)


@pytest.mark.parametrize("box", ["Training steps", "Seed"])
def test_a_number_past_what_a_browsers_number_holds_is_sent_and_start_trains_nothing_saying_why(page, base_url, box):
    """A whole number past 2**53 typed in a box, and Start clicked at once: the box sends what it shows, so Start
    trains nothing, and the page's warning names the box and the number.  A number box kept such a number in view,
    red, sent nothing, and Start trained the box's last number."""
    page.goto(f"{base_url}/train")
    wait_idle(page)
    main = page.get_by_test_id("stMain")
    field = main.get_by_label(box, exact=True)
    field.fill(HUGE)
    before = runs(page)
    main.get_by_role("button", name=re.compile("Start training")).click()
    wait_idle(page, after=before)
    wait_idle(page)
    assert_no_exception(page)
    expect(main.get_by_test_id("stProgress")).to_have_count(0)
    expect(main.get_by_text("Nothing trained in this session yet", exact=False)).to_be_visible()
    expect(field).to_have_value(HUGE)
    warning = main.get_by_test_id("stAlert").filter(has_text=f"{box} 99,999,999,999,999,999,999 is outside")
    expect(warning).to_contain_text("Start trains nothing until the box holds a number in that range.")
    expect(main.get_by_role("button", name=re.compile("Start training"))).to_be_disabled()


def test_training_updates_live_and_stops_and_the_model_becomes_weights(page, base_url):
    page.goto(f"{base_url}/train")
    wait_idle(page)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.locator("h1")).to_contain_text("Train a model, watch its heads form")
    expect(main.get_by_text("Nothing trained in this session yet", exact=False)).to_be_visible()

    steps = main.get_by_label("Training steps", exact=True)
    before = runs(page)
    steps.fill(str(STEPS))
    steps.press("Enter")
    wait_idle(page, after=before)
    main.get_by_role("button", name=re.compile("Start training")).click()

    # the live view polls the job: the step count and the loss curve move without any click
    page.wait_for_function(f"({_STEP})() >= 3", timeout=TRAINING_TIMEOUT_MS)
    first_step, first_path = step_shown(page), page.evaluate(_LOSS_PATH)
    page.wait_for_function(f"(() => {{ const s = ({_STEP})(); const d = ({_LOSS_PATH})();"
                           f" return s > {first_step} + 2 && d && d !== {first_path!r}; }})()",
                           timeout=TRAINING_TIMEOUT_MS)
    expect(main.get_by_test_id("stProgress")).to_contain_text(re.compile(rf"Training: step \d+ of {STEPS}"))
    # the head-score curves (one line per head), after the first probe
    scores = main.get_by_test_id("stPlotlyChart").filter(has_text="induction: mean A")
    expect(scores.locator("g.scatterlayer g.trace path.js-line").first).to_be_attached(timeout=TRAINING_TIMEOUT_MS)
    assert_no_exception(page)
    assert grown_margins(page) == []  # the live charts, redrawn every few steps, each drawn in one pass

    # stop: the run ends early, keeps its model, and offers it as weights
    stopped_at = step_shown(page)
    main.get_by_role("button", name=re.compile("Stop")).click()
    expect(main.get_by_test_id("stProgress")).to_contain_text(re.compile(r"Stopped: step \d+ of " + str(STEPS)),
                                                              timeout=TRAINING_TIMEOUT_MS)
    wait_idle(page)
    assert_no_exception(page)
    final = step_shown(page)
    assert stopped_at <= final < STEPS
    expect(main.get_by_text("The heads before and after")).to_be_visible()
    for width in (800, 1400):  # the maps before and after: square tiles filling their column; the curves across it
        assert_square_tiles(page, width)
        assert_curves_across(page, width)
    option = f"trained: stopped at step {final} of {STEPS}, seed 0"
    expect(main.get_by_test_id("stAlert").filter(has_text=option)).to_be_visible()
    expect(main.get_by_role("button", name=re.compile("Download the trained model"))).to_be_visible()
    assert grown_margins(page) == []  # the results: the maps before and after, the final scores, the loss
    save_screenshot(page, "train_stopped")

    # the Train page's sidebar has only the page links; on the Heads page the sidebar lists the trained model,
    # and picking it draws its heads with their types
    sidebar = page.get_by_test_id("stSidebar")
    expect(sidebar.get_by_role("combobox", name="Weights")).to_have_count(0)
    sidebar.get_by_role("link", name="Heads").click()
    wait_idle(page)
    before = runs(page)
    sidebar.get_by_role("combobox", name="Weights").click()
    page.get_by_test_id("stSelectboxVirtualDropdown").get_by_role("option", name=option, exact=True).click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(main.locator("h1")).to_contain_text("Attention heads")
    expect(main.get_by_text("Head types", exact=True)).to_be_visible()
    before = runs(page)  # every layer's types: the opt-in every-layer pass
    main.get_by_test_id("stCheckbox").filter(has_text=re.compile(r"Show all \d+ layers")).locator("label").click()
    wait_idle(page, after=before)
    expect(main.get_by_test_id("stPlotlyChart").filter(has_text="every layer's heads on this text")).to_be_attached()


@pytest.mark.skipif(os.environ.get("ATTNVIZ_UPDATE_SCREENSHOTS") != "1",
                    reason="the whole default run takes minutes: it runs to refresh docs/screenshots/train.png "
                           "(ATTNVIZ_UPDATE_SCREENSHOTS=1)")
def test_the_default_run_to_the_end_for_the_readme(page, base_url):
    page.goto(f"{base_url}/train")
    wait_idle(page)
    main = page.get_by_test_id("stMain")
    main.get_by_role("button", name=re.compile("Start training")).click()
    expect(main.get_by_test_id("stProgress")).to_contain_text(re.compile(r"Finished: step (\d+) of \1"),
                                                              timeout=FULL_RUN_TIMEOUT_MS)
    wait_idle(page)
    assert_no_exception(page)
    expect(main.get_by_text("The heads before and after")).to_be_visible()
    path = save_screenshot(page, "train", max_height=3200)
    assert path.stat().st_size > 20_000, f"{path} looks empty"
