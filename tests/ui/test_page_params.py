"""AppTest of the pages' own URL parameters — ``head``, ``stage``, ``row``, ``col`` on the Heads and Steps pages (and
what the window's sliders move on the Steps page's rotation and K/V groups), the Steps page's ``pair``,
Compare's ``map``, the Pitfall lab's ``bug`` and ``token``, the Induction lab's ``T``, ``token_seed``, ``head`` and
``knockout``, Generate's ``new_tokens``, ``random``, ``step``, ``map_layer`` and ``head``: a
link opens that view; a value the run has not gets a notice in words and the default; the URL and the Share link
follow what the user sets (a widget, a click on the grid), also on the first run after coming back to the page, and
leave a page's default out (a link without it opens the default); a reload shows the same view; and one page's
parameters never reach another page's URL or link."""

from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import pytest
from helpers.apptest import APP, TIMEOUT, follow_link, link_notices, main_warnings, no_exception, open_app, share_link
from helpers.apptest import plotly_figures as figures
from streamlit.testing.v1 import AppTest

from attnviz.ui.state import PAGE_WIDGETS

LONG = " ".join(["the cat sat on the mat"] * 60)  # 360 tokens: a 256 × 256 window, first row or column 0 … 104


def focused_title(at) -> str:
    return next(fig for fig in figures(at) if fig["layout"]["title"]["text"].startswith("head "))["layout"]["title"][
        "text"]


def link_query(at) -> dict[str, str]:
    """The Share link's parameters (each one's last value)."""
    return {key: values[-1] for key, values in parse_qs(urlsplit(share_link(at)).query).items()}


def url(at, key: str):
    """The URL's value of ``key`` (None when the URL has none)."""
    value = at.query_params.get(key)
    return value[-1] if isinstance(value, list) else value


def reload(at) -> AppTest:
    """A new session opened with the URL ``at`` shows (F5, or the link sent to someone else), on the same page."""
    fresh = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    for key, value in at.query_params.items():
        fresh.query_params[key] = value
    return fresh


def test_a_link_opens_the_heads_pages_head_stage_and_window():
    at = open_app(text=LONG, num_heads="4", head="3", stage="scaled", row="100", col="40")
    no_exception(at)
    assert at.selectbox(key="heads_focus").value == 3
    assert at.segmented_control(key="heads_stage").value == "scaled"
    assert (at.slider(key="heads_row0").value, at.slider(key="heads_col0").value) == (100, 40)
    assert focused_title(at).startswith("head 3") and "scaled" in focused_title(at)
    assert not at.main.warning
    for key, value in {"head": "3", "stage": "scaled", "row": "100", "col": "40"}.items():
        assert url(at, key) == value and f"{key}={value}" in share_link(at)


# one session checks a head and another parameter: each bad value gets its own notice and default
@pytest.mark.parametrize(("query", "notices"), [
    ({"head": "9", "stage": "softmax"},
     ["Ignored URL parameter head='9': it is out of range (this layer's 4 heads: 0 … 3); showing head 0.",
      "Ignored URL parameter stage='softmax': it is not a stage this page shows (scores, scaled, masked, weights, "
      "dropped); showing "
      "weights."]),
    ({"head": "-1", "row": "105"},
     ["Ignored URL parameter head='-1': it is out of range (this layer's 4 heads",
      "Ignored URL parameter row='105': it is out of range (window positions for 360 tokens: 0 … 104); the window "
      "starts at row 0."]),
    ({"head": "two", "col": "1e3"},
     ["Ignored URL parameter head='two': it is not a whole number (this layer's 4 heads",
      "Ignored URL parameter col='1e3': it is not a whole number (window positions for 360 tokens"]),
    ({"head": "9" * 400}, [f"Ignored URL parameter head='{'9' * 20}…': it is out of range (this layer's 4 "
                           "heads"]),  # not 40 digits
])
def test_a_bad_value_in_the_link_gives_a_notice_in_words_and_the_default(query, notices):
    at = open_app(text=LONG, num_heads="4", **query)
    no_exception(at)
    for notice in notices:
        assert notice in main_warnings(at)
    assert at.selectbox(key="heads_focus").value == 0
    assert at.segmented_control(key="heads_stage").value == "weights"
    assert (at.slider(key="heads_row0").value, at.slider(key="heads_col0").value) == (0, 0)
    for key in query:  # the URL and the link say what the page draws: its default, which they leave out
        assert url(at, key) is None and key not in link_query(at)


def test_a_window_position_on_a_text_drawn_whole_is_refused_and_the_notice_goes_when_the_user_picks_a_head():
    at = open_app(text="Your journey starts with one step", num_heads="4", row="7", head="5")
    no_exception(at)
    notices = main_warnings(at)
    assert "Ignored URL parameter row='7': it moves no window: 6 tokens are drawn whole (up to 256 are)" in notices
    assert "Ignored URL parameter head='5': it is out of range (this layer's 4 heads" in notices
    assert url(at, "row") is None and "row=" not in share_link(at)  # no window: nothing to place
    at.selectbox(key="heads_focus").set_value(2).run()
    assert "head=" not in main_warnings(at) and "row='7'" in main_warnings(at)  # the head's goes, the row's stays


def test_a_parameter_the_link_repeats_uses_the_last():
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["num_heads"] = "4"
    at.query_params["head"] = ["1", "2"]
    at.run()
    no_exception(at)
    assert at.selectbox(key="heads_focus").value == 2
    assert "head is given 2 times: using the last, '2'; ignored '1'" in link_notices(at)


def test_what_the_user_sets_goes_to_the_url_and_the_share_link_and_a_reload_shows_it():
    at = open_app(text=LONG, num_heads="4")
    assert url(at, "head") is None and "head" not in link_query(at)  # head 0, the page's default: left out
    at.selectbox(key="heads_focus").set_value(3).run()
    at.segmented_control(key="heads_stage").set_value("scores").run()
    at.slider(key="heads_row0").set_value(90).run()
    at.slider(key="heads_col0").set_value(12).run()
    no_exception(at)
    link = share_link(at)
    for key, value in {"head": "3", "stage": "scores", "row": "90", "col": "12"}.items():
        assert url(at, key) == value and f"{key}={value}" in link
    again = reload(at).run()
    no_exception(again)
    assert again.selectbox(key="heads_focus").value == 3
    assert again.segmented_control(key="heads_stage").value == "scores"
    assert (again.slider(key="heads_row0").value, again.slider(key="heads_col0").value) == (90, 12)
    assert focused_title(again).startswith("head 3")
    at.selectbox(key="heads_focus").set_value(0).run()  # back to the default: it leaves the URL and the link
    assert url(at, "head") is None and "head" not in link_query(at) and url(at, "row") == "90"


