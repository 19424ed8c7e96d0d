from __future__ import annotations

import socket

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
