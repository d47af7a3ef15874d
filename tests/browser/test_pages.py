"""attnviz in a real Chromium: what a user sees on every page, typing, the sidebar controls, hostile
text, shared links as the first request to a fresh server, and empty input.

Each test opens its own browser context, i.e. its own Streamlit session.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import numpy as np
import pytest
from helpers.browser import (
    MAP_DRAWN,
    assert_no_exception,
    choose_option,
    commit_text,
    expect,
    grown_margins,
    query_of,
    runs,
    save_screenshot,
    share_link,
    sidebar,
    text_box,
    visit,
    wait_expanded,
    wait_idle,
    wait_past_double_click,
)

from attnviz.urlstate import DEFAULTS, share_query
from attnviz.views.figures import COLUMN_LABEL_PX

pytestmark = pytest.mark.browser

DEFAULT_PIECES = ["Your", "·journey", "·starts", "·with", "·one", "·step"]
TITLES = {
    "": "Attention heads",
    "heads": "Attention heads",
    "steps": "Attention step by step",
    "shapes": "Tensor shapes through the pipeline",
    "tokens": "Tokens and embeddings",
}

# --------------------------------------------------------------------------- reading the page

_CHIP_PIECES = """
() => [...document.querySelectorAll('.attnviz-chips > span')].map((chip) =>
    [...chip.childNodes].filter((node) => node.nodeType === Node.TEXT_NODE).map((node) => node.textContent).join(''))