def test_a_stage_deselected_leaves_the_url_and_the_page_draws_its_default():
    at = open_app(num_heads="4", stage="scores")
    assert url(at, "stage") == "scores" and "stage=scores" in share_link(at)
    at.segmented_control(key="heads_stage").set_value(None).run()
    no_exception(at)
    assert url(at, "stage") is None and "stage=" not in share_link(at)
    assert "weights" in focused_title(at)  # what a link without a stage opens


def test_a_click_on_the_grid_or_a_table_row_moves_the_urls_head(monkeypatch):
    """The grid's and the statistics table's on_select callbacks write the URL's head before the rerun, as the
    selectbox's on_change does: the Share link that rerun draws carries it (the browser test clicks a tile)."""
    from attnviz.ui import focus

    state: dict = {"_url_notice_heads_focus": "Ignored URL parameter head='9': it …"}
    query: dict = {"head": "0", "text": "Hello"}
    monkeypatch.setattr(focus.st, "session_state", state)
    monkeypatch.setattr(focus.st, "query_params", query)
    state["heads_grid"] = SimpleNamespace(selection={"points": [{"customdata": 5}]})
    focus.focus_from_grid(12)
    assert state["heads_focus"] == 5 and query == {"head": "5", "text": "Hello"}
    assert "_url_notice_heads_focus" not in state  # the user's own head: the link's refused one is moot
    state["heads_stats"] = SimpleNamespace(selection={"rows": [0], "columns": []})
    focus.focus_from_row("heads_stats", [2, 0, 1])
    assert query["head"] == "2"
    state["heads_grid"] = SimpleNamespace(selection={"points": [{"customdata": 40}]})  # no head of this run
    focus.focus_from_grid(12)
    assert query["head"] == "2"


WORDS = "Every cat loves warm milk"  # 5 tokens


def explained(at) -> str | None:
    """The cell the "why this weight" panel explains ("query 3, key 1"), or None when it explains none."""
    for markdown in at.main.markdown:
        if markdown.value.startswith("**Why head ") and "(query " in markdown.value:
            return markdown.value.split("(", 1)[1].split(")", 1)[0]
    return None


def test_a_link_opens_the_explanation_of_its_clicked_cell_and_a_new_head_stage_or_text_drops_it():
    """``cell=3,1`` (query 3, key 1) in a link explains that cell's weight on the first run, and the Share link
    carries it; a new head, stage or text is another map: the cell leaves the URL and nothing is explained (no
    notice: it no longer applies)."""
    query = {"text": WORDS, "num_heads": "4", "head": "2", "cell": "3,1"}
    at = open_app(**query)
    no_exception(at)
    assert explained(at) == "query 3, key 1" and url(at, "cell") == "3,1"
    assert link_query(at)["cell"] == "3,1" and link_query(at)["head"] == "2"
    at.selectbox(key="heads_focus").set_value(1).run()
    no_exception(at)
    assert explained(at) is None and url(at, "cell") is None and "cell" not in link_query(at)
    assert not main_warnings(at)

    at = open_app(**query)
    at.segmented_control(key="heads_stage").set_value("scores").run()
    assert explained(at) is None and url(at, "cell") is None
    at = open_app(**query)
    at.text_area(key="text").input("one two three four five six").run()
    no_exception(at)
    assert explained(at) is None and url(at, "cell") is None and url(at, "head") == "2"
    assert not main_warnings(at)


def test_a_cell_the_map_has_not_in_a_link_gives_a_notice_in_words_and_no_explanation():
    for raw, words in (("9,1", "is out of range (this 5-token map's cells, query,key: 0 … 4 each)"),
                       ("3", "is not a cell of this 5-token map, written query,key (0 … 4 each)"),
                       ("three,one", "is not a cell of this 5-token map, written query,key (0 … 4 each)")):
        at = open_app(text=WORDS, cell=raw)
        no_exception(at)
        assert f"Ignored URL parameter cell='{raw}': it {words}; no cell is explained." in main_warnings(at)
        assert explained(at) is None and url(at, "cell") is None and "cell" not in link_query(at)


def test_a_click_on_the_focused_map_writes_the_urls_cell_and_a_box_of_several_drops_it(monkeypatch):
    """The focused map's on_select callback writes the URL's cell before the rerun, as the grid's writes the head: the
    one cell clicked, none for several (a box, a lasso) or a selection cleared; the user's click makes a notice about
    the link's cell moot (the browser test clicks a real cell)."""
    from attnviz.ui import heads

    state: dict = {heads.CELL_NOTICE: "Ignored URL parameter cell='9,1': it …"}
    query: dict = {"head": "2", "text": WORDS}
    monkeypatch.setattr(heads.st, "session_state", state)
    monkeypatch.setattr(heads.st, "query_params", query)
    state["heads_map_0"] = {"selection": {"points": [{"x": 1, "y": 3}]}}
    heads._cell_from_map("heads_map_0", 5)
    assert query == {"head": "2", "text": WORDS, "cell": "3,1"} and heads.CELL_NOTICE not in state
    state["heads_map_0"] = {"selection": {"points": [{"x": 1, "y": 3}, {"x": 2, "y": 3}]}}
    heads._cell_from_map("heads_map_0", 5)
    assert query == {"head": "2", "text": WORDS}
    state["heads_map_0"] = {"selection": {"points": [{"x": 0, "y": 4}]}}
    heads._cell_from_map("heads_map_0", 5)
    state["heads_map_0"] = {"selection": {"points": []}}  # a double click clears the selection
    heads._cell_from_map("heads_map_0", 5)
    assert "cell" not in query
    state["heads_map_0"] = {"selection": {"points": [{"x": 1, "y": 3}]}}
    heads._cell_from_map("heads_map_0", 5, text_in_url=False)  # a link would open another text: no cell of its map
    assert "cell" not in query


CAT = "The cat sat on the mat because the cat was tired"  # 11 tokens: query 8 is the second "cat"


