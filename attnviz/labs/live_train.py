"""The Train page's work, without Streamlit: one ``attnviz.labs.train`` run as an ``attnviz.labs.jobs`` job.

``training_work(cfg, alive)`` returns the ``work(job)`` a ``JobBoard`` runs off the script thread: it
yields to the pages (``attnviz.background``: ``THREADS`` torch intra-op threads *in that thread*, the
script threads keep theirs, at nice ``NICENESS``), draws the untrained heads' "before" snapshot, trains with
``job.should_stop`` as the stop signal, reporting every step, and returns a :class:`TrainedRun` (the
model, its history, the before/after snapshots).  ``alive()`` (optional) says whether the owner's browser
tab is still connected; while it is, the worker touches the job itself, so a learner may look at other
pages while the model trains — a closed tab stops touching and the job stops after its idle timeout.

``progress_view(job.progress)`` turns the reports into arrays for the figures; ``seconds_left_recent`` is the
time-left estimate of the page's progress bar and of ``attnviz train``, from the pace of the latest steps past the
warm-up; ``checkpoint_zip`` packs a trained model as the folder
``attnviz train --out`` writes, in memory.
"""

from __future__ import annotations

import io
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from attnviz.background import NICENESS, THREADS, yield_to_pages  # noqa: F401  (a training's threads and nice value)
from attnviz.head_types import repeated_random_tokens

MIN_STEPS, MAX_STEPS = 10, 6000
ESTIMATE_AFTER = 5  # steps done before a time-left estimate: the first ones (imports, warm-up) are slower
WARM_UP_STEPS = 2  # the Train page's estimate leaves out these first steps' times (imports, the first probe)
RECENT_STEPS = 50  # and reads the pace of at most these latest steps: one probe period, so the pace stays steady
MAX_SEED = 2**31 - 1
SNAPSHOT_T, SNAPSHOT_SEED = 16, 1234  # the snapshot sequence: [BOS] + x + x, |x| = 16 (33 tokens)
ZIP_FOLDER = "attnviz-trained"

# The Train page's default run: the bundled model's recipe (attnviz.labs.train.TrainConfig's defaults) made
# quicker to its phase change — 64-token sequences, 48 per batch (cheaper steps than 64 per batch, which more than
# pays for the few more steps it needs), 4 heads per layer (layer 0's all random-frozen value/output maps),
# lr 1.3e-2 — for 1,000 steps, so the induction head forms well within the run (benchmarks/README.md,
# "Speed where users wait", has the sweeps and the times in Chromium).
RECOMMENDED: dict = {"steps": 1000, "seq_len": 64, "batch_size": 48, "lr": 1.3e-2, "n_heads": 4, "random_ov_heads": 4,
                     "probe_every": 10}  # a probe every 10 steps: the head is seen within 10 steps, for a small cost
# About when the default run's induction heads form, in steps (seeds 0–9: steps 290–350; benchmarks/README.md,
# "Speed where users wait"): the Train page promises it in steps, which do not depend on how busy the machine is.
FORMS_AROUND_STEP = 300


