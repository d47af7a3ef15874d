"""A session that opens while the app reads the modules the command line names (importing a file runs its code, up
to the time limit) sees a spinner saying so, not a blank page; once the list is read, no session sees it."""

from __future__ import annotations

import textwrap

from helpers.apptest import no_exception, open_app, recorded_spinners

from attnviz import user_code

ATTENTION = textwrap.dedent('''
    import time

    import torch
    from torch import nn

    time.sleep(0.6)  # a file that loads something on import


    class ReadSlowly(nn.Module):
        def __init__(self, d_in=16):
            super().__init__()
            self.q = nn.Linear(d_in, d_in)

        def forward(self, x):
            return torch.softmax(self.q(x) @ x.transpose(1, 2), dim=-1) @ x
''')


def test_the_modules_are_read_under_a_spinner_once(tmp_path, monkeypatch):
    path = tmp_path / "slow_import.py"
    path.write_text(ATTENTION)
    monkeypatch.setattr("sys.argv", ["app.py"])
    monkeypatch.setenv(user_code.ENV, f"{path}:ReadSlowly")
    spinners = recorded_spinners(monkeypatch)
    at = open_app(timeout=120)
    no_exception(at)
    assert "Your module: ReadSlowly" in at.sidebar.selectbox(key="variant").options
    reading = [(text, timed) for text, timed in spinners if text.startswith("Reading your modules…")]
    assert reading == [("Reading your modules… (importing a file runs its code; one still running after 60 s is "
                        "stopped)", True)], spinners
    spinners.clear()
    no_exception(open_app(timeout=120))  # the list is read: the next session opens without it
    assert not any(text.startswith("Reading your modules") for text, _ in spinners), spinners
