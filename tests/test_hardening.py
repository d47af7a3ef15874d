"""Hostile input, tampered URLs, determinism: attnviz never shows a traceback and never loses text."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.apptest import plotly_figures
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from attnviz import config as config_module
from attnviz import pipeline, tokens, ui
from attnviz.config import MAX_CHARS, AttentionConfig, InputError, available_devices
from attnviz.producers import book
from attnviz.views import figures

ROOT = Path(__file__).resolve().parents[1]
SMALL = AttentionConfig(d_in=8, d_out=8, num_heads=2, context_length=64)

HOSTILE_TEXTS = {
    "html": "<img src=x onerror=alert(1)><script>alert(2)</script><b>bold</b>",
    "markdown": "# Title **bold** [link](javascript:alert(1)) `code` $x^2$ :red[red]",
    "endoftext": "a<|endoftext|>b<|endoftext|>",
    "other specials": "<|fim_prefix|><|im_start|>user<|im_end|>",
    "control": "nul\x00bell\x07esc\x1b[31mred\x7f",
    "rtl": "abc\u202edcba\u202c \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627",
    "zero width": "a\u200bb\u200cc\u200dd\ufeffe",
    "emoji": "👩‍👩‍👧‍👦 🏳️‍🌈 👍🏽 🇺🇦",
    "whitespace runs": " \n\n\t\t   x   \r\n",
    "long": "word " * 3000,
}


@pytest.mark.parametrize("text", HOSTILE_TEXTS.values(), ids=HOSTILE_TEXTS.keys())
def test_pipeline_runs_on_hostile_text(text):
    trace = pipeline.run(text, SMALL)
    assert 1 <= trace.n <= SMALL.context_length
    assert tokens.decode(list(trace.token_ids)) == text[: len(tokens.decode(list(trace.token_ids)))]
    assert all("\ufffd" not in piece for piece in trace.tokens)
    assert np.isfinite(trace.output).all()


def test_control_characters_are_shown_visibly():
    pieces = "".join(pipeline.run("a\x00b\x1bc\u200b", SMALL).tokens)
    assert "\\x00" in pieces and "\\x1b" in pieces and "\\u200b" in pieces
    assert "\x00" not in pieces and "\x1b" not in pieces


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=200))
def test_any_unicode_gives_a_trace_or_a_plain_input_error(text):
    """Including lone surrogates: never an exception other than InputError."""
    try:
        trace = pipeline.run(text, SMALL)
    except InputError as exc:
        assert str(exc)
        assert not text.strip()
        return
    assert trace.n >= 1
    assert np.isfinite(trace.steps["weights"]).all()


def test_lone_surrogates_are_replaced_with_a_note():
    trace = pipeline.run("ok \ud800 fine", SMALL)
    assert any("surrogate" in note for note in trace.notes)


def test_huge_paste_is_bounded_before_tokenizing_with_a_notice():
    text = "x" * 100_000
    trace = pipeline.run(text, SMALL)
    assert len(trace.text) == MAX_CHARS
    assert any("40,000 characters" in note for note in trace.notes)


@pytest.mark.parametrize("payload", ["<img src=x onerror=alert(1)>", "<script>alert(1)</script>", "\"'><svg/onload=1>"])
def test_html_that_reaches_unsafe_renderers_is_escaped(payload):
    """st.html (token chips) and Plotly labels (which render some HTML) get escaped text."""
    trace = pipeline.run(payload, SMALL)
    chips = figures.token_chips_html(trace.tokens, trace.token_ids, [False] * trace.n)
    for dangerous in ("<img", "<script", "<svg", "onerror=alert", "\"'>"):
        assert dangerous not in chips
    labels = " ".join(figures.position_labels(trace.tokens))
    assert "<" not in labels and ">" not in labels


def test_no_unsafe_allow_html_anywhere():
    sources = [*ROOT.glob("attnviz/*.py"), *ROOT.glob("pages/*.py"), ROOT / "app.py"]
    offenders = [path.name for path in sources if "unsafe_allow_html=True" in path.read_text()]
    assert offenders == []


def test_markdown_escape_defuses_links_and_html():
    escaped = ui.markdown_escape("[a](javascript:alert(1)) **b** <img src=x>")
    assert re.search(r"(?<!\\)[\[\]()*<>]", escaped) is None  # every special character is escaped
    assert escaped.replace("\\", "") == "[a](javascript:alert(1)) **b** <img src=x>"


def _app() -> AppTest:
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)


@pytest.mark.parametrize("page", ["pages/heads.py", "pages/steps.py", "pages/shapes.py", "pages/tokens.py",
                                  "pages/compare.py", "pages/pitfalls.py", "pages/induction.py", "pages/train.py",
                                  "pages/benchmark.py"])
def test_every_page_survives_hostile_text_and_keeps_it(page):
    at = _app().run()
    at.switch_page(page).run()
    for name, text in HOSTILE_TEXTS.items():
        if page == "pages/train.py":  # its sidebar has no text: the text is typed on Heads and kept across Train
            at.switch_page("pages/heads.py").run()
            at.sidebar.text_area(key="text").set_value(text).run()
            at.switch_page(page).run()
            assert not at.exception, (name, [e.value for e in at.exception])
            at.switch_page("pages/heads.py").run()
        else:
            at.sidebar.text_area(key="text").set_value(text).run()
        assert not at.exception, (name, [e.value for e in at.exception])
        assert at.sidebar.text_area(key="text").value == text, name


@pytest.mark.parametrize("page", ["pages/heads.py", "pages/shapes.py", "pages/compare.py", "pages/pitfalls.py"])
def test_a_single_token_is_one_token_in_the_pages_caption(page):
    at = _app().run()
    at.switch_page(page).run()
    at.sidebar.text_area(key="text").set_value("x").run()
    assert not at.exception, [e.value for e in at.exception]
    captions = [c.value for c in at.caption]
    assert any("1 token " in c for c in captions) and not any("1 tokens" in c for c in captions), captions


@pytest.mark.parametrize("page", ["pages/heads.py", "pages/steps.py", "pages/tokens.py", "pages/induction.py"])
def test_pages_with_the_bundled_model_survive_hostile_text_and_keep_it(page):
    """The same hostile texts through a trained GPTModel (the bundled model): a view or a plain message."""
    from attnviz import weights

    at = _app().run()
    at.sidebar.selectbox(key="weights").set_value(weights.BUNDLED_NAME).run()
    at.switch_page(page).run()
    assert at.sidebar.selectbox(key="weights").value == weights.BUNDLED_NAME
    for name, text in HOSTILE_TEXTS.items():
        at.sidebar.text_area(key="text").set_value(text).run()
        assert not at.exception, (name, [e.value for e in at.exception])
        assert at.sidebar.text_area(key="text").value == text, name


@pytest.mark.parametrize("tab", ["Knock out this head", "‖weight × value‖", "Rollout, logit lens"])
def test_what_this_attention_does_survives_hostile_text_and_a_single_token(tab):
    """The Heads page's knock-out section, opened on each tab, through the bundled model: one token (no position to
    choose) and the hostile texts."""
    from attnviz import weights

    at = _app().run()
    at.sidebar.selectbox(key="weights").set_value(weights.BUNDLED_NAME).run()
    at.session_state["heads_what"] = True
    at.session_state["heads_what_tab"] = tab
    for name, text in {"one token": "x", **HOSTILE_TEXTS}.items():
        at.sidebar.text_area(key="text").set_value(text).run()
        assert not at.exception, (name, [e.value for e in at.exception])
        assert at.sidebar.text_area(key="text").value == text, name
        if name == "one token":
            assert any("(position 0)" in c.value for c in at.caption)  # the section ran, with no slider
        if tab == "Knock out this head":  # the open tab drew what it shows
            assert any("log-probability of" in m.label for m in at.metric), name
        elif tab == "‖weight × value‖":
            assert any(f["layout"]["title"]["text"].endswith("‖weight × value‖") for f in plotly_figures(at)), name
        else:
            assert any("after block 0" in list(d.value.index) for d in at.dataframe), name


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
    ("seed", "9" * 5000, "it is far too large"),
    ("dropout", "one", "it is not a number"),
    ("causal", "maybe", "it is not true or false"),
    ("preset", "gpt5", "choose one of"),
])
def test_a_value_that_does_not_parse_is_named_in_words(key, raw, says):
    values, notices = ui.settings_from_query({key: raw})
    assert len(notices) == 1 and notices[0].startswith(f"Ignored URL parameter {key}={raw[:40]!r}: {says}"), notices
    assert values[key] == ui.DEFAULTS[key]


def test_d_out_the_default_heads_do_not_divide_is_named_with_the_heads_used():
    values, notices = ui.settings_from_query({"d_out": "5"})
    assert (values["d_out"], values["num_heads"]) == (5, 5)  # d_out wins; the heads fall back to a divisor
    assert notices == ["URL parameter d_out=5: the default 12 heads do not divide it; using 5 heads."]
    assert not any("num_heads" in notice for notice in notices)  # the URL has no num_heads


def test_url_heads_that_do_not_divide_d_out_are_ignored_with_the_heads_used():
    values, notices = ui.settings_from_query({"num_heads": "7"})
    assert values["num_heads"] == 12
    assert notices == ["Ignored URL parameter num_heads=7: it does not divide d_out 768; using 12 heads."]
    values, notices = ui.settings_from_query({"num_heads": "7", "d_out": "10"})
    assert (values["d_out"], values["num_heads"]) == (10, 10)
    assert notices == ["Ignored URL parameter num_heads=7: it does not divide d_out 10; using 10 heads."]


def test_url_sizes_that_are_no_presets_show_the_custom_size():
    """A link with its own sizes (``?d_in=1&d_out=1&num_heads=1``) named no preset, yet the sidebar's Model size said
    "GPT-2 small (768, 12 heads)" above d_in 1: the size is custom, as when the sizes are edited in the sidebar."""
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
    assert len(at.sidebar.warning) == 1
    box = at.sidebar.warning[0].value.replace("\\", "")  # Markdown-escaped
    for key in (*TAMPERED, "50 unknown URL parameters"):
        assert key in box
    assert plotly_figures(at)


def test_empty_text_in_the_url_is_a_plain_message():
    at = _app()
    at.query_params["text"] = ""
    at.run()
    assert not at.exception
    assert any("Type some text" in w.value for w in at.warning)


def _digest(trace) -> str:
    digest = hashlib.sha256()
    for name in sorted(trace.steps):
        digest.update(np.ascontiguousarray(trace.steps[name]).tobytes())
    digest.update(trace.output.tobytes())
    return digest.hexdigest()


DETERMINISM_CONFIG = AttentionConfig(d_in=16, d_out=16, num_heads=4, dropout=0.3, train=True, seed=7, context_length=32)


def test_dropout_masks_are_reproducible_from_the_seed():
    first = pipeline.run("the same text twice", DETERMINISM_CONFIG)
    book._seeded_module.cache_clear()
    second = pipeline.run("the same text twice", DETERMINISM_CONFIG)
    assert _digest(first) == _digest(second)
    other = pipeline.run("the same text twice", dataclasses.replace(DETERMINISM_CONFIG, seed=8))
    assert not np.array_equal(first.steps["dropped"] == 0, other.steps["dropped"] == 0)


def test_arrays_are_bitwise_identical_across_processes():
    script = (
        "import json,hashlib,numpy as np\n"
        "from attnviz import pipeline\n"
        "from attnviz.config import AttentionConfig\n"
        f"cfg = AttentionConfig(**{dataclasses.asdict(DETERMINISM_CONFIG)!r})\n"
        "t = pipeline.run('the same text twice', cfg)\n"
        "d = hashlib.sha256()\n"
        "[d.update(np.ascontiguousarray(t.steps[k]).tobytes()) for k in sorted(t.steps)]\n"
        "d.update(t.output.tobytes())\n"
        "print(d.hexdigest())\n"
    )
    runs = {subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
            .stdout.strip() for _ in range(2)}
    assert runs == {_digest(pipeline.run("the same text twice", DETERMINISM_CONFIG))}


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="no CUDA device on this machine")
def test_cpu_and_cuda_agree():
    text = "Your journey starts with one step"
    cpu = pipeline.run(text, dataclasses.replace(DETERMINISM_CONFIG, train=False, device="cpu"))
    gpu = pipeline.run(text, dataclasses.replace(DETERMINISM_CONFIG, train=False, device="cuda"))
    assert np.allclose(cpu.output, gpu.output, atol=1e-5)


def test_missing_device_falls_back_to_cpu_with_a_notice(monkeypatch):
    monkeypatch.setattr(config_module, "available_devices", lambda: ["auto", "cpu"])
    trace = pipeline.run("hello", dataclasses.replace(SMALL, device="cuda"))
    assert trace.device == "cpu"
    assert any("CUDA is not available" in note for note in trace.notes)


def test_cuda_out_of_memory_falls_back_to_cpu_with_a_notice(monkeypatch):
    import torch

    monkeypatch.setattr(config_module, "available_devices", lambda: ["auto", "cpu", "cuda"])
    real_forward = book._forward

    def forward(input_embeddings, config, device):
        if device == "cuda":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 48.00 GiB")
        return real_forward(input_embeddings, config, device)

    monkeypatch.setattr(book, "_forward", forward)
    trace = pipeline.run("hello", dataclasses.replace(SMALL, device="cuda"))
    assert trace.device == "cpu"
    assert any("out of memory" in note for note in trace.notes)


# ============================== memory tuning: explicit, guarded, opt-out ==============================


def test_malloc_tuning_is_explicit_and_can_be_switched_off(monkeypatch):
    import ctypes

    from attnviz.ui import memory

    monkeypatch.setattr(memory, "_malloc_trim", memory._no_trim)
    opened = []
    monkeypatch.setattr(ctypes, "CDLL", lambda name: opened.append(name))
    monkeypatch.setenv("ATTNVIZ_NO_MALLOC_TUNING", "1")
    assert memory.tune_memory() is False and opened == []  # opted out: libc is never touched
    monkeypatch.delenv("ATTNVIZ_NO_MALLOC_TUNING")
    monkeypatch.setattr(memory.sys, "platform", "darwin")
    assert memory.tune_memory() is False and opened == []  # not Linux: nothing to tune
    assert memory._malloc_trim is memory._no_trim


@pytest.mark.slow  # starts a fresh Python that imports the whole app (Streamlit, torch, pandas)
def test_importing_ui_does_not_tune_malloc():
    import subprocess
    import sys

    code = ("import ctypes; calls = []; real = ctypes.CDLL\n"
            "ctypes.CDLL = lambda *a, **k: calls.append(a) or real(*a, **k)\n"
            "import attnviz.ui\nprint(sum('libc.' in str(a[0]) for a in calls))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip().splitlines()[-1] == "0"


def test_the_training_heap_raises_the_mmap_threshold_while_any_training_runs(monkeypatch):
    from attnviz.ui import memory

    calls = []
    monkeypatch.setattr(memory, "_mallopt", lambda param, value: calls.append((param, value)) or 1)
    monkeypatch.setattr(memory, "_malloc_trim", lambda pad: calls.append("trim") or 1)
    monkeypatch.setattr(memory, "_mmap_threshold", memory.MMAP_THRESHOLD)
    monkeypatch.setattr(memory, "_trainings", 0)
    first, second = memory.training_heap(), memory.training_heap()
    first.__enter__()
    assert memory.mmap_threshold() == memory.TRAINING_MMAP_THRESHOLD
    second.__enter__()  # a second training, overlapping
    first.__exit__(None, None, None)
    assert memory.mmap_threshold() == memory.TRAINING_MMAP_THRESHOLD and "trim" not in calls  # one still runs
    with pytest.raises(RuntimeError), memory.training_heap():  # a failing training ends its heap too
        raise RuntimeError("the training failed")
    second.__exit__(None, None, None)
    assert memory.mmap_threshold() == memory.MMAP_THRESHOLD
    assert calls == [(memory.M_MMAP_THRESHOLD, memory.TRAINING_MMAP_THRESHOLD),
                     (memory.M_MMAP_THRESHOLD, memory.MMAP_THRESHOLD), "trim"]


def test_without_the_malloc_tuning_the_training_heap_changes_nothing(monkeypatch):
    from attnviz.ui import memory

    monkeypatch.setattr(memory, "_mallopt", memory._no_mallopt)
    monkeypatch.setattr(memory, "_mmap_threshold", None)
    monkeypatch.setattr(memory, "_trainings", 0)
    with memory.training_heap():
        assert memory.mmap_threshold() is None
    assert memory.mmap_threshold() is None
