"""The Train page's job work (attnviz.labs.live_train) and its figures, without Streamlit: tiny runs through a
real JobBoard.  Waits are joins on the job (events), never fixed sleeps."""

import io
import json
import os
import secrets
import sys
import threading
import zipfile

import numpy as np
import pytest
import torch

from attnviz.head_types import induction_stripe
from attnviz.labs import live_train
from attnviz.labs.jobs import JobBoard
from attnviz.labs.train import build_model
from attnviz.models import GPTModel, attention_maps, load_checkpoint
from attnviz.views import head_figures, margins

pytestmark = pytest.mark.slow  # trains models in background jobs: the quick tier leaves it out

TINY = {"n_layers": 2, "n_heads": 2, "emb_dim": 16, "context_length": 64, "seq_len": 48, "batch_size": 4,
        "negatives": 32, "min_repeat": 4, "max_repeat": 20}


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setattr(live_train, "RECOMMENDED", {"steps": 12, **TINY})


def run_job(cfg, **kwargs):
    board = JobBoard()
    job = board.start("tab", live_train.training_work(cfg, **kwargs))
    assert job.join(120), "the tiny training did not end within 2 minutes"
    assert job.error is None, repr(job.error)
    return job


def test_page_config_is_the_recommended_recipe_with_the_learners_steps_and_seed(tiny):
    cfg = live_train.page_config(steps=40, seed=7)
    assert (cfg.steps, cfg.seed, cfg.n_layers, cfg.emb_dim) == (40, 7, 2, 16)
    assert cfg.probe_every == 2  # at least ~20 points on the score curves
    assert live_train.page_config().steps == 12
    for bad in ({"steps": live_train.MIN_STEPS - 1}, {"steps": live_train.MAX_STEPS + 1}, {"seed": -1}):
        with pytest.raises(ValueError, match="must be between"):
            live_train.page_config(**bad)


def test_the_job_reports_before_every_step_and_probes_then_returns_the_run(tiny):
    cfg = live_train.page_config(steps=12)
    published = []
    job = run_job(cfg, publish=lambda run: published.append(run) or "option")
    run = job.result
    view = live_train.progress_view(job.progress)
    assert view.steps.tolist() == list(range(12))
    assert view.loss.shape == (12,) and np.isfinite(view.loss).all()
    assert view.probe_steps[0] == 0 and view.probe_steps[-1] == 11
    assert view.induction.shape == (len(view.probe_steps), 2, 2) == view.previous_token.shape
    assert view.seconds > 0 and view.last_step == 11
    # the snapshots: every head on the snapshot sequence, before = the untrained seeded model
    n = 2 * live_train.SNAPSHOT_T + 1
    assert run.before.shape == run.after.shape == (2, 2, n, n)
    np.testing.assert_array_equal(view.before, run.before)
    np.testing.assert_allclose(run.before, attention_maps(build_model(cfg), live_train.snapshot_tokens()), atol=1e-6)
    np.testing.assert_allclose(run.after, attention_maps(run.model, live_train.snapshot_tokens()), atol=1e-6)
    assert not np.allclose(run.before, run.after, atol=1e-4)  # training changed the heads
    assert published == [run] and run.option == "option"
    assert run.steps_run == 12 and live_train.run_name(run) == "12 steps, seed 0"
    np.testing.assert_array_equal(run.final_scores["induction"], view.induction[-1])
    notes = run.type_notes()  # each head's type at the last probe, as the Heads page names it
    assert len(notes) == 2 and all(len(row) == 2 for row in notes)
    for layer in range(2):
        for head in range(2):
            best = max(view.induction[-1, layer, head], view.previous_token[-1, layer, head])
            assert (notes[layer][head] == "—") == (best < 0.4)
    kept = live_train.history_view(run)  # what the page draws once the job's reports are gone
    for name in ("steps", "loss", "probe_steps", "induction", "previous_token", "before"):
        np.testing.assert_array_equal(getattr(kept, name), getattr(view, name))


