"""Tells whether the window a user's module declares bounds what a query sees or what its KV cache keeps, by reading
the module's code.

The book's optimized ``MultiHeadAttention`` keeps a ``window_size`` that is its KV cache's length: its uncached
forward attends to every earlier token, and only its cached path reads the name.  A sliding-window module may keep
its window under the same name.  :func:`cache_length` reads the name as the cache's length when the code reads it only
where the forward caches (under ``use_cache``, or where a cache the caller holds is given or built to be returned)
and says nowhere that it is an attention window (:func:`window_said`: the class's name or
docstring, a config's ``sliding_window``, a mask made of it); :func:`attention_window` is then the window a query
sees, or None.  The code read is the code the module runs: its forward, its cache methods, what its constructor calls,
and the methods of its own these call, each where it is called (:func:`_reached_methods`).
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import weakref
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

from torch import nn

from attnviz import code_places
from attnviz.declarations import (
    SPELLINGS,
    class_says_cache,
    config_setting,
    declared,
    declared_window,
    function_tree,
    is_named,
    is_size,
    window_holders,
)
from attnviz.words import name_words

CACHE_LENGTH_NAMES = ("window_size",)  # a window spelling that may size a KV cache: it names no sliding or attention
SLIDING_NAMES_OF_WINDOW = tuple(name for name in SPELLINGS["sliding_window_size"] if name not in CACHE_LENGTH_NAMES)
# what a class's name or docstring says when it is sliding-window attention (lowercased, "-" and "_" read as spaces)
SAYS_WINDOW_ATTENTION = re.compile(r"\b(?:sliding )?window(?:ed)? (?:self )?(?:attention|attn)\b|\bswa\b"
                                   r"|\blocal (?:self )?attention\b"
                                   r"|\b(?:attention|attends?) (?:\w+ ){0,3}(?:a |its )?sliding window\b")
MASK_CALLS = ("tril", "triu", "tril_", "triu_", "masked_fill", "masked_fill_", "where", "scaled_dot_product_attention")
# a cache the caller holds, by the names code passes it under (GPT-2's original ``past``, minGPT forks' ``kv_cache``)
CACHE_ARGUMENTS = ("past_key_values", "past_key_value", "layer_past", "past_kv", "kv_cache", "cache", "past")


def cache_parameters(module: nn.Module) -> tuple[bool, str | None]:
    """How the module's forward takes a cache: (whether it takes ``use_cache``, the name of its parameter that takes a
    cache the caller holds — Hugging Face's past_key_values: :data:`CACHE_ARGUMENTS`, with no default or a default of
    None, as a cache starts empty (``past=0``, a count of past tokens, is no cache) — or None)."""
    parameters = inspect.signature(module.forward).parameters
    return "use_cache" in parameters, next((name for name in CACHE_ARGUMENTS if name in parameters
                                            and parameters[name].default in (None, inspect.Parameter.empty)), None)


def cache_length(module: nn.Module) -> tuple[str, int] | None:
    """(the name, W) when the window a module declares (:func:`declared_window`) is its KV cache's length, not an
    attention window, as the book's optimized ``MultiHeadAttention`` makes its ``window_size``: kept under a name that
    says neither sliding nor attention (:data:`CACHE_LENGTH_NAMES`), by a module whose forward takes ``use_cache`` or
    a cache the caller holds (:func:`cache_parameters`) and whose code reads it only where it caches
    (:func:`_read_only_to_cache`), and whose code says nowhere that it
    is an attention window (:func:`window_said`).  None otherwise: a ``sliding_window_size``, or a ``window_size``
    the uncached forward may read, or one the code calls a window, is an attention window."""
    found = _read_as_cache_length(module)
    return found if found is not None and window_said(module) is None else None


def cache_length_reading(module: nn.Module) -> tuple[str, int, str] | None:
    """(the name, W, what the code was read to do with it, in words) when the window a module declares is its KV
    cache's length (:func:`cache_length`); None otherwise.  The words say what was checked: that the module's code
    reads it only where the forward caches — or, for a window that only a cache submodule keeps
    (``kv_cache.window_size``, :func:`_cache_module_window`), that no other module keeps it, why the submodule is a
    cache (it has no forward of its own; its class's name says cache) and whether the attention's own code reads it
    (only where the forward caches) or never does.  The cache module's own code is not read."""
    found = cache_length(module)
    if found is None:
        return None
    name, length = found
    owner = name.rpartition(".")[0]
    if not owner:
        return name, length, "its code reads it only where the forward caches"
    cache = type(window_holders(module)[owner])
    kind = (f"a {cache.__name__} with no forward of its own" if _has_no_forward(cache) else
            f"a {cache.__name__}, whose class's name says cache")
    reads = _read_only_to_cache(type(module), name, True)
    holder = "cache module" if isinstance(window_holders(module)[owner], nn.Module) else "cache"
    return name, length, (f"only its {holder} {owner}, {kind}, keeps it, and the attention's own code "
                          + ("reads it only where the forward caches" if reads else "never reads it"))


def attention_window(module: nn.Module) -> int | None:
    """The attention window a module declares (:func:`declared_window`): the keys each query sees.  None when it
    declares none, or when what it declares is its KV cache's length (:func:`cache_length`: the book's optimized
    class's ``window_size``), which bounds what the cache keeps, not what a query sees."""
    return None if cache_length(module) is not None else declared_window(module)


def _read_as_cache_length(module: nn.Module) -> tuple[str, int] | None:
    """(the name, W) of a window kept under :data:`CACHE_LENGTH_NAMES` that the module's code reads only where its
    forward caches — the book's optimized class's reading of ``window_size`` —, or that only its cache keeps (a
    submodule that is a cache, :func:`_cache_module_window`: ``self.kv_cache = SlidingKVCache(window_size)``, named
    ``kv_cache.window_size``) and its own code reads nowhere but where it caches; None otherwise."""
    found = declared(module, "sliding_window_size")
    kept_by_cache = found is None and (found := _cache_module_window(module)) is not None
    if found is None or found[0].rpartition(".")[2] not in CACHE_LENGTH_NAMES:
        return None
    try:
        takes_use_cache, cache_name = cache_parameters(module)
    except (TypeError, ValueError):
        return None
    caches = takes_use_cache or cache_name is not None
    return found if caches and _read_only_to_cache(type(module), found[0], kept_by_cache) is not None else None


def _cache_module_window(module: nn.Module) -> tuple[str, int] | None:
    """("<path>.<name>", W) for the cache that keeps the window the module declares (:func:`declared_window`) — one
    submodule, or one KV cache object that is no module (:func:`attnviz.declarations.window_holders`: the book's and
    Hugging Face's are plain objects), or the items of one list or dict of them, one per layer, all keeping W under
    the same name (named by the first, ``kv_caches[0].window_size``) — and is a KV cache, not an attention layer: it
    has no forward of its own (the attention calls its ``update``) or its class's name says cache
    (:func:`_names_a_cache`); None otherwise."""
    window = declared_window(module)
    holders = window_holders(module)
    kept = [(path, found) for path, sub in holders.items() if path
            and (found := declared(sub, "sliding_window_size")) is not None]
    if window is None or not kept or {found for _, found in kept} != {(kept[0][1][0], window)}:
        return None
    if len({_list_of(path) for path, _ in kept}) != 1:
        return None  # several caches: the items of one list, ModuleList or dict, and no other
    if not all(_has_no_forward(type(holders[path])) or _names_a_cache(type(holders[path])) for path, _ in kept):
        return None
    path, (name, size) = kept[0]
    return f"{path}.{name}", size


def _list_of(path: str) -> str:
    """The path of the list, ``ModuleList`` or dict an item's path (``kv_caches[0]``, ``caches["layer_0"]``) names it
    in; the path itself for one that is no item."""
    return re.sub(r"\[[^\]]*\]$", "", path)


def _has_no_forward(cls: type) -> bool:
    """Whether a cache's class has no forward of its own: a module's that is ``nn.Module``'s, or none (a plain
    object's)."""
    return getattr(cls, "forward", nn.Module.forward) is nn.Module.forward


def window_said(module: nn.Module) -> str | None:
    """Words naming what in a module's code says that its ``window_size`` — read only where the forward caches, as the
    book's optimized class reads its KV cache's length (:func:`_read_as_cache_length`) — is an attention window after
    all, with the line: its class's name or docstring (sliding-window, windowed or local attention, SWA:
    :data:`SAYS_WINDOW_ATTENTION`), its config's ``sliding_window`` (:data:`SLIDING_NAMES_OF_WINDOW`), its
    constructor keeping a ``sliding_window`` under that name, or a mask its code makes from it (:func:`_mask_reads`:
    compared outside an ``if``'s test, or passed to ``tril``, ``masked_fill`` …).  None: its code says none of them,
    or the window is not read that way."""
    found = _read_as_cache_length(module)
    if found is None:
        return None
    for spelling in SLIDING_NAMES_OF_WINDOW:
        if is_size(value := config_setting(module, spelling)):
            return f"its config declares {spelling} = {value}"
    return _code_says_window(type(module), found[0])


def _per_class(read: Callable) -> Callable:
    """``read(cls, …)`` read once per class and arguments, and kept only while the class lives, as
    :func:`attnviz.code_places.source_lines` keeps a class's source (what is kept holds no reference to the class: a
    class a user's module replaced is not kept alive by it)."""
    kept: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @functools.wraps(read)
    def once(cls: type, *args):
        per_class = kept.setdefault(cls, {})
        if args not in per_class:
            per_class[args] = read(cls, *args)
        return per_class[args]

    return once


@_per_class
def _code_says_window(cls: type, name: str) -> str | None:
    """:func:`window_said`'s reading of the code of ``cls`` and its own bases, which does not change while the class
    lives (read once per class).  A class whose name says it is a cache (:func:`_names_a_cache`: a ``SlidingKVCache``
    the attention inherits its cache from) says nothing of the attention by its name or docstring; the masks read are
    those of the code the module runs (:func:`_reached_methods`), not of a method nothing calls."""
    for klass in _own_classes(cls):
        if _names_a_cache(klass):
            continue
        words = " ".join(name_words(klass.__name__))
        if SAYS_WINDOW_ATTENTION.search(words) or re.search(r"\bsliding\b", words):
            return f"the class's name says so: class {klass.__name__}{_at_line(_class_lines(klass)[0])}"
        doc = " ".join(re.sub(r"[-_]", " ", vars(klass).get("__doc__") or "").lower().split())
        if match := SAYS_WINDOW_ATTENTION.search(doc):
            return f"the docstring of {klass.__name__} says “{match.group(0)}”{_at_line(_class_lines(klass)[1])}"
    for _, tree, first in _constructors(cls):
        for statement in ast.walk(tree):
            if (isinstance(statement, ast.stmt) and _keeps(statement, name) and (value := getattr(
                    statement, "value", None)) is not None and any(
                    is_named(sub, SLIDING_NAMES_OF_WINDOW) for sub in ast.walk(value))):
                return (f"its constructor keeps a sliding window as self.{name} (line "
                        f"{first + statement.lineno - 1}: {ast.unparse(statement)})")
    for method in _reached_methods(cls, name) or ():
        for node in _mask_reads(method.tree, name, method.aliases):
            return (f"line {method.first + node.lineno - 1} of {method.qualname} makes a mask of it: "
                    f"{ast.unparse(node)}")
    return None


def _own_classes(cls: type) -> list[type]:
    """``cls`` and its bases that are not torch's or Python's, most derived first: the classes a user wrote."""
    return [klass for klass in cls.__mro__ if klass.__module__.split(".")[0] not in ("torch", "builtins")]


ATTENTION_WORDS = ("attention", "attn", "mha", "gqa", "mqa", "swa")  # a class name's words that say attention


def _names_a_cache(klass: type) -> bool:
    """Whether a class's name says it is a cache — its last word "cache" (``SlidingKVCache``, ``RollingCache``:
    :func:`attnviz.declarations.class_says_cache`), and no word of it says attention
    (``SlidingWindowAttentionWithCache`` is an attention) —: what its name and docstring say is about the cache, not
    about the attention that keeps it."""
    return class_says_cache(klass) and not set(name_words(klass.__name__)) & set(ATTENTION_WORDS)


def _parsed(function: Callable) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, int] | None:
    """A function's parsed ``def`` and the line of its file it starts on; None where its source cannot be read
    (:func:`attnviz.declarations.function_tree`, read once per function: a call to it and its reading both ask)."""
    return function_tree(function)


