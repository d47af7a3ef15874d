"""AppTest of the Generate page: the bundled model and a checkpoint from ATTNVIZ_CHECKPOINTS generate step by step
(the new token, its top 5, the rows over the cached keys, the cache's shapes and bytes, the badge), checked against
attnviz.models.generate and a plain greedy loop computed here; without a model the page says how to pick one; hostile
input gives a message, never an exception, and keeps the text."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.apptest import (
    decode,
    figure,
    grid,
    grid_columns,
    no_exception,
    open_app,
    recorded_spinners,
    share_link,
)
from helpers.checkpoints import random_gpt2, use_checkpoints, write_checkpoints
from streamlit.testing.v1 import AppTest

from attnviz import AttentionConfig, kv_cache_bytes, models, tokens, variants, weights
from attnviz.ui import generate
from attnviz.ui.generate import NO_MODEL
from attnviz.words import markdown_escape

pytest.importorskip("transformers")

TIMEOUT = 180
NAME = "tiny-gpt2"
TEXT = "The cat sat on the mat. The cat"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    model = random_gpt2(11, n_layer=3, n_head=4, n_embd=64, n_positions=48)
    return write_checkpoints(tmp_path_factory.mktemp("generate-checkpoints"), NAME, model)


@pytest.fixture(autouse=True)
def environment(checkpoints, monkeypatch):
    use_checkpoints(monkeypatch, checkpoints)


def page(**query) -> AppTest:
    at = open_app("pages/generate.py", timeout=TIMEOUT, **query)
    no_exception(at)
    return at


def step(at: AppTest) -> AppTest:
    at.button(key="generate_next").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def cache_table(at: AppTest):
    """The table of every layer's cache: a data grid (sort, search, CSV) with the layer and its bytes as numbers."""
    return grid(at, "layer", "bytes").value


def top_5(at: AppTest):
    """The top 5 the step's token was chosen from, as the page's data grid holds it: rank, token, probability (%)."""
    return grid(at, "rank", "token", "probability").value


def greedy(model, ids: list[int], new: int) -> list[int]:
    ids = list(ids)
    with torch.no_grad():
        for _ in range(new):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids


@pytest.mark.parametrize("choice", ["bundled", "checkpoint"])
def test_steps_show_the_new_token_its_rows_and_the_growing_cache(choice, checkpoints):
    name = weights.BUNDLED_NAME if choice == "bundled" else NAME
    path = str(models.BUNDLED) if choice == "bundled" else str(checkpoints / NAME)
    model = models.load_checkpoint(path)
    n_layers, n_heads = len(model.trf_blocks), model.trf_blocks[0].att.num_heads
    head_dim = model.trf_blocks[0].att.head_dim
    prompt = tokens.encode(TEXT)
    expected = greedy(model, prompt, 3)

    at = page(weights=name, text=TEXT)
    assert at.title[0].value.startswith("Generate")
    assert at.metric[0].value == "—"  # the prefill: no new token yet
    held = lambda n: n_layers * 2 * n * n_heads * head_dim * 4  # noqa: E731
    assert cache_table(at)["cache_k"].tolist() == [f"(1, {len(prompt)}, {n_heads}, {head_dim})"] * n_layers
    assert cache_table(at)["bytes"].sum() == held(len(prompt))
    assert at.success[0].value.startswith("Equals the uncached forward")

    for k in (1, 2):
        step(at)
        new_token = expected[len(prompt) + k - 1]
        assert at.metric[0].value == tokens.pieces([new_token])[0].piece
        continued = next(m.value for m in at.markdown if ":orange-background[" in m.value)
        new_text = markdown_escape(tokens.decode(expected[len(prompt): len(prompt) + k]))
        assert continued.endswith(f":orange-background[{new_text}]") and "**" not in continued  # no literal **
        assert any(m.value == "**The new token, chosen from the top 5**" for m in at.markdown)
        top = top_5(at)  # a data grid: sort, search and CSV are the grid's
        assert list(top.columns) == ["rank", "token", "probability"] and top["rank"].tolist() == [1, 2, 3, 4, 5]
        with torch.no_grad():  # the model's own top 5 where it chose this token, in percent
            probs, ids = model(torch.tensor([expected[: len(prompt) + k - 1]]))[0, -1].softmax(-1).topk(5)
        assert top["token"].tolist() == [token.piece for token in tokens.pieces(ids.tolist())]
        assert top["token"][0] == tokens.pieces([new_token])[0].piece  # the chosen one is the most likely
        np.testing.assert_allclose(top["probability"], 100 * probs.numpy(), rtol=1e-4)
        if k == 1:  # what each column is: the rank and the probability numbers, the token text
            columns = grid_columns(at, "rank", "token")
            assert [columns[name]["type_config"]["type"] for name in top.columns] == ["number", "text", "number"]
            assert columns["probability"]["type_config"]["format"].endswith("%%")  # a percent, as the values are
            shapes = grid_columns(at, "layer", "bytes")
            assert shapes["layer"]["type_config"]["type"] == shapes["bytes"]["type_config"]["type"] == "number"
            assert shapes["cache_k"]["type_config"]["type"] == shapes["cache_v"]["type_config"]["type"] == "text"
        n = len(prompt) + k
        assert cache_table(at)["cache_v"].tolist() == [f"(1, {n}, {n_heads}, {head_dim})"] * n_layers
        assert cache_table(at)["bytes"].sum() == held(n)
        assert at.success[0].value.startswith("Equals the uncached forward")
        # the map's rows: each new token's query row over the cached keys, from a full forward computed here
        rows = decode(figure(at, "query row over the cached keys")["data"][0]["z"])
        assert rows.shape == (k, n)
        with torch.no_grad():
            from attnviz.models import attention_maps

            full = attention_maps(model, expected[:n])  # (L, h, n, n)
        np.testing.assert_allclose(rows[k - 1], full[0, 0, n - 1], atol=1e-5)
        if k == 2:
            assert np.isnan(rows[0, n - 1])  # a key the first new row could not see yet: drawn empty, not 0
    assert at.text_area[0].value == TEXT


