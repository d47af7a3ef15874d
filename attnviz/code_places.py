"""Finds, for a line a traced module's forward ran, the class or function of its own code whose source holds it — the
module's class, a submodule's class (a GPT's blocks' attention), a base class, a helper method, a function of their
files — read with ``inspect`` from those class objects alone: no file is opened by a name a recording or a browser
gives.  A line in a file the user did not hand over (a library's) is named, not read.  Which method of a class holds a
line (:func:`method_holding`) is found here for the checker too (:func:`attnviz.rule_base.layers_computing`)."""

from __future__ import annotations

import inspect
import os
import site
import sysconfig
import tokenize
import weakref

from torch import nn

from attnviz.trace import StageSource

_SOURCES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # class or function -> (its lines, its first line)
_METHODS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # class -> the methods it resolves, not torch's
# what inspect raises on a file it cannot read as the class was: gone or never a file (OSError), a built-in
# (TypeError), saved mid-edit since the import (SyntaxError for a class's lines, tokenize.TokenError for a function's)
_UNREADABLE = (TypeError, OSError, SyntaxError, tokenize.TokenError)


def _installed() -> tuple[str, ...]:
    """The folders installed packages and the standard library are in, the user's own site-packages among them."""
    folders = {sysconfig.get_paths().get(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(os.path.abspath(folder) + os.sep for folder in (*folders, site.getusersitepackages()) if folder)


_INSTALLED = _installed()


def source_lines(obj) -> tuple[tuple[str, ...], int]:
    """(the source lines of the class or function ``obj``, the number of its first line), read once an object —
    Python finds a class's lines by parsing the whole file that defines it, a noticeable time for a long file on
    every new text; ((), 1) where Python cannot read them.  A file saved since and imported anew defines another
    class, read anew."""
    found = _SOURCES.get(obj)
    if found is None:
        try:
            lines, first = inspect.getsourcelines(obj)
            found = tuple(lines), first
        except _UNREADABLE:
            found = (), 1
        _SOURCES[obj] = found
    return found


def users_file(path: str, own_file: str | None) -> bool:
    """Whether ``path`` is a file the user handed over: the file of the module's class (``own_file``), or one in its
    folder (a ``helpers.py`` beside it, a package of it: the files a listed module imports from its folder) that no
    installed package or the standard library holds."""
    if own_file is None:
        return False
    own = os.path.abspath(own_file)
    if path == own:
        return True
    return path.startswith(os.path.dirname(own) + os.sep) and not path.startswith(_INSTALLED)


def _function(value):
    """The plain Python function a class attribute holds (a method, a staticmethod's or classmethod's), else None."""
    value = getattr(value, "__func__", value)
    return value if inspect.isfunction(value) else None


class CodePlaces:
    """The classes and functions of ``module``'s own code, searched for the line that computed a stage: the classes
    of the module and its submodules and their bases (not torch's), then the functions and classes of the files
    that define them (what those classes' methods see as their globals).  ``own_file``: the file of the module's
    class; ``name_file``: how a library's file is named (:func:`attnviz.tracing.op_place`'s naming), the user's
    being named by its name alone."""

    def __init__(self, module: nn.Module, own_file: str | None, name_file=os.path.basename):
        self.top, self.own_file, self.name_file = type(module), own_file, name_file
        self.classes: list[type] = []
        for sub in module.modules():
            for cls in type(sub).__mro__:
                if cls not in self.classes and cls is not object and not cls.__module__.startswith("torch."):
                    self.classes.append(cls)
        self._others: list | None = None  # the functions and classes of their files, found when first needed

    def others(self) -> list:
        """The functions and classes in the globals of the classes' methods: a helper function of the same file, one
        imported into it, a plain class the forward calls."""
        if self._others is None:
            spaces, found = {}, []
            for cls in self.classes:
                for value in vars(cls).values():
                    if (function := _function(value)) is not None:
                        spaces.setdefault(id(function.__globals__), function.__globals__)
            for space in spaces.values():
                for value in list(space.values()):
                    if (inspect.isfunction(value) or inspect.isclass(value)) and value not in self.classes \
                            and value not in found:
                        found.append(value)
            self._others = found
        return self._others

    def place(self, filename: str | None, line: int) -> StageSource | None:
        """Where line ``line`` of ``filename`` (an op's, as the recording gives it) is in the module's own code: the
        class one of whose methods holds it, and that method, else the function that holds it; None where no file
        is known."""
        if filename is None:
            return None
        path = os.path.abspath(filename)
        mine = users_file(path, self.own_file)
        holder = self._class_holding(self.classes, path, line) or self._other_holding(path, line)
        named = os.path.basename(path) if mine else self.name_file(path)
        if holder is None:
            return StageSource(owner="", function="", filename=path, file_named=named, line=line, library=not mine)
        lines, first = source_lines(holder)
        method = method_holding(holder, path, line) if inspect.isclass(holder) else None
        return StageSource(owner=holder.__name__, function="" if method is None else method, filename=path,
                           file_named=named, line=line, source="".join(lines) if mine else "", first_line=first,
                           library=not mine, top=holder is self.top)

    @staticmethod
    def _class_holding(classes, path: str, line: int):
        """The first of ``classes`` one of whose own methods holds ``line`` of ``path`` — read off the methods' code,
        as Python finds a class's own lines by parsing its whole file, once a class: only the class shown is."""
        return next((cls for cls in classes if method_holding(cls, path, line) is not None), None)

    def _other_holding(self, path: str, line: int):
        """The function, or the class by one of its methods, of :meth:`others` whose source holds ``line`` of
        ``path``."""
        for other in self.others():
            if inspect.isfunction(other) and holds(other, path, line):
                return other
            if inspect.isclass(other) and method_holding(other, path, line) is not None:
                return other
        return None


def holds(function, path: str, line: int) -> bool:
    """Whether the source of ``function`` (a plain function, a method, a staticmethod's or classmethod's; the function
    a decorator wraps) is in file ``path`` (absolute) and holds ``line``; False for anything else, or where Python
    cannot read it."""
    function = _function(function)
    if function is None:
        return False
    try:
        function = inspect.unwrap(function)
    except ValueError:  # a wrapper that wraps itself
        return False
    code = getattr(function, "__code__", None)
    if code is None or code.co_firstlineno > line or os.path.abspath(code.co_filename) != path:
        return False
    lines, first = source_lines(function)
    return first <= line < first + len(lines)


def method_holding(cls: type, path: str, line: int, inherited: bool = False) -> str | None:
    """The name of the method of ``cls`` whose source holds ``line`` of ``path`` (absolute): one of its own (a base's
    is the base's), or with ``inherited`` any it resolves that is not torch's — as the class resolves it, so a
    subclass that overrides a method does not hold its parent's."""
    methods = _resolved(cls) if inherited else vars(cls).items()
    return next((name for name, value in methods if holds(value, path, line)), None)


def _resolved(cls: type) -> tuple:
    """(name, function) of each method ``cls`` resolves that is not torch's, found once a class."""
    if cls not in _METHODS:
        _METHODS[cls] = tuple((name, method) for name, method in inspect.getmembers(cls, inspect.isfunction)
                              if (method.__module__ or "").split(".")[0] != "torch")
    return _METHODS[cls]
