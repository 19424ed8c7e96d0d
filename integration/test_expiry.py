"""A memory that expires starts a new incarnation: nothing taken from the old one (a flush
plan, a compare-and-set) reaches the new; TTLs are set on every part, bad ones refused."""

from __future__ import annotations

import asyncio
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
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.limits import ttl_slack
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
    assert 0 < await client.pttl(mem.keys.meta) <= 60_000 + ttl_slack(60_000)
    await lease.release()


@pytest.mark.parametrize("ttl", [math.nan, math.inf, -1.0, 0, True, "10"])
async def test_bad_ttls_are_usage_errors(client: RedisClient, memory_key: str, ttl: Any) -> None:
    mem = memory(client, memory_key)
    await mem.append(turn(1))
    with pytest.raises(UsageError):
        await mem.set_ttl(ttl)
    assert await client.pttl(mem.keys.msgs) == -1


async def deadlines(client: RedisClient, keys: InstanceKeys) -> dict[str, int]:
    """Every existing key of a memory with its deadline (PEXPIRETIME: -1 none)."""
    out = {}
    for key in keys.data:
        at = await client.pexpiretime(key)
        if at != -2:
            out[key.rsplit(":", 1)[1]] = at
    return out


async def server_ms(client: RedisClient) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def test_every_key_of_a_memory_expires_at_one_deadline(
    client: RedisClient, memory_key: str
) -> None:
    """Each part a write creates (live messages, meta, the dedupe set, the archive, the
    index, facts, recalled messages, a stored result's pin) gets the memory's deadline,
    between the TTL and the TTL and its slack after the last write."""
    ttl = 60_000
    # max_tokens: a larger message is offloaded to the result store, its pin recorded here.
    mem = memory(client, memory_key, ttl=timedelta(milliseconds=ttl), max_tokens=200)
    await mem.append(turn(1))
    await mem.append(turn(2), dedupe_key="caller-key")
    await mem.append_many([turn(n) for n in range(3, 12)])
    await mem.trim(keep_messages=3)
    await mem.indexer.catch_up()
    await mem.facts.set(plan="gold")
    await mem.recall_messages([1])
    await mem.append({"role": "user", "content": "x " * 2_000}, offload=True)
    before = await server_ms(client)
    found = await deadlines(client, mem.keys)
    assert set(found) == {
        "msgs", "meta", "dedupe", "archive", "s", "d", "facts", "factord", "recalled", "respins"
    }  # fmt: skip
    assert len(set(found.values())) == 1, found
    at = found["meta"]
    assert before + ttl - 10_000 < at <= before + ttl + ttl_slack(ttl)


async def test_the_deadline_moves_only_when_it_is_due(client: RedisClient, memory_key: str) -> None:
    ttl = 3_200_000  # a slack of 100 s: no second append here comes that late
    mem = memory(client, memory_key, ttl=timedelta(milliseconds=ttl))
    await mem.append(turn(1))
    first = await deadlines(client, mem.keys)
    at = first["meta"]
    for n in range(2, 6):
        await mem.append(turn(n))
    await mem.append(turn(6), dedupe_key="created-the-dedupe-set")  # a key created meanwhile
    now = await deadlines(client, mem.keys)
    assert now == {**first, "dedupe": at}
    # The deadline is due once less than the TTL is left (here made so by hand, as time
    # would): the next write moves every key to it at once.
    await client.pexpire(mem.keys.meta, ttl - 1_000)
    await mem.append(turn(7))
    moved = await deadlines(client, mem.keys)
    assert len(set(moved.values())) == 1
    assert moved["meta"] > at - 1_000
    # And as time does: a short TTL's deadline is due after its slack.
    short = memory(client, f"{memory_key}:short", ttl=timedelta(milliseconds=320))
    await short.append(turn(1))
    at = (await deadlines(client, short.keys))["meta"]
    await asyncio.sleep(0.05)  # past the 10 ms slack
    await short.append(turn(2))
    later = await deadlines(client, short.keys)
    assert len(set(later.values())) == 1
    assert later["meta"] > at


async def test_a_memory_expires_whole_after_its_last_write(
    client: RedisClient, memory_key: str
) -> None:
    ttl = 1_500
    mem = memory(client, memory_key, ttl=timedelta(milliseconds=ttl))
    await mem.append_many([turn(n) for n in range(6)], dedupe_key="k")
    await mem.trim(keep_messages=2)
    await mem.facts.set(a="b")
    await mem.append(turn(7))
    assert len(await deadlines(client, mem.keys)) >= 5
    await asyncio.sleep((ttl + ttl_slack(ttl)) / 1000 + 0.3)
    assert await deadlines(client, mem.keys) == {}


async def test_every_key_follows_the_ttl_of_the_latest_write(
    client: RedisClient, memory_key: str
) -> None:
    """A TTL shortened (another handle's policy), and keys an earlier release left at
    different deadlines: the next write puts them all on the one deadline its TTL gives."""
    long = memory(client, memory_key, ttl=timedelta(hours=1))
    await long.append_many([turn(n) for n in range(4)])
    await long.trim(keep_messages=1)
    await long.indexer.catch_up()
    short = memory(client, memory_key, ttl=timedelta(seconds=60))
    await short.append(turn(9))
    found = await deadlines(client, short.keys)
    assert len(set(found.values())) == 1
    assert 0 < await client.pttl(short.keys.msgs) <= 60_000 + ttl_slack(60_000)
    for i, key in enumerate(short.keys.data):  # as an earlier release could leave them
        await client.pexpire(key, 50_000 + 1_000 * i)
    await short.append(turn(10))
    found = await deadlines(client, short.keys)
    assert len(set(found.values())) == 1
    assert 59_000 < await client.pttl(short.keys.meta) <= 60_000 + ttl_slack(60_000)


async def test_a_key_created_between_moves_gets_the_memory_deadline(
    client: RedisClient, memory_key: str
) -> None:
    """While the deadline stands, a write sets no key's expiry but those of the keys it
    creates: each gets the deadline the others have."""
    ttl = 3_200_000  # a slack of 100 s: the deadline does not move during this test
    mem = memory(
        client,
        memory_key,
        ttl=timedelta(milliseconds=ttl),
        max_tokens=200,
        background_index=False,
    )
    await mem.facts.set(plan="gold")  # meta (and the deadline), facts
    at = (await deadlines(client, mem.keys))["meta"]

    async def each_at_the_deadline(*created: str) -> None:
        found = await deadlines(client, mem.keys)
        assert set(created) <= set(found)
        assert set(found.values()) == {at}, found

    await mem.append(turn(1), dedupe_key="caller-key")
    await each_at_the_deadline("msgs", "dedupe")
    await mem.append_many([turn(n) for n in range(2, 6)])
    await mem.indexer.catch_up()  # the index's keys, by its own steps
    await each_at_the_deadline("s", "d")
    await mem.trim(keep_messages=0)  # msgs emptied (gone), the archive created
    assert not await client.exists(mem.keys.msgs)
    await each_at_the_deadline("archive")
    await mem.append(turn(6))  # msgs created again
    await each_at_the_deadline("msgs")
    await mem.append({"role": "user", "content": "x " * 2_000}, offload=True)
    await each_at_the_deadline("respins")