def test_the_bundled_models_mla_line_draws_the_books_default_latent_and_says_so():
    """The bundled model (d_out 128, 2 heads) has no latent of its own: its MLA line is the book's default
    max(16, 128 // 8) = 16, as a run's MLA at those sizes, and the caption under the chart says which latent and why;
    its 2 heads cannot be grouped, so no GQA line repeats MQA's, and a caption says why.  A real model's line is the
    book's default at its attention's d_out (heads × head_dim: Gemma 3 270M's 4 × 256, not its emb_dim of 640), its
    GQA line has groups (2 K/V heads of Gemma's 4, not its own 1, which is MQA) and its own attention is the line
    named as the table names it; DeepSeek-V3's latent is its own."""
    at = page(weights=weights.BUNDLED_NAME, text=TEXT)
    lines = cost_lines(at, "KV cache of this model")
    assert lines["MLA"]["label"] == "MLA (latent 16)"
    assert list(lines) == ["MHA", "MQA", "MLA", "SWA"]  # no GQA: 1 K/V head is MQA, 2 are MHA
    assert any("The MLA line caches a latent of 16 numbers per token and layer: the book's default "
               "max(16, d_out // 8) at d_out = 2 heads × 64 = 128" in caption.value for caption in at.caption)
    assert any(caption.value.startswith("No GQA line: grouped-query attention shares one K/V head") and
               caption.value.endswith("2 heads have no such count.") for caption in at.caption)
    at.selectbox(key="generate_sizes").set_value("Gemma 3 270M").run()
    gemma = cost_lines(at, "KV cache of Gemma 3 270M")
    table = grid(at, "model").value.set_index("model")
    assert gemma["GQA"]["label"].startswith("GQA (2 K/V heads × 256)")
    assert gemma["MQA + SWA 5:1"]["label"].startswith("MQA + SWA 5:1 (1 K/V head × 256, window 512")
    assert table.loc["Gemma 3 270M", "attention"] == "MQA + SWA 5:1"
    assert gemma["MQA + SWA 5:1"]["y"][gemma["MQA + SWA 5:1"]["x"].index(32768)] == table.loc["Gemma 3 270M", "bytes"]
    assert not any("GQA" in label and "1 K/V head " in label for label in (line["label"] for line in gemma.values()))
    assert gemma["MLA"]["label"] == "MLA (latent 128)"
    assert any("latent of 128 numbers per token and layer: the book's default max(16, d_out // 8) at d_out = 4 heads "
               "× 256 = 1,024" in caption.value for caption in at.caption)
    assert any("Gemma 3 270M has 1 K/V head: one K/V head shared by all the heads, which is MQA (the MQA lines). The "
               "GQA lines group the 4 heads into 2 K/V heads, 2 heads each." in caption.value for caption in at.caption)
    at.selectbox(key="generate_sizes").set_value("Llama 3.2 1B").run()  # d_out 2,048
    assert cost_lines(at, "KV cache of Llama 3.2 1B")["MLA"]["label"] == "MLA (latent 256)"
    assert any("latent of 256 numbers per token and layer: the book's default max(16, d_out // 8) at d_out = 32 heads "
               "× 64 = 2,048" in caption.value for caption in at.caption)
    at.selectbox(key="generate_sizes").set_value("DeepSeek-V3 671B").run()
    assert any("latent of 576 numbers per token and layer: DeepSeek-V3 671B's own" in caption.value
               for caption in at.caption)


def test_without_a_model_the_page_says_how_to_pick_one_and_shows_the_costs():
    at = page(weights=weights.BOOK)
    assert any(info.value == NO_MODEL for info in at.info)
    cost = figure(at, "KV cache of the sidebar's sizes")
    assert [trace["name"].split(" ")[0] for trace in cost["data"]] == ["MHA", "GQA", "MQA", "MLA", "SWA", "SWA+GQA"]
    table = grid(at, "model").value
    assert {"GPT-2 124M", "Llama 3.2 1B", "Qwen3 0.6B", "Gemma 3 270M"} <= set(table["model"])
    # what a narrow page shows before it scrolls sideways: the model, its attention and its cache
    assert list(table.columns)[:4] == ["model", "attention", "KV cache at full context", "dtype"]
    llama = table.set_index("model").loc["Llama 3.2 1B"]
    assert llama["bytes"] == 4 * 2**30 and llama["KV cache at full context"] == "4.29 GB"  # in units, bytes beside
    assert llama["window"] == "—" and not table.isna().any().any()  # no "None" where other columns say "—"
    at.selectbox(key="generate_sizes").set_value("Gemma 3 270M").run()
    assert not at.exception
    assert figure(at, "KV cache of Gemma 3 270M")


def test_the_page_says_the_bundled_model_copies_repeats_and_does_not_continue_english():
    bundled_note = "trained only on repeated random tokens"
    at = page(weights=weights.BUNDLED_NAME, text=TEXT)
    note = next(c.value for c in at.caption if bundled_note in c.value)
    assert "induction heads" in note and "not continue English" in note and "GPT-2 checkpoint" in note
    # where to put one so that the sidebar lists it, in the app's own words: a student never sees the README
    assert "README" not in note and "Hugging Face cache" in note
    assert "pip install huggingface_hub && hf download openai-community/gpt2" in note  # hf is not in requirements
    assert "--checkpoint" in note and "ATTNVIZ_CHECKPOINTS" in note
    at = page(weights=NAME, text=TEXT)  # another model: no such note
    assert not [c.value for c in at.caption if bundled_note in c.value]
    at = page(weights=weights.BOOK)  # no model: the notice that offers the bundled model says what it is
    notice = next(info.value for info in at.info if info.value == NO_MODEL)
    assert "small GPT-2" not in notice and "repeated random tokens" in notice and "GPT-2 checkpoint" in notice