"""


def charts(page):
    """Every chart of the main area (``st.plotly_chart``'s)."""
    return page.locator("[data-testid=stMain] [data-testid=stPlotlyChart]")


def map_charts(page):
    """The charts that draw a map (a token map's image, an embedding's heatmap)."""
    return charts(page).filter(has=page.locator(MAP_DRAWN))


GRID_TITLE = re.compile(r"^(▶ )?head \d+(K/V \d+)?$")  # a title's lines run together in its text: "head 3K/V 1"


def grid_chart(page):
    """The Heads page's thumbnail grid (the chart whose subplot titles read "head N")."""
    return charts(page).filter(has=page.locator("text.annotation-text", has_text=GRID_TITLE)).first


def grid_titles(page) -> list[str]:
    return [t.strip() for t in grid_chart(page).locator("text.annotation-text").all_text_contents()
            if GRID_TITLE.fullmatch(t.strip())]


def focused_chart(page):
    """The Heads page's focused head (titled "head 3: …", or "head 3 · K/V group 1: …"), or the last chart whose axes
    are titled "key token" on a page without one (Steps)."""
    head_title = re.compile(r"^head \d+( · K/V group \d+)?: ")
    titled = charts(page).filter(has=page.locator("text.gtitle", has_text=head_title))
    if titled.count():
        return titled.first
    return charts(page).filter(has=page.locator("text", has_text="key token")).last


def plot_size(chart) -> tuple[float, float]:
    """The width and height Plotly drew a chart's plot (its x and y axes' lengths, after their constraints)."""
    return tuple(chart.locator(".js-plotly-plot").evaluate(
        "(gd) => [gd._fullLayout.xaxis._length, gd._fullLayout.yaxis._length]"))


def assert_square_cells(chart) -> None:
    """A token map of n × n tokens drawn as a square: its cells square, not stretched across the column."""
    width, height = plot_size(chart)
    assert abs(width - height) <= 1 and width > 100, (width, height)


def x_tick_labels(chart) -> list[str]:
    return chart.locator("g.xtick text").all_text_contents()


def chip_pieces(page) -> list[str]:
    return page.evaluate(_CHIP_PIECES)


def query(page) -> dict[str, str]:
    return {key: values[-1] for key, values in parse_qs(urlsplit(page.url).query).items()}


def go_to(page, label: str) -> None:
    """Switch pages with the sidebar's page link (a client-side page switch, same session)."""
    before = runs(page)
    sidebar(page).get_by_test_id("stPageLink-NavLink").filter(has_text=label).click()
    wait_idle(page, after=before)


# --------------------------------------------------------------------------- 1. every page

@pytest.mark.parametrize("route", list(TITLES), ids=lambda route: f"/{route}")
def test_page_loads_with_title_and_figures(page, base_url, route):
    visit(page, f"{base_url}/{route}")
    expect(page.locator("[data-testid=stMain] h1")).to_contain_text(TITLES[route])
    expect(text_box(page)).to_have_value("Your journey starts with one step")
    for label in ("Heads", "Steps", "Shapes", "Tokens"):
        expect(sidebar(page).get_by_test_id("stPageLink-NavLink").filter(has_text=label)).to_be_visible()
    assert page.title().startswith("attnviz · "), page.title()
    icon = page.locator("link[rel='shortcut icon']").get_attribute("href")  # the eye, drawn by the browser
    assert icon.startswith("data:image/svg+xml,") and "%F0%9F%91%81" in icon, icon

    if route in ("", "heads"):
        assert grid_titles(page) == ["▶ head 0"] + [f"head {h}" for h in range(1, 12)]
        expect(grid_chart(page).locator("g.imagelayer g.im image")).to_have_count(12)  # a map a head
        assert x_tick_labels(focused_chart(page)) == DEFAULT_PIECES
        assert_square_cells(focused_chart(page))
        flow = page.locator("[data-testid=stMain] .attnviz-flow")  # the compact shape diagram (HTML)
        expect(flow).to_contain_text("(1, 12, 6, 6)")
        expect(flow.locator(".attnviz-stage[data-stage=weights]")).to_have_css("background-color", "rgb(255, 213, 79)")
    elif route == "steps":
        expect(map_charts(page)).to_have_count(2)  # before / after the default stage (the mask)
        expect(page.get_by_test_id("stMain").get_by_text("Hide the future")).to_be_visible()
        for chart in map_charts(page).all():
            assert x_tick_labels(chart) == DEFAULT_PIECES
            assert_square_cells(chart)  # 6 × 6 tokens: a square, not a band across the column
    elif route == "shapes":
        svg = page.get_by_test_id("stGraphVizChart").locator("svg")
        expect(svg).to_have_count(1)
        for shape in ("(1, 6, 768)", "(1, 6, 12, 64)", "(1, 12, 6, 6)"):
            expect(svg).to_contain_text(shape)
        expect(page.get_by_test_id("stDataFrame")).to_be_visible()
    else:
        assert chip_pieces(page) == DEFAULT_PIECES
        expect(page.get_by_test_id("stMetric")).to_contain_text("6 / 1,024")
        expect(map_charts(page)).to_have_count(3)  # token, position, input embeddings
    assert grown_margins(page) == []  # every chart drawn in one pass: its margins hold its labels

    if route:
        path = save_screenshot(page, route)
        assert path.stat().st_size > 20_000, f"{path} looks empty"


# --------------------------------------------------------------------------- 2. typing

def test_typed_sentence_reaches_tokens_and_heads(page, base_url):
    visit(page, f"{base_url}/tokens")
    commit_text(page, "Every cat loves warm milk")
    assert_no_exception(page)
    expect(page.locator(".attnviz-chips > span")).to_have_count(5)
    assert chip_pieces(page) == ["Every", "·cat", "·loves", "·warm", "·milk"]
    expect(page.get_by_test_id("stMetric")).to_contain_text("5 / 1,024")
    assert query(page)["text"] == "Every cat loves warm milk"

    go_to(page, "Heads")  # the sentence survives the page switch
    assert_no_exception(page)
    expect(page.locator("[data-testid=stMain] h1")).to_contain_text("Attention heads")
    expect(text_box(page)).to_have_value("Every cat loves warm milk")
    assert x_tick_labels(focused_chart(page)) == ["Every", "·cat", "·loves", "·warm", "·milk"]


def test_a_text_committed_on_the_heads_page_reaches_the_next_page_and_its_links(page, base_url):
    """A text committed on the Heads page: the page links drawn by that run carry it, and the page switched to shows
    it, twice in a row."""
    visit(page, f"{base_url}/?text=Start")
    for text, page_name in (("Changed on the heads page", "Steps"), ("Changed again", "Tokens")):
        commit_text(page, text)
        assert_no_exception(page)
        links = sidebar(page).get_by_test_id("stPageLink-NavLink")
        assert {query_of(link.get_attribute("href"))["text"] for link in links.all()} == {text}
        go_to(page, page_name)
        assert_no_exception(page)
        expect(text_box(page)).to_have_value(text)
        assert query(page)["text"] == text
        go_to(page, "Heads")
        expect(text_box(page)).to_have_value(text)


def go_back(page) -> None:
    before = runs(page)
    page.go_back()
    wait_idle(page, after=before)
    assert_no_exception(page)


def test_each_page_switch_is_one_entry_of_the_history_and_back_returns_one_page_per_press(page, base_url):
    """A page switch adds one entry to the browser's history, a new text one more, and Back shows the page before
    in one press: the first run of a page switched to writes nothing to the URL (a page leaves its defaults out, and
    a page's link carries its own parameters as it left them: the Heads page's head 3 and stage)."""
    visit(page, f"{base_url}/?head=3&stage=scores")
    start = page.evaluate("history.length")
    go_to(page, "Steps")
    go_to(page, "Heads")
    assert query(page)["head"] == "3" and query(page)["stage"] == "scores"  # the link carried them
    commit_text(page, "Every cat loves warm milk")
    go_to(page, "Tokens")
    assert page.evaluate("history.length") == start + 4
    for route in ("", "", "steps", ""):  # the new text's entry, the one before it, Steps, the first
        go_back(page)
        expect(page.locator("[data-testid=stMain] h1")).to_contain_text(TITLES[route])
    assert query(page)["head"] == "3" and query(page)["stage"] == "scores"


def test_back_after_a_change_on_the_page_shows_the_view_before_it_in_one_press(page, base_url):
    """A head picked on the page is an entry of the history: Back shows head 0 again (the page reads the entry's URL,
    where before it kept the session's head 3 and wrote the URL over), Forward head 3."""
    visit(page, f"{base_url}/?text=Every%20cat%20loves%20warm%20milk")
    focus = page.get_by_test_id("stMain").get_by_role("combobox", name="Focused head")
    before = runs(page)
    choose_option(page, focus, "head 3")
    wait_idle(page, after=before)
    assert query(page)["head"] == "3"
    go_back(page)
    expect(focus).to_have_value("head 0")
    assert "head" not in query(page)
    before = runs(page)
    page.go_forward()
    wait_idle(page, after=before)
    expect(focus).to_have_value("head 3")
    assert query(page)["head"] == "3"


def test_back_and_forward_over_a_refused_value_show_what_its_notice_says(page, base_url):
    """A link's ``head=99`` on a 12-head model: the notice says "showing head 0" and head 0 shows.  After head 2 is
    picked, the link's entry reached from head 2 in one jump (the Back button's menu) shows head 0 again, where the
    page kept head 2 — also in the URL — under a notice saying head 0; Forward to head 2's entry shows head 2 and the
    notice, about the refused value, goes, where it stayed above head 2."""
    visit(page, f"{base_url}/?text=Every%20cat%20loves%20warm%20milk&head=99")
    main = page.get_by_test_id("stMain")
    focus = main.get_by_role("combobox", name="Focused head")
    notice = main.get_by_test_id("stAlert").filter(has_text="head='99'")
    expect(notice).to_contain_text("showing head 0")
    expect(focus).to_have_value("head 0")
    before = runs(page)
    choose_option(page, focus, "head 2")
    wait_idle(page, after=before)
    expect(notice).to_have_count(0)
    before = runs(page)
    page.evaluate("history.go(-2)")  # from head 2 straight to the link's entry
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(notice).to_contain_text("showing head 0")
    expect(focus).to_have_value("head 0")
    assert "head" not in query(page)
    for _ in range(2):  # the entry the refusal wrote, then head 2's
        before = runs(page)
        page.go_forward()
        wait_idle(page, after=before)
    assert_no_exception(page)
    expect(focus).to_have_value("head 2")
    assert query(page)["head"] == "2"
    expect(notice).to_have_count(0)


def test_a_number_typed_out_of_range_stays_in_its_box_and_the_page_says_the_number_it_draws(page, base_url):
    """The Induction lab's T: 7, then 500 (past the 200 the lab offers) typed and Enter pressed.  The box shows 500,
    and the page draws what the warning under the box says it draws, T = 25 — where a number box showed 500, red,
    while the page went on drawing T = 7."""
    visit(page, f"{base_url}/induction?variant=causal&d_in=8&d_out=8&preset=custom")
    main = page.get_by_test_id("stMain")
    box = main.get_by_label("Repeat length T", exact=True)
    grid_title = main.locator("text.gtitle").filter(has_text="every head on")
    for typed, drawn in (("7", "T = 7"), ("500", "T = 25")):
        before = runs(page)
        box.fill(typed)
        box.press("Enter")
        wait_idle(page, after=before)
        assert_no_exception(page)
        expect(box).to_have_value(typed)
        expect(grid_title).to_contain_text(drawn)
    column = main.get_by_test_id("stColumn").filter(has=page.get_by_label("Repeat length T", exact=True))
    under_box = column.get_by_test_id("stAlert")
    expect(under_box).to_contain_text("Repeat length T 500 is outside 2 … 200: the lab uses T = 25.")
    assert under_box.bounding_box()["y"] > box.bounding_box()["y"]
    assert query(page)["T"] == "500"  # the link reopens the box as it shows


@pytest.mark.parametrize(("link", "title"), [
    ("/?head=2", "Attention heads"),
    ("/", "Attention heads"),
    ("/steps", "Attention step by step"),
    ("/pitfalls?bug=softmax_dim&token=2", "Pitfall lab"),
    ("/induction", "Induction lab"),
    (f"/?text={quote(' '.join(['the cat sat on the mat'] * 60))}&head=3&stage=scaled&row=100", "Attention heads"),
    (f"/steps?{urlencode(share_query(DEFAULTS))}&head=2", "Attention step by step"),  # a Share link
    ("/?weights=bundled+model&layer=1", "Attention heads"),  # the model sets its sizes: the link need not name them
    ("/steps?stage=masked&head=0", "Attention step by step"),  # a page's defaults, named: they give the same view
    ("/pitfalls?bug=softmax_dim&token=3", "Pitfall lab"),  # the middle token, the lab's default, named
], ids=["head", "bare", "steps", "pitfalls", "induction", "a setting", "every setting", "a checkpoint",
        "defaults named", "default token named"])
def test_a_link_without_the_settings_is_one_entry_of_the_history_and_one_back_leaves_the_app(
        page, base_url, link, title):
    """A link that names none of the sidebar's settings, some or all, opens as it is: its first run writes nothing to
    the URL (the settings at their defaults are left out, as a page's own parameters are), so the tab's history grows
    by the one entry of the link, and one Back returns to the page the tab showed before."""
    page.goto("about:blank")
    start = page.evaluate("history.length")
    visit(page, f"{base_url}{link}")
    expect(page.locator("[data-testid=stMain] h1")).to_contain_text(title)
    assert page.evaluate("history.length") == start + 1
    assert page.url == f"{base_url}{link}"  # not rewritten
    page.go_back()
    page.wait_for_url("about:blank")


def test_weights_switched_away_and_back_are_one_entry_each_and_give_back_the_sizes_and_the_layer(page, base_url):
    """Opened on the bundled model at layer 1, head 1: the book's classes picked in the sidebar have the default sizes
    (not the model's 128 and 2 heads) and their URL none of its sizes; the model picked again shows layer 1 and head
    1.  Each switch is one entry of the browser's history."""
    visit(page, f"{base_url}/?weights=bundled+model&layer=1&head=1")
    start = page.evaluate("history.length")
    weights_box = sidebar(page).get_by_role("combobox", name="Weights")
    for label, url, entries in (("Book's classes (seeded random weights)", {"head": "1"}, 1),
                                ("Bundled model (trained by attnviz)",
                                 {"weights": "bundled model", "layer": "1", "head": "1"}, 2)):
        before = runs(page)
        choose_option(page, weights_box, label)
        wait_idle(page, after=before)
        assert_no_exception(page)
        assert query(page) == url
        assert page.evaluate("history.length") == start + entries
    expect(sidebar(page).get_by_role("combobox", name="Layer")).to_have_value("1")
    expect(page.get_by_test_id("stMain").get_by_role("combobox", name="Focused head")).to_have_value("head 1")


def test_a_new_text_on_the_heads_page_reaches_the_views_the_url_and_the_links(page, base_url):
    """With the book's classes a new text reruns the Heads page whole (the sidebar draws the Text area on every page:
    ``sidebar.text_area``): the views, the Text area, the URL, Share & export and the page links follow the text; a
    setting changed afterwards reruns the page with that text; an empty text shows the message and the last valid
    view."""
    visit(page, f"{base_url}/")
    commit_text(page, "Every cat loves warm milk")
    assert_no_exception(page)
    expect(text_box(page)).to_have_value("Every cat loves warm milk")
    links = sidebar(page).get_by_test_id("stPageLink-NavLink")
    assert {query_of(link.get_attribute("href"))["text"] for link in links.all()} == {"Every cat loves warm milk"}
    assert x_tick_labels(focused_chart(page)) == ["Every", "·cat", "·loves", "·warm", "·milk"]
    expect(page.get_by_test_id("stMain").get_by_text(re.compile(r"· 5 tokens ·")).first).to_be_visible()
    assert query(page)["text"] == "Every cat loves warm milk"
    sidebar(page).get_by_text("Share & export").click()
    wait_expanded(sidebar(page).locator("details").filter(has_text="Share & export"))
    expect(sidebar(page).get_by_test_id("stCode")).to_contain_text("text=Every+cat+loves+warm+milk")
    expect(text_box(page)).to_have_count(1)
    commit_text(page, "word " * 1500)  # what the run says about its text is the new text's
    cut = page.get_by_test_id("stMain").get_by_test_id("stAlertContainer").filter(has_text="only the first 1,024")
    expect(cut).to_have_count(1)
    commit_text(page, "Every cat loves warm milk")
    expect(cut).to_have_count(0)

    before = runs(page)
    sidebar(page).get_by_test_id("stCheckbox").filter(has_text="Causal mask").locator("label").click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(page.get_by_test_id("stMain").get_by_text(re.compile(r"no mask · 5 tokens")).first).to_be_visible()
    expect(text_box(page)).to_have_value("Every cat loves warm milk")
    commit_text(page, "one two")
    commit_text(page, "Every cat loves warm milk")  # back to the text the page's last whole run drew
    assert x_tick_labels(focused_chart(page)) == ["Every", "·cat", "·loves", "·warm", "·milk"]
    assert query(page)["text"] == "Every cat loves warm milk"

    commit_text(page, "")
    expect(page.get_by_test_id("stMain").get_by_text("Showing the last valid view.")).to_be_visible()
    assert x_tick_labels(focused_chart(page)) == ["Every", "·cat", "·loves", "·warm", "·milk"]
    expect(text_box(page)).to_have_count(1)
    commit_text(page, "one two three")
    assert_no_exception(page)
    assert x_tick_labels(focused_chart(page)) == ["one", "·two", "·three"]


# --------------------------------------------------------------------------- 3. heads and causal

def test_heads_selectbox_and_causal_toggle_change_grid_and_url(page, base_url):
    visit(page, base_url)
    assert len(grid_titles(page)) == 12
    expect(focused_chart(page).locator("g.legend")).to_contain_text("masked")

    before = runs(page)
    choose_option(page, sidebar(page).get_by_role("combobox", name="Heads"), "4")
    wait_idle(page, after=before)
    assert_no_exception(page)
    assert grid_titles(page) == ["▶ head 0", "head 1", "head 2", "head 3"]
    expect(page.get_by_test_id("stMain").get_by_test_id("stCaptionContainer").first).to_contain_text(
        "4 heads × 192")
    # four tiles in a row of a page made for six: they stay square (not 1.5 times as wide as tall), and taller rows
    # let them span the width six would (square in rows of six's height, they would leave a third of it empty)
    x_px, y_px, spanned = grid_chart(page).locator(".js-plotly-plot").evaluate(
        "(gd) => { const f = gd._fullLayout, [x, y] = [f.xaxis, f.yaxis];"
        " return [...[x, y].map(a => a._length / Math.abs(a.range[1] - a.range[0])),"
        " x._length / (f.width - f.margin.l - f.margin.r)]; }")
    assert x_px == pytest.approx(y_px, rel=0.02)
    assert spanned > 0.9
    gap = grid_chart(page).locator(".js-plotly-plot").evaluate(  # from the tiles' right edge to the colour bar
        "(gd) => gd.querySelector('.colorbar').getBoundingClientRect().left - gd.getBoundingClientRect().left"
        " - gd._fullLayout.xaxis._offset - gd._fullLayout.xaxis._length")
    assert 0 <= gap < 40

    switch = sidebar(page).get_by_role("switch", name="Causal mask")
    expect(switch).to_be_checked()
    before = runs(page)
    sidebar(page).get_by_test_id("stCheckbox").filter(has_text="Causal mask").locator("label").click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(switch).not_to_be_checked()
    expect(focused_chart(page).locator("g.legend")).to_have_count(0)  # no "masked" cells any more
    assert len(grid_titles(page)) == 4

    params = query(page)
    assert params.get("num_heads") == "4", page.url
    assert params.get("causal") == "false", page.url


# --------------------------------------------------------------------------- 4. hostile text

PAYLOAD = "<img src=x onerror=alert(1)> <script>alert(2)</script> <b>bold</b>"

_INJECTED = """
() => ({
  img: document.querySelectorAll('img[src=x], img[src$="/x"]').length,
  script: [...document.querySelectorAll('script')].filter((s) => s.textContent.includes('alert(')).length,
  bold: [...document.querySelectorAll('b, strong')].filter((b) => b.textContent.trim() === 'bold').length,
  svgBold: [...document.querySelectorAll('svg tspan, svg text')].filter((t) => t.textContent.trim() === 'bold'
      && /bold|[6-9]00/.test(t.getAttribute('style') || '')).length,
})
"""


# The page position of a point (x, y) in data coordinates of a Plotly chart's first pair of axes.
_DATA_TO_PAGE = """
([chart, x, y]) => {
  const gd = chart.querySelector('.js-plotly-plot'), full = gd._fullLayout;
  const area = gd.querySelector('.main-svg').getBoundingClientRect();
  return {x: area.left + full.xaxis._offset + full.xaxis.l2p(x), y: area.top + full.yaxis._offset + full.yaxis.l2p(y)};
}
"""


def tile_centre(page, head: int) -> dict:
    """The page position of the centre of head ``head``'s tile in the heads grid (its layout's ``meta.tiles``)."""
    chart = grid_chart(page)
    meta = chart.locator(".js-plotly-plot").evaluate("(gd) => gd.layout.meta")
    x0, y0 = meta["tiles"][head]
    return page.evaluate(_DATA_TO_PAGE, [chart.element_handle(), x0 + meta["size"] / 2 - 0.5,
                                         y0 + meta["size"] / 2 - 0.5])


def cell_centre(page, chart, row: int, col: int) -> dict:
    """The page position of the centre of cell (query ``row``, key ``col``) of a token heatmap."""
    return page.evaluate(_DATA_TO_PAGE, [chart.element_handle(), col, row])


def click_tile(page, head: int):
    """Click the centre of head ``head``'s tile in the heads grid and wait for the rerun: the Focused head selectbox
    (returned) shows that head."""
    centre = tile_centre(page, head)
    before = runs(page)
    page.mouse.click(centre["x"], centre["y"])
    wait_idle(page, after=before)
    assert_no_exception(page)
    focus = page.get_by_test_id("stMain").get_by_role("combobox", name="Focused head")
    expect(focus).to_have_value(f"head {head}")
    return focus


@pytest.mark.parametrize(("width", "settings"),
                         [(1400, ""), (700, ""), (800, ""), (900, ""), (1100, "&variant=gqa"), (900, "&variant=gqa"),
                          (700, "&variant=mqa")])
def test_the_grids_head_titles_sit_clear_of_every_tile_and_of_each_other(page, base_url, width, settings):
    """On a narrow page the tiles shrink and the titles keep their pixel size: every title (a grouped-query head's
    "head 3 · K/V 1" too) sits clear of every tile and of every other title, at 700 px as at 1,400 px, and at 800 and
    900 px with the sidebar open (the grid's column narrowest beside it: "head 10" and "head 11" ran together)."""
    page.set_viewport_size({"width": width, "height": 1000})
    visit(page, f"{base_url}/?text=The%20cat%20sat%20on%20the%20mat{settings}")
    chart = grid_chart(page)
    titles = [title.bounding_box() for title in chart.locator("text.annotation-text").all()]
    tiles = [tile.bounding_box() for tile in chart.locator("g.imagelayer g.im image").all()]
    assert len(titles) == len(tiles) == 12

    def apart(a, b) -> bool:
        return (a["y"] + a["height"] <= b["y"] + 0.5 or b["y"] + b["height"] <= a["y"] + 0.5
                or a["x"] + a["width"] <= b["x"] + 0.5 or b["x"] + b["width"] <= a["x"] + 0.5)

    for index, title in enumerate(titles):
        assert all(apart(title, tile) for tile in tiles), (width, title, tiles)
        assert all(apart(title, other) for other in titles[index + 1:]), (width, title, titles)


@pytest.mark.parametrize("width", [700, 1100, 1400])
def test_the_steps_pages_before_and_after_maps_keep_a_readable_width(page, base_url, width):
    """The before/after pair sits side by side where two maps fit beside the shape diagram and one above the other
    where they do not; each map's colour bar lies under it, so its cells keep a readable width in a window 700 px
    wide as at 1,400 px."""
    page.set_viewport_size({"width": width, "height": 1000})
    visit(page, f"{base_url}/steps?text=Your%20journey%20starts%20with%20one%20step")
    maps = map_charts(page)
    expect(maps).to_have_count(2)
    widths = [chart.locator(".js-plotly-plot").evaluate("(gd) => gd._fullLayout._size.w") for chart in maps.all()]
    assert min(widths) >= 180, widths  # px of cells, 6 tokens: 30 px a cell
    boxes = [chart.locator(MAP_DRAWN).first.bounding_box() for chart in maps.all()]
    assert min(box["width"] for box in boxes) >= 180, boxes  # the map image as drawn
    assert (boxes[0]["y"] == boxes[1]["y"]) == (width == 1400), boxes  # side by side only where two fit
    assert grown_margins(page) == []  # drawn in one pass: the margins hold the colour bars under the maps


def test_clicking_a_thumbnail_focuses_that_head(page, base_url):
    visit(page, f"{base_url}/")
    expect(grid_chart(page).locator("g.imagelayer g.im image")).to_have_count(12)  # one map a head
    assert len(grid_titles(page)) == 12
    focus = click_tile(page, 5)
    expect(focused_chart(page).locator("text.gtitle")).to_contain_text("head 5")
    assert "▶ head 5" in grid_titles(page)
    chart = grid_chart(page)  # a tile's corner, too, is nearest one of its own click points
    meta = chart.locator(".js-plotly-plot").evaluate("(gd) => gd.layout.meta")
    x0, y0 = meta["tiles"][7]
    corner = page.evaluate(_DATA_TO_PAGE, [chart.element_handle(), x0, y0 + meta["size"] - 1])
    wait_past_double_click(chart)
    before = runs(page)
    page.mouse.click(corner["x"], corner["y"])
    wait_idle(page, after=before)
    expect(focus).to_have_value("head 7")


def test_a_head_picked_in_the_selectbox_is_the_one_the_grid_marks(page, base_url):
    """The Focused head selectbox moves the grid's ▶ mark as a click on a tile does, with the focused map: head 4
    picked, the map's title and the grid's one ▶ both say head 4."""
    visit(page, f"{base_url}/")
    focus = page.get_by_test_id("stMain").get_by_role("combobox", name="Focused head")
    before = runs(page)
    choose_option(page, focus, "head 4")
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(focused_chart(page).locator("text.gtitle")).to_contain_text("head 4")
    expect(grid_chart(page).locator("text.annotation-text", has_text="▶")).to_have_text("▶ head 4")


def test_a_click_anywhere_on_a_large_tile_focuses_its_head(page, base_url):
    """Four heads draw tiles of about 140 px: a click on a tile's centre, or beside one of its click points, is that
    tile's (its click points sit closer together than Plotly's hover distance, so no spot of a tile misses them)."""
    visit(page, f"{base_url}/?num_heads=4")
    focus = page.get_by_test_id("stMain").get_by_role("combobox", name="Focused head")
    chart = grid_chart(page)
    meta = chart.locator(".js-plotly-plot").evaluate("(gd) => gd.layout.meta")
    for head, (fx, fy) in ((2, (0.5, 0.5)), (1, (0.5, 0.02)), (3, (0.98, 0.5))):
        x0, y0 = meta["tiles"][head]
        point = page.evaluate(_DATA_TO_PAGE, [chart.element_handle(), x0 - 0.5 + fx * meta["size"],
                                              y0 - 0.5 + fy * meta["size"]])
        wait_past_double_click(chart)
        before = runs(page)
        page.mouse.click(point["x"], point["y"])
        wait_idle(page, after=before)
        assert_no_exception(page)
        expect(focus).to_have_value(f"head {head}")


def test_a_head_focused_on_the_grid_is_in_the_url_and_the_link_and_the_link_opens_it(page, base_url, browser):
    """A click on head 2's thumbnail puts head=2 in the page's URL and in the Share link drawn by that run, and so
    does the stage picked next; the link opened in a new session (a new browser context) shows head 2 focused on
    that stage. A head picked with the selectbox reaches the link too; a page link to Steps carries none of it
    (Steps shows its own head)."""
    visit(page, f"{base_url}/")
    expect(grid_chart(page).locator("g.imagelayer g.im image")).to_have_count(12)
    focus = click_tile(page, 2)
    assert query(page)["head"] == "2"
    assert query_of(share_link(page))["head"] == "2"  # the link drawn by the click's rerun
    show_stage(page, "scaled =")
    expect(focused_chart(page).locator("text.gtitle")).to_contain_text("head 2: scaled")
    assert query(page)["head"] == "2" and query(page)["stage"] == "scaled"
    link = share_link(page)
    assert {"head": "2", "stage": "scaled"}.items() <= query_of(link).items(), link

    other = browser.new_context(viewport=page.viewport_size)  # another session, as the link's recipient has
    try:
        fresh = other.new_page()
        visit(fresh, link)
        expect(fresh.get_by_test_id("stMain").get_by_role("combobox", name="Focused head")).to_have_value("head 2")
        expect(focused_chart(fresh).locator("text.gtitle")).to_contain_text("head 2: scaled")
        assert "▶ head 2" in grid_titles(fresh)
        assert not fresh.get_by_test_id("stMain").get_by_test_id("stAlertContainer").count()  # no notice
    finally:
        other.close()

    before = runs(page)
    choose_option(page, focus, "head 3")  # the focused head's fragment reruns alone
    wait_idle(page, after=before)
    expect(focused_chart(page).locator("text.gtitle")).to_contain_text("head 3")
    assert query(page)["head"] == "3"
    assert query_of(share_link(page))["head"] == "3"
    go_to(page, "Steps")
    assert_no_exception(page)
    expect(page.get_by_test_id("stMain").get_by_role("combobox", name="Focused head")).to_have_value("head 3")
    assert query(page)["head"] == "3" and "stage" not in query(page)  # the Steps page's own stage: its default


def test_the_focused_head_follows_the_page_links_between_heads_and_steps_one_entry_each(page, base_url):
    """Head 3 clicked on the grid, then the sidebar's link to Steps: Steps shows head 3 (the link carried it); head 1
    picked there, the link to Heads shows head 1, its grid marks it.  Each switch is one entry of the browser's
    history, and Back shows the page before with its head."""
    visit(page, f"{base_url}/?num_heads=4")
    focus = page.get_by_test_id("stMain").get_by_role("combobox", name="Focused head")
    click_tile(page, 3)
    start = page.evaluate("history.length")
    go_to(page, "Steps")
    assert_no_exception(page)
    expect(focus).to_have_value("head 3")
    assert query(page)["head"] == "3"
    assert not page.get_by_test_id("stMain").get_by_test_id("stAlertContainer").count()  # no notice
    before = runs(page)
    choose_option(page, focus, "head 1")
    wait_idle(page, after=before)
    go_to(page, "Heads")
    assert_no_exception(page)
    expect(focus).to_have_value("head 1")
    expect(grid_chart(page).locator("text.annotation-text", has_text="▶")).to_have_text("▶ head 1")
    assert query(page)["head"] == "1"
    assert page.evaluate("history.length") == start + 3  # Steps, its head 1, Heads
    go_back(page)
    expect(page.locator("[data-testid=stMain] h1")).to_contain_text(TITLES["steps"])
    expect(focus).to_have_value("head 1")


def test_the_steps_pair_of_a_1024_token_text_is_square_and_drawn_once(page, base_url):
    """On a 1,024-token text the Steps page's pair shows a 256 × 256 window as squares, and their last key label, a
    few cells left of the plot's edge, leans into a right margin that holds it: Plotly draws each map once."""
    from helpers.texts import english_text

    visit(page, f"{base_url}/steps?text={quote(english_text(1024))}")
    expect(map_charts(page)).to_have_count(2)
    for chart in map_charts(page).all():
        assert_square_cells(chart)
        assert len(x_tick_labels(chart)) >= 4
    assert grown_margins(page) == []


def test_the_window_moved_on_a_long_text_is_in_the_url_and_the_link(page, base_url):
    """The window's sliders rerun the focused head's fragment alone: the URL's row and the Share link follow them."""
    visit(page, f"{base_url}/?text={quote(' '.join(['the cat sat on the mat'] * 60))}&row=50")
    assert query(page)["row"] == "50" and query_of(share_link(page))["row"] == "50"
    slider = page.get_by_test_id("stMain").get_by_role("slider").first  # First query row
    before = runs(page)
    slider.focus()
    slider.press("ArrowRight")
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(slider).to_have_value("51")
    assert query(page)["row"] == "51" and query_of(share_link(page))["row"] == "51"


def test_selecting_a_row_of_the_head_statistics_table_focuses_its_head(page, base_url):
    """st.dataframe draws the statistics (a bar per statistic); selecting a row (its checkbox) focuses that head."""
    visit(page, f"{base_url}/")
    table = page.get_by_test_id("stMain").get_by_test_id("stDataFrame").first
    table.scroll_into_view_if_needed()
    expect(table).to_be_visible()
    box = table.locator("canvas").first.bounding_box()
    row_height, header = 35, 35  # the data grid's default row and header heights
    before = runs(page)
    page.mouse.click(box["x"] + 16, box["y"] + header + 3 * row_height + row_height / 2)  # row 3's checkbox
    wait_idle(page, after=before)
    assert_no_exception(page)
    focus = page.get_by_test_id("stMain").get_by_role("combobox", name="Focused head")
    expect(focus).to_have_value("head 3")
    assert "▶ head 3" in grid_titles(page)


# Whether the focused head's map (its title "head N…") downloads in the format given, as its modebar's camera reads it
_FOCUSED_CAMERA_FORMAT = """
(format) => [...document.querySelectorAll('[data-testid=stMain] [data-testid=stPlotlyChart]')].some((chart) =>
    /^head \\d+/.test(chart.querySelector('text.gtitle')?.textContent || '')
    && chart.querySelector('.js-plotly-plot')?._context?.toImageButtonOptions?.format === format)
"""


def test_the_maps_hover_their_values_and_export_png_and_svg(page, base_url, tmp_path):
    """Hovering a cell of the focused head shows its query, key and weight; the modebar's camera downloads the
    figure in the sidebar's format."""
    visit(page, f"{base_url}/?text={quote('Every cat loves warm milk')}")
    chart = focused_chart(page)
    chart.scroll_into_view_if_needed()
    centre = cell_centre(page, chart, 3, 1)  # query "·warm", key "·cat"
    page.mouse.move(centre["x"], centre["y"])
    hover = chart.locator(".hovertext")
    expect(hover).to_contain_text("query 3: ·warm")
    expect(hover).to_contain_text("key 1: ·cat")
    assert re.search(r"weights 0\.\d{4}", hover.text_content())
    for image_format in ("png", "svg"):
        if image_format == "svg":
            sidebar(page).get_by_text("Share & export").click()
            wait_expanded(sidebar(page).locator("details").filter(has_text="Share & export"))
            sidebar(page).get_by_text("svg", exact=True).click()
            # the rerun gives the map's camera the format: a loaded server may start it long after the click
            page.wait_for_function(_FOCUSED_CAMERA_FORMAT, arg="svg")
            wait_idle(page)
        chart = focused_chart(page)
        chart.hover()
        with page.expect_download() as download:
            chart.locator(".modebar-btn[data-title^='Download plot']").click()
        saved = tmp_path / download.value.suggested_filename
        download.value.save_as(saved)
        assert saved.name == f"attnviz-heads-head0-weights.{image_format}", saved.name
        head = saved.read_bytes()[:200]
        assert head.startswith(b"\x89PNG") if image_format == "png" else b"<svg" in head


def test_a_drag_on_the_focused_map_zooms_it(page, base_url):
    visit(page, f"{base_url}/?text={quote('one two three four five six seven eight nine ten')}")
    chart = focused_chart(page)
    chart.scroll_into_view_if_needed()
    ranges = "(gd) => [gd._fullLayout.xaxis.range.slice(), gd._fullLayout.yaxis.range.slice()]"
    plot = chart.locator(".js-plotly-plot")
    (x_before, y_before) = plot.evaluate(ranges)
    start, end = cell_centre(page, chart, 2, 1), cell_centre(page, chart, 6, 5)
    page.mouse.move(start["x"], start["y"])
    page.mouse.down()
    page.mouse.move(end["x"], end["y"], steps=10)
    page.mouse.up()
    page.wait_for_function("([gd, x]) => gd._fullLayout.xaxis.range[1] !== x", arg=[plot.element_handle(), x_before[1]])
    (x_after, y_after) = plot.evaluate(ranges)
    assert x_before == [-0.5, 9.5] and 0.5 < x_after[0] < 1.5 and 4.5 < x_after[1] < 5.5, x_after
    assert 5.5 < y_after[0] < 6.5 and 1.5 < y_after[1] < 2.5, y_after  # queries still run down
    assert_no_exception(page)


def products_sum(page) -> tuple[float, int]:
    """The products chart's bars: their sum and count."""
    chart = charts(page).filter(has=page.locator("text", has_text="q[d]·k[d]")).first
    return chart.locator(".js-plotly-plot").evaluate(
        "(gd) => { const y = Array.from(gd._fullData[0].y); return [y.reduce((a, b) => a + b, 0), y.length]; }")


# plotly.js warns through console.trace (a stack trace each, costly by the hundred): keep its warnings in the page
PLOTLY_WARNINGS_JS = """
window.__plotlyWarnings = [];
const trace = console.trace.bind(console);
console.trace = (...parts) => { window.__plotlyWarnings.push(parts.map(String).join(' ')); trace(...parts); };
"""


def test_a_click_on_a_cell_explains_its_weight(page, base_url):
    """A click on a cell draws q_i[d]·k_j[d] for every dimension; the bars add up to the score, and the score ÷ √d_head
    is the scaled score the page shows (and a masked cell says why its weight is 0).  Plotly warns of nothing."""
    page.add_init_script(PLOTLY_WARNINGS_JS)
    visit(page, f"{base_url}/?text={quote('Every cat loves warm milk')}&num_heads=4")
    chart = focused_chart(page)
    chart.scroll_into_view_if_needed()
    centre = cell_centre(page, chart, 3, 1)
    before = runs(page)
    page.mouse.click(centre["x"], centre["y"])
    wait_idle(page, after=before)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.get_by_text(re.compile("query 3, key 1"))).to_be_visible()
    shown = ("(gd) => [...gd.querySelectorAll('g.scatterlayer path.point')]"
             ".filter((p) => p.style.opacity === '1').length")
    assert chart.locator(".js-plotly-plot").evaluate(shown) == 1  # a small map marks the selected cell with a dot
    summary = main.get_by_text(re.compile(r"^score q·k")).text_content()
    score = float(re.search(r"Σ products = (-?\d+\.\d+)", summary)[1])
    scaled = float(re.search(r"scaled (-?\d+\.\d+)", summary)[1])
    total, bars = products_sum(page)
    assert bars == 192  # head_dim = 768 / 4
    assert total == pytest.approx(score, abs=1e-3)
    assert total / 192 ** 0.5 == pytest.approx(scaled, abs=1e-3)
    assert page.evaluate("window.__plotlyWarnings") == []

    chart = focused_chart(page)
    centre = cell_centre(page, chart, 1, 3)  # key 3 comes after query 1
    page.mouse.move(centre["x"], centre["y"])  # Plotly clicks the point it hovers: hover it first
    expect(chart.locator(".hovertext")).to_contain_text("query 1: ·cat")
    wait_past_double_click(chart)  # a second click soon after the first is Plotly's double click: no selection
    before = runs(page)
    page.mouse.click(centre["x"], centre["y"])
    wait_idle(page, after=before)
    expect(main.get_by_text(re.compile("query 1, key 3"))).to_be_visible()
    expect(main.get_by_text(re.compile("causal mask hides it")).first).to_be_visible()
    assert main.get_by_text(re.compile(r"^score q·k")).text_content().endswith("weight 0.0000")

    # the selection belongs to head 0's map: head 1's map has none, and the panel says how to select
    choose_option(page, main.get_by_role("combobox", name="Focused head"), "head 1")
    expect(main.get_by_text("Why this weight?")).to_be_visible()
    expect(main.get_by_text(re.compile("query 1, key 3"))).to_have_count(0)
    assert_no_exception(page)


