"""AppTest of the book's 3.3 and 3.4 classes shown as the book shows them: with the sidebar's Causal mask on, the
Heads, Steps and Shapes pages say the mask is attnviz's addition (the listings have none) and mark its source line
so; the captions name what is random (the simplified class has no weights); and the book size runs each class with
its book seed (SelfAttention_v2: 789), so the maps are the book's printed ones, in the sidebar and through a link."""

from __future__ import annotations

from urllib.parse import parse_qsl

import numpy as np
import pytest
from helpers.apptest import no_exception, open_app, share_link
from helpers.apptest import plotly_figures as figures
from helpers.book import BOOK_V2_WEIGHTS
from helpers.maps import cells_shown

ADDED = "The book's 3.3 listing has no causal mask: attnviz adds it because Causal mask is on"


def page(script: str, **query):
    at = open_app(**query)
    at.switch_page(script).run()
    no_exception(at)
    return at


def said(at) -> str:
    """What the main area says in words: captions, notes, Markdown and code."""
    parts = [*at.main.caption, *at.main.info, *at.main.markdown, *at.main.code]
    return " ".join(part.value for part in parts).replace("\\", "")


def focused_map(at) -> np.ndarray:
    fig = next(fig for fig in figures(at) if fig["layout"]["title"]["text"].startswith("head "))
    return cells_shown(fig)


@pytest.mark.parametrize("script", ["pages/heads.py", "pages/steps.py", "pages/shapes.py"])
def test_the_mask_on_the_simplified_class_is_called_attnvizs_addition(script):
    words = said(page(script, variant="simplified"))
    assert ADDED in words and "turn it off to see the listing as printed" in words
    assert "causal=True" not in words  # the run's note in Python's words is not repeated on the page
    unmasked = said(page(script, variant="simplified", causal="false"))
    assert "has no causal mask" not in unmasked


def test_the_mask_on_self_attention_v2_is_called_attnvizs_addition_and_causal_attention_has_no_note():
    assert "The book's 3.4.2 listing has no causal mask: attnviz adds it" in said(
        page("pages/heads.py", variant="self_attention_v2"))
    assert "has no causal mask" not in said(page("pages/heads.py", variant="causal"))


def test_the_steps_page_labels_the_masked_line_as_attnvizs_addition():
    at = page("pages/steps.py", variant="simplified")
    (step_code,) = [c.value for c in at.main.code if "masked_fill" in c.value and "◀" not in c.value]
    assert "attnviz's addition" in step_code
    source = next(c.value for c in at.main.code if "◀ this stage" in c.value)
    marked = next(line for line in source.splitlines() if "◀" in line)
    assert "masked_fill" in marked and "attnviz's addition" in marked
    assert any("It is attnviz's addition, run because Causal mask is on" in c.value for c in at.main.caption)


def test_the_simplified_class_is_said_to_have_no_weights_not_random_ones():
    for script in ("pages/heads.py", "pages/steps.py", "pages/shapes.py"):
        words = said(page(script, variant="simplified"))
        assert "no weights" in words and "seeded random embeddings" in words
        assert "random weights" not in words
    book = said(page("pages/heads.py", variant="simplified", preset="book"))
    assert "the book's inputs" in book and "random weights" not in book


@pytest.mark.parametrize("preset", ["book", "custom"])
def test_the_simplified_class_caption_says_no_weights_once(preset):
    """The class's name says it already ("Simplified self-attention (3.3, no weights)"): the caption goes on to what
    stands in for the queries, keys and values, not "no weights" a second time."""
    at = page("pages/heads.py", variant="simplified", preset=preset)
    (caption,) = [c.value for c in at.main.caption if c.value.startswith("Simplified self-attention")]
    assert caption.count("no weights") == 1, caption
    inputs = "the book's inputs" if preset == "book" else "seeded random embeddings"
    assert f"queries = keys = values = {inputs}" in caption, caption


