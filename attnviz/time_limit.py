"""A time limit on a call of a user's code (a forward, a reset, a constructor): a call that runs for ``SECONDS``
without returning — a ``while`` loop whose condition never changes — is stopped, and :func:`call` raises
:class:`TimeLimitError` for the caller to say so in words.

A watchdog timer raises an exception in the calling thread (``PyThreadState_SetAsyncExc``).  It lands between two
Python bytecodes, so it stops Python code — a loop, also one that calls torch ops on every turn — but not a single C
call that blocks (``time.sleep(10**9)``, a lock's ``acquire()``, one huge torch op): the stop takes effect when that
call returns.  A stop the user's code catches itself (a bare ``except``) is raised again every ``RETRY_SECONDS``
while the call runs; none can land in the caller's code after the call.

An exception the user's code raises that is no ``Exception`` — a class of its own derived from ``BaseException``, a
``KeyboardInterrupt`` or ``GeneratorExit`` it raises itself — would pass every ``except Exception`` and end a
Streamlit script's thread or the command line with a traceback: :func:`call` hands it back as a
:class:`RaisedBaseError` (an ``Exception``), and :func:`described` names the user's own.  ``SystemExit`` passes as
itself (each caller says "called sys.exit(…)", :func:`exit_call`) — so does the
:class:`attnviz.exit_guard.ProcessEndError` that a call which would end the process (``os._exit``, ``os.kill`` of
itself …) raises instead while :func:`call` runs (:mod:`attnviz.exit_guard`) —, and so does a real Ctrl+C: while the
call runs in the main thread, a SIGINT handler wrapped around the process's own (:class:`_Interrupts`) notes the
signal, so the ``KeyboardInterrupt`` the signal raises still stops the program; in any other thread no signal can
raise one, so every ``KeyboardInterrupt`` there is the user's code's.  attnviz's own code that runs inside the call (a
check's progress report, from a forward hook, which may draw a Streamlit element and so be stopped by Streamlit) says
so with :func:`own_code`, and what it raises passes as itself too."""

from __future__ import annotations

import ast
import contextlib
import ctypes
import linecache
import os
import signal
import sys
import threading
import traceback

from attnviz import exit_guard

SECONDS = 60.0  # a call of a user's code that runs longer than this is stopped


