"""Argument counts and the server limits that bound a tenant (issue 32, item 3).

The server makes every argument of a call a Lua string before a function's first line runs:
a million ids cost it about half a second whatever the function then refuses. So no call of
the library sends more arguments than its script takes (``VARIADIC_MOST``): past that it is
refused before anything is sent. What a tenant sends by hand is bounded by the server's
``client-query-buffer-limit`` and ``proto-max-bulk-len``, which ``health()`` and
``compozy-memory show`` report, with a warning where they let a tenant send far more than
compozy-memory does.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis

from compozy_memory import UsageError
from compozy_memory._io.translate import RedisClient
from compozy_memory._wire.eviction import LIMIT_SETTINGS, SHARED_SERVER_LIMIT
from integration.engines import EngineSpec
from integration.memories import memory, turn

pytestmark = pytest.mark.faults

MILLION = 1_000_000


def script_calls(engine: EngineSpec) -> int:
    """FCALL, FCALL_RO and EVALSHA calls every node has answered."""
    total = 0
    for url in engine.node_urls:
        node = redis.Redis.from_url(url)
        stats = node.info("commandstats")
        node.close()
        total += sum(
            int(v["calls"])
            for k, v in stats.items()
            if k.lower() in ("cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_evalsha")
        )
    return total


async def test_no_library_call_sends_more_arguments_than_its_script_takes(
    engine: EngineSpec, client: RedisClient, memory_key: str, record: Callable[..., None]
) -> None:
    mem = memory(client, memory_key)
    mem.indexer.background = False
    await mem.append_many([turn(i) for i in range(1, 11)])
    await mem.indexer.catch_up()
    gateway = mem.gateway
    ids = list(range(1, MILLION + 1))
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "promote (recall) of 1,000,000 ids": lambda: mem.transport.drive(gateway.promote(ids, 0)),
        "search_fetch of 1,000,000 candidates": lambda: mem.transport.drive(
            gateway.search_fetch(ids, limit=10)
        ),
        "facts_delete of 1,000,000 keys": lambda: mem.transport.drive(
            gateway.facts_delete([f"k{i}".encode() for i in range(MILLION)])
        ),
        "index_read of 1,000,000 fields": lambda: mem.transport.drive(
            gateway.index_read(fields=[f"1.{i}" for i in range(MILLION)])
        ),
    }
    sent = script_calls(engine)
    refused = 0
    started = time.perf_counter()
    for name, call in calls.items():
        with pytest.raises(UsageError, match="nothing was sent"):
            await call()
        refused += 1
        assert name
    took = time.perf_counter() - started
    reached = script_calls(engine) - sent
    assert reached == 0
    record(
        group="adversarial-3",
        item=3,
        fault="the library's own calls asked to carry 1,000,000 arguments: promote (recall), "
        "search_fetch, facts_delete, index_read",
        engine=engine.name,
        promise="no library call sends more arguments than its script takes: UsageError "
        "before anything is sent; the server converts nothing",
        operations=len(calls),
        acknowledged=len(calls) - refused,
        lost=reached,  # calls that reached the server
        duplicated=0,
        observed=f"{refused} of {len(calls)} refused with UsageError in {took * 1000:.0f} ms "
        f"(client side); {reached} script calls reached the server (INFO commandstats)",
    )


async def test_health_reports_the_limits_that_bound_a_tenant(
    engine: EngineSpec, client: RedisClient, memory_key: str, record: Callable[..., None]
) -> None:
    """At the servers' defaults health() warns; at the advised limits it does not, and an
    argument past proto-max-bulk-len (a value a tenant would plant) is refused. (No setting
    bounds how many arguments a call has: maxmemory-clients counts their bytes, and a million
    one-byte arguments pass it; the library's own calls are capped, above.)"""
    mem = memory(client, memory_key)
    await mem.append(turn(1))
    nodes = [redis.Redis.from_url(url) for url in engine.node_urls]
    saved = [node.config_get(*LIMIT_SETTINGS) for node in nodes]
    advised = {
        "proto-max-bulk-len": str(SHARED_SERVER_LIMIT),
        "client-query-buffer-limit": str(SHARED_SERVER_LIMIT),
        "maxmemory-clients": str(16 << 20),
    }
    refused = 0
    try:
        for node in nodes:
            node.config_set("proto-max-bulk-len", str(512 << 20))
            node.config_set("client-query-buffer-limit", str(1 << 30))
            node.config_set("maxmemory-clients", "0")
        loose = await mem.health()
        assert loose.server_limits == {
            "proto-max-bulk-len": str(512 << 20),
            "client-query-buffer-limit": str(1 << 30),
            "maxmemory-clients": "0",
        }
        assert loose.limits_warning is not None
        for node in nodes:
            for name, value in advised.items():
                node.config_set(name, value)
        tight = await mem.health()
        assert tight.server_limits == advised
        assert tight.limits_warning is None
        node = redis.Redis.from_url(engine.node_urls[0])
        # The server answers "invalid bulk length" and closes the connection, maybe before
        # the client has sent it all.
        with pytest.raises((redis.exceptions.ResponseError, redis.exceptions.ConnectionError)):
            node.execute_command(  # type: ignore[no-untyped-call]
                "SET", "compozy:itest:memory:{argv}:x", "y" * (17 << 20)
            )
        refused += 1
        node.close()
        assert await mem.len() == 1  # the server kept serving
    finally:
        for node, old in zip(nodes, saved, strict=True):
            for setting, was in old.items():
                node.config_set(str(setting), str(was))
            node.close()
    record(
        group="adversarial-3",
        item=3,
        fault="servers at their default limits, then at the advised ones (proto-max-bulk-len "
        "and client-query-buffer-limit 16 MB, maxmemory-clients 16 MB); by hand, a 17 MB "
        "argument (a value to plant)",
        engine=engine.name,
        promise="health() reports the limits and warns at the defaults; at the advised ones "
        "the server refuses the argument before it is stored",
        operations=1,
        acknowledged=1 - refused,
        lost=0,
        duplicated=0,
        observed="defaults: warned (proto-max-bulk-len 512 MB, client-query-buffer-limit 1024 "
        "MB, maxmemory-clients off); advised: no warning; the 17 MB argument refused with its "
        "connection; the memory still answered",
    )