def test_new_tokens_past_the_context_are_clipped_with_a_notice():
    at = page(weights=weights.BUNDLED_NAME, text=TEXT, new_tokens="1000")
    assert int(at.text_input(key="generate_new").value) == 1000
    assert any("would pass the model's context of 256 tokens" in info.value for info in at.info)
    room = 256 - len(tokens.encode(TEXT))
    assert any(m.value.startswith(f"**Step 0 of {room}**") for m in at.markdown)


def test_a_prompt_that_fills_the_context_keeps_its_end_so_the_new_tokens_fit():
    text = "hello " * 300  # 301 tokens; the bundled model's context is 256
    prompt = tokens.encode(text)
    at = page(weights=weights.BUNDLED_NAME, text=text)
    notices = [info.value.replace("\\", "") for info in at.info]
    assert notices == ["The prompt has 301 tokens and the model's context is 256: generation continues its last 236, "
                       "so that the 20 new tokens fit."]
    assert any(m.value.startswith("**Step 0 of 20**") for m in at.markdown)
    assert not at.button(key="generate_next").disabled and not at.button(key="generate_play").disabled
    assert cache_table(at)["cache_k"].iloc[0] == "(1, 236, 2, 64)"
    model = models.load_checkpoint(models.BUNDLED)
    expected = greedy(model, prompt[-236:], 1)
    step(at)
    assert at.metric[0].value == tokens.pieces([expected[-1]])[0].piece
    assert at.success[0].value.startswith("Equals the uncached forward")
    assert at.text_area[0].value == text


def test_the_new_tokens_follow_the_url_and_a_reload_shows_the_same_view():
    """A link without new_tokens: the widget's change adds it to the URL and the Share link; a reload of that URL
    shows the same view, and a change there replaces the link's value in both."""
    at = page(weights=weights.BUNDLED_NAME, text=TEXT)
    assert any(m.value.startswith("**Step 0 of 20**") for m in at.markdown)
    at.text_input(key="generate_new").input("7").run()
    assert not at.exception
    assert at.query_params["new_tokens"] in ("7", ["7"])
    assert "new_tokens=7" in share_link(at)  # the link to this view says so too
    reloaded = page(**{key: value if isinstance(value, str) else value[0] for key, value in at.query_params.items()})
    assert int(reloaded.text_input(key="generate_new").value) == 7
    assert any(m.value.startswith("**Step 0 of 7**") for m in reloaded.markdown)
    reloaded.text_input(key="generate_new").input("5").run()  # the link's own value, changed
    assert not reloaded.exception
    assert reloaded.query_params["new_tokens"] in ("5", ["5"])
    assert "new_tokens=5" in share_link(reloaded) and "new_tokens=7" not in share_link(reloaded)
    # a count out of range stays in the box as typed, and the warning under it says the page generates 20 instead,
    # which it draws (a number box kept it in view, red, while the page went on generating 5); so does the link
    reloaded.text_input(key="generate_new").input("2000").run()
    assert reloaded.text_input(key="generate_new").value == "2000"
    assert [w.value.replace("\\", "") for w in reloaded.warning] == [
        "New tokens 2,000 is outside 1 … 1,024: the page generates 20."]
    assert any(m.value.startswith("**Step 0 of 20**") for m in reloaded.markdown)
    assert "new_tokens=2000" in share_link(reloaded)


@pytest.mark.parametrize(("raw", "said"), [("99999", "99,999 is outside 1 … 1,024"), ("-3", "-3 is outside 1 … 1,024"),
                                           ("0", "0 is outside 1 … 1,024"),
                                           ("abc", "'abc' is not a whole number (1 … 1,024)"),
                                           ("2.5", "'2.5' is not a whole number (1 … 1,024)")])
def test_a_links_new_tokens_out_of_range_opens_in_its_box_and_the_page_says_it_generates_the_default(raw, said):
    """A link's new_tokens goes through the box's own check: it opens in the box as the link wrote it, and the warning
    under the box names it, the range and the 20 tokens the page generates instead; the URL keeps it, so the link
    reopens this view."""
    at = page(weights=weights.BUNDLED_NAME, text=TEXT, new_tokens=raw)
    assert at.text_input(key="generate_new").value == raw
    assert f"New tokens {said}: the page generates 20." in [w.value.replace("\\", "") for w in at.warning]
    assert not any("Ignored URL parameter" in w.value for w in at.warning)
    assert any(m.value.startswith("**Step 0 of 20**") for m in at.markdown)
    assert at.query_params["new_tokens"] in (raw, [raw])
    assert at.success  # it still generates


def test_an_empty_prompt_gives_a_message_and_keeps_the_text():
    at = page(weights=weights.BUNDLED_NAME, text=TEXT)
    at.text_area[0].set_value("   ").run()
    assert not at.exception
    assert any(w.value.startswith("The prompt is empty") for w in at.warning) and at.text_area[0].value == "   "
    assert not [b for b in at.button if b.key == "generate_next"]  # nothing to step through


@pytest.mark.parametrize("text", ["", "  \n "])
def test_an_empty_text_in_the_link_gets_the_pages_own_message_under_its_title(text):
    at = page(weights=weights.BUNDLED_NAME, text=text)
    assert at.title[0].value.startswith("Generate")
    assert [w.value for w in at.warning] == [
        "The prompt is empty: type a text in the sidebar's **Text** box, and the model continues it."]
    assert at.selectbox(key="generate_sizes")  # the page goes on: what the cache costs
    assert at.text_area[0].value == text
    at.text_area[0].set_value(TEXT).run()  # typed: it generates
    assert not at.exception and at.success[0].value.startswith("Equals the uncached forward")