def test_the_why_panel_of_the_simplified_class_says_once_what_stands_in_for_q_and_k():
    """A clicked cell of the class without W_query or W_key: the products chart says what stands in for q and k; the
    panel's text does not say it again."""
    at = page("pages/heads.py", variant="simplified", cell="2,0")
    products = [fig for fig in figures(at) if "Σ q[d]·k[d]" in fig["layout"]["title"]["text"]]
    assert len(products) == 1
    in_chart = products[0]["layout"]["title"]["subtitle"]["text"].replace("<br>", " ")
    assert "This run has no W_query or W_key" in in_chart
    assert "no W_query or W_key" not in said(at)


def test_a_class_with_weights_still_says_its_weights_are_seeded_and_random():
    assert "seeded random weights" in said(page("pages/steps.py", variant="self_attention_v2"))


# ============================== the book size runs each class with its book seed ==============================


@pytest.mark.parametrize("order", [("variant", "preset"), ("preset", "variant")])
def test_the_book_size_on_self_attention_v2_draws_the_books_printed_weights(order):
    at = open_app()
    picks = {"variant": "self_attention_v2", "preset": "book"}
    for key in order:
        at.sidebar.selectbox(key=key).set_value(picks[key]).run()
    no_exception(at)
    assert int(at.sidebar.text_input(key="seed_box").value) == 789
    assert np.allclose(focused_map(at), BOOK_V2_WEIGHTS, atol=1e-4)


def test_a_seed_set_after_the_book_size_stays_and_every_link_round_trips():
    at = open_app()
    at.sidebar.selectbox(key="variant").set_value("self_attention_v2").run()
    at.sidebar.selectbox(key="preset").set_value("book").run()
    url = {key: value[-1] if isinstance(value, list) else value for key, value in at.query_params.items()}
    share = share_link(at)
    for query in (url, dict(parse_qsl(share.split("?", 1)[1]))):
        opened = open_app(**query)
        no_exception(opened)
        assert int(opened.sidebar.text_input(key="seed_box").value) == 789
        assert np.allclose(focused_map(opened), BOOK_V2_WEIGHTS, atol=1e-4)
    at.sidebar.text_input(key="seed_box").input(str(123)).run()
    no_exception(at)
    assert int(at.sidebar.text_input(key="seed_box").value) == 123
    assert not np.allclose(focused_map(at), BOOK_V2_WEIGHTS, atol=1e-4)
    url = {key: value[-1] if isinstance(value, list) else value for key, value in at.query_params.items()}
    assert url["seed"] == "123"  # the default, but not what the book size implies for v2
    reopened = open_app(**url)
    assert int(reopened.sidebar.text_input(key="seed_box").value) == 123


def plot_titles(at) -> list[str]:
    """The charts' titles, their lines (``<br>``) joined by spaces."""
    return [fig["layout"]["title"]["text"].replace("<br>", " ") for fig in figures(at)
            if "text" in fig["layout"].get("title", {})]


def test_the_simplified_classs_scale_stage_says_it_does_not_divide():
    """3.3 has no ÷√dₖ: at the Steps page's scale stage the stage, the maps, the caption and the softmax panels say
    scaled = scores (and what the division would have given), and the Heads page's Show names no division."""
    at = open_app(variant="simplified", preset="book", stage="scaled")
    no_exception(at)
    show = at.segmented_control(key="heads_stage")
    assert show.value == "scaled" and show.format_func("scaled") == "scaled = scores (no ÷√dₖ in this class)"
    at.switch_page("pages/steps.py").run()
    no_exception(at)
    stage = at.segmented_control(key="steps_stage")
    assert stage.value == "scaled" and stage.format_func("scaled") == "2 · no ÷√dₖ"
    words, titles = said(at), plot_titles(at)
    assert "does not scale: scaled = scores" in words
    assert "shrinks" not in words and not any(title.startswith("after: scores ÷") for title in titles)
    assert "after: scaled = scores (no division)" in titles
    assert "softmax(scores) — what this class runs: no ÷√dₖ" in titles
    assert "softmax(scores ÷ √3) — had it divided" in titles
    with_weights = open_app(variant="causal", preset="book", stage="scaled")  # a class that divides says so
    with_weights.switch_page("pages/steps.py").run()
    assert "after: scores ÷ √2" in plot_titles(with_weights) and "shrinks" in said(with_weights)