def test_the_heads_pages_charts_are_drawn_in_one_pass(page, base_url):
    """The grid, the focused map, its overview and, after a click, the products and the row's softmax are drawn with
    the margins their figures ask for: Plotly's automargin found no label, colour bar or legend sticking out, so it
    did not draw them a second time.  Long words make long tick labels."""
    text = "Unbelievably, extraordinarily long words: internationalization, counterrevolutionaries. " * 20
    visit(page, f"{base_url}/?text={quote(text)}&num_heads=4")
    chart = focused_chart(page)
    chart.scroll_into_view_if_needed()
    assert charts(page).count() >= 3  # the grid, the overview (more than 256 tokens) and the focused map
    assert grown_margins(page) == []
    centre = cell_centre(page, chart, 40, 12)
    page.mouse.move(centre["x"], centre["y"])  # Plotly clicks the point it hovers: hover it first
    expect(chart.locator(".hovertext")).to_contain_text("query")
    # the cell under the pointer, though a cell of the 256 × 256 window is under 3 px high: the hover names the point
    # nearest to the pointer (within a pixel's rounding), and a click explains that cell
    hovered = re.search(r"query (\d+): .*key (\d+): ", chart.locator(".hovertext").text_content())
    assert abs(int(hovered[1]) - 40) <= 1 and abs(int(hovered[2]) - 12) <= 1, hovered[0]
    before = runs(page)
    page.mouse.click(centre["x"], centre["y"])
    wait_idle(page, after=before)
    expect(page.get_by_test_id("stMain").get_by_text(f"(query {hovered[1]}, key {hovered[2]})")).to_be_visible()
    assert charts(page).count() >= 5
    assert grown_margins(page) == []


