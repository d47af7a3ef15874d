"""AppTest: a checkpoint of the book's grouped-query or latent GPT (``ch04/04_gqa``, ``05_mla``) on every page that
runs a checkpoint — each query head's map, the grouping or the latent said beside the weights and in the page's
caption, the Shapes diagram's real K/V heads and latent, the cache Generate draws, the knock-out and ‖weight × value‖
tabs.  The checkpoints are attnviz's GPTModel with random weights, written here (no downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.apptest import decode, grid, no_exception, open_app, plotly_figures
from helpers.checkpoints import book_modern_cfg, random_modern_gpt
from streamlit.testing.v1 import AppTest

from attnviz import tokens, weights

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 180
TEXT = "one two three four five six"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("modern-checkpoints")
    for name, attention, settings in (("gqa", "grouped-query", {"num_kv_groups": 2}), ("mqa", "multi-query", {}),
                                      ("mla", "latent", {"latent_dim": 48})):
        model = random_modern_gpt(attention, seed=4, **settings)
        torch.save({"model_state_dict": model.state_dict(), "cfg": book_modern_cfg(model)}, folder / f"{name}.pth")
    return folder


pytestmark = pytest.mark.usefixtures("checkpoint_environment")  # the app lists ``checkpoints`` (tests/conftest.py)


def app(name: str, page: str | None = None) -> AppTest:
    return open_app(page, timeout=TIMEOUT, weights=name, text=TEXT)


def shown(at: AppTest) -> list[str]:
    """Every caption, info and markdown of the app (the sidebar's included), Markdown's escapes undone."""
    return [element.value.replace("\\", "") for kind in (at.caption, at.info, at.markdown) for element in kind]


GROUPING = {"gqa.pth": "grouped-query attention: 2 K/V heads, each shared by 2 query heads",
            "mqa.pth": "multi-query attention: 1 K/V head shared by all 4 query heads",
            "mla.pth": "latent attention: K and V from a 48-wide latent per token"}


@pytest.mark.parametrize("name", list(GROUPING))
def test_the_heads_page_draws_every_query_heads_map_and_says_what_the_attention_is(name):
    at = app(name)
    no_exception(at)
    assert any(GROUPING[name] in text for text in shown(at)), shown(at)  # the page's caption
    beside = " ".join(caption.value.replace("\\", "") for caption in at.sidebar.caption)
    assert ("48-wide latent" if name == "mla.pth" else "K/V head") in beside, beside  # under Weights
    grid = next(fig for fig in plotly_figures(at) if any(t.get("name", "").startswith("select head")
                                                          for t in fig["data"]))
    tiles = [trace["name"] for trace in grid["data"] if trace["type"] == "image"]
    assert tiles == ["head 0", "head 1", "head 2", "head 3"], tiles  # one map per query head
    titles = [note["text"].removeprefix("▶ ") for note in grid["layout"]["annotations"] if "head" in note["text"]]
    if name == "gqa.pth":
        assert titles == ["head 0<br>K/V 0", "head 1<br>K/V 0", "head 2<br>K/V 1", "head 3<br>K/V 1"], titles
    if name == "mqa.pth":
        assert all(title.endswith("K/V 0") for title in titles) and len(titles) == 4, titles


@pytest.mark.parametrize(("name", "holds"), [
    ("gqa.pth", "`cache_k` and `cache_v` of its 2 K/V heads (each shared by 2 query heads, repeated after the "
                "cache), shape `(b, kv_heads, n, head_dim)` = `(1, 2, n, 64)`"),
    ("mla.pth", "`cache_c_kv`, one latent per token, shape `(b, n, latent_dim)` = `(1, n, 48)`")])
def test_generate_says_and_counts_the_cache_each_layer_really_holds(name, holds, checkpoints):
    at = app(name, "pages/generate.py")
    no_exception(at)
    said = "\n".join(shown(at))
    assert f"**Each of the 2 layers caches** {holds}" in said.replace("\\", ""), said
    n = len(tokens.encode(TEXT))
    per_token = 2 * 2 * 64 * 4 if name == "gqa.pth" else 48 * 4  # G heads × hd × (K and V) × fp32, or the latent
    assert grid(at, "layer", "bytes").value["bytes"].sum() == 2 * n * per_token  # 2 layers


@pytest.mark.parametrize("name", ["gqa.pth", "mla.pth"])
def test_the_shapes_diagram_has_the_models_real_k_v_heads_or_latent(name):
    at = app(name, "pages/shapes.py")
    no_exception(at)
    model, dot = (chart.proto.spec for chart in at.get("graphviz_chart"))  # the whole path, then the attention
    assert ("GroupedQueryAttention\\nqueries" if name == "gqa.pth" else "MultiHeadLatentAttention\\nlatent") in model
    n = len(tokens.encode(TEXT))
    if name == "gqa.pth":
        assert f"(1, 2, {n}, 64)" in dot and "kv_repeat" in dot and "2 → 4 heads" in dot
        assert "nn.Linear\\n256 → 128" in dot  # W_key, W_value: d_in -> g·hd
    else:
        assert f"(1, {n}, 48)" in dot and "W_DKV" in dot and "W_UK" in dot


TAB_DRAWS = {"Knock out this head": "without L0H1", "‖weight × value‖": "head 1: ‖weight × value‖",
             "Rollout, logit lens": "rollout through layers 0…0"}  # what each tab draws (a metric, a map's title)


@pytest.mark.parametrize("name", ["gqa.pth", "mla.pth"])
@pytest.mark.parametrize("tab", list(TAB_DRAWS))
def test_the_heads_pages_knock_out_and_value_tabs_draw_for_a_query_head(name, tab):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update(weights=name, text=TEXT, head="1")
    at.run()
    at.session_state["heads_what"] = True
    at.session_state["heads_what_tab"] = tab
    at.run()
    no_exception(at)
    assert not at.error, [error.value for error in at.error]
    drawn = [metric.label for metric in at.metric] + [fig["layout"]["title"]["text"] for fig in plotly_figures(at)]
    assert any(TAB_DRAWS[tab] in text for text in drawn), drawn


@pytest.mark.parametrize("name", ["gqa.pth", "mla.pth"])
def test_the_steps_page_shows_the_stage_the_attention_adds_with_its_source(name):
    at = app(name, "pages/steps.py")
    no_exception(at)
    stage, code = ("kv_repeat", "repeat_interleave") if name == "gqa.pth" else ("latent", "self.W_DKV(x)")
    at.segmented_control(key="steps_stage").set_value(stage).run()
    no_exception(at)
    assert any(code in block.value for block in at.code), [block.value for block in at.code]


@pytest.mark.parametrize("name", ["gqa.pth", "mla.pth"])
def test_the_induction_lab_runs_such_a_checkpoint_with_its_knock_outs(name):
    at = app(name, "pages/induction.py")
    no_exception(at)
    assert not at.error, [error.value for error in at.error]
    grid = next(fig for fig in plotly_figures(at) if fig["layout"]["title"]["text"].startswith("knock out one head"))
    assert decode(grid["data"][0]["z"]).shape == (2, 4)  # every head of every layer, alone


def test_the_sidebars_variant_shows_the_checkpoints_attention_and_the_books_comes_back():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update(variant="swa", text=TEXT)
    at.run()
    for name, variant in (("gqa.pth", "gqa"), ("mqa.pth", "mqa"), ("mla.pth", "mla")):
        at.sidebar.selectbox(key="weights").set_value(name).run()
        no_exception(at)
        shown_variant = at.sidebar.selectbox(key="variant")
        assert shown_variant.value == variant and shown_variant.disabled, name
    at.sidebar.selectbox(key="weights").set_value(weights.BOOK).run()
    no_exception(at)
    assert at.sidebar.selectbox(key="variant").value == "swa" and at.query_params["variant"] == "swa"
