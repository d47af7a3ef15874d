"""The Pitfall lab in a real Chromium: the leak verdict is visible, switching on a bug shows it next to the
book's code, the screenshot for the README is saved, the Share link opens the bug picked, and a bug or a perturbed
token reruns the lab's fragment alone (the leak detector's, for a token)."""

from __future__ import annotations

import pytest
from helpers.browser import (
    MAP_DRAWN,
    assert_no_exception,
    expect,
    grown_margins,
    query_of,
    runs,
    save_screenshot,
    save_screenshot_at,
    share_link,
    sideways,
    wait_idle,
)

from attnviz.labs.pitfalls.catalogue import PITFALLS, label

pytestmark = pytest.mark.browser


def test_pitfalls_page_shows_verdicts_and_a_bug_next_to_the_books_code(page, base_url):
    page.goto(f"{base_url}/pitfalls")
    wait_idle(page)
    assert_no_exception(page)
    main = page.get_by_test_id("stMain")
    expect(main.locator("h1")).to_contain_text("Pitfall lab")
    expect(main.get_by_text("Verdict: no leak", exact=True)).to_be_visible()
    assert grown_margins(page) == []  # the leak chart drawn in one pass: its margins hold its labels

    before = runs(page)
    main.get_by_role("radio", name="masked_fill (no _)").click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(main.get_by_text("Verdict: leaks into positions 0, 1, 2", exact=True)).to_be_visible()
    alerts = main.get_by_test_id("stAlert")
    expect(alerts.filter(has_text="Detected:")).to_contain_text("the future leaks")
    expect(alerts.filter(has_text="Check passed:")).to_contain_text("no leak")
    expect(main.get_by_test_id("stCode").first).to_contain_text("attn_scores.masked_fill(mask_bool, -torch.inf)")
    expect(main.locator("[data-testid=stPlotlyChart]").filter(has=page.locator(MAP_DRAWN))).to_have_count(2)
    assert grown_margins(page) == []


    path = save_screenshot(page, "pitfalls")
    assert path.stat().st_size > 20_000, f"{path} looks empty"

    before = runs(page)
    main.get_by_role("radio", name="softmax dim=-2").click()  # two maps and a bar chart of the row sums
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(main.locator("[data-testid=stPlotlyChart]").filter(has_text="sum of each query's weights")).to_have_count(1)
    assert grown_margins(page) == []

    before = runs(page)
    main.get_by_role("radio", name="rotary on q only").click()  # the correct rotary's bars are round-off
    wait_idle(page, after=before)
    assert_no_exception(page)
    bars = main.locator("[data-testid=stPlotlyChart]").filter(has_text="the first token at every position")
    expect(bars.locator("g.legend")).to_contain_text("correct: score off its diagonal (≤ ")
    assert grown_margins(page) == []  # the longer legend entry still fits the room kept for it


def test_the_bug_table_fits_the_page_at_800_1024_and_1400_px(page, base_url):
    """The table of bugs (no bug switched on) neither pushes the page sideways nor scrolls sideways inside itself,
    from a window 800 px wide with the sidebar open: its code wraps in rows tall enough for the longest line."""
    page.goto(f"{base_url}/pitfalls")
    wait_idle(page)
    assert_no_exception(page)
    problems = {}
    for width in (1400, 1024, 800):
        seen = sideways(page, width)
        table = seen["grids"].get("bug | the book's line | the buggy line")
        if seen["page"] > 1 or table is None or table > 1:
            problems[width] = seen
        save_screenshot_at(page, f"pitfalls-bugs-{width}")
    assert problems == {}, problems


def test_the_share_link_opens_the_bug_picked(page, base_url, browser):
    """A bug picked on the Pitfall lab is in the Share link of that run; the link opened in a new session (a new
    browser context, as the link's recipient has) shows that bug, with no notice."""
    page.goto(f"{base_url}/pitfalls")
    wait_idle(page)
    main = page.get_by_test_id("stMain")
    before = runs(page)
    main.get_by_role("radio", name=label("mask_diagonal")).click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    link = share_link(page)
    assert query_of(link)["bug"] == "mask_diagonal"

    other = browser.new_context(viewport=page.viewport_size)
    try:
        fresh = other.new_page()
        fresh.goto(link)
        wait_idle(fresh)
        assert_no_exception(fresh)
        shown = fresh.get_by_test_id("stMain")
        expect(shown.get_by_role("radio", name=label("mask_diagonal"))).to_be_checked()
        expect(shown.get_by_role("radio", name="no bug")).not_to_be_checked()
        expect(shown.locator("h3").first).to_contain_text(PITFALLS["mask_diagonal"].title)
        expect(shown.get_by_test_id("stAlert").filter(has_text="Ignored URL parameter")).to_have_count(0)
    finally:
        other.close()


