"""Keeps a user's code from ending the process it runs in: while it runs (:func:`guarded`, around each call of it:
its import, its constructor, its forward), a call that would end or replace the process — ``os._exit``,
``os.abort``, ``os.kill``/``os.killpg`` of this process or its group, ``signal.raise_signal``,
``signal.pthread_kill``, ``os.exec*`` — raises :class:`ProcessEndError` instead, which the caller reports in words
("called os._exit(0)") as it reports ``sys.exit``.  A Streamlit server serves every user from one process: one
module's ``os._exit(0)`` would end it for all.

Python offers no hook for all of these calls (an audit hook, which cannot be taken out again, sees ``os.kill`` and
``os.exec*`` but not ``os._exit``, ``os.abort`` nor ``signal.raise_signal``), so :func:`guarded` puts a wrapper in
place of each function on the modules that hold it (``os`` and ``posix``/``nt``, ``signal`` and ``_signal``) while
at least one thread runs a user's code, and puts the originals back when the last one returns — also when the user's
code raises.  The wrapper acts only in a thread that is inside :func:`guarded`; in every other thread — Streamlit's,
a training job's, attnviz's own — and in a thread outside it, it calls the original, unchanged.  A function the
user's file bound at import (``from os import _exit``) is the wrapper, and stays as safe when its forward calls it.
A child process forked inside the guard (``multiprocessing``'s fork) leaves it at once: its ``os._exit`` ends the
child.

What it cannot stop: a thread the user's code starts (it is not inside the guard), a C extension's own ``exit()``
or ``abort()`` (``ctypes``), a crash (a segmentation fault), a signal sent by another process (``os.system("kill
…")``, ``subprocess``) or set to come later (``signal.alarm``), and a function the user's code reaches other than
through these modules' attributes."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading

try:
    import _signal
except ImportError:  # an interpreter whose signal module is all Python's
    _signal = None


class ProcessEndError(SystemExit):
    """The user's code called a function that ends the process (``call``: "os._exit(0)", "os.kill(os.getpid(),
    SIGTERM)"): a ``SystemExit``, so that every place that reports a user's ``sys.exit`` in words reports it too, and
    the user's ``except Exception`` passes it as it passes ``sys.exit``."""

    def __init__(self, call: str) -> None:
        super().__init__(f"called {call}, which would end attnviz")
        self.call = call


_state = threading.local()  # depth: how many guarded() the current thread is inside
_lock = threading.Lock()
_active = 0  # how many guarded() are open, in all threads: the wrappers are in place while it is above 0


def _depth() -> int:
    return getattr(_state, "depth", 0)


def _signal_name(signum) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


def _pid_text(pid: int) -> str:
    return "os.getpid()" if pid == os.getpid() else str(pid)


def _this_process_group(pgid: int) -> bool:
    getpgrp = getattr(os, "getpgrp", None)
    return pgid == 0 or (getpgrp is not None and pgid == getpgrp())


def _kills_this_process(pid: int, signum) -> bool:
    """Whether ``os.kill(pid, signum)`` signals this process: itself, its group (0, -group), every process (-1)."""
    return signum != 0 and (pid in (os.getpid(), 0, -1) or (pid < -1 and _this_process_group(-pid)))


# the function's name -> what its call ends the process with, in words; None: this call does not (another process)
def _exit_words(status=0, *_):
    return f"os._exit({status!r})"


def _abort_words(*_):
    return "os.abort()"


def _kill_words(pid, signum, *_):
    return f"os.kill({_pid_text(pid)}, {_signal_name(signum)})" if _kills_this_process(pid, signum) else None


def _killpg_words(pgid, signum, *_):
    return f"os.killpg({pgid}, {_signal_name(signum)})" if signum != 0 and _this_process_group(pgid) else None


def _raise_signal_words(signum, *_):
    return f"signal.raise_signal({_signal_name(signum)})"


def _pthread_kill_words(thread_id, signum, *_):
    return f"signal.pthread_kill(…, {_signal_name(signum)})" if signum != 0 else None


def _exec_words(name):
    return lambda *_: f"os.{name}(…)"  # its arguments name files of the server's: not said


WORDS = {"_exit": _exit_words, "abort": _abort_words, "kill": _kill_words, "killpg": _killpg_words,
         "execv": _exec_words("execv"), "execve": _exec_words("execve")}  # os.execl … and execvp … call these
SIGNAL_WORDS = {"raise_signal": _raise_signal_words, "pthread_kill": _pthread_kill_words}


def _guarding(original, words):
    """``original``, which in a guarded thread raises :class:`ProcessEndError` instead of ending the process."""
    @functools.wraps(original)
    def guarding(*args, **kwargs):
        if _depth() > 0:
            try:
                said = words(*args, **kwargs)
            except (TypeError, ValueError):  # arguments the original refuses: its own error says so
                said = None
            if said is not None:
                raise ProcessEndError(said)
        return original(*args, **kwargs)

    guarding.guards = original
    return guarding


def _places() -> list[tuple[object, str, object, object]]:
    """(module, name, original, wrapper) for each guarded function on each module that holds it."""
    places = []
    os_modules = [os, sys.modules.get(os.name)]  # posix (or nt): os's functions are its, reachable there too
    signal_modules = [signal, _signal]
    for modules, table in ((os_modules, WORDS), (signal_modules, SIGNAL_WORDS)):
        for name, words in table.items():
            original = getattr(modules[0], name, None)
            if original is None:
                continue
            wrapper = _guarding(original, words)
            places += [(module, name, original, wrapper) for module in modules
                       if module is not None and getattr(module, name, None) is original]
    return places


_PLACES = _places()


def _put(wrappers: bool) -> None:
    """Put the wrappers in place of the originals (``wrappers``), or the originals back where a wrapper is."""
    for module, name, original, wrapper in _PLACES:
        old, new = (original, wrapper) if wrappers else (wrapper, original)
        if getattr(module, name, None) is old:
            setattr(module, name, new)


@contextlib.contextmanager
def guarded():
    """Within it, in this thread: a call that would end the process raises :class:`ProcessEndError` (see the module's
    docstring).  Nests; other threads are not affected."""
    global _active
    with _lock:
        _active += 1
        if _active == 1:
            _put(wrappers=True)
    _state.depth = _depth() + 1
    try:
        yield
    finally:
        _state.depth -= 1
        with _lock:
            _active -= 1
            if _active == 0:
                _put(wrappers=False)


def _forked_child() -> None:
    """In a child forked inside the guard: no thread of it is guarded, and its functions are the originals."""
    global _active, _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    _active = 0
    _state.depth = 0
    _put(wrappers=False)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked_child)
