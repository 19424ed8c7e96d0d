"""Real engines for the integration tests, and what spawned worker processes need to reach them."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from redis.asyncio import Redis

from compozy_memory import connect
from compozy_memory._io.translate import RedisClient
from compozy_memory.embedded import EmbeddedCluster, EmbeddedServer


def redis7_binary() -> str | None:
    return shutil.which("redis-server")


def require_redis7(what: str = "Redis 7") -> str:
    """The redis-server binary, or skip the calling test or fixture without one.

    Where ``COMPOZY_REQUIRE_REDIS7=1`` (``.ci/run`` sets it when it could install the
    server) a missing binary fails instead: a Redis 7 test must never skip silently there.
    """
    import pytest  # here, not above: the worker processes that import this module run no tests

    binary = redis7_binary()
    if binary is None:
        if os.environ.get("COMPOZY_REQUIRE_REDIS7") == "1":
            pytest.fail(f"COMPOZY_REQUIRE_REDIS7=1 but redis-server ({what}) is not on PATH")
        pytest.skip(f"redis-server ({what}) is not on PATH")
    return binary


@dataclass(frozen=True)
class EngineSpec:
    """Picklable: enough for another process to connect."""

    name: str
    url: str
    cluster: bool
    node_urls: tuple[str, ...]

    def client(self, **options: object) -> RedisClient:
        return connect(self.url, cluster=self.cluster, **options)

    def node_clients(self) -> list[Redis]:
        """One plain client per server (every master of a cluster)."""
        return [Redis.from_url(url) for url in self.node_urls]


def spec_for(name: str, engine: EmbeddedServer | EmbeddedCluster) -> EngineSpec:
    if isinstance(engine, EmbeddedCluster):
        return EngineSpec(name, engine.url, True, tuple(n.url for n in engine.nodes))
    return EngineSpec(name, engine.url, False, (engine.url,))
