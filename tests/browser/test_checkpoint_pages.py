"""A GPT-2 checkpoint in a real Chromium: the server lists a checkpoint from ATTNVIZ_CHECKPOINTS (written here
with transformers' save_pretrained: config.json + model.safetensors, random weights), every page renders with
it, the layer selectbox switches layers, a tampered name is ignored, and a deep link naming it works as the
first request to a fresh server.  ``ATTNVIZ_UPDATE_SCREENSHOTS=1`` writes docs/screenshots/checkpoint.png.
"""

from __future__ import annotations

import re

import pytest
from helpers.browser import (
    assert_no_exception,
    choose_option,
    commit_text,
    expect,
    grown_margins,
    query_of,
    runs,
    save_screenshot,
    serving_checkpoints,
    sidebar,
    step_generation,
    text_box,
    visit,
    wait_idle,
)

from attnviz import tokens

pytestmark = pytest.mark.browser

NAME = "small-gpt2"
TITLES = {
    "": "Attention heads",
    "steps": "Attention step by step",
    "shapes": "Tensor shapes through the pipeline",
    "tokens": "Tokens and embeddings",
    "compare": "Compare variants",
    "pitfalls": "Pitfall lab",
    "benchmark": "Implementations benchmark",
}
TEXT = "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, browser_available):
    transformers = pytest.importorskip("transformers")
    import torch

    folder = tmp_path_factory.mktemp("checkpoints")
    config = transformers.GPT2Config(n_layer=4, n_head=12, n_embd=384, n_positions=1024)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder / NAME)
    return folder


@pytest.fixture(scope="module")
def server(checkpoints):
    with serving_checkpoints(checkpoints) as running:
        yield running


def main_title(page):
    return page.locator("[data-testid=stMain] h1")


def main_captions(page):
    return page.get_by_test_id("stMain").get_by_test_id("stCaptionContainer")


def pick(page, label: str, option: str) -> None:
    before = runs(page)
    choose_option(page, sidebar(page).get_by_role("combobox", name=label), option)
    wait_idle(page, after=before)
    assert_no_exception(page)


@pytest.mark.parametrize("route", list(TITLES), ids=lambda route: f"/{route}")
def test_every_page_renders_with_the_checkpoint(page, server, route):
    visit(page, f"{server.url}/{route}?weights={NAME}&layer=2&text=Hello%20world%2C%20hello%20world")
    expect(main_title(page)).to_contain_text(TITLES[route])
    expect(sidebar(page).get_by_role("combobox", name="Weights")).to_have_value(NAME)
    if route in ("compare", "pitfalls", "benchmark"):
        expect(page.get_by_test_id("stMain").get_by_text("runs the book's Chapter 3 classes")).to_be_visible()
        return
    expect(main_captions(page).filter(has_text=f"{NAME} · layer 2 of 4").first).to_be_visible()
    if route == "":
        expect(page.get_by_test_id("stMain").get_by_text("Next-token predictions")).to_be_visible()
        flow = page.locator("[data-testid=stMain] .attnviz-flow")
        expect(flow).to_contain_text("(1, 12, 5, 5)")
        expect(flow).to_contain_text("(1, 5, 384)")
    elif route == "shapes":
        graphs = page.get_by_test_id("stGraphVizChart").locator("svg")
        expect(graphs).to_have_count(2)
        expect(graphs.first).to_contain_text("logits")
        expect(graphs.first).to_contain_text("(1, 5, 50257)")
    elif route == "tokens":
        expect(page.get_by_test_id("stMain").get_by_text("The checkpoint's own rows")).to_be_visible()


