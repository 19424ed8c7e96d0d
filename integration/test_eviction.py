"""A memory whose keys were partly evicted (or deleted) is refused, typed, never rebuilt
silently: one test per key of a memory, on every engine.

Each test builds a memory that uses every part (live messages, a summary, archived originals,
the index, facts), deletes one key as an eviction would, and checks that the scripts that use
that part refuse the memory with MemoryEvictedError and change nothing, that health() names
the part, and that clear() repairs it (ids keep increasing where meta survived).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from compozy_memory import (
    Flusher,
    FlushSettings,
    MemoryEvictedError,
    MemoryInstance,
    MemoryPolicy,
)
from compozy_memory._flush.extractive import ExtractiveSummarizer
from compozy_memory._io.translate import RedisClient
from compozy_memory._metrics import MemoryMetrics
from integration.engines import EngineSpec
from integration.memories import COUNTER


async def full_memory(client: RedisClient) -> MemoryInstance:
    """A memory with every part filled: live messages, a summary, archived originals and
    their index, removed documents waiting (ix:gone), facts, a recalled message."""
    mem = MemoryInstance.open(
        client,
        project="evict",
        key=f"m:{uuid.uuid4().hex}",
        counter=COUNTER,
        policy=MemoryPolicy(max_tokens=400, archive_max=20),
    )
    mem.indexer.background = False
    flusher = Flusher(
        mem.gateway,
        FlushSettings(max_tokens=400, summary_tokens=60),
        ExtractiveSummarizer(COUNTER),
        COUNTER,
        metrics=MemoryMetrics(CollectorRegistry()),
        background=False,
        indexer=mem.indexer,
    )
    mem.attach_flusher(flusher)
    await mem.append({"role": "system", "content": "You are kind.", "priority": 0})
    for n in range(40):
        await mem.append(
            {"role": ("user", "assistant")[n % 2], "content": f"turn {n} apples", "tokens": 20}
        )
    await mem.flush()
    await mem.trim(keep_messages=5)
    await mem.facts.set(name="Ada", plan="gold")
    newest_archived = await mem.recall(offset=(await mem.health()).archive_length - 1, limit=1)
    assert await mem.recall_messages([m.id or 0 for m in newest_archived])
    # The cap dropped some originals: their terms wait in ix:gone until the indexer runs.
    health = await mem.health()
    assert health.message_count
    assert health.summaries
    assert health.archive_length
    assert health.evicted == ()
    return mem


def part_key(mem: MemoryInstance, part: str) -> str:
    return str(getattr(mem.keys, part))


async def refused(call: Any) -> None:
    with pytest.raises(MemoryEvictedError, match="evicted or deleted"):
        await call


@pytest.mark.parametrize(
    ("part", "named"),
    [
        ("msgs", "msgs"),
        ("archive", "archive"),
        ("summaries", "summaries"),
        ("ixdocs", "index"),
    ],
)
async def test_a_part_meta_counts_is_missed_by_every_script_that_uses_it(
    client: RedisClient, engine: EngineSpec, part: str, named: str
) -> None:
    mem = await full_memory(client)
    await client.delete(part_key(mem, part))
    before = await client.hgetall(mem.keys.meta)
    health = await mem.health()
    assert named in health.evicted
    if part == "msgs":
        await refused(mem.append({"role": "user", "content": "hello"}))
        await refused(mem.read())
    if part in ("msgs", "archive"):
        await refused(mem.trim(keep_messages=0))
        await refused(mem.replace([{"role": "user", "content": "fresh"}]))
    await refused(mem.context(400, query="apples"))
    await refused(mem.search("apples"))
    await refused(mem.snapshot())
    await refused(mem.indexer.catch_up())
    assert await client.hgetall(mem.keys.meta) == before  # nothing was written
    # The documented repair: clear() removes what is left; ids go on from meta's last id.
    last_id = (await mem.health()).last_id
    await mem.clear()
    assert (await mem.health()).evicted == ()
    again = await mem.append({"role": "user", "content": "again"})
    assert again.first_id == last_id + 1


async def test_a_memory_without_meta_is_not_taken_for_a_new_one(
    client: RedisClient, engine: EngineSpec
) -> None:
    mem = await full_memory(client)
    live = await client.llen(mem.keys.msgs)
    await client.delete(mem.keys.meta)
    assert (await mem.health()).evicted == ("meta",)
    # An append would give ids from 1 again beside the old ones, and totals from 0.
    await refused(mem.append({"role": "user", "content": "hello"}))
    await refused(mem.trim(keep_messages=0))
    await refused(mem.context(400))
    assert await client.llen(mem.keys.msgs) == live
    assert not await client.exists(mem.keys.meta)
    await mem.clear()
    first = await mem.append({"role": "user", "content": "a new conversation"})
    assert first.first_id == 1
    assert first.total_count == 1


async def test_facts_without_their_order_are_refused(
    client: RedisClient, engine: EngineSpec
) -> None:
    mem = await full_memory(client)
    await client.delete(mem.keys.factord)
    assert "facts" in (await mem.health()).evicted
    await refused(mem.facts.items())
    await refused(mem.facts.set(name="Grace"))
    await refused(mem.context(400))
    await mem.clear()
    assert await mem.facts.items() == []


async def test_removed_documents_waiting_to_leave_the_index_are_missed(
    client: RedisClient, engine: EngineSpec
) -> None:
    mem = await full_memory(client)
    waiting = int(await client.hget(mem.keys.meta, "ix_gone") or 0)
    assert waiting > 0, "the archive's cap dropped documents the indexer has not processed"
    await client.delete(mem.keys.ixgone)
    assert "ixgone" in (await mem.health()).evicted
    await refused(mem.indexer.catch_up())
    await refused(mem.search("apples"))


async def test_parts_without_counts_are_losses_a_memory_survives(
    client: RedisClient, engine: EngineSpec
) -> None:
    """The dedupe keys, recalled messages, the lock and the pins record are bookkeeping: their
    loss costs what they were for (a retry older than the loss may store twice, the recalled
    messages leave the context, a clear releases nothing), never the conversation."""
    mem = await full_memory(client)
    for part in ("dedupe", "recalled", "lock", "respins"):
        await client.delete(part_key(mem, part))
    assert (await mem.health()).evicted == ()
    stored = await mem.append({"role": "user", "content": "still here"})
    assert stored.total_count == (await mem.health()).message_count
    assert (await mem.context_layers(400)).recalled == ()


async def stored(client: RedisClient, mem: MemoryInstance) -> dict[str, object]:
    """Every key of a memory: its contents and its deadline (PEXPIRETIME, which does not tick)."""
    out: dict[str, object] = {}
    for key in mem.keys.data:
        kind = await client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "list":
            out[key] = await client.lrange(key, 0, -1)
        elif kind == "hash":
            out[key] = await client.hgetall(key)
        elif kind == "zset":
            out[key] = await client.zrange(key, 0, -1, withscores=True)
        out[f"{key}:deadline"] = await client.pexpiretime(key)
    return out


@pytest.mark.parametrize("loss", ["all", "some"])
@pytest.mark.parametrize("size", [1, 600], ids=["one", "many"])
async def test_an_append_to_a_memory_whose_messages_were_evicted_changes_nothing(
    client: RedisClient, engine: EngineSpec, loss: str, size: int
) -> None:
    """The append learns that msgs does not hold what meta counts from the length its push
    returns, and takes the push back before it refuses: every key as it was, TTLs too."""
    mem = MemoryInstance.open(
        client,
        project="evict",
        key=f"m:{uuid.uuid4().hex}",
        counter=COUNTER,
        policy=MemoryPolicy(ttl=timedelta(hours=1)),
        background_index=False,
    )
    await mem.append_many([{"role": "user", "content": f"m{n}", "tokens": 2} for n in range(8)])
    if loss == "all":
        await client.delete(mem.keys.msgs)
    else:
        await client.lpop(mem.keys.msgs, 3)
    before = await stored(client, mem)
    batch = [{"role": "user", "content": f"new {n}", "tokens": 1} for n in range(size)]
    await refused(mem.append_many(batch))
    await refused(mem.append_many(batch, dedupe_key="caller-key"))
    assert await stored(client, mem) == before
    assert "msgs" in (await mem.health()).evicted
