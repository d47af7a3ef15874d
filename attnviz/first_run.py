"""Which run of ``app.py`` is a server process's first while torch is still to be imported — claimed once.

A fresh server's first page waits ~1 s for torch before it can send a chart.  ``app.py`` uses that wait: the run
that claims it first sends an empty chart in a one-pixel-high box, so the browser fetches and compiles Plotly's
JavaScript (4.7 MB) while the server imports torch, then removes the box before the page draws anything.

Plotly checks even this chart against numpy and pandas as it finds them in ``sys.modules``, where a module that
another session is still importing sits half-initialised (``attnviz/ui/__init__.py`` tells the race).  So
``app.py`` imports numpy first (an ``import`` waits for another thread's), and if pandas is half-imported the chart
raises and the page goes on without the preload; pandas itself is imported later by ``attnviz.ui``.

Only one run per process preloads: later runs find torch imported (there is no wait to use), and eight
simultaneous first sessions each compiling 5 MB of JavaScript beside the server on two cores would make its
health check time out (``tests/browser/test_concurrency.py``).  The measurements are in benchmarks/README.md
("Fast first paint").  Pure Python: importing this imports nothing else (not torch, pandas or Streamlit).
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
