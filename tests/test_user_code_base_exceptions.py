"""A user's code that raises a ``BaseException`` that is no ``Exception`` — a class of its own derived from it, a
``KeyboardInterrupt`` it raises itself — at import, in its constructor, forward or reset: one line naming it, like
any other exception, never a traceback that ends a page's thread or the command line; a real Ctrl+C still stops."""

import os
import signal
import threading

import pytest
import torch
from helpers.base_exceptions import own_line, write_own, write_raising_on_import

from attnviz import time_limit, tracing, user_code


@pytest.fixture
def own(tmp_path):
    return write_own(tmp_path)


def test_an_import_that_raises_a_base_exception_is_one_line(tmp_path):
    path = write_raising_on_import(tmp_path)
    with pytest.raises(user_code.UserCodeError) as caught:
        user_code.load(f"{path}:A")
    assert str(caught.value) == f"{path} raised E on import: custom base exception"


def test_a_constructor_that_raises_a_base_exception_is_one_line(own):
    with pytest.raises(user_code.UserCodeError) as caught:
        user_code.build(user_code.load(f"{own}:RaisesInInit"))
    assert str(caught.value) == "RaisesInInit() raised Stop: not on this machine"


@pytest.mark.parametrize(("name", "words"), [
    ("RaisesInForward", f"the forward raised Stop (own.py, line {own_line('no forward today')}): no forward today"),
    ("InterruptsItself", f"the forward raised KeyboardInterrupt (own.py, line {own_line('raise KeyboardInterrupt')})"),
    ("EndsAGenerator", f"the forward raised GeneratorExit (own.py, line {own_line('closed')}): closed"),
])
def test_a_forward_that_raises_a_base_exception_is_a_trace_error_naming_it(own, name, words):
    module = user_code.build(user_code.load(f"{own}:{name}"))
    with pytest.raises(tracing.TraceError) as caught:
        tracing.record(module, torch.randn(1, 4, 16))  # (1, 4, 16)
    assert str(caught.value) == words


def test_a_reset_that_raises_a_base_exception_is_a_user_call_error(own):
    module = user_code.build(user_code.load(f"{own}:EndsAGenerator"))
    with pytest.raises(time_limit.UserCallError) as caught:
        time_limit.call_in_words("EndsAGenerator.reset_cache()", module.reset_cache)
    assert str(caught.value) == "EndsAGenerator.reset_cache() raised Stop: nothing to reset"


def test_a_keyboard_interrupt_raised_in_another_thread_is_the_user_codes(own):
    """No signal raises one outside the main thread (a Streamlit script's thread): it is the user's exception."""
    module = user_code.build(user_code.load(f"{own}:InterruptsItself"))
    caught = []

    def run():
        try:
            tracing.record(module, torch.randn(1, 4, 16))  # (1, 4, 16)
        except BaseException as error:  # noqa: BLE001  what escapes the thread is the test's finding
            caught.append(error)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert [type(error) for error in caught] == [tracing.TraceError]


def test_a_real_ctrl_c_while_the_users_code_runs_still_stops_the_program(monkeypatch):
    """The KeyboardInterrupt the SIGINT raises passes as itself (the command line prints "interrupted", 130), and the
    process's own SIGINT handler is in place again after the call."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        pytest.skip("SIGINT is ignored here (pytest started as a background job): a Ctrl-C cannot be sent")
    monkeypatch.setattr(time_limit, "SECONDS", 30.0)
    handler = signal.getsignal(signal.SIGINT)

    def waits_for_ever():
        while True:
            pass
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))  # the user's Ctrl+C
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            time_limit.call(waits_for_ever)
    finally:
        timer.cancel()
    assert signal.getsignal(signal.SIGINT) is handler


def test_a_stop_raised_by_a_checks_progress_report_inside_the_forward_passes_as_itself():
    """The Check panel's progress report runs in a forward pre-hook, inside the call of the user's forward: Streamlit
    stopping the script run at its next element raises there, and must stop the check, not become the forward's."""
    from helpers import user_modules as um
    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    from attnviz import checks

    def stopped(report):
        if report.forwards == 2:
            raise StopException

    caught = []

    def run():  # in a thread of its own, as a Streamlit script runs
        try:
            checks.check_module(um.MyMultiHeadAttention(16, 16, 16, 0.0, 4), progress=stopped)
        except BaseException as error:  # noqa: BLE001  what escapes the thread is the test's finding
            caught.append(error)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert [type(error) for error in caught] == [StopException]
