"""AppTest: the bonus variants (GQA, MQA, MLA, SWA) and rotary positions on the Heads, Steps, Shapes and Compare
pages, their sidebar settings, and hostile URL values (a notice, never an exception, the text kept)."""

from __future__ import annotations

import re

import pytest
from helpers.apptest import link_notices, main_warnings, no_exception, open_app, plotly_figures, share_link
from streamlit.testing.v1 import AppTest

from attnviz import weights

TIMEOUT = 180
TEXT = "Your journey starts with one step"
RUNS = {  # URL parameters of each run
    "gqa": {"variant": "gqa", "num_kv_groups": "4"},
    "mqa": {"variant": "mqa"},
    "mla": {"variant": "mla", "latent_dim": "48"},
    "swa": {"variant": "swa", "sliding_window_size": "2"},
    "gqa_rotary": {"variant": "gqa", "num_kv_groups": "3", "positions": "rotary", "rope_base": "500000"},
    "mha_rotary": {"variant": "mha", "positions": "rotary"},
}


def app(page: str | None = None, **query) -> AppTest:
    return open_app(page, timeout=TIMEOUT, **{"text": TEXT, **query})


def test_the_tokens_page_with_rotary_positions_draws_the_input_once_and_says_why_and_learned_positions_all_three():
    """Rotary positions add no vector to the input: the page draws one map, "input = token embedding", with no
    "positional embedding" chart and no "Both use the same colour scale … compared cell by cell", and says that the
    token embedding and the input are the same matrix and where rotary turns q and k.  Learned positions draw all
    three maps on one colour scale."""

    at = app("pages/tokens.py", **RUNS["mha_rotary"])
    no_exception(at)
    titles = [fig["layout"]["title"]["text"] for fig in plotly_figures(at)]
    assert not any(title.startswith("positional embedding") for title in titles), titles
    assert at.subheader[0].value == "Embeddings: token = input (rotary positions)"
    assert any("rotates its queries and keys by their positions" in c.value for c in at.main.caption)
    titles = [title.split(" — ")[0] for title in titles]  # " — downsampled …"
    assert titles == ["input = token embedding (6, 768)"], titles
    captions = " ".join(c.value for c in at.main.caption)
    assert "One map shows both: the token embedding and the input are the same matrix" in captions, captions
    assert "Both use the same colour scale" not in captions and "compared cell by cell" not in captions
    assert "*rotate q, k*" in captions  # the Steps page's stage, as before
    learned = app("pages/tokens.py")
    no_exception(learned)
    titles = [fig["layout"]["title"]["text"].split(" — ")[0] for fig in plotly_figures(learned)]
    assert titles == ["token embedding (6, 768)", "positional embedding (6, 768)",
                      "input = token + position (6, 768)"], titles
    assert any(c.value.startswith("All three use the same colour scale (±") for c in learned.main.caption)


@pytest.mark.parametrize("run", list(RUNS))
def test_heads_page_runs(run):
    at = app(**RUNS[run])
    no_exception(at)
    assert at.title[0].value == "Attention heads"
    assert at.sidebar.text_area(key="text").value == TEXT


@pytest.mark.parametrize("run", list(RUNS))
def test_shapes_page_draws_the_variants_own_nodes(run):
    at = app("pages/shapes.py", **RUNS[run])
    no_exception(at)
    dot = at.get("graphviz_chart")[0].proto.spec
    if run.startswith("gqa"):
        groups = int(RUNS[run]["num_kv_groups"])
        assert f"(1, {groups}, 6, 64)" in dot and "kv_repeat" in dot and f"{groups} → 12 heads" in dot
        assert f"nn.Linear\\n768 → {groups * 64}" in dot  # W_key, W_value: d_in -> g·hd
    if run == "mqa":
        assert "(1, 1, 6, 64)" in dot and "1 → 12 heads" in dot
    if run == "mla":
        assert "latent" in dot and "(1, 6, 48)" in dot and "W_DKV" in dot and "W_UK" in dot
    if run == "swa":
        assert "sliding window W = 2" in dot
    if "rotary" in run:
        assert "rotated_queries" in dot and "rotated_keys" in dot and "RoPE" in dot
    rows = at.dataframe[0].value
    assert "(1, 12, 6, 6)" in set(rows["shape"])
    # the table lists every tensor the diagram draws, with its shape (GQA's and MQA's kv_view included)
    assert set(zip(rows["stage"], rows["shape"])) == diagram_tensors(dot)
    if run.startswith("gqa") or run == "mqa":
        groups = int(RUNS[run].get("num_kv_groups", 1))
        assert ("kv_view", f"(1, 6, {groups}, 64)") in set(zip(rows["stage"], rows["shape"]))


def diagram_tensors(dot: str) -> set[tuple[str, str]]:
    """(name, shape) of every tensor node of a shape diagram's DOT: its label's first and third lines (the weights
    are parallelograms, the head cluster a graph label)."""
    tensors = set()
    for line in dot.splitlines():
        node = re.match(r'\s*"[^"]+" \[label="((?:[^"\\]|\\.)*)"', line)
        if node and "parallelogram" not in line:
            parts = node.group(1).split("\\n")
            tensors.add((parts[0], parts[2]))
    return tensors


