"""AppTest of every page against hostile text: the hostile texts and a single token, typed in the sidebar, give a
view or a plain message, never a traceback, and the text box keeps what was typed — with the default weights and
with the bundled model, and in the Heads page's knock-out section on each of its tabs."""

from __future__ import annotations

import pytest
from helpers.apptest import APP, TIMEOUT, plotly_figures
from helpers.texts import HOSTILE_TEXTS
from streamlit.testing.v1 import AppTest


def _app() -> AppTest:
    return AppTest.from_file(str(APP), default_timeout=TIMEOUT)


CAPTION_COUNTS_TOKENS = {"pages/heads.py", "pages/shapes.py", "pages/compare.py", "pages/pitfalls.py"}


@pytest.mark.parametrize("page", ["pages/heads.py", "pages/steps.py", "pages/shapes.py", "pages/tokens.py",
                                  "pages/compare.py", "pages/pitfalls.py", "pages/induction.py", "pages/train.py",
                                  "pages/benchmark.py"])
def test_every_page_survives_hostile_text_and_keeps_it(page):
    """Each hostile text, then a single token: on the pages whose caption counts the tokens, it says "1 token", not
    "1 tokens" (the same session: a page's caption is drawn anew on each run)."""
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
    if page not in CAPTION_COUNTS_TOKENS:
        return
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


def test_a_long_paste_on_the_pitfall_lab_counts_the_text_and_the_run_apart():
    """20,000 characters: the banner counts the text's tokens, the lab the run's (its first 1,024), as the Compare
    page does — never "The text has 1024 tokens" under "The text has 3,000 tokens"."""
    at = _app().run()
    at.switch_page("pages/pitfalls.py").run()
    at.sidebar.text_area(key="text").set_value(HOSTILE_TEXTS["long"]).run()  # "word " × 3,000: 3,001 tokens
    assert not at.exception, [e.value for e in at.exception]
    said = " ".join(part.value for part in [*at.caption, *at.info, *at.markdown, *at.warning]).replace("\\", "")
    assert ("The text has 3,001 tokens; only the first 1,024 are shown (attnviz runs at most 1,024 tokens, GPT-2's "
            "context).") in said
    assert "This run has 1,024 tokens; the lab uses the first 64 for speed." in said
    assert "The text has 1024" not in said and "The text has 1,024" not in said
