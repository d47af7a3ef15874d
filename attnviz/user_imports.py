"""Runs a user's file as ``python file.py`` runs it, its own folder first on the import path for the whole run —
at import time and when its functions import later — without changing ``sys.path``: each file's modules found
beside it are its own (:class:`_Beside`), so two files in two folders each get their own ``helpers.py``."""

from __future__ import annotations

import builtins
import contextlib
import importlib.abc
import importlib.machinery
import os
import sys
import threading
import types

from attnviz import time_limit

_import_lock = threading.RLock()  # one import from a user's folder at a time: sys.modules holds its modules meanwhile


def run_beside(module_spec, module: types.ModuleType, folder: str) -> None:
    """Run the user's file (under the time limit) as ``python file.py`` runs it, its own ``folder`` first on the
    import path — for the whole run, not only its import: a ``from helpers import x`` inside its ``forward`` finds
    the ``helpers.py`` beside it too.  The path is the file's own, not the process's (:class:`_Beside`): another
    listed file in another folder gets its own ``helpers.py``, and sys.path is never changed.  A module already
    imported — the standard library's, torch's, attnviz's — is the one the file gets, whatever the folder holds."""
    beside = _Beside(folder)
    module.__dict__["__builtins__"] = beside.builtins  # the file's functions import through beside.imported
    beside.within(time_limit.call, module_spec.loader.exec_module, module)


class _Beside:
    """The modules one loaded file found in its ``folder`` (``helpers.py``, a package ``helpers/``), kept by this
    file alone, and the ``__import__`` its code — and theirs — imports with (:attr:`builtins`): a name the folder
    holds is found there first, as when the folder is ``sys.path[0]``, at import time and at call time alike.

    Python's import system needs a module in ``sys.modules`` while it is imported; :meth:`within` puts the file's
    modules there and a finder for its folder on ``sys.meta_path`` (before the path finder, where ``sys.path[0]``
    would be searched) under a lock, and takes them out again after: outside that moment the process's modules hold
    no folder's ``helpers``, and the next file's import finds its own.  An import that finds a name already kept, or
    one the folder does not hold, takes no lock and changes no global state; one the folder holds waits for another
    file's import to end before it asks whether the process has that name."""

    def __init__(self, folder: str):
        self.folder, self.modules = folder, {}
        self.builtins = {**vars(builtins), "__import__": self.imported}

    def imported(self, name, globals=None, locals=None, fromlist=(), level=0):
        """``__import__`` for the file's code and its folder's modules."""
        if level == 0:
            top = name.partition(".")[0]
            module = self.modules.get(name)
            if module is not None and not (fromlist and hasattr(module, "__path__")
                                           and any(not hasattr(module, item) for item in fromlist if item != "*")):
                return module if fromlist else self.modules[top]
            if top in self.modules or (self._holds(top) and not _in_process(top)):
                return self.within(_builtin_import, name, globals, locals, fromlist, level)
        elif (globals or {}).get("__package__", "").partition(".")[0] in self.modules:  # inside a folder's package
            return self.within(_builtin_import, name, globals, locals, fromlist, level)
        return _builtin_import(name, globals, locals, fromlist, level)

    def _holds(self, top: str) -> bool:
        try:
            return importlib.machinery.PathFinder.find_spec(top, [self.folder]) is not None
        except (ImportError, ValueError):
            return False

    def within(self, function, *args):
        """``function(*args)`` with this file's modules in sys.modules and its folder searched first."""
        with _import_lock:
            modules_before = set(sys.modules)
            shadowed = {name: sys.modules[name] for name in self.modules if name in sys.modules}
            sys.modules.update(self.modules)
            finder = _FolderFinder(self)
            path_finders = [i for i, f in enumerate(sys.meta_path) if f is importlib.machinery.PathFinder]
            sys.meta_path.insert(path_finders[0] if path_finders else len(sys.meta_path), finder)
            importlib.invalidate_caches()  # a file saved beside it since the last import is seen
            try:
                return function(*args)
            finally:
                with contextlib.suppress(ValueError):  # ValueError: the user's code removed it itself
                    sys.meta_path.remove(finder)
                for name in (set(sys.modules) - modules_before) | set(self.modules):
                    found = sys.modules.get(name)
                    if name in self.modules or _from_folder(name, found, self.folder):
                        if found is not None:
                            self.modules[name] = found
                        sys.modules.pop(name, None)
                sys.modules.update(shadowed)


def _in_process(top: str) -> bool:
    """Whether the process imported ``top`` itself (the standard library's, torch's): read under the lock, since while
    :meth:`_Beside.within` runs, sys.modules also holds another file's modules from its folder."""
    with _import_lock:
        return top in sys.modules


def _builtin_import(name, globals=None, locals=None, fromlist=(), level=0):
    return __import__(name, globals, locals, fromlist, level)  # this module's builtins: Python's own


class _FolderFinder(importlib.abc.MetaPathFinder):
    """Finds a top-level name in one user's folder (and the submodules of a package there), its source loaded with
    that file's ``__import__`` (:class:`_Beside`)."""

    def __init__(self, beside: _Beside):
        self.beside = beside

    def find_spec(self, name, path=None, target=None):
        if "." in name:  # a submodule: in its package's own path, the folder's when the package is
            spec = importlib.machinery.PathFinder.find_spec(name, path) if path else None
        else:
            spec = importlib.machinery.PathFinder.find_spec(name, [self.beside.folder])
        if spec is None:
            return None
        found = types.SimpleNamespace(__file__=spec.origin, __path__=list(spec.submodule_search_locations or []))
        if not _from_folder(name, found, self.beside.folder):
            return None
        if isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            spec.loader = _BesideLoader(spec.loader.name, spec.loader.path, self.beside)
        return spec


class _BesideLoader(importlib.machinery.SourceFileLoader):
    """Python's source loader that gives the module its file's ``__import__`` before its code runs."""

    def __init__(self, fullname: str, path: str, beside: _Beside):
        super().__init__(fullname, path)
        self.beside = beside

    def exec_module(self, module) -> None:
        module.__dict__["__builtins__"] = self.beside.builtins
        super().exec_module(module)


def _from_folder(name: str, module, folder: str) -> bool:
    """Whether the module ``name`` was found in ``folder`` itself (``folder/helpers.py``, a package
    ``folder/helpers/``, a folder without ``__init__.py``, a symlink placed there), not in a folder beneath it that is
    on sys.path anyway (a virtual environment's)."""
    top = name.partition(".")[0]
    if top == "attnviz" or top.startswith("attnviz_user_"):
        return False
    where = os.path.join(folder, top)
    files = [getattr(module, "__file__", None), *(getattr(module, "__path__", None) or [])]
    for file in files:
        if isinstance(file, str):
            for path in (os.path.abspath(file), os.path.realpath(file)):  # as found, and a symlink's target
                if path == where or path.startswith((where + ".", where + os.sep)):
                    return True
    return False
