"""Reads what a user's module and its config declare, under the names attention code gives them.

A module says what it is built as in its constructor's arguments, its own attributes and its config object (an
object or a dict). This module reads:

* its sizes under the spellings attention code uses (:data:`SPELLINGS`, the map from a spelling to attnviz's
  setting, :data:`HEAD_DIM_NAMES`);
* the scales it declares other than 1/√head_dim (:func:`declared_scales`: a config's design, an attribute of its
  own);
* what it holds (:func:`held_objects`: its submodules, the KV cache objects and the tensors it keeps — the one walk
  the window's holders, :func:`window_holders`, and the kv-cache rule's cache are read from);
* its sliding window (:func:`declared_window`, kept by the module, a submodule or a KV cache object it holds:
  :func:`window_holders`; whether a ``window_size`` is its KV cache's length rather than an attention window is
  :mod:`attnviz.window_reading`'s reading of its code);
* the soft-cap of its scores (:func:`declared_softcap`);
* its attention sinks' logits (:func:`declared_sinks`);
* the numbers other than sizes a constructor may be built with (:data:`NUMBER_SETTINGS`: a rotary base, a soft-cap);
* a setting of its config (:func:`config_setting`);
* the code of its methods, each parsed once (:func:`function_tree`, :func:`constructor_trees`), which these readings
  and :mod:`attnviz.window_reading`'s read.

:mod:`attnviz.user_code` (building a module), :mod:`attnviz.tracing` and the rules of :mod:`attnviz.checks` read
those declarations here.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import math
import re
import textwrap
import tokenize
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from attnviz.words import name_words

# attnviz's setting -> the names a constructor may call it
SPELLINGS = {
    "d_in": ("d_in", "embed_dim", "n_embd", "d_model", "hidden_size", "dim", "emb_dim", "in_features", "input_dim"),
    "d_out": ("d_out", "out_dim", "output_dim", "out_features"),
    "num_heads": ("num_heads", "n_head", "n_heads", "nhead", "heads", "num_attention_heads"),
    "context_length": ("context_length", "block_size", "max_seq_len", "n_positions", "max_len", "seq_len",
                       "max_position_embeddings"),
    "dropout": ("dropout", "attn_pdrop", "p_drop", "dropout_p", "attn_dropout", "attention_dropout", "drop"),
    "qkv_bias": ("qkv_bias", "bias"),
    "batch_first": ("batch_first",),
    "num_kv_groups": ("num_kv_groups", "n_kv_groups", "num_key_value_heads", "n_kv_heads", "num_kv_heads",
                      "n_kv_head"),
    "latent_dim": ("latent_dim", "kv_lora_rank", "kv_latent_dim"),
    "sliding_window_size": ("sliding_window_size", "sliding_window", "window_size", "attention_window"),
}
# attnviz's name for a number a module is built with that is not a size -> the names a constructor or a module gives it
# (a rotary base: Llama's rope_theta, the book's rope_base, Meta's theta; a soft-cap: Gemma 2's attn_logit_softcapping)
NUMBER_SETTINGS = {
    "rope_base": ("rope_theta", "rope_base", "theta_base", "rotary_base", "base", "theta"),
    "softcap": ("attn_logit_softcapping", "attn_logit_softcap", "logit_softcapping", "softcapping", "softcap",
                "soft_cap", "attn_softcap", "logit_softcap"),
}
NUMBER_OF = {name: setting for setting, names in NUMBER_SETTINGS.items() for name in names}  # a name -> its setting
# the names a module or a constructor keeps its config object under (``self.config``, a ``cfg`` parameter …)
CONFIG_NAMES = ("config", "cfg", "args", "conf")
SETTING_OF = {spelling: setting for setting, spellings in SPELLINGS.items() for spelling in spellings}  # -> setting
# the names a module keeps its per-head width of Q·Kᵀ under (DeepSeek-V3: qk_head_dim, lucidrains: dim_head)
HEAD_DIM_NAMES = ("head_dim", "qk_head_dim", "d_head", "dim_head", "head_size", "d_k")


def is_size(value) -> bool:
    """Whether ``value`` is a size: a positive whole number (an int, not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def config_setting(module: nn.Module, name: str):
    """The value of ``name`` in the module's own config: the first of the configs it keeps (:data:`CONFIG_NAMES`:
    ``self.config``, ``self.cfg`` …) that holds one other than None, as an object's attribute or a dict's key (the
    book's notebooks keep ``self.cfg = {...}``); None when none does.  The one reading of a config's setting, with
    :func:`config_settings`: the scales it declares, its sliding window (:func:`_config_window`, and
    :func:`attnviz.window_reading.window_said`), rotary's base and rotated width."""
    return next((value for _, value in config_settings(module, name)), None)


def config_settings(module: nn.Module, name: str) -> Iterator[tuple[object, object]]:
    """Each config the module keeps (:data:`CONFIG_NAMES`, in that order) that holds ``name`` other than None, with
    that value (:func:`_setting`): :func:`config_setting`'s reading, for a caller that reads more of the config that
    holds it (:func:`_config_window`: the switches of the config that declares the window)."""
    for config in (getattr(module, config_name, None) for config_name in CONFIG_NAMES):
        if config is not None and (value := _setting(config, name)) is not None:
            yield config, value


def _setting(config, name: str):
    """The value of ``name`` in one config, an object's attribute or a dict's key; None: it holds none (read by
    :func:`config_settings`, and by :func:`_config_window` for the config that declares the window)."""
    return config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)


