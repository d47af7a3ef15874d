"""Hostile checkpoint folders: every file the loader reads is refused in words (a CheckpointError), never with a
Python exception, and a sharded checkpoint's index can only name shards inside its own folder.

The folders are written here, in ``tmp_path``: a config.json nested a hundred thousand deep, an index whose
weight_map names numbers, lists or paths outside the folder, configs whose numbers do not fit a float.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.checkpoints import random_gpt2
from safetensors import torch as safetensors_torch

from attnviz.models import CheckpointError, GPTModel, load_checkpoint

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


@pytest.fixture(scope="module")
def gpt2_state():
    """A small GPT-2's state dict (Hugging Face names) and its config, for checkpoints that load."""
    model = random_gpt2(seed=3, n_layer=2, n_head=2, n_embd=32, n_positions=16)
    state = {key: value.clone() for key, value in model.state_dict().items() if key != "lm_head.weight"}  # tied
    return state, model.config.to_dict()


def save_shards(folder: Path, state: dict, config: dict, names: tuple[str, str], files=None) -> Path:
    """``state`` in two shards, the index naming them ``names``; their files written at ``files`` (default: the names
    in ``folder``)."""
    folder.mkdir(parents=True, exist_ok=True)
    halves = ({k: v for k, v in state.items() if ".h.1." not in k}, {k: v for k, v in state.items() if ".h.1." in k})
    for half, file in zip(halves, files or [folder / name for name in names]):
        file.parent.mkdir(parents=True, exist_ok=True)
        safetensors_torch.save_file(half, file)
    weight_map = {key: name for half, name in zip(halves, names) for key in half}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_plain_shard_names_load(tmp_path, gpt2_state):
    names = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    assert isinstance(load_checkpoint(save_shards(tmp_path / "ckpt", *gpt2_state, names)), GPTModel)


@pytest.mark.parametrize("how", ["absolute", "parent", "subfolder-up", "subfolder"])
def test_a_shard_outside_the_folder_is_refused_and_never_read(tmp_path, gpt2_state, how, monkeypatch):
    """The index's text names a file by a path: absolute, ``../``, or through a subfolder. The file is a valid shard,
    but only a plain file name in the checkpoint's own folder is a shard: refused, and never read."""
    from attnviz.models import loading

    outside = tmp_path / "elsewhere" / "model-00002-of-00002.safetensors"
    name = {"absolute": str(outside), "parent": "../elsewhere/model-00002-of-00002.safetensors",
            "subfolder-up": "sub/../../elsewhere/model-00002-of-00002.safetensors",
            "subfolder": "sub/model-00002-of-00002.safetensors"}[how]
    if how == "subfolder":
        outside = tmp_path / "ckpt" / "sub" / "model-00002-of-00002.safetensors"
    (tmp_path / "ckpt" / "sub").mkdir(parents=True)
    folder = save_shards(tmp_path / "ckpt", *gpt2_state, ("model-00001-of-00002.safetensors", name),
                         files=[tmp_path / "ckpt" / "model-00001-of-00002.safetensors", outside])
    opened = []
    real_open = loading._open_tensors
    monkeypatch.setattr(loading, "_open_tensors", lambda files: opened.extend(files) or real_open(files))
    message = refused(folder)
    assert f"model.safetensors.index.json names a shard by a path, {name}, not a file in the checkpoint's folder" \
        in message
    assert "plain file names" in message
    assert opened == []


@pytest.mark.parametrize("name", ["", ".", "..", "model\x00.safetensors", "config.json", "model-00002"])
def test_a_shard_that_is_not_a_weights_file_name_is_refused(tmp_path, gpt2_state, name):
    folder = save_shards(tmp_path / "ckpt", *gpt2_state, ("model-00001-of-00002.safetensors", "real.safetensors"))
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["h.1.ln_1.weight"] = name
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    message = refused(folder)
    assert "model.safetensors.index.json names the shard" in message
    assert "not a file in the checkpoint's folder" in message or "not a weights file" in message


def test_a_shard_symlinked_elsewhere_is_followed_as_in_the_hugging_face_cache(tmp_path, gpt2_state):
    """The Hugging Face cache's snapshot folders hold symlinks into the repo's blobs folder: a shard named by a plain
    file name in the folder is read where its symlink points (as the folder's own model.safetensors is)."""
    names = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    blobs = tmp_path / "models--x--y" / "blobs"
    snapshot = tmp_path / "models--x--y" / "snapshots" / "abc123"
    save_shards(snapshot, *gpt2_state, names, files=[blobs / "sha1", blobs / "sha2"])
    for name, blob in zip(names, ("sha1", "sha2")):
        (snapshot / name).symlink_to(Path("../../blobs") / blob)
    assert isinstance(load_checkpoint(snapshot), GPTModel)


# ============================== numbers read from the tensors ==============================

V = 50257  # GPT-2's vocabulary


def gpt2_file(folder: Path, **tensors) -> Path:
    """model.safetensors (Hugging Face names) with an embedding 4 wide, a position table of 4 rows and ``tensors``,
    beside a config naming one head."""
    folder.mkdir(parents=True, exist_ok=True)
    state = {"wte.weight": torch.zeros(V, 4), "wpe.weight": torch.zeros(4, 4), "h.0.ln_1.weight": torch.zeros(4)}
    safetensors_torch.save_file({**state, **tensors}, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps({"n_head": 1}))
    return folder