def test_an_endoftext_prompt_generates():
    at = page(weights=weights.BUNDLED_NAME, text=tokens.ENDOFTEXT)
    assert cache_table(at)["cache_k"].iloc[0] == "(1, 1, 2, 64)"
    step(at)
    assert at.success[0].value.startswith("Equals the uncached forward")


def test_a_layer_out_of_range_in_the_url_is_refused_with_a_notice():
    at = page(weights=weights.BUNDLED_NAME, text=TEXT, layer="99")
    said = "Ignored URL parameter layer='99': it is out of range (this checkpoint's 2 layers: 0 … 1)"
    assert any(w.value.replace("\\", "").startswith(said) for w in at.warning)
    assert at.success and len(cache_table(at)) == 2 and at.text_area[0].value == TEXT


@pytest.mark.parametrize("raw", ["swa", "bogus"])
def test_a_links_random_gpt_with_a_model_under_weights_is_said_to_be_set_aside(raw):
    """With a model under Weights the page offers no random GPT: the link's ``random`` is said not to be used, as a
    refused value is, while those weights stay (not dropped without a word)."""
    at = page(weights=weights.BUNDLED_NAME, text=TEXT, random=raw)
    said = f"Ignored URL parameter random='{raw}': the page generates with"
    notices = [w.value.replace("\\", "") for w in at.warning]  # Markdown-escaped
    assert [notice for notice in notices if notice.startswith(said)] == [
        f"{said} Bundled model (trained by attnviz), the model under Weights. Set Weights to Book's classes (seeded "
        "random weights) to generate with a small random GPT."]
    assert "random" not in at.query_params and at.success  # it generates with the bundled model
    step(at)
    assert any(w.value.replace("\\", "").startswith(said) for w in at.warning)  # said until Weights changes
    at.selectbox(key="weights").set_value(weights.BOOK).run()
    assert not at.exception and not any(w.value.replace("\\", "").startswith(said) for w in at.warning)


def test_the_notice_that_generation_needs_a_model_shows_only_while_none_is_picked():
    """The teacher's /generate?random=swa&step=15: the notice that the book's Chapter 3 classes predict no tokens
    stood above the random GPT while it generated; it shows only while no language model is picked, above the
    choice of a random GPT."""
    at = random_page(random="swa", step="15")
    assert at.selectbox(key="generate_random").value == "swa" and at.metric  # generating
    assert not any("Generation needs a language model" in info.value for info in at.info)
    at.selectbox(key="generate_random").set_value("none").run()
    assert not at.exception, [e.value for e in at.exception]
    assert [info.value for info in at.info].count(NO_MODEL) == 1
    order = [type(element).__name__ for element in at.main if type(element).__name__ in ("Info", "Selectbox")]
    assert order[:2] == ["Info", "Selectbox"]  # the notice, then the choice of a random GPT
    at.selectbox(key="generate_random").set_value("mla").run()
    assert not any(info.value == NO_MODEL for info in at.info)


def test_a_random_gpt_of_this_session_leaves_quietly_when_a_model_is_chosen():
    at = random_page(random="swa")
    at.selectbox(key="weights").set_value(weights.BUNDLED_NAME).run()
    assert not at.exception and at.success
    assert not any(": the page generates with" in w.value.replace("\\", "") for w in at.warning)


def test_play_advances_and_stops_at_the_end():
    at = page(weights=weights.BUNDLED_NAME, text=TEXT, new_tokens="2")
    at.button(key="generate_play").click().run()
    assert not at.exception
    assert at.button(key="generate_stop")  # playing: Stop is offered, Step is not available
    at.button(key="generate_stop").click().run()
    assert at.button(key="generate_play") and not at.exception


def test_a_head_the_next_model_lacks_falls_back_to_head_0():
    at = page(weights=NAME, text=TEXT)  # 3 layers × 4 heads
    at.selectbox(key="generate_layer").set_value(2).run()
    at.selectbox(key="generate_head").set_value(3).run()
    assert not at.exception
    at.selectbox(key="weights").set_value(weights.BUNDLED_NAME).run()  # 2 layers × 2 heads
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="generate_layer").value == 0 and at.selectbox(key="generate_head").value == 0
    assert at.text_area[0].value == TEXT


# ============================== a small random GPT with a bonus attention ==============================


def random_page(**query) -> AppTest:
    return page(weights=weights.BOOK, text=TEXT, **query)


@pytest.mark.parametrize("query, attention, settings, cache", [
    ({"variant": "gqa", "num_kv_groups": "4"}, "gqa", {"num_kv_groups": 4},
     lambda n: {"cache_k": f"(1, 4, {n}, 16)", "cache_v": f"(1, 4, {n}, 16)"}),
    ({"variant": "mqa"}, "mqa", {}, lambda n: {"cache_k": f"(1, 1, {n}, 16)"}),
    ({"variant": "mla", "latent_dim": "48"}, "mla", {"latent_dim": 48}, lambda n: {"cache_c_kv": f"(1, {n}, 48)"}),
    ({"variant": "swa", "sliding_window_size": "3"}, "swa", {"sliding_window_size": 3},
     lambda n: {"cache_k": f"(1, {min(n, 3)}, 8, 16)"}),  # the book's ch04/06_swa layout: tokens first
])
def test_a_bonus_attention_in_the_sidebar_offers_a_random_gpt_with_its_real_cache(query, attention, settings, cache):
    model = models.random_gpt(attention, **settings)
    prompt = tokens.encode(TEXT)
    expected = greedy(model, prompt, 2)
    at = random_page(**query)
    assert not any(info.value == NO_MODEL for info in at.info)  # a language model is picked: the random GPT
    assert at.selectbox(key="generate_random").value == attention  # preselected: the sidebar's attention
    assert any("Its weights are random: its text is noise" in w.value for w in at.warning)
    for k in (0, 1, 2):
        if k:
            step(at)
            assert at.metric[0].value == tokens.pieces([expected[len(prompt) + k - 1]])[0].piece
        n = len(prompt) + k
        table = cache_table(at)
        for column, shape in cache(n).items():
            assert table[column].tolist() == [shape, shape]  # 2 layers
        held = models.cache_settings(model)
        assert table["bytes"].sum() == kv_cache_bytes(context_length=n, **held)
        call, shown = caption_call(at)
        assert shown == table["bytes"].sum() == eval(call, {"kv_cache_bytes": kv_cache_bytes})  # runs as pasted
        assert at.success[0].value.startswith("Equals the uncached forward")
    assert at.text_area[0].value == TEXT


