"""Text a run accepts: truncation to the context and to MAX_CHARS with notes, empty text, non-strings, hostile
text (special tokens, control characters, lone surrogates, any Unicode) — a clear note or error, never a crash."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers.runs import TEXT, setting_notes, small
from helpers.texts import HOSTILE_TEXTS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnviz import tokens
from attnviz.config import MAX_CHARS, ConfigError, EmptyTextError, InputError
from attnviz.pipeline import run

SMALL = small(device="auto")  # the device the app picks

# ============================== text bounds ==============================


def test_more_than_1024_tokens_are_truncated_with_a_note():
    text = "one two three four five six seven eight nine ten " * 120  # 1,201 tokens
    assert len(tokens.encode(text)) > 1024
    trace = run(text, small(context_length=1024))
    assert trace.n == 1024
    assert trace.token_ids == tuple(tokens.encode(text)[:1024])
    assert trace.steps["weights"].shape == (1, 2, 1024, 1024)
    assert len(trace.notes) == 1
    assert re.search(r"\b1,?024\b", trace.notes[0])
    assert re.search(r"\b1,?201\b", trace.notes[0])  # and how many there were


def test_context_length_bounds_the_tokens():
    trace = run(TEXT, small(context_length=5))
    assert trace.n == 5
    assert trace.token_ids == tuple(tokens.encode(TEXT)[:5])
    assert any("first 5 " in note for note in trace.notes)


def test_more_than_max_chars_gives_a_note():
    text = "ab " * (MAX_CHARS // 3 + 10)
    assert len(text) > MAX_CHARS
    trace = run(text, small(context_length=16))
    assert trace.text == text[: MAX_CHARS]
    assert trace.n == 16
    assert any(re.search(r"40,?000 characters", note) for note in trace.notes)


def test_huge_paste_is_bounded_before_tokenizing_with_a_notice():
    text = "x" * 100_000
    trace = run(text, SMALL)
    assert len(trace.text) == MAX_CHARS
    assert any("40,000 characters" in note for note in trace.notes)


@pytest.mark.parametrize("text", ["", " ", "   \n\t  ", "\u3000\u2003"])
def test_empty_or_whitespace_text_raises_a_helpful_error(text):
    with pytest.raises(EmptyTextError, match=r"(?i)type some text.*empty or only whitespace"):
        run(text, small())


def test_error_classes_are_value_errors():
    assert issubclass(EmptyTextError, ValueError)
    assert issubclass(ConfigError, ValueError)
    assert issubclass(EmptyTextError, InputError)
    assert issubclass(ConfigError, InputError)


def test_non_string_text_is_an_input_error():
    with pytest.raises(InputError, match="must be a string, got bytes"):
        run(b"bytes", small())


# ============================== hostile text ==============================


@pytest.mark.parametrize(
    "text",
    [
        "Hello <|endoftext|> world",
        "<|endoftext|>",
        "emoji 😀🦙👩‍👩‍👧 and €",
        "NUL \x00 inside",
        "right-to-left \u202eoverride\u202c here",
        "<script>alert('x')</script><b>bold</b> &amp; <!-- -->",
        "\u200b",
        "日本語とעברית mixed",
        "line\r\nbreaks\n\n\ttabs",
    ],
)
@pytest.mark.parametrize("variant", ["mha", "simplified"])
def test_hostile_text_runs(variant, text):
    trace = run(text, small(variant))
    ids = tokens.encode(text)
    assert trace.token_ids == tuple(ids)
    assert trace.text == text
    assert setting_notes(trace.notes) == ()
    assert len(trace.tokens) == trace.n == len(ids)
    assert all("\ufffd" not in piece for piece in trace.tokens)
    assert [t.special for t in trace.token_details] == [i == tokens.ENDOFTEXT_ID for i in ids]
    assert np.all(np.isfinite(trace.output))
    assert np.allclose(trace.steps["weights"].sum(-1), 1.0, atol=1e-5)


def test_endoftext_is_one_special_token_in_the_trace():
    trace = run("Hello <|endoftext|> world", small())
    assert trace.token_ids.count(50256) == 1
    assert "<|endoftext|>" in trace.tokens
    assert [t.special for t in trace.token_details].count(True) == 1


@pytest.mark.parametrize("text", ["a\ud800b", "\udfff", "ok \ud83d text"])
def test_lone_surrogates_run_with_a_note(text):
    trace = run(text, small())
    assert trace.text == text.encode("utf-8", "replace").decode("utf-8")
    assert "?" in trace.text
    assert trace.token_ids == tuple(tokens.encode(trace.text))
    assert len(trace.notes) == 1
    assert "surrogate" in trace.notes[0]


@pytest.mark.parametrize("text", HOSTILE_TEXTS.values(), ids=HOSTILE_TEXTS.keys())
def test_pipeline_runs_on_hostile_text(text):
    trace = run(text, SMALL)
    assert 1 <= trace.n <= SMALL.context_length
    assert tokens.decode(list(trace.token_ids)) == text[: len(tokens.decode(list(trace.token_ids)))]
    assert all("\ufffd" not in piece for piece in trace.tokens)
    assert np.isfinite(trace.output).all()


def test_control_characters_are_shown_visibly():
    pieces = "".join(run("a\x00b\x1bc\u200b", SMALL).tokens)
    assert "\\x00" in pieces and "\\x1b" in pieces and "\\u200b" in pieces
    assert "\x00" not in pieces and "\x1b" not in pieces


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=200))
def test_any_unicode_gives_a_trace_or_a_plain_input_error(text):
    """Including lone surrogates: never an exception other than InputError."""
    try:
        trace = run(text, SMALL)
    except InputError as exc:
        assert str(exc)
        assert not text.strip()
        return
    assert trace.n >= 1
    assert np.isfinite(trace.steps["weights"]).all()


def test_lone_surrogates_are_replaced_with_a_note():
    trace = run("ok \ud800 fine", SMALL)
    assert any("surrogate" in note for note in trace.notes)
