"""AppTest (streamlit.testing.v1): every page runs, and each sidebar control changes what is drawn.

Figures are read back from the Plotly JSON the app sends (``json.loads(element.proto.spec)``), so
these tests check what the user would see: the number of heads drawn, masked cells, tick labels.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from helpers.apptest import decode, follow_link, link_notices, no_exception, open_app
from helpers.apptest import plotly_figures as figures
from helpers.book import BOOK_EXERCISE_3_2
from helpers.maps import cells_shown, colour_range, images, pixels
from streamlit.proto.Dataframe_pb2 import Dataframe as DataframeProto
from streamlit.proto.PlotlyChart_pb2 import PlotlyChart as PlotlyChartProto
from streamlit.testing.v1 import AppTest

from attnviz.config import MAX_SEED
from attnviz.views.explain_figures import PANEL_PX
from attnviz.views.figures import CHIPS_BOX_PX, FOCUSED_MAP_PX

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("pages/heads.py", "pages/steps.py", "pages/shapes.py", "pages/tokens.py")
TIMEOUT = 120


app = open_app


def grid(at: AppTest) -> dict:
    return next(fig for fig in figures(at) if any(t.get("name", "").startswith("select head") for t in fig["data"]))


def focused(at: AppTest) -> dict:
    return next(fig for fig in figures(at) if fig["layout"]["title"]["text"].startswith("head "))


def grid_heads(fig: dict) -> list[str]:
    """The heads grid's tile titles ("head 3", the focused one "▶ head 0")."""
    return [note["text"] for note in fig["layout"]["annotations"] if re.fullmatch(r"(▶ )?head \d+", note["text"])]


@pytest.fixture(scope="module")
def default_app() -> AppTest:
    return app()


def test_every_page_runs_from_the_app(default_app):
    no_exception(default_app)
    assert default_app.title[0].value == "Attention heads"
    titles = {}
    for page in PAGES:
        at = app()
        at.switch_page(page).run()
        no_exception(at)
        titles[page] = at.title[0].value
    assert titles == {
        "pages/heads.py": "Attention heads",
        "pages/steps.py": "Attention step by step",
        "pages/shapes.py": "Tensor shapes through the pipeline",
        "pages/tokens.py": "Tokens and embeddings",
    }


