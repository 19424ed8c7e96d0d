"""The pytest plugin's fixtures, used as a project that installs compozy-memory would."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from compozy_memory import MemoryInstance, MemoryPolicy, connect
from compozy_memory._io.delivery import delivery_for
from compozy_memory.embedded import EmbeddedServer
from compozy_memory.testing.plugin import ContainerRedis, docker_engine_answers
from integration.memories import COUNTER


def test_the_plugin_is_registered_by_its_entry_point(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.pluginmanager.has_plugin("compozy_memory")


def test_compozy_server_is_a_running_server(compozy_server: EmbeddedServer) -> None:
    assert compozy_server.process.poll() is None
    with socket.create_connection(("127.0.0.1", compozy_server.port)) as conn:
        conn.sendall(b"PING\r\n")
        assert conn.recv(16) == b"+PONG\r\n"


async def exercise(client: Any) -> None:
    """The library's operations, each checked, on ``client``."""
    memory = MemoryInstance.open(
        client, project="plugin", key="user 1", counter=COUNTER, policy=MemoryPolicy()
    )
    await memory.append({"role": "system", "content": "rules", "priority": 0})
    first = await memory.append_many(
        [{"role": "user", "content": f"m{i}"} for i in range(6)], dedupe_key="event-1"
    )
    again = await memory.append_many([{"role": "user", "content": "x"}], dedupe_key="event-1")
    assert again.duplicate
    assert again.last_id == first.last_id  # nothing stored
    assert [m.text for m in await memory.read()] == ["rules", *(f"m{i}" for i in range(6))]
    # Pinned messages lead every window; the newest others fill the rest of the budget.
    assert [m.text for m in await memory.read_window(5 + 2 * 4)] == ["rules", "m4", "m5"]
    trimmed = await memory.trim(keep_messages=3)
    assert trimmed.removed_count == 4
    assert [m.text for m in await memory.read()] == ["rules", "m4", "m5"]  # priority 0 stays
    assert len(await memory.recall()) == 4
    await memory.replace([{"role": "user", "content": "fresh"}], if_last_id=first.last_id)
    assert await memory.len() == 1
    assert await memory.set_ttl(60) >= 2
    assert 0 < ((await memory.health()).ttl_ms or 0) <= 60_000
    assert await memory.clear() == 1
    assert await memory.read() == []


async def test_compozy_client_runs_the_library(compozy_client: Any) -> None:
    assert await compozy_client.dbsize() == 0  # flushed before the test
    await exercise(compozy_client)
    assert delivery_for(compozy_client).mode == "functions"


async def test_compozy_fakeredis_runs_the_library_by_functions(compozy_fakeredis: Any) -> None:
    await exercise(compozy_fakeredis)
    # fakeredis has Redis Functions, so calls go by FCALL as on a real server.
    assert delivery_for(compozy_fakeredis).mode == "functions"


async def test_each_fakeredis_is_a_fresh_server(compozy_fakeredis: Any) -> None:
    assert await compozy_fakeredis.dbsize() == 0


async def test_compozy_container_runs_the_library(compozy_container: ContainerRedis) -> None:
    client = connect(compozy_container.url)
    try:
        await exercise(client)
    finally:
        await client.aclose()


def test_without_docker_the_container_fixture_skips_saying_why(
    request: pytest.FixtureRequest,
) -> None:
    if docker_engine_answers() is None:
        pytest.skip("a Docker engine answers here: the container fixture runs instead")
    with pytest.raises(pytest.skip.Exception, match="compozy_container needs Docker: "):
        request.getfixturevalue("compozy_container")
