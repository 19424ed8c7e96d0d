"""The fenced flush lock on every real engine."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry

from compozy_memory import (
    ExtractiveSummarizer,
    Flusher,
    FlushSettings,
    LockBusyError,
    LockLostError,
    ReadOnlyMemoryError,
)
from compozy_memory._flush.lock import FencedLock
from compozy_memory._io.translate import RedisClient
from compozy_memory._metrics import FlushMetrics
from integration.flush_support import manual_flusher
from integration.memories import COUNTER, memory, turn


async def test_one_holder_at_a_time_with_growing_epochs(
    client: RedisClient, memory_key: str
) -> None:
    metrics = FlushMetrics(CollectorRegistry())
    lock = FencedLock(memory(client, memory_key).gateway, timedelta(seconds=5), metrics=metrics)
    first = await lock.try_acquire()
    assert first is not None
    assert await lock.try_acquire() is None  # taken: flushers skip
    assert await first.release()
    second = await lock.try_acquire()
    assert second is not None
    assert second.epoch == first.epoch + 1
    assert second.token != first.token  # a token per acquisition, never shared
    assert not await first.release()  # not the owner any more
    assert not await first.refresh()
    assert await second.refresh()
    assert await second.release()
    acquired = metrics.registry.get_sample_value(
        "compozy_memory_lock_acquire_total", {"memory": "memory"}
    )
    busy = metrics.registry.get_sample_value(
        "compozy_memory_lock_contention_total", {"memory": "memory"}
    )
    assert (acquired, busy) == (2, 1)


async def test_a_repeated_acquire_with_the_same_token_gets_the_same_epoch(
    client: RedisClient, memory_key: str
) -> None:
    """A retry whose first attempt took the lock (its reply lost) must not see it as busy,
    and must not bump the epoch a second time; another token still finds it taken."""
    gateway = memory(client, memory_key).gateway
    first = await gateway.lock_acquire("t" * 32, 5_000)
    inc = first[1]
    again = await gateway.lock_acquire("t" * 32, 5_000)
    other = await gateway.lock_acquire("u" * 32, 5_000)
    assert (first, again, other) == ((1, inc), (1, inc), (0, inc))


async def test_a_lease_expires(client: RedisClient, memory_key: str) -> None:
    lock = FencedLock(memory(client, memory_key).gateway, timedelta(milliseconds=200))
    lease = await lock.try_acquire()
    assert lease is not None
    await asyncio.sleep(0.3)
    other = await lock.try_acquire()
    assert other is not None
    assert other.epoch > lease.epoch
    assert not await lease.refresh()


async def test_waiting_is_bounded(client: RedisClient, memory_key: str) -> None:
    lock = FencedLock(memory(client, memory_key).gateway, timedelta(seconds=5))
    held = await lock.try_acquire()
    assert held is not None
    with pytest.raises(LockBusyError, match=r"stayed taken for 0\.3s"):
        await lock.acquire(wait=timedelta(seconds=0.3))
    asyncio.get_running_loop().call_later(0.2, lambda: asyncio.ensure_future(held.release()))
    lease = await lock.acquire(wait=timedelta(seconds=5))
    assert lease.epoch == held.epoch + 1


async def test_hold_refreshes_and_a_lost_lease_stops_the_work(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key)
    lock = FencedLock(mem.gateway, timedelta(milliseconds=600))
    lease = await lock.try_acquire()
    assert lease is not None
    # Work longer than the lease survives because the lease is refreshed every ttl/3.
    assert await lease.hold(lambda: asyncio.sleep(1.5, result="done")) == "done"
    finished = asyncio.Event()

    async def long_work() -> None:
        await asyncio.sleep(5)
        finished.set()

    async def steal() -> None:
        await asyncio.sleep(0.15)
        await client.delete(mem.keys.lock)  # the lease is gone, as after an expiry
        await FencedLock(mem.gateway, timedelta(seconds=5)).try_acquire()

    thief = asyncio.create_task(steal())
    with pytest.raises(LockLostError, match="lease was lost"):
        await lease.hold(long_work)
    await thief
    assert not finished.is_set()


async def test_a_read_only_handle_cannot_flush_or_lock(
    client: RedisClient, memory_key: str
) -> None:
    writer = memory(client, memory_key)
    await writer.append_many([turn(n) for n in range(40)])
    reader = memory(client, memory_key, read_only=True)
    before = await client.hgetall(writer.keys.meta)
    with pytest.raises(ReadOnlyMemoryError):
        reader.attach_flusher(manual_flusher(writer, 100))
    with pytest.raises(ReadOnlyMemoryError):
        await reader.flush()
    with pytest.raises(ReadOnlyMemoryError):
        Flusher(
            reader.gateway, FlushSettings(max_tokens=100), ExtractiveSummarizer(COUNTER), COUNTER
        )
    with pytest.raises(ReadOnlyMemoryError):
        await FencedLock(reader.gateway).try_acquire()
    assert await client.hgetall(writer.keys.meta) == before
    assert not await client.exists(writer.keys.lock)
