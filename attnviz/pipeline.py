"""text + AttentionConfig -> Trace: everything the app draws comes from one ``run()``.

``run`` bounds and tokenizes the text, asks the config's producer (:mod:`attnviz.producers`: the book's classes,
a GPT model's layer or a user's module) which config it really runs, and returns that producer's Trace.
``TraceCache`` keeps Traces by bytes for every session.  ``AttentionConfig`` and the errors live in
:mod:`attnviz.config`, ``Trace`` in :mod:`attnviz.trace`, text cleaning in :mod:`attnviz.text`.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable

from attnviz import producers, tokens
from attnviz.config import AttentionConfig, ConfigError, InputError
from attnviz.text import clean_text, prepare_text
from attnviz.trace import Trace, trace_nbytes

__all__ = ["TraceCache", "estimate_nbytes", "prepare", "prepare_in_background", "run", "run_ids", "settle"]


def run(text: str, config: AttentionConfig) -> Trace:
    """Tokenize, embed and run the configured attention, recording every named intermediate."""
    producer, config, notes = _settled(config)
    text, token_ids, text_notes = prepare_text(text, config.context_length)
    return producer.trace(text, token_ids, notes + text_notes, config)


def run_ids(token_ids, config: AttentionConfig) -> Trace:
    """``run()`` on token ids instead of text (the induction lab's repeated random tokens): the same embedding
    and module as every page shows for ``config``; raises InputError for ids outside GPT-2's vocabulary or
    the context length."""
    producer, config, notes = _settled(config)
    token_ids = [int(token) for token in token_ids]
    if not 1 <= len(token_ids) <= config.context_length:
        raise InputError(f"Expected 1 to {config.context_length} token ids, got {len(token_ids)}.")
    if min(token_ids) < 0 or max(token_ids) >= tokens.N_VOCAB:
        raise InputError(f"Token ids must be in 0…{tokens.N_VOCAB - 1}.")
    return producer.trace(tokens.decode(token_ids), token_ids, notes, config)


def settle(config: AttentionConfig) -> tuple[AttentionConfig, list[str]]:
    """(the config ``run`` really runs — ``Trace.config`` —, notes on the settings it ignores): a checkpoint's layer
    takes the checkpoint's sizes, a user's module its own, and the book's classes the sizes they decide (one head for
    a single-head class, GQA's K/V groups …); ConfigError when the config cannot run (a CheckpointError, which is
    one, when its checkpoint cannot load)."""
    return _settled(config)[1:]


def _settled(config: AttentionConfig) -> tuple[producers.Producer, AttentionConfig, list[str]]:
    if not isinstance(config, AttentionConfig):  # a dict or keyword settings would fail deep in a producer
        raise ConfigError(f"config must be an attnviz.AttentionConfig, got {type(config).__name__}: write "
                          "attnviz.AttentionConfig(num_heads=4, ...)")
    producer = producers.for_config(config)
    config, notes = producer.settle(config)
    return producer, config.validate(), notes


def prepare(config: AttentionConfig) -> None:
    """Build what the first run of ``config`` needs — the tokenizer, and what its producer builds ahead (its
    ``prepare``): for the book's classes the seeded embedding table and module; for a user's module the module, its
    sizes' probe and the seeded embedding table at its input width — so that run finds them built: the server's
    warm-up calls this in a thread.  Every call of a user's code
    runs under its time limit (:mod:`attnviz.time_limit`), in this thread as in any."""
    tokens.get_encoding()
    producers.for_config(config).prepare(config)


_warm_up_claim = threading.Lock()  # acquired by the process's one warm-up, never released


def prepare_in_background(config: AttentionConfig) -> bool:
    """:func:`prepare` in a thread ("attnviz-warm-up"), once per process; True when this call started it.  A fresh
    server's first run starts it (``app.py``) before it imports the rest of the app, so the tokenizer, the 154 MB
    seeded embedding table and the module are built while that run imports pandas and draws the sidebar (torch draws
    the table without holding the GIL).  It only saves time: the page's own run reports any problem."""
    if not _warm_up_claim.acquire(blocking=False):
        return False
    threading.Thread(target=_prepare_quietly, args=(config,), name="attnviz-warm-up", daemon=True).start()
    return True


def _prepare_quietly(config: AttentionConfig) -> None:
    with contextlib.suppress(Exception):  # the page's own run builds it again and says what went wrong
        prepare(config)


def estimate_nbytes(text: str, config: AttentionConfig) -> int:
    """About what ``run(text, config)`` will hold: five float32 (heads, n, n) maps (0 if the text is invalid)."""
    try:
        n = len(prepare_text(text, config.context_length)[1])
    except InputError:
        return 0
    return 5 * config.heads * n * n * 4