def _constructors(cls: type) -> Iterator[tuple[Callable, ast.FunctionDef | ast.AsyncFunctionDef, int]]:
    """Each constructor of ``cls`` and its own bases (:func:`_own_classes`) whose source can be read: the function,
    its parsed ``def`` and the line of its file it starts on."""
    for klass in _own_classes(cls):
        init = vars(klass).get("__init__")
        if inspect.isfunction(init) and (parsed := _parsed(init)) is not None:
            yield init, *parsed


@dataclass(frozen=True)
class _Reached:
    """A method of the module's own code that runs when the module is used (:func:`_reached_methods`), and how."""

    qualname: str  # the function's, ``Attention.forward``: no reference to it, nor so to its class
    tree: ast.FunctionDef | ast.AsyncFunctionDef  # its parsed ``def``
    first: int  # the line of its file it starts on
    caching: bool  # it runs only where the forward caches
    aliases: frozenset[str]  # its parameters a call gives the window (self.<name>, or a name holding it)


def _says_cache(function: Callable) -> bool:
    """Whether a method's name says it caches (``reset_cache``, ``_update_cache``)."""
    return "cache" in function.__name__.lower()


MOST_METHODS = 64  # the methods :func:`_reached_methods` reads at most: the code of one attention class


@_per_class
def _reached_methods(cls: type, name: str) -> tuple[_Reached, ...] | None:
    """The methods of ``cls`` and its own bases whose code runs when the module is used: its ``forward``, the methods
    whose names say cache (:func:`_says_cache`: ``reset_cache``, which attnviz and a generation loop call), the methods
    its constructors call, and each method of its own those call, as ``self.m(…)`` or ``super().m(…)``, however deep.
    A call under an ``if use_cache`` (or from a method that caches) runs only where the forward caches, and a
    parameter the call gives ``self.<name>`` (or a local name holding it) holds the window in the method called.  A
    method nothing of those calls (``extra_repr``, a plotting helper) is not read; one called both where the forward
    caches and where it does not is there twice.  None where the source of one of them cannot be read."""
    queue: list[tuple[Callable, bool, frozenset[str]]] = []
    forward = _own_function(cls, "forward")
    if forward is not None:
        queue.append((forward, False, frozenset()))
    for klass in _own_classes(cls):
        queue += [(function, True, frozenset()) for function in vars(klass).values()
                  if inspect.isfunction(function) and _says_cache(function) and function.__name__ != "__init__"]
    for init, tree, _ in _constructors(cls):
        for call, _ in _calls(tree, False):  # the constructor's own reads are :func:`_read_only_to_cache`'s
            target = _called(cls, init, call)
            if target is not None and target.__name__ != "__init__":
                queue.append((target, _says_cache(target), frozenset()))
    reached: dict[tuple[Callable, bool, frozenset[str]], _Reached] = {}
    while queue and len(reached) < MOST_METHODS:
        function, caching, aliases = queue.pop(0)
        if (function, caching, aliases) in reached:
            continue
        parsed = _parsed(function)
        if parsed is None:
            return None
        tree, first = parsed
        reached[function, caching, aliases] = _Reached(function.__qualname__, tree, first, caching, aliases)
        local = _window_aliases(tree, name, set(aliases))
        for call, caches in _calls(tree, caching):
            target = _called(cls, function, call)
            if target is not None and target.__name__ != "__init__":
                queue.append((target, caches or _says_cache(target),
                              frozenset(_given_window(target, call, name, local))))
    return tuple(reached.values())


