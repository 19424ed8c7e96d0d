"""What an adversarial test run broke, each as a test that failed before its fix."""

from __future__ import annotations

import asyncio
import json
import math
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from compozy_memory import (
    ConflictError,
    FencedLock,
    Flusher,
    FlushSettings,
    HeuristicCounter,
    InvalidMessageError,
    LockLostError,
    MemoryInstance,
    MemoryPolicy,
    ReadOnlyMemoryError,
    UsageError,
)
from compozy_memory._flush.planner import plan_flush
from compozy_memory._flush.summarizers import ExtractiveSummarizer
from compozy_memory._metrics import FlushMetrics
from compozy_memory._wire.translate import RedisClient
from integration.engines import EngineSpec
from integration.flush_support import audit

pytestmark = pytest.mark.faults

PROJECT = "flush"  # audit() reads this project's keys
COUNTER = HeuristicCounter()


def memory(client: RedisClient, key: str, **policy: Any) -> MemoryInstance:
    return MemoryInstance.open(
        client, project=PROJECT, key=key, counter=COUNTER, policy=MemoryPolicy(**policy)
    )


def flusher(mem: MemoryInstance, budget: int, **settings: Any) -> Flusher:
    flush = Flusher(
        mem.gateway,
        FlushSettings(max_tokens=budget, summary_tokens=min(200, budget // 4), **settings),
        ExtractiveSummarizer(COUNTER),
        COUNTER,
        metrics=FlushMetrics(CollectorRegistry()),
        background=False,  # each test flushes when it means to
    )
    mem.attach_flusher(flush)
    return flush


def turn(n: int, tokens: int = 20, priority: int | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "user" if n % 2 else "assistant",
        "content": f"turn {n} mentions order #{1000 + n}",
        "tokens": tokens,
    }
    if priority is not None:
        message["priority"] = priority
    return message


@pytest.mark.parametrize("size", [1_100, 5_000])
async def test_a_large_batch_repeated_with_its_dedupe_key_is_stored_once(
    client: RedisClient, memory_key: str, size: int, engine: EngineSpec, record: Any
) -> None:
    mem = memory(client, memory_key)
    batch = [turn(n, tokens=1) for n in range(size)]
    first = await mem.append_many(batch, dedupe_key="webhook-1")
    again = await mem.append_many(batch, dedupe_key="webhook-1")  # a retry after a lost reply
    assert not first.duplicate
    assert again.duplicate
    assert again.ids == first.ids
    assert await mem.len() == size
    await audit(client, memory_key, list(first.ids))
    record(
        fault=f"an append_many of {size:,} messages repeated with its dedupe key",
        engine=engine.name,
        promise="a retried write is applied at most once",
        operations=2 * size,
        acknowledged=size,
        lost=0,
        duplicated=0,
        observed="the repeat answered duplicate=True with the first call's ids",
    )


async def test_writes_without_new_ids_keep_the_dedupe_set_bounded(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key)
    for _ in range(12):  # 3,000 writes that add no ids
        await asyncio.gather(*(mem.replace([]) for _ in range(250)))
    assert await client.zcard(mem.keys.dedupe) <= 1_064


async def test_a_flusher_paused_across_expiry_cannot_commit_into_the_new_conversation(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    old = memory(client, memory_key, ttl=timedelta(seconds=30))
    await old.append_many([turn(n) for n in range(30)])
    lease = await FencedLock(old.gateway).try_acquire()
    assert lease is not None
    snapshot = await old.gateway.snapshot(0)
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
            terms=["1\tx\t1"] * len(plan.remove_ids),
        )
    assert await client.lrange(new.keys.msgs, 0, -1) == before
    await newer.release()
    record(
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


@pytest.mark.parametrize("tokens", [2**63, 10**300, 2**53 + 1])
async def test_absurd_token_counts_are_refused_and_change_nothing(
    client: RedisClient, memory_key: str, tokens: int
) -> None:
    mem = memory(client, memory_key)
    await mem.append(turn(1))
    with pytest.raises(InvalidMessageError):
        await mem.append({"role": "user", "content": "x", "tokens": tokens})
    assert (await mem.health()).token_count == 20
    assert len(await mem.read()) == 1


async def test_hundreds_of_pinned_messages_do_not_stall_flushing(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    mem = memory(client, memory_key)
    flush = flusher(mem, 3_000, snapshot_limit=64)
    await mem.append_many([turn(n, tokens=1, priority=0) for n in range(300)])
    await mem.append_many([turn(n, tokens=100) for n in range(200)])  # 20,300 tokens
    result = await flush.flush()
    assert result.outcome == "summarised"
    health = await mem.health()
    assert health.token_count + health.summary_tokens <= 3_000
    assert health.priority_counts[0] == 300
    await audit(client, memory_key)
    record(
        fault="a memory whose 300 oldest messages are pinned (priority 0), 7x over budget",
        engine=engine.name,
        promise="a flush always finds what it may remove when the memory is over budget",
        operations=500,
        acknowledged=500,
        lost=0,
        duplicated=0,
        observed=f"one flush of {result.rounds} rounds brought it to "
        f"{health.token_count + health.summary_tokens} of 3,000 tokens",
    )


async def test_one_question_then_two_thousand_tool_messages_is_flushed(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key)
    flush = flusher(mem, 3_000)
    await mem.append({"role": "user", "content": "audit every order", "tokens": 10})
    for start in range(0, 1_000, 100):
        pairs: list[dict[str, Any]] = []
        for n in range(start, start + 100):
            call = f"toolu_{n}"
            pairs.append(
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": call, "name": "get", "input": {}}],
                    "tokens": 10,
                }
            )
            pairs.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": call, "content": "ok"}],
                    "tokens": 10,
                }
            )
        await mem.append_many(pairs)
    result = await flush.flush()
    assert result.outcome == "summarised"
    health = await mem.health()
    assert health.token_count + health.summary_tokens <= 3_000
    first = await mem.read(0, 0)
    assert first[0].text == "audit every order"  # the question stays
    (summary,) = await client.lrange(mem.keys.summaries, 0, -1)
    assert len(json.loads(summary)["covers"]) < 4  # a few ranges, not 1,900 ids
    await audit(client, memory_key)


async def test_a_read_only_handle_cannot_flush_or_lock(
    client: RedisClient, memory_key: str
) -> None:
    writer = memory(client, memory_key)
    await writer.append_many([turn(n) for n in range(40)])
    reader = MemoryInstance.open(
        client, project=PROJECT, key=memory_key, counter=COUNTER, read_only=True
    )
    before = await client.hgetall(writer.keys.meta)
    with pytest.raises(ReadOnlyMemoryError):
        reader.attach_flusher(flusher(writer, 100))
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