def drag_on_map(page, tool: str, cells: list[tuple[float, float]]) -> None:
    """Pick the focused map's modebar tool ``tool`` (Plotly's ``dragmode`` value: "select" is Box Select, "lasso"
    Lasso Select), drag the mouse through the page positions of cells (row, col) ``cells`` (fractions reach into a
    cell), and wait for the rerun the selection starts to be drawn."""
    chart = focused_chart(page)
    chart.scroll_into_view_if_needed()
    chart.hover()
    chart.locator(f".modebar-btn[data-attr=dragmode][data-val={tool}]").click()
    path = [cell_centre(page, chart, *cell) for cell in cells]
    before = runs(page)
    page.mouse.move(path[0]["x"], path[0]["y"])
    page.mouse.down()
    for point in path[1:]:
        page.mouse.move(point["x"], point["y"], steps=10)
    page.mouse.up()
    wait_idle(page, after=before)


def box_select(page, corner: tuple[float, float], opposite: tuple[float, float]) -> None:
    """A drag with the modebar's Box Select on the focused map from cell (row, col) ``corner`` to ``opposite``
    (fractions reach into a cell), then the rerun it starts drawn."""
    drag_on_map(page, "select", [corner, opposite])


def lasso_select(page, vertices: list[tuple[float, float]]) -> None:
    """A closed lasso drawn with the modebar's Lasso Select on the focused map through cells (row, col) ``vertices``,
    back to the first, then the rerun it starts drawn."""
    drag_on_map(page, "lasso", [*vertices, vertices[0]])


