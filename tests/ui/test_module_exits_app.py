"""The app with listed modules whose code would end the process — a file that calls ``os._exit`` on import, a
constructor that calls it, a forward that kills its own process —: each is one line where the page says why a module
cannot run, the other modules are listed, and the app (here AppTest's process; on a server every user's) runs on.
A test that fails here may end the test process itself: that is the bug it guards against."""

from __future__ import annotations

import re

import pytest
from helpers.apptest import no_exception, open_app, page_text
from helpers.process_exits import write_ends, write_exits_on_import

from attnviz import user_code

TIMEOUT = 120


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """ATTNVIZ_MODULES: a file that calls os._exit on import first, then the classes of ends.py."""
    script, ends = write_exits_on_import(tmp_path), write_ends(tmp_path)
    listed = [f"{script}:A", *(f"{ends}:{name}" for name in ("Attention", "ExitsInInit", "KillsItselfInForward"))]
    monkeypatch.setattr("sys.argv", ["app.py"])
    monkeypatch.setenv(user_code.ENV, ",".join(listed))
    user_code.forget_listed()
    yield tmp_path
    user_code.forget_listed()


def unescaped(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def test_a_file_that_calls_os_exit_on_import_is_named_and_the_others_are_listed(folder):
    at = open_app(timeout=TIMEOUT)
    no_exception(at)
    captions = unescaped(" ".join(c.value for c in at.sidebar.caption))
    assert ('script.py:A is not listed: script.py called os._exit(3) on import: put its script part under '
            'if __name__ == "__main__":') in captions
    options = at.sidebar.selectbox(key="variant").options
    assert all(f"Your module: {name}" in options for name in ("Attention", "ExitsInInit", "KillsItselfInForward"))
    assert str(folder) not in page_text(at)


@pytest.mark.parametrize(("name", "words"), [
    ("ExitsInInit", "ExitsInInit(d_in=768) called os._exit(3)"),  # the sidebar's width
    ("KillsItselfInForward", "the forward called os.kill(os.getpid(), SIGKILL)"),
])
def test_a_module_that_would_end_the_process_is_a_message_and_the_app_runs_on(folder, name, words):
    at = open_app(timeout=TIMEOUT, variant=f"Your module: {name}", text="My own text stays")
    no_exception(at)
    warnings = [unescaped(w.value) for w in at.warning]
    assert any(words in warning for warning in warnings), warnings
    assert at.sidebar.text_area(key="text").value == "My own text stays"
    at = open_app(timeout=TIMEOUT, variant="Your module: Attention")  # the next session: the process is still there
    no_exception(at)
    assert "Attention" in page_text(at)
