"""The test tiers: ``python -m pytest -m "not slow"`` is the quick tier; ``python -m pytest`` runs everything.

Browser tests (everything under tests/browser/) are marked ``slow`` here; training and notebook tests, and the
few that start a fresh Python importing the whole app (Streamlit, torch, pandas), carry the mark themselves.
Shared helpers live in the ``helpers`` package (tests/helpers/); the fixtures more than one test module uses, here
(the browser suite's, in tests/browser/conftest.py).  ``ATTNVIZ_RAISE_RULE_ERRORS=1`` is set here: a rule whose own
code raises in ``check_module`` raises in the tests instead of becoming a skip.  Under pytest-xdist each worker runs
torch on its share of the cores (one thread each for ``-n 2`` on two cores): two workers of two torch threads each on
two cores spend most of a tiny forward waiting for a descheduled thread.  A test of what a thread count does starts
from ``several_torch_threads``, so that the count it asserts is the code's doing.  Each new AppTest session scans
every installed distribution's metadata for Streamlit components (a server scans once, when it starts); the installed
distributions do not change during a test run, so the first scan's answer is kept for the rest of the run
(:func:`pytest_runtest_setup`).
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

BROWSER = Path(__file__).resolve().parent / "browser"

# a rule whose own code raises in check_module raises in the tests (users get a skip that says so): a bug of attnviz's
# is never a passing test's hidden skip; the one test of that skip unsets it
os.environ.setdefault("ATTNVIZ_RAISE_RULE_ERRORS", "1")


WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if WORKERS > 1:
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // WORKERS))  # the process's default: new threads take it too


@pytest.fixture
def several_torch_threads():
    """Three torch threads for the test (a count none of the tests expects), then the worker's own count again."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    yield
    torch.set_num_threads(threads)


def _scan_installed_components_once() -> None:
    """Streamlit's scan of the installed distributions for components (``scan_component_manifests``, which every new
    ``AppTest`` runs) answers once per test run, as it does once per server (a Streamlit without it: nothing to do)."""
    try:
        from streamlit.components.v2 import manifest_scanner
    except ImportError:
        return
    scan = getattr(manifest_scanner, "scan_component_manifests", None)
    if scan is not None and not hasattr(scan, "cache_info"):
        manifest_scanner.scan_component_manifests = functools.cache(scan)


_components_scanned_once = False


def pytest_runtest_setup(item):
    """Once Streamlit is imported (by a test module or a test), its component scan answers once per run."""
    global _components_scanned_once
    if not _components_scanned_once and "streamlit" in sys.modules:
        _scan_installed_components_once()
        _components_scanned_once = True


def pytest_collection_modifyitems(items):
    for item in items:
        if BROWSER in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def checkpoint_environment(checkpoints, monkeypatch):
    """The app in AppTest lists the folder of the test module's own ``checkpoints`` fixture and nothing else
    (``helpers.checkpoints.use_checkpoints``), and the work a run leaves for later (the next layer) waits 0.1 s for
    the browser to draw (``background.BROWSER_DRAWS_S``): AppTest has none.  A module uses it with
    ``pytestmark = pytest.mark.usefixtures("checkpoint_environment")``."""
    from helpers.checkpoints import use_checkpoints

    from attnviz import background

    use_checkpoints(monkeypatch, checkpoints)
    monkeypatch.setattr(background, "BROWSER_DRAWS_S", 0.1)


@pytest.fixture
def no_slow_notice(monkeypatch):
    """The slow-check notice off: it depends on the machine's pace (a loaded machine makes a tiny module's first
    forward take 0.3 s), so a test that compares the CLI's stderr compares what it tests.  A module uses it with
    ``pytestmark = pytest.mark.usefixtures("no_slow_notice")``; the notice's own test turns it on."""
    from attnviz import checks

    monkeypatch.setattr(checks, "SLOW_CHECK_SECONDS", float("inf"))