# The cells (query, key) the focused map's overlay marks selected: Plotly's own record of what a box or lasso enclosed.
_SELECTED_CELLS = """(gd) => gd._fullData.filter((trace) => trace.xaxis === 'x2' && trace.selectedpoints)
    .flatMap((trace) => Array.from(trace.selectedpoints, (i) => [trace.y[i], trace.x[i]]))"""


def map_selection(page) -> set[tuple[int, int]]:
    """The (query, key) cells selected on the focused map, as the browser shows them."""
    cells = focused_chart(page).locator(".js-plotly-plot").evaluate(_SELECTED_CELLS)
    return {(int(query), int(key)) for query, key in cells}


def summed_chart_data(page) -> dict[str, dict]:
    """The summed-attention chart's traces by name: their x, y and customdata as drawn."""
    chart = charts(page).filter(has=page.locator("text", has_text=re.compile("selected queries"))).first
    expect(chart).to_be_visible()
    return chart.locator(".js-plotly-plot").evaluate(
        "(gd) => Object.fromEntries(gd._fullData.map((t) => [t.name, {x: Array.from(t.x), y: Array.from(t.y),"
        " customdata: t.customdata ? Array.from(t.customdata, (row) => Array.from(row)) : null}]))")


@pytest.mark.parametrize(("words", "rows"), [(8, (2, 4)), (100, (10, 19))])  # 100: more than 64 × 64 cells
def test_a_box_selection_of_query_rows_draws_their_summed_attention(page, base_url, words, rows):
    text = " ".join(["one", "two", "three", "four", "five", "six", "seven", "eight"] * 13)
    visit(page, f"{base_url}/?text={quote(' '.join(text.split()[:words]))}")
    first, last = rows  # a box over these query rows and every key, its edges inside the rows' outer cells
    box_select(page, (first - 0.4, -0.4), (last + 0.4, words - 0.6))
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.get_by_text(re.compile(rf"{last - first + 1} queries, {words} keys selected"))).to_be_visible()
    summed = charts(page).filter(has=page.locator("text", has_text=re.compile("selected queries"))).first
    expect(summed).to_be_visible()


