"""Hostile checkpoint folders: every file the loader reads is refused in words (a CheckpointError), never with a
Python exception, and a sharded checkpoint's index can only name shards inside its own folder.

The folders are written here, in ``tmp_path``: a config.json nested a hundred thousand deep, an index whose
weight_map names numbers, lists or paths outside the folder, configs whose numbers do not fit a float.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnviz.models import CheckpointError, load_checkpoint

DEEP = "[" * 100_000 + "]" * 100_000  # json's decoder recurses once per bracket


def refused(path) -> str:
    """The CheckpointError loading ``path`` raises (any other exception fails the test), as one line of words."""
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    return message


# ============================== JSON files ==============================


@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json"])
def test_json_nested_too_deeply_is_refused_in_words(tmp_path, name):
    (tmp_path / "model.safetensors").write_bytes(b"")
    if name != "config.json":
        (tmp_path / "model.safetensors").unlink()
    (tmp_path / name).write_text(DEEP)
    message = refused(tmp_path)
    assert f"{name} is not a readable JSON file" in message
    assert "nested too deeply" in message


def test_config_beside_a_file_nested_too_deeply_is_refused_in_words(tmp_path):
    (tmp_path / "weights.pth").write_bytes(b"")
    (tmp_path / "weights.json").write_text(DEEP)
    assert "weights.json is not a readable JSON file" in refused(tmp_path / "weights.pth")


def test_json_number_too_long_to_read_is_refused_in_words(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    (tmp_path / "config.json").write_text('{"n_layer": ' + "9" * 5000 + "}")  # past Python's 4,300-digit limit
    assert "config.json is not a readable JSON file" in refused(tmp_path)


def test_json_too_large_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from attnviz.models import loading

    monkeypatch.setattr(loading, "MAX_JSON_BYTES", 1000)
    (tmp_path / "model.safetensors").write_bytes(b"")
    (tmp_path / "config.json").write_text(json.dumps({"pad": "x" * 2000}))
    message = refused(tmp_path)
    assert "config.json is 2,0" in message and "larger than a config" in message


# ============================== shard indexes ==============================

GOOD_CONFIG = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 16, "n_embd": 32, "n_layer": 2, "n_head": 2}


def sharded(folder: Path, *shards) -> Path:
    """A Hugging Face folder whose model.safetensors.index.json maps one tensor to each of ``shards``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(GOOD_CONFIG))
    weight_map = {f"h.{index}.attn.c_attn.weight": shard for index, shard in enumerate(shards)}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


@pytest.mark.parametrize("shard", [5, 1.5, ["x"], {"a": "b"}, None, True])
def test_a_shard_named_by_something_else_than_a_string_is_refused_in_words(tmp_path, shard):
    message = refused(sharded(tmp_path, shard))
    assert f"model.safetensors.index.json names the shard {shard!r}, not a file name" in message
    assert "Fix or remove the index" in message


def test_only_the_first_bad_shard_is_named_and_a_long_one_is_cut(tmp_path):
    message = refused(sharded(tmp_path, ["x" * 5000], 7))
    assert "names the shard ['xxx" in message and len(message) < len(str(tmp_path)) + 400