def _own_function(cls: type, attribute: str) -> Callable | None:
    """The function ``cls.<attribute>`` is when one of its own classes (:func:`_own_classes`) defines it: a method, or
    a static or class method's function; None otherwise (torch's, a property, no such attribute)."""
    for klass in cls.__mro__:
        if attribute in vars(klass):
            if klass.__module__.split(".")[0] in ("torch", "builtins"):
                return None
            value = vars(klass)[attribute]
            value = getattr(value, "__func__", value)  # a staticmethod's or classmethod's function
            return value if inspect.isfunction(value) else None
    return None


def _called(cls: type, caller: Callable, call: ast.Call) -> Callable | None:
    """The own method (:func:`_own_function`) a call in ``caller``'s code calls: ``self.m(…)`` the class's ``m``,
    ``super().m(…)`` the ``m`` of the classes after the one that defines ``caller``; None for any other call."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    if isinstance(func.value, ast.Name) and func.value.id == "self":
        return _own_function(cls, func.attr)
    if not (isinstance(func.value, ast.Call) and isinstance(func.value.func, ast.Name)
            and func.value.func.id == "super" and not func.value.args):
        return None
    mro = cls.__mro__
    defining = next((index for index, klass in enumerate(mro) if any(
        getattr(value, "__func__", value) is caller for value in vars(klass).values())), None)
    later = None if defining is None else next((klass for klass in mro[defining + 1:] if func.attr in vars(klass)),
                                               None)
    return None if later is None else _own_function(later, func.attr)


def _calls(node: ast.AST | list[ast.stmt], caching: bool) -> Iterator[tuple[ast.Call, bool]]:
    """Each call in ``node``'s code, and whether it runs only where the forward caches (:func:`_with_caching`)."""
    for sub, caches in _with_caching(node, caching):
        if isinstance(sub, ast.Call):
            yield sub, caches


