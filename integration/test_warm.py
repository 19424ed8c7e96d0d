"""warm(): the scripts, the encoders and a connection ready before the first append."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path

import pytest
from redis.asyncio import Redis

from compozy_memory import (
    BackendUnavailableError,
    MemoryInstance,
    MemoryManager,
    MemoryRegistry,
    connect,
    warm,
)
from compozy_memory._io.delivery import install
from compozy_memory._io.translate import RedisClient
from compozy_memory._model.limits import ttl_slack
from compozy_memory._ops.acl import acl_setuser
from compozy_memory._wire.scripts import library
from integration.engines import EngineSpec
from integration.memories import COUNTER
from tests.counters import WordCounter

PROJECT = Path(__file__).resolve().parent.parent / "examples" / "project"


async def flush_scripts(engine: EngineSpec) -> None:
    for node in engine.node_clients():
        await node.function_flush()
        await node.script_flush()
        await node.aclose()


async def commands_since_reset(engine: EngineSpec) -> dict[str, int]:
    calls: dict[str, int] = {}
    for node in engine.node_clients():
        for name, stats in (await node.info("commandstats")).items():
            calls[name] = calls.get(name, 0) + int(stats["calls"])
        await node.aclose()
    return calls


async def reset_stats(engine: EngineSpec) -> None:
    for node in engine.node_clients():
        await node.config_resetstat()
        await node.aclose()


async def test_after_warm_the_first_append_loads_nothing(
    engine: EngineSpec, client: RedisClient, memory_key: str
) -> None:
    await flush_scripts(engine)
    await warm(client)
    for node in engine.node_clients():  # the library is on every primary
        names = [
            dict(zip(e[::2], e[1::2], strict=True))[b"library_name"]
            for e in await node.function_list()
        ]
        assert library().name.encode() in names
        await node.aclose()
    await warm(client)  # again: nothing to do, nothing breaks
    await reset_stats(engine)
    mem = MemoryInstance.open(client, project="warm", key=memory_key)
    await mem.append({"role": "user", "content": "hello"})
    calls = await commands_since_reset(engine)
    assert "cmdstat_function|load" not in calls
    assert calls.get("cmdstat_fcall") == 1


async def test_warm_loads_each_counters_encoder_off_the_loop(client: RedisClient) -> None:
    counters = [WordCounter(), WordCounter()]
    await warm(client, counters=counters)
    for counter in counters:
        assert len(counter.preloaded_in) == 1
        assert counter.preloaded_in[0] != threading.current_thread().name


async def test_warm_says_when_the_server_cannot_be_reached() -> None:
    dead = connect("redis://127.0.0.1:1/0")
    with pytest.raises(BackendUnavailableError):
        await warm(dead)
    await dead.aclose()


async def test_a_manager_warms_up_when_it_starts(engine: EngineSpec, client: RedisClient) -> None:
    await flush_scripts(engine)
    async with MemoryManager(MemoryRegistry.load(PROJECT), client) as manager:
        for node in engine.node_clients():
            assert await node.function_list(), "the library is loaded before the first get"
            await node.aclose()
        await reset_stats(engine)
        handle = await manager.get("customer-support", {"workflow": {"input": {"user_id": "u1"}}})
        await handle.append({"role": "user", "content": "hello"})
        assert "cmdstat_function|load" not in await commands_since_reset(engine)


async def test_warm_leaves_nothing_behind_but_a_key_about_to_expire(
    engine: EngineSpec, client: RedisClient
) -> None:
    await warm(client)
    found = 0
    for node in engine.node_clients():
        async for key in node.scan_iter(match="compozy:compozy-warm:*"):
            found += 1
            # The probe's messages are cleared at once; its meta (ids stay monotonic) expires.
            assert key.endswith(b":meta"), key
            assert 0 < await node.pttl(key) <= 10_000 + ttl_slack(10_000), key
        await node.aclose()
    assert found >= 1  # the probe did write, through the whole append path


async def test_warm_succeeds_for_tenants_who_may_not_write_the_probe(
    standalone: EngineSpec,
) -> None:
    admin = Redis.from_url(standalone.url)
    await install(admin)
    names = []
    try:
        for read_only in (False, True):
            name = f"u{uuid.uuid4().hex[:12]}"
            await admin.execute_command(  # type: ignore[no-untyped-call]
                *acl_setuser(name, "acme", read_only=read_only, password="pw-" + name)
            )
            names.append(name)
            tenant = Redis.from_url(
                standalone.url.replace("redis://", f"redis://{name}:pw-{name}@")
            )
            try:
                await asyncio.wait_for(warm(tenant), 30)
                mem = MemoryInstance.open(tenant, project="acme", key=name, counter=COUNTER)
                if not read_only:
                    assert (await mem.append({"role": "user", "content": "hi"})).first_id == 1
            finally:
                await tenant.aclose()
        async for key in admin.scan_iter(match="compozy:compozy-warm:*"):
            assert key.endswith(b":meta"), key
            assert 0 < await admin.pttl(key) <= 10_000 + ttl_slack(10_000), key
    finally:
        for name in names:
            await admin.acl_deluser(name)
        await admin.aclose()
