"""AppTest: a module listed with ``--module`` / ``ATTNVIZ_MODULES`` whose constructor never returns costs the server
one time limit per module and sizes, not one per session or rerun: the page and the sidebar say that attnviz
remembers it, Try again runs it again, and a saved change to the file is a new module."""

from __future__ import annotations

import os
import re
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.apptest import no_exception, open_app
from streamlit.testing.v1 import AppTest

from attnviz import time_limit, user_code

TIMEOUT = 120
LIMIT = 0.5  # time_limit.SECONDS in these tests (a minute in the app)
LABEL = "Your module: SlowStart"
SLOW = textwrap.dedent('''
    import time

    import torch
    from torch import nn


    class SlowStart(nn.Module):
        def __init__(self, d_in=16, d_out=16, num_heads=4):
            super().__init__()
            while True:  # waits for a server that never answers
                time.sleep(0.01)
''')
FIXED = textwrap.dedent('''
    import torch
    from torch import nn


    class SlowStart(nn.Module):
        def __init__(self, d_in=16, d_out=16, num_heads=4):
            super().__init__()
            self.num_heads, self.head_dim = num_heads, d_out // num_heads
            self.W_query = nn.Linear(d_in, d_out, bias=False)
            self.W_key = nn.Linear(d_in, d_out, bias=False)
            self.W_value = nn.Linear(d_in, d_out, bias=False)

        def forward(self, x):
            b, n, _ = x.shape
            queries = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
            keys = self.W_key(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
            values = self.W_value(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
            attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, n)
            mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n)
            attn_scores = attn_scores.masked_fill(mask, -torch.inf)
            attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, n)
            return (attn_weights @ values).transpose(1, 2).reshape(b, n, -1)  # (b, n, d_out)
''')


@pytest.fixture
def module_file(tmp_path, monkeypatch) -> Iterator[Path]:
    """The user's file, listed in ATTNVIZ_MODULES; attnviz's list of modules (and what it remembers) starts empty."""
    path = tmp_path / "slow_start.py"
    path.write_text(SLOW)
    monkeypatch.setenv(user_code.ENV, f"{path}:SlowStart")
    monkeypatch.setattr("sys.argv", ["app.py"])
    user_code.forget_listed()
    monkeypatch.setattr(time_limit, "SECONDS", LIMIT)
    yield path
    user_code.forget_listed()


@pytest.fixture
def constructor_calls(monkeypatch) -> list[str]:
    """The constructor calls of the user's class, as attnviz names them ("SlowStart(d_in=64, …)")."""
    calls, real = [], time_limit.call_in_words

    def call_in_words(name, function, /, *args, **kwargs):
        if name.startswith("SlowStart("):
            calls.append(name)
        return real(name, function, *args, **kwargs)

    monkeypatch.setattr(time_limit, "call_in_words", call_in_words)
    return calls


def session(**query) -> AppTest:
    """A new browser session opened on the module (a link naming it)."""
    return open_app(timeout=TIMEOUT, **{"variant": LABEL, "d_in": "64", "d_out": "64", "num_heads": "4", **query})


def unescaped(elements) -> str:
    return " ".join(re.sub(r"\\(.)", r"\1", element.value) for element in elements)


def test_a_constructor_stopped_by_the_time_limit_is_not_run_again_by_the_next_session(module_file,
                                                                                     constructor_calls):
    first = session(text="My own words")
    no_exception(first)
    assert len(constructor_calls) == 1
    said = unescaped(first.warning)
    assert f"ran for {LIMIT:g} s without returning" in said, said
    assert first.sidebar.text_area(key="text").value == "My own words"

    started = time.monotonic()
    second = session()  # another browser: the sidebar and the page say so at once
    waited = time.monotonic() - started
    no_exception(second)
    assert len(constructor_calls) == 1, constructor_calls
    said = unescaped(second.warning)
    assert f"ran for {LIMIT:g} s without returning" in said, said
    assert "does not run it again" in said and "Try again" in said, said
    assert "SlowStart" in unescaped(second.sidebar.caption) and "Try again" in unescaped(second.sidebar.caption)
    assert waited < 5 * LIMIT + 10  # a run, not a wait for the constructor (AppTest's own run takes seconds)
    second.sidebar.selectbox(key="num_heads").set_value(4).run()  # a rerun: nothing is built again
    assert len(constructor_calls) == 1


def test_other_sizes_are_another_constructor_call(module_file, constructor_calls):
    session()
    other = session(num_heads="2")
    no_exception(other)
    assert [call for call in constructor_calls if "num_heads=2" in call] == [constructor_calls[-1]]
    assert len(constructor_calls) == 2


def test_try_again_runs_the_constructor_again(module_file, constructor_calls):
    at = session()
    assert len(constructor_calls) == 1
    page_button = at.main.button(key="_module_try_again")
    page_button.click().run()
    no_exception(at)
    assert len(constructor_calls) == 2  # asked for: it runs (and is stopped) once more
    at.run()  # the sidebar, drawn before the page built it, names it from the next run on
    assert len(constructor_calls) == 2
    at.sidebar.button(key="_module_try_again_0").click().run()
    assert len(constructor_calls) == 3


def test_a_saved_change_to_the_file_is_a_new_module(module_file, constructor_calls):
    session()
    module_file.write_text(FIXED)
    stamp = module_file.stat()
    os.utime(module_file, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 2_000_000_000))  # a later save
    at = session(text="It runs now")
    no_exception(at)
    assert not at.warning, unescaped(at.warning)
    assert not any("SlowStart" in c.value for c in at.sidebar.caption)
    assert "SlowStart" in " ".join(c.value for c in at.caption)  # drawn: "SlowStart, 4 heads × 16 · your code …"
