"""Loads a user's attention class from ``path/to/file.py:ClassName`` and builds it from attnviz's settings.

Constructor arguments are matched by name to the class's signature, in the spellings attention code uses
(``d_in``/``embed_dim``/``n_embd``/``d_model`` …, ``num_heads``/``n_head``/``nhead`` …, ``context_length``/
``block_size`` …), each only when it is given or the constructor requires it: an argument with a default keeps
the class's own (:func:`own_defaults`: ``LlamaGQA(num_heads=8)`` keeps its 8 heads), a required one gets attnviz's
(:data:`DEFAULTS`), and ``d_out`` follows a ``d_in`` given; a ``config``/``cfg`` parameter, alone or first (Hugging
Face's ``(config, layer_idx=None)``: :func:`config_parameter`), gets an object with
nanoGPT's names and every other spelling of a size (Hugging Face's ``hidden_size``, ``num_attention_heads`` …), read
as attributes or as a dict's keys (:class:`AttnvizConfig`: the book's ``cfg["emb_dim"]``) — unless the parameter has a
default (``cfg=None``) and no size nor override is given: then the class builds its own config, whole.
Today's variants' sizes — ``num_kv_groups`` (the NUMBER of K/V heads, as the book's GQA class and its model configs'
``n_kv_groups`` mean it; also ``num_key_value_heads``, ``n_kv_heads``, nanochat's ``n_kv_head``), ``latent_dim``
(``kv_lora_rank``) and ``sliding_window_size`` (``sliding_window``, ``window_size``) — go to a class that takes
them, or to its config object under all their spellings, when they are given, or to a class whose constructor
requires them (then a default from the sizes it is built with: half the heads' K/V groups,
the book's latent size, a window of 4).  A ``bias``/``qkv_bias`` argument keeps the constructor's own default
unless it is given (:data:`BIAS_DEFAULTS`).  ``overrides`` (the CLI's ``--set NAME=VALUE``) set any constructor
argument by its own name, or a single config object's attribute (:data:`CONFIG_FIELDS`, or a name its constructor
reads off it, :func:`config_reads`; another is refused, naming those it has); an attribute the constructor reads and
the object lacks says what gives it.  A required argument nobody can fill is named in the error.  Every failure is a
``UserCodeError`` with one line.

The app lists only modules named on its command line (``streamlit run app.py -- --module path.py:Class``,
repeatable) or in ``ATTNVIZ_MODULES`` (comma-separated): :func:`listed` maps a label ("Your module:
ClassName") to its spec, and a browser can only pick a label — never a path or a class name.  The app opens on the
first one the command line names (:func:`opening`).  Loading a file
runs its code: it is the user's own code, named on their own command line.

A listed module's constructor that raised or was stopped by the time limit (:func:`build_listed`) is remembered for
the server's life, per module and constructor arguments: a constructor that never returns costs one time limit, not
one per session and rerun.  :func:`failures` says which modules failed; :func:`try_again` forgets them, and a saved
change to the file (its modification time or size) makes it a new module, imported anew.
"""

from __future__ import annotations

import codecs
import importlib.machinery
import importlib.util
import inspect
import json
import os
import re
import sys
import threading
import types
from collections.abc import Mapping, Sequence
from pathlib import Path

from torch import nn

from attnviz import time_limit, user_imports
from attnviz.declarations import CONFIG_NAMES, NUMBER_OF, SETTING_OF, SPELLINGS, constructor_trees, is_size
from attnviz.script_args import flag_values

CLI_FLAG = "--module"
ENV = "ATTNVIZ_MODULES"

VARIANT_SETTINGS = ("num_kv_groups", "latent_dim", "sliding_window_size")  # filled when given or required
# filled when given or required too: a parameter with a default keeps it (LlamaGQA(num_heads=8) keeps its 8 heads
# without --num-heads); a required one gets attnviz's default (:data:`DEFAULTS`), and d_out follows a d_in given
OWN_DEFAULT_SETTINGS = ("d_in", "d_out", "num_heads", "context_length", "dropout")
DEFAULTS = {"d_in": 64, "d_out": 64, "num_heads": 4, "context_length": 64, "dropout": 0.0, "batch_first": True}
# qkv_bias is passed only when given (``--set bias=false``): a constructor's own default wins (nanoGPT's bias=True);
# one that requires it gets its spelling's home default: nanoGPT's and nn.Linear's bias=True, the book's qkv_bias=False
BIAS_DEFAULTS = {"bias": True, "qkv_bias": False}
# a single config object's attributes (nanoGPT's GPTConfig names, then the book's, then every other spelling of a size
# — Hugging Face's hidden_size, num_attention_heads, max_position_embeddings, attention_dropout … —, then Hugging
# Face's head_dim, the width over the heads where they divide it, then every spelling of a variant's size: nanochat's
# n_kv_head, Hugging Face's num_key_value_heads …, present only when that size is given) -> the setting each carries;
# an override of one (``--set n_embd=32``, ``--set n_kv_head=2``) sets every attribute of its setting, and d_out
# follows d_in unless given
CONFIG_FIELDS = {"n_embd": "d_in", "n_head": "num_heads", "block_size": "context_length", "dropout": "dropout",
                 "bias": "bias", "d_in": "d_in", "d_out": "d_out", "emb_dim": "d_in", "n_heads": "num_heads",
                 "context_length": "context_length", "drop_rate": "dropout", "qkv_bias": "qkv_bias",
                 "num_heads": "num_heads",
                 **{name: setting for setting in OWN_DEFAULT_SETTINGS for name in SPELLINGS[setting]},
                 "head_dim": "head_dim",
                 **{name: setting for setting in VARIANT_SETTINGS for name in SPELLINGS[setting]}}
