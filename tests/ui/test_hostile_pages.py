"""AppTest of every page but Heads against careless and hostile use: a page's own widgets keep what the user set
when they visit another page and come back, and a link that gives a parameter twice says which value it used."""

from __future__ import annotations

import pytest
from helpers.apptest import APP, TIMEOUT, follow_link, link_notices, main_warnings, no_exception, open_app
from streamlit.testing.v1 import AppTest

from attnviz import weights


def visit(at, page: str):
    """To ``page`` by its link in the sidebar, as a click does."""
    follow_link(at, page)
    no_exception(at)
    return at


def open_link(at, page: str):
    """A new session opened with a link to ``page`` (its URL parameters set on ``at``)."""
    at.switch_page(page).run()
    no_exception(at)
    return at


def away_and_back(at, page: str):
    """To the Steps page and back to ``page``, through the app's navigation (the same session)."""
    visit(at, "pages/steps.py")
    return visit(at, page)


def test_the_benchmarks_tokens_and_repeats_survive_a_visit_to_another_page():
    at = visit(open_app(), "pages/benchmark.py")
    at.text_input(key="benchmark_n").input("1024").run()
    at.text_input(key="benchmark_repeats").input("100").run()
    away_and_back(at, "pages/benchmark.py")
    assert int(at.text_input(key="benchmark_n").value) == 1024
    assert int(at.text_input(key="benchmark_repeats").value) == 100


def test_the_generate_pages_choices_survive_a_visit_to_another_page():
    at = visit(open_app(text="The cat sat on the mat. The cat"), "pages/generate.py")
    at.selectbox(key="generate_random").set_value("gqa").run()  # a small random GPT with grouped-query attention
    at.selectbox(key="generate_layer").set_value(1).run()
    at.selectbox(key="generate_head").set_value(5).run()
    at.selectbox(key="generate_sizes").set_value("Gemma 3 270M").run()
    at.selectbox(key="generate_dtype").set_value("bf16").run()
    away_and_back(at, "pages/generate.py")
    assert at.selectbox(key="generate_random").value == "gqa"
    assert at.success and at.success[0].value.startswith("Equals the uncached forward")  # it still generates
    assert (at.selectbox(key="generate_layer").value, at.selectbox(key="generate_head").value) == (1, 5)
    assert at.selectbox(key="generate_sizes").value == "Gemma 3 270M"
    assert at.selectbox(key="generate_dtype").value == "bf16"


def test_a_generate_layer_the_next_model_lacks_still_falls_back_to_0():
    at = visit(open_app(text="The cat sat on the mat. The cat", weights=weights.BUNDLED_NAME), "pages/generate.py")
    at.selectbox(key="generate_head").set_value(1).run()
    at.sidebar.selectbox(key="weights").set_value(weights.BOOK).run()
    at.selectbox(key="generate_random").set_value("mqa").run()  # 8 heads: head 1 is still there
    no_exception(at)
    assert at.selectbox(key="generate_head").value == 1


@pytest.mark.parametrize("page", ["pages/steps.py", "pages/compare.py", "pages/tokens.py"])
def test_a_parameter_given_twice_uses_the_last_and_says_so(page):
    """``?text=a&text=b``: the value appended last wins (as a parameter added to a link overrides it), and the
    notice names the value set aside, so that nobody wonders where their first text went."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["text"] = ["first words", "second words"]
    at.query_params["num_heads"] = ["4", "4"]  # the same value twice: nothing to say
    open_link(at, page)
    assert at.sidebar.text_area(key="text").value == "second words"
    notices = link_notices(at)
    assert "text is given 2 times" in notices and "'second words'" in notices and "'first words'" in notices
    assert "num_heads" not in notices and at.sidebar.selectbox(key="num_heads").value == 4


def test_the_generate_pages_own_parameter_given_twice_says_so_too():
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["weights"] = weights.BUNDLED_NAME
    at.query_params["new_tokens"] = ["3", "5"]
    open_link(at, "pages/generate.py")
    assert int(at.text_input(key="generate_new").value) == 5
    assert "new_tokens is given 2 times: using the last, '5'; ignored '3'" in link_notices(at)


@pytest.mark.parametrize("page", ["pages/steps.py", "pages/shapes.py"])
def test_sizes_in_a_link_with_a_checkpoint_are_named_as_the_checkpoints_not_replaced_by_others(page):
    """The weights decide their own sizes: a link's num_heads=5&d_out=7 with the bundled model (128 wide, 2 heads)
    is named as set aside for the model's own, never as 'using 7 heads' above a page that draws 2."""
    at = visit(open_app(weights=weights.BUNDLED_NAME, num_heads="5", d_out="7", num_kv_groups="3"), page)
    notices = link_notices(at)
    assert "7 heads" not in notices and "K/V groups" not in notices, notices
    assert "d_out='7'" in notices and "num_heads='5'" in notices and "d_out 128, 2 heads" in notices, notices
    assert at.sidebar.selectbox(key="num_heads").value == 2 and int(at.sidebar.text_input(key="d_out_box").value) == 128


def test_a_link_with_a_checkpoint_and_its_own_sizes_says_nothing():
    at = visit(open_app(weights=weights.BUNDLED_NAME, d_in="128", d_out="128", num_heads="2", preset="custom"),
               "pages/steps.py")
    assert not at.sidebar.warning and not link_notices(at)


def test_the_links_bad_new_tokens_notice_goes_once_new_tokens_is_set_on_the_page():
    """The notice's 'using 20' stops once the user types another count: it never stands above a page generating
    the 5 the user typed."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)  # the link opens the Generate page
    at.query_params["weights"] = weights.BUNDLED_NAME
    at.query_params["new_tokens"] = "abc" * 10  # longer than the box holds (a shorter text opens in the box)
    open_link(at, "pages/generate.py")
    said = main_warnings(at)
    assert "Ignored URL parameter new_tokens='abcabcabcabcabcabcab…': it is not a whole number" in said
    assert "using 20" in said
    at.text_input(key="generate_new").input("5").run()
    no_exception(at)
    assert "new_tokens" not in main_warnings(at)
    away_and_back(at, "pages/generate.py")
    assert "new_tokens" not in main_warnings(at)
    assert int(at.text_input(key="generate_new").value) == 5