def test_layer_switch_and_overview_and_screenshot(page, server):
    visit(page, f"{server.url}/?weights={NAME}&text={TEXT.replace(' ', '%20')}")
    expect(main_captions(page).filter(has_text=f"{NAME} · layer 0 of 4").first).to_be_visible()
    for key in ("d_in", "d_out"):
        expect(sidebar(page).get_by_role("textbox", name=key, exact=True)).to_be_disabled()
    expect(sidebar(page).get_by_role("combobox", name="Attention variant")).to_be_disabled()
    pick(page, "Layer", "3")
    expect(main_captions(page).filter(has_text=f"{NAME} · layer 3 of 4").first).to_be_visible()
    assert "layer=3" in page.url and f"weights={NAME}" in page.url

    before = runs(page)
    page.get_by_test_id("stMain").get_by_test_id("stCheckbox").filter(has_text="Show all 4 layers").locator(
        "label").click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    overview = page.locator("[data-testid=stPlotlyChart]").filter(has_text="Every layer × head")
    expect(overview).to_have_count(1)
    expect(overview.locator("g.ytick text")).to_have_count(4)
    assert grown_margins(page) == []  # the overview and every layer's score grids (12 heads) drawn in one pass
    page.evaluate("document.querySelector('[data-testid=stMain]').scrollTo(0, 0)")
    path = save_screenshot(page, "checkpoint", max_height=4400)
    assert path.stat().st_size > 20_000


def test_a_layer_picked_on_the_heads_page_reaches_the_next_page(page, server):
    """The Heads page runs a new layer in its layer fragment alone: the page links that run draws carry it, and the
    page switched to shows that layer (not the layer of the page's last whole run)."""
    visit(page, f"{server.url}/?weights={NAME}&text={TEXT.replace(' ', '%20')}")
    pick(page, "Layer", "2")
    links = sidebar(page).get_by_test_id("stPageLink-NavLink")
    assert {query_of(link.get_attribute("href"))["layer"] for link in links.all()} == {"2"}
    before = runs(page)
    links.filter(has_text="Steps").click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(main_captions(page).filter(has_text=f"{NAME} · layer 2 of 4").first).to_be_visible()
    assert query_of(page.url)["layer"] == "2"


def test_a_layer_switch_sends_the_layers_views_and_nothing_else(page, server):
    """The Heads page's layer is a fragment: a new layer sends that layer's views, the sidebar's Layer selectbox
    and Share & export — not the rest of the sidebar, nor the model's next-token panel — and the URL, the link
    and every view follow it; a sidebar setting changed afterwards reruns the whole page at that layer."""
    received: list[bytes] = []
    page.on("websocket", lambda socket: socket.on(
        "framereceived", lambda payload: received.append(payload if isinstance(payload, bytes) else payload.encode())))
    visit(page, f"{server.url}/?weights={NAME}&text={TEXT.replace(' ', '%20')}")
    main = page.get_by_test_id("stMain")
    expect(main.get_by_text("Next-token predictions", exact=True)).to_have_count(1)
    received.clear()
    pick(page, "Layer", "2")
    expect(main_captions(page).filter(has_text=f"{NAME} · layer 2 of 4").first).to_be_visible()
    sent = b"".join(received)
    assert f"{NAME} · layer 2 of 4".encode() in sent and b"Head statistics" in sent  # the layer's views
    assert b"Next-token predictions" not in sent, "the model's output is the same for every layer: not sent again"
    assert b"GPT-2 tokens beyond 1024 are truncated" not in sent, "the sidebar's Text area is not sent again"
    expect(main.get_by_text("Next-token predictions", exact=True)).to_have_count(1)
    expect(sidebar(page).get_by_role("combobox", name="Layer")).to_have_count(1)
    assert "layer=2" in page.url and f"weights={NAME}" in page.url
    share = sidebar(page).get_by_test_id("stExpander").filter(has_text="Share & export")
    share.locator("summary").click()
    expect(share.get_by_test_id("stCode")).to_contain_text("layer=2")
    pick(page, "Layer", "0")  # back to the layer the page's whole run drew: the URL follows it too
    expect(main_captions(page).filter(has_text=f"{NAME} · layer 0 of 4").first).to_be_visible()
    assert "layer=2" not in page.url
    pick(page, "Layer", "2")
    expect(main_captions(page).filter(has_text=f"{NAME} · layer 2 of 4").first).to_be_visible()

    before = runs(page)
    sidebar(page).get_by_test_id("stCheckbox").filter(has_text="Causal mask").locator("label").click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(main_captions(page).filter(has_text=f"{NAME} · layer 2 of 4").filter(
        has_text="causal mask OFF").first).to_be_visible()
    expect(sidebar(page).get_by_role("combobox", name="Layer")).to_have_count(1)
    expect(main.get_by_text("Next-token predictions", exact=True)).to_have_count(1)
    assert "layer=2" in page.url and "causal=false" in page.url


