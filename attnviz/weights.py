"""Where a run's weights come from: the ``weights`` options, and the loaded models behind them.

The options, in the order the sidebar lists them:

1. :data:`BOOK` — the book's Chapter 3 classes with seeded random weights (the default, no model);
2. the bundled model (``attnviz.models.BUNDLED``), when its files exist — labelled "bundled";
3. every checkpoint :func:`attnviz.models.discover` finds (``--checkpoint``, ``ATTNVIZ_CHECKPOINTS``, HF cache);
4. models trained in this session (:func:`register_session_model`), listed for that session only.

An :class:`Option` has a ``name`` (what the sidebar shows and the URL holds) and a ``ref`` (what an
``AttentionConfig.checkpoint`` holds: a path found by discovery, or ``"session:<opaque id>"``).  A name that
came from a browser is only ever compared with the names in the list (:func:`options`): it never reaches the file
system.  :func:`load` turns a ref into a ``GPTModel`` through a byte-bounded cache of
loaded models (``ATTNVIZ_MODEL_CACHE_MB``, default 7,000: one GPT-2 XL, 1.56 billion float32 parameters,
fits; the model in use is always kept).  Pure Python + torch: no Streamlit.
"""

from __future__ import annotations

import collections
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from attnviz import kv_cache, models
from attnviz.models import CheckpointError, GPTModel
from attnviz.words import amount

BOOK = "book"  # the option name of the book's seeded random classes (the default)
BOOK_LABEL = "Book's classes (seeded random weights)"
BUNDLED_NAME = "bundled model"
SESSION_PREFIX = "session:"
TRAINED = "trained: "  # how a model trained in a session is listed: "trained: 1000 steps, seed 0"
MODEL_CACHE_MB = int(os.environ.get("ATTNVIZ_MODEL_CACHE_MB", "7000"))
MAX_SESSION_MODELS = 8  # server-wide; the oldest is forgotten first
DISCOVERY_TTL = 10.0  # seconds a discovery result is reused (a new file shows up after this)


@dataclass(frozen=True)
class Option:
    """One choice of the ``weights`` setting."""

    name: str  # what the sidebar lists and the URL holds
    label: str  # what the sidebar shows
    ref: str | None  # AttentionConfig.checkpoint: a path, "session:<id>", or None for the book's classes
    source: str  # "book", "bundled", "cli", "env", "hf" or "session"

    @property
    def is_checkpoint(self) -> bool:
        return self.ref is not None


BOOK_OPTION = Option(BOOK, BOOK_LABEL, None, "book")


# ============================== discovery (cached briefly) ==============================

_discovery_lock = threading.Lock()
_discovered: tuple[tuple, float, models.Checkpoints] | None = None


def _environment_key() -> tuple:
    keys = (models.discovery.ENV_VAR, "HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME")
    return tuple(os.environ.get(key) for key in keys) + tuple(models.checkpoint_args())


def discovered() -> models.Checkpoints:
    """``attnviz.models.discover()`` (command line, environment, HF cache), reused for a few seconds."""
    global _discovered
    key = _environment_key()
    with _discovery_lock:
        if _discovered is None or _discovered[0] != key or time.monotonic() - _discovered[1] > DISCOVERY_TTL:
            _discovered = (key, time.monotonic(), models.discover(models.checkpoint_args()))
        return _discovered[2]


def bundled_option() -> Option | None:
    """The bundled model, when its files are there."""
    path = Path(models.BUNDLED)
    if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
        return None
    return Option(BUNDLED_NAME, "Bundled model (trained by attnviz)", str(path), "bundled")


# ============================== models trained in a session ==============================

@dataclass(frozen=True)
class _SessionModel:
    session_id: str
    name: str
    model: GPTModel


_session_lock = threading.Lock()
_session_models: collections.OrderedDict[str, _SessionModel] = collections.OrderedDict()  # opaque id -> model


