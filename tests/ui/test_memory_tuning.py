"""The malloc tuning is explicit, guarded and can be switched off: importing the UI tunes nothing, the training heap
raises the mmap threshold while any training runs and restores it after, and without the tuning it changes nothing."""

from __future__ import annotations

import pytest
from helpers.malloc import FakeMalloc


def test_malloc_tuning_is_explicit_and_can_be_switched_off(monkeypatch):
    import ctypes

    from attnviz.ui import memory

    monkeypatch.setattr(memory, "_malloc_trim", memory._no_trim)
    opened = []
    monkeypatch.setattr(ctypes, "CDLL", lambda name: opened.append(name))
    monkeypatch.setenv("ATTNVIZ_NO_MALLOC_TUNING", "1")
    assert memory.tune_memory() is False and opened == []  # opted out: libc is never touched
    monkeypatch.delenv("ATTNVIZ_NO_MALLOC_TUNING")
    monkeypatch.setattr(memory.sys, "platform", "darwin")
    assert memory.tune_memory() is False and opened == []  # not Linux: nothing to tune
    assert memory._malloc_trim is memory._no_trim


@pytest.mark.slow  # starts a fresh Python that imports the whole app (Streamlit, torch, pandas)
def test_importing_ui_does_not_tune_malloc():
    import subprocess
    import sys

    code = ("import ctypes; calls = []; real = ctypes.CDLL\n"
            "ctypes.CDLL = lambda *a, **k: calls.append(a) or real(*a, **k)\n"
            "import attnviz.ui\nprint(sum('libc.' in str(a[0]) for a in calls))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip().splitlines()[-1] == "0"


def test_the_training_heap_raises_the_mmap_threshold_while_any_training_runs(monkeypatch):
    from attnviz.ui import memory

    malloc = FakeMalloc(monkeypatch)
    monkeypatch.setattr(memory, "_trainings", 0)
    first, second = memory.training_heap(), memory.training_heap()
    first.__enter__()
    assert malloc.threshold == memory.TRAINING_MMAP_THRESHOLD
    second.__enter__()  # a second training, overlapping
    first.__exit__(None, None, None)
    assert malloc.threshold == memory.TRAINING_MMAP_THRESHOLD and "trim" not in malloc.calls  # one still runs
    with pytest.raises(RuntimeError), memory.training_heap():  # a failing training ends its heap too
        raise RuntimeError("the training failed")
    second.__exit__(None, None, None)
    assert malloc.threshold == memory.MMAP_THRESHOLD
    assert malloc.calls == [(memory.M_MMAP_THRESHOLD, memory.TRAINING_MMAP_THRESHOLD),
                            (memory.M_MMAP_THRESHOLD, memory.MMAP_THRESHOLD), "trim"]


def test_without_the_malloc_tuning_the_training_heap_changes_nothing(monkeypatch):
    """Untuned, ``_mallopt`` is the placeholder ``_no_mallopt``, and the training heap never calls it."""
    from attnviz.ui import memory

    calls = []
    placeholder = lambda param, value: calls.append((param, value)) or 0  # noqa: E731
    monkeypatch.setattr(memory, "_no_mallopt", placeholder)
    monkeypatch.setattr(memory, "_mallopt", placeholder)
    monkeypatch.setattr(memory, "_trainings", 0)
    with memory.training_heap():
        assert calls == []
    assert calls == []
