"""Session-wide real servers: Valkey standalone, Redis 7 standalone, a 3-master Valkey cluster."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from compozy_memory._io.translate import RedisClient
from compozy_memory.embedded import EmbeddedCluster, EmbeddedServer, start_cluster, start_server
from integration.engines import EngineSpec, require_redis7, spec_for
from integration.faults import Tally
from reliability_rows import Row, record_row, reproduce

ENGINES = ["valkey", "redis7", pytest.param("valkey-cluster", marks=pytest.mark.cluster)]


@pytest.fixture(scope="session")
def valkey_server() -> Iterator[EmbeddedServer]:
    with start_server() as server:
        yield server


@pytest.fixture(scope="session")
def redis7_server() -> Iterator[EmbeddedServer]:
    with start_server(require_redis7()) as server:
        yield server


@pytest.fixture(scope="session")
def valkey_cluster() -> Iterator[EmbeddedCluster]:
    with start_cluster(3) as cluster:
        yield cluster


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> EngineSpec:
    name: str = request.param
    fixture = {"valkey": "valkey_server", "redis7": "redis7_server"}.get(name, "valkey_cluster")
    return spec_for(name, request.getfixturevalue(fixture))


@pytest.fixture
async def client(engine: EngineSpec) -> AsyncIterator[RedisClient]:
    redis = engine.client()
    yield redis
    await redis.aclose()


@pytest.fixture
def memory_key() -> str:
    return f"conv:{uuid.uuid4().hex}"


@pytest.fixture(params=["valkey", "redis7"])
def standalone(request: pytest.FixtureRequest) -> EngineSpec:
    """A standalone server of each engine (the proxy and replica tests need one address)."""
    name: str = request.param
    return spec_for(name, request.getfixturevalue(f"{name}_server"))


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Save a row of RELIABILITY.md, with the command that reproduces this test."""
    nodeid = request.node.nodeid

    def save(*, tally: Tally | None = None, **fields: Any) -> None:
        if tally is not None:  # the counts of a load, as integration.faults.tally made them
            fields |= {
                "operations": tally.operations,
                "acknowledged": tally.acknowledged,
                "lost": tally.lost,
                "duplicated": tally.duplicated,
            }
        record_row(Row(command=reproduce(nodeid), **fields), nodeid)

    return save
