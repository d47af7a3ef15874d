"""attnviz.models.discovery: checkpoints listed by name (what the sidebar offers; ui.weights.choose compares a browser's
name with them: tests/test_checkpoint_pipeline.py)."""

from __future__ import annotations

import os
import pathlib

import pytest
import torch
from helpers.checkpoints import names, path_named

from attnviz.models import Checkpoints, checkpoint_args, discover, hf_cache_dir, load_checkpoint


def touch(path: pathlib.Path, data: bytes = b"\0") -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def hf_snapshot(cache: pathlib.Path, repo: str, revision: str, main: bool = True, weights: bool = True) -> pathlib.Path:
    """The huggingface_hub cache layout: snapshots/<rev>/ files are symlinks into blobs/."""
    repo_dir = cache / f"models--{repo.replace('/', '--')}"
    snapshot = repo_dir / "snapshots" / revision
    snapshot.mkdir(parents=True)
    files = ["config.json"] + (["model.safetensors"] if weights else [])
    for name in files:
        blob = touch(repo_dir / "blobs" / f"{revision}-{name}", b"{}")
        (snapshot / name).symlink_to(blob)
    if main:
        touch(repo_dir / "refs" / "main", revision.encode())
    return snapshot


def env(**values) -> dict[str, str]:
    return {key: str(value) for key, value in values.items()}


# ============================== where checkpoints are found ==============================


def test_env_files_folders_and_model_folders(tmp_path):
    single = touch(tmp_path / "single" / "gpt2-small-124M.pth")
    scanned = tmp_path / "runs"
    touch(scanned / "a.safetensors")
    touch(scanned / "b.pt")
    touch(scanned / "notes.txt")
    touch(scanned / "hf-model" / "config.json")
    touch(scanned / "hf-model" / "model.safetensors")
    touch(scanned / "empty-dir" / "readme.md")
    touch(scanned / "deeper" / "inner" / "c.pth")  # two levels down: not scanned
    model_dir = tmp_path / "gpt2-medium"
    touch(model_dir / "config.json")
    touch(model_dir / "model.safetensors")
    found = discover(environ=env(ATTNVIZ_CHECKPOINTS=os.pathsep.join(map(str, [single, scanned, model_dir])),
                                 HF_HUB_CACHE=tmp_path / "no-cache"))
    assert names(found) == ["gpt2-small-124M.pth", "a.safetensors", "b.pt", "hf-model", "gpt2-medium"]
    assert path_named(found, "hf-model") == str(scanned / "hf-model")
    assert path_named(found, "gpt2-medium") == str(model_dir)
    assert {entry.source for entry in found} == {"env"}
    assert found.notes == ()


def test_missing_and_empty_env_paths_give_notes(tmp_path):
    (tmp_path / "empty").mkdir()
    found = discover(environ=env(ATTNVIZ_CHECKPOINTS=f"{tmp_path / 'gone'}{os.pathsep}{tmp_path / 'empty'}{os.pathsep}",
                                 HF_HUB_CACHE=tmp_path))
    assert len(found) == 0
    assert any("gone does not exist" in note for note in found.notes)
    assert any("empty holds no checkpoint" in note for note in found.notes)


def test_tensorflow_folder_is_listed_so_the_loader_can_explain(tmp_path):
    tf_dir = tmp_path / "124M"
    for name in ("checkpoint", "model.ckpt.index", "hparams.json"):
        touch(tf_dir / name)
    found = discover(environ=env(ATTNVIZ_CHECKPOINTS=tf_dir, HF_HUB_CACHE=tmp_path / "x"))
    assert names(found) == ["124M"]
    with pytest.raises(ValueError, match="TensorFlow"):
        load_checkpoint(path_named(found, "124M"))


def test_hf_cache_gpt2_repositories(tmp_path):
    cache = tmp_path / "hub"
    hf_snapshot(cache, "gpt2", "a" * 40)
    hf_snapshot(cache, "openai-community/gpt2-medium", "b" * 40)
    hf_snapshot(cache, "openai-community/gpt2-xl", "c" * 40)
    hf_snapshot(cache, "distilgpt2", "d" * 40)
    hf_snapshot(cache, "distilbert/distilgpt2", "e" * 40)
    hf_snapshot(cache, "bert-base-uncased", "f" * 40)  # not GPT-2
    hf_snapshot(cache, "openai-community/gpt2-large", "9" * 40, weights=False)  # only config.json downloaded
    found = discover(environ=env(HF_HUB_CACHE=cache))
    assert names(found) == [
        "distilbert/distilgpt2 (HF cache)",
        "distilgpt2 (HF cache)",
        "gpt2 (HF cache)",
        "openai-community/gpt2-medium (HF cache)",
        "openai-community/gpt2-xl (HF cache)",
    ]
    assert path_named(found, "gpt2 (HF cache)") == str(cache / "models--gpt2" / "snapshots" / ("a" * 40))
    assert {entry.source for entry in found} == {"hf"}