class _InFlight:
    """A run another session started for the same key: wait for its Trace (or its error)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.trace: Trace | None = None
        self.error: BaseException | None = None


class TraceCache:
    """A thread-safe LRU cache of Traces bounded by bytes, not entries: at n = 1024 a GPT-2 Trace holds
    hundreds of megabytes, while a six-token Trace holds kilobytes.

    Keyed by the text that is tokenized (:func:`clean_text`), so a 50,000-character paste and its
    40,000-character ``Trace.text`` are one entry.  Sessions that miss on a key another session is
    computing wait for that run instead of starting their own."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._traces: collections.OrderedDict[tuple, tuple[Trace, int]] = collections.OrderedDict()
        self._running: dict[tuple, _InFlight] = {}
        self._lock = threading.Lock()
        self.misses = 0  # how many get() calls had to run

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(size for _, size in self._traces.values())

    def __len__(self) -> int:
        return len(self._traces)

    def get(self, text: str, config: AttentionConfig) -> Trace:
        key = (clean_text(text)[0], config)
        with self._lock:
            if key in self._traces:
                self._traces.move_to_end(key)
                return self._traces[key][0]
            flight = self._running.get(key)
            owner = flight is None
            if owner:
                flight = self._running[key] = _InFlight()
        if not owner:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return flight.trace
        # Make room *before* running: the run's own tensors plus the cache must stay within the bound, or the
        # server's peak holds a full cache and a large new trace at once.
        trace, _ = self._run(key, text, config, flight, admit=lambda size: True,
                             before=lambda: self._evict(reserve=estimate_nbytes(text, config)))
        self._evict(reserve=0, keep=1)
        return trace

    def prefetch(self, text: str, config: AttentionConfig, nbytes: int,
                 evictable: Callable[[str, AttentionConfig], bool]) -> Trace | None:
        """Run and cache ``(text, config)`` ahead of need, only if its ``nbytes`` fit after evicting — least recently
        used first — traces ``evictable(cleaned text, config)`` allows, and no other (the caller's rule: a session's
        other layers of the input it reads, never the one on screen nor another input's).  Nothing is evicted unless
        the plan makes room; after the run the trace's real size is made room for the same way, or it is not
        cached.  Returns the cached Trace (also when it was cached already), or None."""
        key = (clean_text(text)[0], config)
        with self._lock:
            if key in self._traces:
                return self._traces[key][0]
            if key in self._running or not self._make_room(nbytes, evictable):
                return None
            flight = self._running[key] = _InFlight()
        trace, stored = self._run(key, text, config, flight, admit=lambda size: self._make_room(size, evictable))
        return trace if stored else None

    def _run(self, key: tuple, text: str, config: AttentionConfig, flight: _InFlight,
             admit: Callable[[int], bool], before: Callable[[], object] = lambda: None) -> tuple[Trace, bool]:
        """Run ``key`` as the owner of its ``flight`` (after ``before()``; outside the lock: other sessions keep
        reading), hand the trace — or the error — to whoever waits on it, and cache it if ``admit(its size)``
        (called with the lock held).  Returns (the trace, whether it is cached)."""
        try:
            before()
            trace = run(text, config)
        except BaseException as exc:
            flight.error = exc
            raise
        else:
            flight.trace = trace  # a session asking for it meanwhile gets it, cached or not
            with self._lock:
                size = trace_nbytes(trace)
                stored = admit(size)
                if stored:
                    self.misses += 1
                    self._traces[key] = (trace, size)
                    self._traces.move_to_end(key)
            return trace, stored
        finally:
            with self._lock:
                self._running.pop(key, None)
            flight.done.set()

    def _make_room(self, nbytes: int, evictable: Callable[[str, AttentionConfig], bool]) -> bool:
        """With the lock held: evict evictable traces, oldest first, until ``nbytes`` more fit — or, if they cannot,
        evict nothing and return False."""
        size = sum(entry_size for _, entry_size in self._traces.values())
        plan = []
        for other in self._traces:  # oldest first
            if size + nbytes <= self.max_bytes:
                break
            if evictable(*other):
                plan.append(other)
                size -= self._traces[other][1]
        if size + nbytes > self.max_bytes:
            return False
        for other in plan:
            del self._traces[other]
        return True

    def _evict(self, reserve: int, keep: int = 0) -> None:
        """Drop least recently used traces until they and ``reserve`` bytes fit (always keep ``keep``)."""
        with self._lock:
            while (len(self._traces) > keep
                   and sum(size for _, size in self._traces.values()) + reserve > self.max_bytes):
                self._traces.popitem(last=False)
