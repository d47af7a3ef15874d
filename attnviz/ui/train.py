"""The Train page's glue: the server's job board, this session's training job (start, stop, the live view
polled by a fragment), the before/after snapshots, the trained model as a ``weights`` option and its download.

At most one training per session (``JobBoard``'s owner is an id kept in this session's state) and
``max_trainings()`` per server; each runs in its own thread with one torch thread
(``attnviz.labs.live_train``), inside ``memory.training_heap()`` (its steps' tensors reuse the heap).  The live
view is a fragment that reruns every ``POLL_SECONDS`` while the job runs and touches it; while the browser tab
stays connected the worker touches it too (other pages may be open), and a closed tab stops it within
``jobs.IDLE_TIMEOUT`` seconds.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets

import streamlit as st

from attnviz.head_types import LABEL_THRESHOLD
from attnviz.labs import live_train
from attnviz.labs.jobs import JobBoard, JobRefusedError
from attnviz.ui.frame import plotly_config
from attnviz.ui.memory import freeze_training_imports, in_training_heap
from attnviz.ui.number_box import bounded_box, box_number, link_text, span
from attnviz.ui.share import own_link, share_and_export
from attnviz.ui.state import page_widgets_from_url, url_notices
from attnviz.urlstate import TRAIN_SEED, TRAIN_STEPS
from attnviz.views import head_figures
from attnviz.words import markdown_escape

POLL_SECONDS = 1.0
MAX_TRAININGS_ENV = "ATTNVIZ_MAX_TRAININGS"
MAX_CURVE_POINTS = 800  # loss points drawn (the mean is computed over every step)
BOX_PX = 200  # the steps and seed boxes' width: two of them fit beside each other in an 800 px window


def max_trainings() -> int:
    """Trainings one server runs at once: ``ATTNVIZ_MAX_TRAININGS``, by default one core fewer than the machine
    has (at least 1), so pages keep a core: on a 2-core machine one training at a time.  A second training leaves
    the pages no core of their own, and short page work then waits (benchmarks/README.md, "Speed where users
    wait": "Other sessions while a training runs")."""
    default = max(1, (os.cpu_count() or 2) - 1)
    try:
        return max(1, int(os.environ.get(MAX_TRAININGS_ENV, default)))
    except ValueError:
        return default


def concurrency_caption() -> str:
    """How many trainings run at once here, and what a training leaves usable."""
    most = job_board().max_running
    at_once = "one training at a time" if most == 1 else f"at most {most} trainings at once"
    return (f"One training per browser tab; this server runs {at_once}, so the pages keep a core of their own. "
            "It runs in the background: other pages stay usable (your training continues while this tab is "
            "open) and closing the tab stops it.")


@st.cache_resource(show_spinner=False)
def job_board() -> JobBoard:
    """The server's one board: its bound on concurrent trainings is per server."""
    return JobBoard(max_running=max_trainings())


def owner() -> str:
    """This session's job owner (an id in its state: unique per browser session, also under AppTest)."""
    if "_train_owner" not in st.session_state:
        st.session_state["_train_owner"] = secrets.token_hex(8)
    return st.session_state["_train_owner"]


def _alive_check():
    """A thread-safe ``alive()`` for the worker: is this session's browser tab still connected?"""
    from streamlit.runtime import Runtime
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    sid = None if ctx is None else ctx.session_id
    if sid is None or not Runtime.exists():  # AppTest: no runtime; the page's own touches keep the job
        return None
    runtime = Runtime.instance()
    return lambda: runtime.is_active_session(sid)


def _publisher():
    """``publish(run)``: offer the trained model as a weights option of this session (from the worker)."""
    from attnviz import weights
    from attnviz.ui.weights import session_id

    sid = session_id()  # the id the sidebar lists this session's models under (read on the script thread)

    def publish(run: live_train.TrainedRun):
        return weights.register_session_model(sid, live_train.run_name(run), run.model)

    return publish


def current_job():
    return job_board().get(owner())


def ended_run() -> live_train.TrainedRun | None:
    """This session's last ended run: its job's result, kept in the session once seen (the board may reap an
    ended job whose tab looked elsewhere for a while; the session keeps what it has shown)."""
    job = current_job()
    if job is not None and not job.running and job.result is not None:
        st.session_state["_train_run"] = job.result
    elif job is not None and job.running:
        return None
    return st.session_state.get("_train_run")


# ------------------------------------------------------------------ settings, start, stop

def controls() -> None:
    """Steps and seed, Start and Stop; a refused start says why.  The steps and seed follow the URL (``train_steps``,
    ``train_seed``: read on a session's first visit, a page default left out) and the sidebar's Share link, drawn once
    they are bound, names both.  Each box is a text box, so the server gets what it shows, and Start trains what the
    boxes show or nothing: anything but a whole number in range disables it, and the page's warning names the box and
    why (a link reopens such a text as the box showed it: :func:`attnviz.ui.number_box.link_text`)."""
    recommended = int(live_train.RECOMMENDED["steps"])
    cfg = live_train.page_config()
    link = share_and_export(None, link=False)
    steps_range, seed_range = (live_train.MIN_STEPS, live_train.MAX_STEPS), (0, live_train.MAX_SEED)
    page_widgets_from_url("train", {
        "train_steps": (TRAIN_STEPS, functools.partial(link_text, bounds=steps_range, what="training steps"),
                        f"training {recommended:,} steps"),
        "train_seed": (TRAIN_SEED, functools.partial(link_text, bounds=seed_range, what="training seeds"), "seed 0"),
    })
    url_notices("train_steps", "train_seed")
    job = current_job()
    if job is not None:
        job.touch()  # this tab is looking (also keeps its ended job, and the run it holds, from the reaping)
    job_board().reap()  # ended jobs of closed tabs (and the models they hold) are dropped
    running = job is not None and job.running
    # one row where the boxes and the buttons fit, the buttons on the next where they do not: never a label cut short
    row = st.container(horizontal=True, vertical_alignment="bottom")
    steps, steps_problem = bounded_box(
        row, "Training steps", "train_steps", recommended, steps_range, url=TRAIN_STEPS,
        help=f"{span(steps_range)}. Each step trains on one batch of {cfg.batch_size} repeated random sequences of "
             f"{cfg.seq_len} tokens. {recommended} (the default): the induction head forms around steps 250–300 for "
             "seeds 0–9, about 35–40 s in Chromium on a 2-core machine; a longer run sharpens the previous-token "
             "heads.",
        width=BOX_PX)
    seed, seed_problem = bounded_box(
        row, "Seed", "train_seed", 0, seed_range, url=TRAIN_SEED,
        help=f"{span(seed_range)}. Decides the initial weights and the order of the data: the same seed gives the "
             "same run.",
        width=BOX_PX)
    own_link(link, {TRAIN_STEPS: steps, TRAIN_SEED: seed}, model_left_out(),
             warn=ended_run() is not None)  # a model trained here: the link does not hold it
    refused = [problem for problem in (steps_problem, seed_problem) if problem is not None]
    training = running and not job.stopping  # a stopped one ending its step: Start waits for it (_start)
    start = row.button("Start training", key="train_start", type="primary", icon=":material/play_arrow:",
                       disabled=bool(refused) or training,
                       help="A training is running in this tab: Stop it, or wait for it to end, to start another."
                       if training else None)
    row.button("Stop", key="train_stop", disabled=not running, icon=":material/stop:",
               on_click=_stop, help="Stops after the current step; the model trained so far is kept.")
    if refused:  # Start trains what the boxes show, or nothing
        each = "the box holds a number in that range" if len(refused) == 1 else "each box holds a number in its range"
        st.warning(markdown_escape(f"{'; '.join(refused)}: Start trains nothing until {each}."),
                   icon=":material/block:")
    elif start:
        _start(box_number(steps), box_number(seed))


def model_left_out() -> str:
    """What the Train page's link holds, beside it: its steps and seed, not a model trained here."""
    return ("The link holds these training steps and seed and **holds no trained model**: it opens this page ready to "
            "train the same run (the same seed gives the same run). To share a model trained here, download it "
            "below (*Download the trained model (zip)*) and send the zip.")


def _start(steps: int, seed: int) -> None:
    """Start a training; right after Stop, under a spinner while the stopped one ends its step (``JobBoard.start``
    waits for it: until then its thread still uses a core)."""
    cfg = live_train.page_config(steps, seed)
    last = current_job()
    stopping = last is not None and last.stopping
    waiting = st.spinner("Stopping the last training…") if stopping else contextlib.nullcontext()
    try:
        work = live_train.training_work(cfg, _alive_check(), _publisher(), first_step=freeze_training_imports)
        with waiting:
            job_board().start(owner(), in_training_heap(work), name="attnviz-train")
    except JobRefusedError as exc:
        st.warning(str(exc), icon=":material/back_hand:")
        return
    st.session_state["_train_total"] = cfg.steps
    st.rerun()  # draw the page again as it is now: Stop enabled, the live view polling


def _open_with(option_name: str, page: str) -> None:
    """Make the trained model this session's weights and open ``page`` with it."""
    from attnviz.ui.weights import select_weights

    select_weights(option_name)
    st.switch_page(page)


def _stop() -> None:
    job = current_job()
    if job is not None:
        job.stop()


# ------------------------------------------------------------------ the live view

def live() -> None:
    """Progress, loss and head-score curves: a fragment that polls the job while it runs.

    Its layout is fixed: seven slots, each its element or an ``st.empty()``, in the same order on every run.  A
    poll that comes while a run is still drawing ends that run (``FINISHED_EARLY_FOR_RERUN``: often, on a loaded
    machine), and Streamlit 1.67 then drops the run's deltas not yet sent but keeps its references to
    messages the browser has cached (``ref_hash``: a chart identical to one it was sent before, such as the
    "before training" map).  Such a reference can sit behind a dropped delta; if the layout grew from the last
    run it lands past the fragment's last element in the browser, which throws "Bad delta path index" and blanks
    the page.  With a fixed layout the browser already holds every slot from the run before, so the reference only
    fills a slot that the next run draws again.
    """
    job = current_job()
    running = job is not None and job.running
    st.fragment(_live, run_every=POLL_SECONDS if running else None)()


def _live() -> None:
    job = current_job()
    run = st.session_state.get("_train_run") if job is None else None  # the board reaped this tab's ended job
    if job is None and run is None:
        st.info("Nothing trained in this session yet: choose the steps and press **Start training**.",
                icon=":material/model_training:")
        return
    if job is not None:
        job.touch()  # the page is looking: the job keeps running
        view, status = live_train.progress_view(job.progress), job.status
        total = int(st.session_state.get("_train_total", 0)) or None
        if job.running:
            st.session_state["_train_seen_running"] = True
        elif st.session_state.pop("_train_seen_running", False):
            st.rerun()  # it just ended: redraw the page (results, the stop button) and the sidebar (new weights)
    else:
        view, total = live_train.history_view(run), run.cfg.steps
        status = "finished" if run.steps_run >= total else "stopped"
    done = view.last_step + 1
    # the same seven slots on every run, each its element or st.empty(): the delta paths never move (see live())
    st.progress(min(1.0, done / total) if total else 0.0, text=_status_text(status, done, total, view))
    if job is not None and job.error is not None:
        st.error(f"The training failed: {job.error}", icon=":material/error:")
    else:
        st.empty()
    source = job if job is not None else run
    if view.steps.size:
        stride = max(1, view.steps.size // MAX_CURVE_POINTS)
        loss = _kept("loss", source, (total,), (view.last_step, stride),
                     lambda: head_figures.loss_curve(view.steps, view.loss, total_steps=total, stride=stride),
                     lambda fig: head_figures.set_loss_curve(fig, view.steps, view.loss, stride=stride))
        st.plotly_chart(loss, config=plotly_config("attnviz-training-loss"), key="train_loss")
    else:
        st.empty()
    formed = []
    if view.probe_steps.size:
        curves = _kept("scores", source, (total, view.induction.shape[1:]), int(view.probe_steps[-1]),
                       lambda: head_figures.score_curves(view.probe_steps, view.induction, view.previous_token,
                                                         total_steps=total, threshold=LABEL_THRESHOLD),
                       lambda fig: head_figures.set_score_curves(fig, view.probe_steps, view.induction,
                                                                 view.previous_token))
        st.plotly_chart(curves, config=plotly_config("attnviz-training-heads"), key="train_scores")
        formed = live_train.crossings(view, LABEL_THRESHOLD)
    else:
        st.empty()
    if formed:
        st.markdown("**Heads that formed:** " + "; ".join(
            f"{name} became a{'n' if kind == 'induction' else ''} {kind} head at step {step} (now {score:.2f})"
            for kind, name, step, score in formed))
    elif status in ("finished", "stopped", "tab closed") and view.probe_steps.size:
        st.markdown(_none_formed(done))
    else:
        st.empty()
    if view.probe_steps.size:
        st.caption(f"Dotted line: {LABEL_THRESHOLD:g}, the score at which the Heads page names a head's type. "
                   f"Induction: {probes_said()} (the Induction lab scores one sequence, of the T and seed picked "
                   "there, so its scores and its best head can differ); previous-token: on windows of held-out English "
                   "and code.")
    else:
        st.empty()
    if status in ("running", "stopping") and view.before is not None:
        before = _kept("before", view.before, (), None, lambda: head_figures.stripe_grid(
            view.before, live_train.SNAPSHOT_T, title="before training: every head on a repeated random sequence"))
        st.plotly_chart(before, config=plotly_config("attnviz-heads-before"), key="train_before_live",
                        width=head_figures.STRIPE_GRID_PX)  # the width its square tiles are made for (one element)
    else:
        st.empty()


def probes_said() -> str:
    """What the induction scores of this page are measured on (the Induction lab's are on one sequence of its own)."""
    from attnviz.labs.train import PROBE_REPEATS, probe_lengths

    lengths = probe_lengths(live_train.page_config())
    named = ", ".join(map(str, lengths[:-1])) + " and " + str(lengths[-1]) if len(lengths) > 1 else str(lengths[0])
    return (f"the mean stripe over {PROBE_REPEATS * len(lengths)} fixed repeated random sequences the model never "
            f"trains on ([BOS] + x + x, {PROBE_REPEATS} with each T = {named})")


def _none_formed(done: int) -> str:
    """What an ended run in which no head reached the line says: when this recipe's heads form, in steps."""
    return (f"**No head has a type yet** after {done:,} step{'s' if done != 1 else ''}: none reached the dotted "
            f"{LABEL_THRESHOLD:g} line. With this recipe the induction heads form around step "
            f"{live_train.FORMS_AROUND_STEP} ({int(live_train.RECOMMENDED['steps']):,} steps is the default run).")


def _kept(name: str, source: object, shape: tuple, data: object, build, fill=None):
    """The figure this session drew last time under ``name``, if it was of this ``source`` (the same object: this
    job or run, this array) and ``shape`` — with ``fill(fig)`` putting the new ``data`` into it in place when that
    changed —, else ``build()``'s new one. The live view polls every second while the training thread needs the
    GIL: filling the kept score curves costs it far less than building them anew."""
    kept = st.session_state.get(f"_train_fig_{name}")
    if kept is None or kept[0] is not source or kept[1] != shape:
        kept = st.session_state[f"_train_fig_{name}"] = [source, shape, data, build()]
    elif kept[2] != data:
        fill(kept[3])
        kept[2] = data
    return kept[3]


def _status_text(status: str, done: int, total: int | None, view) -> str:
    of = f"{done} of {total}" if total else str(done)
    parts = [f"step {of}"]
    if view.loss.size:
        parts.append(f"loss {head_figures.smooth(view.loss)[-1]:.2f}")
    if view.probe_steps.size:
        layer, head = divmod(int(view.induction[-1].argmax()), view.induction.shape[-1])
        parts.append(f"best induction on the probes {view.induction[-1].max():.2f} "
                     f"({head_figures.head_name(layer, head)})")
    parts.append(f"{view.seconds:.0f} s")
    if status == "running" and total and done < total:
        left = live_train.seconds_left_recent(view.steps, view.step_seconds, total)
        parts.append("estimating the time left…" if left is None else f"about {left:.0f} s left")
    lead = {"running": "Training", "stopping": "Stopping", "finished": "Finished", "stopped": "Stopped",
            "tab closed": "Stopped (tab closed)", "failed": "Failed"}.get(status, status)
    return f"{lead}: " + " · ".join(parts)


# ------------------------------------------------------------------ after training

def results() -> None:
    """The ended run: before/after snapshots, the final scores, the weights option and the download."""
    run = ended_run()
    if run is None:
        return
    st.subheader("The heads before and after")
    st.caption(f"Every head on the same repeated random sequence ([BOS] + {live_train.SNAPSHOT_T} random tokens, "
               "twice), which the model never trained on. The red line is the induction stripe A[i, i−T+1]: "
               "an induction head lights it up on the second copy; a previous-token head lights up the "
               "diagonal just below the main one. Tile titles: the head's type at the last probe (— for none).")
    row = st.container(horizontal=True, gap="medium")  # side by side where two fit, else one above the other
    # columns the width the grids' square tiles are made for
    before_col, after_col = (row.container(width=head_figures.STRIPE_GRID_PX) for _ in range(2))
    notes = run.type_notes() or None
    blank = None if notes is None else [["" for _ in row] for row in notes]  # the after grid's title lines: aligned
    before_col.plotly_chart(head_figures.stripe_grid(run.before, live_train.SNAPSHOT_T, notes=blank,
                                                     title="before (step 0)"),
                            config=plotly_config("attnviz-heads-before"), key="train_before")
    after_col.plotly_chart(head_figures.stripe_grid(run.after, live_train.SNAPSHOT_T, notes=notes,
                                                    title=f"after {run.steps_run} steps"),
                           config=plotly_config("attnviz-heads-after"), key="train_after")
    if run.final_scores:
        st.plotly_chart(head_figures.score_grid(run.final_scores, title="final scores (last probe)"),
                        config=plotly_config("attnviz-training-scores"), key="train_final_scores")
    if run.option is not None:
        st.success(f"Pick **{run.option.name}** as *Weights* in the sidebar to see this model's heads on every "
                   "page (for this session only).", icon=":material/check_circle:")
        heads_col, lab_col = st.columns(2)
        for col, page, label, key in ((heads_col, "pages/heads.py", "See its heads", "train_see_heads"),
                                      (lab_col, "pages/induction.py", "Test it in the Induction lab", "train_see_lab")):
            lab_help = (None if key != "train_see_lab" else "The lab scores every head on one repeated random sequence "
                        "([BOS] + x + x) of the T and seed you pick there; this page's scores are "
                        f"{probes_said()}: the two, and the best head, can differ.")
            if col.button(label, key=key, icon=":material/arrow_forward:", width="stretch", help=lab_help):
                _open_with(run.option.name, page)
    st.download_button(
        "Download the trained model (zip)", functools.partial(live_train.checkpoint_zip, run),
        file_name=f"attnviz-trained-seed{run.cfg.seed}-{run.steps_run}steps.zip", mime="application/zip",
        on_click="ignore", icon=":material/download:", key="train_download",
        help="model.safetensors + config.json + training.json, the folder `attnviz train --out` writes: "
             "unzip it and pass the folder to `streamlit run app.py -- --checkpoint FOLDER`.")