# the CLI's flag for each variant's size: named when a config object's constructor reads one nobody gave
VARIANT_FLAGS = {"num_kv_groups": "--num-kv-groups N", "latent_dim": "--latent-dim N",
                 "sliding_window_size": "--window W"}


# after "no module 'x' is listed": how a module is listed, and what works from Python without listing it
NOT_LISTED = ("(only the command line lists modules: streamlit run app.py -- --module path/to/file.py:ClassName); "
              "from Python, build your module and trace it with attnviz.trace_module(module, x) (x: text or a "
              "(batch, n, d_in) tensor), or check it with attnviz.checks.check_module(module)")


class UserCodeError(ValueError):
    """The user's file or class cannot be loaded or built; the message is one line naming the cause."""


def load(spec: str) -> type[nn.Module]:
    """The class named by ``path/to/file.py:ClassName``.  The file's import runs as ``python file.py`` runs it: its own
    folder is first on the import path, so ``from helpers import …`` finds the ``helpers.py`` beside it
    (:func:`attnviz.user_imports.run_beside`)."""
    path_text, _, class_name = spec.rpartition(":")
    if not path_text and Path(spec).expanduser().is_file():
        path_text, class_name = spec, ""
    listing = not class_name and Path(path_text).expanduser().is_file()  # a file alone: named with its classes
    if not listing and (not path_text or not class_name or not class_name.isidentifier()):
        raise UserCodeError(f"{spec!r}: name a class as path/to/file.py:ClassName")
    path = Path(path_text).expanduser()
    if path.is_dir():
        raise UserCodeError(f"{path_text} is a folder: name the .py file that defines the class")
    if not path.is_file():
        raise UserCodeError(f"{path_text}: no such file{_module_name_hint(path_text)}")
    name = f"attnviz_user_{abs(hash(str(path.resolve())))}"
    try:
        kind = _not_python(path)
        if kind is None:
            source = path.read_text(encoding="utf-8")
            kind = _not_python(path, source)
        if kind is not None:
            raise UserCodeError(f"{path_text} is not a Python file ({kind}): name the .py file that defines the class, "
                                "as path/to/file.py:ClassName")
        compile(source, str(path), "exec")
    except SyntaxError as error:
        raise UserCodeError(f"{path_text}, line {error.lineno}: syntax error: {error.msg}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserCodeError(f"{path_text}: cannot be read: {time_limit.one_line(error)}") from None
    # Python's source loader whatever the file's suffix: a class copied from a tutorial into notes.txt loads too.
    # Given the absolute path, as the spec's origin is: the code's file is then the module's (the op path's lines).
    location = os.path.abspath(path)
    module_spec = importlib.util.spec_from_file_location(
        name, location, loader=importlib.machinery.SourceFileLoader(name, location))
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        user_imports.run_beside(module_spec, module, os.path.dirname(os.path.realpath(location)))
    except time_limit.TimeLimitError as out:
        sys.modules.pop(name, None)
        raise UserCodeError(f"{path_text} ran for {out.seconds:g} s on import without returning (an endless loop?): "
                            "put its script part under if __name__ == \"__main__\":") from None
    except AssertionError as error:
        sys.modules.pop(name, None)
        raise UserCodeError(f"{path_text} {time_limit.failed_assertion(error, ' on import')}") from None
    except Exception as error:  # the user's file: anything it raises is theirs, in one line
        sys.modules.pop(name, None)
        raise UserCodeError(f"{path_text} raised {time_limit.described(error, ' on import')}") from None
    except SystemExit as stop:  # a script's sys.exit() would end attnviz with the script's status
        sys.modules.pop(name, None)
        raise UserCodeError(f"{path_text} called {time_limit.exit_call(stop)} on import: put its script part under "
                            "if __name__ == \"__main__\":") from None
    cls = getattr(module, class_name, None) if class_name else None
    if cls is None:
        classes = [n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, nn.Module)
                   and v.__module__ == name]
        found = f"; it defines {', '.join(classes)}" if classes else "; it defines no nn.Module"
        if not class_name:
            raise UserCodeError(f"{path_text}: name a class as {path_text}:ClassName{found}")
        raise UserCodeError(f"{path_text} has no class {class_name}{found}")
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise UserCodeError(f"{class_name} in {path_text} is not a torch.nn.Module class")
    return cls


def _module_name_hint(path_text: str) -> str:
    """Words for a spec that names an importable module rather than a file (``transformers.models.llama.
    modeling_llama:LlamaAttention``): attnviz checks a file's class, and a transformers layer through a file of
    one's own that builds it and hands its forward what its model would; "" for anything else."""
    parts = path_text.split(".")
    if len(parts) < 2 or f".{parts[-1]}" in PYTHON_SUFFIXES or not all(part.isidentifier() for part in parts):
        return ""
    words = " — attnviz checks a class in a file, path/to/file.py:ClassName, not a module by its import name"
    if parts[0] == "transformers":
        words += f"; {TRANSFORMERS_LAYER}"
    return words


