"""Checkpoint files -> the book's ``GPTModel``: one loader, one explicit, shape-checked mapping per family.

Families (this module is the one place that knows checkpoint names):

* ``gpt2``: Hugging Face GPT-2 (``GPT2LMHeadModel`` / ``GPT2Model`` state dicts, keys with or without
  ``transformer.``) as ``model.safetensors`` (a directory with ``config.json``, a bare file, or shards
  with ``model.safetensors.index.json``, which may name only plain file names beside it: a path there is refused
  and never opened; a symlink in the folder is followed, as the Hugging Face cache's are) or PyTorch
  ``pytorch_model.bin``.  Mapped as the book's ch05 ``load_weights_into_gpt`` does: Conv1D weights ``(in, out)``
  transposed, ``c_attn`` split into ``W_query``/``W_key``/``W_value``, ``lm_head`` tied to ``wte`` when absent,
  mask buffers skipped.
* ``book``: the book's own ``model.state_dict()`` saved with ``torch.save`` (ch05 names:
  ``tok_emb.weight``, ``trf_blocks.0.att.W_query.weight``, …), or a dict holding it under
  ``model_state_dict`` (the book's ``model_and_optimizer.pth``).  Sliding-window attention (the book's
  ``ch04/06_swa``) has the same tensors as multi-head attention: its window is in the config, not the state dict.
  Where the config (a ``cfg``/``config`` beside the state dict, or ``config.json``) names ``sliding_window_size``,
  the model runs with it, on the layers its ``sliding_window_stride`` schedule gives (the book's: K window layers,
  then one full; 0 none, negative or absent every layer), and ``model.sliding_windows`` says each layer's window.
  Where no config is there at all, the window cannot be known: the model runs full causal attention and
  ``model.window_unknown`` is True, for the app to say so.
  Grouped-query and latent attention (the book's ``ch04/04_gqa``, ``05_mla``) are read from their tensors and built
  with attnviz's classes of the same names: a ``W_key`` with ``G · head_dim`` rows is grouped-query attention with G
  K/V heads (one: multi-query; a block whose ``out_proj`` has no bias, as 04_gqa's, is grouped-query even with one
  K/V head per head), a ``W_DKV`` is latent attention with its rows as ``latent_dim``.  A config's ``n_kv_groups``
  (04_gqa's name for the number of K/V heads; attnviz's ``num_kv_groups``) or ``latent_dim`` that contradicts the
  tensors is refused in words.

Sizes (layers, width, context, heads, biases, LayerNorm eps) come from ``config.json`` when there is one,
else from the tensors (heads: head_dim 64, as in every GPT-2 size; ``model.heads_assumed`` says so).  PyTorch files
are read with ``torch.load(..., weights_only=True)``: a pickle that would run code is refused, never executed.
Every value read from a file (a JSON file, a config entry, a tensor's name or shape) is checked for its kind and
range before it is used as a path, a number or a key.  Everything else raises :class:`CheckpointError` saying what
to do: an ``attnviz.config.ConfigError`` (a ``ValueError``), so ``run(text, AttentionConfig(checkpoint=…))`` raises
the error api.md documents for settings that cannot run.

Memory: the model is built on the ``meta`` device (no random init, no allocation) and each parameter
is one float32 copy of a tensor read from a memory-mapped file (safetensors, or ``torch.load(mmap=True)``),
one tensor at a time.  Peak RSS is the model plus the file's pages mapped while reading (page cache,
reclaimable, released when the file closes) — at most about two copies of the model — and it settles at one
copy once the file is closed.
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import pickletools
import re
import warnings
import zipfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from attnviz.config import ConfigError
from attnviz.models.gpt import GROUPED_QUERY, LATENT, MAX_WINDOW, MULTI_QUERY, SLIDING_WINDOW, GPTModel
from attnviz.modern_attention import GroupedQueryAttention, MultiHeadLatentAttention

GPT2_VOCAB_SIZE = 50257  # tiktoken's GPT-2 encoding: the only tokenizer attnviz has
HEAD_DIM = 64  # every GPT-2 size (small 768/12, medium 1024/16, large 1280/20, XL 1600/25)
SAFETENSORS_SUFFIXES = (".safetensors",)
TORCH_SUFFIXES = (".pth", ".pt", ".bin")
WEIGHT_SUFFIXES = SAFETENSORS_SUFFIXES + TORCH_SUFFIXES
HF_SKIPPED = (".attn.bias", ".attn.masked_bias")  # GPT-2's causal-mask buffers, not weights
TF_HINT = (
    "attnviz reads PyTorch and safetensors files, not TensorFlow checkpoints. Convert it once: with the book's "
    "Chapter 5 code (load_gpt2_params_from_tf_ckpt + load_weights_into_gpt, then "
    "torch.save(model.state_dict(), 'gpt2.pth')), or with transformers < 5: "
    "GPT2LMHeadModel.from_pretrained(DIR, from_tf=True).save_pretrained(OUT). "
    "Or download the safetensors version: pip install huggingface_hub && hf download openai-community/gpt2"
)


class CheckpointError(ConfigError):
    """A checkpoint attnviz cannot load; the message says why and what to do.  A ConfigError (an InputError, a
    ValueError): a config whose ``checkpoint`` cannot load is a setting that cannot run."""


def assign(name: str, left: torch.Tensor, right: torch.Tensor) -> nn.Parameter:
    """The book's ``assign``, checked: ``right`` as a float32 parameter of ``left``'s shape, or a ValueError.

    ``name`` says which checkpoint key went where; ``right`` is always copied (contiguous, float32), so
    the parameter never keeps a memory-mapped file alive.  A NaN or an infinity is refused too: one would make
    every map and prediction after it NaN (blank maps, a traceback where a page takes a maximum).  ``right`` may be a
    NumPy array, as the book's ``load_weights_into_gpt`` passes its ``params``; anything but tensors is a
    CheckpointError naming what came.
    """
    if isinstance(right, np.ndarray):
        right = torch.from_numpy(right)
    if not isinstance(left, torch.Tensor) or not isinstance(right, torch.Tensor):
        raise CheckpointError(f"{name}: assign takes the model's tensor (left) and the checkpoint's tensor or NumPy "
                              f"array (right), got {type(left).__name__} and {type(right).__name__}.")
    if tuple(left.shape) != tuple(right.shape):
        raise CheckpointError(
            f"{name}: the model expects shape {tuple(left.shape)}, the checkpoint has {tuple(right.shape)}. "
            "The file does not match its config (or is not GPT-2)."
        )
    parameter = nn.Parameter(right.to(dtype=torch.float32, memory_format=torch.contiguous_format, copy=True))
    if not torch.isfinite(parameter.data).all():
        raise CheckpointError(
            f"{name}: the checkpoint holds NaN or infinite values there, so every output of the model would be "
            "NaN. Was it saved after a training diverged (or in float16 past its range)? Use an earlier checkpoint."
        )
    return parameter


# ============================== reading files ==============================


class _Tensors:
    """Named tensors of one checkpoint, read lazily (safetensors) or popped from a loaded state dict."""

    def __init__(self, getters: dict[str, Callable[[], torch.Tensor]], origin: str):
        self._getters = getters
        self.origin = origin
        self.extras: dict = {}  # non-tensor entries of a torch checkpoint dict (e.g. the book's cfg)

    def names(self) -> set[str]:
        return set(self._getters)

    def peek(self, key: str) -> torch.Tensor:
        """The tensor ``key`` (one that is there), left to be taken."""
        tensor = self._getters.pop(key)()
        self._getters[key] = lambda: tensor
        return tensor

    def take(self, key: str) -> torch.Tensor:
        if key not in self._getters:
            raise CheckpointError(f"{self.origin} is not a complete GPT-2 checkpoint: the key {key!r} is missing.")
        return self._getters.pop(key)()


@contextmanager
def _open_tensors(files: list[Path]) -> Iterator[_Tensors]:
    with ExitStack() as stack:
        getters: dict[str, Callable[[], torch.Tensor]] = {}
        extras: dict = {}
        for file in files:
            if file.suffix in SAFETENSORS_SUFFIXES:
                handle = stack.enter_context(_safe_open(file))
                stored = handle.keys()  # safetensors' API: the names in the header
                getters.update({key: (lambda key=key, handle=handle: handle.get_tensor(key)) for key in stored})
            else:
                state, file_extras = _torch_load(file)
                getters.update({key: (lambda key=key, state=state: state.pop(key)) for key in state})
                extras.update(file_extras)
        tensors = _Tensors(getters, _describe(files))
        tensors.extras = extras
        yield tensors


def _describe(files: list[Path]) -> str:
    return str(files[0]) if len(files) == 1 else f"{files[0].parent} ({len(files)} shards)"


@contextmanager
def _safe_open(file: Path):
    from safetensors import SafetensorError, safe_open

    try:
        handle = safe_open(str(file), framework="pt", device="cpu")
    except SafetensorError as error:
        message = str(error)
        if "incomplete metadata" in message or "too small" in message or "not fully covered" in message:
            raise CheckpointError(
                f"{file} is truncated (it is shorter than its own header says: {message}). "
                "The download or copy was probably interrupted: fetch the file again."
            ) from None
        raise CheckpointError(f"{file} is not a valid safetensors file ({message}).") from None
    with handle:
        yield handle


def _torch_load(file: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """A PyTorch checkpoint's tensors (weights_only: plain tensors and containers, never code) and its extras."""
    with open(file, "rb") as stream:
        magic = stream.read(4)
    if not magic:
        raise CheckpointError(f"{file} is empty (0 bytes): it holds no weights. Save or copy the checkpoint again.")
    is_zip = zipfile.is_zipfile(file)
    if magic.startswith(b"PK") and not is_zip:
        raise CheckpointError(
            f"{file} is truncated or damaged (a PyTorch zip archive without its directory). "
            "The download or copy was probably interrupted: fetch or save the file again."
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. pickle-protocol notices from the weights-only unpickler
            loaded = torch.load(file, map_location="cpu", weights_only=True, mmap=is_zip)
    except Exception as error:  # the file's bytes decide what the unpickler raises (IndexError, UnicodeDecodeError…)
        raise CheckpointError(_unreadable(file, error, is_zip)) from None
    if isinstance(loaded, dict):
        for key in ("model_state_dict", "state_dict", "model"):  # the book's model_and_optimizer.pth and friends
            if isinstance(loaded.get(key), dict):
                extras = {k: v for k, v in loaded.items() if k != key and not isinstance(v, torch.Tensor)}
                loaded = loaded[key]
                break
        else:
            extras = {}
        state = {key: value for key, value in loaded.items() if isinstance(value, torch.Tensor)}
        if state and all(isinstance(key, str) for key in state):
            return state, extras
    raise CheckpointError(
        f"{file} holds a {type(loaded).__name__}, not a model's state dict. "
        "Save one with torch.save(model.state_dict(), 'model.pth')."
    )


def _unreadable(file: Path, error: Exception, is_zip: bool) -> str:
    """Why ``torch.load(file, weights_only=True)`` failed, in words: not laid out as ``torch.save`` writes, a pickle
    the weights-only unpickler refused (it would build Python objects), or a checkpoint cut short."""
    if not _holds_a_pickle(file, is_zip):
        return (f"{file} is not a PyTorch checkpoint: torch.save writes a zip archive holding a pickle, or a pickle, "
                "and this file is neither. Is it the right file?")
    if isinstance(error, pickle.UnpicklingError) and "Weights only load failed" in str(error):
        return (f"Refused to load {file}: it contains Python objects, not just tensors, and unpickling them "
                "could run code. attnviz did not run it. If you trust where it came from, load it in Python and "
                "re-save only the weights: torch.save(model.state_dict(), 'model.pth').")
    reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else "it ends early"
    return f"{file} could not be read as a PyTorch checkpoint ({reason}). Is it complete?"


PICKLE_PREFIX_BYTES = 1 << 20  # what _holds_a_pickle reads: a pickle's opening opcodes, not its tensors


def _holds_a_pickle(file: Path, is_zip: bool) -> bool:
    """Whether the file (a zip archive: its ``data.pkl``) starts with a well-formed pickle: two or more opcodes up
    to STOP, or 16 in a row.  :func:`pickletools.genops` parses the opcodes and runs nothing; random bytes fail
    within a few."""
    try:
        if is_zip:
            with zipfile.ZipFile(file) as archive:
                name = next((n for n in archive.namelist() if n.endswith("data.pkl")), None)
                if name is None:
                    return False
                with archive.open(name) as stream:
                    prefix = stream.read(PICKLE_PREFIX_BYTES)
        else:
            with open(file, "rb") as stream:
                prefix = stream.read(PICKLE_PREFIX_BYTES)
    except (OSError, zipfile.BadZipFile):
        return False
    count = 0
    try:
        for opcode, _, _ in pickletools.genops(io.BytesIO(prefix)):  # BytesIO: a length read never allocates it
            if opcode.name == "STOP":
                return count >= 1
            count += 1
            if count >= 16:
                return True
    except Exception:  # any error means "not a pickle": genops raises ValueError, EOFError, …
        return False
    return False


MAX_JSON_BYTES = 16 * 2**20  # a config.json is a few kB, the index of a sharded 100B-parameter model under 1 MB


def _read_json(file: Path) -> dict:
    """The JSON object in ``file`` (a config or a shard index), or a CheckpointError in words: a file larger than any
    config (never read), one that is not UTF-8 JSON, nested too deeply for the decoder (it recurses once per bracket)
    or holding a number too long to convert (Python's limit on digits)."""
    size = file.stat().st_size
    if size > MAX_JSON_BYTES:
        raise CheckpointError(f"{file} is {size:,} bytes, larger than a config or a shard index could be "
                              f"({MAX_JSON_BYTES:,} at most): it is not one. Fix or remove it.")
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        reason = "it is not UTF-8 text"
    except json.JSONDecodeError as error:
        reason = str(error)
    except RecursionError:
        reason = "it is nested too deeply"
    except ValueError:  # int('9' * 5000): past sys.get_int_max_str_digits()
        reason = "a number in it is too long to read"
    else:
        if not isinstance(config, dict):
            raise CheckpointError(f"{file} is not a config object (it holds a {type(config).__name__}).")
        return config
    raise CheckpointError(f"{file} is not a readable JSON file ({reason}): fix or remove it.")


def _config_beside(file: Path) -> dict | None:
    """``<stem>.json`` beside the file, else ``config.json`` beside it, else None."""
    for candidate in (file.with_suffix(".json"), file.parent / "config.json"):
        if candidate != file and candidate.is_file():
            return _read_json(candidate)
    return None


def _is_tensorflow(path: Path) -> bool:
    names = [path.name] if path.is_file() else [child.name for child in path.iterdir()]
    return any(
        name == "checkpoint" or name.startswith("model.ckpt") or name.endswith((".ckpt.index", ".h5")) for name in names
    )


def _locate(path: Path) -> tuple[list[Path], dict | None]:
    """The weight file(s) and config of ``path`` (a file or a directory), or a CheckpointError."""
    if not path.exists():
        raise CheckpointError(f"No file or folder at {path}. Check the path (ATTNVIZ_CHECKPOINTS or --checkpoint).")
    if path.is_file():
        if _is_tensorflow(path):
            raise CheckpointError(f"{path} is part of a TensorFlow checkpoint. {TF_HINT}")
        if path.suffix not in WEIGHT_SUFFIXES:
            raise CheckpointError(
                f"{path.name}: unknown checkpoint type {path.suffix or '(no extension)'!r}. attnviz reads "
                "Hugging Face GPT-2 folders and .safetensors, .pth, .pt or .bin files."
            )
        return [path], _config_beside(path)
    config = _read_json(path / "config.json") if (path / "config.json").is_file() else None
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (path / name).is_file():
            return [path / name], config
        index = path / f"{name}.index.json"
        if index.is_file():
            return _shards(path, index), config
    if _is_tensorflow(path):
        raise CheckpointError(f"{path} holds a TensorFlow checkpoint. {TF_HINT}")
    candidates = sorted(child for child in path.iterdir() if child.is_file() and child.suffix in WEIGHT_SUFFIXES)
    if len(candidates) == 1:
        return candidates, _config_beside(candidates[0])
    if candidates:
        raise CheckpointError(
            f"{path} holds several checkpoints ({', '.join(c.name for c in candidates[:5])}): choose one file."
        )
    raise CheckpointError(
        f"Nothing loadable in {path}: expected config.json + model.safetensors (a Hugging Face GPT-2 folder), "
        "or a .safetensors / .pth / .pt / .bin file."
    )


def _shards(path: Path, index: Path) -> list[Path]:
    """The shard files a sharded checkpoint's index (``model.safetensors.index.json``: ``{"weight_map": {tensor:
    shard file name}}``) names, in the order it first names them, or a CheckpointError in words."""
    weight_map = _read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index} has no weight_map: the sharded checkpoint is incomplete.")
    names = []
    for shard in weight_map.values():
        if not isinstance(shard, str):
            raise CheckpointError(
                f"{path}: {index.name} names the shard {_shown(shard)}, not a file name: the index is damaged. Fix or "
                "remove the index (or fetch the checkpoint again).")
        if not _plain_file_name(shard):
            path_like = "/" in shard or "\\" in shard
            named = f"a shard by a path, {_shown(shard)}," if path_like else f"the shard {shard!r:.60},"
            raise CheckpointError(
                f"{path}: {index.name} names {named} not a file in the checkpoint's folder. A shard index lists the "
                "plain file names of the shards beside it (model-00001-of-00002.safetensors): fix or remove the "
                "index. attnviz read no file it names.")
        if not shard.endswith(WEIGHT_SUFFIXES):
            raise CheckpointError(
                f"{path}: {index.name} names the shard {_shown(shard)}, not a weights file (.safetensors, .bin, .pt "
                "or .pth): fix or remove the index.")
        if shard not in names:
            names.append(shard)
    shards = [path / name for name in names]
    missing = [shard.name for shard in shards if not shard.is_file()]
    if missing:
        raise CheckpointError(f"{path}: shard {missing[0]} listed in {index.name} is missing.")
    return shards


