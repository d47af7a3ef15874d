"""AppTest: a hostile checkpoint folder listed by ATTNVIZ_CHECKPOINTS — a config.json nested a hundred thousand deep, a
shard index naming a list or a path outside the folder — is named by the page in words (its listed name, what is
wrong, what to do): never an exception box, never a path of the server's file system, and the text stays.

The folders are written here (the loader's own cases: tests/models/test_hostile_checkpoints.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.apptest import main_warnings, no_exception, open_app
from helpers.checkpoints import use_checkpoints

from attnviz import background

TEXT = "My own words stay here"
GOOD_CONFIG = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 16, "n_embd": 32, "n_layer": 2, "n_head": 2}


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    listed = tmp_path / "server-side-folder"
    deep = listed / "deepcfg"
    deep.mkdir(parents=True)
    (deep / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    (deep / "model.safetensors").write_bytes(b"")
    for name, shard in (("shard-list", ["x"]), ("shard-outside", str(tmp_path / "elsewhere.safetensors"))):
        (listed / name).mkdir()
        (listed / name / "config.json").write_text(json.dumps(GOOD_CONFIG))
        (listed / name / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"wte.weight": shard}}))
    (tmp_path / "elsewhere.safetensors").write_bytes(b"")  # a file outside the listed folder
    use_checkpoints(monkeypatch, listed)
    monkeypatch.setattr(background, "BROWSER_DRAWS_S", 0.1)  # the next layer's wait for a browser: AppTest has none
    return listed


@pytest.mark.parametrize(("name", "page", "words"), [
    ("deepcfg", None, "config.json is not a readable JSON file (it is nested too deeply)"),
    ("deepcfg", "pages/generate.py", "config.json is not a readable JSON file (it is nested too deeply)"),
    ("shard-list", None, "names the shard ['x'], not a file name"),
    ("shard-outside", "pages/generate.py", "by a path, elsewhere.safetensors, not a file in the checkpoint's folder"),
])
def test_a_hostile_checkpoint_folder_is_named_in_words(folder, name, page, words):
    at = open_app(page, weights=name, text=TEXT)
    no_exception(at)
    warnings = main_warnings(at)
    assert f"{name} could not be loaded" in warnings and words in warnings, warnings
    assert str(folder.parent) not in warnings
    assert at.sidebar.text_area(key="text").value == TEXT
