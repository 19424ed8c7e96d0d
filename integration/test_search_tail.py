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

from compozy_memory import Hits
from compozy_memory._io.translate import RedisClient
from compozy_memory._model.limits import INDEX_BATCH_DOCS, SEARCH_TAIL_DOCS
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
        {"role": "user", "content": f"note {i} {'zeppelin' if i >= SEARCH_TAIL_DOCS else ''}"}
        for i in range(SEARCH_TAIL_DOCS + extra)
    ]
    for at in range(0, len(messages), 50):
        await writer.append_many(messages[at : at + 50])
    reader = memory(client, memory_key, read_only=True)
    hits = await reader.search("zeppelin")
    assert (list(hits), hits.unindexed) == ([], extra)  # past the tail a search reads
    # The handle that wrote them indexes before it answers: its own writes are found.
    hits = await writer.search("zeppelin")
    assert hits.unindexed == 0
    assert sorted(h.id for h in hits)[-extra:] == list(
        range(SEARCH_TAIL_DOCS + 1, SEARCH_TAIL_DOCS + extra + 1)
    )


async def test_the_background_indexer_takes_a_handles_writes_in_batches(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key)
    await mem.append({"role": "user", "content": "the kettle arrived"})
    await asyncio.sleep(0.6)  # three debounces: no step yet, the write waits for a batch
    assert (await mem.gateway.index_read()).unindexed == 1
    assert [h.id for h in await mem.search("kettle")] == [1]  # found all the same
    await mem.indexer.wait_idle()  # waiting starts the held-back step at once
    assert (await mem.gateway.index_read()).unindexed == 0
    # Enough writes waiting: a step a debounce later, without a wait.
    await mem.append_many(
        [{"role": "user", "content": f"parcel {i}"} for i in range(INDEX_BATCH_DOCS)]
    )
    for _ in range(500):
        if (await mem.gateway.index_read()).unindexed == 0:
            break
        await asyncio.sleep(0.02)
    assert (await mem.gateway.index_read()).unindexed == 0
    await mem.aclose()
