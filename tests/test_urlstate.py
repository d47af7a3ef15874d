"""The settings in a URL: a link leaves out what it need not give (``url_query``), and a link that gives the settings,
naming all, some or none of them, is recognised as giving them (``link_gives``), so the app need not rewrite it."""

from __future__ import annotations

import urllib.parse

import pytest
from helpers.runs import setting_notes
from helpers.texts import english_text

from attnviz import urlstate, variants, weights
from attnviz.config import MAX_ATTENTIONS, MAX_CONTEXT_LENGTH, MAX_DIM, MAX_HEADS, MAX_SEED
from attnviz.urlstate import (
    DEFAULTS,
    config_from_settings,
    fit_modern,
    ignored,
    link_gives,
    link_settings,
    settings_from_query,
    share_query,
    url_query,
)

STATES = {  # name -> the settings that differ from the defaults (the sidebar fits K/V groups and latent to the sizes)
    "defaults": {},
    "four heads": {"preset": "custom", "num_heads": 4},
    "mask off": {"causal": False},
    "gqa rotary": {"variant": "gqa", "num_kv_groups": 2, "positions": "rotary"},
    "medium": {"preset": "gpt2-medium", "d_in": 1024, "d_out": 1024, "num_heads": 16},
    "book preset, mha": {"preset": "book", "d_in": 3, "d_out": 2, "num_heads": 2},
    "book preset, wrapper": {"preset": "book", "d_in": 3, "d_out": 4, "num_heads": 2, "variant": "mha_wrapper"},
    "book preset, unmasked variant": {"preset": "book", "d_in": 3, "d_out": 2, "num_heads": 2,
                                      "variant": "simplified", "causal": False},
    "book preset, unmasked variant masked": {"preset": "book", "d_in": 3, "d_out": 2, "num_heads": 2,
                                             "variant": "self_attention_v2", "causal": True},
    "book preset, v2 at its book seed": {"preset": "book", "d_in": 3, "d_out": 2, "num_heads": 2,
                                         "variant": "self_attention_v2", "causal": False, "seed": 789},
    "book preset, v2 at the default seed": {"preset": "book", "d_in": 3, "d_out": 2, "num_heads": 2,
                                            "variant": "self_attention_v2", "causal": False},
    "custom at the default sizes": {"preset": "custom"},
    "a text": {"text": "Every cat loves warm milk", "seed": 7, "dropout": 0.25, "train": True},
}


@pytest.mark.parametrize("changes", STATES.values(), ids=STATES)
def test_a_link_of_the_needed_settings_gives_them_and_so_do_every_setting_and_any_between(changes):
    values = fit_modern({**DEFAULTS, **changes})[0]
    query = url_query(values)
    assert settings_from_query(query) == (values, [])  # a session opened with it has these settings
    assert link_gives(query, values) and link_gives(urlstate.every_setting_query(values), values)
    some = {key: value for key, value in share_query(values).items() if key in ("variant", "seed", "text")}
    assert link_gives({**some, **query}, values)


def test_a_setting_at_its_default_is_left_out_unless_a_link_without_it_gives_another_value():
    assert url_query(DEFAULTS) == {}
    assert url_query({**DEFAULTS, "seed": 7, "causal": False}) == {"causal": "false", "seed": "7"}
    book = fit_modern({**DEFAULTS, "preset": "book", "d_in": 3, "d_out": 2, "num_heads": 2, "variant": "simplified"})[0]
    assert url_query({**book, "causal": True})["causal"] == "true"  # the default, but not what the preset implies


def test_the_book_size_implies_each_classs_book_seed():
    """The book's listing of SelfAttention_v2 seeds 789: a book-size link without a seed gives it, and one that gives
    the default seed writes it (it is not what the book size implies)."""
    assert link_settings({"preset": "book", "variant": "self_attention_v2"})["seed"] == 789
    assert link_settings({"preset": "book", "variant": "self_attention_v1"})["seed"] == 123
    assert link_settings({"variant": "self_attention_v2"})["seed"] == 123  # a GPT-2 size: the default
    book_v2 = fit_modern({**DEFAULTS, "preset": "book", "d_in": 3, "d_out": 2, "num_heads": 2,
                          "variant": "self_attention_v2", "causal": False})[0]
    assert url_query({**book_v2, "seed": 123})["seed"] == "123"
    assert link_settings({key: value for key, value in url_query({**book_v2, "seed": 789}).items()
                          if key != "seed"})["seed"] == 789  # a link without the seed gives the book's