@pytest.mark.parametrize("block", ["3", "100000000", "9" * 5000])
def test_a_block_numbered_past_a_gap_is_refused_before_a_model_is_built(tmp_path, block, monkeypatch):
    """A tensor named h.3.…, h.100000000.… or with a block number of 5,000 digits, past a gap in the blocks, is
    refused in words naming the missing block before any model is built."""
    from attnviz.models import loading

    built = []
    monkeypatch.setattr(loading, "_meta_model", lambda cfg: built.append(cfg) or pytest.fail("a model was built"))
    message = refused(gpt2_file(tmp_path, **{f"h.{block}.ln_1.weight": torch.zeros(4)}))
    assert f"has no block 1 but has block {block if len(block) <= 20 else block[:19] + '…'}" in message
    assert "incomplete or damaged" in message and len(message) < len(str(tmp_path)) + 400


@pytest.mark.parametrize("book", [False, True], ids=["gpt2", "book"])
def test_an_embedding_without_columns_is_refused_in_words(tmp_path, book):
    """tok_emb.weight (50257, 0) made the head count 0 and then divided by it (ZeroDivisionError)."""
    if book:
        torch.save({"tok_emb.weight": torch.zeros(V, 0), "pos_emb.weight": torch.zeros(4, 0)}, tmp_path / "m.pth")
        path = tmp_path / "m.pth"
    else:
        path = tmp_path
        safetensors_torch.save_file({"wte.weight": torch.zeros(V, 0), "wpe.weight": torch.zeros(4, 0),
                                     "h.0.ln_1.weight": torch.zeros(0)}, path / "model.safetensors")
    assert "has no columns" in refused(path)


def test_a_position_table_longer_than_a_mask_can_hold_is_refused_before_the_mask_is_built(tmp_path, monkeypatch):
    """The causal mask is (context, context) float32: a position table of 65,536 one-byte rows (64 kB) asked for a
    17 GB mask.  The bound is patched down here so the test allocates nothing large either way."""
    from attnviz.models import loading

    monkeypatch.setattr(loading, "MAX_CONTEXT", 8, raising=False)
    path = gpt2_file(tmp_path, **{"wpe.weight": torch.zeros(9, 4, dtype=torch.int8)})
    assert "a position table of 9 rows, more than the 8 positions" in refused(path)


# ============================== values read from a config ==============================


def gpt2_folder(folder: Path, gpt2_state, **change) -> Path:
    """The small GPT-2 as a Hugging Face folder, its config.json changed by ``change``."""
    state, config = gpt2_state
    folder.mkdir(parents=True, exist_ok=True)
    safetensors_torch.save_file(state, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps({**config, **change}))
    return folder


def test_the_small_gpt2_folder_loads(tmp_path, gpt2_state):
    assert isinstance(load_checkpoint(gpt2_folder(tmp_path, gpt2_state)), GPTModel)


@pytest.mark.parametrize("eps", [10**400, float("inf")], ids=["10**400", "Infinity"])
@pytest.mark.parametrize("book", [False, True], ids=["gpt2", "book"])
def test_an_epsilon_too_large_for_a_float_is_refused_in_words(tmp_path, gpt2_state, book, eps):
    """float(10**400) raised OverflowError; an infinite eps made every LayerNorm give its shift alone."""
    if book:
        state = GPTModel({"vocab_size": V, "context_length": 4, "emb_dim": 8, "n_heads": 2, "n_layers": 1,
                          "drop_rate": 0.0, "qkv_bias": False}).state_dict()
        torch.save(state, tmp_path / "book.pth")
        (tmp_path / "book.json").write_text(json.dumps({"n_heads": 2, "ln_eps": eps}))
        path, key = tmp_path / "book.pth", "ln_eps"
    else:
        path, key = gpt2_folder(tmp_path, gpt2_state, layer_norm_epsilon=eps), "layer_norm_epsilon"
    assert f"the config's {key} must be a small positive number" in refused(path)


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("scale_attn_by_inverse_layer_idx", torch.zeros(3), "must be true or false"),
    ("add_cross_attention", [1, 2], "must be true or false"),
    ("scale_attn_weights", "yes", "must be true or false"),
    ("activation_function", torch.zeros(3), "must be a name"),
    ("model_type", 5, "must be a name"),
    ("n_inner", torch.zeros(3), "must be a positive whole number"),
])
def test_a_config_value_of_another_type_is_refused_in_words(tmp_path, gpt2_state, key, value, expected):
    """The cfg saved beside a state dict (torch.save({"model_state_dict": …, "cfg": …})) can hold tensors: one read as
    a truth value raised 'Boolean value of Tensor with more than one value is ambiguous'."""
    state, config = gpt2_state
    torch.save({"model_state_dict": state, "cfg": {**config, key: value}}, tmp_path / "gpt2.pth")
    assert f"the config's {key} {expected}" in refused(tmp_path / "gpt2.pth")


@pytest.mark.parametrize("key", ["model_type", "activation_function"])
def test_a_long_name_in_a_config_is_cut_in_the_message(tmp_path, gpt2_state, key):
    message = refused(gpt2_folder(tmp_path, gpt2_state, **{key: "x" * 100_000}))
    assert "xxxx" in message and len(message) < len(str(tmp_path)) + 400


def test_a_long_tensor_name_is_cut_in_the_message(tmp_path, gpt2_state):
    safetensors_torch.save_file({"k" * 100_000: torch.zeros(1)}, tmp_path / "other.safetensors")
    message = refused(tmp_path / "other.safetensors")
    assert "it has kkkk" in message and len(message) < len(str(tmp_path)) + 400
    folder = gpt2_folder(tmp_path / "gpt2", gpt2_state)
    state = {**gpt2_state[0], "h." + "k" * 100_000: torch.zeros(1)}
    safetensors_torch.save_file(state, folder / "model.safetensors")
    message = refused(folder)
    assert "unexpected key 'h.kkkk" in message and len(message) < len(str(tmp_path)) + 400
