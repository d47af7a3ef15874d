"""A real server started with ``-- --module`` for a module whose forward kills its own process and a file that calls
``os._exit`` on import: the first page, which imports the files and runs the module (in the warm-up's thread and the
page's), says so in words, and the server still answers ``/_stcore/health`` for every other user."""

from __future__ import annotations

import urllib.request

import pytest
from helpers.browser import assert_no_exception, expect, start_server, wait_idle
from helpers.process_exits import write_ends, write_exits_on_import

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(browser_available, tmp_path_factory):
    folder = tmp_path_factory.mktemp("exits")
    ends, script = write_ends(folder), write_exits_on_import(folder)
    with start_server(("--module", f"{ends}:KillsItselfInForward", "--module", f"{script}:A")) as running:
        yield running


def test_the_server_answers_after_the_page_loaded_modules_that_would_end_it(page, server):
    page.goto(server.url)  # the server's first request: it imports both files and runs the first module
    wait_idle(page)
    assert_no_exception(page)
    expect(page.get_by_test_id("stMain")).to_contain_text("the forward called os.kill(os.getpid(), SIGKILL)")
    expect(page.get_by_test_id("stSidebar")).to_contain_text("script.py called os._exit(3) on import")
    assert server.process.poll() is None, server.tail()
    with urllib.request.urlopen(f"{server.url}/_stcore/health", timeout=10) as response:
        assert response.status == 200