def summed(at) -> list[str]:
    """What the panel beside the focused map sums ("**1 query, 2 keys selected** (head 0)"), if it sums."""
    return [block.value for block in at.main.markdown if "selected**" in block.value]


def pick(at, queries: list[int], keys: list[int]) -> AppTest:
    """Open "Sum attention over tokens picked by name" and pick these query and key tokens."""
    at.session_state["heads_pick"] = True  # the expander open
    at.run()
    at.multiselect(key="heads_pick_queries").set_value(queries)
    return at.multiselect(key="heads_pick_keys").set_value(keys).run()


def test_a_click_or_a_box_on_the_focused_map_replaces_the_tokens_picked_by_name(monkeypatch):
    """The map's on_select empties the pickers whenever it selects cells (the newer choice: the panel explains the
    click, or sums the box); a selection cleared (a double click) leaves the picks as they are."""
    from attnviz.ui import heads
    from attnviz.ui.why import PICKS

    state: dict = {}
    query: dict = {"text": CAT}
    monkeypatch.setattr(heads.st, "session_state", state)
    monkeypatch.setattr(heads.st, "query_params", query)
    for points, cell in (([{"x": 3, "y": 6}], "6,3"), ([{"x": 3, "y": 6}, {"x": 4, "y": 6}], None)):
        state.update({PICKS[0]: [8], PICKS[1]: [1, 2], "heads_map_0": {"selection": {"points": points}}})
        heads._cell_from_map("heads_map_0", 11)
        assert query.get("cell") == cell and state[PICKS[0]] == [] and state[PICKS[1]] == []
    state.update({PICKS[0]: [8], PICKS[1]: [1, 2], "heads_map_0": {"selection": {"points": []}}})
    heads._cell_from_map("heads_map_0", 11)
    assert state[PICKS[0]] == [8] and state[PICKS[1]] == [1, 2]


def test_a_clicked_cell_after_tokens_picked_by_name_is_explained_as_its_share_link_opens_it():
    """Query 8 and keys 1, 2 picked by name, then cell (6, 3): the panel kept the picks' sums while the URL and the
    Share link gained cell=6,3 (which opens "Why head 0 gives … (query 6, key 3)"). The cell is the newer choice:
    the pickers empty and the panel explains it, as the link does; a new session on the link shows the same."""
    at = pick(open_app(text=CAT, num_heads="4"), [8], [1, 2])
    no_exception(at)
    assert summed(at) == ["**1 query, 2 keys selected** (head 0)"]
    at.query_params["cell"] = "6,3"  # what a click on the map writes before its rerun (or Back to such an entry)
    at.run()
    no_exception(at)
    assert explained(at) == "query 6, key 3" and summed(at) == []
    assert at.multiselect(key="heads_pick_queries").value == [] and at.multiselect(key="heads_pick_keys").value == []
    assert url(at, "cell") == "6,3" and link_query(at)["cell"] == "6,3"
    fresh = reload(at).run()
    assert explained(fresh) == "query 6, key 3" and summed(fresh) == []


def test_tokens_picked_after_a_click_are_summed_and_take_the_cell_out_of_the_url_and_the_link():
    """Cell (6, 3) explained, then tokens picked by name: the panel sums the picks (the newer choice), the URL and the
    Share link lose the cell (a link would explain a cell the page no longer shows); emptying the pickers leaves the
    panel explaining nothing, as a link then opens."""
    at = open_app(text=CAT, num_heads="4", cell="6,3")
    assert explained(at) == "query 6, key 3"
    pick(at, [8], [1, 2])
    no_exception(at)
    assert summed(at) == ["**1 query, 2 keys selected** (head 0)"] and explained(at) is None
    assert url(at, "cell") is None and "cell" not in link_query(at)
    at.multiselect(key="heads_pick_queries").set_value([])
    at.multiselect(key="heads_pick_keys").set_value([]).run()
    no_exception(at)
    assert summed(at) == [] and explained(at) is None and url(at, "cell") is None


def test_a_pick_drops_the_cell_and_draws_a_map_that_holds_a_selection_afresh(monkeypatch):
    """The pickers' on_change: the URL's cell goes, and a map that holds a selection (a click, a box) is drawn again
    without it, before the rerun; a map that holds none (a link's cell is not marked on it) keeps its zoom."""
    from attnviz.ui import heads

    for points, afresh in (([{"x": 3, "y": 6}], True), ([], False)):
        state: dict = {"heads_map_drawn": ("the map", 2), "heads_map_2": {"selection": {"points": points}}}
        query: dict = {"text": CAT, "cell": "6,3"}
        monkeypatch.setattr(heads.st, "session_state", state)
        monkeypatch.setattr(heads.st, "query_params", query)
        heads._picks_replace_selection()
        assert query == {"text": CAT}
        assert heads._map_key("the map", fresh=state.pop(heads._PICKED, False)) == (
            "heads_map_3" if afresh else "heads_map_2")


def test_the_cell_comes_back_with_its_map_and_not_with_another():
    """Heads with a clicked cell, then Steps and back: the Heads page's link carries the cell while the map is the
    same (the head carried back is the Heads page's own), not once the head or the settings changed elsewhere."""
    at = open_app(text=WORDS, num_heads="4", head="2", cell="3,1")
    follow_link(at, "pages/steps.py")
    assert url(at, "cell") is None and "cell" not in share_link(at)  # the Heads page's own
    follow_link(at, "pages/heads.py")
    no_exception(at)
    assert explained(at) == "query 3, key 1" and url(at, "cell") == "3,1"
    follow_link(at, "pages/steps.py")
    at.selectbox(key="steps_focus").set_value(1).run()
    follow_link(at, "pages/heads.py")
    no_exception(at)
    assert at.selectbox(key="heads_focus").value == 1 and explained(at) is None and url(at, "cell") is None

    at = open_app(text=WORDS, num_heads="4", cell="3,1")
    follow_link(at, "pages/tokens.py")
    at.text_area(key="text").input("one two three four five six").run()
    follow_link(at, "pages/heads.py")
    no_exception(at)
    assert explained(at) is None and url(at, "cell") is None


