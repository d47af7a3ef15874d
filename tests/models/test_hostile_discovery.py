"""Hostile checkpoint folders as discovery meets them: what the sidebar lists is inside the folder the operator
configured, named in plain printable words, and discovery never raises or hangs.

The folders are written here, in ``tmp_path``: links out of the folder and links in loops, names with newlines, very
long or ``..``, a FIFO where the Hugging Face cache keeps ``refs/main``, a folder that cannot be read, thousands of
folders, and config.json files that are huge, nested, not JSON or of the wrong types (those are listed: choosing one
says why it cannot load, by its listed name).
"""

from __future__ import annotations

import json
import os
import pathlib
import threading

import pytest
import torch
from helpers.checkpoints import names
from safetensors import torch as safetensors_torch

from attnviz.models import CheckpointError, discover, load_checkpoint


def touch(path: pathlib.Path, data: bytes = b"\0") -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def scanned(*paths, cache=None):
    """What discovery lists for ``ATTNVIZ_CHECKPOINTS=paths`` (and the Hugging Face cache ``cache``, else none)."""
    environ = {"ATTNVIZ_CHECKPOINTS": os.pathsep.join(map(str, paths))}
    environ["HF_HUB_CACHE"] = str(cache or pathlib.Path(str(paths[0] if paths else "/")) / "no-hf-cache")
    return discover(environ=environ)


def model_folder(folder: pathlib.Path) -> pathlib.Path:
    touch(folder / "config.json", b"{}")
    touch(folder / "model.safetensors")
    return folder


# ============================== links ==============================