def _given_window(target: Callable, call: ast.Call, name: str, aliases: set[str]) -> list[str]:
    """The parameters of ``target`` that ``call`` gives the window: an argument that is ``self.<name>`` or a number
    made of it (:func:`_window_valued`; ``aliases``: the caller's names holding it), by position or by keyword."""
    parsed = _parsed(target)
    if parsed is None:
        return []
    arguments = parsed[0].args
    positional = [argument.arg for argument in [*arguments.posonlyargs, *arguments.args]]
    if positional and positional[0] in ("self", "cls"):
        positional = positional[1:]
    given = [parameter for parameter, argument in zip(positional, call.args)
             if not isinstance(argument, ast.Starred) and _window_valued(argument, name, aliases)]
    return given + [keyword.arg for keyword in call.keywords
                    if keyword.arg is not None and _window_valued(keyword.value, name, aliases)]


def _class_lines(klass: type) -> tuple[int | None, int | None]:
    """The lines of its file a class's ``class`` statement and its docstring start on, found by the statement's text
    in the class's source (:func:`attnviz.code_places.source_lines`, read once a class); None where not known."""
    lines, first = code_places.source_lines(klass)
    statement = re.compile(rf"\s*class\s+{re.escape(klass.__name__)}\b")
    at = next((index for index, line in enumerate(lines) if statement.match(line)), None)
    if at is None:
        return None, None
    doc = next((index for index in range(at + 1, len(lines)) if lines[index].strip()), None)
    return first + at, first + doc if doc is not None and lines[doc].lstrip()[:1] in "\"'rRuU" else None