def test_a_link_that_gives_other_settings_or_writes_one_otherwise_does_not_give_them():
    assert not link_gives({"num_heads": "4"}, DEFAULTS)
    assert not link_gives({"causal": "1"}, DEFAULTS)  # the same value, written otherwise: the URL is rewritten
    assert not link_gives({}, {**DEFAULTS, "num_heads": 4})
    assert not link_gives({}, {**DEFAULTS, "text": "word " * 1000})  # too long for a URL: no link gives it


def test_a_checkpoints_sizes_are_left_out_of_its_link_as_the_checkpoint_gives_them():
    """The sidebar sets a checkpoint's sizes from its file: a link naming the checkpoint gives them, so they are left
    out, and a link that leaves them out, names them as they are, or names other sizes is told apart."""
    model = fit_modern({**DEFAULTS, "weights": "bundled model", "preset": "custom", "d_in": 64, "d_out": 64,
                        "num_heads": 4})[0]  # a latent width fitted to d_out 64 too
    assert url_query(model) == {"weights": "bundled model"}
    assert url_query({**model, "seed": 7}) == {"weights": "bundled model"}  # its weights are not seeded
    assert url_query({**model, "seed": 7}, (urlstate.BOOK_CLASSES,)) == {"weights": "bundled model", "seed": "7"}
    assert link_gives({"weights": "bundled model"}, model)
    assert link_gives(urlstate.every_setting_query(model), model)  # a link that names them as they are
    assert not link_gives({"weights": "bundled model", "d_out": "768"}, model)  # other sizes: rewritten
    assert not link_gives({}, model)  # the book's classes
    book = {**model, "weights": DEFAULTS["weights"]}  # back to the book's classes: the sizes are the session's own
    assert url_query(book) == {"preset": "custom", "d_in": "64", "d_out": "64", "num_heads": "4"}  # MHA: no latent
    assert not link_gives({}, book)


def test_a_checkpoints_attention_is_left_out_of_its_link_as_the_checkpoint_gives_it():
    """The sidebar's disabled variant shows the attention a checkpoint's blocks hold (a grouped-query file: gqa): the
    file decides it, so a link naming the checkpoint leaves it out (the URL gained variant=gqa on the first rerun)."""
    model = fit_modern({**DEFAULTS, "weights": "gqa.pth", "variant": "gqa", "preset": "custom", "d_in": 64,
                        "d_out": 64, "num_heads": 4})[0]
    assert "variant" not in url_query(model)
    assert link_gives({"weights": "gqa.pth"}, model)


def test_a_checkpoints_url_names_only_the_settings_its_run_takes():
    """A model's run takes the text, its layer and the mask; the book's settings the session holds beside it (K/V
    groups fitted to another model's heads, a seed) stay out of its URL, its Share link and what decides its view
    — but on a page that runs the book's classes at the checkpoint's sizes (Compare: urlstate.BOOK_CLASSES), where
    they make the view."""
    model = fit_modern({**DEFAULTS, "weights": "trained: 20 steps, seed 0", "preset": "custom", "d_in": 128,
                        "d_out": 128, "num_heads": 4, "num_kv_groups": 1, "seed": 7, "layer": 1, "causal": False})[0]
    assert url_query(model) == {"weights": "trained: 20 steps, seed 0", "layer": "1", "causal": "false"}
    assert "num_kv_groups" not in share_query(model) and "seed" not in share_query(model)
    assert link_gives(url_query(model), model)
    assert link_settings(url_query(model))["num_kv_groups"] == DEFAULTS["num_kv_groups"]
    book_classes = url_query(model, ("d_out", "num_heads", urlstate.BOOK_CLASSES))
    assert book_classes["num_kv_groups"] == "1" and book_classes["seed"] == "7"


