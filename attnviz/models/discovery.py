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
level deep for those.  No checkpoint is opened here; :func:`attnviz.models.load_checkpoint` reads the file, and a
file it cannot load (a config.json that is not JSON, too large, of the wrong types …) is listed and says why when it
is chosen.

What a folder holds is not trusted.  A path given in 1 or 2 is the operator's choice and is followed where it links
(a Hugging Face snapshot folder's files link into its ``blobs``); what discovery finds *in* a folder must stay in it:
an entry of a scanned folder that links out of it, or whose files the loader would read (``config.json``, the
weights, shards, a ``<stem>.json`` beside a file) link out of it, is left out and named in a note; so is a cache
snapshot that links out of the HF cache.  Links in a loop are left out.  Listed paths are absolute (a ``.`` given is
the folder it names); a listed name is printable and at most 200 characters (loading's ``_shown``: a newline shows
as ``\\n``), so the sidebar and the URL never carry control characters; a note names what was given and the name
of what was left out, never where a link points.  Only regular files are read (``refs/main``, at most a few hundred
bytes): a FIFO or a device there is never opened, so discovery cannot wait on one.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from attnviz.models.loading import WEIGHT_SUFFIXES, _shown
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
REF_BYTES = 256  # the most read of a cache's refs/main (a 40-character commit hash)


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
    env = _environment(environ)
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "huggingface" / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def discover(extra_paths: Iterable[str | os.PathLike] = (), environ: Mapping[str, str] | None = None) -> Checkpoints:
    """Every checkpoint found (see the module docstring), each under a unique name.  ``extra_paths``: paths (one path
    alone is read as one, not as its letters); anything else, or an ``environ`` that is no mapping, is a ValueError
    naming what came."""
    env = _environment(environ)
    given = [extra_paths] if isinstance(extra_paths, str | os.PathLike) else (
        list(extra_paths) if isinstance(extra_paths, Iterable) else None)
    if given is None or not all(isinstance(raw, str | os.PathLike) for raw in given):
        raise ValueError(f"extra_paths must be paths (str or pathlib.Path, a list of them), got {extra_paths!r:.80}.")
    found: list[tuple[str, Path, str]] = []  # (preferred name, path, source)
    notes: list[str] = []
    env_paths = [p for p in env.get(ENV_VAR, "").split(os.pathsep) if p]
    for source, paths in (("cli", given), ("env", env_paths)):
        for raw in paths:
            given = f"{SOURCES[source]} path {_shown(os.fspath(raw))}"
            path = _absolute(raw)
            try:
                items, left_out = _scan(path)
            except OSError as error:  # the folder cannot be listed (chmod 000, a network mount gone …)
                notes.append(f"{given} could not be read ({error.strerror or 'an error'}), so nothing in it is listed.")
                continue
            if not items and not left_out:
                notes.append(f"{given} {_nothing_in(path)}.")
            notes += [f"{given}: {why}" for why in left_out]
            found += [(_shown(item.name), item, source) for item in items]
    hf_found, hf_left_out = _hf_snapshots(_absolute(hf_cache_dir(env)))
    found += [(name, path, "hf") for name, path in hf_found]
    notes += [f"{SOURCES['hf']}: {why}" for why in hf_left_out]
    return Checkpoints(_unique(found), tuple(notes))


def _environment(environ) -> Mapping[str, str]:
    """``environ``, or ``os.environ`` for None; a ValueError naming what came when it is no mapping."""
    if environ is None:
        return os.environ
    if not isinstance(environ, Mapping):
        raise ValueError(f"environ must be a mapping of environment variables (like os.environ), or None, got "
                         f"{type(environ).__name__}.")
    return environ


def _absolute(raw: str | os.PathLike) -> Path:
    """``raw`` with ``~`` expanded, made absolute and ``.``/``..`` taken out (``.`` is named by its folder, and a
    message that names the listed path never holds a bare ``.``)."""
    return Path(os.path.abspath(os.path.expanduser(os.fspath(raw))))


def _nothing_in(path: Path) -> str:
    """Why a given path lists nothing, in words."""
    if not os.path.lexists(path) or not path.exists():
        return "does not exist"
    if not path.is_dir():
        return "is neither a checkpoint file (.safetensors, .pth, .pt or .bin) nor a folder"
    return "holds no checkpoint"


def _real(path: Path, real_parent: str | None = None) -> str:
    """Where ``path`` leads after every link (as far as links go: a loop is left as it is), never raising;
    ``real_parent``: its folder's, known already (then a path that is no link costs one ``lstat``)."""
    try:
        if real_parent is not None and not path.is_symlink():
            return os.path.join(real_parent, path.name)
        return os.path.realpath(path)
    except (OSError, RuntimeError, ValueError):
        return ""


def _entry_inside(path: Path, root: str) -> bool:
    """Whether ``path``, an entry of the folder whose real path is ``root``, stays in it: one that is no link does,
    without its path being resolved; only a link is followed (:func:`_real_path_inside`)."""
    if not path.is_symlink():
        return True
    return _real_path_inside(path, root)


def _real_path_inside(path: Path, root: str) -> bool:
    """Whether ``path`` (anywhere), after every link on its way is followed (its real path), is in the real folder
    ``root``."""
    real = _real(path)
    try:
        return bool(real) and os.path.commonpath([real, root]) == root
    except ValueError:
        return False


def _entries(folder: Path) -> list[os.DirEntry]:
    """The entries of ``folder``, by name; OSError when it cannot be listed."""
    with os.scandir(folder) as listing:
        return sorted(listing, key=lambda entry: entry.name)


def _stays_inside(item: Path, root: str, entry_of_root: bool = True) -> bool:
    """Whether ``item`` and every file the loader may read for it lead into the real folder ``root``: a folder's
    entries, or a file's config beside it (``<stem>.json``, ``config.json``).  ``entry_of_root``: ``item`` is an entry
    of that folder itself (then one that is no link is inside it without following its path)."""
    if not (_entry_inside(item, root) if entry_of_root else _real_path_inside(item, root)):
        return False
    if item.is_dir():
        try:
            return all(_real_path_inside(Path(entry.path), root) for entry in _entries(item) if entry.is_symlink())
        except OSError:
            return True  # unreadable: the loader says so by its name when it is chosen
    beside = (item.with_suffix(".json"), item.parent / "config.json")
    return all(_entry_inside(file, root) for file in beside if os.path.lexists(file))


def _is_model_dir(path: Path) -> bool:
    """A Hugging Face model folder, or a TensorFlow checkpoint folder (listed so the loader can explain): judged by
    the names it holds, without listing it (a folder of a million files costs what a small one does)."""
    names = (*MODEL_DIR_WEIGHTS, "checkpoint", "model.ckpt.index")
    try:
        return path.is_dir() and any(os.path.exists(path / name) for name in names)
    except (OSError, ValueError):
        return False


def _is_weights_file(path: Path) -> bool:
    return path.suffix in WEIGHT_SUFFIXES and path.is_file()


def _scan(path: Path) -> tuple[list[Path], list[str]]:
    """(what is listed, why each entry left out was left out): a weights file or model folder itself; a folder
    otherwise scanned one level deep, each entry kept only when it stays inside the folder.  OSError when the folder
    cannot be listed."""
    if _is_weights_file(path) or _is_model_dir(path):
        return [path], []
    if not path.is_dir():
        return [], []
    entries = _entries(path)
    root = _real(path)
    items, left_out = [], []
    for entry in entries:
        child = Path(entry.path)
        if not (_is_weights_file(child) or _is_model_dir(child)):
            continue
        if _stays_inside(child, root):
            items.append(child)
        else:
            left_out.append(f"{_shown(entry.name)} links to a place outside this folder, so it is not listed. "
                            "To list it, give that place itself (ATTNVIZ_CHECKPOINTS or --checkpoint).")
    return items, left_out


def _read_ref(file: Path) -> str:
    """The text of a cache's ``refs/main`` (its first :data:`REF_BYTES`), or "" when it is not a regular file that
    can be read: opened without waiting (a FIFO), checked to be a regular file before it is read (a device)."""
    try:
        descriptor = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return ""
        return os.read(descriptor, REF_BYTES).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    finally:
        os.close(descriptor)


def _hf_snapshots(cache: Path) -> tuple[list[tuple[str, Path]], list[str]]:
    """(name, snapshot dir) for cached GPT-2 repositories, the ``refs/main`` snapshot under the plain name; and why
    each snapshot left out (one leading out of the cache) was left out."""
    try:
        repos = [Path(entry.path) for entry in _entries(cache) if HF_MODEL_DIRS.fullmatch(entry.name)]
    except OSError:
        return [], []
    root = _real(cache)
    listed, left_out = [], []
    for repo in repos:
        repo_id = repo.name.removeprefix("models--").replace("--", "/")
        main = _read_ref(repo / "refs" / "main")
        try:
            snapshots = [Path(entry.path) for entry in _entries(repo / "snapshots")]
        except OSError:
            continue
        snapshots = [snapshot for snapshot in snapshots
                     if snapshot.is_dir() and any((snapshot / n).is_file() for n in MODEL_DIR_WEIGHTS)]
        for snapshot in [snapshot for snapshot in snapshots if not _stays_inside(snapshot, root, entry_of_root=False)]:
            snapshots.remove(snapshot)
            left_out.append(f"{_shown(repo_id)}'s snapshot {_shown(snapshot.name[:7])} links to a place outside the "
                            "cache, so it is not listed.")
        snapshots.sort(key=lambda snapshot: snapshot.name != main)  # refs/main first
        for position, snapshot in enumerate(snapshots):
            suffix = "" if position == 0 else f", {_shown(snapshot.name[:7])}"
            listed.append((f"{_shown(repo_id)} (HF cache{suffix})", snapshot))
    return listed, left_out


def _unique(found: list[tuple[str, Path, str]]) -> tuple[Checkpoint, ...]:
    """One entry per real path; names made unique with the parent folder, then a number."""
    entries: list[Checkpoint] = []
    names: set[str] = set()
    seen: set[str] = set()
    real_parents: dict[Path, str] = {}
    for name, path, source in found:
        if path.parent not in real_parents:
            real_parents[path.parent] = _real(path.parent)
        real = _real(path, real_parents[path.parent])
        if real in seen:
            continue
        seen.add(real)
        candidate = name
        if candidate in names:
            candidate = f"{name} ({_shown(path.parent.name) or '/'})"
        number = 2
        while candidate in names:
            candidate = f"{name} ({number})"
            number += 1
        names.add(candidate)
        entries.append(Checkpoint(candidate, str(path), source))
    return tuple(entries)