def test_the_steps_page_follows_its_own_head_stage_and_window():
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    for key, value in {"text": LONG, "num_heads": "4", "variant": "gqa", "num_kv_groups": "2", "positions": "rotary",
                       "head": "2", "stage": "scaled", "row": "30"}.items():
        at.query_params[key] = value
    at.switch_page("pages/steps.py").run()
    no_exception(at)
    assert at.selectbox(key="steps_focus").value == 2
    assert at.segmented_control(key="steps_stage").value == "scaled"
    assert at.slider(key="steps_row0").value == 30
    at.selectbox(key="steps_focus").set_value(1).run()
    assert url(at, "head") == "1" and "head=1" in share_link(at)
    # the rotation's pair figures start at the window's first query row and first key column, each slider saying so
    at.slider(key="steps_col0").set_value(40)
    at.segmented_control(key="steps_stage").set_value("rotated_queries").run()
    titles = [fig["layout"]["title"]["text"].replace("<br>", " ") for fig in figures(at)]
    assert "tokens 30–37 of 360" in titles[0] and "tokens 40–47 of 360" in titles[1], titles
    assert "the key figure draws" in at.slider(key="steps_col0").help and not at.slider(key="steps_col0").disabled
    # the K/V groups draw no map: the window's sliders are disabled there and say why, and keep their place
    at.segmented_control(key="steps_stage").set_value("kv_repeat").run()
    for key in ("steps_row0", "steps_col0"):
        assert at.slider(key=key).disabled and "This stage draws no map" in at.slider(key=key).help
    assert (url(at, "row"), url(at, "col")) == ("30", "40")
    bad = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    bad.query_params["stage"] = "rotated_queries"  # a stage of rotary runs only
    bad.query_params["pair"] = "3"  # the pair that stage draws
    bad.switch_page("pages/steps.py").run()
    no_exception(bad)
    assert "Ignored URL parameter stage='rotated_queries': it is not a stage this page shows" in main_warnings(bad)
    assert "showing masked" in main_warnings(bad) and bad.segmented_control(key="steps_stage").value == "masked"
    assert ("Ignored URL parameter pair='3': it picks nothing here: this run does not rotate q and k (with Positions: "
            "rotary it does); no stage draws a pair.") in main_warnings(bad)
    assert url(bad, "pair") is None and "pair=" not in share_link(bad)


def test_a_pages_parameters_stay_on_their_page():
    """Heads' stage=scores reaches neither the Steps page (its own stage stays masked) nor Generate's URL and link;
    Generate's new_tokens never reaches the Heads page's link; every page keeps its own values when the user comes
    back.  The focused head is the one value the Heads and Steps pages share (test_the_focused_head_follows_…)."""
    at = open_app(num_heads="4", head="3", stage="scores")
    follow_link(at, "pages/steps.py")  # the link carries the settings, the focused head and the Steps page's own
    no_exception(at)
    assert at.segmented_control(key="steps_stage").value == "masked" and not main_warnings(at)
    assert url(at, "stage") is None  # the Steps page's own: its default, left out
    follow_link(at, "pages/generate.py")
    no_exception(at)
    assert all(url(at, key) is None for key in ("head", "stage", "row", "col"))
    assert "head=" not in share_link(at) and "stage=" not in share_link(at)
    follow_link(at, "pages/heads.py")
    no_exception(at)
    assert at.selectbox(key="heads_focus").value == 3 and at.segmented_control(key="heads_stage").value == "scores"
    assert url(at, "head") == "3" and "head=3" in share_link(at)

    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["new_tokens"] = "7"
    at.switch_page("pages/generate.py").run()
    assert url(at, "new_tokens") == "7"
    at.switch_page("pages/heads.py").run()  # AppTest keeps the URL across the switch: the app drops Generate's
    no_exception(at)
    assert url(at, "new_tokens") is None and "new_tokens" not in share_link(at)


def test_the_focused_head_follows_from_heads_to_steps_and_back():
    """The Heads and Steps pages show the heads of one layer: the page link to the other carries the focused head (a
    head picked, clicked or linked), and that page shows it with no notice; head 0 (left out of the URL) is carried
    too.  The stage and the window stay each page's own."""
    at = open_app(num_heads="4", head="3")  # a link's head, on the first run: the links drawn before it is bound
    follow_link(at, "pages/steps.py")
    no_exception(at)
    assert at.selectbox(key="steps_focus").value == 3 and not main_warnings(at)
    assert url(at, "head") == "3" and "head=3" in share_link(at)
    at.selectbox(key="steps_focus").set_value(1).run()
    at.segmented_control(key="steps_stage").set_value("scaled").run()
    follow_link(at, "pages/heads.py")
    no_exception(at)
    assert at.selectbox(key="heads_focus").value == 1 and url(at, "head") == "1"
    assert at.segmented_control(key="heads_stage").value == "weights" and url(at, "stage") is None  # its own
    at.selectbox(key="heads_focus").set_value(0).run()
    assert url(at, "head") is None
    follow_link(at, "pages/steps.py")
    no_exception(at)
    assert at.selectbox(key="steps_focus").value == 0 and url(at, "head") is None
    assert at.segmented_control(key="steps_stage").value == "scaled"  # the Steps page's own, as it left it
    follow_link(at, "pages/tokens.py")  # a page without a focused head: the one the Heads page left
    follow_link(at, "pages/heads.py")
    assert at.selectbox(key="heads_focus").value == 0


def test_the_link_carries_a_pages_own_values_on_the_first_run_after_coming_back():
    """The page that comes back binds its kept stage and window (and the focused head its link carried) to the URL,
    and the Share link of that very run (drawn after them) carries them; its default (the Heads page's stage) stays
    out."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["num_heads"] = "4"
    at.switch_page("pages/steps.py").run()
    at.selectbox(key="steps_focus").set_value(3).run()
    at.segmented_control(key="steps_stage").set_value("weights").run()
    follow_link(at, "pages/heads.py")
    at.selectbox(key="heads_focus").set_value(2).run()
    follow_link(at, "pages/steps.py")
    no_exception(at)
    assert at.selectbox(key="steps_focus").value == 2
    assert "head=2" in share_link(at) and "stage=weights" in share_link(at)
    follow_link(at, "pages/heads.py")
    no_exception(at)
    assert link_query(at).get("head") == "2" and "stage" not in link_query(at)


def test_the_generate_pages_link_carries_new_tokens_on_the_first_run_after_coming_back():
    """Generate's New tokens, set, then the page left and come back to: that run's Share link has new_tokens
    already (the link is drawn after New tokens is bound, not one run late)."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["weights"] = "bundled model"
    at.switch_page("pages/generate.py").run()
    at.text_input(key="generate_new").input("7").run()
    assert "new_tokens=7" in share_link(at)
    follow_link(at, "pages/tokens.py")
    assert "new_tokens" not in share_link(at)
    follow_link(at, "pages/generate.py")
    no_exception(at)
    assert int(at.text_input(key="generate_new").value) == 7
    assert "new_tokens=7" in share_link(at)