def test_links_out_of_the_folder_are_left_out_and_named_without_their_target(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "private"
    model_folder(outside / "model")
    touch(outside / "secret.pth")
    touch(root / "good.pth")
    root.joinpath("folder-out").symlink_to(outside / "model")
    root.joinpath("file-out.pth").symlink_to(outside / "secret.pth")
    found = scanned(root)
    assert names(found) == ["good.pth"]
    said = " ".join(found.notes)
    assert "folder-out" in said and "file-out.pth" in said and "outside" in said
    assert "private" not in said  # where a link points is not shown


def test_a_model_folder_whose_files_link_out_of_the_folder_is_left_out(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "private"
    touch(outside / "weights.safetensors")
    touch(root / "linked" / "config.json", b"{}")
    root.joinpath("linked", "model.safetensors").symlink_to(outside / "weights.safetensors")
    touch(root / "sharded" / "model.safetensors.index.json", b'{"weight_map": {"a": "part.safetensors"}}')
    root.joinpath("sharded", "part.safetensors").symlink_to(outside / "weights.safetensors")
    touch(root / "bare.pth")
    root.joinpath("bare.json").symlink_to(outside / "weights.safetensors")  # the config the loader reads beside it
    found = scanned(root)
    assert names(found) == []
    assert all(any(name in note for note in found.notes) for name in ("linked", "sharded", "bare.pth"))


def test_links_inside_the_folder_are_followed(tmp_path):
    root = tmp_path / "root"
    touch(root / "blobs" / "abc")
    touch(root / "model" / "config.json", b"{}")
    root.joinpath("model", "model.safetensors").symlink_to(root / "blobs" / "abc")
    root.joinpath("alias.pth").symlink_to(root / "blobs" / "abc")
    found = scanned(root)
    assert names(found) == ["alias.pth", "model"]
    assert found.notes == ()


def test_a_path_the_operator_names_itself_is_listed_where_it_links(tmp_path):
    """A model folder named directly (a Hugging Face snapshot: its files link into ../../blobs) is what the operator
    chose: it is listed, its links followed."""
    blob = touch(tmp_path / "repo" / "blobs" / "abc")
    snapshot = tmp_path / "repo" / "snapshots" / "rev"
    snapshot.mkdir(parents=True)
    snapshot.joinpath("model.safetensors").symlink_to(blob)
    assert names(scanned(snapshot)) == ["rev"]


def test_link_loops_are_left_out_and_discovery_returns(tmp_path):
    root = tmp_path / "root"
    touch(root / "good.pth")
    root.joinpath("loop").symlink_to(root / "loop")
    root.joinpath("loop.pth").symlink_to(root / "loop.pth")
    root.joinpath("ping").symlink_to(root / "pong")
    root.joinpath("pong").symlink_to(root / "ping")
    root.joinpath("up").symlink_to(root)
    found = scanned(root, root / "loop")
    assert names(found) == ["good.pth"]
    assert any("loop does not exist" in note for note in found.notes)


# ============================== names ==============================


def test_names_are_printable_and_cut(tmp_path):
    root = tmp_path / "root"
    touch(root / "two\nlines.pth")
    touch(root / "\x1b[31mred.pth")
    touch(root / ("x" * 250 + ".pth"))
    touch(root / "ünïcode ✓.pth")
    touch(root / "..dots.pth")
    found = scanned(root)
    listed = names(found)
    assert "two\\nlines.pth" in listed and "\\x1b[31mred.pth" in listed
    assert "ünïcode ✓.pth" in listed and "..dots.pth" in listed
    assert all(name.isprintable() and len(name) <= 200 for name in listed)
    long = next(entry for entry in found if entry.name.startswith("xxx"))
    assert long.path == str(root / ("x" * 250 + ".pth"))  # the path is the file's own


def test_a_note_shows_the_operators_path_printable(tmp_path):
    found = scanned(tmp_path / "gone\nfolder")
    assert found.notes and all(note.isprintable() for note in found.notes)
    assert "gone\\nfolder does not exist" in found.notes[0]


@pytest.mark.parametrize("given", [".", ".."])
def test_dot_paths_are_named_by_their_folder_and_listed_absolute(tmp_path, monkeypatch, given):
    model = model_folder(tmp_path / "my-model")
    (model / "sub").mkdir()
    monkeypatch.chdir(model if given == "." else model / "sub")
    found = scanned(given, cache=tmp_path / "no-cache")
    assert names(found) == ["my-model"]
    assert [entry.path for entry in found] == [str(model)]


# ============================== what cannot be read ==============================


def test_a_folder_that_cannot_be_read_is_named(tmp_path, monkeypatch):
    """chmod 000 (simulated: the tests may run as root, whom permissions do not stop)."""
    root = tmp_path / "locked"
    touch(root / "a.pth")
    real_scandir, real_listdir = os.scandir, os.listdir

    def refused(real):
        def listing(path="."):
            if os.fspath(path) == str(root):
                raise PermissionError(13, "Permission denied", str(path))
            return real(path)
        return listing

    monkeypatch.setattr(os, "scandir", refused(real_scandir))
    monkeypatch.setattr(os, "listdir", refused(real_listdir))
    found = scanned(root)
    assert names(found) == []
    assert any("locked could not be read (Permission denied)" in note for note in found.notes)


def test_a_file_where_a_folder_is_expected_is_named(tmp_path):
    touch(tmp_path / "notes.txt", b"hello")
    found = scanned(tmp_path / "notes.txt")
    assert any("notes.txt is neither a checkpoint file" in note for note in found.notes)


def test_a_fifo_in_the_hf_cache_does_not_hang_discovery(tmp_path):
    """A FIFO where the cache keeps refs/main: opening it for reading waits for a writer that never comes."""
    cache = tmp_path / "hub"
    model_folder(cache / "models--gpt2" / "snapshots" / ("a" * 40))
    (cache / "models--gpt2" / "refs").mkdir()
    fifo = cache / "models--gpt2" / "refs" / "main"
    os.mkfifo(fifo)
    result = {}
    worker = threading.Thread(target=lambda: result.update(found=discover(environ={"HF_HUB_CACHE": str(cache)})),
                              daemon=True)
    worker.start()
    worker.join(timeout=20)
    hung = worker.is_alive()
    if hung:  # let the stuck open return, so the test run can end
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(timeout=5)
    assert not hung, "discovery waited on a FIFO"
    assert names(result["found"]) == ["gpt2 (HF cache)"]


def test_a_file_where_the_hf_cache_expects_a_folder_is_skipped(tmp_path):
    cache = tmp_path / "hub"
    touch(cache / "models--gpt2" / "snapshots")
    touch(cache / "models--distilgpt2")
    model_folder(cache / "models--gpt2-medium" / "snapshots" / ("b" * 40))
    touch(cache / "models--gpt2-medium" / "refs" / "main" / "x")  # refs/main a folder
    assert names(discover(environ={"HF_HUB_CACHE": str(cache)})) == ["gpt2-medium (HF cache)"]


def test_an_hf_snapshot_linking_out_of_the_cache_is_left_out(tmp_path):
    cache, outside = tmp_path / "hub", tmp_path / "private"
    model_folder(outside / "model")
    snapshots = cache / "models--gpt2" / "snapshots"
    snapshots.mkdir(parents=True)
    snapshots.joinpath("a" * 40).symlink_to(outside / "model")
    found = discover(environ={"HF_HUB_CACHE": str(cache)})
    assert names(found) == []
    assert any("outside" in note and "private" not in note for note in found.notes)


def test_thousands_of_folders_are_listed(tmp_path):
    root = tmp_path / "runs"
    for index in range(2000):
        touch(root / f"run-{index:04d}" / "model.safetensors")
    big = root / "dataset"  # a folder of many files that is no checkpoint
    big.mkdir()
    for index in range(20_000):
        (big / f"{index}.txt").touch()
    found = scanned(root)
    assert len(found) == 2000 and found.notes == ()


# ============================== hostile configs: listed, refused in words by name ==============================

DEEP = "[" * 100_000 + "]" * 100_000

CONFIGS = {
    "nested": DEEP,
    "not JSON": "n_layer = 12",
    "not UTF-8": b"\xff\xfe{}",
    "a list": "[1, 2]",
    "n_layer a string": json.dumps({"n_layer": "12"}),
    "n_head 1e309": '{"n_head": 1e309}',
    "n_head negative": json.dumps({"n_head": -4}),
    "n_layer true": json.dumps({"n_layer": True}),
    "a number too long": '{"n_layer": ' + "9" * 5000 + "}",
}


@pytest.mark.parametrize("case", list(CONFIGS))
def test_a_folder_with_a_hostile_config_is_listed_and_refused_in_words_by_its_name(tmp_path, case, monkeypatch):
    from attnviz.ui import weights as ui_weights

    root = tmp_path / "root"
    folder = root / "hostile"
    folder.mkdir(parents=True)
    config = CONFIGS[case]
    (folder / "config.json").write_bytes(config if isinstance(config, bytes) else config.encode())
    safetensors_torch.save_file({"wte.weight": torch.zeros(2, 2)}, folder / "model.safetensors")
    found = scanned(root)
    assert names(found) == ["hostile"]
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint(found.entries[0].path)
    monkeypatch.setitem(ui_weights._listed_names, found.entries[0].path, "hostile")
    said = ui_weights.unreadable(refused.value, found.entries[0].path)
    assert said.startswith("hostile could not be loaded: ") and "\n" not in said
    assert str(tmp_path) not in said


def test_a_huge_config_is_listed_and_refused_unread(tmp_path, monkeypatch):
    from attnviz.models import loading

    monkeypatch.setattr(loading, "MAX_JSON_BYTES", 1000)
    folder = tmp_path / "root" / "huge"
    touch(folder / "config.json", json.dumps({"pad": "x" * 2000}).encode())
    touch(folder / "model.safetensors")
    found = scanned(tmp_path / "root")
    assert names(found) == ["huge"]
    with pytest.raises(CheckpointError, match="larger than a config"):
        load_checkpoint(found.entries[0].path)
