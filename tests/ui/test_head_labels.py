"""Head types on the Heads page: a head is named where its score passes head_types.LABEL_THRESHOLD, the
first-token mass stands beside it and never names a head, and a checkpoint gets a layers × heads grid of
every score computed layer by layer.  A GPTModel built by hand with a known previous-token head checks
that the label the learner reads is the one the definition gives."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers.apptest import decode
from helpers.apptest import open_app as app
from helpers.apptest import plotly_figures as figures
from helpers.checkpoints import own_session_models
from helpers.maps import cells_shown
from helpers.texts import english_text
from streamlit.testing.v1 import AppTest

from attnviz import head_types, models, tokens, weights
from attnviz.ui import head_labels

SESSION = "head-labels-session"
TEXT = "one two three four five six seven"  # 7 GPT-2 tokens


def previous_token_model() -> models.GPTModel:
    """2 layers × 2 heads, width 32, 16 positions.  Layer 0 head 0 attends to the previous token (its query at
    position p is the key of position p − 1, scaled up); every other head's scores are 0 (uniform attention).
    Token embeddings are 0 and position p's embedding is the unit vector e_p, so only positions matter."""
    cfg = {"vocab_size": 50257, "context_length": 16, "emb_dim": 32, "n_heads": 2, "n_layers": 2,
           "drop_rate": 0.0, "qkv_bias": False}
    torch.manual_seed(0)
    model = models.GPTModel(cfg).eval()
    with torch.no_grad():
        model.tok_emb.weight.zero_()
        model.pos_emb.weight.copy_(torch.eye(16, 32))  # position p -> e_p
        for block in model.trf_blocks:
            for linear in (block.att.W_query, block.att.W_key):
                linear.weight.zero_()
        shift = torch.diag(torch.ones(15), diagonal=-1)  # (16, 16): shift @ e_p = e_{p+1}
        att = model.trf_blocks[0].att
        att.W_query.weight[:16, :16] = 60.0 * shift.T  # query of p points at p − 1 (head 0 = outputs 0…15)
        att.W_key.weight[:16, :16] = torch.eye(16)
    return model


def test_describe_names_the_best_type_above_the_threshold_and_never_a_sink():
    scores = {"previous_token": np.array([0.93, 0.1, 0.39]), "induction": np.array([0.5, 0.0, 0.0]),
              "duplicate_token": np.array([0.0, 0.0, 0.0]), "first_token": np.array([0.0, 0.99, 0.6])}
    assert [head_labels.describe(scores, (h,)) for h in range(3)] == ["previous-token 0.93", "—", "—"]
    table = head_labels.label_table(scores)
    assert list(table.columns) == ["head", "type", "first-token mass", "previous-token", "induction",
                                   "duplicate-token"]
    assert table["first-token mass"].tolist() == [0.0, 0.99, 0.6]  # shown beside, not as a type
    assert table["type"].tolist() == ["previous-token 0.93", "—", "—"]


def test_the_hand_built_model_has_the_previous_token_head_it_was_built_with():
    model = previous_token_model()
    tokens = head_types.repeated_random_tokens(5, 0)  # 11 tokens
    maps = models.attention_maps(model, tokens)  # (2, 2, 11, 11)
    scores = head_types.score_heads(maps, tokens)
    assert scores["previous_token"][0, 0] == pytest.approx(1.0, abs=1e-3)  # rows 1…10 (a token before each) on i − 1
    whole = head_types.score_heads(maps, tokens, every_row=True)  # TransformerLens' whole map: row 0 counts
    assert whole["previous_token"][0, 0] == pytest.approx(10 / 11, abs=1e-3)
    assert scores["previous_token"][1].max() < head_types.LABEL_THRESHOLD


def type_table(at: AppTest):
    return next(table.value for table in at.dataframe if "type" in table.value.columns)


