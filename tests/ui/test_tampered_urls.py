"""Tampered URL values — wrong types, out of range, non-dividing heads, unknown variants, devices or parameters —
are ignored with a notice in plain words and the default in their place; the app draws the default view with one
box of notices, which stays until a setting is changed, and an empty text in the URL is a plain message."""

from __future__ import annotations

import re

import pytest
from helpers.apptest import APP, TIMEOUT, no_exception, open_app, plotly_figures
from streamlit.testing.v1 import AppTest

from attnviz import ui
from attnviz.config import available_devices


def _app() -> AppTest:
    return AppTest.from_file(str(APP), default_timeout=TIMEOUT)


TAMPERED = {
    "layer": ["99", "3", "-1", "x"],  # the book's classes (the default weights) are one layer
    "num_heads": ["7", "abc", "0", "100000", "-4", "1e3"],
    "d_in": ["-1", "0", "99999", "3.5", "nan"],
    "d_out": ["0", "x", "5000"],
    "dropout": ["5", "-0.1", "nan", "inf", "one"],
    "seed": ["-3", "1e99", "99999999999999999999", ""],
    "variant": ["nope", "<script>alert(1)</script>", "MHA"],
    "device": ["cuda", "tpu", "mps"],
    "causal": ["maybe", "2"],
    "train": ["yes please"],
    "preset": ["gpt5", "[x](javascript:1)"],
}


@pytest.mark.parametrize(("key", "raw"), [(k, v) for k, values in TAMPERED.items() for v in values])
def test_tampered_url_values_are_ignored_with_a_notice(key, raw):
    values, notices = ui.settings_from_query({key: raw})
    if key == "device" and raw in available_devices():
        pytest.skip("device present on this machine")
    assert any(key in notice for notice in notices)
    assert values[key] == ui.DEFAULTS[key]
    ui.config_from_settings(values).validate()  # what remains is always a valid view


PYTHON_ERROR_TEXT = re.compile(r"invalid literal|could not convert|base 10|Exceeds the limit|digits")


@pytest.mark.parametrize(("key", "raw"), [(k, v) for k, values in TAMPERED.items() for v in values])
def test_tampered_url_notices_are_plain_words_not_python_errors(key, raw):
    notices = " ".join(ui.settings_from_query({key: raw})[1])
    assert not PYTHON_ERROR_TEXT.search(notices), notices


@pytest.mark.parametrize(("key", "raw", "says"), [
    ("num_heads", "abc", "it is not a whole number"),
    ("seed", "1e3", "it is not a whole number"),
    ("rope_base", "x", "it is not a whole number"),
    ("layer", "x", "it is not a whole number"),
    ("seed", "9" * 5000, "it is out of range (0 … 4,294,967,295)"),
    ("dropout", "one", "it is not a number"),
    ("causal", "maybe", "it is not true or false"),
    ("preset", "gpt5", "choose one of"),
])
def test_a_value_that_does_not_parse_is_named_in_words(key, raw, says):
    values, notices = ui.settings_from_query({key: raw})
    shown = raw if len(raw) <= 20 else raw[:20] + "…"  # a long value is quoted by its first 20 characters
    assert len(notices) == 1 and notices[0].startswith(f"Ignored URL parameter {key}={shown!r}: {says}"), notices
    assert values[key] == ui.DEFAULTS[key]


def test_d_out_the_default_heads_do_not_divide_is_named_with_the_heads_used():
    values, notices = ui.settings_from_query({"d_out": "5"})
    assert (values["d_out"], values["num_heads"]) == (5, 5)  # d_out wins; the heads fall back to a divisor
    assert notices == ["URL parameter d_out=5: the default 12 heads do not divide it; using 5 heads."]
    assert not any("num_heads" in notice for notice in notices)  # the URL has no num_heads


def test_url_heads_that_do_not_divide_d_out_are_ignored_with_the_heads_used():
    values, notices = ui.settings_from_query({"num_heads": "7"})
    assert values["num_heads"] == 12
    assert notices == ["Ignored URL parameter num_heads='7': it does not divide d_out 768; using 12 heads."]
    values, notices = ui.settings_from_query({"num_heads": "7", "d_out": "10"})
    assert (values["d_out"], values["num_heads"]) == (10, 10)
    assert notices == ["Ignored URL parameter num_heads='7': it does not divide d_out 10; using 10 heads."]


def test_url_sizes_that_are_no_presets_show_the_custom_size():
    """A link with its own sizes (``?d_in=1&d_out=1&num_heads=1``) that are no preset's gives the custom size, as
    when the sizes are edited in the sidebar, never "GPT-2 small (768, 12 heads)" above d_in 1; a preset's own sizes
    give that preset."""
    assert ui.settings_from_query({"d_in": "1", "d_out": "1", "num_heads": "1"})[0]["preset"] == "custom"
    assert ui.settings_from_query({"d_out": "10"})[0]["preset"] == "custom"  # the heads fall back to 10 too
    assert ui.settings_from_query({"preset": "gpt2-medium", "num_heads": "8"})[0]["preset"] == "custom"
    assert ui.settings_from_query({"preset": "gpt2-medium"})[0]["preset"] == "gpt2-medium"  # its own sizes
    assert ui.settings_from_query({"preset": "book", "variant": "self_attention_v1"})[0]["preset"] == "book"
    assert ui.settings_from_query({"d_in": "768", "num_heads": "12"})[0]["preset"] == "gpt2-small"


def test_an_ignored_url_value_earns_no_second_notice_about_the_default_in_its_place():
    values, notices = ui.settings_from_query({"variant": "mla", "d_out": "13", "latent_dim": "abc"})
    assert values["latent_dim"] <= 13
    assert not any("latent_dim=96" in notice for notice in notices), notices
    assert any("latent_dim='abc'" in notice for notice in notices)
    values, notices = ui.settings_from_query({"variant": "mla", "d_out": "13", "latent_dim": "96"})
    assert any("latent_dim=96 is wider than d_out 13" in notice for notice in notices)  # the URL's own value


def test_unknown_url_parameters_are_one_notice():
    values, notices = ui.settings_from_query({f"p{i}": "1" for i in range(50)})
    assert notices == ["Ignored 50 unknown URL parameters: 'p0', 'p1', 'p2', 'p3', 'p4' and 45 more."]
    assert ui.settings_from_query({"bogus": "1"})[1] == ["Ignored unknown URL parameter 'bogus'."]


def test_tampered_url_renders_the_default_view_with_one_box_of_notices():
    at = _app()
    for key, values in TAMPERED.items():
        at.query_params[key] = values[0]
    for i in range(50):
        at.query_params[f"unknown{i}"] = "1"
    at.run()
    assert not at.exception
    assert len(at.main.warning) == 1
    box = at.main.warning[0].value.replace("\\", "")  # Markdown-escaped
    for key in (*TAMPERED, "50 unknown URL parameters"):
        assert key in box
    assert plotly_figures(at)


def test_the_urls_notices_stay_until_a_setting_is_changed():
    at = open_app(num_heads="7", bogus="1")
    assert len(at.main.warning) == 1
    at.run()  # another run of the page (a click on a map, a page switch) keeps them
    assert len(at.main.warning) == 1 and "bogus" in at.main.warning[0].value
    at.sidebar.toggle(key="causal").set_value(False).run()
    no_exception(at)
    assert len(at.main.warning) == 0


def test_empty_text_in_the_url_is_a_plain_message():
    at = _app()
    at.query_params["text"] = ""
    at.run()
    assert not at.exception
    assert any("Type some text" in w.value for w in at.warning)
