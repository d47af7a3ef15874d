"""attnviz.labs.jobs: background work off the script thread, one per owner, bounded per server, stopped when
the owner stops looking.  Waits poll events; no fixed sleeps decide an outcome."""

import threading
import time

import pytest

from attnviz.labs.jobs import JobBoard, JobRefusedError


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


STEP = 0.001  # seconds a step of the work below takes: it polls should_stop between steps, as a training does


def looping(job):
    """Work that reports until told to stop."""
    step = 0
    while not job.should_stop():
        step += 1
        job.report(step=step)
        time.sleep(STEP)
    return step


def slow_to_end(ended: threading.Event):
    """Work that, once told to stop, takes a moment to end (a training ends its step and snapshots its model): until
    ``ended`` is set."""

    def work(job):
        while not job.should_stop():
            time.sleep(STEP)
        assert ended.wait(10), "the test never let the stopping work end"
        return "the model so far"

    return work


def test_runs_off_the_calling_thread_and_returns_its_result():
    board = JobBoard()
    caller = threading.get_ident()
    job = board.start("tab-1", lambda job: (job.report(step=1), threading.get_ident())[1])
    assert job.join(5)
    assert job.status == "finished"
    assert job.result != caller
    assert job.progress == [{"step": 1}]


def test_one_job_per_owner_and_a_bounded_number_per_server():
    board = JobBoard(max_running=2)
    first = board.start("a", looping)
    with pytest.raises(JobRefusedError, match="already running in this tab"):
        board.start("a", looping)
    second = board.start("b", looping)
    with pytest.raises(JobRefusedError, match="at most 2 at once") as refused:
        board.start("c", looping)
    assert "other browser tabs — yours or other users'" in str(refused.value)  # an owner is a tab, not a user
    assert board.running() == 2
    first.stop()
    assert first.join(5)
    assert first.status == "stopped"
    third = board.start("c", looping)  # a slot is free again
    for job in (second, third):
        job.stop()
        assert job.join(5)
    assert board.running() == 0


def test_an_owner_that_stops_looking_stops_its_job():
    clock = FakeClock()
    board = JobBoard(idle_timeout=30, clock=clock)
    job = board.start("closed-tab", looping)
    job.touch()
    clock.now = 29.0
    assert job.running
    clock.now = 31.0  # no touch for more than 30 s: the tab is gone
    assert job.join(5)
    assert job.status == "tab closed"
    assert job.result >= 1
    assert board.reap() == 1
    assert board.get("closed-tab") is None


def test_a_touched_job_keeps_running():
    clock = FakeClock()
    board = JobBoard(idle_timeout=30, clock=clock)
    job = board.start("open-tab", looping)
    for t in range(0, 100, 10):
        clock.now = float(t)
        job.touch()
        assert not job.should_stop()
    assert job.running
    job.stop()
    assert job.join(5)


def test_an_error_is_kept_for_the_page_not_raised():
    board = JobBoard()

    def broken(job):
        raise ValueError("bad settings")

    job = board.start("x", broken)
    assert job.join(5)
    assert job.status == "failed"
    assert isinstance(job.error, ValueError)
    board.forget("x")
    assert board.get("x") is None


def test_start_right_after_stop_waits_for_the_stopping_job_then_starts():
    """Start → Stop → Start within a second: the stopped job's thread has not ended yet; Start waits for it (up to
    ``stop_wait``) rather than saying a training is still running in this tab."""
    board = JobBoard(max_running=1)
    ended = threading.Event()
    first = board.start("tab", slow_to_end(ended))
    first.stop()
    assert first.running and first.status == "stopping"
    threading.Timer(0.2, ended.set).start()
    second = board.start("tab", looping)
    assert not first.running and first.status == "stopped" and first.result == "the model so far"
    assert board.get("tab") is second and second.running
    assert board.running() == 1  # never two of this tab's threads at once
    second.stop()
    assert second.join(5)


def test_a_stopping_job_counts_against_the_server_until_its_thread_ends():
    """A stopped job whose thread has not ended still uses a core: it holds its slot, and its own tab's Start says it
    is still stopping once ``stop_wait`` is over."""
    board = JobBoard(max_running=1, stop_wait=0.05)
    ended = threading.Event()
    first = board.start("a", slow_to_end(ended))
    first.stop()
    try:
        with pytest.raises(JobRefusedError, match="at most 1 at once"):
            board.start("b", looping)
        with pytest.raises(JobRefusedError, match="still stopping"):
            board.start("a", looping)
        assert first.running and board.running() == 1
    finally:
        ended.set()
    assert first.join(5)
    other = board.start("b", looping)  # its slot is free once its thread ended
    other.stop()
    assert other.join(5)