def test_heads_page_labels_the_book_classes_heads_from_the_trace():
    at = app(text="the cat sat on the mat and the cat sat on the mat")
    assert not at.exception, [e.value for e in at.exception]
    assert "Head types" in [h.value for h in at.subheader]
    table = type_table(at)
    assert len(table) == 12
    # the same numbers as score_heads on the weights the page draws (the focused head 0)
    grid_maps = None
    for fig in figures(at):
        if fig["layout"].get("title", {}).get("text", "").startswith("head 0"):
            grid_maps = cells_shown(fig)
    assert grid_maps is not None
    first = table.iloc[0]
    assert first["first-token mass"] == pytest.approx(np.nanmean(grid_maps[1:, 0]), abs=1e-4)
    for _, row in table.iterrows():
        scores = {name: row[head_labels.head_figures.SCORE_TITLES[name]] for name in head_labels.TYPE_COLUMNS}
        label = head_types.head_label(scores)
        assert (row["type"] == "—") == (label is None)


def test_random_weights_say_a_type_they_show_is_chance_and_learned_none_when_they_show_none():
    """On random weights a short text lets a head pass the threshold by chance: the page names it and says so,
    rather than claim random heads have no types; a text where none passes says they learned none."""
    named = app(text="The cat sat on the mat")
    assert not named.exception
    markdown = " ".join(m.value for m in named.markdown)
    assert "with a type:** head " in markdown and "have no types" not in markdown
    assert any("random weights, so a type named here is chance: on 6 tokens" in c.value for c in named.caption)
    none = app()  # "Your journey starts with one step": no head passes, and no token repeats
    text = " ".join(m.value for m in none.markdown)
    assert "with a type:** none on this text — no token repeats: paste the text twice to see induction heads" in text
    assert "The book's classes have random weights: their heads learned no type." in text
    assert not any("is chance" in c.value for c in none.caption)


def test_the_chance_caption_counts_the_keys_a_query_sees():
    """A window of 2 shows each query 2 keys: spread evenly, attention already puts 1/2 on the token before, above
    the threshold, so a previous-token type there is chance whatever the weights (not because the text is short);
    a window of 3 puts about 1/3 there, under it; without a window a long text's chance is far under it."""
    ids = tokens.encode(english_text(54))
    random_weights = "The book's classes have random weights"
    two = head_labels.chance_caption(54, 2, head_labels.chance_of(ids, 2), ["previous_token"] * 12, random_weights,
                                     window_setting=True)
    assert "each query sees at most 2 keys (the sliding window, W = 2)" in two
    assert "already puts 0.50 on the token before" in two and "whatever the weights" in two
    assert "few keys to spread over" not in two and "Window W" in two
    trained = head_labels.chance_caption(54, 2, head_labels.chance_of(ids, 2), ["previous_token"], None)
    assert trained.startswith("A previous-token type named here is chance whatever the weights: each query sees")
    three = head_labels.chance_caption(54, 3, head_labels.chance_of(ids, 3), ["previous_token"], random_weights)
    assert three.startswith(f"{random_weights}, so a type named here is chance: each query sees at most 3 keys")
    assert "whatever the weights" not in three
    assert head_labels.chance_caption(54, None, head_labels.chance_of(ids, None), ["previous_token"], None) == ""
    wide = head_labels.chance_caption(54, 100, head_labels.chance_of(ids, 100), ["previous_token"], random_weights)
    assert "on 54 tokens a query has few keys to spread over" in wide  # a window wider than the text hides nothing


def test_a_window_of_two_names_every_random_head_and_says_the_window_did_it():
    """The teacher's finding: /?variant=swa&sliding_window_size=2 on a 54-token paragraph names all 12 random heads
    previous-token and must say that the window, not the text's length, makes that chance."""
    text = english_text(54)
    at = app(variant="swa", sliding_window_size="2", text=text)
    assert not at.exception, [e.value for e in at.exception]
    assert type_table(at)["type"].str.startswith("previous-token").all()
    chance = next(c.value for c in at.caption if "is chance" in c.value)
    assert "each query sees at most 2 keys (the sliding window, W = 2)" in chance
    assert "0.50 on the token before" in chance and "few keys to spread over" not in chance
    at = app(variant="swa", sliding_window_size="3", text=text)
    assert not at.exception, [e.value for e in at.exception]
    assert (type_table(at)["type"] == "—").all()
    assert not any("is chance" in c.value for c in at.caption)


