"""Whether the float32 numbers a class is about to hold fit in the memory this machine has free: said in words, with
the largest part and the sizes to make smaller, before any is allocated (the book's Chapter 3 classes, ``GPTModel``
and its parts), rather than torch's allocator error or a machine out of memory."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from attnviz.kv_cache import format_bytes

# weights this small (64 MiB) are built without reading how much memory is free
ALWAYS_FITS = 2**26


def free_memory() -> int | None:
    """The bytes this machine has free for a new model: Linux's MemAvailable (``/proc/meminfo``), else its physical
    memory (``os.sysconf``); None where neither can be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def check_memory(reader: str, parts: dict[str, int], sizes: str) -> None:
    """ValueError when the float32 numbers of ``parts`` (each part's name, with the sizes that make it: its count)
    need more bytes than the machine has free (:func:`free_memory`): said before any is allocated, with the largest
    part and the ``sizes`` to make smaller.  Weights of at most :data:`ALWAYS_FITS` bytes are never refused (nor is
    free memory read for them), nor is anything while building on torch's ``meta`` device (a checkpoint's skeleton),
    which allocates nothing."""
    needed = 4 * sum(parts.values())
    if needed <= ALWAYS_FITS:
        return
    free = free_memory()
    if free is None or needed <= free or torch.empty(()).is_meta:
        return
    part, numbers = max(parts.items(), key=lambda item: item[1])
    raise ValueError(f"This {reader} would hold {sum(parts.values()):,} float32 numbers ({format_bytes(needed)}), "
                     f"more than the {format_bytes(free)} this machine has free: make {sizes} smaller. The largest "
                     f"part: {part}, {format_bytes(4 * numbers)}.")
