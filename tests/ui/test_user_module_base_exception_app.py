"""The app with a listed module that raises a ``BaseException`` that is no ``Exception`` (a class of its own, a
``KeyboardInterrupt`` it raises itself): on import, it is named in the sidebar and every module after it is listed,
in every session; in its forward, each page says so in one line instead of drawing the sidebar alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.apptest import no_exception, open_app
from helpers.base_exceptions import own_line, write_own, write_raising_on_import

from attnviz import user_code

ROOT = Path(__file__).resolve().parents[2]
MODULES = ROOT / "tests" / "helpers" / "user_modules.py"
AFTER = ("CausalSelfAttention", "TorchMHA", "SleepyAttention")  # listed after the file that raises on import
TIMEOUT = 120


@pytest.fixture
def specs(tmp_path, monkeypatch):
    """ATTNVIZ_MODULES: a file whose import raises a BaseException first, then modules that load."""
    raising, own = write_raising_on_import(tmp_path), write_own(tmp_path)
    listed = [f"{raising}:A", *(f"{MODULES}:{name}" for name in AFTER), f"{own}:RaisesInForward",
              f"{own}:InterruptsItself"]
    monkeypatch.setattr("sys.argv", ["app.py"])
    monkeypatch.setenv(user_code.ENV, ",".join(listed))
    return listed


def captions(at) -> str:
    return " ".join(c.value for c in at.sidebar.caption).replace("\\", "")  # as the user reads them: unescaped


def test_a_module_whose_import_raises_a_base_exception_is_named_and_the_ones_after_it_are_listed(specs):
    for _ in range(2):  # the first session, and every later one
        at = open_app(timeout=TIMEOUT)
        no_exception(at)
        options = at.sidebar.selectbox(key="variant").options
        assert all(f"Your module: {name}" in options for name in (*AFTER, "RaisesInForward", "InterruptsItself"))
        file = Path(specs[0].rpartition(":")[0]).name  # by its name: the page shows no folder of the server's
        assert f"{file}:A is not listed: {file} raised E on import: custom base exception" in captions(at)


@pytest.mark.parametrize("page", ["pages/heads.py", "pages/steps.py", "pages/compare.py"])
@pytest.mark.parametrize(("name", "words"), [
    ("RaisesInForward", f"the forward raised Stop (own.py, line {own_line('no forward today')}): no forward today"),
    ("InterruptsItself", f"the forward raised KeyboardInterrupt (own.py, line {own_line('raise KeyboardInterrupt')})")])
def test_a_forward_that_raises_a_base_exception_is_a_message_on_every_page(specs, page, name, words):
    at = open_app(page, timeout=TIMEOUT, variant=f"Your module: {name}", text="My own text stays")
    no_exception(at)
    warnings = [re.sub(r"\\(.)", r"\1", w.value) for w in at.warning]
    assert any(words in warning for warning in warnings), warnings
    assert at.sidebar.text_area(key="text").value == "My own text stays"
