"""glibc's malloc as ``attnviz.ui.memory`` sees it, replaced by recorders: the mmap thresholds it was given and its
trims, in order."""

from __future__ import annotations


class FakeMalloc:
    """Stands in for ``mallopt`` and ``malloc_trim``: ``calls`` holds ``(param, value)`` per ``mallopt`` call and
    ``"trim"`` per ``malloc_trim``; ``threshold`` is the mmap threshold set last (None: none set)."""

    def __init__(self, monkeypatch):
        from attnviz.ui import memory

        self.memory = memory
        self.calls: list = []
        monkeypatch.setattr(memory, "_mallopt", lambda param, value: self.calls.append((param, value)) or 1)
        monkeypatch.setattr(memory, "_malloc_trim", lambda pad: self.calls.append("trim") or 1)

    @property
    def threshold(self) -> int | None:
        given = [call[1] for call in self.calls if call != "trim" and call[0] == self.memory.M_MMAP_THRESHOLD]
        return given[-1] if given else None