def _plain_file_name(name: str) -> bool:
    """Whether ``name`` names a file directly in a folder: no separator (``/``, ``\\``), not absolute, not ``.``
    or ``..``, no NUL.  ``folder / name`` is then inside ``folder`` whatever the folder is; a symlink there is
    followed, as the folder's own ``model.safetensors`` is (the Hugging Face cache's snapshot folders hold only
    symlinks into the repo's ``blobs`` folder)."""
    return name not in ("", ".", "..") and not any(char in name for char in "/\\\0")


def _shown(value, limit: int = 200) -> str:
    """A value read from a file, for a message: a string as its text (escaped: ``\\x00``, no quotes), anything else
    as its repr, cut to ``limit`` characters (it can be any length)."""
    shown = repr(value)[1:-1] if isinstance(value, str) and value else repr(value)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


# ============================== the load ==============================


def load_checkpoint(path: str | os.PathLike) -> GPTModel:
    """Load a GPT-2 checkpoint into the book's ``GPTModel``: eval mode, CPU, float32.  ``path`` is a file or folder;
    a leading ``~`` is the home folder, as in a shell (a path given in Python or on the command line: the app's
    pages load only the paths :mod:`attnviz.models.discovery` listed, never a string from a browser).

    Raises :class:`CheckpointError` (a ``ConfigError``) with an actionable message for anything else.
    """
    if not isinstance(path, str | os.PathLike):
        raise CheckpointError(f"load_checkpoint takes the path of a checkpoint file or folder (a str or a "
                              f"pathlib.Path), got {type(path).__name__}.")
    try:
        return _load(Path(os.path.expanduser(path)))
    except OSError as error:  # permissions, a file vanishing mid-read, …
        raise CheckpointError(f"Could not read {error.filename or path}: {error.strerror or error}.") from None