# ---------------------------------------------------------------------- Compare, the Pitfall lab, the Induction lab

def map_titles(at) -> list[str]:
    return [fig["layout"]["title"]["text"] for fig in figures(at) if fig["layout"].get("title", {}).get("text")]


def test_a_link_opens_the_compare_pages_heatmap_choice():
    at = open_app("pages/compare.py", map="mean over heads")
    no_exception(at)
    assert at.segmented_control(key="compare_map").value == "mean over heads"
    assert any("weights, mean of 12 heads" in title for title in map_titles(at))
    assert not at.main.warning
    assert url(at, "map") == "mean over heads" and "map=mean+over+heads" in share_link(at)


def test_a_link_opens_the_pitfall_labs_bug_and_token():
    at = open_app("pages/pitfalls.py", bug="softmax_dim", token="1")
    no_exception(at)
    assert at.segmented_control(key="pitfalls_bug").value == "softmax_dim"
    assert at.select_slider(key="pitfalls_token").value == 1
    from attnviz.labs.pitfalls.catalogue import PITFALLS

    assert PITFALLS["softmax_dim"].title in [header.value for header in at.main.subheader]
    assert not at.main.warning
    assert "bug=softmax_dim" in share_link(at) and "token=1" in share_link(at)


def test_a_link_opens_the_induction_labs_length_seed_and_head():
    at = open_app("pages/induction.py", weights="bundled model", T="12", token_seed="7", map_layer="0", head="1")
    no_exception(at)
    assert int(at.text_input(key="induction_T").value) == 12
    assert int(at.text_input(key="induction_seed").value) == 7
    assert at.selectbox(key="induction_layer").value == 0
    assert at.selectbox(key="induction_head").value == 1
    assert any(title.startswith("L0H1: weights on [BOS] + x + x (T = 12)") for title in map_titles(at))
    assert not at.main.warning
    for part in ("T=12", "token_seed=7", "map_layer=0"):  # layer 0 is not the default: the best head's layer 1
        assert part in share_link(at)
    assert url(at, "head") == "1"  # the lab's default here (layer 0's best head), named by the link: kept as given


def test_a_link_to_a_layer_the_model_lacks_opens_the_induction_labs_best_head():
    at = open_app("pages/induction.py", weights="bundled model", map_layer="2")
    no_exception(at)
    assert ("Ignored URL parameter map_layer='2': it is out of range (the layers of this 2-layer model: 0 … 1); "
            "showing the best "
            "head's layer."
            in main_warnings(at))
    assert (at.selectbox(key="induction_layer").value, at.selectbox(key="induction_head").value) == (1, 0)  # L1H0
    assert url(at, "map_layer") is None and "map_layer" not in link_query(at)


SHOWN = {  # what a lab's widgets show, as its URL parameters write it
    "pages/compare.py": lambda at: {"map": at.segmented_control(key="compare_map").value},
    "pages/pitfalls.py": lambda at: {"bug": at.segmented_control(key="pitfalls_bug").value,
                                     "token": str(at.select_slider(key="pitfalls_token").value)},
    "pages/induction.py": lambda at: {"T": at.text_input(key="induction_T").value,
                                      "token_seed": at.text_input(key="induction_seed").value,
                                      "head": str(at.selectbox(key="induction_head").value)},
}


# one session checks two of a lab's parameters where the lab has two: each bad value gets its own notice and default
@pytest.mark.parametrize(("script", "query", "notices", "defaults"), [
    ("pages/compare.py", {"map": "softmax"},
     ["Ignored URL parameter map='softmax': it is not a map this page draws (head 0, mean over heads); showing "
      "head 0."],
     {"map": "head 0"}),
    ("pages/compare.py", {"map": "HEAD 0"}, ["is not a map this page draws"], {"map": "head 0"}),
    ("pages/pitfalls.py", {"bug": "../../etc/passwd", "token": "6"},
     ["Ignored URL parameter bug='../../etc/passwd': it is not a bug this lab has (none, masked_fill, softmax_dim",
      "Ignored URL parameter token='6': it is out of range (the token positions of this 6-token text: 0 … 5); "
      "perturbing token 3."],
     {"bug": "none", "token": "3"}),
    ("pages/pitfalls.py", {"bug": "__class__", "token": "-1"},
     ["is not a bug this lab has", "is out of range (the token positions of this 6-token text"],
     {"bug": "none", "token": "3"}),
    ("pages/pitfalls.py", {"token": "two"}, ["is not a whole number (the token positions of this 6-token text"],
     {"token": "3"}),
    ("pages/pitfalls.py", {"token": "9" * 400},
     [f"Ignored URL parameter token='{'9' * 20}…': it is out of range (the token positions of this 6-token text"],
     {"token": "3"}),
    # T and the seed: a value longer than their boxes hold (a shorter one opens in its box: test_induction_page.py)
    ("pages/induction.py", {"T": "9" * 30, "token_seed": "-" + "3" * 30},
     [f"Ignored URL parameter T='{'9' * 20}…': it is out of range (the repeat lengths the lab offers for this model: "
      "2 … 200); using T = 25.",
      f"Ignored URL parameter token_seed='-{'3' * 19}…': it is out of range (seeds: 0 … 2,147,483,647); using seed "
      "0."],
     {"T": "25", "token_seed": "0"}),
    ("pages/induction.py", {"T": "1e3" * 10, "head": "one"},
     ["is not a whole number (the repeat lengths the lab offers", "is not a whole number (this layer's"],
     {"T": "25"}),
    ("pages/induction.py", {"weights": "bundled model", "head": "2"},
     ["Ignored URL parameter head='2': it is out of range (this layer's 2 heads: 0 … 1); showing the best head."], {}),
])
def test_a_bad_value_in_a_labs_link_gives_a_notice_in_words_and_the_default(script, query, notices, defaults):
    at = open_app(script, **query)
    no_exception(at)
    for notice in notices:
        assert notice in main_warnings(at)
    shown = SHOWN[script](at)
    assert {key: shown[key] for key in defaults} == defaults
    for key in shown:  # the URL and the link say what the page draws: its defaults, which they leave out
        assert url(at, key) is None and key not in link_query(at)
    # the refused values are said, not kept: only Generate's random GPT is read again (state.take_refused)
    assert not [key for key in PAGE_WIDGETS if f"_url_refused_{key}" in at.session_state]


