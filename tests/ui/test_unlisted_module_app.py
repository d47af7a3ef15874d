"""AppTest: what the pages say about user modules the server does not list holds no path of the server's: a link
naming a module the server does not offer is told so in plain words (pick one from the list; the operator lists
modules when starting the server), and a module the operator named that could not be listed or built is named by its
file alone, whatever folder the operator keeps it in."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from helpers.apptest import link_notices, no_exception, open_app, page_text

from attnviz import user_code

TIMEOUT = 120
MODULE = textwrap.dedent('''
    import torch
    from torch import nn


    class Mine(nn.Module):
        def __init__(self, d_in, d_out, num_heads=1, context_length=1024, dropout=0.0):
            super().__init__()
            self.W_query = nn.Linear(d_in, d_out, bias=False)
            self.W_key = nn.Linear(d_in, d_out, bias=False)
            self.W_value = nn.Linear(d_in, d_out, bias=False)

        def forward(self, x):
            queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, n, d_out) each
            attn_scores = queries @ keys.transpose(1, 2)  # (b, n, d_out) @ (b, d_out, n) -> (b, n, n)
            attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (b, n, n)
            return attn_weights @ values  # (b, n, n) @ (b, n, d_out) -> (b, n, d_out)


    class NeedsItsWeights(Mine):
        def __init__(self, d_in, d_out, num_heads=1, context_length=1024, dropout=0.0):
            super().__init__(d_in, d_out)
            with open(__file__.replace("mine.py", "weights.bin"), "rb") as file:  # not there on this server
                file.read()


    class FailsOnABatch(Mine):
        def forward(self, x):
            if x.shape[0] > 1:  # a batch of two: it reads a file beside it that is not there
                open(__file__.replace("mine.py", "batch.bin"), "rb")
            return super().forward(x)
''')


@pytest.fixture()
def modules(tmp_path) -> Path:
    """The operator's folder of modules, in ``tmp_path``: one module that loads."""
    folder = tmp_path / "srv_modules"
    folder.mkdir()
    (folder / "mine.py").write_text(MODULE)
    return folder


def server_paths(tmp_path: Path, text: str) -> list[str]:
    """The parts of ``tmp_path`` (its own folders, below /tmp) that ``text`` names."""
    parts = [str(tmp_path), *tmp_path.parts[2:]]
    return [part for part in parts if part in text]


def test_a_link_naming_a_module_the_server_does_not_offer_names_no_server_path(modules, tmp_path, monkeypatch):
    """The operator listed a module, then a folder (not a file) and two specs that cannot be loaded; the link names a
    module that is not listed."""
    specs = [f"{modules / 'mine.py'}:Mine", str(modules), f"{modules / 'gone.py'}:Gone", f"{modules / 'mine.py'}:Nope"]
    monkeypatch.setenv(user_code.ENV, ",".join(specs))
    at = open_app(timeout=TIMEOUT, variant="Your module: Missing")
    no_exception(at)
    text = page_text(at)
    assert server_paths(tmp_path, text) == [], text
    notice = link_notices(at)
    assert "variant='Your module: Missing': it is not a module this server offers" in notice
    assert "pick one under Attention variant" in notice and "--module" in notice
    assert at.sidebar.selectbox(key="variant").value == "mha"
    assert "Your module: Mine" in at.sidebar.selectbox(key="variant").options
    captions = " ".join(c.value for c in at.sidebar.caption).replace("\\", "")
    assert "gone.py:Gone is not listed: gone.py: no such file" in captions  # the operator still learns which and why
    assert "mine.py:Nope is not listed: mine.py has no class Nope" in captions
    assert "srv_modules is not listed" in captions


def test_a_listed_module_that_cannot_be_built_names_no_server_path(modules, tmp_path, monkeypatch):
    """Its constructor opens a file beside it that is not there: Python's message names the whole path."""
    monkeypatch.setenv(user_code.ENV, f"{modules / 'mine.py'}:NeedsItsWeights")
    at = open_app(timeout=TIMEOUT, variant="Your module: NeedsItsWeights")
    no_exception(at)
    text = page_text(at)
    assert "weights.bin" in text  # the reason is still said
    assert server_paths(tmp_path, text) == [], text


def test_a_check_whose_forward_fails_names_no_server_path(modules, tmp_path, monkeypatch):
    """The Heads page's Check panel: a forward of the check (two texts in a batch) raises, naming a file beside the
    module."""
    monkeypatch.setenv(user_code.ENV, f"{modules / 'mine.py'}:FailsOnABatch")
    at = open_app(timeout=TIMEOUT, variant="Your module: FailsOnABatch", d_in="16", d_out="16", num_heads="2")
    no_exception(at)
    text = page_text(at)
    assert "the forward raised FileNotFoundError" in text and "batch.bin" in text  # the reason is still said
    assert server_paths(tmp_path, text) == [], text