class TimeLimitError(Exception):
    """A call of the user's code ran for ``seconds`` without returning and was stopped."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"ran for {seconds:g} s without returning (an endless loop?)")
        self.seconds = seconds


class StopCall(BaseException):  # noqa: N818  (a stop, not an error)
    """attnviz's own way to end a call of the user's code early (the watchdog's stop, the recorder's, a probe's): a
    BaseException, so that the user's ``except Exception`` passes it, which :func:`call` hands on as itself, never as
    the user's exception."""


class RaisedBaseError(Exception):
    """The user's code raised ``error``, a ``BaseException`` that is no ``Exception`` (nor ``SystemExit``, nor the
    ``KeyboardInterrupt`` of a real Ctrl+C), wrapped as an ``Exception`` so that it is reported like any other."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


OWN = "_attnviz_own"  # the mark own_code() sets on a BaseException raised by attnviz's code inside the user's call


@contextlib.contextmanager
def own_code():
    """Around attnviz's own code that runs inside a call of the user's code (a forward hook's progress report): a
    BaseException it raises — Streamlit stopping the script run at the report's next element, a ``KeyboardInterrupt``
    of the caller's — passes :func:`call` as itself, never as the user's exception."""
    try:
        yield
    except BaseException as error:
        if not isinstance(error, Exception):
            with contextlib.suppress(AttributeError):  # an exception class with __slots__ keeps no mark
                setattr(error, OWN, True)
        raise


def described(error: BaseException, when: str = "") -> str:
    """"RuntimeError{when}: the message" of an exception the user's code raised, on one line (:func:`one_line`), or
    its name alone when it has no message ("KeyboardInterrupt"); the user's own exception's for a
    :class:`RaisedBaseError`."""
    error = error.error if isinstance(error, RaisedBaseError) else error
    said = " ".join(str(error).split())
    return f"{type(error).__name__}{when}: {one_line(error)}" if said else f"{type(error).__name__}{when}"


class UserCallError(Exception):
    """A call of the user's code raised, called ``sys.exit`` or ran out of time; the message is one line naming the
    call (:func:`call_in_words`)."""


def one_line(error: BaseException) -> str:
    """An exception's message on one line (at most 300 characters)."""
    text = " ".join(str(error).split())
    return text[:300] or type(error).__name__


def failed_assertion(error: AssertionError, when: str = "") -> str:
    """"failed an assertion{when} (file.py, line 8): …" — the assertion's own message, or when it has none the
    ``assert`` statement as written (on one line), read from the file of the frame that raised it."""
    frames = traceback.extract_tb(error.__traceback__)
    frame = frames[-1] if frames else None
    where = f" ({os.path.basename(frame.filename)}, line {frame.lineno})" if frame is not None else ""
    said = " ".join(str(error).split())[:300] or (_assert_statement(frame) if frame is not None else None)
    return f"failed an assertion{when}{where}" + (f": {said}" if said else "")


def _assert_statement(frame: traceback.FrameSummary) -> str | None:
    """The ``assert`` statement that ``frame`` stopped at, as written, on one line (the frame's line when its file
    cannot be parsed or the line holds no assert)."""
    source = "".join(linecache.getlines(frame.filename))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # the file changed since, or is no source
        tree = None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Assert) and node.lineno <= frame.lineno <= (node.end_lineno or node.lineno):
            text = ast.get_source_segment(source, node)
            if text:
                return " ".join(text.split())[:300]
    return frame.line or None


def exit_call(stop: SystemExit) -> str:
    """The call that stopped the user's code: "sys.exit(3)", or one that would have ended the process and raised
    instead (:mod:`attnviz.exit_guard`): "os._exit(0)", "os.kill(os.getpid(), SIGTERM)"."""
    return stop.call if isinstance(stop, exit_guard.ProcessEndError) else f"sys.exit({stop.code!r})"


def call_in_words(name: str, function, /, *args, **kwargs):
    """:func:`call` of ``function(*args, **kwargs)``, whose failure is a :class:`UserCallError` that begins with
    ``name`` (``"MyAttention.reset_cache()"``): "… raised RuntimeError: …", "… failed an assertion (file.py, line 8):
    assert d_out % num_heads == 0", "… called sys.exit(3)" or "… ran for 60 s without returning (an endless loop?)"."""
    try:
        return call(function, *args, **kwargs)
    except TimeLimitError as out:
        raise UserCallError(f"{name} {out}") from None
    except AssertionError as error:  # a bare assert's message is empty: its source line says what failed
        raise UserCallError(f"{name} {failed_assertion(error)}") from None
    except Exception as error:  # the user's code: any exception is theirs, reported in one line
        raise UserCallError(f"{name} raised {described(error)}") from None
    except SystemExit as stop:  # a sys.exit() in the user's code would end the notebook's kernel or the CLI's run
        raise UserCallError(f"{name} called {exit_call(stop)}") from None


def call(function, *args, **kwargs):
    """``function(*args, **kwargs)`` with the time limit ``SECONDS`` (read at each call): its result, its own
    exception — one that is no ``Exception`` as a :class:`RaisedBaseError`, but ``SystemExit``, a real Ctrl+C's
    ``KeyboardInterrupt`` and attnviz's own :class:`StopCall` as themselves —, or :class:`TimeLimitError` when the
    watchdog stopped it (whatever the stopped code raised then)."""
    watchdog = _Watchdog(SECONDS)
    # taken out after the watchdog is disarmed, and after the verdict below; os._exit and its kind raise meanwhile
    with _Interrupts() as interrupts, exit_guard.guarded():
        try:
            try:
                watchdog.arm()
                return function(*args, **kwargs)
            finally:
                watchdog.disarm()
        except BaseException as error:
            if watchdog.fired:
                raise TimeLimitError(watchdog.seconds) from None
            if isinstance(error, (Exception, SystemExit, StopCall)) or interrupts.seen or getattr(error, OWN, False):
                raise
            raise RaisedBaseError(error) from error


class _Interrupts:
    """Within it, in the main thread: whether a SIGINT (Ctrl+C) arrived (``seen``).  The process's own handler stays
    in charge — it is called as before, and raises the ``KeyboardInterrupt`` —; this one only notes the signal first,
    and is taken out again on leaving.  Elsewhere (another thread, a SIGINT that is ignored or has no Python handler)
    nothing is installed, and ``seen`` stays False."""

    def __init__(self) -> None:
        self.seen = False
        self.before = None

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():
            before = signal.getsignal(signal.SIGINT)
            if callable(before):
                self.before = before
                signal.signal(signal.SIGINT, self._noted)
        return self

    def _noted(self, signum, frame):
        self.seen = True
        return self.before(signum, frame)

    def __exit__(self, *exc_info) -> None:
        if self.before is not None and signal.getsignal(signal.SIGINT) == self._noted:
            signal.signal(signal.SIGINT, self.before)


class _Stopped(StopCall):
    """What the watchdog raises in a call that runs too long (a BaseException: ``except Exception`` passes it)."""


RETRY_SECONDS = 0.1  # a stop that a __del__ or a weakref callback swallowed is raised again this much later


class _Watchdog:
    """Raises :class:`_Stopped` in the thread that armed it when ``seconds`` pass before it is disarmed, and again
    every ``RETRY_SECONDS`` while it stays armed: one that lands in a ``__del__`` or a weakref callback that the
    calling thread runs is not raised but handed to ``sys.unraisablehook`` (which, once a watchdog is armed, drops
    a ``_Stopped`` instead of printing it).

    The exception is set with ``PyThreadState_SetAsyncExc`` under ``lock``, and only while armed; ``disarm`` takes
    the lock too, so once it returns the timer can set nothing more, and an exception set but not yet raised is
    cleared: it can never land in the caller's code after the call."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.thread_id = threading.get_ident()
        self.lock = threading.Lock()
        self.armed = False
        self.fired = False  # the exception was set (raised in the call, or cleared by disarm)
        self.timer = self._timer(seconds)

    def _timer(self, seconds: float) -> threading.Timer:
        timer = threading.Timer(seconds, self._fire)
        timer.daemon = True  # a process that ends does not wait for it
        return timer

    def arm(self) -> None:
        if not getattr(sys.unraisablehook, "drops_stops", False):
            sys.unraisablehook = _dropping_stops(sys.unraisablehook)
        self.armed = True
        self.timer.start()

    def _fire(self) -> None:
        with self.lock:
            if self.armed:
                self.fired = True
                _set_async_exc(self.thread_id, _Stopped)
                self.timer = self._timer(RETRY_SECONDS)
                self.timer.start()

    def disarm(self) -> None:
        with self.lock:
            self.armed = False
            self.timer.cancel()
            if self.fired:  # set, and maybe not raised yet: clear it
                _set_async_exc(self.thread_id, None)


def _dropping_stops(hook):
    """``sys.unraisablehook`` ``hook`` that drops a :class:`_Stopped` (the watchdog raises it again)."""
    def drop_stops(unraisable) -> None:
        if unraisable.exc_type is not _Stopped:
            hook(unraisable)

    drop_stops.drops_stops = True
    return drop_stops


def _set_async_exc(thread_id: int, exception: type[BaseException] | None) -> None:
    """Set (or, with None, clear) the exception the thread ``thread_id`` raises at its next Python bytecode."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               ctypes.py_object(exception) if exception is not None else None)