@pytest.mark.parametrize("run", list(RUNS))
def test_steps_page_shows_the_added_stages_with_their_source_lines(run):
    at = app("pages/steps.py", **RUNS[run])
    no_exception(at)
    stage_control = at.segmented_control(key="steps_stage")
    options = list(stage_control.options)
    expected = {"gqa": ("kv_repeat", "repeat_interleave"), "mqa": ("kv_repeat", "repeat_interleave"),
                "mla": ("latent", "self.W_DKV(x)"), "gqa_rotary": ("rotated_queries", "apply_rope(queries"),
                "mha_rotary": ("rotated_queries", "apply_rope(queries")}
    if run in expected:
        stage, code = expected[run]
        assert any(re.match(r"0[a-z]? · ", str(option)) for option in options), options  # an added stage
        at.selectbox(key="steps_focus").set_value(3).run()
        stage_control.set_value(stage).run()
        no_exception(at)
        assert any(code in block.value for block in at.code), [b.value for b in at.code]
        assert at.dataframe  # the latent, the rotation's before/after, the head → group table
        focus = at.selectbox(key="steps_focus")
        # the latent (b, n, latent_dim) has no head to focus: the control is disabled and says why; the others have
        assert focus.disabled == (stage == "latent") and focus.value == 3
        assert ("has no head dimension" in (focus.help or "")) == (stage == "latent"), focus.help
        assert at.query_params["head"] == "3"  # kept in the URL for the next stage
    if run == "swa":
        stage_control.set_value("masked").run()
        no_exception(at)
        assert any("(diff < 0) | (diff >= window)" in block.value for block in at.code)
        assert any("0 ≤ i − j < W" in md.value for md in at.markdown)
    for stage in ("scores", "weights", "context"):
        at.segmented_control(key="steps_stage").set_value(stage).run()
        no_exception(at)
        assert not at.selectbox(key="steps_focus").disabled
    if run in expected:
        assert at.selectbox(key="steps_focus").value == 3  # the head picked before the added stage


@pytest.mark.parametrize("run", ["gqa", "mla", "swa", "gqa_rotary"])
def test_compare_page_shows_green_equivalence_badges(run):
    at = app("pages/compare.py", **RUNS[run])
    no_exception(at)
    badges = [m.value for m in at.markdown if re.search(r":\w+-badge\[", m.value)]
    assert len(badges) == 6 and all(badge.startswith(":green-badge[") for badge in badges), badges
    text = " ".join(m.value for m in at.markdown)
    assert "GQA with num_kv_groups = num_heads" in text and "SWA with W = n" in text and "Rotary" in text


def test_sidebar_shows_only_the_settings_that_apply():
    at = app(variant="mha")
    keys = {widget.key for widget in at.sidebar.selectbox} | {widget.key for widget in at.sidebar.text_input}
    assert "num_kv_groups" not in keys and "latent_dim_box" not in keys and "sliding_window_size_box" not in keys
    assert at.sidebar.radio(key="positions").value == "learned"
    at.sidebar.selectbox(key="variant").set_value("gqa").run()
    no_exception(at)
    assert at.sidebar.selectbox(key="num_kv_groups").options == ["1", "2", "3", "4", "6", "12"]
    at.sidebar.selectbox(key="variant").set_value("mla").run()
    no_exception(at)
    assert int(at.sidebar.text_input(key="latent_dim_box").value) == 96
    at.sidebar.text_input(key="latent_dim_box").input("2000").run()  # wider than d_out: kept, with the range it has
    assert at.sidebar.text_input(key="latent_dim_box").value == "2000" and at.session_state["latent_dim"] == 96
    assert [w.value.replace("\\", "") for w in at.sidebar.warning] == [
        "Latent width (latent_dim) 2,000 is outside 1 … 768: using 96."]
    at.sidebar.text_input(key="d_out_box").input("2048").run()  # the range now holds the kept text: it is the setting
    assert at.sidebar.text_input(key="latent_dim_box").value == "2000" and at.session_state["latent_dim"] == 2000
    assert not at.sidebar.warning, [w.value for w in at.sidebar.warning]
    assert not [w for w in at.sidebar.radio if w.key == "positions"]  # the book's MLA has no rotary positions
    at.sidebar.selectbox(key="variant").set_value("swa").run()
    assert at.sidebar.toggle(key="causal").disabled
    at.sidebar.text_input(key="sliding_window_size_box").input("").run()
    assert [w.value.replace("\\", "") for w in at.sidebar.warning] == [
        "Window W (sliding_window_size) is empty (1 … 1,024): using 4."]
    at.sidebar.radio(key="positions").set_value("rotary").run()
    no_exception(at)
    assert at.sidebar.selectbox(key="rope_base").value == 10_000


def test_fewer_heads_replace_groups_that_no_longer_divide_them_with_a_notice():
    at = app(variant="gqa", num_kv_groups="6")
    at.sidebar.selectbox(key="num_heads").set_value(8).run()
    no_exception(at)
    assert at.sidebar.selectbox(key="num_kv_groups").value == 4
    assert any("does not divide 8 heads" in c.value for c in at.sidebar.caption)