def declared(module: nn.Module, setting: str) -> tuple[str, int] | None:
    """(the name, the size) a module keeps for attnviz's ``setting`` (``d_in``, ``num_heads``, ``context_length``,
    ``num_kv_groups`` …): the first of the names its constructor may call it (:data:`SPELLINGS`: ``emb_dim``,
    ``max_position_embeddings`` …) whose attribute is a size (:func:`is_size`); None: it keeps none."""
    for name in SPELLINGS[setting]:
        value = getattr(module, name, None)
        if is_size(value):
            return name, value
    return None


def declared_size(module: nn.Module, setting: str) -> int | None:
    """The size a module keeps for attnviz's ``setting`` under any of its spellings (:func:`declared`); None: none."""
    found = declared(module, setting)
    return None if found is None else found[1]


@dataclass(frozen=True)
class DeclaredScale:
    """A number the scores may be multiplied by other than 1/√head_dim, and where it comes from: ``design`` when the
    module's config declares it as its model's design (:func:`declared_scales`), else an attribute the module sets
    itself; ``words`` name it ("√12 = √query_pre_attn_scalar, the config's scale (Gemma)", "self.scaling"), and a
    config's ``setting`` says, short, what declares it ("query_pre_attn_scalar = 12")."""

    scale: float
    words: str
    design: bool
    setting: str = ""
    books_too: bool = False  # the book's 1/√head_dim is what real models with this config do as well (YaRN's mscale)


SCALE_NAMES = ("scaling", "softmax_scale", "scale", "sm_scale", "attn_scale")  # a scale kept as a module attribute