def caption_call(at: AppTest) -> tuple[str, int]:
    """The ``kv_cache_bytes(…)`` call the caption under the cache table shows, and the bytes it says the call gives."""
    caption = next(c.value for c in at.caption if "kv_cache_bytes(" in c.value)
    match = re.search(r"`(kv_cache_bytes\([^`]*\))` = ([\d,]+) bytes", caption)
    assert match, caption
    return match.group(1), int(match.group(2).replace(",", ""))


@pytest.mark.parametrize("attention, held", [
    # bundled; the KV cache is the book's bonus material (ch04/03_kv-cache), not chapter 4's
    (None, "`cache_k` and `cache_v`, shape `(b, n, heads, head_dim)` = `(1, n, 2, 64)`, the layout of the book's "
           "bonus KV cache (ch04/03_kv-cache: "),
    ("mha", "`cache_k` and `cache_v`, shape `(b, n, heads, head_dim)` = `(1, n, 8, 16)`, the layout of the book's "
            "bonus KV cache (ch04/03_kv-cache: "),
    ("gqa", "`cache_k` and `cache_v` of its 2 K/V heads (each shared by 4 query heads, repeated after the cache), "
            "shape `(b, kv_heads, n, head_dim)` = `(1, 2, n, 16)`"),
    ("mqa", "`cache_k` and `cache_v` of its one K/V head (shared by all 8 query heads, repeated after the cache), "
            "shape `(b, kv_heads, n, head_dim)` = `(1, 1, n, 16)`"),
    ("mla", "`cache_c_kv`, one latent per token, shape `(b, n, latent_dim)` = `(1, n, 32)`"),
    ("swa", "`cache_k` and `cache_v` of the last W = 16 tokens only, shape `(b, min(n, W), heads, head_dim)` = "
            "`(1, min(n, 16), 8, 16)`, the layout of the book's bonus KV cache (ch04/03_kv-cache, and ch04/06_swa's "
            "window: "),
])
def test_the_page_says_what_the_chosen_attentions_cache_holds_and_its_captions_call_gives_the_bytes_shown(
        attention, held):
    """For every random GPT's attention and for the bundled model, on one session: what the page says a layer caches
    is what this model's layers cache (no (b, kv_heads, n, head_dim) for MLA's latent, n at most W for a sliding
    window); and, pasted into Python, the caption's call gives the number the caption shows (and the table's bytes),
    before and after a step."""
    at = page(weights=weights.BUNDLED_NAME, text=TEXT) if attention is None else random_page(random=attention)
    said = "\n".join(m.value for m in at.markdown)
    assert held in said, said
    symbolic = re.search(r"`(\(b, [^`]*\))` =", held).group(1)
    shapes = set(re.findall(r"\(b, [a-zA-Z_(), ]*?\)(?=`)", said))  # every symbolic cache shape the page names
    assert shapes == {symbolic}, shapes
    first = cache_table(at).columns[1]
    assert f"`{first}`" in held  # the table's first tensor is the one said
    for k in (0, 1):
        if k:
            step(at)
        call, shown = caption_call(at)
        assert eval(call, {"kv_cache_bytes": kv_cache_bytes}) == shown == cache_table(at)["bytes"].sum(), call


def test_the_cost_chart_says_that_rasbts_estimators_n_kv_groups_is_a_group_size():
    at = page(weights=weights.BOOK)
    said = " ".join(c.value for c in at.caption).replace("\\", "")
    assert "memory_estimator_gqa.py" in said and "n_kv_groups" in said and "group size" in said
    assert "num_kv_groups" in said and "n_kv_heads" in said


def test_the_top_5_of_a_random_gpt_are_not_all_0_percent():
    """A random GPT spreads its guess over 50,257 tokens: each probability is shown with three significant digits
    (the grid's printf format, which Python's % reads alike), and the chosen token's is the largest shown."""
    at = random_page(variant="mqa")
    values = top_5(at)["probability"].tolist()
    form = grid_columns(at, "rank", "token")["probability"]["type_config"]["format"]
    shown = [form % value for value in values]
    assert len(shown) == 5 and all(float(p.rstrip("%")) > 0 for p in shown), (form, shown)
    assert values == sorted(values, reverse=True) and values[0] > 0