def page_config(steps: int | None = None, seed: int = 0, **overrides):
    """The ``TrainConfig`` of a Train-page run: the recommended recipe with the learner's steps and seed."""
    from attnviz.labs.train import TrainConfig

    values = {**RECOMMENDED, **overrides}
    if steps is not None:
        values["steps"] = steps
    steps = int(values["steps"])
    if not MIN_STEPS <= steps <= MAX_STEPS:
        raise ValueError(f"steps must be between {MIN_STEPS} and {MAX_STEPS}; got {steps}")
    if not 0 <= int(seed) <= MAX_SEED:
        raise ValueError(f"seed must be between 0 and {MAX_SEED}; got {seed}")
    cfg = TrainConfig(**{**values, "seed": int(seed)})
    probe_every = max(1, min(cfg.probe_every, steps // 20 or 1))  # at least ~20 points on the score curves
    return replace(cfg, probe_every=probe_every)


def snapshot_tokens() -> np.ndarray:
    """The sequence the before/after snapshots show: [BOS] + x + x, |x| = ``SNAPSHOT_T``: (2T + 1,)."""
    return repeated_random_tokens(SNAPSHOT_T, SNAPSHOT_SEED, bos=True)


def snapshot(model) -> np.ndarray:
    """Every head's weights on ``snapshot_tokens()``: (layers, heads, n, n)."""
    from attnviz.models import attention_maps

    return attention_maps(model, snapshot_tokens())


@dataclass(eq=False)
class TrainedRun:
    """What a finished (or stopped) training leaves: the model and what the page draws of it."""

    cfg: object  # attnviz.labs.train.TrainConfig
    model: object  # attnviz.models.GPTModel, eval mode
    history: object  # attnviz.labs.train.History
    before: np.ndarray  # (layers, heads, n, n) on snapshot_tokens(), untrained
    after: np.ndarray  # (layers, heads, n, n) on snapshot_tokens(), trained
    option: object = None  # what publish() returned (the glue: the weights option it was offered as)

    @property
    def steps_run(self) -> int:
        return len(self.history.steps)

    @property
    def final_scores(self) -> dict[str, np.ndarray]:
        """The last probe's stripes: ``{"induction": (layers, heads), "previous_token": (layers, heads)}``."""
        if not self.history.probe_steps:
            return {}
        return {"induction": self.history.induction[-1], "previous_token": self.history.previous_token[-1]}

    def type_notes(self) -> list[list[str]]:
        """Each head's type at the last probe ("previous-token 0.92", or "—"): layers × heads strings."""
        from attnviz.head_types import LABELS, head_label

        scores = self.final_scores
        if not scores:
            return []
        layers, heads = scores["induction"].shape
        notes = []
        for layer in range(layers):
            row = []
            for head in range(heads):
                one = {name: scores[name][layer, head] for name in ("induction", "previous_token")}
                label = head_label(one | {"duplicate_token": np.nan})  # not probed while training
                key = next((k for k, text in LABELS.items() if text == label), None)
                row.append("—" if key is None else f"{label} {one[key]:.2f}")
            notes.append(row)
        return notes

    def metadata(self) -> dict:
        from attnviz.labs.train import run_metadata

        final = {name: np.round(values, 4).tolist() for name, values in self.final_scores.items()}
        return run_metadata(self.cfg, self.history, final) | {"trained_by": "the attnviz Train page"}


def run_name(run: TrainedRun) -> str:
    """How the weights option of a trained run is listed, after ``weights.TRAINED`` ("3000 steps, seed 0", "stopped
    at step 420 of 3000, seed 0"); ``urlstate`` reads a link's steps and seed back from it."""
    planned = run.cfg.steps
    done = run.steps_run
    steps = f"{planned} steps" if done >= planned else f"stopped at step {done} of {planned}"
    return f"{steps}, seed {run.cfg.seed}"


def training_work(cfg, alive: Callable[[], bool] | None = None,
                  publish: Callable[[TrainedRun], object] | None = None,
                  first_step: Callable[[], object] | None = None) -> Callable:
    """The ``work(job)`` of one training run (see the module docstring).

    ``publish(run)`` is called in the worker when the run ends with a model its owner can still see (it
    finished, or the user stopped it; not when the tab closed): the Streamlit glue offers it as a
    ``weights`` option there, so it is listed on every page even if the Train page is not open.  Its
    return value is kept as ``run.option``.  ``first_step()`` is called in the worker once the first step is
    done (and with it whatever the optimiser's first step imports).
    """

    def work(job) -> TrainedRun:
        from attnviz.labs.train import build_model, train

        yield_to_pages()  # THREADS torch threads in this thread only, at nice NICENESS
        start = time.perf_counter()
        before = snapshot(build_model(cfg))  # the same seeded initial weights train() starts from
        job.report(step=None, before=before, seconds=time.perf_counter() - start)

        def on_step(step: int, loss: float, scores: dict | None) -> None:
            if alive is not None and alive():
                job.touch()
            entry = {"step": step, "loss": loss, "seconds": time.perf_counter() - start}
            if scores is not None:
                entry |= {"induction": scores["induction"], "previous_token": scores["previous_token"]}
            job.report(**entry)
            if step == 0 and first_step is not None:
                first_step()

        model, history = train(cfg, on_step=on_step, should_stop=job.should_stop)
        run = TrainedRun(cfg=cfg, model=model, history=history, before=before, after=snapshot(model))
        if publish is not None and history.steps and job.stop_reason != "tab closed":
            run.option = publish(run)
        return run

    return work


@dataclass(eq=False)
class ProgressView:
    """The reports of a running job as arrays: loss per step, stripes (probes, layers, heads) per probe."""

    steps: np.ndarray
    loss: np.ndarray
    probe_steps: np.ndarray
    induction: np.ndarray
    previous_token: np.ndarray
    before: np.ndarray | None
    seconds: float
    step_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))  # the time at the end of each of ``steps``

    @property
    def last_step(self) -> int:
        return int(self.steps[-1]) if self.steps.size else -1


