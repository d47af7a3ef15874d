"""Checkpoints a careless or hostile user could list, in a real Chromium: each page that uses a model says what is
wrong with the file, in words, and keeps the text — never a traceback.

The checkpoints are a small random GPT-2 (helpers.checkpoints) saved with ``save_pretrained``, then changed: a
config whose ``n_positions`` is 10¹² (it overflowed the skeleton's mask), a LayerNorm holding NaN (it drew blank
maps and broke the Induction lab), a model whose context is 4 tokens (the Induction lab's T input had its minimum
above its maximum).  And the Generate page at its extreme with a model: hundreds of new tokens, one forward pass each,
under a spinner that counts the seconds.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from unittest import mock

import pytest
from helpers.browser import assert_no_exception, expect, start_server, wait_idle

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
    random_gpt2(0, n_layer=1, n_head=2, n_embd=64, n_positions=256).save_pretrained(folder / "long-context")
    env = {"ATTNVIZ_CHECKPOINTS": str(folder), "HF_HUB_CACHE": str(folder / "no-hf-cache")}
    with mock.patch.dict(os.environ, env):  # the server started below inherits it
        yield folder


@pytest.fixture(scope="module")
def server(checkpoints):
    with start_server() as running:
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


def test_a_long_generation_counts_its_seconds(page, server):
    """Hundreds of new tokens are as many forward passes (minutes for a GPT-2 on a CPU): the spinner said only
    "Generating with the KV cache…", a page that looked stuck; it names the count and shows the time spent."""
    query = {"weights": "long-context", "text": "The cat sat on the mat. " * 200, "new_tokens": "1024"}
    page.goto(f"{server.url}/generate?{urllib.parse.urlencode(query)}")
    spinner = page.get_by_test_id("stMain").get_by_test_id("stSpinner")
    expect(spinner).to_contain_text("Generating up to 1,024 new tokens", timeout=60_000)
    expect(spinner).to_contain_text(re.compile(r"\(\d+(\.\d+)? seconds?\)"))
    wait_idle(page, timeout=300_000)
    assert_no_exception(page)
    expect(page.get_by_test_id("stMain").get_by_text("Step 0 of 128")).to_be_visible()
    expect(page.get_by_test_id("stSidebar").get_by_role("textbox", name="Text", exact=True)).to_have_value(
        query["text"])