def declared_scales(module: nn.Module | None, head_dim: int | None) -> tuple[DeclaredScale, ...]:
    """The scales ``module`` declares, designs first: a config (``self.config``, ``self.cfg`` …: :data:`CONFIG_NAMES`,
    an object or a dict, of the module or a submodule) with Gemma's ``query_pre_attn_scalar`` (the scores ×
    query_pre_attn_scalar^-0.5), Granite's ``attention_multiplier`` (the scores × it) or YaRN in ``rope_scaling`` /
    ``rope_parameters`` (a rope type other than default, ``mscale_all_dim`` set: DeepSeek's 1/√head_dim × mscale²,
    mscale = 0.1 · mscale_all_dim · ln(factor) + 1 when factor > 1 — Ministral 3 keeps 1/√head_dim with the same
    config, so that passes as well: ``books_too``); a scale attribute (:data:`SCALE_NAMES`) its constructor sets as
    ``query_pre_attn_scalar ** -0.5`` (:func:`_gemma_assigned`: the value read off the module, the formula off its
    source); 1 kept as ``scaling`` by transformers' own attention class that normalises q and k (``q_norm``,
    ``k_norm``: Gemma 3n's); then each number it keeps as one of :data:`SCALE_NAMES`, as the multiplier and as the
    divisor (TransformerLens's ``attn_scale`` = √d_head)."""
    found: list[DeclaredScale] = []
    if module is None:
        return ()
    for _, sub in module.named_modules():
        found += _config_scales(sub, head_dim)
    for path, sub in module.named_modules():
        for name in SCALE_NAMES:
            value = vars(sub).get(name)
            words = f"self.{path + '.' if path else ''}{name}"
            if (_is_positive(value) and head_dim and not math.isclose(value, head_dim ** -0.5, rel_tol=1e-4)
                    and _gemma_assigned(type(sub), name)):
                scalar = value ** -2
                found.append(DeclaredScale(value, f"√{scalar:.4g} = √query_pre_attn_scalar, as {words} = "
                                                  "query_pre_attn_scalar ** -0.5 says (Gemma)", True,
                                           f"query_pre_attn_scalar = {scalar:.4g}"))
        if (vars(sub).get("scaling") == 1 and type(sub).__module__.split(".")[0] == "transformers"
                and isinstance(getattr(sub, "q_norm", None), nn.Module)
                and isinstance(getattr(sub, "k_norm", None), nn.Module)):
            found.append(DeclaredScale(1.0, f"1: transformers' {type(sub).__name__} normalises q and k (q_norm, "
                                            "k_norm) and keeps scaling = 1 (Gemma 3n)", True,
                                       f"scaling = 1 with q and k normalised ({type(sub).__name__})"))
    for path, sub in module.named_modules():
        for name in SCALE_NAMES:
            value = vars(sub).get(name)
            if _is_positive(value):
                words = f"self.{path + '.' if path else ''}{name}"
                found += [DeclaredScale(value, f"{words} ({value:.4g})", False),
                          DeclaredScale(1 / value, f"{words} ({value:.4g}), which it divides by", False)]
    return tuple(found)


def _is_positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _config_scales(module: nn.Module, head_dim: int | None) -> list[DeclaredScale]:
    """The scales a module's config (:func:`config_setting`) declares as its model's design
    (:func:`declared_scales`)."""
    found = []
    scalar = config_setting(module, "query_pre_attn_scalar")
    if _is_positive(scalar):
        found.append(DeclaredScale(scalar ** -0.5, f"√{scalar:g} = √query_pre_attn_scalar, the config's scale "
                                                   "(Gemma)", True, f"query_pre_attn_scalar = {scalar:g}"))
    multiplier = config_setting(module, "attention_multiplier")
    if _is_positive(multiplier):
        found.append(DeclaredScale(multiplier, f"{1 / multiplier:.4g} = 1 ÷ attention_multiplier, the config's scale "
                                               "(Granite)", True, f"attention_multiplier = {multiplier:g}"))
    rope = config_setting(module, "rope_scaling") or config_setting(module, "rope_parameters")
    if head_dim and isinstance(rope, dict) and rope.get("rope_type", rope.get("type", "default")) != "default":
        factor, all_dim = rope.get("factor") or 1.0, rope.get("mscale_all_dim") or 0.0
        mscale = 0.1 * all_dim * math.log(factor) + 1.0 if factor > 1 else 1.0
        if mscale != 1.0:
            scale = head_dim ** -0.5 * mscale ** 2
            found.append(DeclaredScale(scale, f"{1 / scale:.4g} = √{head_dim} ÷ mscale², YaRN's from the config's "
                                              "rope_scaling (mscale = 0.1 · mscale_all_dim · ln(factor) + 1 = "
                                              f"{mscale:.4g}: DeepSeek)", True,
                                       f"√{head_dim} ÷ mscale², YaRN's mscale = {mscale:.4g} from rope_scaling's "
                                       f"factor = {factor:g} and mscale_all_dim = {all_dim:g}", books_too=True))
    return found


