"""The Generate page in a real Chromium: the bundled model's prefill, then Step draws the new token (the one a greedy
loop computed here chooses), its top 5, the rows map and the cache growing by one token; the time from the click to
the drawn step is printed (benchmarks/README.md keeps the numbers).  With the sidebar on multi-head latent attention
and no model, the page's small random GPT (labelled as noise) caches the latent, (1, n, latent_dim), growing."""

from __future__ import annotations

import re
import time

import pytest
import torch
from helpers.browser import (
    assert_no_exception,
    choose_option,
    expect,
    grown_margins,
    query_of,
    runs,
    save_screenshot,
    save_screenshot_at,
    share_link,
    sideways,
    step_generation,
    wait_idle,
)

from attnviz import models, tokens

pytestmark = pytest.mark.browser

TEXT = "Once upon a time, the cat"


def expected_tokens(new: int) -> list[int]:
    model = models.load_checkpoint(str(models.BUNDLED)).eval()
    ids = tokens.encode(TEXT)
    with torch.no_grad():
        for _ in range(new):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids[-new:]


PLAYED_PAST = """(least) => [...document.querySelectorAll('[data-testid=stMain] strong')].some(
    (el) => /^Step (\\d+) of/.test(el.textContent) && Number(el.textContent.match(/^Step (\\d+)/)[1]) >= least)"""


def new_token_metric(page):
    return page.get_by_test_id("stMetric").filter(has_text="New token").get_by_test_id("stMetricValue")


def test_step_draws_the_new_token_and_the_growing_cache(page, server):
    page.goto(f"{server.url}/generate?weights=bundled%20model&text={TEXT.replace(' ', '%20').replace(',', '%2C')}")
    wait_idle(page, timeout=120_000)  # a fresh server's first page: torch, the model, the generation
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.locator("h1")).to_contain_text("Generate")
    n = len(tokens.encode(TEXT))
    expect(main.get_by_text("Step 0 of 20")).to_be_visible()
    expect(new_token_metric(page)).to_have_text("—")
    expect(main.get_by_text("Equals the uncached forward")).to_be_visible()
    first, second = expected_tokens(2)

    for k, token in ((1, first), (2, second)):
        before = runs(page)
        start = time.perf_counter()
        main.get_by_role("button", name="Step").click()
        wait_idle(page, after=before)
        expect(main.get_by_text(f"Step {k} of 20")).to_be_visible()
        print(f"step {k}: drawn {time.perf_counter() - start:.3f} s after the click")
        assert_no_exception(page)
        expect(new_token_metric(page)).to_have_text(tokens.pieces([token])[0].piece)
        expect(main.get_by_text("The new token, chosen from the top 5")).to_be_visible()
        top_5 = main.get_by_test_id("stDataFrame").filter(has=page.locator("th", has_text=re.compile("^rank$")))
        expect(top_5.locator("tbody tr").first).to_contain_text(tokens.pieces([token])[0].piece)  # rank 1: chosen
        expect(main.get_by_text("Equals the uncached forward")).to_be_visible()
        expect(main.locator(".js-plotly-plot").filter(has_text="query row over the cached keys")).to_have_count(1)
        assert grown_margins(page) == []  # the rows map (and the cost chart) drawn in one pass: margins fit
        rows_map = main.locator(".js-plotly-plot").filter(has_text="query row over the cached keys")
        expect(rows_map.locator("g.xtick text").first).to_be_visible()  # the key tokens under the map
        expect(rows_map.locator("g.ytick text")).to_have_count(k)  # one query row a step
        expect(rows_map.locator("text.xtitle")).to_have_text("key (cached token)")
        expect(main.get_by_test_id("stMetric").filter(has_text="KV cache held")).to_contain_text(
            f"{2 * 2 * (n + k) * 2 * 64 * 4 / 1000:,.2f} kB")  # 2 layers × K, V × n tokens × 2 heads × 64 × fp32
        flow = main.locator(".attnviz-cache-flow")  # layer 0's cache: the new token's slice onto what it held
        expect(flow).to_contain_text("keys of the fed tokens (1, 1, 2, 64)")  # the book's (b, n, heads, head_dim)
        expect(flow).to_contain_text(f"cache_v (1, {n + k}, 2, 64)")
    save_screenshot(page, "generate")


