"""Closing is quiet and prompt: a handle, a manager or a client closed while background work
(index catch-ups, flushes) is due or under way stops it without error output or retries."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from compozy_memory import (
    MemoryInstance,
    MemoryManager,
    MemoryRegistry,
    SyncMemoryInstance,
    connect_sync,
)
from compozy_memory._io.translate import RedisClient
from integration.engines import EngineSpec
from integration.memories import memory

EXAMPLE_PROJECT = Path(__file__).resolve().parent.parent / "examples" / "project"
MESSAGES = [
    {"role": "user", "content": f"note {i} about the kettle", "tokens": 5} for i in range(40)
]


def background_tasks() -> set[asyncio.Task[object]]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()}


async def test_a_closed_handle_drops_its_due_catch_up_and_says_nothing(
    client: RedisClient, memory_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="compozy_memory")
    mem = memory(client, memory_key)
    await mem.append_many(MESSAGES)
    assert mem.indexer.dirty  # a catch-up is due, a debounce away
    await mem.aclose()
    await asyncio.sleep(mem.index_ops.debounce * 2)
    assert not background_tasks()
    assert (await mem.gateway.index_read()).unindexed == len(MESSAGES)  # it never ran
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]
    # The next operation that needs the index does it itself.
    assert await mem.search("kettle")


async def test_a_client_closed_under_a_running_catch_up_stops_it_quietly(
    engine: EngineSpec, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="compozy_memory")
    own = engine.client()
    handles = [memory(own) for _ in range(32)]
    await asyncio.gather(*(h.append_many(MESSAGES) for h in handles))
    await asyncio.sleep(handles[0].index_ops.debounce)  # the catch-ups start
    started = time.monotonic()
    await own.aclose()
    for h in handles:
        await h.aclose()
    if pending := background_tasks():
        await asyncio.wait(pending, timeout=10)
    assert not background_tasks()
    assert time.monotonic() - started < 5  # one step each at most: no retries
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_closed_manager_stops_every_handle_it_gave_out(
    client: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="compozy_memory")
    manager = MemoryManager(MemoryRegistry.load(EXAMPLE_PROJECT), client)
    handles: list[MemoryInstance] = []
    for n in range(8):
        context = {"workflow": {"input": {"user_id": f"close-{n}"}}}
        handle = await manager.get("customer-support", context)
        await handle.append_many(MESSAGES)
        handles.append(handle)
    await manager.aclose()
    await asyncio.sleep(0.5)
    assert not background_tasks()
    # The last append's catch-up was due 0.2 s later and was dropped, not run. (The first
    # handles' catch-ups may have run before the close on a loaded machine: only the last
    # one is surely still due when the manager closes.)
    assert handles[-1].indexer.dirty
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_closed_sync_handle_runs_no_more_background_work(engine: EngineSpec) -> None:
    sync_client = connect_sync(engine.url, cluster=engine.cluster)
    mem = SyncMemoryInstance.open(sync_client, project="itest", key="closing:sync")
    mem.clear()
    mem.append_many(MESSAGES)
    mem.close()
    assert mem.indexer.wait_idle(5)
    time.sleep(0.5)
    assert mem.indexer.dirty  # the due catch-up was dropped, not run
    assert mem.search("kettle")  # done on demand
    sync_client.close()
