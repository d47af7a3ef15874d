"""Loads a user's attention module from a file and builds it with arguments matched by name.

``load("path/to/file.py:ClassName")`` imports the file and returns the class; ``build(cls, d_in=...)``
fills the constructor's parameters under their usual spellings. Every failure is a one-line
``UserCodeError``. The registry (``register``/``listed``/``build_listed``) lists loaded modules for the app.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

from torch import nn


class UserCodeError(ValueError):
    """A user's module cannot be loaded or built; the message is one line."""


DEFAULTS = {"d_in": 64, "d_out": 64, "num_heads": 4, "context_length": 64, "dropout": 0.0}

SPELLINGS = {
    "d_in": ("d_in", "embed_dim", "n_embd", "d_model", "hidden_size", "dim", "emb_dim", "embedding_dim"),
    "d_out": ("d_out",),
    "num_heads": ("num_heads", "n_head", "n_heads", "nhead", "heads"),
    "context_length": ("context_length", "block_size", "max_seq_len", "n_positions", "max_len"),
    "dropout": ("dropout", "attn_pdrop", "p_drop", "dropout_p"),
    "qkv_bias": ("qkv_bias", "bias"),
}
CONFIG_NAMES = ("config", "cfg", "args")


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _split(spec: str) -> tuple[Path, str]:
    path, sep, name = str(spec).rpartition(":")
    if not sep or not path or not name:
        raise UserCodeError(f"expected path/to/file.py:ClassName, got {spec!r}")
    return Path(path), name.strip()


def load(spec: str) -> type[nn.Module]:
    """Import ``path/to/file.py`` and return its ``ClassName`` (an ``nn.Module`` subclass)."""
    path, name = _split(spec)
    if not path.is_file():
        raise UserCodeError(f"no such file: {path}")
    try:
        source = path.read_text(encoding="utf-8")
        compile(source, str(path), "exec")
    except SyntaxError as error:
        raise UserCodeError(f"syntax error in {path} line {error.lineno}: {error.msg}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserCodeError(f"cannot read {path}: {_one_line(error)}") from None
    module_name = f"attnviz_user_{abs(hash(str(path.resolve())))}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException as error:  # noqa: BLE001 - any failure of the user's file is one line
        sys.modules.pop(module_name, None)
        if isinstance(error, KeyboardInterrupt):
            raise
        raise UserCodeError(f"{path} raised on import: {_one_line(error)}") from None
    classes = sorted(n for n, v in vars(module).items()
                     if inspect.isclass(v) and getattr(v, "__module__", None) == module_name)
    cls = getattr(module, name, None)
    if cls is None:
        has = ", ".join(classes) if classes else "no classes"
        raise UserCodeError(f"{path} has no class {name} (it has: {has})")
    if not (inspect.isclass(cls) and issubclass(cls, nn.Module)):
        raise UserCodeError(f"{name} in {path} is not an nn.Module")
    return cls


def _values(given: dict) -> dict:
    values = dict(DEFAULTS)
    values.update({k: v for k, v in given.items() if v is not None})
    values.setdefault("qkv_bias", False)
    return values


def _lookup(name: str, values: dict):
    for canonical, names in SPELLINGS.items():
        if name in names and canonical in values:
            return True, values[canonical]
    if name == "batch_first":
        return True, True
    return False, None


def build(cls: type[nn.Module], **given) -> nn.Module:
    """Construct ``cls`` with its parameters filled by name from ``given`` and the defaults."""
    values = _values(given)
    name = getattr(cls, "__name__", str(cls))
    try:
        parameters = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        parameters = {}
    params = [p for n, p in parameters.items() if n != "self"
              and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    kwargs = {}
    if len([p for p in params if p.default is p.empty]) == 1 and params[0].name in CONFIG_NAMES:
        kwargs[params[0].name] = SimpleNamespace(
            n_embd=values["d_in"], n_head=values["num_heads"], block_size=values["context_length"],
            dropout=values["dropout"], bias=values["qkv_bias"], d_in=values["d_in"], d_out=values["d_out"],
            num_heads=values["num_heads"], context_length=values["context_length"], qkv_bias=values["qkv_bias"])
    else:
        for p in params:
            found, value = _lookup(p.name, values)
            if found and (p.name in given or p.default is p.empty or p.name not in ("bias",)):
                kwargs[p.name] = value
            elif p.default is p.empty:
                raise UserCodeError(f"{name} needs an argument {p.name!r} that attnviz cannot fill")
    try:
        module = cls(**kwargs)
    except BaseException as error:  # noqa: BLE001 - a constructor's failure is one line
        if isinstance(error, KeyboardInterrupt):
            raise
        raise UserCodeError(f"{name}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())}) raised: "
                            f"{_one_line(error)}") from None
    if not isinstance(module, nn.Module):
        raise UserCodeError(f"{name}(...) did not return an nn.Module")
    return module


_LOCK = threading.Lock()
_LISTED: dict[str, str] = {}


def register(spec: str) -> str:
    """Load ``spec`` now and list it under the label ``Your module: ClassName``; returns the label."""
    cls = load(spec)
    label = f"Your module: {cls.__name__}"
    with _LOCK:
        _LISTED[label] = spec
    return label


def listed() -> dict[str, str]:
    """The registered modules: label -> spec."""
    with _LOCK:
        return dict(_LISTED)


def build_listed(label: str, config) -> nn.Module:
    """Build the module registered under ``label`` with the config's widths, heads, context and dropout."""
    with _LOCK:
        spec = _LISTED.get(label)
    if spec is None:
        raise UserCodeError(f"no module is listed as {label!r}")
    return build(load(spec), d_in=config.d_in, d_out=config.d_out, num_heads=config.num_heads,
                 context_length=config.context_length, dropout=config.dropout,
                 qkv_bias=getattr(config, "qkv_bias", False))