@pytest.fixture
def session_model(monkeypatch):
    from attnviz.ui import weights as ui_weights

    monkeypatch.setattr(ui_weights, "session_id", lambda: SESSION)
    own_session_models(monkeypatch)
    return weights.register_session_model(SESSION, "hand-built", previous_token_model())


def test_a_checkpoint_shows_its_labels_and_a_layers_by_heads_grid_of_every_score(session_model):
    at = app(text=TEXT, weights=session_model.name)
    assert not at.exception, [e.value for e in at.exception]
    table = type_table(at)
    assert table["type"].tolist()[0] == "previous-token 1.00"  # rows 1…6, each with a token before it, on i − 1
    assert table["type"].tolist()[1] == "—"
    markdown = " ".join(m.value for m in at.markdown)
    assert "head 0: previous-token 1.00" in markdown
    assert "every layer's heads on this text" not in repr(figures(at))  # every layer: opt-in (one more pass)
    at.toggle(key="heads_overview").set_value(True).run()
    markdown = " ".join(m.value for m in at.markdown)
    assert "L0H0 previous-token 1.00" in markdown and "L1H" not in markdown
    grid = next(f for f in figures(at)
                if f["layout"].get("title", {}).get("text") == "every layer's heads on this text")
    panels = [a["text"] for a in grid["layout"]["annotations"]][:4]
    assert panels == ["previous-token", "induction", "duplicate-token", "first-token mass"]
    previous = decode(grid["data"][0]["z"])
    model = weights.load(session_model.ref)
    reference = head_types.score_heads(models.attention_maps(model, _ids(TEXT)), _ids(TEXT))
    np.testing.assert_allclose(previous, reference["previous_token"], atol=1e-6)
    # layer 1 in the sidebar: the table follows the layer, the grid stays the whole model
    at.selectbox(key="layer").select_index(1).run()
    assert not at.exception, [e.value for e in at.exception]
    assert set(type_table(at)["type"]) == {"—"}


TWICE = "The cat sat on the mat. The cat sat on the mat."  # 14 GPT-2 tokens; "The" and " The" differ
NO_REPEATS = "no token repeats: paste the text twice to see induction heads"


def test_the_bundled_model_names_its_induction_heads_on_a_sentence_written_twice():
    """The Heads page's hint (paste a text twice) works: layer 1's heads, induction heads in the Induction lab, are
    named, their score read at the six queries of the second copy whose token came earlier (the first copy's cannot
    look after an earlier copy: over every row they score 0.22 and 0.26)."""
    at = app(text=TWICE, weights="bundled model", layer="1")
    assert not at.exception, [e.value for e in at.exception]
    markdown = " ".join(m.value for m in at.markdown)
    assert "**Heads of layer 1 with a type:** head 0: induction 0.52; head 1: induction 0.60" in markdown
    assert type_table(at)["type"].tolist() == ["induction 0.52", "induction 0.60"]
    assert NO_REPEATS not in markdown
    captions = " ".join(c.value for c in at.caption)
    assert "13 queries with a token before them" in captions and "6 whose token came earlier" in captions
    # "a b a b …": the token after an earlier copy of a token is the token right before it, so layer 0's
    # previous-token heads (0.91 and 0.81 in the Induction lab) score as induction heads; the page names both types
    at.sidebar.text_area(key="text").set_value("a b a b a b a b a b")
    at.sidebar.selectbox(key="layer").set_value(0).run()
    assert not at.exception, [e.value for e in at.exception]
    markdown = " ".join(m.value for m in at.markdown)
    assert ("**Heads of layer 0 with a type:** head 0: induction 0.96 (previous-token 0.83 too); "
            "head 1: induction 0.84 (previous-token 0.73 too)") in markdown, markdown
    assert type_table(at)["type"].tolist() == ["induction 0.96 (previous-token 0.83 too)",
                                               "induction 0.84 (previous-token 0.73 too)"]
    assert head_labels.COINCIDING in [c.value for c in at.caption]
    assert head_labels.COINCIDING not in captions  # written twice: no token follows itself or repeats two apart