def constructor_trees(cls: type) -> Iterator[tuple[Callable, ast.AST | None]]:
    """Each constructor of ``cls`` and its bases that is not torch's or Python's, with its parsed ``def``
    (:func:`function_tree`; None where the source cannot be read or parsed), most derived first: what a class's code
    says it sets and reads."""
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None or klass.__module__.split(".")[0] in ("torch", "builtins"):
            continue
        found = function_tree(init)
        yield init, None if found is None else found[0]


_FUNCTION_TREES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # function -> (its def, its first line)


def function_tree(function: Callable) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, int] | None:
    """A function's parsed ``def`` and the line of its file it starts on — the one reading of a method's source, which
    :mod:`attnviz.window_reading` reads too —, read once a function and kept while it lives (a module a user saves and
    imports anew defines other functions, read anew); None where its source cannot be read or parsed."""
    with contextlib.suppress(KeyError, TypeError):  # not read yet, or not a function a weak reference can name
        return _FUNCTION_TREES[function]
    try:
        lines, first = inspect.getsourcelines(function)
        tree = ast.parse(textwrap.dedent("".join(lines))).body[0]
        found = (tree, first) if isinstance(tree, ast.FunctionDef | ast.AsyncFunctionDef) else None
    except (OSError, TypeError, SyntaxError, tokenize.TokenError, IndexError):  # a file saved mid-edit: no tree
        found = None
    with contextlib.suppress(TypeError):
        _FUNCTION_TREES[function] = found
    return found


def _gemma_assigned(cls: type, name: str) -> bool:
    """Whether the constructors of ``cls`` and its bases (not torch's) set ``self.<name>`` to query_pre_attn_scalar's
    ``X ** -0.5`` (or ``1 / math.sqrt(X)``; X a parameter, ``config.X`` or ``cfg["X"]``), as Gemma's ports do, and to
    nothing else but the book's ``head_dim ** -0.5`` (the branch without one) — so a value other than the book's is
    Gemma's; False where the source cannot be read."""
    assigned = []
    for _, tree in constructor_trees(cls):
        if tree is None:
            return False
        assigned += [node.value for node in ast.walk(tree) if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" and t.attr == name
            for t in node.targets)]
    gemma = [value for value in assigned if _inverse_root(value, ("query_pre_attn_scalar",))]
    return bool(gemma) and all(value in gemma or _inverse_root(value, HEAD_DIM_NAMES) for value in assigned)


def _inverse_root(node, names: tuple[str, ...]) -> bool:
    """Whether the expression ``node`` is X^-0.5, in the ways code writes it, for X one of ``names``: a name, an
    attribute, a dict's key."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        power = node.right
        value = (-power.operand.value if isinstance(power, ast.UnaryOp) and isinstance(power.op, ast.USub)
                 and isinstance(power.operand, ast.Constant) else getattr(power, "value", None))
        return value == -0.5 and is_named(node.left, names)
    if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.left, ast.Constant)
            and node.left.value == 1 and isinstance(node.right, ast.Call) and node.right.args
            and getattr(node.right.func, "attr", getattr(node.right.func, "id", None)) == "sqrt"):
        return is_named(node.right.args[0], names)
    return False


def is_named(node, names: tuple[str, ...]) -> bool:
    """Whether the expression ``node`` is one of ``names`` itself — a bare name, an attribute of any object
    (``config.X``, ``self.X``), a dict's key (``cfg["X"]``) —, read or written; not an expression that contains one."""
    return ((isinstance(node, ast.Name) and node.id in names)
            or (isinstance(node, ast.Attribute) and node.attr in names)
            or (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in names))


@dataclass(frozen=True)
class DeclaredCap:
    """The soft-cap a module declares for its scaled scores, cap · tanh(s / cap), and where: ``words`` name it
    ("the config's attn_logit_softcapping = 50", "self.attn.attn_logit_softcapping = 50")."""

    cap: float
    words: str


