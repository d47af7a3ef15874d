"""The check's time estimate (``checks.Progress.seconds_left``, ``slow_notice``) as arithmetic on a fake clock: it
reads the pace of the rules' forwards, not the traced forward's time, which records every tensor and at long inputs
takes many plain forwards' time."""

from types import SimpleNamespace

import pytest

from attnviz import checks
from attnviz.rule_base import Check


class FakeClock:
    """``time.perf_counter`` for ``checks``: the seconds a test says have passed."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(checks, "time", SimpleNamespace(perf_counter=fake))
    return fake


def long_check(clock: FakeClock, reports: list, *, traced: float, forward: float, tokens: int = 1024) -> float:
    """A check of a causal module on (2, ``tokens``, d) as check_module meters it: the traced forward (``traced`` s)
    and the reading of it, rows-sum-to-one with no forward, causal's tokens − 1 forwards, dropout-placement's one,
    batch-independence's two, each ``forward`` s with its rule's own work; the seconds it took in all."""
    planned = 1 + (tokens - 1) + 1 + 2
    meter = checks._Meter(reports.append, 4, planned)
    meter.before_forward(None, ())
    clock.wait(traced)
    clock.wait(0.4)  # the trace read: the attention combined, the mask found
    for rule, forwards in (("rows-sum-to-one", 0), ("causal", tokens - 1), ("dropout-placement", 1),
                           ("batch-independence", 2)):
        meter.rule = rule
        for _ in range(forwards):
            meter.before_forward(None, ())
            clock.wait(forward)
        clock.wait(0.05)
        meter.done(Check(rule, "pass", ""))
    return reports[-1].seconds


def test_the_estimate_reads_the_rules_forwards_not_the_traced_one(clock):
    """The QA run: a traced forward of 1.4 s, then 1,026 forwards of 0.16 s (0.065 s forward, the rule's work around
    it): the first estimate is the whole check within 2×, not 1,027 × 1.4 s."""
    reports = []
    took = long_check(clock, reports, traced=1.4, forward=0.16)
    estimated = [report for report in reports if report.seconds_left is not None and report.forwards < 1027]
    first = estimated[0]
    assert first.rule == "causal" and first.forwards == 1 + checks.PACED_FORWARDS  # once 3 of causal's are timed
    assert took / 2 < first.seconds + first.seconds_left < took * 2
    assert first.seconds_left == pytest.approx((1027 - 4) * 0.16)
    assert all(took / 2 < report.seconds + report.seconds_left < took * 2 for report in estimated)
    assert reports[-1].seconds_left == 0


def test_no_estimate_before_a_few_of_the_rules_forwards_are_timed(clock):
    """The traced forward says nothing about the pace, one forward little: no time left, no notice, until three of the
    rules' forwards are timed."""
    reports = []
    long_check(clock, reports, traced=55.0, forward=0.16)
    before = [report for report in reports if report.rule in (None, "rows-sum-to-one") or report.forwards < 4]
    assert len(before) == 5 and all(report.seconds_left is None and report.slow_notice() is None for report in before)


def test_the_notice_says_the_pace_after_the_traced_forward_and_the_whole_time(clock):
    reports = []
    long_check(clock, reports, traced=1.4, forward=0.16)
    notice = next(notice for report in reports if (notice := report.slow_notice()) is not None)
    assert notice == ("one forward takes 0.16 s after the traced one and the rules run up to 1027 forwards: about "
                      "3 min in all")  # 1.4 + 0.4 + 0.05 + 3 × 0.16 s so far, 1,023 × 0.16 s to go


def test_the_pace_is_the_rules_forwards_with_their_rules_work():
    """Each timed forward runs from its start to the next forward's start or its rule's end."""
    progress = checks.Progress("causal", 1, 9, forwards=11, forwards_planned=41, seconds=30.0,
                               paced_forwards=10, paced_seconds=2.0)
    assert progress.pace == pytest.approx(0.2)
    assert progress.seconds_left == pytest.approx(30 * 0.2)
    assert progress.slow_notice("One forward of Slow", tenths_below=10) == (
        "One forward of Slow takes 0.2 s after the traced one and the rules run up to 41 forwards: about 36 s in all")
    assert checks.Progress(None, 0, 9, 1, 41, 30.0).seconds_left is None  # the traced forward only
    assert checks.Progress("causal", 1, 9, 3, 41, 30.0, paced_forwards=2, paced_seconds=0.4).seconds_left is None
    assert checks.Progress("causal", 1, 9, 41, 41, 40.0).seconds_left == 0  # all planned forwards run
