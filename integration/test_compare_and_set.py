"""Compare-and-set names the content, not only the count, and the incarnation is never
skipped; data formats: an older memory is migrated in bounded steps, a newer one refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from compozy_memory import ConflictError, DataFormatError, UsageError
from compozy_memory._io.translate import RedisClient
from compozy_memory._model.limits import DATA_FORMAT
from integration.engines import EngineSpec
from integration.memories import memory

pytestmark = pytest.mark.faults


def turns(start: int, n: int, who: str = "user") -> list[dict[str, Any]]:
    return [{"role": who, "content": f"{who} turn {i}"} for i in range(start, start + n)]


async def test_a_version_read_before_writes_that_restored_the_count_is_refused(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    """As after a failover to a replica that missed writes: the memory is taken back to an
    earlier state, other writers bring last_id to the same number with other messages. A
    compare-and-set on the count alone passes; one on the version does not."""
    mem = memory(client, memory_key)
    await mem.append_many(turns(0, 8))
    saved = {k: await client.dump(k) for k in (mem.keys.msgs, mem.keys.meta)}
    seen = await mem.append_many(turns(8, 2))  # last_id 10: what the editor read
    for k, dump in saved.items():  # the promoted replica never had ids 9 and 10
        assert dump is not None
        await client.restore(k, 0, dump, replace=True)
    other = memory(client, memory_key)
    again = await other.append_many(turns(8, 2, who="assistant"))  # last_id 10 again
    assert again.last_id == seen.last_id
    assert again.incarnation == seen.incarnation
    before = [m.content for m in await mem.read()]
    went_through: list[bool] = []  # each replace of this stale read
    with pytest.raises(ConflictError, match="was written since"):
        await mem.replace(turns(100, 1), if_version=seen.version)
    went_through.append(False)
    after = [m.content for m in await mem.read()]
    assert after == before
    # The count and incarnation alone would have passed (and replaced other writers' turns).
    last_id_only = await mem.replace(
        turns(100, 1), if_last_id=seen.last_id, if_incarnation=seen.incarnation
    )
    assert not last_id_only.duplicate
    went_through.append(True)
    replaced = len(set(before) - {m.content for m in await mem.read()})
    record(
        group="adversarial-2",
        item=4,
        fault="replace(if_last_id, if_incarnation) computed on unreplicated state, after the "
        "memory went back to an earlier state (as on a promoted replica) and other writers "
        "brought last_id to the same number",
        engine=engine.name,
        promise="a compare-and-set on the version (chained by every write) fails whenever "
        "any other write happened",
        operations=len(went_through),
        acknowledged=sum(went_through),
        lost=len(set(before) - set(after)),
        duplicated=0,
        observed=f"replace(if_version=) refused (ConflictError), the {len(after)} messages "
        f"unchanged; replace(if_last_id=, if_incarnation=) of the same read went through "
        f"and replaced {replaced} of them, other writers' turns included",
    )


async def test_a_handle_that_only_read_never_skips_the_incarnation(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    writer = memory(client, memory_key)
    await writer.append_many(turns(0, 3))
    reader = memory(client, memory_key)
    last_id = (await reader.health()).last_id
    # A handle that saw no incarnation refuses to guess one.
    refused = 0
    with pytest.raises(UsageError, match="incarnation"):
        await reader.replace(turns(10, 1), if_last_id=last_id)
    refused += 1
    await reader.read()  # now it saw one
    # The conversation expires; a new one under the same key reaches the same last id.
    await client.delete(*writer.keys.data)
    await writer.append_many(turns(20, 3))
    assert (await writer.health()).last_id == last_id
    with pytest.raises(ConflictError, match="expired and was written again"):
        await reader.replace(turns(10, 1), if_last_id=last_id)
    refused += 1
    new = [m.content for m in await writer.read()]
    assert new == [t["content"] for t in turns(20, 3)]
    record(
        group="adversarial-2",
        item=5,
        fault="replace(if_last_id=) from a handle that only read, after the memory expired and "
        "a new conversation reached the same last id",
        engine=engine.name,
        promise="every compare-and-set names the incarnation it was read in",
        operations=2,
        acknowledged=2 - refused,
        lost=len({t["content"] for t in turns(20, 3)} - set(new)),
        duplicated=0,
        observed=f"refused {refused} of 2: UsageError before any read, ConflictError after "
        f"the read; the new conversation's {len(new)} messages unchanged",
    )


async def test_a_memory_of_a_newer_data_format_is_refused_whole(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    mem = memory(client, memory_key)
    await mem.append_many(turns(0, 3))
    await client.hset(mem.keys.meta, "fmt", DATA_FORMAT + 1)
    before = await client.lrange(mem.keys.msgs, 0, -1)
    calls = (
        mem.append({"role": "user", "content": "x"}),
        mem.trim(keep_messages=0),
        mem.read(),
        mem.context(1_000),
        mem.search("turn"),
    )
    refused = 0
    for call in calls:
        with pytest.raises(DataFormatError, match="newer"):
            await call
        refused += 1
    after = await client.lrange(mem.keys.msgs, 0, -1)
    assert after == before
    record(
        group="adversarial-2",
        item=10,
        fault=f"a memory whose meta names a newer data format ({DATA_FORMAT + 1}) met by this "
        "release: append, trim, read, context, search",
        engine=engine.name,
        promise="a newer format is refused with a typed error (DataFormatError), nothing written",
        operations=len(calls),
        acknowledged=len(calls) - refused,
        lost=len(set(before) - set(after)),
        duplicated=len(after) - len(before),
        observed=f"DataFormatError from {refused} of {len(calls)} calls; the {len(after)} "
        "stored messages unchanged",
    )


async def test_a_memory_of_the_first_format_is_migrated_in_bounded_steps(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    """What a release before formats wrote: meta without fmt, version or pins, an archive, and
    its index in the old layout (a ZSET of postings, a HASH of documents)."""
    mem = memory(client, memory_key)
    keys = mem.keys
    live = [
        {"id": i, "ts": 1700000000000, "tokens": 3, "priority": 2, "role": "user",
         "content": f"live {i} about invoices"}
        for i in range(31, 41)
    ]  # fmt: skip
    archived = [
        {"id": i, "ts": 1700000000000, "tokens": 3, "priority": 2, "role": "assistant",
         "content": f"archived {i} about refunds"}
        for i in range(1, 31)
    ]  # fmt: skip
    await client.rpush(keys.msgs, *(json.dumps(m, separators=(",", ":")) for m in live))
    await client.rpush(keys.archive, *(json.dumps(m, separators=(",", ":")) for m in archived))
    await client.hset(
        keys.meta,
        mapping={"tokens": 30, "count": 10, "last_id": 40, "p:2:tokens": 30, "p:2:count": 10,
                 "inc": "1700000000000000", "archived": 30, "ix_docs": 30, "ix_len": 90},
    )  # fmt: skip
    await client.zadd(keys.legacy_ixpost, {"refund\t000000000001\t1\t3\tassistant": 0})
    await client.hset(keys.legacy_ixdocs, "d:1", "1\tassistant\t3\trefund\t1")
    # Writes go on at once; the index is rebuilt by the indexer's bounded steps.
    await mem.append({"role": "user", "content": "a new turn about invoices"})
    progress = await mem.indexer.catch_up()
    assert progress.unindexed == 0
    assert not await client.exists(keys.legacy_ixpost, keys.legacy_ixdocs)
    health = await mem.health()
    assert health.data_format == DATA_FORMAT
    assert health.evicted == ()
    assert health.indexed == 41
    found = {h.id for h in await mem.search("refunds", limit=50)}
    assert set(range(1, 31)) <= found
    removed = (await mem.trim(keep_messages=0)).removed_count
    assert removed == 11
    record(
        group="adversarial-2",
        item=10,
        fault="a memory of the first data format (no fmt in meta, the old index layout of "
        "stale postings) met by this release, writes going on",
        engine=engine.name,
        promise="an older format is migrated in bounded steps, nothing lost on the way",
        operations=4,  # an append, the indexer's catch-up, a search, a trim
        acknowledged=4,
        lost=len(set(range(1, 31)) - found) + 11 - removed,
        duplicated=health.indexed - 41,
        observed=f"fmt {health.data_format}; old index keys deleted, {health.indexed} messages "
        f"indexed again in {progress.steps} indexer step(s); search found all 30 archived, trim "
        f"removed {removed}",
    )
