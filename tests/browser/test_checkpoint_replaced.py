"""A checkpoint truncated on disk while a page shows it, in a real Chromium: what only a fragment's rerun reads again —
a Generate step, a tab of the Heads page's "What this attention does" — says so in words with the checkpoint's listed
name, never a traceback or the server's path.  (AppTest reruns the whole page, whose sidebar reads the file first:
tests/ui/test_checkpoint_replaced_app.py.)"""

from __future__ import annotations

import json
import os
import urllib.parse

import pytest
from helpers.browser import assert_no_exception, expect, serving_checkpoints, wait_idle
from helpers.browser import runs as runs_seen

pytestmark = pytest.mark.browser

TEXT = "The cat sat on the mat. The cat sat"
BOOK_CONFIG = {"vocab_size": 50257, "context_length": 64, "emb_dim": 64, "n_heads": 4, "n_layers": 2,
               "drop_rate": 0.0, "qkv_bias": False}
SAID = "changed on disk since attnviz loaded it, and cannot be loaded now"


@pytest.fixture(scope="module")
def folder(tmp_path_factory, browser_available):
    """Two copies of attnviz's own GPTModel saved with torch.save beside its config (one per test: each truncates
    its own), listed in ATTNVIZ_CHECKPOINTS."""
    import torch

    from attnviz.models import GPTModel

    listed = tmp_path_factory.mktemp("server-side-folder")
    torch.manual_seed(1)
    state = GPTModel(BOOK_CONFIG).state_dict()
    for name in ("for-generate", "for-heads"):
        torch.save(state, listed / f"{name}.pth")
        (listed / f"{name}.json").write_text(json.dumps(BOOK_CONFIG))
    return listed


@pytest.fixture(scope="module")
def server(folder):
    with serving_checkpoints(folder) as running:
        yield running


def truncate(path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def said_in_words(page, folder, name: str) -> None:
    main = page.get_by_test_id("stMain")
    assert_no_exception(page)
    expect(main.get_by_test_id("stAlertContainer").filter(has_text=f"{name} {SAID}")).to_have_count(1)
    shown = page.get_by_test_id("stApp").inner_text()
    assert str(folder) not in shown and os.path.basename(folder) not in shown, shown


def test_a_generate_step_after_the_checkpoint_was_truncated_says_so(page, server, folder):
    page.goto(f"{server.url}/generate?{urllib.parse.urlencode({'weights': 'for-generate.pth', 'text': TEXT})}")
    wait_idle(page)
    assert_no_exception(page)
    truncate(folder / "for-generate.pth")
    before = runs_seen(page)
    page.get_by_test_id("stMain").get_by_role("button", name="Step").click()  # reruns the stepper's fragment only
    wait_idle(page, after=before)
    said_in_words(page, folder, "for-generate.pth")


def test_a_knock_out_tab_after_the_checkpoint_was_truncated_says_so(page, server, folder):
    page.goto(f"{server.url}/?{urllib.parse.urlencode({'weights': 'for-heads.pth', 'text': TEXT})}")
    wait_idle(page)
    main = page.get_by_test_id("stMain")
    before = runs_seen(page)
    main.get_by_test_id("stExpander").filter(has_text="What this attention does").locator("summary").click()
    wait_idle(page, after=before)
    assert_no_exception(page)
    truncate(folder / "for-heads.pth")
    before = runs_seen(page)
    main.get_by_role("tab", name="Rollout, logit lens").click()  # reruns the focused head's fragment only
    wait_idle(page, after=before)
    said_in_words(page, folder, "for-heads.pth")
    expect(page.get_by_test_id("stSidebar").get_by_role("textbox", name="Text", exact=True)).to_have_value(TEXT)