def _at_line(line: int | None) -> str:
    """" (line 12)", or "" where the line is not known."""
    return "" if line is None else f" (line {line})"


def _mask_reads(tree: ast.AST, name: str, given: Collection[str] = ()) -> list[ast.AST]:
    """The statements of a method's code (``tree``) that make a mask of ``self.<name>`` — or of a local name whose
    value is it (:func:`_window_aliases`: ``W = self.window_size``, ``far = W - 1``; ``given``: the method's parameters
    a call gives it, ``def band(self, diff, far)`` called as ``self.band(diff, self.window_size)``) —: a comparison with
    it that is no
    ``if``, ``while`` or ``assert`` test (``diff >= W``: a tensor of booleans, where the book's cache compares
    ``self.ptr_cur + num_tokens > self.window_size`` only to decide whether to shift), or it as an argument of a
    masking call (:data:`MASK_CALLS`: ``triu(…, diagonal=-W)``), or a band filled with a constant between bounds made
    of it in a local tensor (``allowed[i, max(0, i - W + 1):i + 1] = True``: a mask written row by row; not the cache
    the module keeps, ``self.cache_k[:, :, -overflow:] = 0``).  A tensor sliced or sized by it (``keys[:, :, -W:]``,
    ``torch.zeros(b, h, W, hd)``, the book's shift ``self.cache_k[:, :, :-overflow] = …``) is no window: a mask built
    from its shape is the book's causal one."""
    aliases = _window_aliases(tree, name, set(given))
    tests = {id(sub) for node in ast.walk(tree) if isinstance(node, ast.If | ast.While | ast.Assert | ast.IfExp)
             for sub in ast.walk(node.test)}
    statements = [node for node in ast.walk(tree) if isinstance(node, ast.stmt)
                  and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.If | ast.While | ast.For
                                     | ast.With)]
    found = []
    for statement in statements:
        for node in ast.walk(statement):
            compared = (isinstance(node, ast.Compare) and id(node) not in tests
                        and any(_window_valued(side, name, aliases) for side in [node.left, *node.comparators]))
            masking = (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
                       in MASK_CALLS and any(_window_valued(argument, name, aliases) for argument in
                                             [*node.args, *(keyword.value for keyword in node.keywords)]))
            if compared or masking:
                found.append(statement)
                break
        else:
            if (isinstance(statement, ast.Assign) and _is_fill(statement.value) and any(
                    isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)  # a local, no cache
                    and any(_window_valued(sub, name, aliases) for sub in ast.walk(target.slice))
                    for target in statement.targets)):
                found.append(statement)
    return sorted(found, key=lambda node: node.lineno)


