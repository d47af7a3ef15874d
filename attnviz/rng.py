"""torch's global RNG, shared by every session's thread: ``seeded()`` holds it while a section seeds it or
draws from it, and ``built_once`` caches what seeded builders make (the book's weights need the global seed).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import threading
from collections.abc import Iterator

import torch

# torch's global RNG (seeding, dropout) is shared by all Streamlit sessions' threads.  Every section that seeds
# it or draws from it goes through seeded() (re-entrant: a seeded section may call code that takes it again).
RNG_LOCK = threading.RLock()


@contextlib.contextmanager
def seeded(seed: int | None = None, rng_state: torch.Tensor | None = None) -> Iterator[None]:
    """Hold torch's global RNG for this thread: seed it with ``seed`` (or restore ``rng_state``) on entry.

    Wrap every creation of seeded modules (the book's parameter-creation order needs the global seed)
    and every forward whose dropout is active; an eval-mode forward draws no random numbers and must not
    take it (it would serialise every session).  ``seeded()`` with neither argument only holds the lock.
    """
    with RNG_LOCK:
        if rng_state is not None:
            torch.set_rng_state(rng_state)
        elif seed is not None:
            torch.manual_seed(seed)
        yield


def built_once(maxsize: int):
    """A bounded cache for builders that draw from the seeded RNG (like ``functools.lru_cache``, with
    ``cache_clear``).  A hit takes no lock; a miss builds under ``RNG_LOCK`` — which the builders take
    anyway — and looks again first, so threads that miss on the same key at once (a page's first run beside
    the server's warm-up, :func:`prepare`) build it once.  Evicts the oldest entry."""
    def wrap(build):
        built: collections.OrderedDict = collections.OrderedDict()

        @functools.wraps(build)
        def get(*args):
            found = built.get(args)
            if found is not None:
                return found
            with RNG_LOCK:
                if args not in built:
                    built[args] = build(*args)
                    while len(built) > maxsize:
                        built.popitem(last=False)
                return built[args]

        get.cache_clear = built.clear
        return get

    return wrap
