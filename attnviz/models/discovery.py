"""Checkpoints on this machine, listed by name: ``--checkpoint`` paths, ``ATTNVIZ_CHECKPOINTS``, the HF cache.

The app shows, and the URL holds, only a listed *name* ("gpt2 (HF cache)", "my-model.pth"); the path stays in the
listed :class:`Checkpoint`, so a string that came from a browser is never handed to ``open``/``os.stat`` or joined to a
path.

Where checkpoints are looked for, in this order (a path found twice is listed once):

1. paths given on the command line: ``streamlit run app.py -- --checkpoint PATH`` (repeatable);
2. ``ATTNVIZ_CHECKPOINTS``: paths separated by ``os.pathsep``;
3. the Hugging Face cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``,
   else ``~/.cache/huggingface/hub``): ``models--gpt2*``, ``models--openai-community--gpt2*``,
   ``models--distilgpt2``, ``models--distilbert--distilgpt2``; each snapshot with weights.

A path in 1 or 2 may be a weights file (.safetensors, .pth, .pt, .bin), a model folder (``config.json`` +
weights, or a TensorFlow checkpoint, which the loader explains how to convert), or a folder scanned one
level deep for those.  Nothing is opened here; :func:`attnviz.models.load_checkpoint` reads the file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from attnviz.models.loading import WEIGHT_SUFFIXES
from attnviz.script_args import flag_values

ENV_VAR = "ATTNVIZ_CHECKPOINTS"
CLI_FLAG = "--checkpoint"
HF_MODEL_DIRS = re.compile(
    r"models--(gpt2(-[\w.]+)?|openai-community--gpt2(-[\w.]+)?|distilgpt2|distilbert--distilgpt2)")
MODEL_DIR_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
SOURCES = {"cli": "--checkpoint", "env": ENV_VAR, "hf": "HF cache"}


@dataclass(frozen=True)
class Checkpoint:
    name: str  # unique, human-readable; the only thing the app shows or puts in a URL
    path: str
    source: str  # "cli", "env" or "hf"


@dataclass(frozen=True)
class Checkpoints:
    """Listed checkpoints (name, path) plus notes about paths that were given but hold nothing usable."""

    entries: tuple[Checkpoint, ...] = ()
    notes: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[Checkpoint]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


def checkpoint_args(argv: Sequence[str] | None = None) -> list[str]:
    """``--checkpoint PATH`` / ``--checkpoint=PATH`` values (repeatable) after ``--`` in ``argv`` (default
    ``sys.argv[1:]``); see :func:`attnviz.script_args.flag_values`."""
    return flag_values(CLI_FLAG, argv)


def hf_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where huggingface_hub keeps downloaded models."""
    env = os.environ if environ is None else environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "huggingface" / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def discover(extra_paths: Iterable[str | os.PathLike] = (), environ: Mapping[str, str] | None = None) -> Checkpoints:
    """Every checkpoint found (see the module docstring), each under a unique name."""
    env = os.environ if environ is None else environ
    found: list[tuple[str, Path, str]] = []  # (preferred name, path, source)
    notes: list[str] = []
    env_paths = [p for p in env.get(ENV_VAR, "").split(os.pathsep) if p]
    for source, paths in (("cli", list(extra_paths)), ("env", env_paths)):
        for raw in paths:
            path = Path(raw).expanduser()
            items = _scan(path)
            if not items:
                reason = "does not exist" if not path.exists() else "holds no checkpoint"
                notes.append(f"{SOURCES[source]} path {raw} {reason}.")
            found += [(item.name, item, source) for item in items]
    found += [(name, path, "hf") for name, path in _hf_snapshots(hf_cache_dir(env))]
    return Checkpoints(_unique(found), tuple(notes))


def _is_model_dir(path: Path) -> bool:
    """A Hugging Face model folder, or a TensorFlow checkpoint folder (listed so the loader can explain)."""
    try:
        names = {child.name for child in path.iterdir()}
    except OSError:
        return False
    has_weights = any(name in names for name in MODEL_DIR_WEIGHTS)
    tensorflow = "checkpoint" in names or any(name.startswith("model.ckpt") for name in names)
    return has_weights or tensorflow


def _is_weights_file(path: Path) -> bool:
    return path.is_file() and path.suffix in WEIGHT_SUFFIXES


def _scan(path: Path) -> list[Path]:
    """A weights file or model folder itself; a folder otherwise scanned one level deep."""
    if _is_weights_file(path):
        return [path]
    if not path.is_dir():
        return []
    if _is_model_dir(path):
        return [path]
    try:
        children = sorted(path.iterdir())
    except OSError:
        return []
    return [child for child in children if _is_weights_file(child) or (child.is_dir() and _is_model_dir(child))]


def _hf_snapshots(cache: Path) -> list[tuple[str, Path]]:
    """(name, snapshot dir) for cached GPT-2 repositories; the ``refs/main`` snapshot gets the plain name."""
    try:
        repos = sorted(child for child in cache.iterdir() if HF_MODEL_DIRS.fullmatch(child.name) and child.is_dir())
    except OSError:
        return []
    listed = []
    for repo in repos:
        repo_id = repo.name.removeprefix("models--").replace("--", "/")
        try:
            main = (repo / "refs" / "main").read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            main = ""
        try:
            snapshots = sorted(child for child in (repo / "snapshots").iterdir() if child.is_dir())
        except OSError:
            continue
        snapshots = [snapshot for snapshot in snapshots if any((snapshot / n).is_file() for n in MODEL_DIR_WEIGHTS)]
        snapshots.sort(key=lambda snapshot: snapshot.name != main)  # refs/main first
        for position, snapshot in enumerate(snapshots):
            suffix = "" if position == 0 else f", {snapshot.name[:7]}"
            listed.append((f"{repo_id} (HF cache{suffix})", snapshot))
    return listed


def _unique(found: list[tuple[str, Path, str]]) -> tuple[Checkpoint, ...]:
    """One entry per real path; names made unique with the parent folder, then a number."""
    entries: list[Checkpoint] = []
    names: set[str] = set()
    seen: set[Path] = set()
    for name, path, source in found:
        real = path.resolve()
        if real in seen:
            continue
        seen.add(real)
        candidate = name
        if candidate in names:
            candidate = f"{name} ({path.parent.name or path.parent})"
        number = 2
        while candidate in names:
            candidate = f"{name} ({number})"
            number += 1
        names.add(candidate)
        entries.append(Checkpoint(candidate, str(path), source))
    return tuple(entries)
