"""The test tiers: ``python -m pytest -m "not slow"`` is the quick tier; ``python -m pytest`` runs everything.

Browser tests (everything under tests/browser/) are marked ``slow`` here; training and notebook tests, and the
few that start a fresh Python importing the whole app (Streamlit, torch, pandas), carry the mark themselves.
Shared helpers live in the ``helpers`` package (tests/helpers/).  ``ATTNVIZ_RAISE_RULE_ERRORS=1`` is set here: a rule
whose own code raises in ``check_module`` raises in the tests instead of becoming a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

BROWSER = Path(__file__).resolve().parent / "browser"

# a rule whose own code raises in check_module raises in the tests (users get a skip that says so): a bug of attnviz's
# is never a passing test's hidden skip; the one test of that skip unsets it
os.environ.setdefault("ATTNVIZ_RAISE_RULE_ERRORS", "1")


def pytest_collection_modifyitems(items):
    for item in items:
        if BROWSER in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.slow)