def _is_fill(node: ast.AST) -> bool:
    """Whether ``node`` is a constant a mask is filled with: ``True``, ``0``, ``-1e9``, ``-torch.inf``,
    ``float("-inf")``."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return ((isinstance(node, ast.Constant) and isinstance(node.value, bool | int | float))
            or (isinstance(node, ast.Attribute) and node.attr == "inf")
            or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float"))


def _window_aliases(tree: ast.AST, name: str, aliases: set[str]) -> set[str]:
    """The local names of a method's code (``tree``) whose value is a number made of ``self.<name>`` or of ``aliases``
    (its parameters that hold it): ``W = self.window_size``, ``far = W - 1``, a few steps deep."""
    aliases = set(aliases)
    for _ in range(3):  # W = self.window_size; far = W - 1: a few steps of names assigned from it
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and all(isinstance(target, ast.Name) for target in node.targets)
                    and _window_valued(node.value, name, aliases)):
                aliases |= {target.id for target in node.targets}
    return aliases


NUMBER_CALLS = ("int", "float", "min", "max", "abs")  # calls whose value is still a number made of their arguments


def _window_valued(node: ast.AST, name: str, aliases: set[str]) -> bool:
    """Whether the expression ``node`` is a number made of ``self.<name>`` or one of the local names ``aliases``
    holding it: the name itself, arithmetic on it (``W - 1``, ``-W``), ``int(W)``, ``min(W, n)``, either branch of
    ``… if … else …``; not a tensor it slices or sizes."""
    if _is_self_load(node, name) or (isinstance(node, ast.Name) and node.id in aliases):
        return True
    if isinstance(node, ast.BinOp):
        return _window_valued(node.left, name, aliases) or _window_valued(node.right, name, aliases)
    if isinstance(node, ast.UnaryOp):
        return _window_valued(node.operand, name, aliases)
    if isinstance(node, ast.IfExp):
        return _window_valued(node.body, name, aliases) or _window_valued(node.orelse, name, aliases)
    if isinstance(node, ast.BoolOp):
        return any(_window_valued(value, name, aliases) for value in node.values)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in NUMBER_CALLS:
        return any(_window_valued(argument, name, aliases) for argument in node.args)
    return False


@_per_class
def _read_only_to_cache(cls: type, name: str, kept_by_cache: bool = False) -> int | None:
    """How many times the code of ``cls`` and its bases (not torch's) reads ``self.<name>``, when it reads it at least
    once and only where its forward caches: under an ``if use_cache`` or ``if kv_cache is not None`` (or in the
    ``else`` of an ``if not use_cache``), in the code that builds the cache a forward returns to its caller, in a
    method whose name says cache (``reset_cache``, ``_update_cache``), or in a method called only from there
    (:func:`_reached_methods`: ``self._shift(k, v)`` under an ``if use_cache``); a constructor reads it, or its
    parameter ``name``, only to keep it (``self.window_size = window_size or self.max_seq_len``, passed on to a base's
    constructor) or to size the cache it allocates (:func:`_sizes_only`).  A method nothing calls (``extra_repr``) is
    not read.  ``kept_by_cache``: ``name`` is a cache submodule's window (``kv_cache.window_size``,
    :func:`_cache_module_window`), which the cache keeps: the module's code need not read it (0), and its constructor
    may give it to the cache (``self.kv_cache = SlidingKVCache(window_size)``).  None where the code reads it
    elsewhere, or nowhere (unless ``kept_by_cache``), or where the source cannot be read.  Read once per class: a
    check asks several times (:func:`cache_length`, :func:`window_said`, :func:`cache_length_reading`)."""
    owner, _, bare = name.rpartition(".")  # "kv_cache", "window_size" for a cache submodule's window
    owner = re.split(r"[.\[]", owner)[0]  # the attribute the constructor keeps: kv_caches for kv_caches[0]
    for klass in _own_classes(cls):
        init = vars(klass).get("__init__")
        if init is None:
            continue
        parsed = _parsed(init) if inspect.isfunction(init) else None
        if parsed is None:
            return None
        if any(not _keeps(statement, owner or name) and not _passes_on(statement)
               and not _sizes_only(statement, name, (bare,))
               and _count_self_loads(statement, name, bare=(bare,)) for statement in parsed[0].body):
            return None
    reached = _reached_methods(cls, name)
    if reached is None:
        return None
    reads = 0
    for method in reached:
        cached, uncached = _cached_and_other_loads(method.tree, name, method.caching)
        if uncached:
            return None
        reads += cached
    return reads if reads > 0 or kept_by_cache else None


def _keeps(statement: ast.stmt, name: str) -> bool:
    """Whether ``statement`` assigns ``self.<name>`` (and so may read the parameter it keeps)."""
    targets = (statement.targets if isinstance(statement, ast.Assign) else
               [statement.target] if isinstance(statement, ast.AnnAssign | ast.AugAssign) else [])
    return any(isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.value, ast.Name)
               and node.value.id == "self" for target in targets for node in ast.walk(target))


ALLOCATING_CALLS = ("zeros", "empty", "full", "new_zeros", "new_empty")  # calls that allocate a tensor of a size


def _sizes_only(statement: ast.stmt, name: str, bare: Collection[str]) -> bool:
    """Whether every read of ``self.<name>`` (or of the ``bare`` names) in a constructor's ``statement`` sizes a
    tensor it allocates — an argument of ``torch.zeros``, ``empty``, ``full`` … (:data:`ALLOCATING_CALLS`), as a
    cache allocated once is (``self.register_buffer("cache_k", torch.zeros(b, h, window_size, hd))``)."""
    sizing = sum(_count_self_loads(argument, name, bare=bare) for node in ast.walk(statement)
                 if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
                 in ALLOCATING_CALLS for argument in node.args)
    return sizing == _count_self_loads(statement, name, bare=bare)


def _passes_on(statement: ast.stmt) -> bool:
    """Whether ``statement`` calls a base's constructor (``super().__init__(…, window_size=window_size)``), which
    keeps what it is given (:func:`_read_only_to_cache` reads that constructor too)."""
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
            and isinstance(statement.value.func, ast.Attribute) and statement.value.func.attr == "__init__")


def _is_self_load(node: ast.AST, name: str) -> bool:
    """Whether ``node`` reads ``self.<name>`` (an attribute of ``self`` loaded, not assigned; ``name`` may be a path,
    ``kv_cache.window_size``, whose items are read at any index: ``kv_caches[0].window_size`` is read as
    ``self.kv_caches[i].window_size``)."""
    *path, last = name.split(".")
    if not (isinstance(node, ast.Attribute) and node.attr == last and isinstance(node.ctx, ast.Load)):
        return False
    value = node.value
    for part in reversed(path):
        attribute, indexed, _ = part.partition("[")
        if indexed:
            if not isinstance(value, ast.Subscript):
                return False
            value = value.value
        if not (isinstance(value, ast.Attribute) and value.attr == attribute):
            return False
        value = value.value
    return isinstance(value, ast.Name) and value.id == "self"


def _count_self_loads(node: ast.AST, name: str, *, bare: Collection[str] = ()) -> int:
    """How many times the code under ``node`` reads ``self.<name>``, or one of the ``bare`` names (a constructor's
    argument of that name; the local names assigned from it) — counted anywhere inside it, unlike :func:`is_named`,
    which asks what one expression is."""
    return sum(1 for sub in ast.walk(node) if _is_self_load(sub, name) or (
        isinstance(sub, ast.Name) and sub.id in bare and isinstance(sub.ctx, ast.Load)))


def _cached_and_other_loads(node: ast.AST | list[ast.stmt], name: str, caching: bool) -> tuple[int, int]:
    """(reads of ``self.<name>`` where the code caches, reads elsewhere) in ``node`` (a method's ``def``, a statement
    list, a statement or an expression); ``caching``: it runs only when the forward caches (:func:`_with_caching`)."""
    loads = [caches for sub, caches in _with_caching(node, caching) if _is_self_load(sub, name)]
    return sum(loads), len(loads) - sum(loads)


CACHE_FLAG = "use_cache"  # the forward's argument that says it caches


def _with_caching(node: ast.AST | list[ast.stmt], caching: bool, flags: frozenset[str] = frozenset((CACHE_FLAG,)),
                  returned: frozenset[str] | None = None) -> Iterator[tuple[ast.AST, bool]]:
    """Each node of ``node``'s code (a method's ``def``, whose body is read, a statement list, a statement or an
    expression) with whether it runs only where the forward caches — ``caching``: all of it does.  An ``if`` (or ``…
    if … else …``) on ``use_cache`` — ``if use_cache``, ``if use_cache and …`` — caches in its body, ``if not
    use_cache`` in its ``else`` and, when its body ends in a ``return`` or ``raise``, in the statements after it,
    however deep it sits; in ``use_cache and …`` what follows ``use_cache`` caches.  ``flags``: ``use_cache`` and the
    names a method's ``def`` assigns it to (:func:`_cache_flags`: ``caching = use_cache and not self.training``), and
    its parameters that take a cache the caller holds, tested as ``kv_cache is not None`` or ``kv_cache is None``.  In a
    method that takes a cache the caller holds (:data:`CACHE_ARGUMENTS`), the code that builds the cache it returns
    caches too: what a ``return out, …`` returns after the output, and a statement that assigns only names it returns
    there and reads nowhere else (``returned``: :func:`_returned_cache`, ``present = (k[:, :, -W:], v[:, :, -W:])``)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        yield from _with_caching(node.body, caching, _cache_flags(node), _returned_cache(node))
        return
    if isinstance(node, list):
        for statement in node:
            if (isinstance(statement, ast.Return) and isinstance(statement.value, ast.Tuple) and returned is not None
                    and len(statement.value.elts) > 1):  # ``return out, present``: what follows the output caches
                yield statement, caching
                yield statement.value, caching
                yield from _with_caching(statement.value.elts[0], caching, flags, returned)
                for element in statement.value.elts[1:]:
                    yield from _with_caching(element, True, flags, returned)
                continue
            builds = returned is not None and isinstance(statement, ast.Assign) and all(
                _assigned_names(target) and _assigned_names(target) <= returned for target in statement.targets)
            yield from _with_caching(statement, caching or builds, flags, returned)
            if (isinstance(statement, ast.If) and _use_cache_branches(statement.test, flags) == (False, True)
                    and statement.body and isinstance(statement.body[-1], ast.Return | ast.Raise)):
                caching = True  # ``if not use_cache: … return``: what follows runs only where the forward caches
        return
    yield node, caching
    branches = _use_cache_branches(node.test, flags) if isinstance(node, ast.If | ast.IfExp) else None
    if branches is not None:
        parts = [(node.test, caching), (node.body, caching or branches[0]), (node.orelse, caching or branches[1])]
    elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):  # ``use_cache and …``: what follows caches
        told = [index for index, value in enumerate(node.values) if _flag_test(value, flags)]
        parts = [(value, caching or (bool(told) and index > told[0])) for index, value in enumerate(node.values)]
    else:
        parts = [(child, caching) for child in ast.iter_child_nodes(node)]
    for part, caches in parts:
        yield from _with_caching(part, caches, flags, returned)


