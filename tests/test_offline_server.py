"""`streamlit run app.py`, as the README says, serves on this computer only and reaches no other host: the project's
.streamlit/config.toml sets the listening address, so Streamlit looks up no network or external IP to print."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / ".streamlit" / "config.toml"


def test_the_config_serves_on_localhost_and_gathers_no_usage_statistics():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads(CONFIG.read_text())
    assert config["server"]["address"] == "localhost"  # with no address Streamlit asks checkip.amazonaws.com
    assert config["server"]["headless"] is True
    assert config["browser"]["gatherUsageStats"] is False


# Starts Streamlit as `python -m streamlit` does, after an audit hook that writes every connect() and name look-up
# of a host other than this computer to the file named first on the command line.
STREAMLIT_WATCHED = """
import runpy, sys
LOCAL = {"localhost", "127.0.0.1", "::1", "", None}
log_path = sys.argv.pop(1)
def hook(event, args):
    host = None
    if event == "socket.connect" and isinstance(args[1], tuple):
        host = args[1][0]
    elif event == "socket.getaddrinfo":
        host = args[0]
    if isinstance(host, bytes):
        host = host.decode()
    if event in ("socket.connect", "socket.getaddrinfo") and host not in LOCAL and not str(host).startswith("127."):
        with open(log_path, "a") as log:
            log.write(f"{event} {args[1] if event == 'socket.connect' else host!r}\\n")
sys.addaudithook(hook)
sys.argv[0] = "streamlit"
runpy.run_module("streamlit", run_name="__main__", alter_sys=True)
"""


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow  # starts a fresh Streamlit server
def test_streamlit_run_app_py_reaches_no_other_host_and_prints_no_external_ip_line(tmp_path):
    port = _free_port()
    reached, out_path = tmp_path / "reached.txt", tmp_path / "out.txt"
    command = [sys.executable, "-c", STREAMLIT_WATCHED, str(reached), "run", "app.py",
               "--server.port", str(port), "--server.fileWatcherType", "none"]  # the README's command, on a free port
    with open(out_path, "wb") as out:
        process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "URL:" not in out_path.read_text(errors="replace"):
            assert process.poll() is None, out_path.read_text(errors="replace")
            assert time.monotonic() < deadline, out_path.read_text(errors="replace")
            time.sleep(0.25)
        with urllib.request.urlopen(f"http://localhost:{port}/_stcore/health", timeout=10) as response:
            assert response.status == 200
    finally:
        process.terminate()
        process.wait(timeout=20)
    assert not reached.exists(), reached.read_text()
    printed = out_path.read_text(errors="replace")
    assert "external IP" not in printed and "Network URL" not in printed, printed
    assert f"URL: http://localhost:{port}" in printed, printed