SIZE_KEYS = ("n_layer", "n_head", "n_embd", "n_positions", "n_ctx", "n_layers", "n_heads", "emb_dim", "context_length",
             "sliding_window_size", "n_kv_groups", "num_kv_groups", "latent_dim", "n_inner")
NAME_KEYS = ("model_type", "activation_function")
FLAG_KEYS = ("scale_attn_weights", "scale_attn_by_inverse_layer_idx", "add_cross_attention")


def _checked_config(config: dict, origin: str) -> dict:
    """Every entry the loader reads must be of its kind before it is read (a cfg saved beside a state dict may hold
    tensors, which are neither true nor false): sizes positive whole numbers, eps a positive number a float holds,
    names strings, flags true or false."""
    for key in SIZE_KEYS:
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise CheckpointError(f"{origin}: the config's {key} must be a positive whole number, got {value!r:.40}.")
    for key in NAME_KEYS:
        value = config.get(key)
        if value is not None and not isinstance(value, str):
            raise CheckpointError(f"{origin}: the config's {key} must be a name, got {value!r:.40}.")
    for key in FLAG_KEYS:
        value = config.get(key)
        if value is not None and not isinstance(value, bool):
            raise CheckpointError(f"{origin}: the config's {key} must be true or false, got {value!r:.40}.")
    window = config.get("sliding_window_size")
    if window is not None and window > MAX_WINDOW:
        raise CheckpointError(
            f"{origin}: the config's sliding_window_size must be at most {MAX_WINDOW:,}, got {window!r:.40}: a window "
            "as long as the context already covers every position (the layer then runs full causal attention). "
            "Save the checkpoint with a window no longer than its context_length.")
    for key in ("layer_norm_epsilon", "ln_eps"):
        value = config.get(key)
        if value is not None and not _finite_positive(value):
            raise CheckpointError(
                f"{origin}: the config's {key} must be a small positive number, got {value!r:.40}.")
    stride = config.get("sliding_window_stride")
    if stride is not None and (isinstance(stride, bool) or not isinstance(stride, int)):
        raise CheckpointError(
            f"{origin}: the config's sliding_window_stride must be a whole number, got {stride!r:.40}.")
    return config