def _assigned_names(target: ast.expr) -> set[str]:
    """The names an assignment's target assigns when it is a name or a tuple of names (``present``, ``pk, pv``); none
    for any other target."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, ast.Tuple | ast.List) and all(isinstance(element, ast.Name) for element in target.elts):
        return {element.id for element in target.elts}
    return set()


def _returned_cache(method: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str] | None:
    """The local names a method that takes a cache the caller holds (a parameter of :data:`CACHE_ARGUMENTS`) returns
    as that cache — after the output in a ``return out, present`` — and reads nowhere else: the names of the cache it
    builds for its caller (NanoGPT forks' ``present``).  None for a method that takes no such cache."""
    arguments = method.args
    if not {argument.arg for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]} \
            & set(CACHE_ARGUMENTS):
        return None
    returns = [node.value for node in ast.walk(method) if isinstance(node, ast.Return)
               and isinstance(node.value, ast.Tuple) and len(node.value.elts) > 1]
    cached = {id(sub) for value in returns for element in value.elts[1:] for sub in ast.walk(element)}
    names = {sub.id for value in returns for element in value.elts[1:] for sub in ast.walk(element)
             if isinstance(sub, ast.Name)}
    elsewhere = {node.id for node in ast.walk(method) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
                 and id(node) not in cached}
    return frozenset(names - elsewhere)


