"""attnviz.background: a background thread's own torch threads and nice value leave the pages' threads theirs."""

import threading

import pytest
import torch

from attnviz.background import THREADS, yield_to_pages


def in_a_new_thread(work):
    """``work()``'s return value, run in a thread of its own (as Streamlit runs each script run)."""
    seen = []
    thread = threading.Thread(target=lambda: seen.append(work()))
    thread.start()
    thread.join()
    return seen[0]


@pytest.mark.usefixtures("several_torch_threads")  # the process's count: 3
def test_a_page_run_after_a_training_started_keeps_the_processs_torch_threads():
    """A training (or the next layer computed ahead) takes one torch thread for itself; a page's next script run,
    a new thread, keeps the process's count (the Benchmark page times with it)."""
    def background():
        yield_to_pages()
        return torch.get_num_threads()

    assert in_a_new_thread(background) == THREADS
    assert in_a_new_thread(torch.get_num_threads) == 3
    assert torch.get_num_threads() == 3  # this thread: unchanged
