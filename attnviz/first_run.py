"""Which run of ``app.py`` is a server process's first while torch is still to be imported — claimed once.

A fresh server's first page waits ~1 s for torch before it can send a chart; ``app.py`` uses that wait to have
the browser fetch and compile Plotly's code (benchmarks/README.md, "Fast first paint").  Only one run per process
does: later runs find torch imported (there is no wait to use), and eight simultaneous first sessions each
compiling 5 MB of JavaScript beside the server on two cores made its health check time out
(``tests/browser/test_concurrency.py``, with an earlier version that preloaded every session's first run).
Pure Python: importing this imports nothing else (not torch, pandas or Streamlit).
"""

from __future__ import annotations

import sys
import threading

_claimed = threading.Lock()  # held from the first claim on, never released


def torch_to_import() -> bool:
    """True while nothing in this process has imported torch yet."""
    return "torch" not in sys.modules


def claim() -> bool:
    """True for exactly one caller per process (any thread), and only while torch is still to be imported."""
    return torch_to_import() and _claimed.acquire(blocking=False)