def test_sidebar_settings_that_do_not_fit_the_random_gpt_are_said_and_the_preset_used():
    at = random_page(variant="gqa", num_kv_groups="6")  # 6 divides the sidebar's 12 heads, not the model's 8
    assert not at.exception
    assert any("num_kv_groups = 6 does not fit" in c.value.replace("\\", "") for c in at.caption)
    assert cache_table(at)["cache_k"].iloc[0] == f"(1, 2, {len(tokens.encode(TEXT))}, 16)"
    at = random_page(variant="mla", latent_dim="512")
    assert any("latent_dim = 512 does not fit" in c.value.replace("\\", "") for c in at.caption)
    assert cache_table(at)["cache_c_kv"].iloc[0] == f"(1, {len(tokens.encode(TEXT))}, 32)"
    # a window longer than the random GPT's context of 256 tokens: its own 16 (a window that long saves nothing)
    at = random_page(variant="swa", sliding_window_size="1000")
    notes = " ".join(c.value.replace("\\", "") for c in at.caption)
    assert "sliding_window_size = 1000 is longer than this model's context of 256 tokens: it uses 16." in notes
    assert cost_lines(at, "KV cache of")["SWA"]["label"] == "SWA (8 K/V heads × 16, window 16 on both layers)"


def test_the_sidebars_window_that_fits_the_random_gpt_is_kept():
    at = random_page(variant="swa", sliding_window_size="200")
    assert not any("sliding_window_size = 200" in c.value.replace("\\", "") for c in at.caption)  # no note
    assert any("window W = 200" in w.value for w in at.warning)
    assert cost_lines(at, "KV cache of")["SWA"]["label"] == "SWA (8 K/V heads × 16, window 200 on both layers)"


@pytest.fixture
def gqa_copy(monkeypatch):
    """A new registry record: grouped-query attention under another name (registered for this test only)."""
    record = dataclasses.replace(variants.get(variants.GQA), name="gqa_copy", label="Grouped copy (a new record)")
    monkeypatch.setitem(variants.VARIANTS, record.name, record)
    monkeypatch.setitem(variants.LABELS, record.name, record.label)
    return record


def test_the_random_gpts_setting_and_sizes_come_from_the_variants_record(gqa_copy):
    """A new record with a setting (its ``settings``) needs no second list here: the random GPT takes the sidebar's
    K/V groups for it, and its sizes name its K/V heads, as for GQA."""
    config = AttentionConfig(variant=gqa_copy.name, num_heads=8, d_out=128, num_kv_groups=4)
    assert generate.random_settings(config, gqa_copy.name) == ({"num_kv_groups": 4}, [])
    assert generate.random_settings(dataclasses.replace(config, num_kv_groups=3), gqa_copy.name)[0] == {}
    assert generate.random_sizes(gqa_copy.name, {"num_kv_groups": 4}) == ["4 K/V heads"]
    assert generate.random_sizes(variants.MQA, {"num_kv_groups": 4}) == ["1 K/V head"]
    assert generate.random_sizes(variants.MLA, {"latent_dim": 32}) == ["latent_dim 32"]
    assert generate.random_sizes(variants.SWA, {"sliding_window_size": 16}) == ["window W = 16"]
    assert generate.random_sizes(variants.MHA, {}) == []


def test_the_random_gpt_is_a_choice_and_no_thanks_puts_the_costs_back_alone():
    at = random_page()  # the book's MHA in the sidebar: nothing preselected
    assert at.selectbox(key="generate_random").value == "none"
    assert not [b for b in at.button if b.key == "generate_next"]
    at.selectbox(key="generate_random").set_value("mha").run()
    assert not at.exception and cache_table(at)["cache_k"].iloc[0].endswith(", 8, 16)")
    at.selectbox(key="generate_random").set_value("none").run()
    assert not at.exception and not [b for b in at.button if b.key == "generate_next"]
    assert at.text_area[0].value == TEXT


def test_prefill_then_step_again_every_button_drawn_for_the_step_shown():
    at = page(weights=weights.BUNDLED_NAME, text=TEXT, new_tokens="2")
    step(step(at))
    assert at.button(key="generate_next").disabled and not at.button(key="generate_back").disabled
    at.button(key="generate_back").click().run()
    assert not at.exception and any(m.value.startswith("**Step 0 of 2**") for m in at.markdown)
    assert not at.button(key="generate_next").disabled and at.button(key="generate_back").disabled
    step(at)
    assert any(m.value.startswith("**Step 1 of 2**") for m in at.markdown)
    assert not at.button(key="generate_back").disabled


def test_a_long_prompt_shows_its_end_and_the_top_5_beside_it():
    text = "word " * 60 + "| *not bold* |"
    at = page(weights=weights.BUNDLED_NAME, text=text, new_tokens="1")
    shown = next(m.value for m in at.markdown if m.value.startswith("…"))
    assert "word " * 50 not in shown.replace("\\", "") and "not bold" in shown
    assert any(m.value == "**The next token, from the top 5**" for m in at.markdown)
    assert len(top_5(at)) == 5
    assert at.text_area[0].value == text
    # its column is half the page, whose ~230 px hold the grid's three columns beside the open sidebar at 800 px
    top_col = next(col for col in at.columns if any("rank" in frame.value.columns for frame in col.dataframe))
    assert top_col.weight == pytest.approx(0.5)


def test_the_generation_spinner_names_the_count_and_shows_the_time(monkeypatch):
    """Hundreds of new tokens are as many forward passes (minutes for a GPT-2 on a CPU): the spinner says how many
    and counts the seconds (Streamlit's show_time), so a long generation does not look stuck."""
    spinners = recorded_spinners(monkeypatch)
    page(weights=NAME, text=TEXT, new_tokens="20")
    generating = [(text, timed) for text, timed in spinners if text.startswith("Generating")]
    assert generating == [("Generating up to 20 new tokens with the KV cache, one forward pass each…", True)]


# ============================== what the cache costs: the sidebar's settings, the dtype ==============================


def cost_lines(at: AppTest, title_part: str) -> dict[str, dict]:
    """The cost chart's traces by variant (the legend label before its sizes): {"GQA": {"label", "x", "y"}, …}."""
    return {trace["name"].split(" (")[0]: {"label": trace["name"].replace("<br>", " "),  # a long one in lines
                                          "x": decode(trace["x"]).tolist(), "y": decode(trace["y"]).tolist()}
            for trace in figure(at, title_part)["data"]}