def progress_view(progress: list[dict]) -> ProgressView:
    """Arrays from ``job.progress`` (read while the worker appends: a snapshot of the list is taken first)."""
    entries = list(progress)
    before = next((e["before"] for e in entries if "before" in e), None)
    steps = [e for e in entries if e.get("step") is not None]
    probes = [e for e in steps if "induction" in e]
    shape = (0, *before.shape[:2]) if before is not None else (0, 0, 0)
    return ProgressView(
        steps=np.array([e["step"] for e in steps], dtype=np.int64),
        loss=np.array([e["loss"] for e in steps], dtype=np.float64),
        probe_steps=np.array([e["step"] for e in probes], dtype=np.int64),
        induction=np.array([e["induction"] for e in probes]) if probes else np.zeros(shape),
        previous_token=np.array([e["previous_token"] for e in probes]) if probes else np.zeros(shape),
        before=before,
        seconds=float(entries[-1].get("seconds", 0.0)) if entries else 0.0,
        step_seconds=np.array([e.get("seconds", 0.0) for e in steps], dtype=np.float64),
    )


def seconds_left_recent(steps, seconds, total: int | None) -> float | None:
    """About how long the steps left take at the pace of the latest ones: ``steps`` the steps done (0, 1, …, in
    order), ``seconds`` the time since the start at the end of each.  The first ``WARM_UP_STEPS`` steps' times are
    left out (they hold the imports, the first allocations and the first probe: their pace is many times the
    run's), and at most the last ``RECENT_STEPS`` steps are read.  ``None`` — the page says "estimating…" — without
    a total, until ``ESTIMATE_AFTER`` steps past the warm-up are done, and once none is left."""
    steps, seconds = list(steps), list(seconds)
    if not total or not steps:
        return None
    done = int(steps[-1]) + 1
    # the step whose end starts the window: the warm-up's last, or the one RECENT_STEPS before the latest
    first = max(WARM_UP_STEPS - 1, len(steps) - 1 - RECENT_STEPS)
    if done >= total or first >= len(steps) or int(steps[-1]) - int(steps[first]) < ESTIMATE_AFTER:
        return None
    pace = (float(seconds[-1]) - float(seconds[first])) / (int(steps[-1]) - int(steps[first]))  # seconds a step
    return pace * (total - done)


def crossings(view: ProgressView, threshold: float) -> list[tuple[str, str, int, float]]:
    """When each head's score first reached ``threshold``: ``(kind, head name, probe step, latest score)`` for
    kind "induction" / "previous-token", in step order — the moments the page points out ("L1H2 became an
    induction head at step 1250")."""
    from attnviz.views.head_figures import head_name

    found = []
    for kind, scores in (("induction", view.induction), ("previous-token", view.previous_token)):
        if not scores.size:
            continue
        above = scores >= threshold  # (probes, layers, heads)
        for layer, head in zip(*np.nonzero(above.any(axis=0))):
            first = int(np.argmax(above[:, layer, head]))
            found.append((kind, head_name(int(layer), int(head)), int(view.probe_steps[first]),
                          float(scores[-1, layer, head])))
    return sorted(found, key=lambda item: (item[2], item[0], item[1]))


def history_view(run: TrainedRun) -> ProgressView:
    """The same arrays as ``progress_view`` from an ended run's history (when its job's reports are gone)."""
    history = run.history
    return ProgressView(
        steps=np.asarray(history.steps, dtype=np.int64), loss=np.asarray(history.loss, dtype=np.float64),
        probe_steps=np.asarray(history.probe_steps, dtype=np.int64),
        induction=np.asarray(history.induction), previous_token=np.asarray(history.previous_token),
        before=run.before, seconds=float(history.seconds),
    )


def checkpoint_zip(run: TrainedRun) -> bytes:
    """The trained model as a zip of the folder ``attnviz train --out`` writes (model.safetensors,
    config.json, training.json; fp16), built in memory: unzip it and pass the folder to ``--checkpoint``."""
    from attnviz.labs.train import checkpoint_files

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in checkpoint_files(run.model, run.metadata()).items():
            archive.writestr(f"{ZIP_FOLDER}/{name}", data)
    return buffer.getvalue()