def test_a_random_gpt_with_latent_attention_caches_the_latent(page, server):
    text = "The cat sat on the mat"
    n = len(tokens.encode(text))
    page.goto(f"{server.url}/generate?weights=book&variant=mla&latent_dim=48&text={text.replace(' ', '%20')}")
    wait_idle(page, timeout=120_000)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.get_by_text("Its weights are random: its text is noise")).to_be_visible()
    expect(main.get_by_text("Step 0 of 20")).to_be_visible()
    table = main.get_by_test_id("stDataFrame").filter(has=page.locator("th", has_text=re.compile("^layer$")))
    expect(table.locator("thead")).to_contain_text("cache_c_kv")
    expect(table.locator("tbody tr").first).to_contain_text(f"(1, {n}, 48)")  # the latent, one per token
    expect(main.get_by_test_id("stMetric").filter(has_text="KV cache held")).to_contain_text(
        f"{2 * n * 48 * 4 / 1000:,.2f} kB")  # 2 layers × n tokens × a 48-wide latent × fp32
    step_generation(page, 1)
    expect(main.get_by_test_id("stMetric").filter(has_text="KV cache held")).to_contain_text(
        f"{2 * (n + 1) * 48 * 4 / 1000:,.2f} kB")
    expect(main.get_by_text(f"kv_cache_bytes(context_length={n + 1}, emb_dim=128, n_heads=8, n_layers=2, "
                            "latent_dim=48, dtype='fp32')")).to_be_visible()  # a call that runs as shown


def test_a_page_switch_while_playing_keeps_the_pages_settings(page, server):
    """Leaving Generate while Play steps on, and coming back: New tokens and the random GPT chosen are as the user
    left them (the page's widgets keep their values for the session, whichever run the page switch interrupts)."""
    page.goto(f"{server.url}/generate?weights=book&text=The%20cat%20sat%20on%20the%20mat")
    wait_idle(page, timeout=120_000)
    main, sidebar = page.get_by_test_id("stMain"), page.get_by_test_id("stSidebar")
    choose_option(page, main.get_by_role("combobox", name="Or generate with a small random GPT"),
                  "a small random GPT with grouped-query attention")
    wait_idle(page)
    new_tokens = main.get_by_role("textbox", name="New tokens", exact=True)
    before = runs(page)
    new_tokens.fill("30")
    new_tokens.press("Enter")
    wait_idle(page, after=before)
    expect(main.get_by_text("Step 0 of 30")).to_be_visible()
    main.get_by_role("button", name="Play").click()
    # playing: the fragment reruns itself (its first steps on a fresh server build the random GPT's caches: not 5 s)
    expect(main.get_by_text("Step 2 of 30")).to_be_visible(timeout=30_000)
    before = runs(page)
    sidebar.get_by_test_id("stPageLink-NavLink").filter(has_text="Steps").click()
    wait_idle(page, after=before)
    expect(main.locator("h1").first).to_contain_text("step by step")
    before = runs(page)
    sidebar.get_by_test_id("stPageLink-NavLink").filter(has_text="Generate").click()
    wait_idle(page, after=before, timeout=120_000)
    assert_no_exception(page)
    expect(new_tokens).to_have_value("30")
    expect(main.get_by_role("combobox", name="Or generate with a small random GPT")).to_have_value(
        "a small random GPT with grouped-query attention")
    expect(main.get_by_text(" of 30", exact=False).first).to_be_visible()


