"""A user's code that would end the process — ``os._exit``, ``os.abort``, ``os.kill`` of its own process,
``signal.raise_signal`` — at import, in its constructor or in its forward, is one line naming the call, in the command
line (exit 2), the notebook API and the loader, as ``sys.exit`` is; the process runs on.  The guard acts only in the
thread that runs the user's code and only while it runs: the process's own functions are back after each call, also
one that raised, and another thread's calls are the originals'.

A test that fails here may end the test process itself (exit 3, or a signal): that is the bug it guards against."""

from __future__ import annotations

import os
import posix
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from helpers.process_exits import write_ends, write_exits_on_import

from attnviz import checks, cli, exit_guard, time_limit, tracing, user_code

ROOT = Path(__file__).resolve().parents[1]
ORIGINALS = {(module, name): getattr(module, name) for module in (os, posix, signal)
             for name in ("_exit", "abort", "kill", "killpg", "execv", "execve", "raise_signal", "pthread_kill")
             if hasattr(module, name)}


@pytest.fixture
def ends(tmp_path):
    return write_ends(tmp_path)


def originals_in_place() -> bool:
    return all(getattr(module, name) is original for (module, name), original in ORIGINALS.items())


def check(*args):
    """``attnviz check ARGS`` in this process: its exit status and stderr."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        returncode = cli.main(["check", *map(str, args)])
    return returncode, err.getvalue()


# -------------------------------------------------------------------- the loader and the notebook API

def test_a_file_that_calls_os_exit_on_import_is_one_line(tmp_path):
    path = write_exits_on_import(tmp_path)
    with pytest.raises(user_code.UserCodeError) as caught:
        user_code.load(f"{path}:A")
    assert str(caught.value) == (f"{path} called os._exit(3) on import: put its script part under "
                                 'if __name__ == "__main__":')
    assert originals_in_place()


@pytest.mark.parametrize(("name", "words"), [
    ("ExitsInInit", "ExitsInInit() called os._exit(3)"),
    ("KillsItselfInInit", "KillsItselfInInit() called os.kill(os.getpid(), SIGTERM)"),
])
def test_a_constructor_that_ends_the_process_is_one_line(ends, name, words):
    with pytest.raises(user_code.UserCodeError) as caught:
        user_code.build(user_code.load(f"{ends}:{name}"))
    assert str(caught.value) == words
    assert originals_in_place()


@pytest.mark.parametrize(("name", "call"), [
    ("ExitsInForward", "os._exit(3)"),  # bound at import (from os import _exit), called in the forward
    ("KillsItselfInForward", "os.kill(os.getpid(), SIGKILL)"),
    ("RaisesSigintInForward", "signal.raise_signal(SIGINT)"),
    ("AbortsInForward", "os.abort()"),
])
def test_a_forward_that_ends_the_process_is_a_trace_error_in_the_api(ends, name, call):
    module = user_code.build(user_code.load(f"{ends}:{name}"))
    with pytest.raises(tracing.TraceError) as caught:
        tracing.trace_module(module, torch.randn(1, 5, 16))  # (1, 5, d_in)
    assert str(caught.value) == (f"the forward called {call}: an attention forward returns its output, it does not "
                                 "end the program")
    assert originals_in_place()
    with pytest.raises(tracing.TraceError) as caught:
        checks.check_module(module, torch.randn(2, 6, 16))  # (2, 6, d_in)
    assert f"called {call}" in str(caught.value)
    assert originals_in_place()


# -------------------------------------------------------------------- the command line

@pytest.mark.parametrize(("spec", "words"), [
    ("script.py:A", "script.py called os._exit(3) on import: put its script part under if __name__"),
    ("ends.py:KillsItselfInInit", "KillsItselfInInit() called os.kill(os.getpid(), SIGTERM)"),
    ("ends.py:ExitsInForward", "the forward called os._exit(3)"),
    ("ends.py:RaisesSigintInForward", "called signal.raise_signal(SIGINT)"),  # not Ctrl+C's "interrupted", 130
])
def test_the_check_exits_2_naming_the_call(tmp_path, spec, words):
    write_exits_on_import(tmp_path), write_ends(tmp_path)
    returncode, stderr = check(tmp_path / spec)
    assert returncode == 2 and words in stderr and stderr.count("\n") == 1, (returncode, stderr)
    assert originals_in_place()


@pytest.mark.slow  # a fresh process that imports attnviz and torch: seconds
def test_the_console_script_exits_2_in_its_own_process(ends):
    result = subprocess.run([sys.executable, "-m", "attnviz", "check", f"{ends}:KillsItselfInForward"],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 2, result
    assert "called os.kill(os.getpid(), SIGKILL)" in result.stderr and "Traceback" not in result.stderr


# -------------------------------------------------------------------- the guard itself

def test_the_originals_are_back_after_a_call_that_raised():
    def raises():
        assert os._exit is not ORIGINALS[(os, "_exit")] and posix._exit is not ORIGINALS[(posix, "_exit")]
        raise ValueError("the user's own")

    with pytest.raises(ValueError, match="the user's own"):
        time_limit.call(raises)
    assert originals_in_place()


def test_a_signal_that_ends_nothing_and_one_to_another_process_pass():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time_limit.call(os.kill, os.getpid(), 0)  # is this process alive: ends nothing
        time_limit.call(os.kill, child.pid, signal.SIGTERM)  # another process's: the user's business
        assert child.wait(timeout=10) == -signal.SIGTERM
    finally:
        child.kill()


def test_another_thread_calls_the_original_while_a_users_call_runs():
    """While one thread runs the user's code, the process's functions are the wrappers, but another thread — the
    server's, a training job's — gets the original's behaviour: its signal is sent."""
    inside, leave, received = threading.Event(), threading.Event(), []

    def users_code():
        inside.set()
        assert leave.wait(10)

    before = signal.signal(signal.SIGUSR1, lambda *_: received.append(True))  # the main thread's handler
    try:
        worker = threading.Thread(target=time_limit.call, args=(users_code,))
        worker.start()
        assert inside.wait(10)
        outside = []
        sender = threading.Thread(target=lambda: outside.append(os.kill(os.getpid(), signal.SIGUSR1)))
        sender.start()
        sender.join(10)
        assert outside == [None]  # sent, not refused
        assert not originals_in_place()  # the user's call still runs: the wrappers are in place
        leave.set()
        worker.join(10)
        deadline = time.monotonic() + 10
        while not received and time.monotonic() < deadline:  # the main thread runs the handler at its next bytecode
            time.sleep(0.01)
        assert received == [True]
    finally:
        leave.set()
        signal.signal(signal.SIGUSR1, before)
    assert originals_in_place()


def test_nested_calls_keep_the_guard_until_the_outer_one_returns():
    def inner():
        return "inner"

    def outer():
        assert time_limit.call(inner) == "inner"
        with pytest.raises(exit_guard.ProcessEndError):
            os._exit(3)
        return "outer"

    assert time_limit.call(outer) == "outer"
    assert originals_in_place()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this system")
def test_a_child_forked_by_the_users_code_ends_with_its_own_status():
    """``multiprocessing``'s fork ends its child with os._exit: the child leaves the guard, or it would run on as a
    copy of the server."""
    def users_code():
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        return os.waitpid(pid, 0)[1]

    assert os.waitstatus_to_exitcode(time_limit.call(users_code)) == 7
