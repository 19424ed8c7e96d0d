"""The search index under attack, on real servers: rebuilds the archive's cap outruns, steps
and merges read before a memory expired and sent after it was written again, bookkeeping
fields planted by a tenant, summaries that make a search copy megabytes per hit. Each test
states what must hold; the index is checked against one built from scratch
(integration/index_state.py) where it applies."""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis as redis_sync

from compozy_memory import (
    CompozyMemoryError,
    ConflictError,
    CorruptDataError,
    MemoryPolicy,
    SearchPolicy,
    connect,
)
from compozy_memory._io.translate import RedisClient
from compozy_memory._search.analysis import ANALYZER_VERSION
from compozy_memory._store.indexer import _build_step, _covered, _merged, _read_chunks
from compozy_memory.embedded import EmbeddedServer
from compozy_memory.errors import ScriptError
from integration.memories import memory
from integration.test_index_segments import chat, fields_match_the_list, same_as_from_scratch


def _said(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content, "tokens": 5}


async def _step_as_read(mem: Any, pending: Any) -> Any:
    """index_add of everything ``pending`` returned, as an indexer that read it would send."""
    items = list(pending.adds)
    documents, positive, negative = _build_step(items, [])
    upto, seq_upto = _covered(pending, items)
    return await mem.gateway.index_add(
        pending,
        analyzer=str(ANALYZER_VERSION),
        upto=upto,
        seq_upto=seq_upto,
        documents=documents,
        positive=positive,
        negative=negative,
        gone=0,
        gone_first=0,
    )


# -- rebuilds and the archive's cap ---------------------------------------------------------


async def test_a_rebuild_gets_past_an_archive_its_cap_shrinks(
    client: RedisClient, memory_key: str
) -> None:
    rng = random.Random(1)
    off = memory(client, memory_key, policy=MemoryPolicy(search=SearchPolicy(enabled=False)))
    for i in range(6):
        await off.append_many([chat(100 * i + j, rng) for j in range(100)])
    await off.trim(keep_messages=10)  # 590 archived, no cap, no index
    await off.indexer.wait_idle()
    # Search on again, with a cap of 100: the rebuild's first step drops 256 of the archive.
    on = memory(client, memory_key, archive_max=100)
    on.indexer.background = False
    for _ in range(6):  # bounded: the bug is a catch_up() that never returns
        await on.indexer.catch_up(max_steps=8)
    assert (await on.gateway.index_pending(128, 1 << 20)).idle
    await same_as_from_scratch(client, on)


async def test_a_rebuild_step_is_refused_once_the_cap_dropped_its_envelopes(
    client: RedisClient, memory_key: str
) -> None:
    rng = random.Random(2)
    off = memory(client, memory_key, policy=MemoryPolicy(search=SearchPolicy(enabled=False)))
    for i in range(8):
        await off.append_many([chat(107 * i + j, rng) for j in range(107)])
    await off.trim(keep_messages=256)
    await off.indexer.wait_idle()
    a = memory(client, memory_key)
    a.indexer.background = False
    await a.indexer.catch_up(max_steps=2)  # the live messages; the archive is next
    pending = await a.gateway.index_pending(128, 1 << 20)
    assert pending.seq_from > 0
    assert all(where == "a" for where, _, _ in pending.adds)
    # Another replica trims under a cap: archive_base passes the envelopes a's step holds.
    b = memory(client, memory_key, archive_max=500)
    b.indexer.background = False
    await b.trim(keep_messages=206)
    base = int(await client.hget(a.keys.meta, "archive_base") or 0)
    assert base >= pending.adds[0][1]
    added = await _step_as_read(a, pending)
    assert not added.applied
    await b.indexer.catch_up()
    await b.indexer.compact()
    await same_as_from_scratch(client, b)


# -- a memory that expired and was written again ---------------------------------------------