@pytest.mark.parametrize("query, variant, label", [
    ({"variant": "gqa", "num_kv_groups": "6"}, "GQA", "GQA (6 K/V heads × 64)"),
    ({"variant": "gqa"}, "GQA", "GQA (4 K/V heads × 64)"),  # the sidebar's default: 12 heads in 4 groups
    ({"variant": "gqa", "num_kv_groups": "12"}, "GQA", "GQA (4 K/V heads × 64)"),  # 12 of 12 is MHA: grouped
    ({"variant": "mla", "latent_dim": "64"}, "MLA", "MLA (latent 64)"),
    ({"variant": "swa", "sliding_window_size": "8"}, "SWA", "SWA (12 K/V heads × 64, window 8"),
])
def test_the_cost_chart_uses_the_sidebars_kv_groups_latent_and_window(query, variant, label):
    at = page(weights=weights.BOOK, random="none", **query)
    lines = cost_lines(at, "KV cache of the sidebar's sizes")
    assert lines[variant]["label"].startswith(label), lines[variant]["label"]
    if variant == "MLA":
        assert any("The MLA line caches a latent of 64 numbers per token and layer: the sidebar's latent width"
                   in caption.value for caption in at.caption)
    said = [caption.value for caption in at.caption if caption.value.startswith("The sidebar's GQA has")]
    assert said == (["The sidebar's GQA has 12 K/V heads: a K/V head per head, which is MHA (the MHA line). The GQA "
                     "lines group the 12 heads into 4 K/V heads, 3 heads each."]
                    if query.get("num_kv_groups") == "12" else [])
    d_out, heads = 768, 12  # the sidebar's sizes, one layer, fp32
    expected = kv_cache_bytes(context_length=1024, emb_dim=d_out, n_heads=heads, n_layers=1, dtype="fp32", **{
        "GQA": {"n_kv_heads": {"6": 6}.get(query.get("num_kv_groups"), 4)},
        "MLA": {"latent_dim": int(query.get("latent_dim", 0))},
        "SWA": {"sliding_window_size": int(query.get("sliding_window_size", 0))}}[variant])
    assert lines[variant]["y"][lines[variant]["x"].index(1024)] == expected


def test_the_cost_chart_fills_in_what_the_sidebar_leaves_open():
    at = page(weights=weights.BOOK, random="none")  # the book's MHA: no K/V groups, latent or window in the sidebar
    lines = cost_lines(at, "KV cache of the sidebar's sizes")
    assert lines["GQA"]["label"].startswith("GQA (4 K/V heads × 64)")  # as the sidebar's GQA for 12 heads
    # the book's MLA default max(16, d_out // 8) at d_out 768: the latent the sidebar's MLA, Heads and Shapes use
    assert lines["MLA"]["label"] == f"MLA (latent {AttentionConfig(variant='mla').latent_width})" == "MLA (latent 96)"
    assert any("The MLA line caches a latent of 96 numbers per token and layer: the book's default "
               "max(16, d_out // 8) at d_out = 12 heads × 64 = 768, the latent attnviz's MLA has" in caption.value
               for caption in at.caption)
    # the window: the bonus material's 1,024, at most a quarter of the sidebar's context of 1,024 tokens
    assert lines["SWA"]["label"].startswith("SWA (12 K/V heads × 64, window 256")


@pytest.mark.parametrize("query, label", [
    # the bundled model has no window: a quarter of its context of 256 (5:1 of 2 layers: both)
    ({"weights": weights.BUNDLED_NAME}, "SWA (2 K/V heads × 64, window 64 on both layers)"),
    ({"weights": weights.BOOK, "random": "swa"}, "SWA (8 K/V heads × 16, window 16 on both layers)"),  # its own W
    ({"weights": weights.BOOK, "random": "none"}, "SWA (12 K/V heads × 64, window 256 on its one layer)"),
])
def test_the_cost_charts_swa_line_says_its_window_and_which_layers_slide(query, label):
    """The SWA line's label names the window it draws (the model's own where it has one) and the layers that slide
    for this model's layer count; a line whose every layer slides grows over at least 2 lengths up to the window (the
    axis starts below it) and is flat from it."""
    at = page(text=TEXT, **query)
    line = cost_lines(at, "KV cache of")["SWA"]
    assert line["label"] == label
    window = int(re.search(r"window ([\d,]+)", label).group(1).replace(",", ""))
    at_window = line["x"].index(window)  # the window is one of the lengths drawn
    growing = line["y"][: at_window + 1]
    assert at_window >= 2 and growing == sorted(set(growing)), line  # at least 2 lengths before it, each holding more
    assert len(set(line["y"][at_window:])) == 1
    context = figure(at, "KV cache of")["layout"]["shapes"][0]["x0"]  # the dotted line: the model's context
    assert context == (1024 if query.get("random") == "none" else 256)
    assert window < context  # a window as long as the context would save nothing there


@pytest.mark.parametrize("query, label", [
    ({"variant": "swa", "sliding_window_size": "1000"}, "SWA (12 K/V heads × 64, window 1,000 on its one layer)"),
    ({"variant": "swa", "sliding_window_size": "1024"}, "SWA (12 K/V heads × 64, window 1,024 on its one layer)"),
])
def test_the_sidebars_own_window_is_kept_as_it_is(query, label):
    """A window the user chose (the link's, then the sidebar's widget) draws the sidebar's SWA line, however long."""
    at = page(weights=weights.BOOK, random="none", **query)
    assert cost_lines(at, "KV cache of the sidebar's sizes")["SWA"]["label"] == label
    at.text_input(key="sliding_window_size_box").input(str(600)).run()
    no_exception(at)
    assert cost_lines(at, "KV cache of the sidebar's sizes")["SWA"]["label"] == \
        "SWA (12 K/V heads × 64, window 600 on its one layer)"


