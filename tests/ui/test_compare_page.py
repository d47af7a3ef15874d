"""AppTest of the Compare page's own rule (``attnviz.ui.compare.compared_sizes``): the sizes every variant runs at."""

from __future__ import annotations

import pytest
from helpers.apptest import no_exception, open_app


def compare_page(**query):
    at = open_app(**query)
    at.switch_page("pages/compare.py").run()
    no_exception(at)
    return at


def heads_said(at) -> str:
    """The caption's words on the heads the multi-head variants ran ("4 heads of 4 for the multi-head ones")."""
    return next(c.value for c in at.caption if "for the multi-head ones" in c.value).rsplit(" · ", 1)[-1]


def test_a_single_head_class_in_the_sidebar_leaves_the_multi_head_variants_the_sidebars_heads():
    at = compare_page(variant="causal", d_in="16", d_out="16", num_heads="4")
    assert heads_said(at) == "4 heads of 4 for the multi-head ones"


def test_a_stale_view_runs_the_variants_at_the_sizes_of_the_run_it_shows():
    """Invalid input (a blank text) with d_out changed in the same run shows the last valid view, whose variants keep
    that run's sizes — not the sidebar's new d_out on the old run's tokens; the K/V groups the sidebar fitted to its
    new heads, which the run's heads cannot take, are said on the GQA card, which runs the default; valid again, the
    sidebar's sizes."""
    at = compare_page(variant="mha", d_in="18", d_out="18", num_heads="9", num_kv_groups="9")
    assert heads_said(at) == "9 heads of 2 for the multi-head ones"
    at.sidebar.text_area(key="text").set_value("   ")
    at.sidebar.text_input(key="d_out_box").input(str(16))  # 8 heads, the nearest that divide it, and 4 K/V groups
    at.run()
    no_exception(at)
    assert "Showing the last valid view." in [c.value for c in at.caption]
    assert heads_said(at) == "9 heads of 2 for the multi-head ones"
    assert any(c.value.endswith("· 3 K/V heads, each shared by 3 query heads (the sidebar's K/V groups, 4, do not "
                                "divide its 9 heads: it runs the default 3)") for c in at.caption)
    at.sidebar.text_area(key="text").set_value("Your journey starts with one step").run()
    no_exception(at)
    assert heads_said(at) == "8 heads of 2 for the multi-head ones"
    assert any(c.value.endswith("· 4 K/V heads, each shared by 2 query heads") for c in at.caption)


@pytest.mark.parametrize("variant", ["causal", "self_attention_v2", "simplified"])
def test_a_stale_view_of_a_single_head_class_runs_the_multi_head_variants_at_the_sidebars_heads(variant):
    """A single-head class's run has 1 head (the simplified one d_out = d_in): a stale view of it (a blank text) runs
    the variants at the heads its valid view ran, the sidebar's, as a fresh tab on that view's link does (it ran them
    with 1 head)."""
    at = compare_page(variant=variant, d_in="16", d_out="8", num_heads="4")
    valid = heads_said(at)
    assert valid == "4 heads of 2 for the multi-head ones"
    at.sidebar.text_area(key="text").set_value("   ").run()
    no_exception(at)
    assert "Showing the last valid view." in [c.value for c in at.caption]
    assert heads_said(at) == valid


def test_a_stale_view_of_a_single_head_class_keeps_its_runs_d_out_with_the_sidebars_heads():
    """A blank text with d_out changed in the same run: the variants keep the shown run's d_out, and the heads of
    the sidebar, which the run does not hold (a single-head class's)."""
    at = compare_page(variant="causal", d_in="16", d_out="16", num_heads="4")
    at.sidebar.text_area(key="text").set_value("   ")
    at.sidebar.text_input(key="d_out_box").input(str(8))
    at.run()
    no_exception(at)
    assert heads_said(at) == "4 heads of 4 for the multi-head ones"