async def test_an_indexing_step_read_before_the_memory_expired_is_refused_after(
    client: RedisClient, memory_key: str
) -> None:
    old = memory(client, memory_key)
    old.indexer.background = False
    await old.append_many([_said(f"plutonium shipment {i}") for i in range(10)])
    pending = await old.gateway.index_pending(128, 1 << 20)
    await client.delete(*old.keys.data)  # every key's one deadline passed
    new = memory(client, memory_key)
    new.indexer.background = False
    await new.append_many([_said(f"kettle descaling {i}") for i in range(10)])
    added = await _step_as_read(old, pending)
    assert not added.applied
    await new.indexer.catch_up()
    assert not await new.search("plutonium")
    await same_as_from_scratch(client, new)


async def test_a_merge_read_before_the_memory_expired_is_refused_after(
    client: RedisClient, memory_key: str
) -> None:
    async def two_segments(word: str) -> Any:
        mem = memory(client, memory_key)
        mem.indexer.background = False
        for step in range(2):
            await mem.append_many([_said(f"{word} {step} {i}") for i in range(5)])
            await mem.indexer.catch_up()
        return mem

    old = await two_segments("plutonium")
    state = await old.gateway.index_read()
    inputs = list(state.segments)
    gens = [e.gen for e in inputs]
    values: dict[str, bytes | None] = {}
    for chunk in _read_chunks(inputs):
        values.update((await old.gateway.index_read(gens, chunk)).values)
    output = _merged(inputs, values)
    assert output is not None
    await client.delete(*old.keys.data)  # every key's one deadline passed
    new = await two_segments("kettle")
    assert [e.gen for e in (await new.gateway.index_read()).segments] == gens
    with pytest.raises(ConflictError):
        await old.gateway.index_merge(gens, output, output.fields, incarnation=state.incarnation)
    assert not await new.search("plutonium")
    await same_as_from_scratch(client, new)
    await fields_match_the_list(client, new)


# -- planted bookkeeping --------------------------------------------------------------------


PLANTED = [
    ("L", "x,1,30,1,30,1,0,9"),
    ("L", "1,1,10,1,10,y,0,9;2,1,10,11,20,1,0,9"),
    ("R", "x,y,1|2,1,0,0,1,1,1,1,1,0"),
    ("R", "9,1,1|2,1,0,0,1,1,1,1,z,0"),
    ("G", "a,b,c,d"),
]


@pytest.mark.parametrize(("field", "value"), PLANTED, ids=[f"{f}={v}" for f, v in PLANTED])
async def test_planted_bookkeeping_that_is_not_numbers_is_refused_typed(
    client: RedisClient, memory_key: str, field: str, value: str
) -> None:
    rng = random.Random(2)
    mem = memory(client, memory_key)
    mem.indexer.background = False
    for step in range(2):
        await mem.append_many([chat(10 * step + i, rng) for i in range(10)])
        await mem.indexer.catch_up()
    inc = (await mem.gateway.index_read()).incarnation
    await client.hset(mem.keys.ixseg, field, value)
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: mem.gateway.index_read(),
        lambda: mem.gateway.index_gc(),
        lambda: mem.gateway.index_put(9, {"b0": b"\x01"}, incarnation=inc),
        lambda: mem.gateway.index_merge([1, 2], None, {}, incarnation=inc),
        lambda: mem.search("refund"),
    ]
    untyped = []
    for call in calls:
        try:
            await call()
        except (CorruptDataError, ConflictError):
            pass
        except CompozyMemoryError as exc:
            if isinstance(exc, ScriptError):
                untyped.append(str(exc)[:80])
    assert not untyped


# -- server time ----------------------------------------------------------------------------