def _finite_positive(value) -> bool:
    """Whether ``value`` is a number above 0 that a float holds (not NaN, not infinite, not an int past 1.8e308)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value)) and value > 0
    except OverflowError:
        return False


def _load(path: Path) -> GPTModel:
    files, config = _locate(path)
    with _open_tensors(files) as tensors:
        if config is None and isinstance(tensors.extras.get("cfg") or tensors.extras.get("config"), dict):
            config = tensors.extras.get("cfg") or tensors.extras.get("config")
        configured = config is not None
        config = _checked_config(config or {}, tensors.origin)
        keys = tensors.names()
        if "tok_emb.weight" in keys:
            model = _load_book(tensors, config)
            # a bare state dict of multi-head attention: a window would be in a config
            model.window_unknown = not configured and not isinstance(
                model.trf_blocks[0].att, GroupedQueryAttention | MultiHeadLatentAttention)
        elif "wte.weight" in keys or "transformer.wte.weight" in keys:
            model = _load_gpt2(tensors, config)
        else:
            shown = ", ".join(_shown(key, 60) for key in sorted(keys)[:4]) or "no tensors"
            raise CheckpointError(
                f"{tensors.origin} is not a GPT-2 checkpoint: the key 'wte.weight' (Hugging Face GPT-2) or "
                f"'tok_emb.weight' (the book's GPTModel) is missing; it has {shown}."
            )
    return model.eval()


def _check_vocab(origin: str, vocab_size: int) -> None:
    if vocab_size != GPT2_VOCAB_SIZE:
        raise CheckpointError(
            f"{origin} has a vocabulary of {vocab_size:,} tokens, not GPT-2's {GPT2_VOCAB_SIZE:,}. attnviz tokenizes "
            "with GPT-2's encoding, so it can only show models trained with that vocabulary."
        )


def _head_count(origin: str, emb_dim: int, config: dict, key: str) -> int:
    if isinstance(config.get(key), int):
        return config[key]
    if emb_dim % HEAD_DIM:
        raise CheckpointError(
            f"{origin}: cannot infer the number of heads (width {emb_dim} is not a multiple of 64). "
            f'Put a config.json beside it with "{key}".'
        )
    return emb_dim // HEAD_DIM


def _layer_count(origin: str, keys: set[str], pattern: str, config_layers) -> int:
    """The number of blocks: their keys (``pattern``'s group: the block's number) numbered 0, 1, … without a gap,
    or a CheckpointError before any skeleton is built (a key ``h.100000000.…`` would build 10⁸ blocks)."""
    numbers = {match.group(1) for key in keys if (match := re.match(pattern, key))}  # digit strings, never int()ed
    n_layers = 0
    while str(n_layers) in numbers:
        n_layers += 1
    if len(numbers) > n_layers:
        extra = min(numbers - {str(index) for index in range(n_layers)}, key=lambda number: (len(number), number))
        raise CheckpointError(f"{origin} has no block {n_layers} but has block {_shown(extra, 20)}: the file is "
                              "incomplete or damaged. Save or fetch the checkpoint again.")
    if config_layers is not None and config_layers != n_layers:
        raise CheckpointError(f"{origin}: the config says {config_layers} layers but the weights have {n_layers}. "
                              "The config does not belong to this file: fix or remove it.")
    if n_layers == 0:
        raise CheckpointError(f"{origin} has no transformer blocks.")
    return n_layers


def _width(origin: str, name: str, shape: tuple) -> int:
    """The model's width: the token embedding's columns, or a CheckpointError for one without columns."""
    if len(shape) != 2 or shape[1] < 1:
        raise CheckpointError(f"{origin}: {name} {shape} has no columns: a token would be a vector of no numbers. "
                              "The file is incomplete (or is not GPT-2).")
    return shape[1]


class _Skeleton(TorchFunctionMode):
    """Building a skeleton on ``meta``, skip the two ops whose meta kernels are torch's Python decompositions: the
    embeddings' ``normal_`` init and the causal mask's ``triu``.  The first call of either imports torch's compiler
    stack (``torch._dynamo`` and sympy: a slow import of many modules, whose objects every later garbage collection
    of the server walks).  A skeleton's values are never read: every parameter is assigned from the checkpoint
    and the masks are replaced (``_finish``); only the shapes count, and both ops keep their input's shape."""

    SKIPPED = (nn.init.normal_, torch.triu)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensor = args[0] if args else kwargs.get("tensor", kwargs.get("input"))  # init.normal_(tensor=…)
        if func in self.SKIPPED and isinstance(tensor, torch.Tensor) and tensor.is_meta:
            return tensor
        return func(*args, **kwargs)


