"""attnviz.labs.jobs: background work off the script thread, one per owner, bounded per server, stopped when
the owner stops looking.  Waits poll events; no fixed sleeps decide an outcome."""

import threading

import pytest

from attnviz.labs.jobs import JobBoard, JobRefusedError


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def looping(job):
    """Work that reports until told to stop."""
    step = 0
    while not job.should_stop():
        step += 1
        job.report(step=step)
        job._stop.wait(0.001)
    return step


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
    with pytest.raises(JobRefusedError, match="at most 2 at once"):
        board.start("c", looping)
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