# how to check a layer attnviz cannot build or call itself (a transformers layer, a class that takes a config object
# and more): through a wrapper of one's own
THROUGH_A_WRAPPER = ("check it in a file of your own whose nn.Module builds the layer from a small config and whose "
                     "forward(x) builds those and calls it (docs/check-your-module.md, \"A transformers layer\")")
TRANSFORMERS_LAYER = ("a transformers layer needs what its model hands its forward (the attention mask, the rotary "
                      f"position_embeddings): {THROUGH_A_WRAPPER}")


PYTHON_SUFFIXES = (".py", ".pyw")  # a file named so is Python whatever it holds (a mistake in it is a syntax error)
SNIFFED_BYTES = 8192  # how much of a file named otherwise is read to tell a binary file (weights) from text


def _not_python(path: Path, source: str | None = None) -> str | None:
    """What a file holds instead of Python ("binary", "JSON", "a notebook"), from its first bytes, or, given
    ``source``, its text; None when it may be Python (then compiling it says the rest).  A file named ``.py`` is
    binary only when it holds a NUL byte, which no Python source holds (an image saved as ``image.py``); one that is
    text in another encoding than UTF-8 is left to reading it, which says which byte it cannot decode."""
    suffix = path.suffix.lower()
    if suffix == ".ipynb":
        return "a Jupyter notebook; export it with File > Save and Export Notebook As > Executable Script"
    if source is None:
        with open(path, "rb") as file:
            head = file.read(SNIFFED_BYTES)
        if b"\0" in head:
            return "binary"
        if suffix in PYTHON_SUFFIXES:
            return None
        try:
            codecs.getincrementaldecoder("utf-8")().decode(head, final=False)  # a character cut at the end is text
        except UnicodeDecodeError:
            return "binary"
        return None
    if "\0" in source:
        return "binary"
    if suffix in PYTHON_SUFFIXES:
        return None
    try:
        json.loads(source)  # a checkpoint's config.json: JSON's false, true and null are no Python names
    except ValueError:
        return None
    return "JSON"