def _cache_flags(method: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """``use_cache`` and the local names a method's code assigns it to, alone or with more conditions (``caching =
    use_cache``, ``caching = use_cache and not self.training``), and its parameters that take a cache the caller holds
    (:data:`CACHE_ARGUMENTS`, given only where the forward caches): each is true only where the forward caches."""
    arguments = method.args
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
    flags = {CACHE_FLAG} | {argument.arg for argument, default in [*zip(positional, defaults), *zip(
        arguments.kwonlyargs, arguments.kw_defaults)] if argument.arg in CACHE_ARGUMENTS and (
        default is None or (isinstance(default, ast.Constant) and default.value is None))}
    for node in ast.walk(method):
        value = node.value if isinstance(node, ast.Assign) else None
        if value is not None and all(isinstance(target, ast.Name) for target in node.targets) and (
                (isinstance(value, ast.Name) and value.id in flags)
                or (isinstance(value, ast.BoolOp) and isinstance(value.op, ast.And) and any(
                    isinstance(part, ast.Name) and part.id in flags for part in value.values))):
            flags |= {target.id for target in node.targets}
    return frozenset(flags)


def _use_cache_branches(test: ast.expr, flags: frozenset[str] = frozenset((CACHE_FLAG,))) -> tuple[bool, bool] | None:
    """(whether the body, whether the ``else`` runs only when the forward caches) for an ``if`` whose ``test`` is
    ``use_cache``, ``use_cache and …`` or ``not use_cache`` (or one of the ``flags`` that hold it; a cache the caller
    holds: ``kv_cache is not None``, ``kv_cache is None``); None for any other test."""
    said = _flag_test(test, flags)
    if said is not None:
        return (True, False) if said else (False, True)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and any(
            _flag_test(value, flags) for value in test.values):
        return True, False
    return None


def _flag_test(test: ast.expr, flags: frozenset[str]) -> bool | None:
    """True for a test that holds only where the forward caches — one of the ``flags`` (``use_cache``), or a cache
    the caller holds that is given (``kv_cache is not None``) —, False for its negation (``not use_cache``,
    ``kv_cache is None``), None for any other test."""
    if isinstance(test, ast.Name):
        return True if test.id in flags else None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        said = _flag_test(test.operand, flags)
        return None if said is None else not said
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is | ast.IsNot)
            and isinstance(test.left, ast.Name) and test.left.id in flags
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None):
        return isinstance(test.ops[0], ast.IsNot)
    return None