def _meta_model(cfg: dict) -> GPTModel:
    """The GPTModel skeleton: every tensor on ``meta`` (no memory, no random init) until assigned."""
    with torch.device("meta"), _Skeleton():
        return GPTModel(cfg)


def _finish(model: GPTModel, cfg: dict, origin: str, heads_assumed: bool) -> GPTModel:
    """Real causal-mask buffers (one tensor shared by all blocks); check nothing was left unassigned.
    ``heads_assumed``: no config gave the head count, so it is the width ÷ 64 (``model.heads_assumed`` says so, for
    the note a run of the model gives)."""
    ctx = cfg["context_length"]
    mask = torch.triu(torch.ones(ctx, ctx), diagonal=1)  # (ctx, ctx), 1 above the diagonal
    for block in model.trf_blocks:
        if not isinstance(block.att, GroupedQueryAttention | MultiHeadLatentAttention):  # those mask by position
            block.att.register_buffer("mask", mask)
    left = [name for name, tensor in [*model.named_parameters(), *model.named_buffers()] if tensor.is_meta]
    if left:
        raise CheckpointError(f"{origin}: no weights for {left[0]}.")
    model.heads_assumed = heads_assumed
    return model


MAX_CONTEXT = 2**14  # positions: _finish's causal mask is MAX_CONTEXT² float32, 1 GiB (GPT-2's 1,024: 4 MiB)


def _context_length(name: str, pos_shape: tuple, emb_dim: int, configured: int | None) -> int:
    """The context length: the config's when it matches the position table's rows, else a CheckpointError as
    :func:`assign` words it — before any skeleton is built, whose (ctx, ctx) mask a config's absurd n_positions
    (10¹²) would overflow.  A table without rows has no position for a token."""
    if pos_shape[0] < 1:
        raise CheckpointError(f"{name}: the position table {tuple(pos_shape)} has no rows, so the model has no "
                              "position for a single token. The file is incomplete (or is not GPT-2).")
    if configured is not None and configured != pos_shape[0]:
        raise CheckpointError(
            f"{name}: the model expects shape {(configured, emb_dim)}, the checkpoint has {tuple(pos_shape)}. "
            "The file does not match its config (or is not GPT-2)."
        )
    if pos_shape[0] > MAX_CONTEXT:
        raise CheckpointError(
            f"{name}: a position table of {pos_shape[0]:,} rows, more than the {MAX_CONTEXT:,} positions attnviz "
            f"builds a causal mask for (the mask is context × context numbers: {4 * pos_shape[0] ** 2:,} bytes). "
            "Is it the right file?")
    return pos_shape[0]