_RANGES = "(gd) => [gd._fullLayout.xaxis.range, gd._fullLayout.yaxis.range]"
_LABEL_BOXES = """(gd) => Array.from(gd.querySelectorAll('g.xtick text'), (label) => {
    const box = label.getBoundingClientRect(); return [box.left, box.right]; })"""


def test_a_thin_box_on_the_1024_token_map_selects_its_rows_and_autoscale_fits_the_cells(page, base_url):
    """A box ten rows high on the 1,024-token map's 256 × 256 window is ~12 px: it selects those rows, not a band of
    every row (Plotly's default select direction); the summed charts beside it label their keys without overlapping;
    the modebar's Autoscale shows the window's cells edge to edge, as Reset axes does, with no grey border."""
    words = ("the attention of each token is a weighted sum over the values of every earlier token " * 64).split()
    visit(page, f"{base_url}/?text={quote(' '.join(words[:1020]))}")
    box_select(page, (100, 5), (110, 20))
    assert_no_exception(page)
    cells = map_selection(page)
    queries, keys = {query for query, _ in cells}, {key for _, key in cells}
    assert cells and min(queries) >= 99 and max(queries) <= 111 and min(keys) >= 4 and max(keys) <= 21, \
        (min(queries), max(queries), min(keys), max(keys))
    expect(page.get_by_test_id("stMain").get_by_text(re.compile(rf"{len(queries)} queries, {len(keys)} keys "
                                                                "selected"))).to_be_visible()
    summed = charts(page).filter(has=page.locator("text", has_text=re.compile("selected queries"))).first
    # a turned label ends at its tick: one label's room (12 px text turned 60°) between the ends of two labels
    ends = sorted(right for _, right in summed.locator(".js-plotly-plot").evaluate(_LABEL_BOXES))
    assert len(ends) >= 4 and min(np.diff(ends)) >= COLUMN_LABEL_PX, ends
    chart = focused_chart(page)
    window = [[-0.5, 255.5], [255.5, -0.5]]
    assert chart.locator(".js-plotly-plot").evaluate(_RANGES) == window
    chart.hover()
    chart.locator(".modebar-btn[data-attr=zoom][data-val=auto]").click()
    page.wait_for_function("(gd) => gd._fullLayout.xaxis.range[0] !== -0.5 || gd._fullLayout.xaxis.autorange",
                           arg=chart.locator(".js-plotly-plot").element_handle())
    assert chart.locator(".js-plotly-plot").evaluate(_RANGES) == window


def test_a_box_over_masked_cells_only_says_their_weights_are_0(page, base_url):
    """Queries 0–1 × keys 3–5 of a causal map: every cell a key after its query, so every weight is 0."""
    visit(page, f"{base_url}/?text={quote('one two three four five six')}")
    box_select(page, (-0.4, 2.6), (1.4, 5.4))
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.get_by_text(re.compile(r"2 queries, 3 keys selected"))).to_be_visible()
    expect(main.get_by_text("Every one of the 6 selected cells is masked", exact=False)).to_be_visible()


STAIRCASE = [(2.6, 0.6), (2.6, 1.4), (3.6, 1.4), (3.6, 2.4), (4.6, 2.4), (4.6, 3.4), (5.4, 3.4), (5.4, 0.6)]
STAIRCASE_CELLS = {(3, 1), (4, 1), (4, 2), (5, 1), (5, 2), (5, 3)}  # what it encloses: every key at or before its query


def expected_sums(weights, cells: set[tuple[int, int]]) -> tuple:
    """(per key mean, per key sum, per query total) of the selected cells' queries and keys, from a head's weights."""
    queries, keys = sorted({query for query, _ in cells}), sorted({key for _, key in cells})
    rows = weights[queries]  # (q, n)
    return rows.mean(axis=0), rows.sum(axis=0), weights[:, keys].sum(axis=1)


def test_a_lasso_sums_the_attention_of_exactly_the_query_rows_it_encloses(page, base_url):
    """A staircase lasso on head 2 of a causal map encloses six unmasked cells of queries 3–5 and keys 1–3: the page
    sums those queries' weights per key (mean drawn, sum in the hover) and what every query gives those keys, the
    numbers of the run's own weights (computed here with attnviz.run from the same settings)."""
    import numpy as np

    import attnviz
    from attnviz.config import AttentionConfig

    text = "one two three four five six seven eight"
    visit(page, f"{base_url}/?text={quote(text)}&num_heads=4")
    main = page.get_by_test_id("stMain")
    before = runs(page)
    choose_option(page, main.get_by_role("combobox", name="Focused head"), "head 2")
    wait_idle(page, after=before)
    lasso_select(page, STAIRCASE)
    assert_no_exception(page)
    assert map_selection(page) == STAIRCASE_CELLS  # the lasso, not a box: (3, 2), (3, 3) and (4, 3) are outside
    expect(main.get_by_text("3 queries, 3 keys selected")).to_be_visible()
    expect(main.get_by_text("(head 2)")).to_be_visible()

    weights = attnviz.run(text, AttentionConfig(num_heads=4)).steps["weights"][0, 2].astype(np.float64)  # (8, 8)
    mean, total, given = expected_sums(weights, STAIRCASE_CELLS)  # queries 3, 4, 5; keys 1, 2, 3
    drawn = summed_chart_data(page)
    per_key = drawn["mean over the selected queries"]
    assert per_key["x"] == list(range(8))
    np.testing.assert_allclose(per_key["y"], mean, atol=1e-6)
    np.testing.assert_allclose([float(row[1]) for row in per_key["customdata"]], total, atol=1e-6)
    per_query = drawn["total to the selected keys"]
    np.testing.assert_allclose(per_query["y"], given, atol=1e-6)
    assert per_query["y"][:1] == [0.0]  # query 0 sees only key 0, which is not selected


def test_a_lasso_over_masked_cells_only_says_their_weights_are_0(page, base_url):
    """A lasso over five cells above the diagonal (keys after their query) sums, and says every weight there is 0, as
    the box does; the page shows no NaN."""
    import math

    visit(page, f"{base_url}/?text={quote('one two three four five six')}")
    lasso_select(page, [(-0.4, 2.6), (-0.4, 5.4), (1.4, 5.4), (1.4, 3.6), (0.6, 3.6), (0.6, 2.6)])
    assert_no_exception(page)
    assert map_selection(page) == {(0, 3), (0, 4), (0, 5), (1, 4), (1, 5)}
    main = page.get_by_test_id("stMain")
    expect(main.get_by_text("2 queries, 3 keys selected")).to_be_visible()
    expect(main.get_by_text("Every one of the 5 selected cells is masked", exact=False)).to_be_visible()
    drawn = summed_chart_data(page)
    assert all(math.isfinite(value) for trace in drawn.values() for value in trace["y"]), drawn
    assert "nan" not in main.inner_text().lower()


def test_a_lasso_on_a_moved_window_of_a_long_text_sums_the_rows_it_encloses(page, base_url):
    """320 tokens: the focused map is a 256 × 256 window, here moved down to query rows 64–319.  A lasso on it
    selects cells by their positions in the text (Plotly's own record of them), and the page sums exactly those
    queries and keys, the numbers of the run's weights."""
    import numpy as np

    import attnviz
    from attnviz.config import AttentionConfig

    text = " ".join(["one", "two", "three", "four", "five", "six", "seven", "eight"] * 40)
    visit(page, f"{base_url}/?text={quote(text)}&num_heads=4")
    main = page.get_by_test_id("stMain")
    slider = main.get_by_role("slider", name="First query row")
    slider.scroll_into_view_if_needed()
    before = runs(page)
    slider.press("End")
    wait_idle(page, after=before)
    window = focused_chart(page).locator(".js-plotly-plot").evaluate("(gd) => gd._fullLayout.yaxis.range.slice()")
    assert window == [319.5, 63.5]  # query rows 64 … 319, down
    lasso_select(page, [(100, 10), (100, 30), (130, 30), (130, 10), (115, 4)])  # a pentagon of about 600 cells
    assert_no_exception(page)
    cells = map_selection(page)
    queries, keys = {query for query, _ in cells}, {key for _, key in cells}
    assert 500 < len(cells) < 700 and min(queries) >= 99 and max(queries) <= 131, (len(cells), queries)
    expect(main.get_by_text(f"{len(queries)} queries, {len(keys)} keys selected")).to_be_visible()

    weights = attnviz.run(text, AttentionConfig(num_heads=4)).steps["weights"][0, 0].astype(np.float64)
    mean, total, given = expected_sums(weights, cells)
    drawn = summed_chart_data(page)
    per_key, per_query = drawn["mean over the selected queries"], drawn["total to the selected keys"]
    np.testing.assert_allclose(per_key["y"], mean, atol=1e-6)
    np.testing.assert_allclose([float(row[1]) for row in per_key["customdata"]], total, atol=1e-5)
    np.testing.assert_allclose(per_query["y"], given, atol=1e-5)


def click_cell(page, row: int, col: int) -> None:
    """A click on cell (``row``, ``col``) of the focused map, hovered first (Plotly clicks the point it hovers) and
    past the double-click delay of the last press on it, then the rerun it starts drawn."""
    chart = focused_chart(page)
    chart.scroll_into_view_if_needed()
    centre = cell_centre(page, chart, row, col)
    page.mouse.move(centre["x"], centre["y"])
    expect(chart.locator(".hovertext")).to_contain_text(f"query {row}:")
    wait_past_double_click(chart)
    before = runs(page)
    page.mouse.click(centre["x"], centre["y"])
    wait_idle(page, after=before)


