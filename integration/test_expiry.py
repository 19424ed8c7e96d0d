"""A memory that expires starts a new incarnation: nothing taken from the old one (a flush
plan, a compare-and-set) reaches the new; TTLs are set on every part, bad ones refused."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest

from compozy_memory import (
    ConflictError,
    FencedLock,
    FlushSettings,
    LockLostError,
    UsageError,
)
from compozy_memory._flush.planner import plan_flush
from compozy_memory._io.translate import RedisClient
from integration.engines import EngineSpec
from integration.memories import memory, turn

# Run by scripts/reliability: its counts become rows of RELIABILITY.md.
pytestmark = pytest.mark.faults


async def test_a_flusher_paused_across_expiry_cannot_commit_into_the_new_conversation(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    old = memory(client, memory_key, ttl=timedelta(seconds=30))
    await old.append_many([turn(n) for n in range(30)])
    lease = await FencedLock(old.gateway).try_acquire()
    assert lease is not None
    snapshot = await old.gateway.snapshot(256)
    plan = plan_flush(snapshot, FlushSettings(max_tokens=300, summary_tokens=50))
    assert not plan.empty
    # The memory expires while the flusher is paused; a new conversation starts under the
    # same key, and a new flusher takes the lock: its epoch starts again at 1.
    await client.delete(*old.keys.data, old.keys.lock)
    new = memory(client, memory_key, ttl=timedelta(seconds=30))
    fresh = await new.append_many([turn(n) for n in range(30)])
    newer = await FencedLock(new.gateway).try_acquire()
    assert newer is not None
    assert newer.epoch == lease.epoch  # the epoch alone cannot tell them apart
    before = await client.lrange(new.keys.msgs, 0, -1)
    with pytest.raises(LockLostError, match="expired"):
        await old.gateway.flush_commit(
            epoch=lease.epoch,
            incarnation=lease.incarnation,
            plan=plan,
            summary_body=b'{"role":"system","content":"old news","type":"summary"}',
            summary_tokens=3,
        )
    assert await client.lrange(new.keys.msgs, 0, -1) == before
    await newer.release()
    record(
        group="adversarial",
        fault="a flusher paused while its memory expired and a new conversation began",
        engine=engine.name,
        promise="every compare-and-set names the memory's incarnation",
        operations=60,
        acknowledged=len(fresh.ids),
        lost=0,
        duplicated=0,
        observed="the stale commit was refused (STALE); the new conversation untouched",
    )


async def test_replace_if_last_id_taken_before_expiry_is_refused_after_it(
    client: RedisClient, memory_key: str
) -> None:
    old = memory(client, memory_key)
    seen = await old.append_many([turn(n) for n in range(5)])
    await client.delete(*old.keys.data)  # expiry
    other = memory(client, memory_key)
    await other.append_many([turn(n) for n in range(5)])  # the same last_id, 5
    with pytest.raises(ConflictError, match="expired"):
        await old.replace([turn(99)], if_last_id=seen.last_id)
    with pytest.raises(ConflictError, match="expired"):
        await other.replace([turn(99)], if_last_id=seen.last_id, if_incarnation=seen.incarnation)
    assert await other.len() == 5
    done = await other.replace([turn(99)], if_last_id=5)  # its own incarnation: allowed
    assert done.total_count == 1


async def test_locking_a_memory_never_written_leaves_nothing_without_its_ttl(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key, ttl=timedelta(seconds=60))
    lease = await FencedLock(mem.gateway).try_acquire()
    assert lease is not None
    assert 0 < await client.pttl(mem.keys.meta) <= 60_000
    await lease.release()


@pytest.mark.parametrize("ttl", [math.nan, math.inf, -1.0, 0, True, "10"])
async def test_bad_ttls_are_usage_errors(client: RedisClient, memory_key: str, ttl: Any) -> None:
    mem = memory(client, memory_key)
    await mem.append(turn(1))
    with pytest.raises(UsageError):
        await mem.set_ttl(ttl)
    assert await client.pttl(mem.keys.msgs) == -1