def test_a_labs_parameter_the_link_repeats_uses_the_last():
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["bug"] = ["masked_fill", "forgot_eval"]
    at.switch_page("pages/pitfalls.py").run()
    no_exception(at)
    assert at.segmented_control(key="pitfalls_bug").value == "forgot_eval" and "bug=forgot_eval" in share_link(at)
    assert "bug is given 2 times: using the last, 'forgot_eval'; ignored 'masked_fill'" in link_notices(at)


def test_a_labs_notice_goes_when_the_user_sets_its_widget():
    at = open_app("pages/pitfalls.py", bug="nonsense", token="40")
    at.segmented_control(key="pitfalls_bug").set_value("masked_fill").run()
    no_exception(at)
    assert "bug='nonsense'" not in main_warnings(at) and "token='40'" in main_warnings(at)


@pytest.mark.parametrize(("script", "change", "expected"), [
    ("pages/compare.py", lambda at: at.segmented_control(key="compare_map").set_value("mean over heads"),
     {"map": "mean over heads"}),
    ("pages/pitfalls.py", lambda at: (at.segmented_control(key="pitfalls_bug").set_value("mask_diagonal"),
                                      at.select_slider(key="pitfalls_token").set_value(4)),
     {"bug": "mask_diagonal", "token": "4"}),
    ("pages/induction.py", lambda at: (at.text_input(key="induction_T").input("9"),
                                       at.text_input(key="induction_seed").input("5"),
                                       at.selectbox(key="induction_layer").set_value(0).run(),  # its head follows
                                       at.selectbox(key="induction_head").set_value(0)),
     {"T": "9", "token_seed": "5", "map_layer": "0", "head": "0"}),
])
def test_a_labs_share_link_follows_the_user_also_on_the_first_run_after_coming_back(script, change, expected):
    """What the user sets goes to the URL and the Share link of that run; the page left and come back to (its page
    link carries the settings only) links it on that very run; a new session opened with the link shows it."""
    at = open_app(script, weights="bundled model")
    change(at)
    at.run()
    no_exception(at)
    encoded = {key: value.replace(" ", "+") for key, value in expected.items()}
    for key, value in expected.items():
        assert url(at, key) == value and f"{key}={encoded[key]}" in share_link(at)
    follow_link(at, "pages/tokens.py")
    assert all(f"{key}=" not in share_link(at) for key in expected)
    follow_link(at, script)
    no_exception(at)
    for key in expected:
        assert f"{key}={encoded[key]}" in share_link(at)
    again = reload(at).switch_page(script).run()
    no_exception(again)
    assert not again.main.warning
    for key in expected:
        assert f"{key}={encoded[key]}" in share_link(again)


# ---------------------------------------------------------------------- Generate's step, map and random GPT; knock-outs

PROMPT = "The cat sat on the mat. The cat"


def test_a_link_opens_the_generate_pages_step_layer_and_head():
    at = open_app("pages/generate.py", weights="bundled model", text=PROMPT, new_tokens="5", step="3",
                   map_layer="1", head="1")
    no_exception(at)
    assert any(md.value.startswith("**Step 3 of 5**") for md in at.main.markdown)
    assert (at.selectbox(key="generate_layer").value, at.selectbox(key="generate_head").value) == (1, 1)
    assert any(title.startswith("layer 1, head 1:") for title in map_titles(at))
    assert not at.main.warning
    for part in ("new_tokens=5", "step=3", "map_layer=1", "head=1"):
        assert part in share_link(at)


# one session checks the step and the layer or head: each bad value gets its own notice and default
@pytest.mark.parametrize(("query", "notices"), [
    ({"step": "6", "map_layer": "2"},
     ["Ignored URL parameter step='6': it is out of range (this generation's steps: 0 … 5); showing the prefill.",
      "Ignored URL parameter map_layer='2': it is out of range (the layers of this 2-layer model: 0 … 1); showing "
      "layer 0."]),
    ({"step": "two", "head": "-1"},
     ["is not a whole number (this generation's steps",
      "Ignored URL parameter head='-1': it is out of range (the heads of this 2-head model: 0 … 1); showing head 0."]),
])
def test_a_bad_step_layer_or_head_in_generates_link_gives_a_notice_and_the_default(query, notices):
    at = open_app("pages/generate.py", weights="bundled model", text=PROMPT, new_tokens="5", **query)
    no_exception(at)
    for notice in notices:
        assert notice in main_warnings(at)
    assert any(md.value.startswith("**Step 0 of 5**") for md in at.main.markdown)
    assert (at.selectbox(key="generate_layer").value, at.selectbox(key="generate_head").value) == (0, 0)
    for key in query:  # the URL says what the page draws: its default, which it leaves out
        assert url(at, key) is None


def test_generates_step_follows_step_and_prefill_and_keeps_the_url_while_playing():
    at = open_app("pages/generate.py", weights="bundled model", text=PROMPT, new_tokens="5", step="9")
    at.button(key="generate_next").click().run()
    no_exception(at)
    assert url(at, "step") == "1" and "step=1" in share_link(at)
    assert "step='9'" not in main_warnings(at)  # the user's own step: the link's refused one is moot
    at.button(key="generate_play").click().run()
    no_exception(at)
    # the step Play started from: a step an entry would fill the browser's history, and none would be the prefill's
    assert url(at, "step") == "1" and "step=1" in share_link(at)
    at.button(key="generate_stop").click().run()
    assert url(at, "step") is not None and f"step={url(at, 'step')}" in share_link(at)
    at.button(key="generate_back").click().run()
    assert url(at, "step") is None  # the prefill: the page's default


