"""HTML and Markdown from the user's text are never interpreted: the one HTML renderer (the token chips) and Plotly's
labels get escaped text, no page passes ``unsafe_allow_html=True``, and Markdown escaping defuses links and HTML."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.runs import small

from attnviz import pipeline, ui
from attnviz.views import figures

ROOT = Path(__file__).resolve().parents[1]
SMALL = small(device="auto")  # the device the app picks


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


@pytest.mark.parametrize(("text", "kept"), [("streamlit run app.py -- --module a.py:A", "app\\.py `--` \\-\\-module"),
                                            ("a -- b", "a `--` b"), ("a--b", "a\\-\\-b"), ("(-- x)", "\\(\\-\\- x\\)")])
def test_markdown_escape_keeps_a_lone_double_hyphen_two_hyphens(text, kept):
    """Streamlit draws a lone "--" as "—" however it is escaped; in a code span it stays "--" (a command reads as
    typed).  "--" inside a word or after a bracket is drawn as it is, and only escaped."""
    assert kept in ui.markdown_escape(text)