def gpt2_config(origin: str, wte_shape: tuple, wpe_shape: tuple, keys: set[str], config: dict) -> dict:
    """The book's cfg for a GPT-2 checkpoint: from ``config.json`` where it says, else from the tensors.

    ``keys``: the checkpoint's names without the ``transformer.`` prefix (layers counted from ``h.N.``).
    """
    if len(wte_shape) != 2 or len(wpe_shape) != 2:
        raise CheckpointError(f"{origin}: wte/wpe are not matrices ({wte_shape}, {wpe_shape}).")
    _check_vocab(origin, wte_shape[0])
    emb_dim = _width(origin, "wte.weight", wte_shape)
    cfg = {
        "vocab_size": wte_shape[0],
        "context_length": _context_length("wpe.weight -> pos_emb.weight", wpe_shape, emb_dim,
                                          config.get("n_positions", config.get("n_ctx"))),
        "emb_dim": emb_dim,
        "n_heads": _head_count(origin, emb_dim, config, "n_head"),
        "n_layers": _layer_count(origin, keys, r"h\.([0-9]+)\.", config.get("n_layer")),
        "drop_rate": 0.0,
        "qkv_bias": True,
        "ln_eps": float(config.get("layer_norm_epsilon", 1e-5)),
    }
    if emb_dim % cfg["n_heads"]:
        raise CheckpointError(f"{origin}: width {emb_dim} is not divisible by {cfg['n_heads']} heads.")
    return cfg


def _load_gpt2(tensors: _Tensors, config: dict) -> GPTModel:
    """Hugging Face GPT-2 -> GPTModel, as the book's ``load_weights_into_gpt`` maps OpenAI's weights."""
    origin = tensors.origin
    _check_gpt2_config(origin, config)
    prefix = "transformer." if "transformer.wte.weight" in tensors.names() else ""

    def take(key: str) -> torch.Tensor:
        return tensors.take(key if key == "lm_head.weight" else prefix + key)

    wte = take("wte.weight")  # (vocab, d)
    wpe = take("wpe.weight")  # (ctx, d)
    keys = {key.removeprefix(prefix) for key in tensors.names()}
    cfg = gpt2_config(origin, tuple(wte.shape), tuple(wpe.shape), keys, config)
    model = _meta_model(cfg)
    model.pos_emb.weight = assign("wpe.weight -> pos_emb.weight", model.pos_emb.weight, wpe)
    model.tok_emb.weight = assign("wte.weight -> tok_emb.weight", model.tok_emb.weight, wte)
    for b, block in enumerate(model.trf_blocks):
        _load_gpt2_attention(block.att, f"h.{b}.", take, cfg["emb_dim"])
        _load_gpt2_block_rest(block, f"h.{b}.", take)
    model.final_norm.scale = assign("ln_f.weight -> final_norm.scale", model.final_norm.scale, take("ln_f.weight"))
    model.final_norm.shift = assign("ln_f.bias -> final_norm.shift", model.final_norm.shift, take("ln_f.bias"))
    if "lm_head.weight" in tensors.names():
        model.out_head.weight = assign(
            "lm_head.weight -> out_head.weight", model.out_head.weight, take("lm_head.weight"))
    else:  # GPT-2 ties the output head to the token embedding (the book: out_head.weight = wte)
        model.out_head.weight = assign(
            "wte.weight -> out_head.weight (tied)", model.out_head.weight, model.tok_emb.weight.data)

    unexpected = sorted(
        key for key in tensors.names()
        if re.match(r"(transformer\.)?(h\.|wte|wpe|ln_f)", key) and not key.endswith(HF_SKIPPED)
    )
    if unexpected:
        raise CheckpointError(f"{origin}: unexpected key {unexpected[0]!r:.80} for a {cfg['n_layers']}-layer GPT-2.")
    return _finish(model, cfg, origin, heads_assumed=not isinstance(config.get("n_head"), int))


def _check_gpt2_config(origin: str, config: dict) -> None:
    """CheckpointError for a config.json that describes something other than the book's GPT-2."""
    if config.get("model_type", "gpt2") != "gpt2":
        raise CheckpointError(
            f"{origin}: config.json says model_type {config['model_type']!r:.60}; attnviz reads GPT-2.")
    if config.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        raise CheckpointError(
            f"{origin}: activation {config['activation_function']!r:.60}; the book's GPT-2 uses GELU (tanh), "
            "'gelu_new'."
        )
    if config.get("scale_attn_weights", True) is not True:
        raise CheckpointError(f"{origin}: config.json says scale_attn_weights false: its attention does not divide the "
                              "scores by √head_dim, and the book's model always does.")
    if config.get("scale_attn_by_inverse_layer_idx") or config.get("add_cross_attention"):
        raise CheckpointError(f"{origin}: a GPT-2 variant (scaled-by-layer or cross attention) the book's model lacks.")
    if config.get("n_inner") not in (None, 4 * config.get("n_embd", 0)):
        raise CheckpointError(f"{origin}: feed-forward width n_inner={config['n_inner']}; the book's model uses 4·d.")