async def _with_big_summaries(client: RedisClient, key: str) -> Any:
    """A memory with 32 summaries (MAX_SUMMARIES) of about 1 MiB (MAX_MESSAGE_BYTES) each,
    all indexed: what a flush with a verbose summariser leaves, or a tenant writes."""
    mem = memory(client, key)
    mem.indexer.background = False
    await mem.append_many([chat(i, random.Random(1)) for i in range(10)])
    body = "zebra " + "lorem ipsum dolor " * 58_000
    for _ in range(32):
        sid = await client.hincrby(mem.keys.meta, "last_id", 1)
        head = f'{{"id":{sid},"ts":1,"tokens":10,"priority":1,'
        await client.rpush(
            mem.keys.summaries, head + json.dumps({"role": "system", "content": body})[1:]
        )
        await client.hincrby(mem.keys.meta, "summary_count", 1)
    await mem.indexer.catch_up()
    return mem


def _worst_ms(admin: redis_sync.Redis, script_name: str) -> float:
    return max(
        (
            e["duration"] / 1000
            for e in admin.slowlog_get(100)
            if script_name.encode() in b" ".join(e["command"].split(b" ")[:2])
        ),
        default=0.0,
    )


async def test_large_summaries_hold_the_server_for_what_is_returned_only(
    valkey_server: EmbeddedServer,
) -> None:
    client = connect(valkey_server.url)
    admin = redis_sync.Redis.from_url(valkey_server.url)
    mem = await _with_big_summaries(client, f"conv:big-summaries-{random.random()}")
    try:
        admin.config_set("slowlog-log-slower-than", 1000)
        admin.slowlog_reset()
        hits = await mem.search("zebra", limit=1)
        assert hits
        assert hits[0].where == "summary"
        fetch = _worst_ms(admin, "search_fetch")
        admin.slowlog_reset()
        await mem.gateway.index_pending(128, 1 << 20)  # nothing left to index
        pending = _worst_ms(admin, "index_pending")
        # One hit and its two neighbours are 3 MiB to return; every summary is 32 MiB.
        assert fetch < 40, f"search_fetch held the server {fetch} ms"
        assert pending < 20, f"index_pending held the server {pending} ms"
    finally:
        admin.config_set("slowlog-log-slower-than", 10_000)
        await mem.clear()
        await client.aclose()
        admin.close()


async def test_an_indexing_step_sent_after_the_memory_expired_writes_nothing(
    client: RedisClient, memory_key: str
) -> None:
    old = memory(client, memory_key)
    old.indexer.background = False
    await old.append_many([_said(f"plutonium shipment {i}") for i in range(10)])
    pending = await old.gateway.index_pending(128, 1 << 20)
    await client.delete(*old.keys.data)  # every key's one deadline passed
    added = await _step_as_read(old, pending)
    assert not added.applied
    assert await client.exists(*old.keys.data) == 0
    # The key is free for a new memory (a step that wrote meta and ix:d left one that every
    # write refused as evicted).
    new = memory(client, memory_key)
    await new.append(_said("kettle"))


async def test_summaries_out_of_id_order_are_found_by_search(
    client: RedisClient, memory_key: str
) -> None:
    """An import keeps summaries in the order given: locate() bisects, then looks through."""
    mem = memory(client, memory_key)
    mem.indexer.background = False
    await mem.append_many([chat(i, random.Random(3)) for i in range(4)])
    first = int(await client.hincrby(mem.keys.meta, "last_id", 5)) - 4
    words = ["alpha", "bravo", "charlie", "delta", "echo"]
    for sid, word in reversed(list(enumerate(words, start=first))):
        head = f'{{"id":{sid},"ts":1,"tokens":3,"priority":1,'
        body = json.dumps({"role": "system", "content": f"summary {word}"})[1:]
        await client.rpush(mem.keys.summaries, head + body)
        await client.hincrby(mem.keys.meta, "summary_count", 1)
    await mem.indexer.catch_up()
    for sid, word in enumerate(words, start=first):
        hits = await mem.search(word)
        assert (hits[0].id, hits[0].where) == (sid, "summary")
    await same_as_from_scratch(client, mem)