def declared_softcap(module: nn.Module, built: float | None = None) -> DeclaredCap | None:
    """The soft-cap ``module`` declares: an attribute of it or a submodule named as a soft-cap is
    (:data:`NUMBER_SETTINGS`' ``softcap``: Gemma 2's ``attn_logit_softcapping``, ``softcap`` …), a config's
    ``attn_logit_softcapping`` (``self.config``, ``self.cfg`` …: :data:`CONFIG_NAMES`, an object or a dict), else
    ``built``, the soft-cap its constructor was built with (``check_module``'s ``sizes``).  None when none declares a
    positive number — or when they declare several (layers with different caps: which one the trace read is not
    known)."""
    found = []
    for path, sub in module.named_modules():
        for name in NUMBER_SETTINGS["softcap"]:
            if _is_positive(value := vars(sub).get(name)):
                found.append(DeclaredCap(float(value), f"self.{path + '.' if path else ''}{name} = {value:g}"))
        if _is_positive(value := config_setting(sub, "attn_logit_softcapping")):
            found.append(DeclaredCap(float(value), f"the config's attn_logit_softcapping = {value:g}"))
    if not found and _is_positive(built):
        found.append(DeclaredCap(float(built), f"the soft-cap it is built with, {built:g}"))
    return found[0] if len({cap.cap for cap in found}) == 1 else None


SINK_NAMES = ("sinks", "sink", "attn_sinks", "attention_sinks", "sink_logits", "sinks_logits")  # GPT-OSS: sinks


@dataclass(frozen=True)
class DeclaredSinks:
    """The attention sinks' logits a module keeps, one per query head (``logits`` (h,)), and their name
    ("self.self_attn.sinks")."""

    logits: torch.Tensor
    words: str


def declared_sinks(module: nn.Module, heads: int) -> DeclaredSinks | None:
    """The one tensor of ``heads`` numbers ``module`` or a submodule keeps (a parameter, a buffer or an attribute)
    under a sink's name (:data:`SINK_NAMES`: GPT-OSS's ``self.sinks``, one learned logit per query head); None when
    it keeps none, or several (which one the trace read is not known)."""
    found = {}
    for path, sub in module.named_modules():
        for name in SINK_NAMES:
            value = sub._parameters.get(name, sub._buffers.get(name, vars(sub).get(name)))  # its own, not a child's
            if isinstance(value, torch.Tensor) and value.numel() == heads and value.is_floating_point():
                found[id(value)] = DeclaredSinks(value.detach().float().reshape(heads),
                                                 f"self.{path + '.' if path else ''}{name}")
    return next(iter(found.values())) if len(found) == 1 else None



def declared_window(module: nn.Module) -> int | None:
    """The sliding window a module says it has, in the spellings attention code uses: its own attribute (None there
    says it has none, and so does a layer that says it is global: :func:`_says_global`), else its config object's
    (:func:`_config_window`); a module that says neither reads its submodules — those that keep the attribute
    (transformers' Qwen2 and Gemma layers, whose ``sliding_window`` is None on a full-attention layer;
    gemma_pytorch's, whose ``attn_type`` says global), else those whose config declares one (Mistral's layer reads
    ``self.config.sliding_window``) — when they all say the same.  A KV cache object the module holds that is no
    ``nn.Module`` (:func:`window_holders`: the book's and Hugging Face's caches are plain objects) is read as a
    submodule is.  None: none says one.  The one reader of mask-convention and kv-cache."""
    said = _attribute_window(module)
    if said is not _SAYS_NOTHING:
        return said
    if (window := _config_window(module)) is not None:
        return window
    subs = [sub for path, sub in window_holders(module).items() if path]
    kept = {window for sub in subs if (window := _attribute_window(sub)) is not _SAYS_NOTHING}
    if not kept:
        kept = {window for sub in subs if (window := _config_window(sub)) is not None}
    return kept.pop() if len(kept) == 1 else None


_SAYS_NOTHING = object()  # a module with no window attribute in any spelling