def test_the_step_layer_and_head_are_in_the_link_and_playing_leaves_no_history_entry_a_step(page, server, browser):
    """A link's step, layer and head open that view; Step moves the URL's step and the Share link drawn by that
    fragment's run; Play steps on with one entry of the browser's history, not one a step; the link of the step Stop
    leaves opens that step in a new session."""
    text = "The cat sat on the mat"
    page.goto(f"{server.url}/generate?weights=bundled%20model&text={text.replace(' ', '%20')}&new_tokens=30&step=3"
              "&map_layer=1&head=1")
    wait_idle(page, timeout=120_000)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.get_by_text("Step 3 of 30")).to_be_visible()
    expect(main.locator(".js-plotly-plot").filter(has_text="layer 1, head 1:")).to_have_count(1)
    step_generation(page, 4, steps=30)
    assert query_of(page.url)["step"] == "4" and query_of(share_link(page))["step"] == "4"
    entries = page.evaluate("history.length")
    main.get_by_role("button", name="Play").click()
    # each step shows for 0.6 s: polled every frame (expect() polls once a second after its first tries, and can miss
    # one step's window)
    page.wait_for_function(PLAYED_PAST, arg=9, timeout=30_000)
    assert query_of(page.url)["step"] == "4"  # while playing: the step Play started from
    before = runs(page)
    main.get_by_role("button", name="Stop").click()
    wait_idle(page, after=before)  # Stop's fragment run; the whole run it asks for writes the step back:
    page.wait_for_function("() => new URLSearchParams(location.search).get('step') !== '4'", timeout=30_000)
    wait_idle(page)
    shown = int(main.get_by_text(" of 30", exact=False).first.inner_text().split("Step ")[1].split(" of")[0])
    assert shown >= 9 and query_of(page.url)["step"] == str(shown)
    assert page.evaluate("history.length") == entries + 1  # Play and Stop are one entry, not one a step
    link = share_link(page)
    assert {"step": str(shown), "map_layer": "1", "head": "1", "new_tokens": "30"}.items() <= query_of(link).items()

    other = browser.new_context(viewport=page.viewport_size)  # another session, as the link's recipient has
    try:
        fresh = other.new_page()
        fresh.goto(link)
        wait_idle(fresh, timeout=120_000)
        assert_no_exception(fresh)
        expect(fresh.get_by_test_id("stMain").get_by_text(f"Step {shown} of 30")).to_be_visible()
        expect(fresh.get_by_test_id("stMain").locator(".js-plotly-plot").filter(has_text="layer 1, head 1:")
               ).to_have_count(1)
    finally:
        other.close()



# Boxes of a Plotly chart's parts, in page pixels: its SVG, title, legend, tick labels of each axis.
_CHART_BOXES = """(gd) => {
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const svg = gd.querySelector('svg.main-svg');
  const title = gd.querySelector('text.gtitle');
  const legend = gd.querySelector('g.legend');
  const ticks = (axis) => [...gd.querySelectorAll(`g.${axis}tick text`)]
      .filter((t) => t.textContent.trim() && getComputedStyle(t).display !== 'none').map(box);
  const plot = gd.querySelector('rect.nsewdrag');
  const xtitle = gd.querySelector('text.xtitle');
  return {svg: box(svg), title: title ? box(title) : null, legend: legend ? box(legend) : null,
          plot: box(plot), xtitle: xtitle ? box(xtitle) : null, x: ticks('x'), y: ticks('y')};
}"""


def _overlapping(boxes: list[list[float]], slack: float = 0.5) -> list[tuple[int, int]]:
    """Pairs of boxes that overlap by more than ``slack`` px both ways. A turned label's box is its bounding box, so
    for turned labels the test is stricter than the ink."""
    pairs = []
    for i, a in enumerate(boxes):
        for j in range(i + 1, len(boxes)):
            b = boxes[j]
            if min(a[2], b[2]) - max(a[0], b[0]) > slack and min(a[3], b[3]) - max(a[1], b[1]) > slack:
                pairs.append((i, j))
    return pairs