def show_stage(page, title: str) -> None:
    """Pick the Heads page's stage (the "Show" segmented control) by the start of its title."""
    before = runs(page)
    page.get_by_test_id("stMain").get_by_test_id("stButtonGroup").get_by_text(title).first.click()
    wait_idle(page, after=before)


def assert_map_explains_nothing_old(page, old: str) -> None:
    """The focused map came back without a selection, and the panel beside it says how to select, not ``old`` (what
    it explained before)."""
    main = page.get_by_test_id("stMain")
    assert_no_exception(page)
    assert map_selection(page) == set()
    expect(main.get_by_text("Why this weight?")).to_be_visible()
    expect(main.get_by_text(re.compile(old))).to_have_count(0)


def test_a_map_drawn_again_has_no_selection_and_the_panel_explains_none(page, base_url):
    """The weights map, then the scores map, then the weights map again (or another text, then this one again): the
    browser draws the map again without the selection made on it before, and the panel beside it says how to select
    — it sums no old lasso and explains no old click that the map does not show.  A click on the cell clicked
    before explains it again."""
    text = "one two three four five six seven eight"
    visit(page, f"{base_url}/?text={quote(text)}&num_heads=4")
    main = page.get_by_test_id("stMain")
    lasso_select(page, STAIRCASE)
    expect(main.get_by_text("3 queries, 3 keys selected")).to_be_visible()
    show_stage(page, "scores =")
    expect(main.get_by_text("Why this weight?")).to_be_visible()
    show_stage(page, "weights =")
    assert_map_explains_nothing_old(page, "keys selected")

    click_cell(page, 3, 1)
    expect(main.get_by_text(re.compile("query 3, key 1"))).to_be_visible()
    commit_text(page, "eight seven six five four three two one")
    expect(main.get_by_text("Why this weight?")).to_be_visible()
    commit_text(page, text)
    assert_map_explains_nothing_old(page, "query 3, key 1")
    click_cell(page, 3, 1)
    expect(main.get_by_text(re.compile("query 3, key 1"))).to_be_visible()
    assert map_selection(page) == {(3, 1)}


def test_a_clicked_cell_is_in_the_url_and_the_link_and_a_reload_or_the_link_explains_it_again(page, base_url, browser):
    """A click on a cell of the focused map puts cell=3,1 in the URL (one entry of the browser's history) and the Share
    link; a reload, and the link in another session, explain that cell again; another head drops it (one entry), Back
    shows the entry's cell explained, and a new text drops it again."""
    visit(page, f"{base_url}/?text={quote('Every cat loves warm milk')}&num_heads=4&head=2")
    main = page.get_by_test_id("stMain")
    start = page.evaluate("history.length")
    click_cell(page, 3, 1)
    expect(main.get_by_text(re.compile("query 3, key 1"))).to_be_visible()
    assert query(page)["cell"] == "3,1" and page.evaluate("history.length") == start + 1
    link = share_link(page)
    assert {"head": "2", "cell": "3,1"}.items() <= query_of(link).items(), link

    page.reload()
    wait_idle(page)
    assert_no_exception(page)
    expect(main.get_by_text(re.compile("query 3, key 1"))).to_be_visible()
    assert products_sum(page)[1] == 192  # the products of head_dim 768 / 4 dimensions
    other = browser.new_context(viewport=page.viewport_size)  # another session, as the link's recipient has
    try:
        fresh = other.new_page()
        visit(fresh, link)
        expect(fresh.get_by_test_id("stMain").get_by_text(re.compile("query 3, key 1"))).to_be_visible()
        assert not fresh.get_by_test_id("stMain").get_by_test_id("stAlertContainer").count()  # no notice
    finally:
        other.close()

    before = runs(page)
    choose_option(page, main.get_by_role("combobox", name="Focused head"), "head 1")
    wait_idle(page, after=before)
    expect(main.get_by_text("Why this weight?")).to_be_visible()
    assert "cell" not in query(page) and page.evaluate("history.length") == start + 2
    go_back(page)
    expect(main.get_by_role("combobox", name="Focused head")).to_have_value("head 2")
    expect(main.get_by_text(re.compile("query 3, key 1"))).to_be_visible()
    assert query(page)["cell"] == "3,1"
    commit_text(page, "one two three four five six")
    expect(main.get_by_text("Why this weight?")).to_be_visible()
    assert "cell" not in query(page) and page.evaluate("history.length") == start + 2  # the new text's entry only
    assert not main.get_by_test_id("stAlertContainer").count()


def _is_rerun_request(frame: bytes | str) -> bool:
    """Whether a websocket frame the browser sent asks the server for a run (a widget's new value does)."""
    from streamlit.proto.BackMsg_pb2 import BackMsg

    msg = BackMsg()
    msg.ParseFromString(frame if isinstance(frame, bytes) else frame.encode())
    return msg.WhichOneof("type") == "rerun_script"


def test_with_the_lasso_picked_a_click_selects_nothing_as_the_caption_under_the_map_says(page, base_url):
    """Streamlit's chart lets a click select a point only while neither box nor lasso select is picked: with the lasso
    picked a click on a cell asks for no run and keeps the lasso's selection, and the caption under the map says so;
    with the modebar's zoom picked again a click explains the cell."""
    reruns: list[int] = []
    page.on("websocket", lambda socket: socket.on(
        "framesent", lambda payload: reruns.append(1) if _is_rerun_request(payload) else None))
    visit(page, f"{base_url}/?text={quote('one two three four five six seven eight')}&num_heads=4")
    main = page.get_by_test_id("stMain")
    expect(main.get_by_text(re.compile("while the box or lasso is picked, a click selects nothing"))).to_be_visible()
    lasso_select(page, STAIRCASE)
    expect(main.get_by_text("3 queries, 3 keys selected")).to_be_visible()
    chart = focused_chart(page)
    plot = chart.locator(".js-plotly-plot")
    plot.evaluate("(gd) => { window.__attnvizClicks = 0; gd.on('plotly_click', () => window.__attnvizClicks++); }")
    centre = cell_centre(page, chart, 7, 2)
    page.mouse.move(centre["x"], centre["y"])
    expect(chart.locator(".hovertext")).to_contain_text("query 7:")
    wait_past_double_click(chart)
    asked = len(reruns)
    page.mouse.click(centre["x"], centre["y"])
    page.wait_for_function("window.__attnvizClicks === 1")  # Plotly saw the click
    chart.hover()
    chart.locator(".modebar-btn[data-attr=dragmode][data-val=zoom]").click()
    click_cell(page, 6, 1)
    expect(main.get_by_text(re.compile("query 6, key 1"))).to_be_visible()
    assert len(reruns) == asked + 1  # the click with the lasso picked asked for no run; the one with zoom did
    assert map_selection(page) == {(6, 1)}


def pick_tokens(page, label: str, option: str) -> None:
    """Pick ``option`` ("8: ·cat") in the Heads page's multiselect ``label`` ("Query tokens") and wait for its run."""
    picker = page.get_by_test_id("stMain").get_by_test_id("stMultiSelect").filter(has_text=label).first
    before = runs(page)
    picker.get_by_role("combobox").click()
    page.keyboard.type(option)  # the list shows the options that match (it draws only those in view)
    page.get_by_role("listbox").get_by_role("option").filter(
        has_text=re.compile(f"^{re.escape(option)}$")).click()
    page.keyboard.press("Escape")
    wait_idle(page, after=before)


def test_a_click_after_tokens_picked_by_name_explains_the_cell_as_the_share_link_does(page, base_url, browser):
    """Query 8 and keys 1, 2 picked by name, then a click on cell (6, 3): the panel explains the cell and the pickers
    empty (they kept the picks' sums beside a marked cell), as the Share link, which carries cell=6,3, opens it in
    another session; tokens picked next are summed, and the cell leaves the map and the URL."""
    visit(page, f"{base_url}/?text={quote('The cat sat on the mat because the cat was tired')}&num_heads=4")
    main = page.get_by_test_id("stMain")
    expander = main.locator("details").filter(has_text="Sum attention over tokens picked by name")
    before = runs(page)
    expander.locator("summary").click()
    wait_idle(page, after=before)
    wait_expanded(expander)
    pick_tokens(page, "Query tokens", "8: ·cat")
    pick_tokens(page, "Key tokens", "1: ·cat")
    pick_tokens(page, "Key tokens", "2: ·sat")
    expect(main.get_by_text("1 query, 2 keys selected")).to_be_visible()

    click_cell(page, 6, 3)
    assert_no_exception(page)
    expect(main.get_by_text(re.compile(r"\(query 6, key 3\) its weight"))).to_be_visible()
    expect(main.get_by_text("keys selected")).to_have_count(0)
    expect(main.get_by_test_id("stMultiSelect").filter(has_text="8: ·cat")).to_have_count(0)
    assert map_selection(page) == {(6, 3)} and query(page)["cell"] == "6,3"
    link = share_link(page)
    other = browser.new_context(viewport=page.viewport_size)  # the link's recipient: another session
    try:
        fresh = other.new_page()
        visit(fresh, link)
        expect(fresh.get_by_test_id("stMain").get_by_text(re.compile(r"\(query 6, key 3\) its weight"))).to_be_visible()
    finally:
        other.close()

    pick_tokens(page, "Query tokens", "8: ·cat")
    expect(main.get_by_text("1 query, 0 keys selected")).to_be_visible()
    assert map_selection(page) == set() and "cell" not in query(page)