def _is_new_session(frame: bytes) -> bool:
    """Whether a websocket frame is the ``new_session`` message Streamlit sends at the start of every run."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    msg = ForwardMsg()
    msg.ParseFromString(frame)
    return msg.WhichOneof("type") == "new_session"


def test_a_bug_reruns_the_lab_alone_and_a_token_the_leak_detector_alone(page, base_url):
    """A bug picked sends the lab (its code, its maps, the leak detector) and the Share link — not the sidebar's
    settings —, and its maps draw no node a cell while their hover names the cell; a perturbed token moved sends the
    leak detector and the link — not the bug's code and maps; the URL and the Share link carry both after each, and
    a sidebar setting changed afterwards reruns the whole page with the bug and the token kept."""
    received: list[bytes] = []
    page.on("websocket", lambda socket: socket.on(
        "framereceived", lambda payload: received.append(payload if isinstance(payload, bytes) else payload.encode())))
    page.goto(f"{base_url}/pitfalls")
    wait_idle(page)
    main = page.get_by_test_id("stMain")
    received.clear()
    before = runs(page)
    main.get_by_role("radio", name=label("masked_fill")).click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    sent = b"".join(frame for frame in received if not _is_new_session(frame))  # each run's, which lists the pages
    assert PITFALLS["masked_fill"].correct_line.encode() in sent and b"Causality leak detector" in sent
    assert b"Link to this view" in sent  # the Share link, with the bug
    for setting in (b"Attention variant", b"Dropout p", b"Model size"):
        assert setting not in sent, f"{setting!r}: the sidebar is not sent again for a bug"
    maps = main.locator("[data-testid=stPlotlyChart]").filter(has=page.locator(MAP_DRAWN))
    expect(maps).to_have_count(2)
    assert maps.locator("g.scatterlayer path.point").count() == 0, "the maps draw no node a cell (nothing selects)"
    maps.first.scroll_into_view_if_needed()
    box = maps.first.locator("g.imagelayer g.im image").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] * 0.7)  # a cell below the diagonal
    expect(maps.first.locator("g.hoverlayer")).to_contain_text("query")  # its hover still names the cell
    assert query_of(page.url)["bug"] == "masked_fill" and query_of(share_link(page))["bug"] == "masked_fill"

    received.clear()
    before = runs(page)
    main.get_by_role("slider").press("ArrowRight")  # the default sentence's 6 tokens: 3 → 4
    wait_idle(page, after=before)
    assert_no_exception(page)
    sent = b"".join(frame for frame in received if not _is_new_session(frame))
    assert b"perturb token 4 " in sent and b"Link to this view" in sent
    for drawn_once in (PITFALLS["masked_fill"].correct_line.encode(), b"Switch on a bug", b"Attention variant"):
        assert drawn_once not in sent, f"{drawn_once!r}: only the leak detector is sent again for a token"
    expect(main.locator("[data-testid=stPlotlyChart]").filter(has=page.locator(MAP_DRAWN))).to_have_count(2)
    assert {key: query_of(page.url)[key] for key in ("bug", "token")} == {"bug": "masked_fill", "token": "4"}
    assert {key: query_of(share_link(page))[key] for key in ("bug", "token")} == {"bug": "masked_fill", "token": "4"}

    before = runs(page)
    page.get_by_test_id("stSidebar").get_by_test_id("stCheckbox").filter(has_text="Causal mask").locator(
        "label").click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    expect(main.get_by_text("causal mask off, set by", exact=False)).to_be_visible()
    expect(main.get_by_role("radio", name=label("masked_fill"))).to_be_checked()
    expect(main.get_by_role("slider")).to_have_value("4")
    assert {key: query_of(page.url)[key] for key in ("bug", "token", "causal")} == {
        "bug": "masked_fill", "token": "4", "causal": "false"}