def _load_gpt2_attention(att, h: str, take, emb_dim: int) -> None:
    """One block's fused ``c_attn`` (a Conv1D, weight (in, out)) split into W_query/W_key/W_value, and c_proj."""
    c_attn_w = take(h + "attn.c_attn.weight")  # Conv1D (in, out) = (d, 3d)
    c_attn_w = assign(h + "attn.c_attn.weight", torch.empty(emb_dim, 3 * emb_dim, device="meta"), c_attn_w)
    q_w, k_w, v_w = torch.split(c_attn_w.data, emb_dim, dim=-1)  # (d, 3d) -> 3 × (d, d)
    att.W_query.weight = assign(h + "attn.c_attn.weight[q] -> att.W_query.weight", att.W_query.weight, q_w.T)
    att.W_key.weight = assign(h + "attn.c_attn.weight[k] -> att.W_key.weight", att.W_key.weight, k_w.T)
    att.W_value.weight = assign(h + "attn.c_attn.weight[v] -> att.W_value.weight", att.W_value.weight, v_w.T)
    del c_attn_w, q_w, k_w, v_w
    c_attn_b = take(h + "attn.c_attn.bias")  # (3d,)
    c_attn_b = assign(h + "attn.c_attn.bias", torch.empty(3 * emb_dim, device="meta"), c_attn_b)
    q_b, k_b, v_b = torch.split(c_attn_b.data, emb_dim, dim=-1)  # (3d,) -> 3 × (d,)
    att.W_query.bias = assign(h + "attn.c_attn.bias[q] -> att.W_query.bias", att.W_query.bias, q_b)
    att.W_key.bias = assign(h + "attn.c_attn.bias[k] -> att.W_key.bias", att.W_key.bias, k_b)
    att.W_value.bias = assign(h + "attn.c_attn.bias[v] -> att.W_value.bias", att.W_value.bias, v_b)
    att.out_proj.weight = assign(
        h + "attn.c_proj.weight -> att.out_proj.weight", att.out_proj.weight, take(h + "attn.c_proj.weight").T
    )
    att.out_proj.bias = assign(
        h + "attn.c_proj.bias -> att.out_proj.bias", att.out_proj.bias, take(h + "attn.c_proj.bias"))


def _load_gpt2_block_rest(block, h: str, take) -> None:
    """One block's feed-forward (Conv1D weights transposed) and its two LayerNorms."""
    ff = block.ff
    ff.layers[0].weight = assign(
        h + "mlp.c_fc.weight -> ff.layers.0.weight", ff.layers[0].weight, take(h + "mlp.c_fc.weight").T
    )
    ff.layers[0].bias = assign(h + "mlp.c_fc.bias -> ff.layers.0.bias", ff.layers[0].bias, take(h + "mlp.c_fc.bias"))
    ff.layers[2].weight = assign(
        h + "mlp.c_proj.weight -> ff.layers.2.weight", ff.layers[2].weight, take(h + "mlp.c_proj.weight").T
    )
    ff.layers[2].bias = assign(
        h + "mlp.c_proj.bias -> ff.layers.2.bias", ff.layers[2].bias, take(h + "mlp.c_proj.bias"))
    block.norm1.scale = assign(h + "ln_1.weight -> norm1.scale", block.norm1.scale, take(h + "ln_1.weight"))
    block.norm1.shift = assign(h + "ln_1.bias -> norm1.shift", block.norm1.shift, take(h + "ln_1.bias"))
    block.norm2.scale = assign(h + "ln_2.weight -> norm2.scale", block.norm2.scale, take(h + "ln_2.weight"))
    block.norm2.shift = assign(h + "ln_2.bias -> norm2.shift", block.norm2.shift, take(h + "ln_2.bias"))


def _book_attention(origin: str, keys: set[str], tensors: _Tensors, emb_dim: int, config: dict) -> dict:
    """The attention of the book's GPTModel a state dict holds, read from its tensors and checked against the config:
    ``{"n_heads": …}`` for multi-head attention, plus ``attention`` and ``num_kv_groups`` for grouped-query
    (``04_gqa``: W_key has ``num_kv_groups · head_dim`` rows; one K/V head is multi-query) or ``attention`` and
    ``latent_dim`` for latent attention (``05_mla``: W_DKV has ``latent_dim`` rows), and ``heads_assumed``.
    A config that contradicts the tensors is a CheckpointError in words."""
    heads_key = "n_heads" if "n_heads" in config else "n_head"
    n_heads = _head_count(origin, emb_dim, config, heads_key)
    found = {"n_heads": n_heads, "heads_assumed": not isinstance(config.get(heads_key), int)}
    if emb_dim % n_heads:
        raise CheckpointError(f"{origin}: width {emb_dim} is not divisible by {n_heads} heads.")
    head_dim = emb_dim // n_heads
    groups_key = next((key for key in ("n_kv_groups", "num_kv_groups") if config.get(key) is not None), None)
    configured_groups = config.get(groups_key) if groups_key else None
    att = "trf_blocks.0.att."
    if att + "W_DKV.weight" in keys:  # the book's 05_mla: keys and values up-projected from a latent
        latent_dim = tensors.peek(att + "W_DKV.weight").shape[0]  # W_DKV: (latent_dim, d)
        configured = config.get("latent_dim")
        if configured is not None and configured != latent_dim:
            raise CheckpointError(
                f"{origin}: the config says latent_dim {configured}, but W_DKV gives {latent_dim} values per token "
                "(its rows). The config does not belong to this file: fix or remove it.")
        if configured_groups is not None:
            raise CheckpointError(
                f"{origin}: the config names {groups_key} {configured_groups} (grouped-query attention), but the "
                "file is a latent attention model (its blocks have W_DKV, W_UK, W_UV). Fix or remove the config.")
        return {**found, "attention": LATENT, "latent_dim": latent_dim}
    key_weight = att + "W_key.weight"
    if key_weight not in keys:
        return found  # the loop that assigns the parameters names the missing key
    rows = tensors.peek(key_weight).shape[0]  # W_key: (K/V heads · head_dim, d)
    # 04_gqa's W_key is narrower than the width (G < H), or its out_proj has no bias (MultiHeadAttention's has one)
    if rows == emb_dim and configured_groups is None and att + "out_proj.bias" in keys:
        return found
    assumed = "; no config gives the head count, so heads are taken to be 64 wide" if found["heads_assumed"] else ""
    if rows % head_dim:
        fix = ("A grouped-query model's W_key has one head's width per K/V head: put a config beside the file naming "
               "n_heads (and n_kv_groups)." if found["heads_assumed"] else
               "The file's W_key does not fit its config's heads: the file is damaged, or the config is another "
               "model's.")
        raise CheckpointError(
            f"{origin}: W_key gives {rows} values per token, not a whole number of heads {head_dim} wide "
            f"({n_heads} heads over the width {emb_dim}{assumed}). {fix}")
    kv_heads = rows // head_dim
    if configured_groups is not None and configured_groups != kv_heads:
        raise CheckpointError(
            f"{origin}: the config says {groups_key} {configured_groups} K/V heads, but W_key gives {rows} values "
            f"per token: {kv_heads} K/V heads {head_dim} wide ({n_heads} heads over the width {emb_dim}). The config "
            "does not belong to this file: fix or remove it.")
    if kv_heads < 1 or n_heads % kv_heads:
        raise CheckpointError(
            f"{origin}: W_key gives {kv_heads} K/V heads, which does not divide the {n_heads} query heads"
            f"{assumed}: each K/V head is shared by the same number of query heads. "
            + ("Put a config beside the file naming n_heads and n_kv_groups." if found["heads_assumed"] else
               "The file's W_key does not fit its config's heads: the file is damaged, or the config is another "
               "model's."))
    if config.get("latent_dim") is not None:
        raise CheckpointError(
            f"{origin}: the config names latent_dim {config['latent_dim']} (latent attention), but the file is a "
            "grouped-query model (W_key and W_value, no W_DKV). Fix or remove the config.")
    return {**found, "attention": MULTI_QUERY if kv_heads == 1 else GROUPED_QUERY, "num_kv_groups": kv_heads}


