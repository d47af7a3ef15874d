"""Checkpoints a careless or hostile user could list, in a real Chromium: each page that uses a model says what is
wrong with the file, in words, and keeps the text — never a traceback.

The checkpoints are a small random GPT-2 (helpers.checkpoints) saved with ``save_pretrained``, then changed: a
config whose ``n_positions`` is 10¹² (where the file's position table holds 32), a LayerNorm holding NaN, a model
whose context is 4 tokens (too short for the Induction lab's repeated sequence).
"""

from __future__ import annotations

import json
import urllib.parse

import pytest
from helpers.browser import assert_no_exception, expect, serving_checkpoints, wait_idle

pytestmark = pytest.mark.browser

TEXT = "My own words, kept"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, browser_available):
    pytest.importorskip("transformers")
    import torch
    from helpers.checkpoints import random_gpt2

    folder = tmp_path_factory.mktemp("hostile")
    model = random_gpt2(0, n_layer=2, n_head=2, n_embd=64, n_positions=32)
    model.save_pretrained(folder / "huge-context")
    config = json.loads((folder / "huge-context" / "config.json").read_text())
    (folder / "huge-context" / "config.json").write_text(json.dumps({**config, "n_positions": 10**12}))
    with torch.no_grad():
        model.transformer.h[0].ln_1.weight[0] = float("nan")
    model.save_pretrained(folder / "nan-weights")
    random_gpt2(0, n_layer=1, n_head=2, n_embd=64, n_positions=4).save_pretrained(folder / "tiny-context")
    return folder


@pytest.fixture(scope="module")
def server(checkpoints):
    with serving_checkpoints(checkpoints) as running:
        yield running


@pytest.mark.parametrize(("name", "route", "message"), [
    ("huge-context", "", "the model expects shape (1000000000000, 64), the checkpoint has (32, 64)"),
    ("huge-context", "generate", "the model expects shape (1000000000000, 64), the checkpoint has (32, 64)"),
    ("nan-weights", "", "h.0.ln_1.weight → norm1.scale: the checkpoint holds NaN or infinite values"),
    ("nan-weights", "induction", "h.0.ln_1.weight → norm1.scale: the checkpoint holds NaN or infinite values"),
    ("tiny-context", "induction", "This model's context is 4 tokens"),
], ids=["huge-context-heads", "huge-context-generate", "nan-heads", "nan-induction", "tiny-context-induction"])
def test_a_bad_checkpoint_is_named_in_words_and_the_text_is_kept(page, server, name, route, message):
    page.goto(f"{server.url}/{route}?{urllib.parse.urlencode({'weights': name, 'text': TEXT})}")
    wait_idle(page)
    assert_no_exception(page)
    expect(page.get_by_test_id("stMain").get_by_test_id("stAlertContainer").filter(has_text=message)).to_have_count(1)
    expect(page.get_by_test_id("stSidebar").get_by_role("textbox", name="Text", exact=True)).to_have_value(TEXT)