def test_a_link_opens_generates_random_gpt_and_a_bad_one_gives_a_notice():
    at = open_app("pages/generate.py", text=PROMPT, new_tokens="3", random="mla", step="2")
    no_exception(at)
    assert at.selectbox(key="generate_random").value == "mla"
    assert any(md.value.startswith("**Step 2 of 3**") for md in at.main.markdown)
    assert "random=mla" in share_link(at) and "step=2" in share_link(at)
    bad = open_app("pages/generate.py", text=PROMPT, variant="gqa", random="../gqa")
    no_exception(bad)
    assert ("Ignored URL parameter random='../gqa': it is not a random GPT this page offers (none, mha, gqa, mqa, "
            "mla, swa); "
            "using the sidebar's attention if it is a bonus one, else none.") in main_warnings(bad)
    assert bad.selectbox(key="generate_random").value == "gqa" and url(bad, "random") is None  # the default
    bad.selectbox(key="generate_random").set_value("none").run()
    no_exception(bad)
    assert "random='../gqa'" not in main_warnings(bad) and url(bad, "random") == "none"


def test_a_link_opens_the_induction_labs_knockouts():
    at = open_app("pages/induction.py", weights="bundled model", knockout="L1H1,L0H0,L1H1")
    no_exception(at)
    assert at.multiselect(key="induction_knockout").value == ["L1H1", "L0H0"]  # the link's order, each once
    assert not at.main.warning
    assert url(at, "knockout") == "L1H1,L0H0" and "knockout=L1H1%2CL0H0" in share_link(at)
    at.multiselect(key="induction_knockout").set_value([]).run()
    no_exception(at)
    assert url(at, "knockout") == ""
    again = reload(at).switch_page("pages/induction.py").run()
    no_exception(again)
    assert again.multiselect(key="induction_knockout").value == [] and not again.main.warning


def test_a_knockout_link_naming_heads_the_model_lacks_keeps_the_heads_it_has_and_says_which_went():
    at = open_app("pages/induction.py", weights="bundled model", knockout="L1H0,L9H9")  # the lab's choice: L0H0
    no_exception(at)
    assert ("The link's knockout='L1H0,L9H9' names 'L9H9', which is not a head of this model (L0H0, L0H1, L1H0, "
            "L1H1): knocking out L1H0 only.") in main_warnings(at)
    assert at.multiselect(key="induction_knockout").value == ["L1H0"]
    assert url(at, "knockout") == "L1H0" and "knockout=L1H0" in share_link(at)
    several = open_app("pages/induction.py", weights="bundled model", knockout="L9H9,L1H1,,x,L0H0")
    no_exception(several)
    assert ("The link's knockout='L9H9,L1H1,,x,L0H0' names 'L9H9' and 'x', none of which is a head of this model "
            "(L0H0, L0H1, L1H0, L1H1): knocking out L1H1, L0H0 only.") in main_warnings(several)
    assert several.multiselect(key="induction_knockout").value == ["L1H1", "L0H0"]
    at.multiselect(key="induction_knockout").set_value(["L0H1"]).run()  # the user's own choice: the notice goes
    no_exception(at)
    assert "knockout=" not in main_warnings(at) and url(at, "knockout") == "L0H1"


def test_a_knockout_link_naming_no_head_of_the_model_gives_a_notice_and_the_labs_choice():
    at = open_app("pages/induction.py", weights="bundled model", knockout="L9H9")
    no_exception(at)
    assert ("Ignored URL parameter knockout='L9H9': it names 'L9H9', which is not a head of this model (L0H0, "
            "L0H1, L1H0, L1H1); knocking out L") in main_warnings(at)
    chosen = at.multiselect(key="induction_knockout").value
    assert len(chosen) == 1 and url(at, "knockout") is None  # the lab's choice, its default: left out
    book = open_app("pages/induction.py", knockout="L0H0")  # the book's classes: no knock-outs, none linked
    no_exception(book)
    assert url(book, "knockout") is None and "knockout" not in share_link(book)


def test_an_entry_of_the_browsers_history_shows_the_view_it_was():
    """Back to an entry the page wrote before: the URL's own parameters differ from what the page's last run left,
    so the page reads them as a link's — head 3 back to head 0 (the entry left head out: the default).  Before, the
    session's head 3 stayed and the URL was written over, so Back seemed to do nothing.  An entry whose value the page
    refuses (the session's link, ``head=99``, reached from head 3: the browser's Back menu jumps over the entries
    between) shows head 0, which its notice names, not the session's head 3; the next entry's head 3 shows head 3,
    and the notice, about the refused value, goes."""
    at = open_app(num_heads="4")
    at.selectbox(key="heads_focus").set_value(3).run()
    at.segmented_control(key="heads_stage").set_value("scores").run()
    assert (url(at, "head"), url(at, "stage")) == ("3", "scores")
    del at.query_params["stage"]  # Back: the entry before Show was set
    at.run()
    no_exception(at)
    assert at.segmented_control(key="heads_stage").value == "weights" and url(at, "stage") is None
    assert at.selectbox(key="heads_focus").value == 3 and url(at, "head") == "3"
    at.query_params["head"] = "99"
    at.run()
    no_exception(at)
    assert "head='99'" in main_warnings(at) and "showing head 0" in main_warnings(at)
    assert at.selectbox(key="heads_focus").value == 0 and url(at, "head") is None
    at.query_params["head"] = "3"  # Forward
    at.run()
    assert at.selectbox(key="heads_focus").value == 3 and "head='99'" not in main_warnings(at)


def test_an_entry_of_another_page_after_a_reload_shows_that_pages_view():
    """After a reload (a new session) on the Pitfall lab, Back to the Compare page's entry: its map is read as a
    link's, not dropped as a value another page left."""
    at = open_app("pages/pitfalls.py", bug="softmax_dim")
    at.query_params["map"] = "mean over heads"  # Back: the Compare page's entry
    del at.query_params["bug"]
    at.switch_page("pages/compare.py").run()
    no_exception(at)
    assert at.segmented_control(key="compare_map").value == "mean over heads" and url(at, "map") == "mean over heads"


