"""How the server's background threads — a training, the next layer computed ahead — yield the CPU to the pages:
one torch intra-op thread in that thread (the pages' script threads, a new one for each run, keep the process's
count), on Linux a higher nice value for that thread alone, and for work a page's run leaves for later (the next
layer, the collection after a server's first run), a wait while the browser draws what that run sent."""

from __future__ import annotations

import os
import sys
import threading
import time

THREADS = 1  # torch threads of a background thread: the other core stays free for every session's pages
NICENESS = 10  # its nice value: the pages' threads come first when both want a core
BROWSER_DRAWS_S = 1.5  # how long work a run leaves for later waits for the browser to draw what that run sent


def yield_to_pages() -> None:
    """Call at the start of a background thread (one of its own, never reused): ``THREADS`` torch threads and
    ``NICENESS`` for it, so that the pages' script threads come first (the browser, in a session of its own, is
    another matter: :func:`after_the_browser_draws`)."""
    import torch

    process_wide = torch.get_num_threads()  # torch sets this new thread up from the count every new thread takes
    torch.set_num_threads(THREADS)  # this thread's count, and (torch keeps one) the count threads started later take
    _set_for_new_threads(process_wide)  # which stays the process's: the pages' next script threads keep theirs
    _lower_priority()


def _set_for_new_threads(threads: int) -> None:
    """The torch thread count that threads started from now on take, leaving the calling thread's own.  Torch sets a
    thread's count up once, on its first use, from one process-wide count that ``torch.set_num_threads`` also writes
    (Streamlit runs each script run in a new thread); so a short thread of its own writes it."""
    import torch

    setter = threading.Thread(target=torch.set_num_threads, args=(threads,), name="attnviz-torch-threads")
    setter.start()
    setter.join()


def after_the_browser_draws() -> None:
    """Call in a thread a page's run starts, before work that can wait (the next layer, the collection after a
    server's first run): it waits ``BROWSER_DRAWS_S`` while the browser draws what that run sent.  A nice value does
    not make room for the browser: where the scheduler groups processes by session (Linux's autogroup, on by default
    on most desktops), the browser is in a session of its own, and a nice value ranks a thread only against its own
    session's."""
    time.sleep(BROWSER_DRAWS_S)


def _lower_priority() -> None:
    """On Linux a thread is a task with its own nice value; elsewhere, or if refused, nothing changes (on other
    systems a thread id is not a process id that ``setpriority`` could take)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        thread = threading.get_native_id()
        if os.getpriority(os.PRIO_PROCESS, thread) < NICENESS:  # never raise a thread already nicer
            os.setpriority(os.PRIO_PROCESS, thread, NICENESS)
    except (AttributeError, OSError, OverflowError):
        pass