def test_the_focused_head_box_reads_the_label_of_the_variant_shown(page, base_url):
    """Head 4 of grouped-query attention ("head 4 · K/V group 1"), then multi-head attention picked in the sidebar:
    the closed box reads "head 4", not the K/V group of the variant shown before, and the URL keeps head 4."""
    visit(page, f"{base_url}/?variant=gqa&head=4")
    focus = page.get_by_test_id("stMain").get_by_role("combobox", name="Focused head")
    expect(focus).to_have_value("head 4 · K/V group 1")
    before = runs(page)
    choose_option(page, sidebar(page).get_by_role("combobox", name="Attention variant"), "Multi-head attention (3.6.2)")
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(focus).to_have_value("head 4")
    assert query(page)["head"] == "4"


def assert_nothing_injected(page) -> None:
    for frame in page.frames:
        found = frame.evaluate(_INJECTED)
        assert found == {"img": 0, "script": 0, "bold": 0, "svgBold": 0}, f"injected HTML in {frame.url}: {found}"


def test_html_in_the_text_is_shown_literally_and_never_runs(page, base_url):
    dialogs: list[str] = []

    def on_dialog(dialog):
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    visit(page, f"{base_url}/tokens")
    commit_text(page, PAYLOAD)
    assert_no_exception(page)
    expect(text_box(page)).to_have_value(PAYLOAD)
    pieces = chip_pieces(page)
    assert "".join(pieces) == PAYLOAD.replace(" ", "·"), pieces  # every piece shown as typed, in order
    chips = page.locator(".attnviz-chips")
    expect(chips).to_contain_text("<")
    expect(chips).to_contain_text("script")
    expect(chips).to_contain_text("bold")
    assert_nothing_injected(page)

    go_to(page, "Heads")
    assert_no_exception(page)
    chart = focused_chart(page)  # the map's labels are literal too: the pieces at its ticks (as many as fit)
    ticks = chart.locator(".js-plotly-plot").evaluate("gd => Array.from(gd._fullLayout.xaxis.tickvals)")
    assert len(ticks) >= 2 and x_tick_labels(chart) == [pieces[int(tick)] for tick in ticks]
    assert_nothing_injected(page)
    page.wait_for_timeout(500)  # a late onerror/script would fire by now
    assert dialogs == [], f"the payload opened dialogs: {dialogs}"


# --------------------------------------------------------------------------- 5. shared links

@pytest.mark.parametrize("path, title", [("/", "Attention heads"),
                                         ("/steps?text=Hello%20world%20hello", "Attention step by step"),
                                         ("/train", "Train a model, watch its heads form")],
                         ids=["heads", "steps link", "train link"])
def test_a_fresh_servers_first_page_says_it_is_starting_until_the_page_is_drawn(page, fresh_server, path, title):
    """While the server imports torch, the first visitor sees a line saying so, not a blank page; it is gone once the
    page is drawn.  A shared link as the server's first request too: Streamlit runs that page's script alone
    (it routes by the pages/ folder until app.py's st.navigation), which says so while its imports wait on torch."""
    server = fresh_server()
    page.goto(f"{server.url}{path}", wait_until="commit")
    starting = page.get_by_test_id("stMain").get_by_text("Starting attnviz: importing PyTorch, once for this server…")
    expect(starting).to_be_visible(timeout=30_000)
    wait_idle(page)
    assert_no_exception(page)
    expect(starting).to_have_count(0)
    expect(page.locator("[data-testid=stMain] h1")).to_contain_text(title)


def test_deep_links_are_the_first_request_to_a_fresh_server(page, fresh_server):
    server = fresh_server()
    visit(page, f"{server.url}/steps?text=Hello%20world%20hello&variant=causal&causal=false")
    expect(page.locator("[data-testid=stMain] h1")).to_contain_text("Attention step by step")
    expect(text_box(page)).to_have_value("Hello world hello")
    expect(sidebar(page).get_by_role("switch", name="Causal mask")).not_to_be_checked()
    expect(sidebar(page).get_by_role("combobox", name="Attention variant")).to_have_value(
        re.compile(r"causal", re.IGNORECASE))
    expect(page.get_by_test_id("stMain").get_by_text("The causal mask is off")).to_be_visible()
    expect(map_charts(page)).to_have_count(2)
    for chart in map_charts(page).all():
        assert x_tick_labels(chart) == ["Hello", "·world", "·hello"]
    params = query(page)
    assert (params.get("text"), params.get("variant"), params.get("causal")) == ("Hello world hello", "causal", "false")

    visit(page, f"{server.url}/?num_heads=7&dropout=5&variant=nope&seed=-3")
    warnings = page.get_by_test_id("stMain").get_by_test_id("stAlertContainer").filter(has_text="Ignored URL parameter")
    for name in (re.compile(r"num_heads=.?7"), "dropout=", "variant=", "seed="):
        expect(warnings.filter(has_text=name)).to_have_count(1)
    expect(page.locator("[data-testid=stMain] h1")).to_contain_text("Attention heads")
    assert len(grid_titles(page)) == 12  # the defaults stand in for the ignored values
    assert x_tick_labels(focused_chart(page)) == DEFAULT_PIECES
    assert query(page) == {}, page.url  # the ignored values leave the URL; the defaults in their place are left out


def test_a_deep_link_first_on_a_fresh_server_draws_the_shared_sidebar_whose_values_stay_on_the_next_page(
        page, fresh_server):
    """Streamlit routes a fresh server's first request by the pages/ folder: the Steps page script runs alone, runs
    itself as app.py does, and shows the link's text with the shared sidebar, whose values the Heads page keeps."""
    server = fresh_server()
    visit(page, f"{server.url}/steps?text=The%20cat%20sat&num_heads=4&seed=7")
    expect(page.locator("[data-testid=stMain] h1")).to_contain_text("Attention step by step")
    assert urlsplit(page.url).path == "/steps"
    expect(text_box(page)).to_have_value("The cat sat")
    expect(sidebar(page).get_by_role("combobox", name="Heads")).to_have_value("4")
    for label in ("Heads", "Steps", "Shapes", "Tokens", "Train"):
        expect(sidebar(page).get_by_test_id("stPageLink-NavLink").filter(has_text=label)).to_be_visible()
    assert [x_tick_labels(chart) for chart in map_charts(page).all()][0] == ["The", "·cat", "·sat"]

    go_to(page, "Heads")
    assert_no_exception(page)
    expect(page.locator("[data-testid=stMain] h1")).to_contain_text("Attention heads")
    expect(text_box(page)).to_have_value("The cat sat")
    expect(sidebar(page).get_by_role("combobox", name="Heads")).to_have_value("4")
    expect(sidebar(page).get_by_role("textbox", name="Seed", exact=True)).to_have_value("7")
    assert len(grid_titles(page)) == 4
    assert x_tick_labels(focused_chart(page)) == ["The", "·cat", "·sat"]
    params = query(page)
    assert (params.get("text"), params.get("num_heads"), params.get("seed")) == ("The cat sat", "4", "7"), page.url


# --------------------------------------------------------------------------- 6. empty text

def test_empty_text_warns_and_keeps_the_last_view(page, base_url):
    visit(page, f"{base_url}/?text={quote('The cat sat on the mat')}")
    expected = ["The", "·cat", "·sat", "·on", "·the", "·mat"]
    assert x_tick_labels(focused_chart(page)) == expected

    commit_text(page, "")
    assert_no_exception(page)
    expect(page.get_by_test_id("stMain").get_by_text("Type some text")).to_be_visible()
    expect(text_box(page)).to_be_visible()
    expect(text_box(page)).to_have_value("")
    expect(page.get_by_test_id("stMain").get_by_text("Showing the last valid view")).to_be_visible()
    assert len(grid_titles(page)) == 12
    assert x_tick_labels(focused_chart(page)) == expected  # the previous heatmaps remain


# --------------------------------------------------------------------------- 7. downloads

def test_downloads_hold_the_focused_head_and_the_whole_trace(page, base_url):
    """The buttons' data is made on click from the trace's key (sessions never hold a Trace)."""
    import csv
    import io
    import json

    import numpy as np

    visit(page, f"{base_url}/?num_heads=4")
    with page.expect_download() as csv_download:
        page.get_by_test_id("stMain").get_by_role("button", name="Download head 0 weights (CSV)").click()
    assert csv_download.value.suggested_filename == "attnviz-heads-head0-weights.csv"  # named as the map's picture
    rows = list(csv.reader(io.StringIO(csv_download.value.path().read_text(encoding="utf-8"))))
    assert rows[0] == ["query \\ key (weights, head 0)"] + [f"{i}: {piece}" for i, piece in enumerate(DEFAULT_PIECES)]
    weights = np.array([[float(v) for v in row[1:]] for row in rows[1:]])
    assert weights.shape == (6, 6)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-5)
    assert (weights[np.triu_indices(6, k=1)] == 0).all()  # causal

    sidebar(page).get_by_text("Share & export").click()
    wait_expanded(sidebar(page).locator("details").filter(has_text="Share & export"))
    button = sidebar(page).get_by_role("button", name="Download this trace (NPZ + JSON manifest)")
    expect(button).to_be_visible()
    expect(button).to_be_enabled()
    with page.expect_download(timeout=60_000) as npz_download:
        button.click()
    assert npz_download.value.suggested_filename == "attnviz-trace-mha.npz"  # its variant
    data = np.load(io.BytesIO(npz_download.value.path().read_bytes()))
    manifest = json.loads(bytes(data["manifest.json"]))
    assert manifest["config"]["num_heads"] == 4 and manifest["text"] == "Your journey starts with one step"
    assert data["steps/weights"].shape == (1, 4, 6, 6)
    np.testing.assert_allclose(data["steps/weights"][0, 0], weights, atol=1e-6)  # the CSV's head, same numbers