@pytest.mark.parametrize("query", [{"variant": "mha"}, {"weights": weights.BUNDLED_NAME}])
def test_groups_a_run_does_not_use_are_replaced_without_a_notice(query):
    """MHA and a model's layer have no K/V groups: fewer heads than the kept groups (the bundled model has 2, the
    default is 4) replace them silently, and the notice comes back with a variant that has them."""
    at = app(**query)
    if "variant" in query:
        at.sidebar.selectbox(key="num_heads").set_value(3).run()
    no_exception(at)
    assert at.session_state["num_kv_groups"] in (1, 3) or "weights" in query
    assert not any("does not divide" in c.value for c in at.sidebar.caption), [c.value for c in at.sidebar.caption]
    if "variant" in query:
        at.session_state["num_kv_groups"] = 4  # a kept value from another page's settings
        at.sidebar.selectbox(key="variant").set_value("gqa").run()
        no_exception(at)
        assert any("does not divide 3 heads" in c.value for c in at.sidebar.caption)


@pytest.mark.parametrize("query, name", [
    ({"variant": "gqa", "num_kv_groups": "5"}, "num_kv_groups"),
    ({"variant": "gqa", "num_kv_groups": "-1"}, "num_kv_groups"),
    ({"variant": "swa", "sliding_window_size": "0"}, "sliding_window_size"),
    ({"variant": "mla", "latent_dim": "100000"}, "latent_dim"),
    ({"variant": "mla", "latent_dim": "1000"}, "latent_dim"),
    ({"variant": "mha", "positions": "spiral"}, "positions"),
    ({"variant": "mha", "positions": "rotary", "rope_base": "nan"}, "rope_base"),
    ({"variant": "mha", "positions": "rotary", "preset": "book"}, "Rotary"),
])
@pytest.mark.parametrize("page", [None, "pages/steps.py"])
def test_hostile_url_values_give_a_notice_and_keep_the_text(query, name, page):
    at = app(page, **query)
    no_exception(at)
    assert name in link_notices(at)
    assert at.sidebar.text_area(key="text").value == TEXT
    assert at.title


@pytest.mark.parametrize(("query", "refused"), [
    ({**RUNS["gqa_rotary"], "pair": "32"}, "pair='32': it is out of range (this run's 32 pairs of dimensions: 0 … 31)"),
    ({"variant": "mqa", "positions": "rotary", "pair": "two"},
     "pair='two': it is not a whole number (this run's 32 pairs of dimensions: 0 … 31)"),
], ids=["gqa", "mqa"])
def test_steps_page_numbers_each_stage_once_and_draws_the_rotation(query, refused):
    at = app("pages/steps.py", **query)  # a link whose pair this run has not: a notice, pair 0, the URL without it
    no_exception(at)
    assert f"Ignored URL parameter {refused}; showing pair 0." in main_warnings(at)
    assert "pair" not in at.query_params and "pair=" not in share_link(at)
    stage_control = at.segmented_control(key="steps_stage")
    numbers = [str(option).split(" · ")[0] for option in stage_control.options]
    assert len(set(numbers)) == len(numbers) and numbers == sorted(numbers), list(stage_control.options)
    stage_control.set_value("rotated_queries").run()
    no_exception(at)
    flow = at.get("html")[0].proto.body  # the compact shape diagram beside the step
    for stage in ("rotated_queries", "rotated_keys", "kv_groups", "kv_repeat"):
        assert f'data-stage="{stage}"' in flow, stage
    # one pair of q and k as 2-D vectors turned by their positions, the angle of every position and pair, and the
    # pair's numbers side by side before and after; the slider picks the pair
    for pair in (0, 5):
        if pair:
            at.slider(key="steps_pair").set_value(pair).run()
            no_exception(at)
        titles = [fig["layout"]["title"]["text"].replace("<br>", " ") for fig in plotly_figures(at)]
        assert titles[0].startswith(f"query (head 0), pair {pair}: dims {pair} and {pair + 32}"), titles
        assert titles[1].startswith(f"key (head 0 of K/V), pair {pair}: dims {pair} and {pair + 32}"), titles
        assert titles[2].startswith("angle p·θ_d each position turns each pair"), titles
        columns = [list(frame.value.columns) for frame in at.dataframe]
        assert columns == [["token", "p·θ_d", f"{side}[{pair}]", f"{side}[{pair + 32}]", f"{side}′[{pair}]",
                            f"{side}′[{pair + 32}]"] for side in ("q", "k")], columns
    # the pair picked is in the URL and the Share link (the link's refused one is moot), and stays on the other
    # stages, for the rotation's: back on it, the page draws that pair
    assert at.query_params.get("pair") == "5" and "pair=5" in share_link(at) and "pair=" not in main_warnings(at)
    at.segmented_control(key="steps_stage").set_value("masked").run()
    assert at.query_params.get("pair") == "5" and "pair=5" in share_link(at)
    at.segmented_control(key="steps_stage").set_value("rotated_queries").run()
    assert at.slider(key="steps_pair").value == 5
