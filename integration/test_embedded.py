from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compozy_memory import StartupError
from compozy_memory.embedded import find_binary, start_server


def test_server_starts_answers_and_cleans_up() -> None:
    server = start_server()
    assert server.binary == find_binary("valkey-server")
    assert server.process.poll() is None
    with socket.create_connection(("127.0.0.1", server.port)) as conn:
        conn.sendall(b"PING\r\n")
        assert conn.recv(16) == b"+PONG\r\n"
    server.stop()
    assert server.process.poll() is not None
    assert not server.directory.exists()


def test_a_taken_port_is_a_clear_error() -> None:
    with start_server() as first, pytest.raises(StartupError, match="in use"):
        start_server(port=first.port)


def test_a_missing_binary_is_a_clear_error() -> None:
    with pytest.raises(StartupError, match="not found"):
        find_binary("no-such-server")


OWNER = """
import sys, time
from compozy_memory.embedded import start_server
server = start_server()
print(server.process.pid, server.port, server.directory, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_the_server_does_not_outlive_its_process(signum: int) -> None:
    """atexit does not run when the owner is killed: the watchdog stops the server."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert owner.stdout is not None
        pid, port, directory = owner.stdout.readline().split()
        assert _alive(int(pid))
        owner.send_signal(signum)
        owner.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(int(pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(int(pid)), f"server {pid} outlived its process"
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", int(port)), timeout=1).close()
        deadline = time.monotonic() + 10
        while Path(directory).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(directory).exists()
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()


def test_a_stopped_server_leaves_no_watchdog_behind() -> None:
    server = start_server()
    watchdog = server._watchdog
    assert watchdog is not None
    assert watchdog.poll() is None
    server.stop()
    assert watchdog.poll() == 0  # stood down, did not kill anything


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False