def test_hf_cache_several_revisions_main_first(tmp_path):
    cache = tmp_path / "hub"
    hf_snapshot(cache, "gpt2", "1" * 40, main=False)
    hf_snapshot(cache, "gpt2", "2" * 40, main=True)
    found = discover(environ=env(HF_HUB_CACHE=cache))
    assert names(found) == ["gpt2 (HF cache)", "gpt2 (HF cache, 1111111)"]
    assert path_named(found, "gpt2 (HF cache)").endswith("2" * 40)


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"HF_HUB_CACHE": "/a/hub", "HF_HOME": "/b", "XDG_CACHE_HOME": "/c"}, "/a/hub"),
        ({"HF_HOME": "/b", "XDG_CACHE_HOME": "/c"}, "/b/hub"),
        ({"XDG_CACHE_HOME": "/c"}, "/c/huggingface/hub"),
        ({}, "~/.cache/huggingface/hub"),
    ],
)
def test_hf_cache_location(variables, expected):
    assert hf_cache_dir(variables) == pathlib.Path(expected).expanduser()


def test_default_cache_is_under_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "ATTNVIZ_CHECKPOINTS"):
        monkeypatch.delenv(name, raising=False)
    hf_snapshot(tmp_path / ".cache" / "huggingface" / "hub", "gpt2", "a" * 40)
    assert names(discover()) == ["gpt2 (HF cache)"]


def test_order_cli_then_env_then_cache_and_duplicates_listed_once(tmp_path):
    cli = touch(tmp_path / "cli" / "mine.pth")
    env_file = touch(tmp_path / "env" / "other.safetensors")
    cache = tmp_path / "hub"
    hf_snapshot(cache, "gpt2", "a" * 40)
    found = discover([cli], environ=env(ATTNVIZ_CHECKPOINTS=os.pathsep.join([str(env_file), str(cli)]),
                                        HF_HUB_CACHE=cache))
    assert names(found) == ["mine.pth", "other.safetensors", "gpt2 (HF cache)"]
    assert [entry.source for entry in found] == ["cli", "env", "hf"]
    alone = discover(str(cli), environ=env(HF_HUB_CACHE=tmp_path / "none"))  # one path, not a list: not its letters
    assert names(alone) == ["mine.pth"] and all("path / " not in note for note in alone.notes)


def test_same_file_names_get_unique_names(tmp_path):
    first = touch(tmp_path / "run-a" / "model.pth")
    second = touch(tmp_path / "run-b" / "model.pth")
    third = touch(tmp_path / "x" / "run-a" / "model.pth")
    fourth = touch(tmp_path / "y" / "run-a" / "model.pth")
    found = discover([first, second, third, fourth], environ=env(HF_HUB_CACHE=tmp_path / "none"))
    assert names(found) == ["model.pth", "model.pth (run-b)", "model.pth (run-a)", "model.pth (2)"]
    assert len({entry.path for entry in found}) == 4


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["app.py", "--checkpoint", "/m/a.pth"], ["/m/a.pth"]),
        (["--checkpoint=/m/a.pth", "--checkpoint", "b.safetensors"], ["/m/a.pth", "b.safetensors"]),
        (["run", "app.py", "--server.port", "1", "--", "--checkpoint", "c.pt"], ["c.pt"]),
        (["--checkpoint", "before", "--", "--other", "x"], []),
        (["--checkpoint"], []),
        (["--checkpoint", "--checkpoint=d.pt"], ["d.pt"]),
        (["--checkpoint="], []),
        ([], []),
    ],
)
def test_checkpoint_args(argv, expected):
    assert checkpoint_args(argv) == expected


def test_checkpoint_args_default_to_sys_argv(monkeypatch):
    monkeypatch.setattr("sys.argv", ["app.py", "--checkpoint", "x.pth"])
    assert checkpoint_args() == ["x.pth"]


# ============================== the list itself ==============================


def test_checkpoints_is_immutable_and_empty_by_default():
    empty = Checkpoints()
    assert list(empty) == [] and len(empty) == 0 and empty.notes == ()
    with pytest.raises(AttributeError):
        empty.entries = ()


# ============================== a discovered checkpoint loads ==============================


def test_discovered_hf_cache_snapshot_loads(tmp_path):
    """A real (tiny) save_pretrained checkpoint laid out like the HF cache, found and loaded by name."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_head=1, n_embd=64, n_positions=16)
    model = transformers.GPT2LMHeadModel(config)
    saved = tmp_path / "saved"
    model.save_pretrained(saved)
    cache = tmp_path / "hub"
    repo = cache / "models--openai-community--gpt2"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for file in saved.iterdir():
        blob = repo / "blobs" / file.name
        blob.parent.mkdir(exist_ok=True)
        blob.write_bytes(file.read_bytes())
        (snapshot / file.name).symlink_to(blob)
    touch(repo / "refs" / "main", b"0" * 40)
    found = discover(environ=env(HF_HUB_CACHE=cache))
    loaded = load_checkpoint(path_named(found, "openai-community/gpt2 (HF cache)"))
    assert len(loaded.trf_blocks) == 1
    assert torch.equal(loaded.tok_emb.weight, model.transformer.wte.weight)
