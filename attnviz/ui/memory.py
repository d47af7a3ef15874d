"""The server's memory: glibc's malloc tuned to hand freed tensor memory back to the OS (and to keep a training's in the
heap while it runs), and the garbage collector's freeze of what the server imported, so that Streamlit's collection
after each run does not walk it."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import os
import sys
import threading

from attnviz.background import after_the_browser_draws

NO_MALLOC_TUNING = "ATTNVIZ_NO_MALLOC_TUNING"  # set to 1 to leave glibc's malloc as it is


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 1 << 20  # while pages only: every block of 1 MiB or more is mmap'd, and unmapped when freed
TRAINING_MMAP_THRESHOLD = 32 << 20  # while a training runs: its steps' tensors, all below this, come from the heap


def _no_trim(pad: int) -> int:
    return 0


def _no_mallopt(param: int, value: int) -> int:
    return 0


_malloc_trim = _no_trim  # tune_memory() replaces it with glibc's malloc_trim
_mallopt = _no_mallopt  # … and this with glibc's mallopt
_trainings = 0  # trainings running in training_heap()
_heap_lock = threading.Lock()


_frozen = threading.Lock()  # held once freeze_imports() has frozen


def freeze_imports() -> bool:
    """Once per process: move every object alive now — the modules, classes and functions that importing torch,
    pandas, Plotly, Streamlit and attnviz made — out of the garbage collector's view (``gc.freeze``).
    True on the call that froze them.

    Streamlit collects all generations after every script run (``runner.postScriptGC``); walking all of them
    holds the GIL while the server sends the messages that end the run, which delays what the browser draws
    (benchmarks/README.md, "Fast first paint").  Only these import-time
    objects are frozen: everything a run makes later (traces, figures, session state) is still collected.
    (With Streamlit's file watcher on, each edit of a module leaves its old, frozen copy behind: a developer's cost.)

    The freeze happens inside the first run, so it also holds that run's page globals, which the page then fills
    (its Context, and so its Trace); a page that defines functions makes them a cycle, which a frozen object keeps
    from ever being collected.  So once that run's script thread has ended, a thread thaws everything, collects
    and freezes again (``_refreeze_after``): the first page's Trace goes when the cache lets it go.
    """
    if not _frozen.acquire(blocking=False):
        return False
    gc.freeze()
    script = threading.current_thread()
    if script is not threading.main_thread():  # a script thread (a test calling this directly: nothing to wait for)
        threading.Thread(target=_refreeze_after, args=(script,), name="attnviz-refreeze", daemon=True).start()
    return True


def _refreeze_after(script: threading.Thread) -> None:
    """Once ``script`` (the first run's thread) has ended and the browser has had the time to draw that run's page
    (``background.after_the_browser_draws``): thaw, collect what that run left (its page globals), and freeze what is
    alive then.  The collection holds the GIL, so the server sends nothing meanwhile: at once, it would hold back the
    first page's last messages.  Another session's run going on at that moment would have its globals frozen too."""
    script.join()
    after_the_browser_draws()
    _refreeze()


def _refreeze() -> None:
    """Thaw everything, collect what is garbage now, and freeze what is alive."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


_trained = threading.Lock()  # held once freeze_training_imports() has frozen


def freeze_training_imports() -> bool:
    """Once per process, after a training's first step: thaw, collect and freeze again, so that what that step
    imported — ``torch.optim``'s first step imports ``torch._dynamo`` and with it sympy and mpmath —
    leaves the collector's view as ``freeze_imports``' modules did.  True on the call that froze them.

    Unfrozen, the collection Streamlit runs after every script run walks them each time, holding the GIL
    after every poll of the Train page's live view (the training thread waits for the GIL between its ops) and after
    every run of every page on that server from then on.  Like ``freeze_imports``' second freeze, this also freezes
    what the sessions hold at that moment (their cycles are never collected once they end): once per process.
    """
    if not _trained.acquire(blocking=False):
        return False
    _refreeze()
    return True


def tune_memory() -> bool:
    """Return freed tensor memory to the OS: on Linux with glibc, fix malloc's mmap threshold at 1 MiB and
    call ``malloc_trim`` after each new run; elsewhere, or with ``ATTNVIZ_NO_MALLOC_TUNING=1``, do nothing.
    Called by ``setup()`` (the entry point of every page); idempotent.  True when the tuning is on.

    glibc raises its mmap threshold after each freed mmap'd block, so after a few runs the multi-MB
    per-head arrays come from per-thread heaps that Streamlit's many script threads fragment and never
    shrink.  A fixed threshold keeps every block ≥ 1 MB in mmap (unmapped when freed), and
    ``malloc_trim`` after each new run hands back what the heaps freed.  While a training runs the threshold is
    higher (``training_heap``).
    """
    global _malloc_trim, _mallopt
    if _malloc_trim is not _no_trim:
        return True
    if os.environ.get(NO_MALLOC_TUNING, "").strip() not in ("", "0") or not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt, malloc_trim = libc.mallopt, libc.malloc_trim  # glibc only (musl has neither)
    except (OSError, AttributeError):
        return False
    _mallopt, _malloc_trim = mallopt, malloc_trim
    with _heap_lock:
        _set_mmap_threshold(TRAINING_MMAP_THRESHOLD if _trainings else MMAP_THRESHOLD)  # also turns off the dynamic one
    return True


def _set_mmap_threshold(size: int) -> None:
    if _mallopt is not _no_mallopt:
        _mallopt(M_MMAP_THRESHOLD, size)


@contextlib.contextmanager
def training_heap():
    """Around a training job's work: while any training runs, malloc's mmap threshold is
    ``TRAINING_MMAP_THRESHOLD``; when the last one ends, ``MMAP_THRESHOLD`` again and ``malloc_trim``.

    A training step allocates and frees the same few multi-MB tensors (activations, logits, gradients).
    Under the pages' 1 MiB threshold each of them is a fresh mmap whose pages fault in and are zeroed again every
    step, which slows every step (benchmarks/README.md, "Speed where users wait").  From the heap, the freed
    blocks are reused by the next step.  A page's map larger than the training threshold (GPT-2's 12 heads at
    1,024 tokens: 12 × 1,024² float32) is still an mmap of its own.
    """
    global _trainings
    with _heap_lock:
        _trainings += 1
        if _trainings == 1:
            _set_mmap_threshold(TRAINING_MMAP_THRESHOLD)
    try:
        yield
    finally:
        with _heap_lock:
            _trainings -= 1
            if _trainings == 0:
                _set_mmap_threshold(MMAP_THRESHOLD)
                _malloc_trim(0)  # what the training's heap freed goes back to the system


def in_training_heap(work):
    """A training job's ``work(job)``, run inside ``training_heap()``."""

    def in_heap(job):
        with training_heap():
            return work(job)

    return in_heap


def trim() -> None:
    """Hand the memory the heaps freed back to the OS (``malloc_trim``; nothing while malloc is not tuned): after a new
    run or an eviction freed hundreds of MB."""
    _malloc_trim(0)
