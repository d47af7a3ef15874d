"""AppTest: a checkpoint that changes on disk after the sidebar listed it — truncated, its config made to contradict its
tensors, deleted — is named on every page by its listed name with what happened and what to do: never the server's
path, never a traceback, and the text stays.

The checkpoints are written here: a small ``transformers.GPT2LMHeadModel`` with ``save_pretrained`` (a folder) and
attnviz's own ``GPTModel`` saved with ``torch.save`` beside its config (a ``.pth`` file)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers.apptest import no_exception, open_app, page_elements
from helpers.checkpoints import use_checkpoints
from streamlit.testing.v1 import AppTest

from attnviz import background, weights
from attnviz.models import GPTModel
from attnviz.ui import navigation

transformers = pytest.importorskip("transformers")

TIMEOUT = 120
TEXT = "My own words stay here"
BOOK_CONFIG = {"vocab_size": 50257, "context_length": 64, "emb_dim": 64, "n_heads": 4, "n_layers": 2,
               "drop_rate": 0.0, "qkv_bias": False}
PAGES = tuple(entry.script for entry in navigation.PAGES  # every page that runs the checkpoint under Weights
              if not entry.hidden and entry.title in navigation.checkpoint_pages())


@pytest.fixture(scope="module")
def originals(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("originals")
    torch.manual_seed(1)
    torch.save(GPTModel(BOOK_CONFIG).state_dict(), folder / "book.pth")
    (folder / "book.json").write_text(json.dumps(BOOK_CONFIG))
    config = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=64, attn_implementation="eager")
    torch.manual_seed(2)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder / "hf-gpt2")
    return folder


@pytest.fixture
def folder(originals, tmp_path, monkeypatch) -> Path:
    """A copy of the checkpoints, listed (ATTNVIZ_CHECKPOINTS): each test changes its own."""
    listed = tmp_path / "server-side-folder"
    shutil.copytree(originals, listed)
    use_checkpoints(monkeypatch, listed)
    monkeypatch.setattr(background, "BROWSER_DRAWS_S", 0.1)  # the next layer's wait for a browser: AppTest has none
    return listed


def opened(name: str, page: str) -> AppTest:
    """A session opened on the Heads page with the checkpoint ``name`` chosen (a link naming it), then on ``page``:
    each drawn without a problem."""
    at = open_app(timeout=TIMEOUT, weights=name, text=TEXT)
    if page != "pages/heads.py":
        at.switch_page(page).run()
    no_exception(at)
    assert not at.main.warning, [w.value for w in at.main.warning]
    return at


def afterwards(at: AppTest, page: str) -> AppTest:
    """What the session does next on ``page``: the Heads page switches layers; the others run again (a click)."""
    if page == "pages/heads.py":
        at.sidebar.selectbox(key="layer").set_value(1).run()
    else:
        at.run()
    return at


def everything_shown(at: AppTest) -> str:
    """Every text of the run, main area and sidebar (exceptions with their traces), as the user reads it."""
    texts = []
    for element in page_elements(at):
        for attribute in ("value", "message", "stack_trace", "label", "body"):
            value = getattr(element, attribute, None)
            if isinstance(value, str):
                texts.append(value)
            elif isinstance(value, list):
                texts.extend(str(line) for line in value)
    return "\n".join(texts).replace("\\", "")


def said(at: AppTest, folder: Path, *words: str) -> None:
    """The page says ``words`` in its main area's warnings, and nothing shown holds the server's folder."""
    no_exception(at)
    shown = everything_shown(at)
    assert str(folder) not in shown and str(folder.parent) not in shown, shown
    warnings = " ".join(w.value for w in at.main.warning).replace("\\", "")
    for word in words:
        assert word in warnings, warnings
    assert at.sidebar.text_area(key="text").value == TEXT


def truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


@pytest.mark.parametrize("page", PAGES)
def test_a_pth_truncated_after_it_was_loaded_is_named_on_every_page(folder, page):
    at = opened("book.pth", page)
    truncated(folder / "book.pth")
    said(afterwards(at, page), folder, "book.pth changed on disk since attnviz loaded it", "truncated or damaged",
         "pick other weights under Weights")


@pytest.mark.parametrize("page", PAGES)
def test_a_config_that_now_contradicts_its_tensors_is_named_on_every_page(folder, page):
    at = opened("book.pth", page)
    (folder / "book.json").write_text(json.dumps({**BOOK_CONFIG, "n_layers": 5}))
    torch.save(torch.load(folder / "book.pth"), folder / "book.pth")  # saved again beside it
    said(afterwards(at, page), folder, "book.pth changed on disk", "the config says 5 layers but the weights have 2",
         "fix or remove it")


@pytest.mark.parametrize("name", ["book.pth", "hf-gpt2"])
@pytest.mark.parametrize("page", PAGES)
def test_a_checkpoint_deleted_while_still_listed_is_named_on_every_page(folder, name, page):
    """Within the few seconds the sidebar's list is reused (``weights.DISCOVERY_TTL``), a deleted checkpoint is still
    an option: the page says it is gone.  Once the list is made again, it lists it no more: the next run says so,
    with a missing folder's icon (no link caused it), and shows the book's classes."""
    at = opened(name, page)
    path = folder / name
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    said(afterwards(at, page), folder, f"{name} is no longer on the server", "Put it back, or pick other weights")
    weights._discovered = None  # the list is made again (fixture folder: monkeypatch restores it)
    at.run()
    said(at, folder, f"The weights '{name}' are no longer listed; showing the book's classes.")
    assert [w.icon for w in at.main.warning if "no longer listed" in w.value] == [":material/folder_off:"]
    assert at.sidebar.selectbox(key="weights").value == weights.BOOK