def _window_schedule(model: GPTModel, config: dict) -> None:
    """The book's ``sliding_window_stride`` schedule (``gpt_with_kv_swa.py``): K > 0 is K window layers, then one
    full, repeated; 0 every layer full; negative, or no stride, every layer with the window."""
    stride = config.get("sliding_window_stride")
    for index, block in enumerate(model.trf_blocks):
        if stride is not None and (stride == 0 or (stride > 0 and index % (stride + 1) >= stride)):
            block.att.sliding_window_size = None
    model.sliding_windows = tuple(block.att.sliding_window_size for block in model.trf_blocks)


def _load_book(tensors: _Tensors, config: dict) -> GPTModel:
    """The book's own GPTModel ``state_dict`` (ch05 names) -> GPTModel; the causal-mask buffers are optional.
    A config's ``sliding_window_size`` builds its blocks with the book's sliding-window attention."""
    origin = tensors.origin
    keys = tensors.names()
    tok = tensors.take("tok_emb.weight")  # (vocab, d)
    if tok.dim() != 2 or "pos_emb.weight" not in keys:
        raise CheckpointError(f"{origin}: not the book's GPTModel (tok_emb.weight {tuple(tok.shape)}, pos_emb?).")
    _check_vocab(origin, tok.shape[0])
    emb_dim = _width(origin, "tok_emb.weight", tuple(tok.shape))
    found = _book_attention(origin, keys, tensors, emb_dim, config)
    heads_assumed = found.pop("heads_assumed")
    cfg = {
        "vocab_size": tok.shape[0],
        "context_length": config.get("context_length", config.get("n_positions")),
        "emb_dim": emb_dim,
        "n_layers": _layer_count(origin, keys, r"trf_blocks\.([0-9]+)\.",
                                 config.get("n_layers", config.get("n_layer"))),
        "drop_rate": 0.0,
        "qkv_bias": "trf_blocks.0.att.W_query.bias" in keys,
        "ln_eps": float(config.get("ln_eps", config.get("layer_norm_epsilon", 1e-5))),
        **found,  # n_heads, and a grouped-query or latent model's attention and its setting
    }
    pos = tensors.take("pos_emb.weight")  # (ctx, d)
    cfg["context_length"] = _context_length("pos_emb.weight", tuple(pos.shape), emb_dim, cfg["context_length"])
    window = config.get("sliding_window_size")
    if window is not None and "attention" in cfg:
        raise CheckpointError(
            f"{origin}: the config names a sliding window, but the file is a {cfg['attention']} attention model: "
            "attnviz runs the book's sliding window on multi-head attention only (ch04/06_swa). Remove "
            "sliding_window_size from the config.")
    if window is not None:
        cfg.update(attention=SLIDING_WINDOW, sliding_window_size=window)
    model = _meta_model(cfg)
    if window is not None:
        _window_schedule(model, config)
    model.tok_emb.weight = assign("tok_emb.weight", model.tok_emb.weight, tok)
    model.pos_emb.weight = assign("pos_emb.weight", model.pos_emb.weight, pos)
    del tok, pos
    for name, module in model.named_modules():
        for param_name, param in list(module.named_parameters(recurse=False)):
            full = f"{name}.{param_name}" if name else param_name
            if full not in ("tok_emb.weight", "pos_emb.weight"):
                setattr(module, param_name, assign(full, param, tensors.take(full)))
    unexpected = sorted(key for key in tensors.names() if not re.fullmatch(r"trf_blocks\.\d+\.att\.mask", key))
    if unexpected:
        raise CheckpointError(
            f"{origin}: unexpected key {unexpected[0]!r:.80} for the book's {cfg['n_layers']}-layer GPTModel.")
    return _finish(model, cfg, origin, heads_assumed=heads_assumed)