def test_a_labs_head_left_at_its_default_follows_the_best_head_of_a_new_t_and_seed():
    """The Induction lab's head defaults to the run's best head. Left there, it follows the best head of a new T or
    seed — the one a new session opened with that T and seed shows — out of the URL (no old best head written into
    it, no new entry of the browser's history), until the user picks one."""
    at = open_app("pages/induction.py", weights="bundled model")
    for key, value in (("induction_T", 2), ("induction_seed", 7), ("induction_T", 5)):  # best heads: 0, 0, 1
        at.text_input(key=key).input(str(value)).run()
        no_exception(at)
        fresh = open_app("pages/induction.py", weights="bundled model",
                          T=str(int(at.text_input(key="induction_T").value)),
                          token_seed=str(int(at.text_input(key="induction_seed").value)))
        assert at.selectbox(key="induction_head").value == fresh.selectbox(key="induction_head").value
        assert url(at, "head") is None
    picked = 1 - at.selectbox(key="induction_head").value  # the bundled model has 2 heads
    at.selectbox(key="induction_head").set_value(picked).run()
    at.text_input(key="induction_seed").input("3").run()
    assert at.selectbox(key="induction_head").value == picked  # the user's own head stays


# ---------------------------------------------------------------------- the Train page

def test_the_train_pages_share_link_carries_its_steps_and_seed_and_says_it_holds_no_model():
    """The Train page's own settings are in its URL and its Share link — its steps and seed, named also at their
    defaults, and none of the attention settings, which do not apply to it — and a link opens them; the link says it
    holds no trained model.  They stay on their page.  The boxes are text boxes, which send what they show: a number
    out of range stays in its box, and Start trains nothing, saying why (a number box would keep, and Start train, its
    last number in range); the URL and the Share link hold it too, written as a number (``99,999`` as ``99999``), and
    reopen the page as it was: the numbers, Start disabled with the same warning, no notice about the link.  So does a
    number past what a browser's number holds (2**53), and a text that is no number."""
    at = open_app("pages/train.py", train_steps="500", train_seed="3", num_heads="4")
    no_exception(at)
    assert at.text_input(key="train_steps").value == "500" and at.text_input(key="train_seed").value == "3"
    assert link_query(at) == {"train_steps": "500", "train_seed": "3"}
    assert any("holds no trained model" in caption.value for caption in at.sidebar.caption)
    at.text_input(key="train_seed").input("4").run()
    assert url(at, "train_seed") == "4" and link_query(at)["train_seed"] == "4"
    at.text_input(key="train_steps").input("99,999")  # out of range: the boxes keep them, Start trains nothing
    at.text_input(key="train_seed").input("-1")
    at.button(key="train_start").click().run()
    no_exception(at)
    refused = ("Training steps 99,999 is outside 10 … 6,000; Seed -1 is outside 0 … 2,147,483,647: Start trains "
               "nothing until each box holds a number in its range.")
    assert any(info.value.startswith("Nothing trained in this session yet") for info in at.info)
    assert link_query(at) == {"train_steps": "99999", "train_seed": "-1"}
    # the link written, reopened in a new session: the same view, no notice
    for view in (at, reload(at).switch_page("pages/train.py").run()):
        no_exception(view)
        assert (view.text_input(key="train_steps").value, view.text_input(key="train_seed").value) == ("99999", "-1")
        assert view.button(key="train_start").disabled and main_warnings(view) == refused
        assert (url(view, "train_steps"), url(view, "train_seed")) == ("99999", "-1")
    at.text_input(key="train_steps").input("9" * 20)  # past 2**53: a number box would not have sent it
    at.text_input(key="train_seed").input("seven").run()
    assert main_warnings(at) == ("Training steps 99,999,999,999,999,999,999 is outside 10 … 6,000; Seed 'seven' is "
                                 "not a whole number (0 … 2,147,483,647): Start trains nothing until each box holds a "
                                 "number in its range.")
    assert at.button(key="train_start").disabled
    assert any(info.value.startswith("Nothing trained in this session yet") for info in at.info)
    assert link_query(at) == {"train_steps": "9" * 20, "train_seed": "seven"}
    at.text_input(key="train_seed").input("4").run()
    at.text_input(key="train_steps").input(live_train_steps()).run()  # the default: left out of the URL
    assert url(at, "train_steps") is None and link_query(at)["train_steps"] == live_train_steps()
    follow_link(at, "pages/heads.py")
    no_exception(at)
    assert url(at, "train_seed") is None and "train_" not in share_link(at)
    follow_link(at, "pages/train.py")
    assert at.text_input(key="train_seed").value == "4"


def live_train_steps() -> str:
    from attnviz.labs import live_train

    return str(live_train.RECOMMENDED["steps"])


@pytest.mark.parametrize(("query", "notice"), [
    ({"train_steps": "9" * 30}, f"Ignored URL parameter train_steps='{'9' * 20}…': it is out of range (training "
                                "steps: 10 … 6,000); training 1,000 steps."),  # more than a box holds (24 characters)
    ({"train_seed": "x" * 30}, "it is not a whole number (training seeds"),
])
def test_a_bad_train_setting_in_the_link_gives_a_notice_in_words_and_the_default(query, notice):
    at = open_app("pages/train.py", **query)
    no_exception(at)
    assert notice in main_warnings(at)
    assert at.text_input(key="train_steps").value == live_train_steps()
    assert at.text_input(key="train_seed").value == "0"


def test_a_cell_clicked_on_the_map_of_a_text_too_long_for_the_url_stays_on_every_full_rerun():
    """The text is not in the URL (the session holds it), so the URL's settings never give it: a full rerun that
    changes no setting (the image-format radio, a page and back) keeps the cell and its explanation; another long text
    is another map and drops it."""
    from attnviz import urlstate

    long_text = "=" * (urlstate.MAX_URL_TEXT_BYTES // 3 + 1)  # "%3D" each: over the limit, 64 tokens
    assert not urlstate.url_text_fits(long_text)
    at = open_app(num_heads="4", head="2")
    at.text_area(key="text").input(long_text).run()
    no_exception(at)
    at.query_params["cell"] = "3,1"  # what a click on the focused map writes before its rerun
    at.run()
    no_exception(at)
    assert explained(at) == "query 3, key 1" and url(at, "cell") == "3,1"
    at.radio(key="image_format").set_value("svg").run()
    no_exception(at)
    assert explained(at) == "query 3, key 1" and url(at, "cell") == "3,1"
    follow_link(at, "pages/steps.py")
    follow_link(at, "pages/heads.py")
    no_exception(at)
    assert explained(at) == "query 3, key 1" and url(at, "cell") == "3,1"
    at.text_area(key="text").input(long_text + "=").run()
    no_exception(at)
    assert explained(at) is None and url(at, "cell") is None