def test_stopping_keeps_the_model_so_far_and_a_closed_tab_publishes_nothing(tiny):
    cfg = live_train.page_config(steps=live_train.MAX_STEPS)
    board = JobBoard()
    published = []
    job = board.start("tab", live_train.training_work(cfg, publish=published.append))
    while len(job.progress) < 4:  # the before snapshot and a few steps
        assert job.running, repr(job.error)
        job._done.wait(0.05)
    job.stop()
    assert job.join(60)
    assert job.status == "stopped"
    run = job.result
    assert 0 < run.steps_run < live_train.MAX_STEPS
    assert published == [run]
    assert live_train.run_name(run).startswith(f"stopped at step {run.steps_run} of {live_train.MAX_STEPS}")

    closed = JobBoard(idle_timeout=0.0)  # nobody touches: the "tab" is gone at once
    published.clear()
    job = closed.start("tab", live_train.training_work(cfg, publish=published.append))
    assert job.join(60)
    assert job.status == "tab closed" and published == []


class Ticking:
    """A clock that moves 3 s on every reading (touch, should_stop): time passes only as the job runs."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 3.0
        return self.now


@pytest.mark.parametrize("connected", [True, False])
def test_a_connected_tab_keeps_the_job_alive_without_the_page(tiny, connected):
    """alive() (the session's websocket is still connected) lets the worker touch its own job, so the
    learner may look at other pages; without it, nobody touches and the job stops as a closed tab."""
    cfg = live_train.page_config(steps=12)
    board = JobBoard(idle_timeout=10.0, clock=Ticking())
    job = board.start("tab", live_train.training_work(cfg, alive=lambda: connected))
    assert job.join(120)
    if connected:
        assert job.status == "finished" and job.result.steps_run == 12
    else:
        assert job.status == "tab closed" and job.result.steps_run < 12


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")
@pytest.mark.usefixtures("several_torch_threads")  # the job's one thread is its own doing
def test_the_job_uses_one_torch_thread_and_leaves_the_callers_setting(tiny):
    caller = torch.get_num_threads()
    caller_nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen = []

    def publish(run):
        seen.append((torch.get_num_threads(), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))

    run_job(live_train.page_config(steps=10), publish=publish)
    assert seen == [(live_train.THREADS, max(caller_nice, live_train.NICENESS))]  # the pages' threads come first
    assert torch.get_num_threads() == caller
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == caller_nice  # this thread: unchanged
    assert threading.current_thread() is threading.main_thread()


def test_checkpoint_zip_is_the_cli_folder_and_loads(tiny, tmp_path):
    run = run_job(live_train.page_config(steps=10)).result
    data = live_train.checkpoint_zip(run)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = sorted(archive.namelist())
        assert names == [f"{live_train.ZIP_FOLDER}/{name}" for name in ("config.json", "model.safetensors",
                                                                         "training.json")]
        archive.extractall(tmp_path)
    loaded = load_checkpoint(tmp_path / live_train.ZIP_FOLDER)
    assert isinstance(loaded, GPTModel)
    ids = torch.as_tensor(live_train.snapshot_tokens())[None]
    with torch.no_grad():
        np.testing.assert_allclose(loaded(ids).numpy(), run.model(ids).numpy(), atol=0.05)  # fp16 weights
    meta = run.metadata()
    assert meta["config"]["seed"] == 0 and meta["steps_run"] == 10
    written = json.loads((tmp_path / live_train.ZIP_FOLDER / "training.json").read_text())
    assert written == json.loads(json.dumps(meta))  # tuples as lists


def test_crossings_name_each_head_when_its_score_first_reaches_the_threshold():
    induction = np.zeros((4, 2, 2))
    induction[2:, 1, 0] = [0.5, 0.9]  # L1H0 crosses at the third probe
    previous = np.zeros((4, 2, 2))
    previous[1:, 0, 1] = [0.45, 0.3, 0.8]  # L0H1 crosses at the second probe (and dips: still its first time)
    view = live_train.ProgressView(steps=np.arange(31), loss=np.zeros(31), probe_steps=np.array([0, 10, 20, 30]),
                                   induction=induction, previous_token=previous, before=None, seconds=1.0)
    assert live_train.crossings(view, 0.4) == [("previous-token", "L0H1", 10, 0.8), ("induction", "L1H0", 20, 0.9)]
    assert live_train.crossings(view, 0.95) == []


def test_progress_view_of_an_empty_or_early_job():
    view = live_train.progress_view([])
    assert view.steps.size == 0 and view.before is None and view.last_step == -1
    before = np.zeros((2, 3, 5, 5))
    view = live_train.progress_view([{"step": None, "before": before, "seconds": 0.5}, {"step": 0, "loss": 9.0,
                                                                                          "seconds": 1.0}])
    assert view.induction.shape == (0, 2, 3) and view.steps.tolist() == [0] and view.seconds == 1.0


# ------------------------------------------------------------------ figures of training

def test_loss_curve_draws_every_stride_th_step_and_a_mean_over_every_step():
    loss = np.arange(100, dtype=float)
    fig = head_figures.loss_curve(np.arange(100), loss, total_steps=200, stride=10)
    raw, mean = fig.data
    assert list(raw.x) == [*range(0, 100, 10), 99]  # the latest step is always drawn
    assert mean.y[-1] == pytest.approx(np.mean(loss[-25:]))  # the mean uses every step, not just the drawn ones
    assert mean.y[-2] == pytest.approx(np.mean(loss[66:91]))
    assert tuple(fig.layout.xaxis.range) == (0, 199)


def test_smooth_is_a_trailing_mean():
    np.testing.assert_allclose(head_figures.smooth([1, 2, 3, 4], window=2), [1, 1.5, 2.5, 3.5])
    assert head_figures.smooth([]).size == 0


def test_score_curves_one_line_per_head_in_both_panels_with_one_colour():
    induction = np.random.default_rng(0).random((5, 2, 3))
    previous = np.random.default_rng(1).random((5, 2, 3))
    fig = head_figures.score_curves([0, 10, 20, 30, 40], induction, previous, threshold=0.4)
    assert len(fig.data) == 2 * 6
    by_name = {}
    for trace in fig.data:
        by_name.setdefault(trace.name, []).append(trace)
    assert set(by_name) == {f"L{layer}H{head}" for layer in range(2) for head in range(3)}
    left, right = by_name["L1H2"]
    np.testing.assert_allclose(left.y, induction[:, 1, 2])
    np.testing.assert_allclose(right.y, previous[:, 1, 2])
    assert left.line.color == right.line.color
    # the Train page's 8 heads: the legend under the panels, in rows the margin under the axis holds, so the panels
    # keep the figure's width
    eight = head_figures.score_curves([0, 10], np.zeros((2, 2, 4)), np.zeros((2, 2, 4))).layout
    assert (eight.legend.orientation, eight.legend.yref, eight.margin.r) == ("h", "container", 10)
    plot_px = margins.PAGE_MIN_PX - eight.margin.l - 10
    entry_px = eight.legend.entrywidth * plot_px  # an entry: its sample and label
    per_row = int(plot_px // (entry_px + head_figures.LEGEND_GAP_PX))
    assert per_row > 1 and entry_px >= margins.LEGEND_SAMPLE_PX + margins.text_px(["L1H3"])
    assert eight.margin.b == margins.under_axis() + -(-8 // per_row) * margins.LEGEND_ROW_PX + margins.LEGEND_PAD_PX


def test_filling_a_curve_figure_with_new_data_draws_what_building_it_from_that_data_draws():
    """The live view fills the figures it drew at the last poll (set_loss_curve, set_score_curves) instead of
    building them again: the filled figure is the one built from the new data, and a figure of other heads refuses."""
    rng = np.random.default_rng(0)
    loss = rng.random(130)
    filled = head_figures.set_loss_curve(head_figures.loss_curve(np.arange(40), loss[:40], total_steps=500),
                                         np.arange(130), loss, stride=3)
    assert filled.to_plotly_json() == head_figures.loss_curve(np.arange(130), loss, total_steps=500,
                                                              stride=3).to_plotly_json()
    induction, previous = rng.random((9, 2, 3)), rng.random((9, 2, 3))
    steps = np.arange(9) * 10
    filled = head_figures.set_score_curves(head_figures.score_curves(steps[:2], induction[:2], previous[:2],
                                                                     total_steps=90, threshold=0.4),
                                           steps, induction, previous)
    assert filled.to_plotly_json() == head_figures.score_curves(steps, induction, previous, total_steps=90,
                                                                threshold=0.4).to_plotly_json()
    with pytest.raises(ValueError, match="12 lines; these scores need 16"):
        head_figures.set_score_curves(filled, steps, rng.random((9, 2, 4)), rng.random((9, 2, 4)))


def test_stripe_grid_outlines_the_stripe_of_every_head():
    T, n = 4, 9
    maps = np.random.default_rng(0).random((2, 3, n, n))
    fig = head_figures.stripe_grid(maps, T, title="t", notes=[["previous-token 0.50", "—", "—"], ["—"] * 3])
    heatmaps = [t for t in fig.data if t.type == "heatmap"]
    lines = [t for t in fig.data if t.type == "scatter"]
    assert len(heatmaps) == len(lines) == 6
    assert list(lines[0].y) == list(range(n - T, n)) and list(lines[0].x) == [r - T + 1 for r in range(n - T, n)]
    assert np.isnan(np.array(heatmaps[0].z, dtype=float)[0, 1])  # the masked upper triangle is a gap
    assert [a.text for a in fig.layout.annotations][:2] == ["L0H0<br>previous-token 0.50", "L0H1<br>—"]
    # the stripe cells are those induction_stripe averages
    z = np.array(heatmaps[4].z, dtype=float)
    assert z[lines[4].y, lines[4].x].mean() == pytest.approx(induction_stripe(maps[1, 1], T))


def test_the_default_run_forms_an_induction_head_and_its_previous_token_heads():
    """The Train page's default run (live_train.RECOMMENDED, seed 0) — the phase change it promises: no
    induction head at the start, one above 0.7 at the end on fresh repeats as long as it trained on (and above 0.45
    on longer ones), with layer 0's heads
    turning towards the previous token at the same time (minutes on one CPU thread)."""
    from attnviz.labs.train import evaluate, train

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, history = train(live_train.page_config())
    finally:
        torch.set_num_threads(threads)
    induction = np.max(history.induction, axis=(1, 2))  # (probes,): best head at each probe
    assert induction[0] < 0.1 and induction[-1] >= 0.6, induction.round(2)
    formed = history.probe_steps[int(np.argmax(induction >= 0.4))]
    assert 200 <= formed <= 900, formed  # a sudden change in the middle of the run, not a slow drift
    loss = np.asarray(history.loss)
    before, start, collapsed = loss[formed - 60:formed - 40].mean(), loss[:10].mean(), loss[-20:].mean()
    assert start - before > 1 and before - collapsed > 3, (start, before, collapsed)  # the page: it creeps, then falls
    cfg = live_train.page_config()
    scores = evaluate(model, seed=secrets.randbelow(2**31), positions=cfg.seq_len)  # fresh, as long as it trained on
    assert scores["induction"][1].max() >= 0.7  # layer 1: it needs layer 0's output (40 draws: min 0.81, mean 0.85)
    longer = evaluate(model, seed=secrets.randbelow(2**31), sequences=24)  # repeats of 25-60 tokens: never this long
    assert longer["induction"][1].max() >= 0.45  # it still finds most of them (40 draws: min 0.59, mean 0.67)
    assert scores["previous_english"][0].max() > 5 * scores["previous_english"][1].max()
