"""AppTest of the Train page: a tiny training runs off the script thread, its curves and snapshots are drawn,
Stop stops it, Start is disabled while it runs (a second click that lands anyway starts nothing), and the trained
model becomes a ``weights`` option of that session.  Waits are joins on the job, never fixed sleeps."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from helpers.apptest import decode, plotly_figures, recorded_spinners
from helpers.malloc import FakeMalloc
from helpers.train_times import teacher_run
from streamlit.testing.v1 import AppTest

from attnviz.labs import live_train
from attnviz.ui import train as train_ui

pytestmark = pytest.mark.slow  # trains a model behind the Train page: the quick tier leaves it out

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120
TINY = {"n_layers": 2, "n_heads": 2, "emb_dim": 16, "context_length": 64, "seq_len": 48, "batch_size": 4,
        "negatives": 32, "min_repeat": 4, "max_repeat": 20}


DEFAULT_STEPS = live_train.RECOMMENDED["steps"]  # the page's default run, before the tiny recipe replaces it


@pytest.fixture(autouse=True)
def tiny(monkeypatch):
    """The page's recipe, made tiny (the page reads live_train.RECOMMENDED on every run)."""
    monkeypatch.setattr(live_train, "RECOMMENDED", {"steps": 12, **TINY})


def train_page() -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    at.switch_page("pages/train.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def job_of(at: AppTest):
    return train_ui.job_board().get(at.session_state["_train_owner"])


def progress_text(at: AppTest) -> str:
    return at.get("progress")[0].proto.text


def wait_for_steps(job, count: int) -> None:
    while sum(entry.get("step") is not None for entry in list(job.progress)) < count:
        assert job.running, f"the job ended early: {job.status} {job.error!r}"
        job._done.wait(0.05)


def test_a_training_draws_its_curves_and_snapshots_and_becomes_a_weights_option():
    at = train_page()
    assert at.title[0].value == "Train a model, watch its heads form"
    assert any("Nothing trained in this session yet" in info.value for info in at.info)
    at.text_input(key="train_steps").input("12")
    at.button(key="train_start").click().run()
    job = job_of(at)
    assert job is not None
    assert job.join(TIMEOUT), "the tiny training did not finish"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert progress_text(at).startswith("Finished: step 12 of 12")
    # the scores say what they were measured on, and the lab's link that it scores its own one sequence
    probes = ("the mean stripe over 4 fixed repeated random sequences the model never trains on ([BOS] + x + x, 4 with "
              "each T = 23)")  # the tiny recipe's 48-token sequences hold repeats of 23
    assert " · best induction on the probes " in progress_text(at)
    assert any(f"Induction: {probes} (the Induction lab scores one sequence" in c.value for c in at.caption)
    assert at.button(key="train_see_lab").proto.help == (
        "The lab scores every head on one repeated random sequence ([BOS] + x + x) of the T and seed you pick there; "
        f"this page's scores are {probes}: the two, and the best head, can differ.")
    figures = plotly_figures(at)
    loss = next(f for f in figures if f["layout"].get("title", {}).get("text") == "training loss")
    assert decode(loss["data"][0]["x"]).tolist() == list(range(12))
    curves = next(f for f in figures
                  if any("induction: mean A" in a["text"] for a in f["layout"].get("annotations", [])))
    assert {t["name"] for t in curves["data"]} == {"L0H0", "L0H1", "L1H0", "L1H1"}
    assert len(decode(curves["data"][0]["x"])) == len(job.result.history.probe_steps) > 2
    titles = [f["layout"].get("title", {}).get("text") for f in figures]
    assert "before (step 0)" in titles and "after 12 steps" in titles
    before, after = (next(f["layout"] for f in figures if f["layout"].get("title", {}).get("text") == title)
                     for title in ("before (step 0)", "after 12 steps"))
    assert (before["margin"], before["height"]) == (after["margin"], after["height"])  # side by side: tiles aligned
    assert all(a["text"].count("<br>") == 1 for a in before["annotations"] + after["annotations"])
    # offered as weights to this session, and the page says how to pick it
    option = job.result.option
    assert option.name == "trained: 12 steps, seed 0"
    assert any(option.name in s.value for s in at.success)
    assert at.get("download_button")  # the trained model's zip (built when clicked)
    # the board drops ended jobs of tabs that looked away (reap): the session keeps what it has shown
    train_ui.job_board().forget(at.session_state["_train_owner"])
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert progress_text(at).startswith("Finished: step 12 of 12")
    assert len(plotly_figures(at)) == len(figures)
    # "See its heads" makes it this session's weights and opens the Heads page with it
    at.button(key="train_see_heads").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Attention heads"
    assert at.session_state["weights"] == option.name
    assert option.label in at.selectbox(key="weights").options
    assert at.selectbox(key="layer").options == ["0", "1"]


def test_the_page_promises_the_heads_in_steps_not_seconds():
    """On a busy machine a one-minute run stopped at step 149: the page says when the heads form in steps, within
    the default run, and what the page shows meanwhile — never in seconds or minutes."""
    at = train_page()
    intro = next(m.value for m in at.markdown if m.value.startswith("Train the book's"))
    assert "minute" not in intro and "second" not in intro
    assert f"For about the first {live_train.FORMS_AROUND_STEP} steps no head gets a type: the progress bar" in intro
    assert "the loss only creeps down" in intro and "flat" not in intro  # it falls by ~2 nats first (test_live_train)
    assert live_train.FORMS_AROUND_STEP < DEFAULT_STEPS


def test_stop_ends_the_training_and_keeps_the_model_so_far():
    at = train_page()
    at.text_input(key="train_steps").input(str(live_train.MAX_STEPS))
    at.button(key="train_start").click().run()
    job = job_of(at)
    wait_for_steps(job, 3)
    assert not at.button(key="train_stop").disabled
    at.button(key="train_stop").click().run()
    assert job.join(TIMEOUT)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert job.status == "stopped"
    assert progress_text(at).startswith(f"Stopped: step {job.result.steps_run} of {live_train.MAX_STEPS}")
    assert at.button(key="train_stop").disabled
    assert job.result.option.name.startswith("trained: stopped at step")


def test_start_right_after_stop_starts_a_new_training(monkeypatch):
    """Start → Stop → Start within a second: the stopped run's thread is still ending its step (here: held until
    the second Start is pressed); Start waits for it under a spinner and starts the new training, not "a training is
    already running in this tab"."""
    ended = threading.Event()
    real_publisher = train_ui._publisher

    def publisher_that_ends_late():
        publish = real_publisher()

        def publish_late(run):
            ended.wait(TIMEOUT)  # a stopped run's last work (its step, the after snapshot) takes a moment
            return publish(run)

        return publish_late

    monkeypatch.setattr(train_ui, "_publisher", publisher_that_ends_late)
    spinners = recorded_spinners(monkeypatch)
    at = train_page()
    at.text_input(key="train_steps").input(str(live_train.MAX_STEPS))
    at.button(key="train_start").click().run()
    first = job_of(at)
    second = None
    try:
        wait_for_steps(first, 2)
        at.button(key="train_stop").click().run()
        assert first.running and first.status == "stopping"  # its thread has not ended
        threading.Timer(0.5, ended.set).start()
        at.button(key="train_start").click().run()
        assert not at.exception, [e.value for e in at.exception]
        assert not at.warning, [w.value for w in at.warning]
        second = job_of(at)
        assert second is not first and second.running
        assert first.status == "stopped" and first.result.option is not None  # the stopped model is kept
        assert train_ui.job_board().running() >= 1 and not first.running  # one thread of this tab at a time
        assert ("Stopping the last training…", False) in spinners
    finally:
        ended.set()
        for job in (first, second):
            if job is not None:
                job.stop()
                assert job.join(TIMEOUT)


def test_the_training_runs_with_mallocs_mmap_threshold_raised_and_restores_it(monkeypatch):
    from attnviz.ui import memory

    malloc = FakeMalloc(monkeypatch)
    at = train_page()
    at.text_input(key="train_steps").input(str(live_train.MAX_STEPS))
    at.button(key="train_start").click().run()
    job = job_of(at)
    wait_for_steps(job, 2)
    assert malloc.threshold == memory.TRAINING_MMAP_THRESHOLD  # its steps' tensors reuse the heap
    at.button(key="train_stop").click().run()
    assert job.join(TIMEOUT)
    assert malloc.threshold == memory.MMAP_THRESHOLD
    # what the training freed goes back to the system: a trim follows the threshold's restoring (the page's own
    # runs may trim again after it: a new run's cache eviction)
    restored = max(index for index, call in enumerate(malloc.calls) if call != "trim")
    assert malloc.calls[restored] == (memory.M_MMAP_THRESHOLD, memory.MMAP_THRESHOLD)
    assert malloc.calls[restored + 1 : restored + 2] == ["trim"]


def test_start_is_disabled_while_a_training_runs_and_a_second_click_that_lands_starts_nothing():
    at = train_page()
    at.text_input(key="train_steps").input(str(live_train.MAX_STEPS))
    at.button(key="train_start").click().run()
    job = job_of(at)
    try:
        wait_for_steps(job, 1)
        at.run()
        start = at.button(key="train_start")
        assert start.disabled and "Stop it" in start.help  # while it runs, Start cannot be pressed, and says why
    finally:
        job.stop()
        assert job.join(TIMEOUT)
    at.run()
    assert not at.button(key="train_start").disabled  # ended: Start trains again
    # two clicks that land before the page draws Start disabled: when the second one's run comes, the first one's has
    # started a training, so this run draws Start disabled and the click does nothing (no second training, no error);
    # the first training goes on
    racing = train_ui.job_board().start(at.session_state["_train_owner"], lambda job: job._stop.wait(TIMEOUT))
    try:
        at.button(key="train_start").click().run()
        assert not at.exception, [e.value for e in at.exception]
        assert job_of(at) is racing and racing.running
        assert at.button(key="train_start").disabled
    finally:
        racing.stop()
        assert racing.join(TIMEOUT)


def test_a_full_server_refuses_a_training_with_a_message():
    board = train_ui.job_board()
    others = [board.start(f"other-tab-{k}", lambda job: job._stop.wait(TIMEOUT))
              for k in range(board.max_running - board.running())]
    try:
        at = train_page()
        at.button(key="train_start").click().run()
        assert not at.exception, [e.value for e in at.exception]
        assert any(f"at most {board.max_running} at once" in w.value for w in at.warning)
        said = "one training at a time" if board.max_running == 1 else f"at most {board.max_running} trainings"
        assert any(said in c.value for c in at.caption)  # the page said so before the click
        assert not any("a few at once" in c.value for c in at.caption)
        assert job_of(at) is None
    finally:
        for job in others:
            job.stop()
            assert job.join(TIMEOUT)


def test_a_deep_link_to_the_train_page_is_a_sessions_first_request():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params["text"] = "Hello world"
    at.switch_page("pages/train.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Train a model, watch its heads form"
    assert at.query_params["text"] in ("Hello world", ["Hello world"])  # the URL's settings are kept
    assert at.text_input(key="train_steps").value == str(live_train.RECOMMENDED["steps"])
    at.switch_page("pages/heads.py").run()
    assert at.sidebar.text_area(key="text").value == "Hello world"


def test_the_train_page_sidebar_folds_the_attention_settings_away():
    """The training ignores them: they are drawn in a collapsed expander (so they keep their values), said so."""
    at = train_page()
    (folded,) = [expander for expander in at.sidebar.expander if expander.label != "Share & export"]
    assert folded.label == "Attention settings"
    assert [w.label for w in folded.text_area] == ["Text"]
    assert {"Weights", "Attention variant", "Heads"} <= {w.label for w in folded.selectbox}
    assert [w.label for w in at.sidebar.selectbox] == [w.label for w in folded.selectbox]  # none outside it
    assert "attention settings do not apply to this page" in " ".join(c.value for c in at.sidebar.caption)


def test_settings_survive_a_visit_to_the_train_page():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    at.sidebar.text_area(key="text").set_value("Kept across pages").run()
    at.sidebar.selectbox(key="variant").set_value("causal").run()
    at.switch_page("pages/train.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.query_params["variant"] == ["causal"] or at.query_params["variant"] == "causal"
    at.switch_page("pages/heads.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.sidebar.text_area(key="text").value == "Kept across pages"
    assert at.sidebar.selectbox(key="variant").value == "causal"


def test_the_progress_bar_says_the_time_left_at_the_pace_so_far():
    """The estimate is live_train.seconds_left's (``attnviz train``'s step lines print it too): none once every
    step is done."""
    view = live_train.progress_view([{"step": s, "loss": 5.0, "seconds": (s + 1) * 0.2} for s in range(50)])
    assert train_ui._status_text("running", 50, 1000, view).endswith(" · 10 s · about 190 s left")
    done = live_train.progress_view([{"step": s, "loss": 5.0, "seconds": (s + 1) * 0.2} for s in range(1000)])
    assert train_ui._status_text("running", 1000, 1000, done).endswith(" · 200 s")


def test_the_progress_line_says_estimating_then_a_figure_near_the_truth():
    def view(done):
        steps, seconds, truth = teacher_run(done)
        return live_train.progress_view([{"step": s, "loss": 5.0, "seconds": t} for s, t in zip(steps, seconds)]), truth

    early, _ = view(3)
    assert train_ui._status_text("running", 3, 1000, early).endswith(" s · estimating the time left…")
    at_seven, truth = view(7)
    said = train_ui._status_text("running", 7, 1000, at_seven)
    left = float(said.rsplit("about ", 1)[1].split(" s left")[0])
    assert abs(left - truth) <= 0.25 * truth, (said, truth)


class _Job:
    """A stand-in for a running job: its reports are set by the test."""

    running, status, error = True, "running", None

    def __init__(self, progress):
        self.progress = progress

    def touch(self):
        pass


def _live_view_script():
    from attnviz.ui import train

    train.live()


def test_the_live_view_draws_the_same_slots_in_the_same_order_at_every_stage(monkeypatch):
    """Its delta paths never move (a run cut short by the next poll can then not blank the page: see live()):
    seven slots at every stage of a training — each its element, or an empty placeholder where there is none."""
    rng = np.random.default_rng(0)
    layers, heads, n = 2, 2, 2 * live_train.SNAPSHOT_T + 1
    before = rng.random((layers, heads, n, n))
    probe = lambda step, score: {"step": step, "loss": 5.0 - step / 10, "seconds": step / 10,  # noqa: E731
                                 "induction": np.full((layers, heads), score),
                                 "previous_token": np.full((layers, heads), score / 2)}
    stages = {
        "before the first step": [{"step": None, "before": before, "seconds": 1.0}],
        "steps, no probe yet": [{"step": None, "before": before, "seconds": 1.0},
                                *({"step": s, "loss": 5.0, "seconds": 2.0} for s in range(3))],
        "a probe": [{"step": None, "before": before, "seconds": 1.0}, probe(0, 0.1), probe(1, 0.1)],
        "heads formed": [{"step": None, "before": before, "seconds": 1.0}, probe(0, 0.1), probe(1, 0.9)],
        "failed": [{"step": None, "before": before, "seconds": 1.0}, probe(0, 0.1)],
        "ended, no head formed": [{"step": None, "before": before, "seconds": 1.0}, probe(0, 0.1), probe(1, 0.2)],
    }
    job = _Job([])
    monkeypatch.setattr(train_ui, "current_job", lambda: job)
    at = AppTest.from_function(_live_view_script, default_timeout=TIMEOUT)
    layouts, said = {}, {}
    for stage, progress in stages.items():
        job.progress = progress
        job.error = RuntimeError("out of memory") if stage == "failed" else None
        job.running, job.status = (False, "finished") if stage.startswith("ended") else (True, "running")
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        (fragment,) = at.main.children.values()  # the fragment's container
        layouts[stage] = [node.type for node in fragment.children.values()]
        said[stage] = [node.value for node in fragment.children.values() if node.type == "markdown"]
    assert layouts["before the first step"] == ["progress", "empty", "empty", "empty", "empty", "empty",
                                                "plotly_chart"]
    assert layouts["heads formed"] == ["progress", "empty", "plotly_chart", "plotly_chart", "markdown", "caption",
                                       "plotly_chart"]
    assert layouts["failed"][:2] == ["progress", "error"]
    # a run that ended before its heads formed says when they form, in steps (a 12-step run left the slot blank)
    assert layouts["ended, no head formed"] == ["progress", "empty", "plotly_chart", "plotly_chart", "markdown",
                                                "caption", "empty"]
    assert said["ended, no head formed"] == [
        f"**No head has a type yet** after 2 steps: none reached the dotted 0.4 line. With this recipe the induction "
        f"heads form around step {live_train.FORMS_AROUND_STEP} ({live_train.RECOMMENDED['steps']:,} steps is the "
        "default run)."]
    assert said["a probe"] == []  # while it runs, nothing is said yet
    assert {len(layout) for layout in layouts.values()} == {7}, layouts