@pytest.mark.parametrize("causal, before", [
    ("false", "before: masked = scaled (causal mask off)"),
    ("true", "before: masked (−∞ above the diagonal)"),
])
def test_the_steps_pages_before_panels_title_their_stage_as_the_heads_page_does(causal, before):
    """The Steps page titles the softmax stage's left map as the Heads page does (views.steps.stage_title): with the
    mask off it says nothing masked the scores, never "before: masked scores"."""
    at = page("pages/steps.py", stage="weights", causal=causal)
    titles = plot_titles(at)
    assert any(before in title for title in titles), titles
    assert not any("before: masked scores" in title for title in titles)


ADDED_LINES = "`record(recorder, …)`, `check_sizes(…)` and `check_context(…)` lines added"
SIZE_CHECKED = "The size checks make a size the class cannot take a ValueError in words"
LISTING = f"The book's `MultiHeadAttention` (Section 3.6.2) with {ADDED_LINES}"
BOOK_ORDER = ("It scales (2 · ÷√dₖ) before it masks (3 · causal mask); the book masks, then scales inside "
              "`torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)` — −∞ ÷ √dₖ is still −∞, so the weights are "
              "the same.")


def test_the_steps_page_says_how_its_class_differs_from_the_books_listing():
    """A student reading along with Section 3.6.2 sees the scaling before the mask, the record(…) lines and the size
    checks the class's source holds: the page says so beside the stages and in the source expander, and why the
    weights are the book's all the same."""
    at = page("pages/steps.py", stage="masked")
    outside = [c.value for c in at.main.caption if LISTING in c.value]
    assert outside and BOOK_ORDER in outside[0] and "`causal`, `rope_base` arguments" in outside[0]
    (expander,) = [e for e in at.main.expander if e.label.startswith("Source of MultiHeadAttention")]
    assert any(LISTING in c.value and BOOK_ORDER in c.value for c in expander.caption)
    unmasked = " ".join(c.value for c in page("pages/steps.py", causal="false").main.caption)
    assert "It scales as a stage of its own (2 · ÷√dₖ)" in unmasked and "before it masks" not in unmasked
    window = " ".join(c.value for c in page("pages/steps.py", variant="swa", sliding_window_size="3").main.caption)
    assert ("The book's `MultiHeadAttentionWithSWA` (the bonus material's ch04/06_swa) — attnviz runs its steps in "
            "a helper function shown below the class: `scaled_dot_product` (the steps GQA, MQA, MLA and "
            "sliding-window attention share) — with" in window and "before it masks (3 · window mask)" in window)


@pytest.mark.parametrize("variant", ["self_attention_v1", "self_attention_v2", "causal"])
def test_the_steps_page_says_plainly_where_a_single_head_class_runs_its_steps_and_shows_its_mask(variant):
    """The note of a single-head class says that attnviz runs its steps in helper functions, names each with what it
    does (`_single_head`, `_mask_bool`) and the lines attnviz added to the class and to them, and the source expander
    shows both bodies."""
    at = page("pages/steps.py", variant=variant, stage="masked", causal="true")
    text = said(at)
    assert "its steps in `_single_head` below it" not in text
    assert ("attnviz runs its steps in helper functions shown below the class: `_single_head` (the steps v1, v2 and "
            "`CausalAttention` share) and `_mask_bool` (the causal mask:") in text
    (expander,) = [e for e in at.main.expander if e.label.startswith("Source of ")]
    code = " ".join(c.value for c in expander.code)
    assert "def _single_head(" in code and "def _mask_bool(" in code
    assert "return mask.bool()[:num_tokens, :num_tokens]" in code  # the book's slice of its buffer
    # the size checks the class and its helpers hold are named, as the record lines are
    assert "check_sizes(" in code and "check_context(" in code and ADDED_LINES in text and SIZE_CHECKED in text
