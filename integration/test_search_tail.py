"""The live tail past the index: a search reads it and ranks it itself, so a message is found
the moment it is appended, from any handle, and the indexer takes messages in batches.

On every engine: what a search finds and how it scores it are the same before a step as after
it; a filter by role, pinned messages and the tail's bounds hold; the background indexer holds
a handle's writes back for a batch, and steps at once when enough are waiting or when waited
for."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from compozy_memory import CorruptDataError, Hits, MemoryInstance, SearchPolicy
from compozy_memory._io.translate import RedisClient
from compozy_memory._model.limits import (
    INDEX_BATCH_BYTES,
    INDEX_BATCH_DOCS,
    SEARCH_TAIL_BYTES,
    SEARCH_TAIL_DOCS,
)
from compozy_memory._search.tail import envelope_digest
from integration.memories import memory

WORDS = [
    "refund",
    "kettle",
    "parcel",
    "porto",
    "storm",
    "harbour",
    "invoice",
    "courier",
    "lisbon",
    "ravi",
]


def turn(n: int, rng: random.Random) -> dict[str, Any]:
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
    return {"role": ("user", "assistant")[n % 2], "content": f"turn {n}: {words}", "tokens": 9}


def scored(hits: Hits) -> list[tuple[int, float]]:
    return [(h.id, round(h.score, 9)) for h in hits]


async def test_a_search_ranks_the_tail_as_the_index_would(
    client: RedisClient, memory_key: str
) -> None:
    rng = random.Random(4)
    writer = memory(client, memory_key, background_index=False)
    await writer.append_many([turn(i, rng) for i in range(60)])
    await writer.indexer.catch_up()
    await writer.append_many([turn(60 + i, rng) for i in range(25)])  # not indexed
    reader = memory(client, memory_key, read_only=True)
    before = {}
    for query in ("refund kettle", "porto storm harbour", "ravi", "turn 70"):
        hits = await reader.search(query, limit=20)
        assert hits.unindexed == 0
        before[query] = scored(hits)
    assert any(i > 60 for i, _ in before["refund kettle"])
    assert (await reader.gateway.index_read()).unindexed == 25
    await writer.indexer.catch_up()
    assert (await reader.gateway.index_read()).unindexed == 0
    for query, expected in before.items():
        assert scored(await reader.search(query, limit=20)) == expected, query


async def test_a_filter_by_role_and_pinned_messages_hold_in_the_tail(
    client: RedisClient, memory_key: str
) -> None:
    writer = memory(client, memory_key, background_index=False)
    await writer.append({"role": "user", "content": "where is my kettle"})
    await writer.append({"role": "assistant", "content": "your kettle ships today"})
    await writer.append({"role": "system", "content": "kettle policy", "priority": 0})
    reader = memory(client, memory_key, read_only=True)
    assert sorted(h.id for h in await reader.search("kettle")) == [1, 2]
    assert [h.id for h in await reader.search("kettle", roles=["assistant"])] == [2]
    assert [h.id for h in await reader.search("kettle", roles=["user"])] == [1]
    assert (await reader.gateway.index_read()).unindexed == 3


async def test_past_the_tail_a_reader_says_what_it_did_not_see_and_a_writer_indexes(
    client: RedisClient, memory_key: str
) -> None:
    writer = memory(client, memory_key, background_index=False)
    extra = 3
    messages = [
        {"role": "user", "content": f"note {i} {'zeppelin' if i < extra else ''}"}
        for i in range(SEARCH_TAIL_DOCS + extra)
    ]
    for at in range(0, len(messages), 50):
        await writer.append_many(messages[at : at + 50])
    reader = memory(client, memory_key, read_only=True)
    # The tail a search reads is the newest: the message just written is found...
    newest = SEARCH_TAIL_DOCS + extra
    hits = await reader.search(f"note {newest - 1}")
    assert hits[0].id == newest
    assert hits.unindexed == extra
    # ... and the oldest of a longer backlog are what it says it did not see.
    hits = await reader.search("zeppelin")
    assert (list(hits), hits.unindexed) == ([], extra)
    # The handle that wrote them indexes before it answers: its own writes are found.
    hits = await writer.search("zeppelin")
    assert hits.unindexed == 0
    assert sorted(h.id for h in hits)[:extra] == list(range(1, extra + 1))  # (and a neighbour)


async def unindexed(mem: MemoryInstance) -> int:
    return (await mem.gateway.index_read()).unindexed


async def settled(mem: MemoryInstance, want: int) -> int:
    for _ in range(300):
        if (left := await unindexed(mem)) == want:
            return left
        await asyncio.sleep(0.02)
    return await unindexed(mem)


async def test_the_background_indexer_takes_a_handles_writes_in_batches(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key)
    # A handle's first write is indexed a debounce later (it takes what others left)...
    await mem.append({"role": "user", "content": "the kettle arrived"})
    assert await settled(mem, 0) == 0
    # ... later ones wait for a batch.
    await mem.append({"role": "user", "content": "the parcel is late"})
    await asyncio.sleep(0.6)  # three debounces: no step yet
    assert await unindexed(mem) == 1
    assert (await mem.search("parcel"))[0].id == 2  # found all the same
    await mem.indexer.wait_idle()  # waiting starts the held-back step at once
    assert await unindexed(mem) == 0
    # Enough messages waiting, or enough bytes: a step a debounce later, without a wait.
    await mem.append_many(
        [{"role": "user", "content": f"parcel {i}"} for i in range(INDEX_BATCH_DOCS)]
    )
    assert await settled(mem, 0) == 0
    await mem.append({"role": "user", "content": "storm " * (INDEX_BATCH_BYTES // 6 + 1)})
    assert await settled(mem, 0) == 0
    # A write while a waited-for step runs is waited for too, not held back 30 s.
    await mem.append({"role": "user", "content": "the harbour"})
    waiting = asyncio.create_task(mem.indexer.wait_idle())
    await mem.append({"role": "user", "content": "the courier"})
    await asyncio.wait_for(waiting, 10)
    await mem.indexer.wait_idle()
    assert await unindexed(mem) == 0
    await mem.aclose()


async def test_the_policy_sets_how_long_writes_wait_for_a_batch(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key, search=SearchPolicy(index_delay=2.0))
    await mem.append({"role": "user", "content": "the kettle arrived"})
    assert await settled(mem, 0) == 0  # the first write: a debounce later
    await mem.append({"role": "user", "content": "the parcel is late"})
    await asyncio.sleep(0.5)
    assert await unindexed(mem) == 1  # held back for its 2 s
    assert await settled(mem, 0) == 0  # then indexed, without a wait or another write
    await mem.aclose()


async def test_handles_that_close_soon_after_writing_keep_the_index_near(
    client: RedisClient, memory_key: str
) -> None:
    # A handle a request: it writes a question, waits on a model, writes the reply, closes
    # (its held-back step dropped). The next handle's first write takes what it left.
    for n in range(40):
        mem = memory(client, memory_key)
        await mem.append({"role": "user", "content": f"question {n} about zeppelins"})
        await asyncio.sleep(0.25)
        await mem.append({"role": "assistant", "content": f"answer {n}"})
        await mem.aclose()
    reader = memory(client, memory_key, read_only=True)
    assert await unindexed(reader) <= 2
    hits = await reader.search("question 39 zeppelins")
    assert hits.unindexed == 0
    assert hits[0].id == 79


async def test_fetch_takes_record_less_ids_only_from_the_tail_the_client_read(
    client: RedisClient, memory_key: str
) -> None:
    writer = memory(client, memory_key, background_index=False)
    await writer.append_many(
        [{"role": ("user", "assistant")[i % 2], "content": f"kettle {i}"} for i in range(6)]
    )
    reader = memory(client, memory_key, read_only=True)
    fetch = reader.gateway.search_fetch
    assert await fetch([1, 2, 3], limit=10, kinds=[2]) == []  # no tail read: no record
    assert [h[0] for h in await fetch([1, 2, 3], limit=10, kinds=[2], tail_from=1)] == [1, 2, 3]
    await writer.indexer.catch_up()
    assert [h[0] for h in await fetch([1, 2, 3], limit=10, kinds=[2])] == [2]
    # An index dropped between a search's read and its fetch (another replica rebuilds it):
    # the ids the read saw indexed, now without records, are no tail hits.
    await writer.gateway.index_reset(force=True)
    assert await fetch([1, 2, 3], limit=10, kinds=[2], tail_from=7) == []
    # Searched again, the live list is all tail: every hit is the client's, of its role.
    hits = await reader.search("kettle", roles=["assistant"])
    assert sorted(h.id for h in hits) == [2, 4, 6]
    assert {h.message.role for h in hits} == {"assistant"}


async def test_tail_hits_show_the_neighbours_the_index_would(
    client: RedisClient, memory_key: str
) -> None:
    writer = memory(client, memory_key, background_index=False)
    await writer.append({"role": "user", "content": "where is my kettle"})
    await writer.append({"role": "system", "content": "be brief", "priority": 0})
    await writer.append({"role": "assistant", "content": "your kettle ships today"})
    reader = memory(client, memory_key, read_only=True)
    before = {h.id: (h.before, h.after) for h in await reader.search("kettle")}
    await writer.indexer.catch_up()
    after = {h.id: (h.before, h.after) for h in await reader.search("kettle")}
    assert before == after
    assert before[3][0] is None  # the pinned message is no neighbour, live or indexed


async def test_since_id_holds_for_the_neighbours_a_hit_lifts(
    client: RedisClient, memory_key: str
) -> None:
    writer = memory(client, memory_key, background_index=False)
    await writer.append_many([{"role": "user", "content": f"note {i}"} for i in range(4)])
    await writer.append({"role": "user", "content": "the kettle"})
    await writer.append({"role": "assistant", "content": "noted"})
    for indexed in (False, True):
        if indexed:
            await writer.indexer.catch_up()
        hits = await writer.search("kettle", since_id=5)
        assert [h.id for h in hits] == [5, 6] or [h.id for h in hits] == [5]
        assert all(h.id >= 5 for h in await writer.search("kettle", since_id=5))
        assert all(h.id >= 6 for h in await writer.search("kettle noted", since_id=6))


async def test_the_tail_read_keeps_to_its_bytes(client: RedisClient, memory_key: str) -> None:
    writer = memory(client, memory_key, background_index=False)
    big = "kettle " + "x" * (SEARCH_TAIL_BYTES * 3 // 4)
    for _ in range(3):
        await writer.append({"role": "user", "content": big})
    reader = memory(client, memory_key, read_only=True)
    # The newest envelope, then one more past the bound (at most one), then no more.
    assert len((await reader.gateway.index_read(tail=SEARCH_TAIL_DOCS)).tail) == 2
    hits = await reader.search("kettle")
    assert (sorted(h.id for h in hits), hits.unindexed) == ([2, 3], 1)


async def test_a_planted_tail_envelope_is_refused_typed(
    client: RedisClient, memory_key: str
) -> None:
    writer = memory(client, memory_key, background_index=False)
    await writer.append({"role": "user", "content": "the kettle"})
    reader = memory(client, memory_key, read_only=True)
    head = '{"id":1,"ts":1,"tokens":1,"priority":2,'
    for planted in (
        '{"id":1,"ts":99999999999999999999,"tokens":1,"priority":2,"role":"user","content":"kettle"}',
        head + '"role":"user","content":' + "[" * 100_000,
        # Valid JSON of the wrong shape: found by the tail's analysis, refused when fetched.
        head + '"role":5,"content":"kettle"}',
        head + '"role":"user","content":"kettle","tool_calls":7}',
        # An id that is no id, or a second one the scripts do not read.
        '{"id":' + "9" * 400 + ',"ts":1,"tokens":1,"priority":2,"role":"user","content":"kettle"}',
        head + '"role":"user","content":"kettle","id":7}',
    ):
        await client.lset(writer.keys.msgs, 0, planted)
        with pytest.raises(CorruptDataError):
            await reader.search("kettle")


async def three_kettles(client: RedisClient, key: str) -> MemoryInstance:
    """A memory of three user turns, none indexed, on a handle that indexes when asked."""
    mem = memory(client, key, background_index=False)
    await mem.append_many([{"role": "user", "content": f"kettle {i}"} for i in range(3)])
    return mem


async def stored_text(client: RedisClient, mem: MemoryInstance, at: int) -> str:
    """The envelope at place ``at`` of the live list, as stored."""
    stored = await client.lindex(mem.keys.msgs, at)
    assert isinstance(stored, bytes)
    return stored.decode()


async def test_a_tail_hit_is_the_message_ranked_or_none(
    client: RedisClient, memory_key: str
) -> None:
    # A failover can give a tail's ids to other messages between a search's read and its
    # fetch (the promoted replica had not seen the ones ranked; its writers take the ids
    # again): the role the client filtered on was the lost message's. A hit whose envelope
    # is not the one ranked is passed over.
    writer = await three_kettles(client, memory_key)
    reader = memory(client, memory_key, read_only=True)
    read = await reader.gateway.index_read([], [], tail=SEARCH_TAIL_DOCS)
    digests = {1 + i: envelope_digest(env) for i, env in enumerate(read.tail)}
    fetch = reader.gateway.search_fetch
    kept = await fetch([1, 2, 3], limit=10, kinds=[1], tail_from=1, tail=digests)
    assert [h[0] for h in kept] == [1, 2, 3]
    stored = await stored_text(client, writer, 1)
    await client.lset(writer.keys.msgs, 1, stored.replace('"user"', '"assistant"'))
    kept = await fetch([1, 2, 3], limit=10, kinds=[1], tail_from=1, tail=digests)
    assert [(h[0], h[2].role) for h in kept] == [(1, "user"), (3, "user")]
    # The next candidate takes the place of the one passed over.
    kept = await fetch([2, 3], limit=1, kinds=[1], tail_from=1, tail=digests)
    assert [h[0] for h in kept] == [3]


@pytest.mark.parametrize("second", [2, 1000])
async def test_a_second_id_key_is_refused_typed_by_the_indexer_and_the_fetch(
    client: RedisClient, memory_key: str, second: int
) -> None:
    # Written raw: the scripts know the message by its head's id, a parser by the last one.
    mem = await three_kettles(client, memory_key)
    stored = await stored_text(client, mem, 0)
    planted = stored[:-1] + f',"id":{second}}}'
    await client.lset(mem.keys.msgs, 0, planted)
    with pytest.raises(CorruptDataError):
        await mem.indexer.catch_up()
    # Planted after the message was indexed: its hit says it is another message.
    await client.lset(mem.keys.msgs, 0, stored)
    await mem.indexer.catch_up()
    await client.lset(mem.keys.msgs, 0, planted)
    with pytest.raises(CorruptDataError):
        await mem.search("kettle 0")


async def test_hits_ranked_in_a_memory_that_expired_are_not_fetched_from_its_successor(
    client: RedisClient, memory_key: str
) -> None:
    # The memory expires (every key at once) and is written again between a search's read
    # and its fetch: the ids ranked were the old conversation's, and the new one's messages
    # under the same ids are not hits, indexed or in the live tail.
    writer = memory(client, memory_key, background_index=False)
    await writer.append_many([{"role": "user", "content": f"kettle refund {i}"} for i in range(8)])
    await writer.indexer.catch_up()
    await writer.append_many([{"role": "user", "content": f"kettle late {i}"} for i in range(3)])
    reader = memory(client, memory_key, read_only=True)
    read = await reader.gateway.index_read([], [], tail=SEARCH_TAIL_DOCS)
    old, tail_from = read.incarnation, read.ix_next
    assert old
    assert tail_from == 9
    ids = list(range(1, 12))
    assert len(await reader.gateway.search_fetch(ids, limit=20, tail_from=tail_from)) == 11

    await client.delete(*writer.keys.data)  # as an expiry: every key at its deadline
    again = memory(client, memory_key, background_index=False)
    await again.append_many([{"role": "user", "content": f"secret {i}"} for i in range(11)])
    await again.indexer.catch_up(max_steps=1)
    assert (await again.gateway.index_read([], [])).incarnation != old

    fetch = reader.gateway.search_fetch
    assert await fetch(ids, limit=20, tail_from=tail_from, incarnation=old) == []
    now = (await again.gateway.index_read([], [])).incarnation
    assert len(await fetch(ids, limit=20, tail_from=tail_from, incarnation=now)) == 11

    async def recalled(incarnation: str) -> list[Any]:
        layers = await reader.gateway.context(
            10_000,
            summary_share=0.0,
            recall_share=0.5,
            backfill=False,
            max_messages=2,
            hits=[1, 2, 3, 9],
            tail_from=tail_from,
            incarnation=incarnation,
        )
        return [m.content for m in layers.recalled]

    assert await recalled(old) == []
    assert await recalled(now) == ["secret 0"]
