"""Reading the list of modules the command line names (``user_code.listed``): it imports each file, which runs its
code, so it may take a while — a session that asks meanwhile waits for the whole list, and a reading that stops half
way leaves the rest for the next one, never a list that stays short for the server's life."""

import textwrap
import threading
import time

import pytest

from attnviz import urlstate, user_code

ATTENTION = textwrap.dedent('''
    import torch
    from torch import nn


    class MyAttention(nn.Module):
        def __init__(self, d_in=16):
            super().__init__()
            self.q = nn.Linear(d_in, d_in)

        def forward(self, x):
            return torch.softmax(self.q(x) @ x.transpose(1, 2), dim=-1) @ x
''')

# a file whose import takes its time (here: until the test says go), as one that loads a tokenizer or data does
SLOW_IMPORT = textwrap.dedent('''
    import pathlib
    import time

    from torch import nn

    pathlib.Path({started!r}).touch()
    while not pathlib.Path({go!r}).exists():
        time.sleep(0.01)


    class SlowToImport(nn.Module):
        def __init__(self, d_in=16):
            super().__init__()
            self.q = nn.Linear(d_in, d_in)

        def forward(self, x):
            return x
''')


@pytest.fixture
def fresh_list(monkeypatch):
    """attnviz's list of modules starts empty, and only ATTNVIZ_MODULES names modules; the test leaves none."""
    user_code.forget_listed()
    monkeypatch.setattr("sys.argv", ["app.py"])
    yield
    user_code.forget_listed()


def wait_for(path, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.01)


def test_a_link_that_arrives_while_the_files_are_imported_waits_for_the_list_and_keeps_its_module(
        tmp_path, monkeypatch, fresh_list):
    started, go = tmp_path / "started", tmp_path / "go"
    slow = tmp_path / "slow.py"
    slow.write_text(SLOW_IMPORT.format(started=str(started), go=str(go)))
    mine = tmp_path / "mine.py"
    mine.write_text(ATTENTION)
    monkeypatch.setenv(user_code.ENV, f"{slow}:SlowToImport,{mine}:MyAttention")
    first, second = [], []
    reading = threading.Thread(target=lambda: first.append(user_code.listed()))  # the first session
    reading.start()
    try:
        wait_for(started)
        link = threading.Thread(target=lambda: second.append(  # a second session, on a link naming the second module
            urlstate.settings_from_query({"variant": "Your module: MyAttention"})))
        link.start()
        link.join(0.5)
        assert link.is_alive(), f"the link did not wait for the list: {second}"
        assert not user_code.listed_already()
    finally:
        go.touch()
    reading.join(60)
    link.join(60)
    expected = {"Your module: SlowToImport": f"{slow}:SlowToImport", "Your module: MyAttention": f"{mine}:MyAttention"}
    assert first == [expected]
    (values, notices), = second
    assert values["variant"] == "Your module: MyAttention" and notices == []
    assert user_code.listed_already()


def test_a_reading_stopped_half_way_leaves_the_files_not_tried_for_the_next_reading(tmp_path, monkeypatch,
                                                                                    fresh_list):
    """A script's thread stopped while it imports (Streamlit stops a session with a BaseException): the next
    session reads the files after it, rather than a list marked read with them missing."""
    mine = tmp_path / "mine.py"
    mine.write_text(ATTENTION)
    other = tmp_path / "other.py"
    other.write_text(ATTENTION.replace("MyAttention", "OtherAttention"))
    monkeypatch.setenv(user_code.ENV, f"{mine}:MyAttention,{other}:OtherAttention")
    register = user_code.register

    class ScriptStopped(BaseException):
        pass

    def stopped_once(spec):
        monkeypatch.setattr(user_code, "register", register)
        raise ScriptStopped
    monkeypatch.setattr(user_code, "register", stopped_once)
    with pytest.raises(ScriptStopped):
        user_code.listed()
    assert user_code.listed() == {"Your module: MyAttention": f"{mine}:MyAttention",
                                  "Your module: OtherAttention": f"{other}:OtherAttention"}
    assert user_code.listed_already()


def test_with_no_module_named_the_list_is_read_before_any_reading(monkeypatch, fresh_list):
    """Nothing to import: the app's first page draws no spinner for it."""
    monkeypatch.delenv(user_code.ENV, raising=False)
    assert user_code.listed_already()


def test_forget_listed_starts_a_new_list_while_a_reading_is_stuck(tmp_path, monkeypatch, fresh_list):
    """A reading stuck importing a file (another session's, a test's) holds no later reading up once the list is
    forgotten: the next reading lists the modules named now, and nothing of the forgotten list."""
    started, go = tmp_path / "started", tmp_path / "go"
    slow = tmp_path / "slow.py"
    slow.write_text(SLOW_IMPORT.format(started=str(started), go=str(go)))
    mine = tmp_path / "mine.py"
    mine.write_text(ATTENTION)
    monkeypatch.setenv(user_code.ENV, f"{mine}:MyAttention")
    assert user_code.listed() == {"Your module: MyAttention": f"{mine}:MyAttention"}
    monkeypatch.setenv(user_code.ENV, f"{slow}:SlowToImport")
    stuck = threading.Thread(target=user_code.listed)
    stuck.start()
    try:
        wait_for(started)
        user_code.forget_listed()
        assert not user_code.listed_already()
        monkeypatch.setenv(user_code.ENV, "")
        after = []
        reading = threading.Thread(target=lambda: after.append(user_code.listed()))
        reading.start()
        reading.join(10)
        assert not reading.is_alive(), "the reading waited for the forgotten one"
        assert after == [{}] and user_code.listed_already()
    finally:
        go.touch()
        stuck.join(60)