def test_a_text_without_repeats_says_why_no_head_can_be_an_induction_head():
    at = app(weights="bundled model", layer="1")  # "Your journey starts with one step": six different tokens
    assert not at.exception, [e.value for e in at.exception]
    markdown = " ".join(m.value for m in at.markdown)
    assert f"**Heads of layer 1 with a type:** none on this text — {NO_REPEATS}" in markdown
    table = type_table(at)
    assert table["induction"].isna().all() and table["duplicate-token"].isna().all()  # nothing to measure, not 0
    at.toggle(key="heads_overview").set_value(True).run()
    markdown = " ".join(m.value for m in at.markdown)
    assert "L0H0 previous-token" in markdown and NO_REPEATS in markdown  # layer 0's heads are still named


NOT_NAMED = "No head is named a type here: these heads see the future"


def test_with_the_mask_off_a_checkpoint_keeps_its_scores_but_names_no_head(session_model):
    """The hand-built previous-token head with the sidebar's mask off: every query with a token before it still puts
    its weight on i − 1 (row 0, with none, spreads over all 7 and is not read), but it can see the future, so it is
    not named; the page says why and shows the weight on later tokens."""
    at = app(text=TEXT, weights=session_model.name, causal="false")
    assert not at.exception, [e.value for e in at.exception]
    table = type_table(at)
    assert set(table["type"]) == {"—"}
    model = weights.load(session_model.ref)
    reference = head_types.score_heads(models.attention_maps(model, _ids(TEXT), causal=False)[0], _ids(TEXT))
    assert table["previous-token"].tolist() == pytest.approx(reference["previous_token"].tolist(), abs=1e-6)
    assert table["previous-token"][0] == pytest.approx(1.0, abs=1e-3)  # above the threshold: no longer a name
    assert table[head_labels.FUTURE_COLUMN].tolist() == pytest.approx(reference["future"].tolist(), abs=1e-6)
    assert table[head_labels.FUTURE_COLUMN][0] == pytest.approx(6 / 7 / 7, abs=1e-3)  # row 0's 6/7 on later keys
    info = " ".join(i.value for i in at.info)
    assert NOT_NAMED in info and "*Causal mask* is off, and the model was trained with it on" in info
    markdown = " ".join(m.value for m in at.markdown)
    assert "with a type:** none: these heads see the future" in markdown and "previous-token 1.00" not in markdown
    at.toggle(key="heads_overview").set_value(True).run()
    markdown = " ".join(m.value for m in at.markdown)
    assert "no head is named: they see the future" in markdown and "L0H0 previous-token" not in markdown


def test_the_book_classes_with_the_mask_off_name_no_head_and_say_why():
    text = "the cat sat on the mat and the cat sat on the mat"
    masked = app(text=text)
    assert not any(NOT_NAMED in i.value for i in masked.info)
    assert head_labels.FUTURE_COLUMN not in type_table(masked).columns  # a causal run: no column of zeros
    at = app(text=text, causal="false")
    assert not at.exception, [e.value for e in at.exception]
    info = [i.value for i in at.info if NOT_NAMED in i.value]
    assert len(info) == 1 and "the sidebar's *Causal mask* is off;" in info[0]
    table = type_table(at)
    assert set(table["type"]) == {"—"}
    assert (table[head_labels.FUTURE_COLUMN] > 0.2).all()  # random heads give later tokens ~half their weight


def _ids(text: str) -> list[int]:
    from attnviz.tokens import encode

    return encode(text)


def test_a_second_type_the_text_makes_coincide_is_named_beside_the_first():
    """A token two apart (a b a b) makes the induction cell of a query its previous-token cell, and a token after
    itself (the the) the duplicate-token one: a head past the threshold on both is named with both; on a text
    where the cells differ, or for a pair the text does not make coincide, the best type alone."""
    from attnviz import head_types

    assert head_types.coinciding_types([1, 2, 1, 2]) == ("induction",)
    assert head_types.coinciding_types([1, 1, 2]) == ("duplicate_token",)
    assert head_types.coinciding_types([1, 2, 3, 1, 2, 3]) == ()
    scores = {"previous_token": np.array([0.83, 0.83, 0.2]), "induction": np.array([0.96, 0.3, 0.96]),
              "duplicate_token": np.array([0.5, 0.0, 0.0]), "first_token": np.array([0.0, 0.0, 0.0])}
    assert head_labels.describe(scores, (0,), coinciding=("induction",)) == "induction 0.96 (previous-token 0.83 too)"
    assert head_labels.describe(scores, (0,), coinciding=("duplicate_token",)) == "induction 0.96"
    assert head_labels.describe(scores, (0,)) == "induction 0.96"
    assert head_labels.describe(scores, (1,), coinciding=("induction",)) == "previous-token 0.83"  # 0.3: one type
    assert head_labels.describe(scores, (2,), coinciding=("induction",)) == "induction 0.96"  # 0.2: one type