def test_a_new_text_with_a_checkpoint_reruns_the_whole_page(page, server):
    """With a checkpoint the Text area is the sidebar's (the model's next-token panel, outside the layer's fragment,
    reads the text too): a new text redraws the panel for it."""
    visit(page, f"{server.url}/?weights={NAME}&text={TEXT.replace(' ', '%20')}")
    main = page.get_by_test_id("stMain")
    commit_text(page, "Hello world")
    assert_no_exception(page)
    expect(main.get_by_text(re.compile(r"What the model predicts after “·world” \(position 1\)"))).to_be_visible()
    expect(main_captions(page).filter(has_text="2 tokens").first).to_be_visible()
    expect(text_box(page)).to_have_count(1)


def test_tampered_name_is_ignored_with_a_notice(page, server):
    visit(page, f"{server.url}/?weights=%2Fetc%2Fpasswd&text=Hello")
    expect(page.get_by_test_id("stMain").get_by_test_id("stAlertContainer").filter(  # at the top, where one looks
        has_text="Ignored URL parameter weights")).to_have_count(1)
    expect(sidebar(page).get_by_role("combobox", name="Weights")).to_have_value(re.compile("Book's classes"))
    expect(main_captions(page).filter(has_text="seeded random weights").first).to_be_visible()


def test_deep_link_naming_the_checkpoint_is_a_fresh_servers_first_request(page, checkpoints):
    with serving_checkpoints(checkpoints) as fresh:
        visit(page, f"{fresh.url}/steps?weights={NAME}&layer=1&text=Hello%20world%20hello")
        expect(main_title(page)).to_contain_text("Attention step by step")
        expect(sidebar(page).get_by_role("combobox", name="Weights")).to_have_value(NAME)
        expect(main_captions(page).filter(has_text=f"{NAME} · layer 1 of 4").first).to_be_visible()
        expect(page.locator("[data-testid=stMain] [data-testid=stPlotlyChart]").first).to_be_visible()


def test_knock_outs_with_the_checkpoint(page, server):
    visit(page, f"{server.url}/induction?weights={NAME}")
    main = page.get_by_test_id("stMain")
    expect(main).to_contain_text("Knock heads out: which ones does the model need?")
    grid = main.get_by_test_id("stPlotlyChart").filter(has_text="knock out one head")
    expect(grid).to_be_attached()
    expect(grid.locator("g.ytick text")).to_have_count(4)  # the checkpoint's 4 layers
    expect(main.get_by_test_id("stPlotlyChart").filter(has_text="knocked out vs intact")).to_be_attached()
    visit(page, f"{server.url}/?weights={NAME}&layer=3&text={TEXT.replace(' ', '%20')}")
    before = runs(page)
    main.get_by_test_id("stExpander").filter(has_text="What this attention does").locator("summary").click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(main).to_contain_text("log-probability of")


def test_generate_with_the_checkpoint_steps_with_its_cache(page, server):
    """The Generate page with a GPT-2 checkpoint: Step draws a new token whose step equals the uncached forward, and
    the cache holds 4 layers × K and V × (prompt + 1) tokens × 12 heads × 32 dims in fp32."""
    prompt = "Hello world, hello world"
    visit(page, f"{server.url}/generate?weights={NAME}&text={prompt.replace(' ', '%20').replace(',', '%2C')}")
    main = page.get_by_test_id("stMain")
    expect(main_title(page)).to_contain_text("Generate")
    expect(main.get_by_text("Step 0 of 20")).to_be_visible()
    step_generation(page, 1)
    n = len(tokens.encode(prompt))
    expect(main.get_by_test_id("stMetric").filter(has_text="KV cache held")).to_contain_text(
        f"{4 * 2 * (n + 1) * 12 * 32 * 4 / 1000:,.2f} kB")