@pytest.mark.parametrize("page", PAGES)
def test_each_page_runs_alone_like_a_deep_link(page):
    """A fresh server's first request for a page's path runs the page script without app.py (Streamlit routes by
    the pages/ folder until st.navigation is first called): the page is run as app.py runs it, with the shared
    sidebar showing the link's settings."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params["text"] = "Hello world hello"
    at.query_params["variant"] = "causal"
    at.switch_page(page).run()
    no_exception(at)
    assert at.sidebar.text_area(key="text").value == "Hello world hello"
    assert at.sidebar.selectbox(key="variant").value == "causal"
    assert [link.proto.label for link in at.sidebar.get("page_link")][:4] == ["Heads", "Steps", "Shapes", "Tokens"]
    assert at.query_params["text"] == "Hello world hello"  # the URL keeps the link's text


def test_default_view_is_gpt2_small_mha_with_12_causal_heads(default_app):
    fig = grid(default_app)
    assert grid_heads(fig) == ["▶ head 0"] + [f"head {h}" for h in range(1, 12)]
    z = cells_shown(focused(default_app))
    assert z.shape == (6, 6)
    assert np.isnan(z[np.triu_indices(6, k=1)]).all()  # masked cells drawn as gaps (grey)
    assert np.allclose(np.nansum(z, axis=1), 1.0, atol=1e-5)
    assert any(trace.get("name") == "masked" for trace in focused(default_app)["data"])


def test_head_count_changes_the_grid():
    at = app()
    at.sidebar.selectbox(key="num_heads").set_value(4).run()
    no_exception(at)
    assert len(grid_heads(grid(at))) == 4
    assert "4 heads × 192" in at.caption[0].value
    flow = at.get("html")[0].proto.body  # the compact shape diagram beside the grid follows
    assert "(1, 4, 6, 6)" in flow and "(1, 6, 4, 192)" in flow and "(1, 12, 6, 6)" not in flow


def test_variant_changes_the_view():
    at = app()
    at.sidebar.selectbox(key="variant").set_value("causal").run()
    no_exception(at)
    assert len(grid_heads(grid(at))) == 1  # a single head
    at.sidebar.selectbox(key="variant").set_value("simplified").run()
    no_exception(at)
    z = cells_shown(focused(at))
    assert np.isnan(z[np.triu_indices(6, k=1)]).all()  # the causal toggle applies to every variant
    assert at.sidebar.text_input(key="d_out_box").disabled  # no weights: d_out does not apply


def test_causal_toggle_unmasks_the_upper_triangle():
    at = app()
    at.sidebar.toggle(key="causal").set_value(False).run()
    no_exception(at)
    z = cells_shown(focused(at))
    upper = z[np.triu_indices(6, k=1)]
    assert np.isfinite(upper).all() and (upper > 0).all()
    assert not any(trace.get("name") == "masked" for trace in focused(at)["data"])


def test_dropout_in_training_mode_zeroes_and_rescales():
    at = app()
    at.sidebar.slider(key="dropout").set_value(0.5)
    at.sidebar.toggle(key="train").set_value(True).run()
    at.segmented_control(key="heads_stage").set_value("dropped").run()
    no_exception(at)
    z = cells_shown(focused(at))
    kept = z[np.isfinite(z)]
    assert (kept == 0).any()  # dropped cells
    assert kept.max() > 1.0  # kept cells scaled by 1/(1-p) = 2
    assert colour_range(focused(at))[1] == pytest.approx(2.0)


def test_text_changes_the_tick_labels_and_repeated_tokens_do_not_collapse():
    at = app()
    at.sidebar.text_area(key="text").set_value("the cat and the hat").run()
    no_exception(at)
    fig = focused(at)
    (image,) = images(fig)
    assert (image["x0"], image["dx"]) == (0, 1) and pixels(image).shape[:2] == cells_shown(fig).shape == (5, 5)
    assert decode(next(t for t in fig["data"] if t["name"] == "cells")["x"]).tolist()[:1] == [0]
    # one column a position: the two "the"s keep their own
    assert fig["layout"]["xaxis"]["ticktext"] == ["the", "·cat", "·and", "·the", "·hat"]
    assert fig["layout"]["xaxis2"]["ticktext"] == ["0: the", "1: ·cat", "2: ·and", "3: ·the", "4: ·hat"]  # hover's


def test_stage_toggle_shows_scores_with_minus_infinity_as_gaps():
    at = app()
    at.segmented_control(key="heads_stage").set_value("masked").run()
    no_exception(at)
    z = cells_shown(focused(at))
    assert np.isnan(z[np.triu_indices(6, k=1)]).all()
    assert np.isfinite(z[np.tril_indices(6)]).all()


def test_settings_survive_page_switches():
    at = app()
    at.sidebar.selectbox(key="variant").set_value("mha_wrapper")
    at.sidebar.selectbox(key="num_heads").set_value(6).run()
    at.switch_page("pages/steps.py").run()
    no_exception(at)
    assert at.sidebar.selectbox(key="variant").value == "mha_wrapper"
    assert at.sidebar.selectbox(key="num_heads").value == 6
    at.switch_page("pages/heads.py").run()
    assert len(grid_heads(grid(at))) == 6
    # a number box's text that is no whole number in its range stays as typed, page after page, and the warning under
    # the box names it, the range and the value the pages use, which they draw (a number box kept it in view, red)
    at.sidebar.text_input(key="d_out_box").input("5000")
    at.sidebar.text_input(key="seed_box").input("-1").run()
    for page in ("pages/steps.py", "pages/heads.py"):
        no_exception(at)
        assert (at.sidebar.text_input(key="d_out_box").value, at.sidebar.text_input(key="seed_box").value) == (
            "5000", "-1")
        assert [w.value.replace("\\", "") for w in at.sidebar.warning] == [
            "d_out 5,000 is outside 1 … 4,096: using 768.", f"Seed -1 is outside 0 … {MAX_SEED:,}: using 123."]
        assert (at.session_state["d_out"], at.session_state["seed"]) == (768, 123)
        assert "d_out" not in at.query_params and "seed" not in at.query_params
        at.switch_page(page).run()
    assert len(grid_heads(grid(at))) == 6
    at.sidebar.text_input(key="d_out_box").input("1,536").run()  # a whole number in range: used, and written so
    assert at.sidebar.text_input(key="d_out_box").value == "1536" and at.session_state["d_out"] == 1536
    assert [w.value.replace("\\", "") for w in at.sidebar.warning] == [
        f"Seed -1 is outside 0 … {MAX_SEED:,}: using 123."]
    at.sidebar.selectbox(key="preset").set_value("gpt2-small").run()  # a preset sets the sizes: the boxes show them
    assert at.sidebar.text_input(key="d_out_box").value == "768"


def test_a_setting_survives_pages_that_do_not_draw_it():
    """The Train page folds the settings away; K/V groups are drawn only for the variants that have them."""
    at = app(variant="gqa", num_kv_groups="2", text="Hello world hello")
    at.switch_page("pages/train.py").run()
    no_exception(at)
    assert [e.label for e in at.sidebar.expander] == ["Attention settings", "Share & export"]
    assert at.sidebar.text_area(key="text").value == "Hello world hello"
    at.switch_page("pages/steps.py").run()
    at.sidebar.selectbox(key="variant").set_value("mha").run()  # no K/V groups drawn
    at.switch_page("pages/heads.py").run()
    at.sidebar.selectbox(key="variant").set_value("gqa").run()
    no_exception(at)
    assert at.sidebar.selectbox(key="num_kv_groups").value == 2
    assert at.sidebar.text_area(key="text").value == "Hello world hello"


def test_page_widgets_are_as_the_user_left_them_when_they_come_back():
    """The focused head and the stage of the Heads page, the Steps page's stage and head: kept while another page
    is shown (Streamlit drops a widget's value when a run does not draw it; the frame keeps these).  The focused
    head is the two pages' one: the link from the Heads page carries its head to the Steps page."""
    at = app()
    at.selectbox(key="heads_focus").set_value(3).run()
    at.segmented_control(key="heads_stage").set_value("masked").run()
    follow_link(at, "pages/steps.py")
    at.selectbox(key="steps_focus").set_value(5).run()
    at.segmented_control(key="steps_stage").set_value("weights").run()
    follow_link(at, "pages/train.py")
    follow_link(at, "pages/heads.py")
    no_exception(at)
    assert at.selectbox(key="heads_focus").value == 3
    assert at.segmented_control(key="heads_stage").value == "masked"
    assert focused(at)["layout"]["title"]["text"].startswith("head 3")
    assert grid_heads(grid(at))[3] == "▶ head 3"
    follow_link(at, "pages/steps.py")
    no_exception(at)
    assert at.selectbox(key="steps_focus").value == 3  # the Heads page's, which its link carried
    assert at.segmented_control(key="steps_stage").value == "weights"
    at.sidebar.selectbox(key="num_heads").set_value(2).run()  # head 3 is gone: head 0
    assert at.selectbox(key="steps_focus").value == 0


def test_empty_text_keeps_the_text_box_and_the_last_view():
    at = app()
    at.sidebar.text_area(key="text").set_value("   ").run()
    no_exception(at)
    assert any("Type some text" in w.value for w in at.warning)
    assert at.sidebar.text_area(key="text").value == "   "  # the user's input is not replaced
    assert len(grid_heads(grid(at))) == 12  # the last valid view stays


def test_url_parameters_set_the_view_and_bad_ones_are_ignored_with_a_notice():
    at = app(num_heads="4", causal="false", variant="mha", text="one two three")
    no_exception(at)
    assert len(grid_heads(grid(at))) == 4
    assert at.sidebar.toggle(key="causal").value is False
    bad = app(num_heads="7", dropout="5", variant="nope", seed="-3", bogus="1")
    no_exception(bad)
    notices = link_notices(bad)
    for name in ("num_heads", "dropout", "variant", "seed", "bogus"):
        assert name in notices
    assert len(grid_heads(grid(bad))) == 12  # defaults used instead


def test_steps_page_shows_before_after_and_code_for_each_stage():
    at = app()
    at.switch_page("pages/steps.py").run()
    for stage, code in (("scaled", "keys.shape[-1] ** 0.5"), ("masked", "masked_fill_"),
                        ("weights", "softmax"), ("dropped", "self.dropout"), ("scores", "keys.transpose")):
        at.segmented_control(key="steps_stage").set_value(stage).run()
        no_exception(at)
        assert any(code in block.value for block in at.code), stage
    at.segmented_control(key="steps_stage").set_value("dropped").run()
    assert any("eval mode" in info.value for info in at.info)


def test_steps_page_wraps_the_stages_line_in_its_column():
    """The stage's line sits beside the shape diagram, narrower than the page: a long line (the mask's, with its
    comment) wraps there rather than run under the column's edge."""
    at = app()
    at.switch_page("pages/steps.py").run()
    at.segmented_control(key="steps_stage").set_value("masked").run()
    no_exception(at)
    (line,) = [block for block in at.code if block.value.startswith("attn_scores.masked_fill_(")]
    assert "# in place, with the underscore" in line.value and line.proto.wrap_lines


def test_shapes_page_reflects_head_count():
    at = app()
    at.switch_page("pages/shapes.py").run()
    no_exception(at)
    dot = at.get("graphviz_chart")[0].proto.spec
    assert "(1, 12, 6, 64)" in dot
    at.sidebar.selectbox(key="num_heads").set_value(4).run()
    dot = at.get("graphviz_chart")[0].proto.spec
    assert "(1, 4, 6, 192)" in dot
    assert any("768 = 4 × 192" in md.value for md in at.markdown)


def test_tokens_page_escapes_html_and_marks_special_tokens():
    at = app(text="<img src=x onerror=alert(1)> <|endoftext|> hi")
    at.switch_page("pages/tokens.py").run()
    no_exception(at)
    body = at.get("html")[0].proto.body
    assert "<img" not in body and "&lt;" in body  # "<img" is two tokens: "<" and "img"
    assert "★special" in body
    assert any(c.value.startswith("★ 1 special token (") for c in at.caption)  # one: singular, no "(s)"
    at = app(text="<|endoftext|> hi <|endoftext|>")
    at.switch_page("pages/tokens.py").run()
    assert any(c.value.startswith("★ 2 special tokens (") for c in at.caption)


def test_tokens_page_names_a_split_characters_tokens_and_shows_a_leading_space_as_a_dot():
    at = app(text="I love 🤖")
    at.switch_page("pages/tokens.py").run()
    no_exception(at)
    table = at.dataframe[0].value
    assert table["piece"].tolist() == ["I", "·love", "·<0xF0><0x9F>", "<0xA4>", "<0x96>"]
    assert table["text span"].tolist() == ["char 0", "chars 1–5", "char 6 and part of “🤖” (char 7)",
                                           "part of “🤖” (char 7)", "part of “🤖” (char 7)"]
    span_help = json.loads(at.dataframe[0].proto.columns)["text span"]["help"]
    assert "counted from 0" in span_help and "both included" in span_help
    assert "·&lt;0xF0&gt;&lt;0x9F&gt;" in at.get("html")[0].proto.body  # the chip too


def _chips_box_height(at) -> int | None:
    """The pixel height of the box that holds the Tokens page's chips (None: the chips are not in a boxed block)."""
    for block in at.main.children.values():
        proto = getattr(block, "proto", None)
        if proto is not None and hasattr(proto, "height_config") and any(
                "attnviz-chips" in getattr(getattr(element, "proto", None), "body", "")
                for element in getattr(block, "children", {}).values()):
            return proto.height_config.pixel_height or None
    return None


def test_a_long_texts_chips_scroll_in_a_box_so_the_embeddings_stay_in_reach():
    at = app(text="word " * 300)
    at.switch_page("pages/tokens.py").run()
    no_exception(at)
    assert _chips_box_height(at) == CHIPS_BOX_PX
    at.sidebar.text_area(key="text").set_value("a short text").run()
    assert _chips_box_height(at) is None  # a few chips: no box


def test_book_preset_shows_the_books_numbers():
    at = app(preset="book", variant="causal", seed="123")
    no_exception(at)
    assert int(at.sidebar.text_input(key="d_in_box").value) == 3
    at.switch_page("pages/steps.py").run()
    at.segmented_control(key="steps_stage").set_value("context").run()
    no_exception(at)
    table = at.dataframe[0].value
    # CausalAttention(3, 2, 6, 0.0) after torch.manual_seed(123) on the book's journey vectors
    assert table["context vector"].tolist()[:2] == ["-0.4519, 0.2216", "-0.5874, 0.0058"]


def test_the_book_size_runs_the_wrappers_listing_and_says_what_d_out_means():
    """3.6.1: MultiHeadAttentionWrapper(d_in=3, d_out=2, …, num_heads=2) after torch.manual_seed(123) prints a (2, 6,
    4) tensor; at the book size the wrapper runs it (d_out 4 = 2 heads × 2, the sidebar's help says why), and MHA
    picked at that size its own listing's d_out 2."""
    at = app(preset="book", variant="mha_wrapper")
    no_exception(at)
    d_out = at.sidebar.text_input(key="d_out_box")
    assert (at.sidebar.selectbox(key="preset").value, d_out.value) == ("book", "4")
    assert "takes d_out per head" in d_out.proto.help
    at.switch_page("pages/steps.py").run()
    at.segmented_control(key="steps_stage").set_value("context").run()
    no_exception(at)
    output = at.dataframe[1].value["output vector"].tolist()
    assert output[:2] == ["-0.4519, 0.2216, 0.4772, 0.1063", "-0.5874, 0.0058, 0.5891, 0.3257"]
    at.sidebar.selectbox(key="variant").set_value("mha").run()
    no_exception(at)
    assert (at.sidebar.selectbox(key="preset").value, int(at.sidebar.text_input(key="d_out_box").value)) == ("book", 2)
    assert at.dataframe[1].value["output vector"].tolist()[0] == "0.3190, 0.4858"  # 3.6.2's printed output
    at.sidebar.selectbox(key="variant").set_value("mha_wrapper").run()
    assert int(at.sidebar.text_input(key="d_out_box").value) == 4


def test_exercise_3_2_is_the_wrappers_d_out_set_to_2_at_the_book_size():
    """Exercise 3.2: 2-dimensional context vectors from MultiHeadAttentionWrapper(…, num_heads=2) — each head's d_out
    is 1.  At the book size the student sets the wrapper's d_out (the total width) from the listing's 4 to 2: the size
    stays the book's (its inputs, seed and mask), the output is the exercise's printed answer, each of its heads 1
    wide, the Shapes page names the exercise, and the link reopens it."""
    at = app(preset="book", variant="mha_wrapper")
    assert "Exercise 3.2" in at.sidebar.text_input(key="d_out_box").proto.help
    at.sidebar.text_input(key="d_out_box").input(str(2)).run()
    no_exception(at)
    assert at.sidebar.selectbox(key="preset").value == "book"
    assert (int(at.sidebar.text_input(key="d_in_box").value), at.sidebar.selectbox(key="num_heads").value) == (3, 2)
    assert (int(at.sidebar.text_input(key="seed_box").value), at.sidebar.toggle(key="causal").value) == (123, True)
    book_rows = [f"{a:.4f}, {b:.4f}" for a, b in BOOK_EXERCISE_3_2]  # the book's (2, 6, 2): two copies of these
    at.switch_page("pages/steps.py").run()
    at.segmented_control(key="steps_stage").set_value("context").run()
    no_exception(at)
    assert at.dataframe[1].value["output vector"].tolist() == book_rows  # (1, 6, 2): one copy
    url = {key: value[-1] if isinstance(value, list) else value for key, value in at.query_params.items()}
    assert (url.get("preset"), url.get("variant"), url.get("d_out")) == ("book", "mha_wrapper", "2")
    at.switch_page("pages/shapes.py").run()
    no_exception(at)
    shown = " ".join(m.value for m in at.main.markdown)
    assert "MultiHeadAttentionWrapper(d_in, d_out=1, …, num_heads=2)" in shown and "exercise 3.2" in shown
    reopened = app(**url)
    reopened.switch_page("pages/steps.py").run()
    reopened.segmented_control(key="steps_stage").set_value("context").run()
    no_exception(reopened)
    assert reopened.sidebar.selectbox(key="preset").value == "book"
    assert reopened.dataframe[1].value["output vector"].tolist() == book_rows


def test_choosing_the_book_preset_sets_the_books_mask_for_the_variant():
    at = app(variant="self_attention_v1")
    at.sidebar.selectbox(key="preset").set_value("book").run()
    no_exception(at)
    assert at.sidebar.toggle(key="causal").value is False  # section 3.4 has no mask
    z = cells_shown(focused(at))
    assert np.isfinite(z).all()
    at.sidebar.selectbox(key="variant").set_value("causal").run()
    assert at.sidebar.toggle(key="causal").value is True
    assert (int(at.sidebar.text_input(key="d_in_box").value), at.sidebar.selectbox(key="preset").value) == (3, "book")


def test_before_and_after_panels_share_one_colour_scale():
    at = app()
    at.switch_page("pages/steps.py").run()
    for stage in ("scaled", "masked"):
        at.segmented_control(key="steps_stage").set_value(stage).run()
        pair = [colour_range(fig) for fig in figures(at)[:2]]
        assert pair[0] == pair[1], stage
    before = cells_shown(figures(at)[0])  # masked stage: before = scaled scores
    assert colour_range(figures(at)[0])[1] == pytest.approx(float(np.nanmax(np.abs(before))))


def test_dropout_scale_is_0_to_1_when_dropout_did_not_run():
    at = app(dropout="0.5", train="false")
    at.segmented_control(key="heads_stage").set_value("dropped").run()
    assert colour_range(focused(at))[1] == pytest.approx(1.0)


def test_book_preset_steps_show_the_books_mha_output():
    at = app(preset="book", variant="mha", seed="123")
    at.switch_page("pages/steps.py").run()
    at.segmented_control(key="steps_stage").set_value("context").run()
    no_exception(at)
    output = at.dataframe[1].value["output vector"].tolist()
    assert output[:2] == ["0.3190, 0.4858", "0.2943, 0.3897"]  # MultiHeadAttention(3, 2, 6, 0.0, num_heads=2)


def stats_frame(at: AppTest):
    """The head statistics st.dataframe: its rows and its column config (the JSON the browser gets)."""
    import json

    table = next(t for t in at.dataframe if "entropy" in t.value.columns)
    return table, json.loads(table.proto.columns)


def test_head_statistics_table_draws_each_statistic_as_a_bar_on_its_range(default_app):
    table, columns = stats_frame(default_app)
    frame = table.value
    assert frame["head"].tolist() == list(range(12))
    entropy = columns["entropy"]
    assert entropy["type_config"]["type"] == "progress"
    assert entropy["type_config"]["min_value"] == 0 and entropy["type_config"]["max_value"] == pytest.approx(np.log(6))
    assert columns["mean distance"]["type_config"]["max_value"] == pytest.approx(4.0)  # mean of 5,4,3,3,4,5
    assert (frame["entropy"] <= np.log(6) + 1e-9).all()
    assert list(table.proto.selection_mode) == [DataframeProto.SelectionMode.SINGLE_ROW]  # a row focuses its head
    # every column in view side by side, the last (diagonal) too, without a horizontal scroll: the page's main column is
    # 820 px wide, the row checkboxes take 32 and the head's column is "small" (75); a column sized to its content
    # (no width) pushed the last one out of view
    widths = [columns[name].get("width") for name in frame.columns if name != "head"]
    assert columns["head"]["width"] == "small" and all(isinstance(width, int) for width in widths), widths
    assert 32 + 75 + sum(widths) <= 820


def test_the_head_statistics_diagonal_counts_query_0_with_the_mask_off_and_its_help_says_when():
    """Under the causal mask the diagonal leaves out query 0 (its weight on itself is forced to 1); with the mask off
    query 0 weighs every key, so the table's diagonal is every query's, and its header's help names both cases."""
    from attnviz import pipeline
    from attnviz.config import AttentionConfig

    text = "one two three four"
    at = app(causal="false", variant="mha", num_heads="4", text=text)
    no_exception(at)
    table, columns = stats_frame(at)
    weights = pipeline.run(text, AttentionConfig(causal=False, num_heads=4)).steps["weights"][0]  # (heads, n, n)
    every_query = np.diagonal(weights, axis1=1, axis2=2).mean(axis=1)  # (heads,)
    assert np.allclose(table.value["diagonal"], every_query, atol=1e-6)
    assert "mask off" in columns["diagonal"]["help"] and "causal mask" in columns["diagonal"]["help"]


def test_a_long_paste_is_computed_once_across_pages_and_reruns(monkeypatch):
    """A 50,000-character paste is bounded before tokenizing; every lookup (page, grid, statistics, focused
    head, downloads) must find the one Trace: Steps -> Heads -> Tokens -> Heads and two reruns run it once."""
    from attnviz import pipeline

    calls, real_run = [], pipeline.run

    def counting_run(text, config):
        if len(text) > 1000:
            calls.append(len(text))
        return real_run(text, config)

    monkeypatch.setattr(pipeline, "run", counting_run)
    words = " ".join(f"paste{i}" for i in range(9000))  # unique to this test: nothing cached yet
    paste = (words + " ") * (50_000 // len(words) + 1)
    paste = paste[:50_000]
    at = app(preset="custom", d_in="16", d_out="16", num_heads="2")
    at.text_area(key="text").input(paste).run()
    no_exception(at)
    for page in ("pages/steps.py", "pages/heads.py", "pages/tokens.py", "pages/heads.py"):
        at.switch_page(page).run()
        no_exception(at)
    at.run()
    at.run()
    no_exception(at)
    assert any("40,000 characters" in info.value for info in at.info)  # the paste was bounded, and said so
    assert len(calls) == 1, calls


def test_heads_page_maps_are_plotly_charts_a_map_per_head_and_selectable():
    """The grid has a map image per head and reports a click; the focused map (a window of a long text, beside the
    overview) reports clicks, boxes and lassos of its cells; every map is st.plotly_chart's."""
    import json

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params["text"] = " ".join(["the cat sat on the mat"] * 60)  # > 256 tokens: overview and window
    at.query_params["num_heads"] = "4"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.get("bidi_component")  # no component of ours
    charts = {re.sub(r"_\d+$", "", chart.proto.id.rsplit("-", 1)[-1]): chart for chart in at.get("plotly_chart")}
    grid, overview, focused_map = (json.loads(charts[key].proto.spec)
                                   for key in ("heads_grid", "heads_map_overview", "heads_map"))
    assert [t["name"] for t in images(grid)] == [f"head {h}" for h in range(4)]
    modes = PlotlyChartProto.SelectionMode
    assert list(charts["heads_grid"].proto.selection_mode) == [modes.POINTS]
    assert set(charts["heads_map"].proto.selection_mode) == {modes.POINTS, modes.BOX, modes.LASSO}
    assert not charts["heads_map_overview"].proto.selection_mode
    (image,) = images(focused_map)
    assert pixels(image).shape == (256, 256, 4) and cells_shown(focused_map).shape == (256, 256)
    assert focused_map["layout"]["dragmode"] == "zoom"  # a drag zooms; the modebar has box and lasso
    assert {t["name"] for t in focused_map["data"]} >= {"cells", "masked cells"}
    config = json.loads(charts["heads_map"].proto.config)
    assert config["toImageButtonOptions"] == {"format": "png", "filename": "attnviz-heads-head0-weights", "scale": 2}
    assert overview["data"][0]["type"] == "heatmap"
    # square cells in a column of the map's width, and the "why" panel in one of its own beside it, where the page
    # has room for both, else wrapped under it (not a share of the page that squeezes the map to a sliver)
    layout = focused_map["layout"]
    assert layout["yaxis"]["scaleanchor"] == "x" and layout["xaxis"]["constrain"] == layout["yaxis"]["constrain"] \
        == "domain"
    margin = layout["margin"]
    assert layout["height"] - margin["t"] - margin["b"] == FOCUSED_MAP_PX - margin["l"] - margin["r"]
    (row,) = [block for block in blocks(at.main) if getattr(getattr(block.proto, "flex_container", None), "wrap", 0)
              and any(charts["heads_map"] in elements(child) for child in block.children.values())]
    map_column, panel = row.children.values()
    assert (map_column.proto.width_config.pixel_width, panel.proto.width_config.pixel_width) == (FOCUSED_MAP_PX,
                                                                                               PANEL_PX)
    assert any(getattr(element, "value", None) == "**Why this weight?**" for element in elements(panel))


def blocks(node) -> list:
    """Every block (container) under ``node`` of AppTest's tree, ``node``'s own children first."""
    children = [child for child in getattr(node, "children", {}).values() if hasattr(child, "children")]
    return children + [block for child in children for block in blocks(child)]


def elements(node) -> list:
    """Every element under ``node`` of AppTest's tree."""
    found = []
    for child in getattr(node, "children", {}).values():
        found += elements(child) if hasattr(child, "children") else [child]
    return found


def test_a_click_on_a_tile_or_a_selected_row_focuses_that_head(monkeypatch):
    """The grid's and the tables' on_select callbacks set the focused head before the rerun draws its selectbox;
    anything that is not one of this run's heads is ignored."""
    from types import SimpleNamespace

    from attnviz.ui import focus as ui_heads

    state: dict = {}
    monkeypatch.setattr(ui_heads.st, "session_state", state)

    def click(points):
        state["heads_grid"] = SimpleNamespace(selection={"points": points})
        ui_heads.focus_from_grid(12)
        return state.get("heads_focus")

    assert click([{"customdata": 5, "x": 1.0, "y": 2.0}]) == 5
    assert click([{"customdata": [7]}]) == 7
    assert click([{"customdata": 40}]) == 7 and click([]) == 7 and click([{"customdata": "3"}]) == 7
    state["heads_stats"] = SimpleNamespace(selection={"rows": [0], "columns": []})
    ui_heads.focus_from_row("heads_stats", [2, 0, 1])  # the row's head, not its position
    assert state["heads_focus"] == 2
    for rows in ([], [3], ["1"]):
        state["heads_stats"] = SimpleNamespace(selection={"rows": rows, "columns": []})
        ui_heads.focus_from_row("heads_stats", [2, 0, 1])
        assert state["heads_focus"] == 2


def test_a_new_text_is_run_before_the_sidebar_is_drawn_and_only_a_new_text(monkeypatch):
    """A committed text with every other setting unchanged is traced before the sidebar's elements go out (so the
    forward pass runs while the browser is idle), once; any other change is settled by the sidebar first."""
    import uuid

    from attnviz import pipeline
    from attnviz.ui import frame

    events: list[str] = []
    real_run, real_sidebar = pipeline.run, frame.sidebar

    def run(*args, **kwargs):
        events.append("run")
        return real_run(*args, **kwargs)

    def sidebar(*args, **kwargs):
        events.append("sidebar")
        return real_sidebar(*args, **kwargs)

    monkeypatch.setattr(pipeline, "run", run)
    monkeypatch.setattr(frame, "sidebar", sidebar)
    at = app()
    no_exception(at)
    fresh = uuid.uuid4().hex[:8]  # texts no other test has run (the trace cache is the process's)

    events.clear()
    at.sidebar.text_area(key="text").set_value(f"A new text {fresh} about cats").run()
    no_exception(at)
    assert events == ["run", "sidebar"], events  # ahead of the sidebar, and the sidebar's run is a cache hit
    assert focused(at)["layout"]["xaxis"]["ticktext"][-1] == "·cats"  # and the page draws that text

    events.clear()
    at.sidebar.toggle(key="causal").set_value(False).run()  # another setting: the sidebar settles it first
    no_exception(at)
    assert events == ["sidebar", "run"], events

    events.clear()
    at.sidebar.text_area(key="text").set_value(f"Another text {fresh} about dogs")
    at.sidebar.selectbox(key="num_heads").set_value(4).run()  # a new text and another setting at once
    no_exception(at)
    assert events == ["sidebar", "run"], events

    events.clear()
    at.sidebar.text_area(key="text").set_value("   ").run()  # an invalid text: nothing ahead, the sidebar's run says so
    no_exception(at)
    assert events == ["sidebar"], events
    assert at.warning and at.sidebar.text_area(key="text").value == "   "  # the text is kept


def test_tokens_picked_by_name_sum_their_attention():
    """The expander beside the focused map: query and key tokens picked by name draw their summed attention (the
    selected queries' mean per key, what each query gives the selected keys), highlighted."""
    at = app(text="Every cat loves warm milk and every dog loves bones", num_heads="4")
    at.session_state["heads_pick"] = True  # the expander open
    at.run()
    at.multiselect(key="heads_pick_queries").set_value([3, 5])
    at.multiselect(key="heads_pick_keys").set_value([1]).run()
    no_exception(at)
    (summed,) = [fig for fig in figures(at) if fig["layout"].get("title", {}).get("text", "").endswith("at once")]
    titles = [annotation["text"].replace("<br>", " ") for annotation in summed["layout"]["annotations"]]  # wrapped
    assert [title.split(" (")[0] for title in titles] == [
        "weights of the 2 selected queries", "weights each query gives the 1 selected key"]
    assert titles[0].endswith("), averaged per key") and titles[1].endswith(") in total")
    assert any("2 queries, 1 key selected" in block.value for block in at.markdown)


def _explained(cells):
    from attnviz import pipeline
    from attnviz.config import AttentionConfig
    from attnviz.ui import why

    trace = pipeline.run("one two three four", AttentionConfig(variant="mha", d_in=16, d_out=16, num_heads=2))
    why.explain(trace, 0, [tuple(cell) for cell in cells], None)


@pytest.mark.parametrize(("cells", "says"), [([(0, 1), (1, 2), (0, 3)], True), ([(0, 1), (1, 0), (0, 3)], False)])
def test_a_box_over_masked_cells_only_says_their_weights_are_0(cells, says):
    at = AppTest.from_function(_explained, args=(cells,), default_timeout=TIMEOUT).run()
    no_exception(at)
    assert any("2 queries, 3 keys selected" in block.value for block in at.markdown)
    captions = [caption.value for caption in at.caption if "selected cells is masked" in caption.value]
    assert captions == (["Every one of the 3 selected cells is masked — a key hidden from its query — so each has "
                         "weight 0: what these queries give these keys is 0. The bars above show where the selected "
                         "queries look instead."] if says else [])


def test_heads_that_share_keys_are_labelled_by_their_group_and_a_window_greys_what_it_hides():
    at = app(variant="gqa", num_kv_groups="4", text="the cat sat on the mat")
    no_exception(at)
    grid = next(fig for fig in figures(at) if "all 12 heads" in fig["layout"]["title"]["text"])
    titles = [note["text"] for note in grid["layout"]["annotations"]]
    assert titles[:4] == ["▶ head 0<br>K/V 0", "head 1<br>K/V 0", "head 2<br>K/V 0", "head 3<br>K/V 1"]
    tiles = grid["layout"]["meta"]["tiles"]
    assert all(len({y0 for _, y0 in tiles[group:group + 3]}) == 1 for group in range(0, 12, 3))  # no group split
    assert focused(at)["layout"]["title"]["text"].startswith("head 0 · K/V group 0")

    at = app(variant="swa", sliding_window_size="2", num_heads="4", text="the cat sat on the mat")
    no_exception(at)
    z = cells_shown(focused(at))  # (6, 6) weights
    inside = np.array([[0 <= i - j < 2 for j in range(6)] for i in range(6)])
    assert np.isfinite(z[inside]).all() and (z[inside] > 0).all()
    assert np.isnan(z[~inside]).all()  # the future and the keys 2 or more behind are grey, not 0

    # the Steps page greys the same cells in the maps of masked scores and of weights (it greyed only the future in
    # the weights and dropped maps — and in the softmax pair and "weights used", drawn as these are — and nothing in
    # the difference map); the maps of scores before the mask grey nothing
    at.query_params["stage"] = "weights"  # the Steps page's first visit opens the link's stage: one run fewer
    at.switch_page("pages/steps.py").run()
    for stage, greyed in {"weights": ["before: masked (−∞ above the diagonal or ≥ 2 back)",
                                      "after: softmax — each row sums to 1"],
                          "dropped": ["before: weights", "after: dropout off — unchanged",
                                      "difference: dropped − weights"]}.items():
        if stage != "weights":
            at.segmented_control(key="steps_stage").set_value(stage).run()
        no_exception(at)
        assert at.segmented_control(key="steps_stage").value == stage
        maps = {fig["layout"]["title"]["text"].replace("<br>", " "): cells_shown(fig) for fig in figures(at)
                if any(trace.get("name") in ("cells", "masked cells") for trace in fig["data"])}
        assert [title for title, z in maps.items() if np.isnan(z).any()] == greyed, (stage, list(maps))
        for title in greyed:
            assert (np.isnan(maps[title]) == ~inside).all(), (stage, title)


@pytest.mark.parametrize(("query", "stage", "title"), [
    ({"causal": "false", "num_heads": "4"}, "masked", "masked = scaled (causal mask off)"),
    ({"variant": "simplified"}, "dropped", "dropped = weights (no dropout in this class)"),
    ({"variant": "simplified"}, "scaled", "scaled = scores (no ÷√dₖ in this class)"),
    ({"num_heads": "4"}, "dropped", "dropped = weights (eval mode)"),
    ({"num_heads": "4", "dropout": "0.0", "train": "true"}, "dropped", "dropped = weights (p = 0)"),
    ({"num_heads": "4", "dropout": "0.2", "train": "true"}, "dropped", "dropped = dropout(weights)"),
    ({"num_heads": "4"}, "masked", "masked (−∞ above the diagonal)"),
])
def test_a_stage_that_does_nothing_in_this_run_says_so_on_its_button_and_maps(query, stage, title):
    """A stage that does nothing in this run says so, as the Steps page and the diagram do: the masked map of a run
    without the mask reads "masked = scaled (causal mask off)", not "masked (−∞ above the diagonal)"; the dropped map
    of a class without dropout, in eval mode or at p = 0 reads "dropped = weights (…)" with the reason.  The stage's
    button, the grid and the focused map say what ran, as they say that the simplified class does not scale."""
    at = app(text="the cat sat on the mat", stage=stage, **query)
    no_exception(at)
    assert title in at.segmented_control(key="heads_stage").options
    assert at.segmented_control(key="heads_stage").value == stage
    heads = "all 4 heads" if query.get("num_heads") == "4" else "1 head"
    assert grid(at)["layout"]["title"]["text"].startswith(f"{title}, {heads}")
    assert focused(at)["layout"]["title"]["text"] == f"head 0: {title}"


def test_a_sliding_windows_mask_is_named_as_a_band_not_as_the_causal_triangle():
    """The Heads page called a window's mask "causal mask" and "−∞ above the diagonal", though its map is a band."""
    at = app(variant="swa", sliding_window_size="2", num_heads="4", text="the cat sat on the mat", stage="masked")
    no_exception(at)
    assert "sliding-window mask (W = 2)" in at.main.caption[0].value and "causal mask" not in at.main.caption[0].value
    band = "masked (−∞ above the diagonal or ≥ 2 back)"
    assert grid(at)["layout"]["title"]["text"].startswith(band + ", all 4 heads")
    assert focused(at)["layout"]["title"]["text"] == f"head 0: {band}"
    assert band in at.segmented_control(key="heads_stage").options
    at = app(num_heads="4", stage="masked")  # no window: the triangle
    assert "causal mask" in at.main.caption[0].value
    assert focused(at)["layout"]["title"]["text"] == "head 0: masked (−∞ above the diagonal)"


def test_the_heads_pages_window_caption_writes_the_token_count_as_the_other_pages_do():
    """A 1,024-token text: the caption over the window sliders writes "1,024 tokens", as the Shapes page, the
    Generate page and the Share notes write the count."""
    from helpers.texts import english_text

    at = open_app(text=english_text(), preset="custom", d_in="16", d_out="16", num_heads="2")
    no_exception(at)
    window = [c.value for c in at.main.caption if "the focused view shows" in c.value]
    assert window and window[0].startswith("1,024 tokens: the focused view shows"), window


def test_the_tokens_pages_metric_writes_its_counts_as_the_other_pages_do():
    """The Tokens page's metric gives the text's tokens out of the context length with thousands grouped ("6 / 1,024"),
    as every other count on the pages is written."""
    at = open_app("pages/tokens.py")
    no_exception(at)
    assert at.metric[0].label == "Tokens" and at.metric[0].value == "6 / 1,024"