@pytest.mark.parametrize("width", [1100, 1400])
def test_the_page_is_readable_at_1100_and_1400_px(page, server, width):
    """The rows map's and the cost chart's tick labels do not overlap, their titles are whole inside the chart, the
    cost chart's legend leaves the plot at least 60% of the chart's width and sits under its x axis, and the
    stepper's buttons show their whole labels."""
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto(f"{server.url}/generate?random=swa&new_tokens=12&step=8")
    wait_idle(page, timeout=120_000)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.get_by_text("Step 8 of 12")).to_be_visible()
    save_screenshot_at(page, f"generate-layout-{width}")
    charts = {"map": main.locator(".js-plotly-plot").filter(has_text="query row"),
              "cost": main.locator(".js-plotly-plot").filter(has_text="KV cache of")}
    problems = []  # every fault at once
    for name, chart in charts.items():
        boxes = chart.evaluate(_CHART_BOXES)
        svg, title = boxes["svg"], boxes["title"]
        if not (title and svg[0] - 0.5 <= title[0] and title[2] <= svg[2] + 0.5):
            problems.append((name, "title cut", title, svg))
        for axis in ("x", "y"):
            pairs = _overlapping(boxes[axis])
            if len(boxes[axis]) < 2 or pairs:
                problems.append((name, axis, "tick labels overlap or missing", len(boxes[axis]), pairs[:3]))
        if name == "cost":  # the legend leaves the plot most of the chart's width, and sits under its x labels
            legend, plot = boxes["legend"], boxes["plot"]
            if plot[2] - plot[0] < 0.6 * (svg[2] - svg[0]):
                problems.append((name, "the legend squeezes the plot", plot, svg))
            below = max(box[3] for box in [*boxes["x"], boxes["xtitle"]])
            if not (legend[1] >= below - 0.5 and legend[3] <= svg[3] + 0.5):
                problems.append((name, "legend over the x axis", legend, below))
    for label in ("Step", "Play", "Prefill"):
        button = main.get_by_role("button", name=label)
        expect(button).to_be_visible()
        cut = button.evaluate("(b) => [...b.querySelectorAll('*')].some((el) => el.scrollWidth > el.clientWidth + 1)"
                              " || b.scrollWidth > b.clientWidth + 1")
        if cut:
            problems.append((label, "button label cut", button.inner_text()))
    assert problems == [], f"at {width} px: {problems}"


def test_the_top_5_and_the_cache_table_fit_the_page_at_800_1024_and_1400_px(page, server):
    """The top 5 and every layer's cache are data grids that neither push the page sideways nor scroll sideways
    inside themselves, from a window 800 px wide with the sidebar open — a long cache's shapes included.  (The cost
    section's table of real models, thirteen columns of short numbers, may scroll inside itself.)"""
    page.goto(f"{server.url}/generate?random=gqa&new_tokens=100&step=100")
    wait_idle(page, timeout=120_000)
    assert_no_exception(page)
    expect(page.get_by_test_id("stMain").get_by_text("Step 100 of 100")).to_be_visible()
    problems = {}
    for width in (1400, 1024, 800):
        seen = sideways(page, width)
        ours = {names: px for names, px in seen["grids"].items() if names.startswith(("rank | ", "layer | "))}
        if seen["page"] > 1 or len(ours) != 2 or any(px > 1 for px in ours.values()):
            problems[width] = seen
        save_screenshot_at(page, f"generate-tables-{width}")
    assert problems == {}, problems


_COST_TEXTS = """(gd) => {
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  return {svg: box(gd.querySelector('svg.main-svg')), title: box(gd.querySelector('text.gtitle')),
          entries: [...gd.querySelectorAll('g.legend g.traces')].map((g) => ({
            text: g.querySelector('text.legendtext').textContent, box: box(g.querySelector('text.legendtext')),
            clip: box(g.closest('g.legend').querySelector('rect.bg'))}))};
}"""


@pytest.mark.parametrize("width", [900, 1400])
def test_the_cost_chart_a_link_names_reads_whole_at_900_and_1400_px(page, server, width):
    """The teacher's link to Gemma 3 270M's chart in fp8 opens it; its title, every legend label and the dtype box
    show whole, none cut at the chart's or the box's edge, the model's own line is named as the table names it, and
    the table shows each model's cache without scrolling sideways."""
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto(f"{server.url}/generate?sizes=Gemma+3+270M&dtype=fp8")
    wait_idle(page, timeout=120_000)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    chart = main.locator(".js-plotly-plot").filter(has_text="KV cache of Gemma 3 270M")
    chart.scroll_into_view_if_needed()
    save_screenshot_at(page, f"generate-cost-{width}")
    found = chart.evaluate(_COST_TEXTS)
    svg, title = found["svg"], found["title"]
    problems = [] if svg[0] - 0.5 <= title[0] and title[2] <= svg[2] + 0.5 else [("title cut", title, svg)]
    texts = [entry["text"] for entry in found["entries"]]
    assert any(text.startswith("MQA + SWA 5:1 (1 K/V head × 256") for text in texts), texts
    assert not any(text.startswith("GQA (1 K/V head") for text in texts), texts
    problems += [("legend label cut", entry["text"], entry["box"], entry["clip"]) for entry in found["entries"]
                 if entry["box"][2] > min(entry["clip"][2], svg[2]) + 0.5]
    dtype = main.get_by_test_id("stSelectbox").filter(has_text="dtype")
    assert dtype.get_by_role("combobox").input_value() == "fp8"
    cut = dtype.evaluate("(box) => [...box.querySelectorAll('*')].filter((el) => el.textContent.trim() && "
                         "el.scrollWidth > el.clientWidth + 1).map((el) => el.textContent.trim())")
    problems += [("dtype box cut", cut)] if cut else []
    # the grid's columns drawn without scrolling sideways (its accessible table holds the ones drawn)
    shown = main.get_by_test_id("stDataFrame").last.evaluate(
        "(grid) => [...grid.querySelectorAll('th[role=columnheader]')].map((th) => th.textContent)")
    if shown[:3] != ["model", "attention", "KV cache at full context"]:
        problems.append(("the table's cache column is not shown", shown))
    assert problems == [], f"at {width} px: {problems}"