def layer_windows(module: nn.Module) -> dict[str, int | None]:
    """path (:func:`window_holders`' spelling) -> the window each object under ``module`` declares for itself: W, or
    None for one that says it attends to every key (a window attribute set to None — the book's ``06_swa`` model, whose
    every ``sliding_window_stride``-th layer is full —, a global kind, a config that switches the window off for its
    layer); one that says nothing is left out.  What a model whose layers disagree declares layer by layer, where
    :func:`declared_window` declares no window for the whole."""
    windows = {}
    for path, holder in window_holders(module).items():
        said = _attribute_window(holder)
        if said is _SAYS_NOTHING and _says_global(holder):
            said = None
        elif said is _SAYS_NOTHING and any(is_size(value) for spelling in SPELLINGS["sliding_window_size"]
                                           for _, value in config_settings(holder, spelling)):
            said = _config_window(holder)
        if said is not _SAYS_NOTHING:
            windows[path] = said
    return windows

def class_says_cache(klass: type) -> bool:
    """Whether a class's name ends in the word cache (``KVCache``, ``SlidingKVCache``, ``RollingCache``)."""
    return name_words(klass.__name__)[-1:] in (["cache"], ["caches"])


def is_cache_object(value) -> bool:
    """Whether ``value`` is a KV cache object that is no ``nn.Module``: an instance of a class that is not torch's or
    Python's whose name says cache (:func:`class_says_cache`: the book's ``KVCache``, Hugging Face's ``DynamicCache``)
    or that has an ``update`` method (Hugging Face's ``DynamicSlidingWindowLayer``, which a ``DynamicCache`` holds)."""
    cls = type(value)
    if isinstance(value, nn.Module | type) or cls.__module__.split(".")[0] in ("torch", "builtins"):
        return False
    return class_says_cache(cls) or callable(getattr(cls, "update", None))


NESTING = 4  # how many containers and cache objects deep an attribute is read: a dict of DynamicCache's layers' keys
MODULE_INTERNALS = frozenset(vars(nn.Module()))  # nn.Module's own bookkeeping (_parameters, _buffers, hooks …)


def held_objects(root, name: str = "") -> dict[str, object]:
    """path -> each module, KV cache object and tensor ``root`` holds: the one walk of what a module keeps, which
    :func:`window_holders` (what may keep a window) and the kv-cache rule (the tensors that are its cache) read.

    From a module (path ``""``): itself and its submodules (``named_modules``, a ``ModuleList``'s item as code indexes
    it, ``kv_caches[0]``), and in each its buffers and attributes (not its parameters, nor ``nn.Module``'s own
    bookkeeping); from any other ``root``, a cache the caller holds, that value under ``name``.  An attribute is read
    :data:`NESTING` containers and cache objects deep: a tensor (``k``), a list's, tuple's or dict's items
    (:func:`held_items`: ``kv[0]``, ``cache["k"]``, per layer ``kv[1][0]``), and the attributes of a KV cache object
    that is no module (:func:`is_cache_object`: the book's ``KVCache``, Hugging Face's ``DynamicCache`` and its
    ``layers[0].keys``, a user's class with ``k`` and ``v``), as a submodule's are.  An object reached twice is kept
    under its first path."""
    held: dict[str, object] = {}
    seen: set[int] = set()

    def hold(path: str, value, depth: int) -> None:
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            if not isinstance(value, nn.Parameter):
                held[path] = value
            return
        if depth >= NESTING:
            return
        if isinstance(value, list | tuple | dict):
            for at, item in held_items(value):
                hold(f"{path}{at}", item, depth + 1)
        elif is_cache_object(value):
            held[path] = value
            for attribute, child in getattr(value, "__dict__", {}).items():  # none: a class with __slots__
                hold(f"{path}.{attribute}", child, depth + 1)

    if not isinstance(root, nn.Module):
        hold(name, root, 0)
        return held
    for path, sub in root.named_modules():
        path = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", path)  # a ModuleList's item as code indexes it: caches[0]
        held[path] = sub
        prefix = f"{path}." if path else ""
        for attribute, value in [*vars(sub).items(), *sub._buffers.items()]:
            if attribute not in MODULE_INTERNALS and value is not None:
                hold(f"{prefix}{attribute}", value, 0)
    return held


