"""attnviz.models.discovery: checkpoints listed by name; a name from a browser never reaches the file system."""

from __future__ import annotations

import builtins
import os
import pathlib

import pytest
import torch

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
    names = ["config.json"] + (["model.safetensors"] if weights else [])
    for name in names:
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
    assert found.names() == ["gpt2-small-124M.pth", "a.safetensors", "b.pt", "hf-model", "gpt2-medium"]
    assert found.resolve("hf-model") == str(scanned / "hf-model")
    assert found.resolve("gpt2-medium") == str(model_dir)
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
    assert found.names() == ["124M"]
    with pytest.raises(ValueError, match="TensorFlow"):
        load_checkpoint(found.resolve("124M"))


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
    assert found.names() == [
        "distilbert/distilgpt2 (HF cache)",
        "distilgpt2 (HF cache)",
        "gpt2 (HF cache)",
        "openai-community/gpt2-medium (HF cache)",
        "openai-community/gpt2-xl (HF cache)",
    ]
    assert found.resolve("gpt2 (HF cache)") == str(cache / "models--gpt2" / "snapshots" / ("a" * 40))
    assert {entry.source for entry in found} == {"hf"}


def test_hf_cache_several_revisions_main_first(tmp_path):
    cache = tmp_path / "hub"
    hf_snapshot(cache, "gpt2", "1" * 40, main=False)
    hf_snapshot(cache, "gpt2", "2" * 40, main=True)
    found = discover(environ=env(HF_HUB_CACHE=cache))
    assert found.names() == ["gpt2 (HF cache)", "gpt2 (HF cache, 1111111)"]
    assert found.resolve("gpt2 (HF cache)").endswith("2" * 40)


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
    assert discover().names() == ["gpt2 (HF cache)"]


def test_order_cli_then_env_then_cache_and_duplicates_listed_once(tmp_path):
    cli = touch(tmp_path / "cli" / "mine.pth")
    env_file = touch(tmp_path / "env" / "other.safetensors")
    cache = tmp_path / "hub"
    hf_snapshot(cache, "gpt2", "a" * 40)
    found = discover([cli], environ=env(ATTNVIZ_CHECKPOINTS=os.pathsep.join([str(env_file), str(cli)]),
                                        HF_HUB_CACHE=cache))
    assert found.names() == ["mine.pth", "other.safetensors", "gpt2 (HF cache)"]
    assert [entry.source for entry in found] == ["cli", "env", "hf"]


def test_same_file_names_get_unique_names(tmp_path):
    first = touch(tmp_path / "run-a" / "model.pth")
    second = touch(tmp_path / "run-b" / "model.pth")
    third = touch(tmp_path / "x" / "run-a" / "model.pth")
    fourth = touch(tmp_path / "y" / "run-a" / "model.pth")
    found = discover([first, second, third, fourth], environ=env(HF_HUB_CACHE=tmp_path / "none"))
    assert found.names() == ["model.pth", "model.pth (run-b)", "model.pth (run-a)", "model.pth (2)"]
    assert len({found.resolve(name) for name in found.names()}) == 4


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


# ============================== names, never paths, from the browser ==============================


@pytest.fixture
def listed(tmp_path):
    touch(tmp_path / "models" / "mine.pth")
    return discover(environ=env(ATTNVIZ_CHECKPOINTS=tmp_path / "models", HF_HUB_CACHE=tmp_path / "none")), tmp_path


TAMPERED = [
    "../../etc/passwd",
    "/etc/passwd",
    "mine.pth/../../../etc/passwd",
    "mine.pth ",
    "MINE.PTH",
    "mine",
    "",
    "~/.ssh/id_rsa",
    "file:///etc/passwd",
    "mine.pth\0",
]


def test_resolve_listed_name(listed):
    found, root = listed
    assert found.resolve("mine.pth") == str(root / "models" / "mine.pth")
    assert "mine.pth" in found


@pytest.mark.parametrize("name", TAMPERED + [None, 3, ["mine.pth"], b"mine.pth"])
def test_resolve_anything_else_is_none(listed, name):
    found, _ = listed
    assert found.resolve(name) is None
    assert name not in found


def test_resolve_never_touches_the_file_system(listed, tmp_path, monkeypatch):
    """Every file-system entry point fails loudly if it sees a tampered string; resolve still answers None."""
    found, _ = listed
    tampered = ["../x-secret", str(tmp_path / "models" / "mine.pth"), "mine.pth/../../x-secret"]
    seen = []

    def guard(original):
        def wrapper(*args, **kwargs):
            if any(isinstance(arg, str | bytes | os.PathLike) and os.fspath(arg) in tampered for arg in args):
                seen.append(args)
                raise AssertionError(f"file system touched with {args!r}")
            return original(*args, **kwargs)
        return wrapper

    for module, name in [(builtins, "open"), (os, "open"), (os, "stat"), (os, "lstat"), (os, "listdir"),
                         (os, "scandir"), (os.path, "exists"), (os.path, "isfile"), (os.path, "isdir"),
                         (os.path, "realpath"), (os.path, "abspath"), (os.path, "join")]:
        monkeypatch.setattr(module, name, guard(getattr(module, name)))
    for name in tampered:
        assert found.resolve(name) is None
    assert seen == []
    # the guards do fire when a tampered string reaches them
    with pytest.raises(AssertionError, match="file system touched"):
        os.stat(tampered[0])
    with pytest.raises(AssertionError, match="file system touched"):
        pathlib.Path(tampered[1]).exists()


def test_checkpoints_is_immutable_and_empty_by_default():
    empty = Checkpoints()
    assert empty.names() == []
    assert empty.resolve("gpt2 (HF cache)") is None
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
    loaded = load_checkpoint(found.resolve("openai-community/gpt2 (HF cache)"))
    assert len(loaded.trf_blocks) == 1
    assert torch.equal(loaded.tok_emb.weight, model.transformer.wte.weight)