def register_session_model(session_id: str, name: str, model: GPTModel) -> Option:
    """Offer ``model`` (a trained ``GPTModel``) as a ``weights`` option to session ``session_id`` only.

    Returns its option (``option.name`` is what to put in the ``weights`` setting).  The model is kept in
    memory under an opaque id, server-side; the name is made unique within the session ("trained: NAME",
    "trained: NAME (2)" …).  At most :data:`MAX_SESSION_MODELS` are kept server-wide (oldest forgotten).
    """
    if not isinstance(model, GPTModel):
        raise TypeError(f"Expected an attnviz.models.GPTModel, got {type(model).__name__}.")
    model.eval()
    with _session_lock:
        taken = {entry.name for entry in _session_models.values() if entry.session_id == session_id}
        listed = base = f"{TRAINED}{name}"
        number = 2
        while listed in taken:
            listed = f"{base} ({number})"
            number += 1
        opaque = secrets.token_hex(16)
        _session_models[opaque] = _SessionModel(session_id, listed, model)
        while len(_session_models) > MAX_SESSION_MODELS:
            _session_models.popitem(last=False)
    return Option(listed, listed, SESSION_PREFIX + opaque, "session")


def session_options(session_id: str | None) -> list[Option]:
    with _session_lock:
        return [Option(entry.name, entry.name, SESSION_PREFIX + opaque, "session")
                for opaque, entry in _session_models.items() if entry.session_id == session_id]


# ============================== the options ==============================


def options(session_id: str | None = None, checkpoints: models.Checkpoints | None = None) -> list[Option]:
    """Every ``weights`` option for this session, in the sidebar's order (book's classes first)."""
    listed = [BOOK_OPTION]
    bundled = bundled_option()
    if bundled is not None:
        listed.append(bundled)
    for entry in discovered() if checkpoints is None else checkpoints:
        # realpath, not Path.resolve: an entry that became a link loop is no error
        if bundled is not None and os.path.realpath(entry.path) == os.path.realpath(bundled.ref):
            continue
        listed.append(Option(entry.name, entry.name, entry.path, entry.source))
    listed.extend(session_options(session_id))
    names: set[str] = set()
    unique = []
    for option in listed:  # a checkpoint named like another option is listed once (the first wins)
        if option.name not in names:
            names.add(option.name)
            unique.append(option)
    return unique


# ============================== loaded models ==============================


def _nbytes(model: GPTModel) -> int:
    return sum(tensor.numel() * tensor.element_size() for tensor in model.state_dict().values())