def test_a_real_models_chart_is_in_its_own_dtype_as_its_table_row_unless_one_is_picked():
    """The chart's Sizes and dtype follow the URL (``sizes``, ``dtype``), so a link opens the chart it shows."""
    at = page(weights=weights.BOOK, random="none", sizes="Llama 3.2 1B")  # a link to Llama's chart
    assert at.selectbox(key="generate_sizes").value == "Llama 3.2 1B"
    title = figure(at, "KV cache of Llama 3.2 1B")["layout"]["title"]["text"]
    assert "(bf16, batch 1)" in title
    table = grid(at, "model").value.set_index("model")
    assert cost_lines(at, "KV cache of Llama 3.2 1B")["GQA"]["y"][-1] == table.loc["Llama 3.2 1B", "bytes"]
    at.selectbox(key="generate_sizes").set_value("GPT-2 124M").run()  # a model published in fp32
    assert "(fp32, batch 1)" in figure(at, "KV cache of GPT-2 124M")["layout"]["title"]["text"]
    gpt2 = cost_lines(at, "KV cache of GPT-2 124M")["MHA"]
    assert gpt2["y"][gpt2["x"].index(1024)] == table.loc["GPT-2 124M", "bytes"]  # its context
    assert at.query_params["sizes"] in ("GPT-2 124M", ["GPT-2 124M"]) and "dtype" not in at.query_params
    at.selectbox(key="generate_dtype").set_value("fp32").run()  # picked: every model in it
    at.selectbox(key="generate_sizes").set_value("Llama 3.2 1B").run()
    assert "(fp32, batch 1)" in figure(at, "KV cache of Llama 3.2 1B")["layout"]["title"]["text"]
    assert cost_lines(at, "KV cache of Llama 3.2 1B")["GQA"]["y"][-1] == 2 * 4 * 2**30
    assert at.query_params["dtype"] in ("fp32", ["fp32"]) and "dtype=fp32" in share_link(at)
    assert "sizes=Llama+3.2+1B" in share_link(at) or "sizes=Llama%203.2%201B" in share_link(at)
    gemma = page(weights=weights.BOOK, random="none", sizes="Gemma 3 270M", dtype="fp8")  # the teacher's link
    assert "KV cache of Gemma 3 270M with each attention<br>(fp8, batch 1)" in \
        figure(gemma, "KV cache of Gemma 3 270M")["layout"]["title"]["text"]  # in lines that fit a 900 px page


def test_refused_url_values_give_a_notice_and_leave_the_url():
    """Values the page cannot use are said and leave the address bar, whether or not a widget takes their place
    (no model here: no New tokens is drawn, yet a new_tokens longer than its box holds leaves the URL)."""
    at = page(weights=weights.BOOK, random="bogus", step="999", new_tokens="0" * 30, sizes="GPT-5", dtype="fp9")
    notices = " ".join(w.value for w in at.warning).replace("\\", "")
    assert (f"Ignored URL parameter new_tokens='{'0' * 20}…': it is out of range (new tokens: 1 … 1,024); using 20."
            in notices)  # longer than the box holds (a shorter one is kept for it)
    assert ("Ignored URL parameter sizes='GPT-5': it is not a model the cost chart offers (GPT-2 124M, GPT-2 1.5B, "
            "Llama 3.2 1B, Qwen3 0.6B, Gemma 3 270M, DeepSeek-V3 671B); drawing the cost chart at the model's own "
            "sizes.") in notices
    assert "Ignored URL parameter dtype='fp9': it is not a dtype the cost chart offers (own, fp64" in notices
    assert "Ignored URL parameter random='bogus'" in notices
    for name in ("new_tokens", "sizes", "dtype", "random"):
        assert name not in at.query_params, (name, at.query_params[name])
    assert figure(at, "KV cache of the sidebar's sizes")


def test_an_mla_model_has_no_kv_heads_in_the_table_and_shows_its_latent():
    table = at_table = grid(page(weights=weights.BOOK, random="none"), "model").value.set_index("model")
    deepseek = at_table.loc["DeepSeek-V3 671B"]
    assert deepseek["K/V heads"] == "—"
    assert deepseek["latent"] == "512 + 64 rope = 576"
    assert table.loc["Llama 3.2 1B", "K/V heads"] == "8" and table.loc["Llama 3.2 1B", "latent"] == "—"


def test_rotary_in_the_sidebar_is_said_not_to_be_offered_by_the_random_gpt():
    at = random_page(variant="gqa", positions="rotary")
    assert at.selectbox(key="generate_random").value == "gqa"
    said = [element.value for element in [*at.caption, *at.info, *at.warning] if "rotary" in element.value.lower()]
    assert any("learned positions" in text and "not offered" in text for text in said), said
    at = random_page(variant="gqa")  # learned positions: nothing to say
    assert not [c.value for c in at.caption if "rotary" in c.value.lower()]


def test_a_one_token_prompt_is_counted_in_the_singular():
    at = page(weights=weights.BUNDLED_NAME, text=tokens.ENDOFTEXT)
    assert any(m.value.startswith("**Step 0 of 20** · prefill: the 1 prompt token in one forward pass")
               for m in at.markdown), [m.value for m in at.markdown if m.value.startswith("**Step")]


def test_one_new_token_is_counted_in_the_singular(monkeypatch):
    spinners = recorded_spinners(monkeypatch)
    page(weights=NAME, text=TEXT, new_tokens="1")
    assert [text for text, _ in spinners if text.startswith("Generating")] == [
        "Generating 1 new token with the KV cache, one forward pass…"]