def test_a_type_read_at_few_queries_says_how_few():
    """A score read at a handful of queries (two repeated tokens: an induction score from 2 queries) is named with
    how many it read, so a learner does not take two queries for a head's habit; from FEW_QUERIES on it is not."""
    scores = {"previous_token": np.array([0.1, 0.1]), "induction": np.array([0.54, 0.6]),
              "duplicate_token": np.array([0.0, 0.0]), "first_token": np.array([0.0, 0.0])}
    few = {"previous_token": 11, "induction": 2, "duplicate_token": 2}
    many = {**few, "induction": head_labels.FEW_QUERIES, "duplicate_token": head_labels.FEW_QUERIES}
    assert head_labels.describe(scores, (0,), queries=few) == "induction 0.54 (from 2 queries)"
    assert head_labels.describe(scores, (1,), queries=many) == "induction 0.60"
    assert head_labels.describe(scores, (0,)) == "induction 0.54"  # no counts given: the score alone
    ids = [5, 6, 7, 8, 5, 6, 9]  # two tokens repeat
    assert head_labels.query_counts(ids) == {"previous_token": 6, "duplicate_token": 2, "induction": 2}
    table = head_labels.label_table(scores, queries=few)
    assert table["type"].tolist() == ["induction 0.54 (from 2 queries)", "induction 0.60 (from 2 queries)"]


def stats_table(at: AppTest):
    return next(table.value for table in at.dataframe if "entropy" in table.value.columns)


@pytest.mark.parametrize("causal", ["true", "false"])
@pytest.mark.parametrize("text", ["Your journey starts with one step", "Hello"])
def test_first_token_mass_is_one_number_in_both_tables_and_says_which_queries_count(text, causal):
    """The head statistics and the head types count the same queries: under the causal mask those after the first
    (query 0 sees only the first token: its weight there is always 1), with the mask off every one; both headers say
    so.  With one token there is no choice, and both tables leave it blank."""
    at = app(text=text, causal=causal)
    assert not at.exception, [e.value for e in at.exception]
    statistics, types = stats_table(at)["first-token mass"], type_table(at)["first-token mass"]
    assert np.allclose(statistics, types, atol=1e-6, equal_nan=True)
    assert statistics.isna().all() == (text == "Hello")
    if text != "Hello":  # the focused head 0's map, as drawn: its rows after the first, or all of them
        (shown,) = [cells_shown(fig) for fig in figures(at)
                    if fig["layout"].get("title", {}).get("text", "").startswith("head 0")]
        assert statistics[0] == pytest.approx(np.nanmean(shown[1 if causal == "true" else 0:, 0]), abs=1e-4)
    configs = [json.loads(table.proto.columns) for table in at.dataframe if "first-token mass" in table.value.columns]
    helps = [str(config) for config in configs]
    assert len(helps) == 2 and all("after the first under the causal mask" in help and "mask off" in help
                                   for help in helps)


def test_previous_token_is_blank_in_both_tables_with_one_token_and_their_headers_say_so():
    """With one token no query has a token before it: the head statistics leave previous-token blank (NaN), as the
    head types do, not 0.0000 — a measured 0 would say the head looks away from a token that is not there."""
    at = app(text="a")
    assert not at.exception, [e.value for e in at.exception]
    statistics, types = stats_table(at)["previous-token"], type_table(at)["previous-token"]
    assert statistics.isna().all() and types.isna().all(), (statistics.tolist(), types.tolist())
    (config,) = [json.loads(table.proto.columns) for table in at.dataframe if "entropy" in table.value.columns]
    assert "blank with one token" in str(config["previous-token"])
    assert not stats_table(app(text="a b"))["previous-token"].isna().any()