class ModelCache:
    """Loaded models by ref, least recently used dropped first, bounded by bytes (the last one always kept).

    A load runs outside the lock (an XL takes most of a minute: other sessions keep reading cached models);
    two sessions asking for the same file while it loads wait for the one load."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._models: collections.OrderedDict[tuple, tuple[GPTModel, int]] = collections.OrderedDict()
        self._loading: dict[tuple, threading.Event] = {}
        self._lock = threading.Lock()
        self.loads = 0
        self._loaded: set[str] = set()  # every path loaded once (a later failure: the file changed on disk)

    def get(self, path: str) -> GPTModel:
        try:
            stat = os.stat(path)  # a file replaced on disk is loaded again
            key = (path, stat.st_mtime_ns, stat.st_size)
        except OSError:
            key = (path, None, None)
        while True:
            with self._lock:
                if key in self._models:
                    self._models.move_to_end(key)
                    return self._models[key][0]
                loading = self._loading.get(key)
                if loading is None:
                    loading = self._loading[key] = threading.Event()
                    for old in [k for k in self._models if k[0] == path]:
                        del self._models[old]
                    # make room before loading: the new model and the cache must fit together
                    while self._models and sum(size for _, size in self._models.values()) > self.max_bytes // 2:
                        self._models.popitem(last=False)
                    break
            loading.wait()  # another session is loading it: use its model (or load it again if that failed)
        try:
            model = models.load_checkpoint(path)
            with self._lock:
                self.loads += 1
                self._loaded.add(path)
                self._models[key] = (model, _nbytes(model))
                while len(self._models) > 1 and sum(s for _, s in self._models.values()) > self.max_bytes:
                    self._models.popitem(last=False)
            return model
        finally:
            with self._lock:
                self._loading.pop(key, None)
            loading.set()

    def has_loaded(self, path: str) -> bool:
        """Whether the file or folder ``path`` was loaded once in this process (it may have changed since)."""
        with self._lock:
            return path in self._loaded

    def clear(self) -> None:
        with self._lock:
            self._models.clear()


MODELS = ModelCache(MODEL_CACHE_MB * 2**20)


def load(ref: str) -> GPTModel:
    """The model behind a ref (a discovered path, a path an ``AttentionConfig`` was given in Python — a leading ``~``
    the home folder —, or ``"session:<id>"``); CheckpointError with a message a user can act on when it cannot be
    loaded.  A ref is never a string from a browser: the app's refs are the listed options' (:func:`options`)."""
    if not isinstance(ref, str) or not ref:
        raise CheckpointError("No checkpoint was chosen.")
    if ref.startswith(SESSION_PREFIX):
        with _session_lock:
            entry = _session_models.get(ref[len(SESSION_PREFIX):])
        if entry is None:
            raise CheckpointError("This session's trained model is no longer in memory: train it again, or "
                                  "pick other weights.")
        return entry.model
    return MODELS.get(os.path.expanduser(ref))  # discovered paths are already expanded


@dataclass(frozen=True)
class ModelSizes:
    """What a model decides about the run: the widths, heads, layers and context the sidebar shows."""

    emb_dim: int
    num_heads: int
    n_layers: int
    context_length: int
    qkv_bias: bool
    n_kv_heads: int | None = None  # grouped-query / multi-query attention: its K/V heads
    latent_dim: int | None = None  # latent attention: the latent it caches per token
    sliding_window_size: int | None = None  # sliding-window attention: the window of the layers that have one
    swa_ratio: str | None = None  # with a window: its layers to full layers, "a:b" (kv_cache.window_schedule)
    window_unknown: bool = False  # a bare state dict: a sliding window, which lives in a config, cannot be known


def attention_caption(sizes: ModelSizes) -> str | None:
    """What the sidebar says beside the weights about the model's attention: a grouped-query (multi-query) model's
    K/V heads and the query heads sharing each, a latent model's latent; for a bare state dict of the book's
    multi-head GPTModel, that it runs full causal attention (a sliding window is in a config, never in a state dict)
    and how to give the window; None where the checkpoint is the book's multi-head attention as it says."""
    if sizes.latent_dim is not None:
        return (f"Multi-head latent attention (the book's bonus ch04/05_mla): the keys and values of its "
                f"{amount(sizes.num_heads, 'head')} are up-projected from one {sizes.latent_dim}-wide latent per "
                "token, which is what each layer caches.")
    if sizes.n_kv_heads is not None:
        kind = "Multi-query" if sizes.n_kv_heads == 1 else "Grouped-query"
        return (f"{kind} attention (the book's bonus ch04/04_gqa): {kv_sharing(sizes.num_heads, sizes.n_kv_heads)}; "
                "each layer caches the K/V heads only.")
    if not sizes.window_unknown:
        return None
    return ("A bare state dict: attnviz runs it with full causal attention. A sliding window (the book's "
            "ch04/06_swa) is not stored in a state dict; a config.json beside the file naming sliding_window_size "
            "runs it with its window.")


def kv_sharing(num_heads: int, kv_heads: int) -> str:
    """How ``num_heads`` query heads share ``kv_heads`` K/V heads, in words: "2 K/V heads, each shared by 2 query
    heads", "1 K/V head shared by all 4 query heads"."""
    if kv_heads == 1:
        return ("1 K/V head shared by both query heads" if num_heads == 2 else
                f"1 K/V head shared by all {amount(num_heads, 'query head')}")
    return f"{kv_heads} K/V heads, each shared by {amount(num_heads // kv_heads, 'query head')}"


def _window(model: GPTModel) -> dict:
    """``sliding_window_size`` and ``swa_ratio`` from every layer's window (a schedule may mix window and full
    layers); the first window without a ratio when the layers' windows differ (no one ratio counts them)."""
    windows = [getattr(block.att, "sliding_window_size", None) for block in model.trf_blocks]
    try:
        return kv_cache.window_schedule(windows)
    except ValueError:
        return {"sliding_window_size": next(window for window in windows if window is not None)}


def sizes(model: GPTModel) -> ModelSizes:
    att = model.trf_blocks[0].att
    latent = getattr(att, "W_DKV", None)  # the latent's down-projection: (d_in) -> (latent_dim)
    return ModelSizes(
        emb_dim=int(model.tok_emb.weight.shape[1]),
        num_heads=int(att.num_heads),
        n_layers=len(model.trf_blocks),
        context_length=int(model.pos_emb.weight.shape[0]),
        qkv_bias=att.W_query.bias is not None,
        n_kv_heads=getattr(att, "num_kv_groups", None),
        latent_dim=None if latent is None else int(latent.out_features),
        **_window(model),
        window_unknown=bool(getattr(model, "window_unknown", False)),
    )