def window_holders(module: nn.Module) -> dict[str, object]:
    """Each object under ``module`` that may keep its window, by its path: the module (``""``), its submodules and the
    KV cache objects that are no modules any of them holds, as an attribute (``kv_cache``) or in a list, tuple or dict
    (``kv_caches[0]``, ``caches["layer_0"]``), and those such an object holds in turn (a ``DynamicCache``'s
    ``layers[0]``) — :func:`held_objects` but its tensors.  :func:`declared_window` and
    :mod:`attnviz.window_reading` read it."""
    return {path: value for path, value in held_objects(module).items() if not isinstance(value, torch.Tensor)}


def held_items(value) -> list[tuple[str, object]]:
    """(how an attribute's value is indexed, each item it holds): the value itself (``""``), a list's or tuple's items
    (``"[0]"``), a dict's values (``'["layer_0"]'``; a key that is no string as Python writes it, ``"[0]"``).  The one
    spelling of a held item's path, read by :func:`held_objects`, whose paths :func:`window_holders` and the kv-cache
    rule's tensors are named by."""
    if isinstance(value, list | tuple):
        return [(f"[{index}]", item) for index, item in enumerate(value)]
    if isinstance(value, dict):
        return [(f'["{key}"]' if isinstance(key, str) else f"[{key!r}]", item) for key, item in value.items()]
    return [("", value)]


def _attribute_window(module: nn.Module):
    """The window a module keeps as an attribute (:func:`declared_size`); None when it keeps one of its spellings
    that is no size (None: no window on this layer) or when it says it is a global layer (:func:`_says_global`);
    ``_SAYS_NOTHING`` when it keeps none."""
    window = declared_size(module, "sliding_window_size")
    spellings = SPELLINGS["sliding_window_size"]
    if window is None and not any(name in dir(module) for name in spellings):
        return _SAYS_NOTHING
    return None if _says_global(module) else window


KIND_NAMES = ("attn_type", "attention_type", "layer_type")  # a layer's kind: "global", "full_attention", an enum
SLIDING_NAMES = ("is_sliding", "sliding")  # False: a layer that attends to every key


def _says_global(module: nn.Module) -> bool:
    """Whether a module says it is a global, full-attention layer, whatever window it keeps: google/gemma_pytorch's
    ``attn_type`` (``AttentionType.GLOBAL``, whose ``sliding_window_size`` is kept on every layer but applied only
    when ``LOCAL_SLIDING``), a ``layer_type`` of ``"full_attention"``, ``is_sliding = False``."""
    for name in KIND_NAMES:
        kind = getattr(module, name, None)
        kind = getattr(kind, "name", kind)  # an enum member by its name
        if isinstance(kind, str) and any(word in kind.lower() for word in ("global", "full")):
            return True
    return any(getattr(module, name, None) is False for name in SLIDING_NAMES)


def _config_window(module: nn.Module) -> int | None:
    """The window a module's config (``self.config``, ``cfg`` …, an object or a dict: :func:`config_settings`)
    declares for it, unless that same config — never another the module keeps — switches it off:
    ``use_sliding_window=False``; ``layer_types`` whose entry for the module's ``layer_idx`` (or, without one, any
    entry) is not "sliding_attention"; or, without ``layer_types``, ``max_window_layers`` above the module's
    ``layer_idx`` (Qwen2's layers below it attend to every key); or a module that says it is global
    (:func:`_says_global`)."""
    if _says_global(module):
        return None
    found = next(((config, value) for spelling in SPELLINGS["sliding_window_size"]
                  for config, value in config_settings(module, spelling) if is_size(value)), None)
    if found is None:
        return None
    config, window = found  # every switch is read from the config that declares the window, never from another
    layer, layer_types = getattr(module, "layer_idx", None), _setting(config, "layer_types")
    known = isinstance(layer, int) and not isinstance(layer, bool)
    if _setting(config, "use_sliding_window") is False:
        return None
    if isinstance(layer_types, list | tuple) and layer_types:
        kinds = {layer_types[layer]} if known and 0 <= layer < len(layer_types) else set(layer_types)
        return window if kinds == {"sliding_attention"} else None
    below = _setting(config, "max_window_layers")
    if isinstance(below, int) and below > 0 and (not known or layer < below):
        return None
    return window