def test_a_real_models_chart_and_the_dtype_box_agree_on_its_dtype(page, server):
    """Sizes = Llama 3.2 1B picked on the page: the chart's title says the model's own bf16, and the dtype box, its
    label and its value, says nothing of the fp32 of the model shown before."""
    page.goto(f"{server.url}/generate?random=none")
    wait_idle(page, timeout=120_000)
    main = page.get_by_test_id("stMain")
    before = runs(page)
    choose_option(page, main.get_by_role("combobox", name="Sizes"), "Llama 3.2 1B")
    wait_idle(page, after=before)
    assert_no_exception(page)
    chart = main.locator(".js-plotly-plot").filter(has_text="KV cache of Llama 3.2 1B")
    expect(chart.locator("text.gtitle")).to_contain_text("(bf16, batch 1)")
    dtype_box = main.get_by_test_id("stSelectbox").filter(has_text="dtype")
    assert "fp32" not in dtype_box.inner_text() and "fp32" not in dtype_box.get_by_role("combobox").input_value()


def test_the_cost_charts_byte_axis_reads_one_label_a_power_of_10(page, server):
    """The cost chart's log byte axis labels 1M, 10M, 100M, 1G …, not Plotly's 2 and 5 between them ("2, 100M, 5, 2,
    10M"), and a billion bytes reads 1G, not "1B"."""
    page.goto(f"{server.url}/generate?random=none")
    wait_idle(page, timeout=120_000)
    assert_no_exception(page)
    chart = page.get_by_test_id("stMain").locator(".js-plotly-plot").filter(has_text="KV cache of")
    chart.scroll_into_view_if_needed()
    labels = chart.evaluate("(gd) => [...gd.querySelectorAll('g.ytick text')].map((t) => t.textContent)")
    assert len(labels) >= 3, labels
    assert all(re.fullmatch(r"(1|10|100)[kMGTP]?", label) for label in labels), labels


def test_back_after_play_ran_to_the_end_shows_the_step_play_started_from_and_forward_the_end(page, server):
    """Play is one action and one entry of the browser's history: the URL keeps the step Play started from while it
    steps on, and the step it ends on replaces it in one change.  Back from the end shows that step (3), never the
    prefill the user did not see there, and Forward the end again."""
    text = "one two three four five one two three"
    page.goto(f"{server.url}/generate?weights=bundled+model&text={text.replace(' ', '+')}")
    wait_idle(page, timeout=120_000)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    for k in (1, 2, 3):
        step_generation(page, k)
    assert query_of(page.url)["step"] == "3"
    main.get_by_role("button", name="Play").click()
    page.wait_for_function(PLAYED_PAST, arg=1, timeout=30_000)
    assert query_of(page.url).get("step") == "3"  # while playing: the step Play started from
    page.wait_for_function("() => new URLSearchParams(location.search).get('step') === '20'", timeout=60_000)
    wait_idle(page)
    expect(main.get_by_text("Step 20 of 20")).to_be_visible()
    expect(main.get_by_role("button", name="Play")).to_be_visible()  # Play has ended

    before = runs(page)
    page.go_back()
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(main.get_by_text("Step 3 of 20")).to_be_visible()
    assert query_of(page.url).get("step") == "3"
    before = runs(page)
    page.go_forward()
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(main.get_by_text("Step 20 of 20")).to_be_visible()
    assert query_of(page.url).get("step") == "20"
