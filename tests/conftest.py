"""The test tiers: ``python -m pytest -m "not slow"`` is the quick tier; ``python -m pytest`` runs everything.

Browser tests (everything under tests/browser/) are marked ``slow`` here; training and notebook tests, and the
few that start a fresh Python importing the whole app (Streamlit, torch, pandas), carry the mark themselves.
Shared helpers live in the ``helpers`` package (tests/helpers/).
"""

from __future__ import annotations

from pathlib import Path

import pytest

BROWSER = Path(__file__).resolve().parent / "browser"


def pytest_collection_modifyitems(items):
    for item in items:
        if BROWSER in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.slow)
