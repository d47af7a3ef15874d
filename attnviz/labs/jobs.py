"""Background jobs for long work started from a page (training): off the script thread, at most one per
session, a bounded number per server, and stopped when the session that started it stops looking.

A job is a function ``work(job)`` run in a daemon thread.  It reports progress with ``job.report(**values)``
and polls ``job.should_stop()`` between steps; ``should_stop`` turns true when the user pressed stop or when
the owner has not called ``job.touch()`` for ``idle_timeout`` seconds — a page touches its job on every
rerun and on a timer, so a closed tab stops its training within that time.  Nothing here imports Streamlit:
the owner is any hashable id (the Streamlit glue passes the session id).

A stopped job's thread ends its current step first.  Until it has ended it still uses a core, so it still counts
against ``max_running``; a new start by its own owner (Start right after Stop) waits up to ``stop_wait`` seconds for
it to end rather than refusing at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

MAX_RUNNING = 2  # trainings per server at once: each takes a core here (2 cores)
IDLE_TIMEOUT = 30.0  # seconds without a touch from the owner before a job stops itself
STOP_WAIT = 5.0  # seconds a new start waits for its owner's stopped job to end its step (usually well under one)


class JobRefusedError(RuntimeError):
    """A job cannot start now; the message says why and what to do."""


@dataclass(eq=False)
class Job:
    """One background job.  ``progress`` is append-only (read it without a lock: list appends are atomic)."""

    owner: Hashable
    idle_timeout: float
    clock: Callable[[], float] = time.monotonic
    progress: list[dict[str, Any]] = field(default_factory=list)
    result: Any = None
    error: BaseException | None = None
    stop_reason: str | None = None  # "stopped" (by the user) or "tab closed", when it ended early
    _stop: threading.Event = field(default_factory=threading.Event)
    _done: threading.Event = field(default_factory=threading.Event)
    _last_seen: float = 0.0
    thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self._last_seen = self.clock()

    # --- owner side
    def touch(self) -> None:
        """The owner is still looking (call on every rerun of its page)."""
        self._last_seen = self.clock()

    def stop(self) -> None:
        if not self._done.is_set() and self.stop_reason is None:
            self.stop_reason = "stopped"
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    @property
    def stopping(self) -> bool:
        """Told to stop, and its thread has not ended yet (it ends its current step first)."""
        return self.running and self._stop.is_set()

    @property
    def status(self) -> str:
        if self.running:
            return "stopping" if self._stop.is_set() else "running"
        if self.error is not None:
            return "failed"
        return self.stop_reason or "finished"

    # --- worker side
    def should_stop(self) -> bool:
        if self._stop.is_set():
            return True
        if self.clock() - self._last_seen > self.idle_timeout:
            self.stop_reason = "tab closed"
            self._stop.set()
            return True
        return False

    def report(self, **values: Any) -> None:
        self.progress.append(values)


class JobBoard:
    """Jobs by owner; at most one running per owner and ``max_running`` per server (a stopping job counts until its
    thread ends)."""

    def __init__(self, max_running: int = MAX_RUNNING, idle_timeout: float = IDLE_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic, stop_wait: float = STOP_WAIT):
        self.max_running = max_running
        self.idle_timeout = idle_timeout
        self.stop_wait = stop_wait
        self.clock = clock
        self._jobs: dict[Hashable, Job] = {}
        self._lock = threading.Lock()

    def get(self, owner: Hashable) -> Job | None:
        """The owner's latest job (running or ended), or None."""
        with self._lock:
            return self._jobs.get(owner)

    def running(self) -> int:
        with self._lock:
            return sum(job.running for job in self._jobs.values())

    def start(self, owner: Hashable, work: Callable[[Job], Any], *, name: str = "attnviz-job") -> Job:
        """Start ``work(job)`` in a thread; raise JobRefusedError if the owner or the server is busy.  The owner's
        stopped job that is still ending its step is waited for, up to ``stop_wait`` seconds."""
        mine = self.get(owner)
        if mine is not None and mine.stopping:
            mine.join(self.stop_wait)  # outside the lock: other owners' starts and the pages' reads go on
        with self._lock:
            mine = self._jobs.get(owner)
            if mine is not None and mine.stopping:
                raise JobRefusedError("The last training in this tab is still stopping (it ends after its current "
                                      "step): press Start again in a moment.")
            if mine is not None and mine.running:
                raise JobRefusedError("A training is already running in this tab: stop it first.")
            busy = sum(job.running for job in self._jobs.values())
            if busy >= self.max_running:
                raise JobRefusedError(
                    f"The server is already training {busy} model{'s' if busy != 1 else ''} for other browser tabs "
                    f"— yours or other users' — (at most {self.max_running} at once, to keep every page responsive). "
                    "Try again in a minute."
                )
            job = Job(owner=owner, idle_timeout=self.idle_timeout, clock=self.clock)
            job.thread = threading.Thread(target=self._run, args=(job, work), name=name, daemon=True)
            self._jobs[owner] = job
        job.thread.start()
        return job

    def forget(self, owner: Hashable) -> None:
        """Drop the owner's ended job (and the result it holds)."""
        with self._lock:
            job = self._jobs.get(owner)
            if job is not None and not job.running:
                del self._jobs[owner]

    def reap(self) -> int:
        """Drop ended jobs whose owner has not looked for ``idle_timeout`` (closed tabs); return how many."""
        now = self.clock()
        with self._lock:
            gone = [o for o, j in self._jobs.items() if not j.running and now - j._last_seen > self.idle_timeout]
            for owner in gone:
                del self._jobs[owner]
        return len(gone)

    @staticmethod
    def _run(job: Job, work: Callable[[Job], Any]) -> None:
        try:
            job.result = work(job)
        except BaseException as exc:  # noqa: BLE001 — reported to the owner's page, never raised into a thread
            job.error = exc
        finally:
            job._done.set()