def variant_default(setting: str, values: dict) -> int:
    """The value of a variant's size a constructor requires and nobody gave."""
    heads = values["num_heads"]
    if setting == "num_kv_groups":  # two query heads per K/V head where the heads allow it
        return heads // 2 if heads % 2 == 0 else 1
    if setting == "latent_dim":
        return max(16, values["d_out"] // 8)  # the book's MLA default
    return min(4, values["context_length"])


def constructor_arguments(cls: type[nn.Module], overrides: Mapping | None = None, *, to_kwargs: bool = True,
                          **settings) -> dict:
    """The keyword arguments for ``cls(...)`` from attnviz's settings (``d_in``, ``d_out``, ``num_heads``,
    ``context_length``, ``dropout``, ``qkv_bias``, and the variants' ``num_kv_groups``, ``latent_dim``,
    ``sliding_window_size``; None: not given, and then an argument with a default is left to it) and ``overrides``
    (argument name -> value); UserCodeError names a required argument nobody can fill, or an override the
    constructor does not take (for a single config object: one the object attnviz builds does not have,
    :data:`CONFIG_FIELDS`).

    A constructor with ``**kwargs`` also gets the settings given that none of its parameters names, by attnviz's
    own names (:func:`kwargs_settings`): ``Kw(**kwargs)`` with ``d_in=32, num_heads=2`` is called ``Kw(d_in=32,
    num_heads=2)``, and with none given ``Kw()``, its own defaults.  ``to_kwargs=False``: none of them (the app,
    whose sidebar gives every size, lets such a module decide its own)."""
    given = {k: v for k, v in settings.items() if v is not None}
    parameters = _parameters(cls)
    if parameters is None:
        return {}
    own = {setting: parameter.default for setting, parameter in own_defaults(cls).items()}  # kept unless given
    if "d_in" in given:
        own.pop("d_out", None)  # d_out follows the d_in given
    # the sizes the class is built with (a required variant's default is reckoned from them); qkv_bias only when given
    values = {**DEFAULTS, **{setting: value for setting, value in own.items() if _is_number(value)}, **given}
    if "d_out" not in given and not _is_number(own.get("d_out")):
        values["d_out"] = values["d_in"]
    overrides = dict(overrides or {})
    by_kwargs = kwargs_settings(cls, given, overrides) if to_kwargs else []
    names = [p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    unknown = [name for name in overrides if name not in names]
    config_name = config_parameter(cls)
    config_object = config_name is not None
    strange = [name for name in overrides if name not in CONFIG_FIELDS and name not in names]
    if config_object and strange:
        strange = [name for name in strange if name not in config_reads(cls)]  # rope_theta, read off the object
    if config_object and strange:
        _refuse_config_names(cls, config_name, strange)
    if unknown and not any(p.kind == p.VAR_KEYWORD for p in parameters) and not config_object:
        raise UserCodeError(f"{cls.__name__}() takes no argument {', '.join(unknown)} (it takes {', '.join(names)})")
    # on a config object's class, an override naming a constructor argument goes to it (--set layer_idx=0), the rest
    # to the object
    on_config = {name: overrides.pop(name) for name in list(overrides) if name not in names} if config_object else {}
    arguments, missing = {}, []
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        setting = SETTING_OF.get(parameter.name)
        if parameter.name in overrides:
            arguments[parameter.name] = overrides.pop(parameter.name)
        elif setting in VARIANT_SETTINGS:
            if setting in given:
                arguments[parameter.name] = given[setting]
            elif parameter.default is parameter.empty:
                arguments[parameter.name] = variant_default(setting, values)
        elif setting == "qkv_bias":
            if setting in given:
                arguments[parameter.name] = given[setting]
            elif parameter.default is parameter.empty:
                arguments[parameter.name] = BIAS_DEFAULTS.get(parameter.name, False)
        elif setting in own and setting not in given:
            continue  # the class's own default
        elif setting is not None:
            arguments[parameter.name] = values[setting]
        elif parameter.name == config_name and parameter.default is not parameter.empty and not given \
                and not on_config:
            continue  # cfg=None: the class's own config, whole (the book's notebooks' dicts), unless a size is given
        elif parameter.name == config_name:
            arguments[parameter.name] = _config_object(values, on_config, d_out_given="d_out" in given)
        elif parameter.default is parameter.empty:
            missing.append(parameter.name)
    if missing:
        words = f"{cls.__name__}() needs {', '.join(missing)}, which attnviz cannot fill"
        if _from_transformers(cls):
            raise UserCodeError(f"{words}: it is transformers' {cls.__name__}, and {TRANSFORMERS_LAYER}")
        raise UserCodeError(f"{words} (it fills d_in/embed_dim/n_embd, d_out, num_heads/n_head, "
                            "context_length/block_size, dropout, bias, num_kv_groups, latent_dim, "
                            "sliding_window_size): give them defaults, or set them with --set NAME=VALUE")
    arguments.update({setting: given[setting] for setting in by_kwargs})
    arguments.update(overrides)  # a **kwargs constructor takes the rest by name
    return arguments


def config_parameter(cls: type[nn.Module]) -> str | None:
    """The constructor parameter of ``cls`` that attnviz gives a config object (:func:`_config_object`): the first
    parameter named ``config``, ``cfg``, ``args`` or ``conf`` (:data:`CONFIG_NAMES`) when it is the constructor's first
    parameter or has no default — nanoGPT's ``CausalSelfAttention(config)``, Hugging Face's ``(config,
    layer_idx=None)``, GPT-2's ``(config, is_cross_attention=False, layer_idx=None)``; the other parameters are filled
    as any class's are.  None for a class that takes none so, and for a transformers class that takes more than its
    config: its layer needs its own config class and what its model hands its forward (:data:`TRANSFORMERS_LAYER`)."""
    parameters = _parameters(cls)
    if not parameters or (len(parameters) > 1 and _from_transformers(cls)):
        return None
    named = [p for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    config = next((p for p in named if p.name in CONFIG_NAMES), None)
    if config is None or (config is not named[0] and config.default is not config.empty):
        return None
    return config.name


def _from_transformers(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "transformers"


def _parameters(cls: type[nn.Module]) -> list[inspect.Parameter] | None:
    """``cls``'s constructor parameters without ``self``; None when Python cannot read its signature.  A class that
    keeps ``nn.Module``'s own ``__init__(self, *args, **kwargs)`` takes none (:func:`takes_no_arguments`): nn.Module
    refuses every keyword argument it is given."""
    if takes_no_arguments(cls):
        return []
    try:
        return list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        return None


def takes_no_arguments(cls: type[nn.Module]) -> bool:
    """Whether ``cls`` is built with no arguments: it defines no constructor, nor does any class between it and
    ``nn.Module`` (a weightless attention with a forward alone), or its constructor takes only ``self``."""
    if cls.__init__ is nn.Module.__init__:
        return True
    try:
        return len(inspect.signature(cls.__init__).parameters) == 1
    except (TypeError, ValueError):
        return False


def own_defaults(cls: type[nn.Module]) -> dict[str, inspect.Parameter]:
    """``cls``'s own size parameters that have a default (:data:`OWN_DEFAULT_SETTINGS`, under any of their
    spellings), by attnviz setting: ``LlamaGQA(d_in=64, num_heads=8)`` -> ``d_in`` and ``num_heads``, each with its
    ``name`` and ``default``.  A setting not given keeps its default (:func:`constructor_arguments` passes nothing for
    it)."""
    parameters = _parameters(cls)
    if parameters is None:
        return {}
    own = {}
    for setting in OWN_DEFAULT_SETTINGS:
        parameter = next((p for p in parameters if p.name in SPELLINGS[setting]
                          and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)), None)
        if parameter is not None and parameter.default is not parameter.empty:
            own[setting] = parameter
    return own


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def kwargs_settings(cls: type[nn.Module], settings, overrides: Mapping | None = None) -> list[str]:
    """Which of ``settings`` (attnviz's names, given) a constructor with ``**kwargs`` gets by attnviz's own name:
    those that none of its named parameters takes under any spelling and no override sets under any spelling (an
    override of ``n_embd`` is the user's name for ``d_in``).  None for a constructor without ``**kwargs``: attnviz
    cannot tell which names it forwards, so it passes only what the user gave, in the names the user gave it."""
    parameters = _parameters(cls)
    if parameters is None:
        return []
    if not any(p.kind == p.VAR_KEYWORD for p in parameters):
        return []
    names = {p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)} | set(overrides or {})
    return [setting for setting in settings if not any(name in names for name in SPELLINGS.get(setting, (setting,)))]


def settings_not_taken(cls: type[nn.Module], settings, overrides: Mapping | None = None) -> dict[str, str | None]:
    """Which of ``settings`` (attnviz's names: ``d_out``, ``num_kv_groups`` …) :func:`constructor_arguments` gives
    ``cls`` no argument for: setting -> None when the constructor takes it under none of its spellings (nor in a
    single config object, nor by attnviz's name in ``**kwargs``: :func:`kwargs_settings`), or -> the argument an
    override sets instead of it."""
    parameters = _parameters(cls) or []
    names = [p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    overrides = dict(overrides or {})
    config_object = config_parameter(cls) is not None
    by_kwargs = kwargs_settings(cls, settings, overrides)
    not_taken = {}
    for setting in settings:
        taken = [name for name in SPELLINGS[setting] if name in names]
        if config_object:  # the config object carries it (a variant's under all its spellings), unless --set does
            overridden = next((name for name in overrides if CONFIG_FIELDS.get(name) == setting), None)
            if overridden is not None:
                not_taken[setting] = overridden
            continue
        if not taken:
            overridden = next((name for name in SPELLINGS[setting] if name in overrides), None)  # **kwargs' names
            if overridden is not None:
                not_taken[setting] = overridden
            elif setting not in by_kwargs:
                not_taken[setting] = None
        elif taken[0] in overrides:
            not_taken[setting] = taken[0]
    return not_taken


def sizes_taken(arguments: Mapping, cls: type[nn.Module] | None = None) -> dict[str, float]:
    """The sizes among constructor ``arguments`` (:func:`constructor_arguments`' result), by attnviz setting: an
    argument spelled as one of a setting's names (``n_head`` → ``num_heads``) whose value is a positive whole number,
    or a single config object's attribute (:data:`CONFIG_FIELDS`: ``n_embd`` → ``d_in``, ``block_size`` →
    ``context_length``); given ``cls``, also the defaults of its size parameters that ``arguments`` leave to it
    (``LlamaGQA(d_in=64, num_heads=8, num_kv_groups=2)`` called with none).  What the module was built with,
    whatever names it keeps them under afterwards — and so are the positive numbers named as a rotary base or a
    soft-cap (``rope_theta=500000`` → ``rope_base``, ``attn_logit_softcapping=50`` → ``softcap``:
    :data:`attnviz.declarations.NUMBER_SETTINGS`), which a module may use and keep nowhere."""
    sizes = {}
    if cls is not None:
        arguments = {**_parameter_defaults(cls), **arguments}
    for name, value in arguments.items():
        if isinstance(value, types.SimpleNamespace):  # a config object: the first of its names for each setting
            for field, setting in CONFIG_FIELDS.items():
                if setting in SPELLINGS and is_size(getattr(value, field, None)):
                    sizes.setdefault(setting, getattr(value, field))
            for field, setting in NUMBER_OF.items():
                if _is_number(number := getattr(value, field, None)) and number > 0:
                    sizes.setdefault(setting, number)
        elif name in SETTING_OF and is_size(value):
            sizes[SETTING_OF[name]] = value
        elif name in NUMBER_OF and _is_number(value) and value > 0:
            sizes.setdefault(NUMBER_OF[name], value)
    return sizes


def _parameter_defaults(cls: type[nn.Module]) -> dict:
    """``cls``'s constructor parameters that have a default -> that default."""
    parameters = _parameters(cls)
    if parameters is None:
        return {}
    return {p.name: p.default for p in parameters if p.default is not p.empty}


class AttnvizConfig(types.SimpleNamespace):
    """The config object attnviz builds for a class that takes one: its fields read as attributes (``cfg.emb_dim``,
    nanoGPT's and Hugging Face's style) and as a dict's keys (``cfg["emb_dim"]``, ``cfg.get("n_kv_groups", 1)``,
    ``"qk_norm" in cfg``, ``**cfg``: the book's style); a key it lacks raises KeyError, an attribute AttributeError."""

    def __getitem__(self, name):
        try:
            return vars(self)[name]
        except KeyError:
            raise KeyError(name) from None

    def get(self, name, default=None):
        return vars(self).get(name, default)

    def __contains__(self, name) -> bool:
        return name in vars(self)

    def __iter__(self):
        return iter(vars(self))

    def keys(self):
        return vars(self).keys()

    def values(self):
        return vars(self).values()

    def items(self):
        return vars(self).items()


def _config_object(values: dict, overrides: Mapping, d_out_given: bool = True) -> AttnvizConfig:
    """nanoGPT's GPTConfig names (and the book's, every other spelling of a size — Hugging Face's ``hidden_size``,
    ``num_attention_heads``, ``max_position_embeddings`` … —, ``head_dim`` where the heads divide d_out, and a variant's
    size given under all its spellings) for a class that takes one config object (:data:`CONFIG_FIELDS`); ``bias``
    and ``qkv_bias`` at their own projects' defaults (nanoGPT's True, the book's False) unless qkv_bias is given.
    ``overrides`` (``--set n_embd=32``, ``--set bias=false``, ``--set n_kv_head=2``, ``--set rope_theta=500000``) set
    its attributes by name, and a size's other names with it (``n_embd`` sets ``d_in``, ``emb_dim``, ``hidden_size`` …;
    ``d_out`` too unless ``d_out_given`` or overridden; ``n_kv_head`` sets ``n_kv_heads`` …), so the object says one
    size whichever name the class reads."""
    values = dict(values)
    overridden = {CONFIG_FIELDS[name]: value for name, value in overrides.items()
                  if CONFIG_FIELDS.get(name) in ("d_in", "d_out", "num_heads", "context_length", "dropout",
                                                 *VARIANT_SETTINGS)}
    values.update(overridden)
    if "d_in" in overridden and "d_out" not in overridden and not d_out_given:
        values["d_out"] = values["d_in"]  # nanoGPT's output is n_embd wide
    if is_size(values["d_out"]) and is_size(values["num_heads"]) and values["d_out"] % values["num_heads"] == 0:
        values["head_dim"] = values["d_out"] // values["num_heads"]  # Hugging Face's default: the width over the heads
    fields = {name: values[setting] for name, setting in CONFIG_FIELDS.items() if setting in values}
    fields["bias"] = values.get("qkv_bias", BIAS_DEFAULTS["bias"])
    fields["qkv_bias"] = values.get("qkv_bias", BIAS_DEFAULTS["qkv_bias"])
    return AttnvizConfig(**{**fields, **overrides})


def _refuse_config_names(cls: type[nn.Module], parameter: str, unknown: Sequence[str]) -> None:
    """UserCodeError for overrides naming no attribute of the config object attnviz builds and none its constructor
    reads (a typo such as ``n_embed``): the names it has, and the nearest one."""
    import difflib

    known = [*CONFIG_FIELDS, *sorted(config_reads(cls) - set(CONFIG_FIELDS))]
    near = [match for name in unknown for match in difflib.get_close_matches(name, known, n=1)]
    hint = f"; did you mean {' or '.join(dict.fromkeys(near))}?" if near else ""
    raise UserCodeError(f"{cls.__name__}({parameter}) takes one config object, and attnviz's has no "
                        f"{', '.join(unknown)}: --set sets one of {', '.join(CONFIG_FIELDS)}, or another name the "
                        f"constructor reads off its {parameter}{hint}")


def config_reads(cls: type[nn.Module]) -> set[str]:
    """The attributes the constructors of ``cls`` and its bases (not torch's) read off their config parameter, as
    their source says: ``config.rope_theta``, ``self.config.rope_theta``, ``getattr(config, "head_dim", …)``,
    ``cfg["rope_base"]`` —
    names ``--set`` gives a config object besides :data:`CONFIG_FIELDS`.  Empty where the source cannot be read."""
    import ast

    reads = set()
    for init, tree in constructor_trees(cls):
        try:
            parameters = list(inspect.signature(init).parameters)[1:]
        except (TypeError, ValueError):
            continue
        if tree is None:
            continue
        names = [name for name in parameters if name in CONFIG_NAMES][:1]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _names_config(node.value, names):
                reads.add(node.attr)
            elif (isinstance(node, ast.Subscript) and _names_config(node.value, names)
                  and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
                reads.add(node.slice.value)  # the book's cfg["rope_base"]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                  and len(node.args) >= 2 and _names_config(node.args[0], names)
                  and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
                reads.add(node.args[1].value)
    return reads


def _names_config(node, names: list[str]) -> bool:
    """Whether the expression ``node`` is the config parameter (``config``) or the module's copy (``self.config``)."""
    import ast

    return (isinstance(node, ast.Name) and node.id in names) or (
        isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
        and node.attr in names)


def build(cls: type[nn.Module], overrides: Mapping | None = None, **settings) -> nn.Module:
    """``cls`` built from attnviz's settings and ``overrides`` (see :func:`constructor_arguments`), under the time
    limit of a user's call (:mod:`attnviz.time_limit`): whatever goes wrong is a one-line :class:`UserCodeError`;
    an attribute of a config object that the constructor reads and the object lacks says what gives it
    (:func:`_config_lacks`)."""
    arguments = constructor_arguments(cls, overrides, **settings)
    try:
        return _construct(cls, arguments)
    except UserCodeError as error:
        if not any(isinstance(v, types.SimpleNamespace) for v in arguments.values()):
            raise
        lacked = (re.search(r"AttnvizConfig' object has no attribute '(\w+)'", str(error))
                  or re.search(r"raised KeyError: '(\w+)'", str(error)))  # cfg.rope_theta, cfg["rope_base"]
        config = next(v for v in arguments.values() if isinstance(v, types.SimpleNamespace))
        remedy = _config_lacks(lacked.group(1)) if lacked and lacked.group(1) not in vars(config) else None
        if remedy is None:
            raise
        raise UserCodeError(f"{error} — {remedy}") from None


def _config_lacks(name: str) -> str | None:
    """What gives attnviz's config object the attribute ``name`` it lacks: a variant's size's flag (nanochat's
    ``config.n_kv_head``: :data:`VARIANT_FLAGS`), ``--set head_dim=N`` where the heads do not divide the width, or
    ``--set`` for a name attnviz does not know (``config.rope_theta``); None for a name it always has."""
    setting = CONFIG_FIELDS.get(name)
    if setting in VARIANT_FLAGS:
        return f"attnviz's config object has it when you give it: {VARIANT_FLAGS[setting]}"
    if setting == "head_dim":
        return ("attnviz's config object has it when the heads divide the width (--num-heads, --d-out): give "
                "sizes that divide, or --set head_dim=N")
    if setting is None:
        return f"attnviz's config object has no {name}: give it with --set {name}=VALUE"
    return None


def _construct(cls: type[nn.Module], arguments: dict) -> nn.Module:
    try:
        return time_limit.call_in_words(f"{cls.__name__}({_call_text(arguments)})", cls, **arguments)
    except time_limit.UserCallError as error:  # the user's constructor
        raise UserCodeError(str(error)) from None


def _call_text(arguments: dict) -> str:
    return ", ".join(f"{k}={v!r}" if not isinstance(v, types.SimpleNamespace) else f"{k}=<config>"
                     for k, v in arguments.items())


# -------------------------------------------------------------------- the modules listed on the command line

_lock = threading.Lock()
_registered: dict[str, str] = {}  # label -> spec
_classes: dict[str, type[nn.Module]] = {}  # label -> class
_errors: dict[str, str] = {}  # spec -> why it could not be listed
_read: tuple | None = None  # the specs requested when the list was last read whole
_reading = threading.RLock()  # one reading of the list at a time (:func:`listed`)
_stamps: dict[str, tuple | None] = {}  # spec -> its file's (mtime, size) when its class was loaded
_failed: dict[str, dict[tuple, str]] = {}  # label -> constructor arguments' key -> why its constructor failed
_reload_lock = threading.Lock()  # one import anew of a changed file at a time (the user's code, time-limited)
IMPORT = ("import",)  # the key of a failed import anew in _failed (a constructor's key holds its arguments)
REMEMBERED = ("attnviz does not run it again{what}, in any session, until the file is saved again or you press "
              "Try again")


def module_args(argv: Sequence[str] | None = None) -> list[str]:
    """``--module SPEC`` / ``--module=SPEC`` values (repeatable) after ``--`` in ``argv`` (default sys.argv)."""
    return flag_values(CLI_FLAG, argv)


def requested(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """Every spec named on the command line, then in ATTNVIZ_MODULES (comma-separated: a spec has a colon)."""
    env = os.environ if environ is None else environ
    from_env = [spec.strip() for spec in env.get(ENV, "").split(",") if spec.strip()]
    return [*module_args(argv), *from_env]


LABEL_PREFIX = "Your module: "  # how a listed module's label starts (the sidebar's option, a link's variant=)
# how a server comes to offer a module, for a page's notice: whoever starts it names the file and class
HOW_LISTED = ("whoever runs this server lists modules when starting it: streamlit run app.py -- --module "
              "path/to/file.py:ClassName, or ATTNVIZ_MODULES")


def label_of(cls: type[nn.Module]) -> str:
    return f"{LABEL_PREFIX}{cls.__name__}"


def register(spec: str) -> str:
    """Load ``spec`` and list it; returns its label (UserCodeError when it cannot be loaded)."""
    stamp = _stamp(spec)  # before the import: a save during it is a change the next build imports
    cls = load(spec)
    label = label_of(cls)
    with _lock:
        if label in _registered and _registered[label] != spec:
            label = f"{label} ({Path(spec.rpartition(':')[0]).name})"
        _registered[label] = spec
        _classes[label] = cls
        _stamps[spec] = stamp
    return label


def _stamp(spec: str) -> tuple | None:
    """The (modification time, size) of the file ``spec`` names; None when it cannot be read."""
    try:
        stat = os.stat(Path(spec.rpartition(":")[0]).expanduser())
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size)


def listed() -> dict[str, str]:
    """label -> spec of every module listed on the command line or in ATTNVIZ_MODULES (read once per change).

    Reading the list imports each file, which runs its code (up to the time limit each): one reading at a time, and
    the list is read only once every file was tried — a session that asks meanwhile waits for the whole list (a link
    naming a module that is still being imported keeps it), and one whose reading stops half way (the script's thread
    stopped) leaves the files not yet tried for the next reading."""
    global _read
    key = tuple(requested())
    if key != _read:
        with _reading:
            if key != _read:  # another session's reading may have read it meanwhile
                for spec in key:
                    if spec in _registered.values() or spec in _errors:
                        continue
                    try:
                        register(spec)
                    except UserCodeError as error:
                        _errors[spec] = str(error)
                _read = key
    return dict(_registered)


def forget_listed() -> None:
    """Forget the list of modules and all attnviz remembers of them (their classes, why one could not be listed or
    built, their files' state), and any reading under way, as a new server process starts: the next :func:`listed`
    reads the list anew.  The app never calls it; tests start from it."""
    global _read, _reading
    with _lock:
        for remembered in (_registered, _classes, _errors, _stamps, _failed):
            remembered.clear()
        _read = None
        _reading = threading.RLock()  # a reading under way (its thread stopped or stuck) holds the old one


def listed_already() -> bool:
    """Whether the modules named now are listed already; if not, :func:`listed` imports them first (which may take
    up to the time limit of a call of the user's code per file).  True when none are named: there is nothing to
    import."""
    named = tuple(requested())
    return not named or named == _read


def opening(argv: Sequence[str] | None = None) -> str | None:
    """The label of the first module named on the command line that is listed: the variant the app opens on (one
    listed in ATTNVIZ_MODULES only is offered, not opened on).  None when the command line lists none."""
    labels = {spec: label for label, spec in listed().items()}
    return next((labels[spec] for spec in module_args(argv) if spec in labels), None)


def errors() -> dict[str, str]:
    """spec -> the one-line reason a requested module is not listed."""
    listed()
    return {spec: reason for spec, reason in _errors.items() if spec in requested()}


def build_listed(label: str, config) -> nn.Module:
    """The listed module ``label`` built from ``config``'s sizes (call inside ``seeded`` for fixed weights): those
    its constructor names — a ``**kwargs`` constructor gets none by attnviz's names (the sidebar gives every size,
    not the ones a user chose: the module decides the rest itself).

    A constructor that raised or was stopped by the time limit is not run again with the same arguments: the next
    call raises its :class:`UserCodeError` at once, saying so (:data:`REMEMBERED`) — until the file changes on disk
    (then its class is imported anew and built) or :func:`try_again`."""
    if label not in listed():
        raise UserCodeError(f"no module {label!r} is listed {NOT_LISTED}")
    if _failed.get(label) and _stamp(_registered[label]) != _stamps.get(_registered[label]):
        _import_anew(label)  # saved since it failed: a new module
    with _lock:
        failed_import = _failed.get(label, {}).get(IMPORT)
    if failed_import is not None:
        raise UserCodeError(failed_import)
    cls = _classes[label]
    arguments = _listed_arguments(cls, config)
    key = _arguments_key(arguments)
    with _lock:
        reason = _failed.get(label, {}).get(key)
    if reason is not None:
        raise UserCodeError(reason)
    try:
        return _construct(cls, arguments)
    except UserCodeError as error:
        reason = _remembered(error, " with these sizes")
        with _lock:
            _failed.setdefault(label, {})[key] = reason
        raise UserCodeError(reason) from None


def _listed_arguments(cls: type[nn.Module], config) -> dict:
    """The constructor arguments :func:`build_listed` gives ``cls`` from ``config``'s sizes."""
    return constructor_arguments(
        cls, to_kwargs=False, d_in=config.d_in, d_out=config.d_out, num_heads=config.num_heads,
        context_length=config.context_length, dropout=config.dropout,
        **{name: getattr(config, name, None) for name in VARIANT_SETTINGS})


def listed_sizes(label: str, config) -> dict[str, int]:
    """The sizes the listed module ``label`` is built with from ``config`` (:func:`sizes_taken` of what
    :func:`build_listed` passes): ``check_module``'s ``sizes``, as ``attnviz check`` gives it for the same module."""
    if label not in listed():
        raise UserCodeError(f"no module {label!r} is listed {NOT_LISTED}")
    return sizes_taken(_listed_arguments(_classes[label], config), _classes[label])


def _remembered(error: UserCodeError, what: str) -> str:
    """``error``'s line, and that attnviz remembers it (:data:`REMEMBERED`)."""
    return f"{str(error).rstrip('.')}. {REMEMBERED.format(what=what)}."


def _arguments_key(arguments: dict) -> tuple:
    """What a constructor is called with, hashable (a config object by its names and values)."""
    return tuple(sorted((name, tuple(sorted(vars(value).items())) if isinstance(value, types.SimpleNamespace)
                         else repr(value)) for name, value in arguments.items()))


def failures() -> dict[str, str]:
    """label -> why it cannot be built (its last remembered failure), for every listed module that has one — but a
    module whose file was saved since: the next build tries it anew."""
    with _lock:
        failed = {label: list(reasons.values())[-1] for label, reasons in _failed.items() if reasons}
    return {label: reason for label, reason in failed.items()
            if _stamp(_registered[label]) == _stamps.get(_registered[label])}


def try_again(label: str) -> None:
    """Forget what failed for ``label``: the next build runs its constructor again — after importing its file anew
    when the file changed since it was imported, or when that import failed."""
    with _lock:
        reasons = _failed.pop(label, {})
    spec = _registered.get(label)
    if spec is not None and (IMPORT in reasons or _stamp(spec) != _stamps.get(spec)):
        _import_anew(label, again=True)


def _import_anew(label: str, again: bool = False) -> None:
    """Import the class of ``label`` from its file as it is now and forget what failed before; an import that fails
    is remembered as the module's failure (with the file's state, so that the file's next save is tried).
    ``again``: also when the file is as it was (Try again after a failed import)."""
    spec = _registered[label]
    with _reload_lock:  # one import at a time: another session's may have done it meanwhile
        stamp = _stamp(spec)
        with _lock:
            if not again and stamp == _stamps.get(spec):  # the file as it is now was imported (or tried) meanwhile
                return
        try:
            cls = load(spec)
        except UserCodeError as error:
            with _lock:
                _stamps[spec] = stamp
                _failed[label] = {IMPORT: _remembered(error, "")}
            return
        with _lock:
            _classes[label] = cls
            _stamps[spec] = stamp
            _failed.pop(label, None)
