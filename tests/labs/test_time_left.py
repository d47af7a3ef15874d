"""The Train page's time-left estimate (attnviz.labs.live_train.seconds_left_recent) as a pure function."""

import pytest
from helpers.train_times import teacher_run

from attnviz.labs import live_train


@pytest.mark.parametrize("done", [7, 20, 60, 209, 600, 990])
def test_the_time_left_comes_from_recent_steps_not_the_warm_up(done):
    """seconds_left_recent reads the pace of the latest steps, past the warm-up: at step 7 of a run whose first step
    took 13 s it is near the truth (the pace so far says ~2,000 s where ~300 are left)."""
    steps, seconds, truth = teacher_run(done)
    left = live_train.seconds_left_recent(steps, seconds, 1000)
    assert left is not None and abs(left - truth) <= 0.25 * truth, (left, truth)


def test_the_time_left_waits_for_a_steady_pace_and_stops_at_the_end():
    for done in (1, 2, 3, 6):  # the warm-up and too few steps past it: "estimating…"
        assert live_train.seconds_left_recent(*teacher_run(done)[:2], 1000) is None
    assert live_train.seconds_left_recent(*teacher_run(1000)[:2], 1000) is None  # every step done
    assert live_train.seconds_left_recent(*teacher_run(50)[:2], None) is None  # no total
    steps = list(range(40))
    assert live_train.seconds_left_recent(steps, [0.2 * (s + 1) for s in steps], 100) == pytest.approx(12.0)
