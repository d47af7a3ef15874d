"""What the pages that run no trace of the text — Generate, the Induction lab, Benchmark — say about a user's module
that fails holds no folder of the server's, as the other pages' messages do (``ui.sidebar.module_message``): a
constructor whose error names its own file, and on the Induction lab, which runs the module on its repeated tokens, a
forward whose error does.  The Try again the message names is on the page, as on the others."""

from __future__ import annotations

import re
import textwrap

import pytest
from helpers.apptest import no_exception, open_app, page_text

from attnviz import user_code

TIMEOUT = 120

NAMES_ITS_FILE = textwrap.dedent('''
    import torch
    from torch import nn


    class InitNamesItsFile(nn.Module):
        def __init__(self, d_in=16):
            super().__init__()
            raise ValueError(f"cannot read the weights beside {__file__}")


    class ForwardNamesItsFile(nn.Module):
        """Attention on a few tokens; on more (the Induction lab's [BOS] + x + x) its error names its file."""

        def __init__(self, d_in=16):
            super().__init__()
            self.W_query = nn.Linear(d_in, d_in, bias=False)
            self.W_key = nn.Linear(d_in, d_in, bias=False)

        def forward(self, x):
            if x.shape[1] > 12:
                raise RuntimeError(f"too many tokens for {__file__}")
            attn_scores = self.W_query(x) @ self.W_key(x).transpose(1, 2)  # (b, n, n)
            attn_weights = torch.softmax(attn_scores / x.shape[-1] ** 0.5, dim=-1)  # (b, n, n)
            return attn_weights @ x  # (b, n, d_in)
''')


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """The user's file in a folder of the server's, listed in ATTNVIZ_MODULES."""
    path = tmp_path / "server folder" / "mine.py"
    path.parent.mkdir()
    path.write_text(NAMES_ITS_FILE)
    monkeypatch.setattr("sys.argv", ["app.py"])
    monkeypatch.setenv(user_code.ENV, f"{path}:InitNamesItsFile,{path}:ForwardNamesItsFile")
    user_code.forget_listed()
    yield path.parent
    user_code.forget_listed()


def warnings(at) -> str:
    return " ".join(re.sub(r"\\(.)", r"\1", w.value) for w in at.warning)


@pytest.mark.parametrize("page", ["pages/generate.py", "pages/induction.py", "pages/benchmark.py"])
def test_a_constructors_error_shows_the_files_name_not_its_folder(folder, page):
    at = open_app(page, timeout=TIMEOUT, variant="Your module: InitNamesItsFile")
    no_exception(at)
    assert "raised ValueError: cannot read the weights beside mine.py" in warnings(at), warnings(at)
    assert str(folder) not in page_text(at) and "server folder" not in page_text(at)
    assert "or you press Try again" in warnings(at) and at.main.button(key="_module_try_again").label == "Try again"


def test_the_induction_labs_forward_error_shows_the_files_name_not_its_folder(folder):
    at = open_app("pages/induction.py", timeout=TIMEOUT, variant="Your module: ForwardNamesItsFile")
    no_exception(at)
    assert "the forward raised RuntimeError (mine.py, line " in warnings(at), warnings(at)
    assert "): too many tokens for mine.py" in warnings(at), warnings(at)
    assert str(folder) not in page_text(at) and "server folder" not in page_text(at)