def test_a_link_naming_a_checkpoint_gives_the_book_classes_the_default_sizes_and_its_other_settings():
    """A checkpoint's link sets its sizes aside (they are the file's): the book's classes start from the defaults',
    with the link's K/V groups where they fit them."""
    sizes = urlstate.book_sizes_of_link({"weights": "bundled model", "layer": "1", "d_in": "32", "num_heads": "2",
                                         "num_kv_groups": "3", "head": "1"})
    assert sizes == {**{key: urlstate.DEFAULTS[key] for key in urlstate.BOOK_SIZES}, "num_kv_groups": 3}


# A typical English text of GPT-2's full 1,024-token context: prose with punctuation and line breaks.
def test_a_1024_token_english_text_is_in_the_link_and_the_url():
    text = english_text()
    assert len(text) > 4000  # far over the 2,000 characters a link once held
    values = {**DEFAULTS, "text": text}
    assert share_query(values)["text"] == text and url_query(values)["text"] == text
    assert link_gives(url_query(values), values)


def test_the_text_is_bounded_by_its_length_in_the_url_not_its_characters():
    assert urlstate.MAX_URL_TEXT_BYTES <= 16 * 1024 - 4096  # h11's 16 KiB request head, 4 KiB left for the rest
    letters = "a" * urlstate.MAX_URL_TEXT_BYTES
    assert share_query({**DEFAULTS, "text": letters})["text"] == letters
    accented = "é" * (urlstate.MAX_URL_TEXT_BYTES // 6)  # %C3%A9: 6 bytes a character
    assert share_query({**DEFAULTS, "text": accented})["text"] == accented
    shown_over = "=" * (urlstate.MAX_URL_TEXT_BYTES // 3 + 1)  # %3D: 12,003 bytes in 64 tokens, all of them shown
    cut_over = "=" * 40_000  # its first 1,024 tokens ("=" × 16 each) still take 49,152 bytes
    for text in (shown_over, cut_over):
        assert "text" not in share_query({**DEFAULTS, "text": text})
        assert "text" not in url_query({**DEFAULTS, "text": text})
        assert not link_gives({}, {**DEFAULTS, "text": text})


@pytest.mark.parametrize("text", [english_text(4445), "a" * (urlstate.MAX_URL_TEXT_BYTES + 1), "日" * 1500,
                                  "x" + "日" * 1500], ids=["english", "letters", "cjk", "cjk cut in a character"])
def test_a_long_paste_puts_the_part_shown_in_the_link_and_the_url(text):
    """A text too long for a URL whose first 1,024 tokens (the most a page shows) fit: the link and the URL hold that
    part, a prefix of the text that tokenizes to those tokens (a character they split kept whole: a token or two
    more), and the URL gives the session's whole text (it is not rewritten on every run)."""
    from attnviz import tokens

    values = {**DEFAULTS, "text": text}
    assert not urlstate.url_text_fits(text)
    shown = share_query(values)["text"]
    assert url_query(values)["text"] == shown and urlstate.url_value("text", text) == shown
    assert urlstate.url_text_fits(shown) and text.startswith(shown) and "\ufffd" not in shown
    ids = tokens.encode(text)
    assert len(ids) > 1024 and tokens.encode(shown)[:1024] == ids[:1024]
    assert len(tokens.encode(shown)) <= 1024 + 3  # a character is at most 4 bytes
    assert link_gives(url_query(values), values) and link_gives(share_query(values), values)
    assert config_from_settings(link_settings(share_query(values))) == config_from_settings(values)


NOT_MHA = {"num_kv_groups": 2, "latent_dim": 40, "sliding_window_size": 9, "positions": "rotary", "rope_base": 500_000}


def at_its_size(changes: dict, variant: str) -> dict:
    """``changes`` with a preset's sizes as the sidebar holds them for ``variant`` (the wrapper's listing at the book
    size: d_out 4, 2 heads × 2)."""
    sizes = urlstate.preset_dims(changes.get("preset", ""), variant)
    return {**changes, **dict(zip(("d_in", "d_out", "num_heads"), sizes))} if sizes else changes


@pytest.mark.parametrize("variant", list(variants.VARIANTS))
@pytest.mark.parametrize("changes", [{}, NOT_MHA, {"preset": "book", "d_in": 3, "d_out": 2, "num_heads": 2},
                                     {"preset": "custom", "d_out": 64, "num_heads": 4, "dropout": 0.3, "seed": 9}],
                         ids=["defaults", "modern settings", "book preset", "custom"])
def test_the_share_link_names_the_settings_that_make_the_view_and_opens_that_view(variant, changes):
    """Every variant: the Share link names each setting that applies to it, also at its default, and none that does
    not (K/V groups for MHA, a window where there is none, the layer of the book's one-layer classes) but where the
    others need it; the link opens the same view (the same AttentionConfig) with the same settings that apply."""
    values = fit_modern({**DEFAULTS, "variant": variant, **at_its_size(changes, variant)})[0]
    link = share_query(values)
    spec, applying = variants.get(variant), urlstate.applying_settings(values)
    assert set(applying) <= set(link)
    opened = link_settings(link)
    assert config_from_settings(opened) == config_from_settings(values)
    assert all(opened[key] == values[key] for key in applying)
    assert "layer" not in link
    set_aside = {key for key in link if spec.not_applicable(key) is not None}  # the book preset's sizes, if any
    assert set_aside <= ({"d_out", "num_heads"} if changes.get("preset") == "book" else set()), link
    if changes is NOT_MHA:
        assert ("num_kv_groups" in link) == (variant == variants.GQA)
        assert ("latent_dim" in link) == (variant == "mla")
        assert ("sliding_window_size" in link) == (variant == "swa")
        assert ("rope_base" in link) == ("positions" in spec.settings)


def test_the_default_share_link_leaves_out_what_multi_head_attention_has_not():
    link = share_query(DEFAULTS)
    assert list(link) == ["text", "weights", "variant", "preset", "d_in", "d_out", "num_heads", "causal", "dropout",
                          "train", "seed", "device", "positions"]
    assert len(urllib.parse.urlencode(link)) < 200, urllib.parse.urlencode(link)


def test_a_checkpoints_share_link_names_its_text_weights_layer_and_mask():
    """A checkpoint decides its sizes, runs in eval mode and is seeded by nothing: its link names what the view is."""
    model = fit_modern({**DEFAULTS, "weights": "bundled model", "layer": 1, "preset": "custom", "d_in": 64,
                        "d_out": 64, "num_heads": 4})[0]
    assert share_query(model) == {"text": DEFAULTS["text"], "weights": "bundled model", "layer": "1",
                                  "causal": "true"}


@pytest.mark.parametrize("variant", list(variants.VARIANTS))
@pytest.mark.parametrize("changes", STATES.values(), ids=STATES)
def test_the_sidebars_config_is_the_one_that_runs(variant, changes):
    """A run settles its config (trace.config holds what ran); the sidebar's config is settled already, so its
    trace's config is the one asked for: one cache key, and the sidebar shows only what the user picked."""
    from attnviz import pipeline

    values = fit_modern({**DEFAULTS, **changes, "variant": variant})[0]
    config = config_from_settings(values)
    settled, notes = pipeline.settle(config)
    assert settled == config and setting_notes(notes) == ()


COMPARE_RUNS = ("d_out", "num_heads", "sliding_window_size")  # Compare: the sidebar's d_out, heads and window W


def test_a_setting_the_book_class_sets_aside_is_left_out_of_the_url_as_of_its_share_link():
    """Four heads, then SelfAttention_v1 (one head, no dropout): the URL says what runs, as the Share link does, and
    the app need not rewrite it; a page that runs the sidebar's heads whatever the class (Compare) names them."""
    values = fit_modern({**DEFAULTS, "preset": "custom", "num_heads": 4, "dropout": 0.3,
                         "variant": "self_attention_v1"})[0]
    query = url_query(values)
    assert query == {"variant": "self_attention_v1", "preset": "custom"}
    assert not {"num_heads", "dropout"} & set(share_query(values))
    assert link_gives(query, values) and link_gives(urlstate.every_setting_query(values), values)
    assert config_from_settings(link_settings(query)) == config_from_settings(values)
    on_compare = url_query(values, also=COMPARE_RUNS)
    assert on_compare["num_heads"] == "4" and share_query(values, also=COMPARE_RUNS)["num_heads"] == "4"
    assert link_settings(on_compare)["num_heads"] == 4
    assert not link_gives(query, values, also=COMPARE_RUNS)  # on Compare the URL without them is rewritten
    back = {**values, "variant": "mha"}  # the session kept them: back on MHA they run, and the URL names them
    assert url_query(back)["num_heads"] == "4"
    learned = fit_modern({**DEFAULTS, "variant": "gqa", "rope_base": 500_000})[0]  # a base for rotary positions
    assert "rope_base" not in url_query(learned)


@pytest.mark.parametrize("also", [(), COMPARE_RUNS], ids=["the class alone", "compare"])
@pytest.mark.parametrize("variant", list(variants.VARIANTS))
@pytest.mark.parametrize("changes", [{}, NOT_MHA, {"preset": "book", "d_in": 3, "d_out": 2, "num_heads": 2},
                                     {"preset": "custom", "d_out": 64, "num_heads": 4, "dropout": 0.3, "seed": 9}],
                         ids=["defaults", "modern settings", "book preset", "custom"])
def test_the_links_the_app_writes_open_the_view_without_a_notice(changes, variant, also):
    """The URL and the Share link open a fresh session on the same view (the same config, the page's other settings
    as they are) with no notice: a size the class sets aside, left out, is not announced as changed."""
    values = fit_modern({**DEFAULTS, "variant": variant, **at_its_size(changes, variant)})[0]
    if changes.get("preset") == "book":
        values.update(seed=variants.get(variant).book_seed, causal=variants.get(variant).book_causal)
    for query in (url_query(values, also), share_query(values, also)):
        opened, notices = settings_from_query(query)
        assert notices == [], query
        assert config_from_settings(opened) == config_from_settings(values)
        assert all(opened[key] == values[key] for key in also), query


def test_a_link_naming_a_preset_and_some_sizes_takes_the_others_from_the_preset():
    """``?preset=book&d_in=3&d_out=2`` (a Share link of SelfAttention_v2 at the book size, which has no heads to name)
    is the book size: its 2 heads, with no notice about GPT-2's 12 that do not divide d_out 2."""
    assert settings_from_query({"preset": "book", "variant": "self_attention_v2", "d_in": "3", "d_out": "2"}) == (
        fit_modern({**DEFAULTS, "preset": "book", "variant": "self_attention_v2", "d_in": 3, "d_out": 2, "num_heads": 2,
                    "causal": False, "seed": 789})[0], [])
    own = settings_from_query({"preset": "gpt2-medium", "num_heads": "8"})[0]  # a size it gives is its own
    assert (own["preset"], own["d_in"], own["d_out"], own["num_heads"]) == ("custom", 1024, 1024, 8)


HEADS = ["L0H0", "L0H1", "L1H0", "L1H1"]


@pytest.mark.parametrize(("raw", "kept", "said"), [
    ("L1H0,L9H9", ["L1H0"], "names 'L9H9', which is not a head (L0H0, L0H1, L1H0, L1H1)"),
    ("L9H9, L1H1,,x,L1H1,L9H9,L0H0", ["L1H1", "L0H0"], "names 'L9H9' and 'x', none of which is a head"),
    ("a,L0H0,b,c,d,e", ["L0H0"], "names 'a', 'b', 'c' and 2 more, none of which is a head"),
])
def test_a_list_naming_options_that_are_not_keeps_the_others_and_names_the_rest(raw, kept, said):
    with pytest.raises(urlstate.PartlyUsedError) as refused:
        urlstate.parse_options(raw, HEADS, what="a head", using="knocking out")
    assert refused.value.kept == kept and said in str(refused.value)
    assert refused.value.instead == f"knocking out {', '.join(kept)} only"


def test_a_list_naming_no_option_is_refused_whole_and_an_empty_one_names_none():
    with pytest.raises(ValueError, match="names 'L9H9', which is not a head") as refused:
        urlstate.parse_options("L9H9,", HEADS, what="a head")
    assert not isinstance(refused.value, urlstate.PartlyUsedError)
    assert urlstate.parse_options("", HEADS, what="a head") == []
    assert urlstate.parse_options("L1H1,L0H0,L1H1", HEADS, what="a head") == ["L1H1", "L0H0"]


def test_a_head_that_a_one_head_layer_has_not_is_refused_in_words():
    """"which has 1 (0)" is cryptic: one head is named as such, and a layer of several heads gives its range."""
    with pytest.raises(ValueError) as one:
        urlstate.parse_head("3", 1)
    assert str(one.value) == "is out of range (this layer's 1 head: 0)"
    with pytest.raises(ValueError) as four:
        urlstate.parse_head("9", 4)
    assert str(four.value) == "is out of range (this layer's 4 heads: 0 … 3)"
    assert urlstate.parse_head("0", 1) == 0


# every whole-number setting of the sidebar a URL gives, with its range (layer: the model's, which the sidebar names)
INTEGER_SETTINGS = {"d_in": (1, MAX_DIM), "d_out": (1, MAX_DIM),
                    "num_heads": (1, MAX_HEADS), "seed": (0, MAX_SEED), "num_kv_groups": (1, MAX_HEADS),
                    "latent_dim": (1, MAX_DIM), "sliding_window_size": (1, MAX_CONTEXT_LENGTH),
                    "attention": (1, MAX_ATTENTIONS)}  # a module's: its own count is the sidebar's to check
OUTSIDE = ("-" + "9" * 400, "9" * 5000)  # whole numbers out of any range (the last past the digits int() reads)
NOT_WHOLE = ("2.5", "1e3", "abc", "", "9" * 20 + ".5")


def quoted_back(raw: str) -> str:
    """A URL's value as a notice quotes it: whole up to 20 characters, else its first 20 and "…" — a number, a page's
    cell or random GPT and a checkpoint's layer alike."""
    return repr(raw if len(raw) <= 20 else raw[:20] + "…")


def test_every_whole_number_setting_is_listed():
    """A setting whose parser takes "1" as the int 1 is a whole-number setting (rope_base: a choice of two)."""
    parsers = urlstate._parsers()
    integers = {key for key, parse in parsers.items() if key not in ("rope_base", "layer") and _parses_one(parse)}
    assert integers == set(INTEGER_SETTINGS)


def test_a_layer_is_a_whole_number_and_one_past_the_book_classes_is_named_in_few_digits():
    """A layer's range is the model's: the sidebar names its layers (tests/ui/test_checkpoint_app.py)."""
    for raw, words in (("x", "it is not a whole number"), ("9" * 5000, "it is out of range (far too many digits)")):
        assert settings_from_query({"layer": raw})[1] == [f"Ignored URL parameter layer={quoted_back(raw)}: {words}."]
    (notice,) = settings_from_query({"layer": "9" * 400})[1]
    assert notice.startswith(f"Ignored URL parameter layer='{'9' * 20}…': the book's classes are one attention layer")


def test_a_links_attention_for_the_books_classes_or_a_checkpoint_is_named_and_attention_1_shown():
    """Only a module of the user's computes several attentions: the book's classes compute one, and a checkpoint's
    attentions are its layers (tests/ui/test_user_module_app.py: a module's attention out of its range)."""
    for query in ({"attention": "2"}, {"attention": "2", "variant": "gqa"}):
        values, notices = settings_from_query(query)
        assert values["attention"] == 1
        assert notices == ["Ignored URL parameter attention='2': it picks one of the attentions of a module of yours "
                           "(--module); the book's classes compute one, and a checkpoint's attentions are its layers "
                           "(Layer); showing attention 1."]
    assert settings_from_query({"attention": "1"}) == (DEFAULTS, [])


def test_every_notice_about_a_url_parameter_the_app_does_not_use_is_worded_one_way():
    """One parameter or several (a checkpoint's link), a value or a name alone: each value quoted by its first 20
    characters, "parameters" for several, the reason after a colon (a notice quoted one value and not the next)."""
    assert ignored([("head", "9")], "it is out of range; showing head 0.") == \
        "Ignored URL parameter head='9': it is out of range; showing head 0."
    assert ignored([("variant", "gqa"), ("num_kv_groups", "2")], "the checkpoint runs its own.") == \
        "Ignored URL parameters variant='gqa', num_kv_groups='2': the checkpoint runs its own."
    assert ignored([("qkv_bias", None)], "no such setting.") == "Ignored URL parameter qkv_bias: no such setting."
    assert ignored([("layer", 10 ** 399)], "one layer.") == \
        f"Ignored URL parameter layer='{'1' + '0' * 19}…': one layer."
    notices = settings_from_query({"num_heads": "7", "layer": "1", "qkv_bias": "1", "seed": "x"})[1]
    assert [notice.split(":")[0] for notice in notices] == [
        "Ignored URL parameter qkv_bias", "Ignored URL parameter seed='x'", "Ignored URL parameter layer='1'",
        "Ignored URL parameter num_heads='7'"]

def _parses_one(parse) -> bool:
    try:
        value = parse("1")
    except ValueError:
        return False
    return type(value) is int


@pytest.mark.parametrize("key", INTEGER_SETTINGS)
def test_a_setting_out_of_range_says_so_and_one_not_whole_says_that(key):
    """A whole number outside the range is out of range, not "not a whole number"; a value that is not a whole number
    says that; either leaves the setting at its default."""
    low, high = INTEGER_SETTINGS[key]
    span = f"{low} … {high:,}"
    for raw in (*OUTSIDE, str(low - 1), str(high + 1), f"+{high * 10}", f" {low - 7} "):
        values, notices = settings_from_query({key: raw})
        assert notices == [f"Ignored URL parameter {key}={quoted_back(raw)}: it is out of range ({span})."], notices
        assert values[key] == DEFAULTS[key]
    for raw in NOT_WHOLE:
        values, notices = settings_from_query({key: raw})
        assert notices == [f"Ignored URL parameter {key}={quoted_back(raw)}: it is not a whole number ({span})."], \
            notices


def test_a_settings_whole_number_is_read_as_its_number_box_reads_it():
    """The sidebar's number boxes read ``1,000``, ``1 000`` and ``1_000`` as 1000 (``ui.number_box.box_number``): a
    link's whole number is read by the same rule (``urlstate.whole_digits``)."""
    from attnviz.ui.number_box import box_number

    parse = urlstate._parsers()["d_in"]
    for raw in ("1,000", "1 000", " 1_000 ", "+1000"):
        assert parse(raw) == box_number(raw) == 1000
    for raw in ("1.000", "1e3", "10 00.5", "1,0x", "1,5", "1 2", "10,00", "1,000_000", "1000,000", ",100", "+ 100"):
        assert box_number(raw) is None
        with pytest.raises(ValueError, match="not a whole number"):
            parse(raw)


PAGE_NUMBERS = [  # every page's whole-number parameter: its parser as its page builds it, and its range's words
    ("new_tokens", lambda raw: urlstate.parse_number(raw, 1, 1024, what="new tokens"), "new tokens: 1 … 1,024"),
    ("head", lambda raw: urlstate.parse_head(raw, 12), "this layer's 12 heads: 0 … 11"),
    ("head", lambda raw: urlstate.parse_head(raw, 1), "this layer's 1 head: 0"),
    ("row", lambda raw: urlstate.parse_window_start(raw, 360, 256), "window positions for 360 tokens: 0 … 104"),
    ("T", lambda raw: urlstate.parse_number(raw, 2, 512, what="the repeat lengths the lab offers for this model"),
     "the repeat lengths the lab offers for this model: 2 … 512"),
    ("step", lambda raw: urlstate.parse_number(raw, 0, 12, what="this generation's steps"),
     "this generation's steps: 0 … 12"),
]


@pytest.mark.parametrize(("name", "parse", "span"), PAGE_NUMBERS,
                         ids=[f"{row[0]}-{i}" for i, row in enumerate(PAGE_NUMBERS)])
def test_a_page_number_out_of_range_says_so_and_one_not_whole_says_that(name, parse, span):
    """A page's number out of range (/generate?new_tokens=99999) is "out of range" with the page's span, not "not a
    whole number"; one that is not a whole number says that."""
    for raw in ("-1", "99999", *OUTSIDE):
        with pytest.raises(ValueError) as refused:
            parse(raw)
        assert str(refused.value) == f"is out of range ({span})"
    for raw in NOT_WHOLE:
        with pytest.raises(ValueError) as refused:
            parse(raw)
        assert str(refused.value) == f"is not a whole number ({span})"


def test_a_cell_past_the_map_is_out_of_range_and_one_not_two_whole_numbers_is_not_a_cell():
    for raw in ("9,2", "2,-1", "5,5"):
        with pytest.raises(ValueError) as refused:
            urlstate.parse_cell(raw, 5)
        assert str(refused.value) == "is out of range (this 5-token map's cells, query,key: 0 … 4 each)"
    for raw in ("2.5,1", "a,b", "3", "1,2,3"):
        with pytest.raises(ValueError) as refused:
            urlstate.parse_cell(raw, 5)
        assert str(refused.value) == "is not a cell of this 5-token map, written query,key (0 … 4 each)"
    with pytest.raises(ValueError, match="^moves no window: 6 tokens are drawn whole"):
        urlstate.parse_window_start("7", 6, 256)
    with pytest.raises(ValueError, match=r"^is not a whole number \(window positions for 6 tokens: 0\)"):
        urlstate.parse_window_start("x", 6, 256)


def second_trained_name(steps: int, seed: int, done: int, monkeypatch) -> str:
    """The weights option of a session's second Train-page run of ``steps`` steps and ``seed`` that ran ``done``
    steps, named as the Train page names it (``live_train.run_name``) and the sidebar lists it (" (2)" after the
    first's name: ``weights.register_session_model``)."""
    from helpers.checkpoints import own_session_models

    from attnviz.labs import live_train
    from attnviz.labs.train import History
    from attnviz.models import GPTModel

    own_session_models(monkeypatch)
    tiny = GPTModel({"vocab_size": 8, "context_length": 4, "emb_dim": 4, "n_heads": 1, "n_layers": 1,
                     "drop_rate": 0.0, "qkv_bias": False})
    run = live_train.TrainedRun(cfg=live_train.page_config(steps, seed), model=tiny,
                                history=History(steps=list(range(done))), before=None, after=None)
    for _ in range(2):
        option = weights.register_session_model("a session", live_train.run_name(run), tiny)
    return option.name


@pytest.mark.parametrize(("done", "said"), [
    (420, "1,000 steps, seed 3: the same seed gives the same run; it was stopped at step 420"),
    (1000, "1,000 steps, seed 3: the same seed gives the same run"),
])
def test_a_link_to_a_model_trained_elsewhere_says_what_happened_and_what_to_do_in_one_notice(done, said, monkeypatch):
    """A trained model's link names its weights and layer; where the session has no model of that name, one notice
    says why the book's classes open and how to get the model (not a second one about the book's single layer): its
    steps and seed, read from the name the Train page gives it."""
    name = second_trained_name(1000, 3, done, monkeypatch)
    values, notices = settings_from_query({"weights": name, "layer": "1", "text": "Mine"})
    assert (values["weights"], values["layer"], values["text"]) == ("book", 0, "Mine")
    assert notices == [
        f"Ignored URL parameter weights={name!r}: a model trained on the Train page stays in the browser "
        "session, on the server, that trained it, so the book's classes open instead. To see it here, train it on the "
        f"Train page ({said}), or ask for its zip (Download the trained model (zip)) and start the app with "
        "--checkpoint on its folder."]
