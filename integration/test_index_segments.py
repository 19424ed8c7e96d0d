"""The search index as segments, on real servers: it equals one built from scratch through
merges, purges, interrupted steps and two indexers at once; a read-only handle writes
nothing; stored data written raw past its caps is refused, not read; search can be off."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import pytest

from compozy_memory import CorruptDataError, MemoryPolicy, SearchPolicy, UsageError
from compozy_memory._io.translate import RedisClient
from compozy_memory._search import merging
from compozy_memory._search.runtime import indexer as indexer_module
from compozy_memory._search.runtime.index_calls import parse_list
from compozy_memory._search.segments import block_field, bucket_field
from integration.index_state import built_from_scratch, indexed, stored_index
from integration.memories import memory
from integration.test_context import attach

WORDS = [
    "refund",
    "parcel",
    "kettle",
    "porto",
    "warranty",
    "carrier",
    "invoice",
    "address",
    "ticket",
    "storm",
]


def chat(n: int, rng: random.Random, tokens: int = 20) -> dict[str, Any]:
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
    return {
        "role": "user" if n % 2 else "assistant",
        "content": f"{words} order #{1000 + n}",
        "tokens": tokens,
    }


@pytest.fixture
def small_tiers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiers of two segments of a document or more: merges on every few steps."""
    monkeypatch.setattr(merging, "TIER", 2)
    monkeypatch.setattr(merging, "BASE", 1)


async def same_as_from_scratch(client: RedisClient, mem: Any) -> None:
    expected = await built_from_scratch(client, mem.keys)
    stored = await stored_index(client, mem.keys)
    assert stored.postings == expected.postings
    assert stored.doc_freqs == expected.doc_freqs
    assert stored.docs == expected.docs
    assert stored.seqs == expected.seqs
    meta = await client.hmget(mem.keys.meta, "ix_docs", "ix_len")
    total = sum(length for _, length in expected.docs.values())
    assert (int(meta[0] or 0), int(meta[1] or 0)) == (len(expected.docs), total)


async def fields_match_the_list(client: RedisClient, mem: Any) -> None:
    """After garbage is collected: the hash holds the listed segments' fields and nothing
    else (a merge lost or left nothing)."""
    raw = await client.hgetall(mem.keys.ixseg)
    names = {(k.decode() if isinstance(k, bytes) else k) for k in raw}
    listed = parse_list(_text(raw.get(b"L", raw.get("L", b""))))
    own = {"L", "R", "G"}
    possible = {f for s in listed for f in s.fields()}
    assert names - own <= possible
    for s in listed:  # every block is there (empty buckets are not stored)
        assert {block_field(s.gen, j) for j in range(s.blocks)} <= names
        assert any(bucket_field(s.gen, k) in names for k in range(s.buckets))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


@pytest.mark.usefixtures("small_tiers")
async def test_the_index_equals_one_built_from_scratch_through_merges_and_interruptions(
    client: RedisClient, memory_key: str
) -> None:
    rng = random.Random(11)
    mem = memory(client, memory_key, max_tokens=1_500, archive_max=90)
    mem.indexer.background = False  # the test decides when the indexer runs
    flusher = attach(mem, 1_500)
    n = 0
    for _ in range(90):
        action = rng.choice(
            ["append"] * 5 + ["flush", "trim", "replace", "index", "index", "compact", "twice"]
        )
        if action == "append":
            await mem.append_many([chat(n + i, rng, tokens=rng.randint(5, 60)) for i in range(6)])
            n += 6
        elif action == "flush":
            await flusher.flush()
        elif action == "trim":
            await mem.trim(keep_messages=rng.randint(0, 10))
        elif action == "replace":
            await mem.replace([chat(n, rng)])
            n += 1
        elif action == "index":
            await mem.indexer.catch_up(max_steps=1)
        elif action == "compact":
            await mem.indexer.compact()
        else:  # a step sent twice (a retry after a lost reply) is applied once
            pending = await mem.gateway.index_pending(4, 1 << 20)
            if pending.adds:
                await mem.indexer.catch_up(max_steps=1)
                from compozy_memory._search.analysis import ANALYZER_VERSION
                from compozy_memory._search.merging import step_segments

                documents, positive, negative = step_segments(list(pending.adds), [])
                again = await mem.gateway.index_add(
                    pending,
                    analyzer=str(ANALYZER_VERSION),
                    upto=pending.upto,
                    seq_upto=pending.seq_upto,
                    documents=documents,
                    positive=positive,
                    negative=negative,
                    gone=0,
                    gone_first=0,
                )
                assert not again.applied
    await flusher.wait_idle()
    await mem.indexer.catch_up()
    assert int(await client.hget(mem.keys.meta, "archive_base") or 0) > 0, "the cap dropped some"
    made = int(await client.hget(mem.keys.meta, "ix_gen") or 0)
    listed = len((await mem.gateway.index_read()).segments)
    assert made > 3 * listed, "segments were merged on the way"
    await same_as_from_scratch(client, mem)
    await mem.indexer.compact()
    await same_as_from_scratch(client, mem)
    await fields_match_the_list(client, mem)
    state = await mem.gateway.index_read()
    assert [s.sign for s in state.segments] == [1]  # one segment: the removals purged


@pytest.mark.usefixtures("small_tiers")
async def test_a_merge_abandoned_midway_is_collected_once_its_claim_lapses(
    client: RedisClient, memory_key: str
) -> None:
    rng = random.Random(3)
    mem = memory(client, memory_key)
    mem.indexer.background = False
    for step in range(3):
        await mem.append_many([chat(10 * step + i, rng) for i in range(10)])
        await mem.indexer.catch_up()
    state = await mem.gateway.index_read()
    inputs = [s.gen for s in state.segments[:2]]
    fields = {"b0": b"\x01\x01\x00", "b1": b"\x01\x01\x00"}
    from compozy_memory._search.segments import Encoded

    output = Encoded(1, 2, 1, 2, 4, 0, {**fields, "b2": b"x", "b3": b"y"})
    done, gen = await mem.gateway.index_merge(
        inputs, output, fields, incarnation=state.incarnation
    )  # two of four fields
    assert not done
    # Its inputs are claimed: nobody merges them meanwhile, and they stay searchable.
    assert {g for m in (await mem.gateway.index_read()).merges for g in m.inputs} == set(inputs)
    hits = await mem.search("refund parcel")
    assert hits
    # The claim lapses (its deadline moved into the past, as if MERGE_LEASE_MS passed)...
    raw = _text(await client.hget(mem.keys.ixseg, "R"))
    parts = raw.split(",")
    parts[1] = "1"
    await client.hset(mem.keys.ixseg, "R", ",".join(parts))
    # ... and the next catch-up collects its fields and merges the inputs itself.
    await mem.append(chat(99, rng))
    await mem.indexer.catch_up()
    await mem.indexer.compact()
    assert await client.hget(mem.keys.ixseg, bucket_field(gen, 0)) is None
    await same_as_from_scratch(client, mem)
    await fields_match_the_list(client, mem)


@pytest.mark.usefixtures("small_tiers")
async def test_two_indexers_at_once_lose_nothing(client: RedisClient, memory_key: str) -> None:
    rng = random.Random(5)
    a = memory(client, memory_key, archive_max=150)
    b = memory(client, memory_key, archive_max=150)
    for handle in (a, b):
        handle.indexer.background = False

    async def write(handle: Any, start: int) -> None:
        for i in range(25):
            await handle.append_many([chat(start + 4 * i + j, rng) for j in range(4)])
            if i % 5 == 4:
                await handle.trim(keep_messages=20)

    async def index(handle: Any) -> None:
        for _ in range(40):
            await handle.indexer.catch_up(max_steps=2)
            await asyncio.sleep(0)

    await asyncio.gather(write(a, 0), write(b, 1000), index(a), index(b), index(a), index(b))
    await asyncio.gather(a.indexer.catch_up(), b.indexer.catch_up())
    await same_as_from_scratch(client, a)
    await asyncio.gather(a.indexer.compact(), b.indexer.compact())
    await a.indexer.compact()
    await same_as_from_scratch(client, a)
    await fields_match_the_list(client, a)


@pytest.mark.usefixtures("small_tiers")
async def test_a_background_merge_holds_back_no_step_of_its_memory(
    client: RedisClient, memory_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A merge held in its thread (as a cascade of big tier merges holds a loaded writer for
    # seconds): a message appended meanwhile is still made searchable by the next catch-up.
    entered, release = threading.Event(), threading.Event()
    merge = merging.merged_segment

    def held(*args: Any) -> Any:
        entered.set()
        release.wait(30)
        return merge(*args)

    monkeypatch.setattr(indexer_module, "merged_segment", held)
    monkeypatch.setattr(indexer_module, "_THREAD_DOCS", 0)  # every merge on a thread
    mem = memory(client, memory_key)
    mem.index_ops.delay = mem.index_ops.debounce  # a step after each write, not a batch
    reader = memory(client, memory_key, read_only=True)

    async def searchable(word: str) -> bool:
        # Indexed, not only found in the live tail a search ranks itself.
        for _ in range(500):
            if (await reader.gateway.index_read()).unindexed == 0 and await reader.search(word):
                return True
            await asyncio.sleep(0.01)
        return False

    try:
        await mem.append({"role": "user", "content": "the kettle arrived", "tokens": 4})
        assert await searchable("kettle")
        await mem.append({"role": "user", "content": "the parcel is late", "tokens": 4})
        for _ in range(500):  # two segments: a merge is due, and held
            if entered.is_set():
                break
            await asyncio.sleep(0.01)
        assert entered.is_set()
        await mem.append({"role": "user", "content": "a storm near porto", "tokens": 4})
        assert await searchable("porto")
        assert not release.is_set()  # found while the merge was still held
    finally:
        release.set()
    await mem.indexer.wait_idle()
    await mem.indexer.catch_up()
    await same_as_from_scratch(client, mem)
    await fields_match_the_list(client, mem)
    # The held merge was stored once released (the newest segment waits for its tier).
    assert sorted(s.docs for s in (await mem.gateway.index_read()).segments) == [1, 2]


async def test_a_read_only_handle_writes_nothing_when_it_searches(
    client: RedisClient, memory_key: str
) -> None:
    rng = random.Random(9)
    writer = await indexed(client, memory_key, [chat(i, rng) for i in range(40)])
    await writer.append_many([chat(40 + i, rng) for i in range(5)])  # left unindexed
    await writer.append({"role": "user", "content": "a zeppelin over the harbour"})
    reader = memory(client, memory_key, read_only=True)
    before = {k: await client.dump(k) for k in writer.keys.data}
    hits = await reader.search("refund kettle")
    assert hits.unindexed == 0  # the live tail past the index is ranked by the reader
    assert (await reader.search("zeppelin"))[0].id == 46
    assert (await reader.gateway.index_read()).unindexed == 6  # and still not indexed
    layers = await reader.context_layers(500, query="zeppelin harbour")
    assert 46 in [m.id for m in (*layers.recalled, *layers.window)]
    await reader.context(500, query="the refund")
    assert {k: await client.dump(k) for k in writer.keys.data} == before


async def test_fields_written_raw_past_their_caps_are_refused_not_read(
    client: RedisClient, memory_key: str
) -> None:
    rng = random.Random(2)
    mem = memory(client, memory_key)
    mem.indexer.background = False
    await mem.append_many([chat(i, rng) for i in range(30)])
    await mem.indexer.catch_up()
    (segment,) = (await mem.gateway.index_read()).segments
    planted = b"\x01\x01" + b"x" * (2 << 20)
    for k in range(segment.buckets):
        await client.hset(mem.keys.ixseg, bucket_field(segment.gen, k), planted)
    with pytest.raises(CorruptDataError):
        await mem.search("refund")
    await client.hset(mem.keys.ixseg, "L", "1,1,1,1,1,1,0,1;" * 4_000)
    with pytest.raises(CorruptDataError):
        await mem.search("refund")
    await client.hset(mem.keys.ixdocs, "0", b"\x01" * 4_096)
    with pytest.raises(CorruptDataError):
        await mem.gateway.search_fetch([1], limit=1)
    # Bytes that a segment never holds (a planted bucket of the right size) are refused by
    # the client's decoder.
    await client.hset(mem.keys.ixseg, "L", f"{segment.gen},1,30,1,30,{segment.buckets},0,9")
    for k in range(segment.buckets):
        await client.hset(mem.keys.ixseg, bucket_field(segment.gen, k), b"\x01\x09\xff\xff")
    with pytest.raises(CorruptDataError):
        await mem.search("refund")


async def test_a_memory_with_search_off_keeps_no_index(
    client: RedisClient, memory_key: str
) -> None:
    rng = random.Random(4)
    policy = MemoryPolicy(max_tokens=800, archive_max=20, search=SearchPolicy(enabled=False))
    off = memory(client, memory_key, policy=policy)
    await off.append_many([chat(i, rng, tokens=30) for i in range(60)])
    await off.trim(keep_messages=5)  # moves unindexed messages: no index to wait for
    await off.indexer.wait_idle()
    with pytest.raises(UsageError, match="search is turned off"):
        await off.search("refund")
    layers = await off.context_layers(600, query="refund")
    assert layers.window
    assert not layers.recalled
    keys = off.keys
    assert await client.exists(keys.ixseg, keys.ixdocs, keys.ixgone, keys.ixvec) == 0
    # Turned on again, the index is built from the archive.
    on = memory(client, memory_key, archive_max=20)
    on.indexer.background = False
    await on.indexer.catch_up()
    assert (await on.search("order 1050")).unindexed == 0
    await same_as_from_scratch(client, on)


MANY_WORDS = [f"word{n}x" for n in range(120)]


async def test_a_merge_job_planned_before_the_memory_expired_merges_nothing_of_the_next(
    client: RedisClient, memory_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A handle's background step leaves its segment list for the merge job; the job runs
    # later (on a sync handle: when one of the process's two background threads is free).
    # Meanwhile the memory expires and another replica writes it again: generations start
    # again at 1, so the list the job holds names segments of the new memory with the old
    # entries (first id, buckets). Its merge must not be stored.
    monkeypatch.setattr(merging, "TIER", 2)
    monkeypatch.setattr(merging, "BASE", 1)
    mem = memory(client, memory_key)
    mem.indexer.background = False
    ops = mem.index_ops
    monkeypatch.setattr(ops._merges, "fire", lambda: None)  # the merge job is due, not run
    for word in ("kettle", "parcel"):
        await mem.append({"role": "user", "content": f"the {word}", "tokens": 4})
        await mem.transport.drive(ops._catch_up(None, merge=False))
    assert ops._known is not None
    assert [s.gen for s in ops._known.segments] == [1, 2]

    await client.delete(*mem.keys.data)  # every key's deadline passed
    monkeypatch.setattr(merging, "TIER", 8)  # (the other replica's own merges wait)
    other = memory(client, memory_key)
    other.indexer.background = False
    await other.append({"role": "user", "content": " ".join(MANY_WORDS), "tokens": 200})
    await other.indexer.catch_up()
    await other.append({"role": "user", "content": "a storm near porto", "tokens": 4})
    await other.indexer.catch_up()
    listed = (await other.gateway.index_read()).segments
    assert [(s.gen, s.docs) for s in listed] == [(1, 1), (2, 1)]
    assert listed[0].buckets > 1

    monkeypatch.setattr(merging, "TIER", 2)
    await mem.transport.drive(ops._merge_job())  # the job runs at last
    await same_as_from_scratch(client, other)
    await fields_match_the_list(client, other)
    assert 1 in [hit.id for hit in await other.search("word77x")]


async def test_wait_idle_waits_for_a_catch_up_that_starts_while_it_waits_for_merges(
    client: RedisClient, memory_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A merge held in its thread; wait_idle is called; a write's catch-up starts (held in its
    # thread too) and the merge then ends: wait_idle must not return while the catch-up runs.
    monkeypatch.setattr(merging, "TIER", 2)
    monkeypatch.setattr(merging, "BASE", 1)
    merge_in, merge_go = threading.Event(), threading.Event()
    step_in, step_go = threading.Event(), threading.Event()
    merge, step = merging.merged_segment, merging.step_segments

    def held_merge(*args: Any) -> Any:
        merge_in.set()
        merge_go.wait(30)
        return merge(*args)

    def held_step(items: Any, gones: Any) -> Any:
        if any("storm" in str(m.get("content")) for _, _, m in items):
            step_in.set()
            step_go.wait(30)
        return step(items, gones)

    monkeypatch.setattr(indexer_module, "merged_segment", held_merge)
    monkeypatch.setattr(indexer_module, "step_segments", held_step)
    monkeypatch.setattr(indexer_module, "_THREAD_DOCS", 0)  # every step and merge on a thread
    mem = memory(client, memory_key)
    mem.index_ops.delay = mem.index_ops.debounce  # a step after each write, not a batch

    async def until(event: threading.Event) -> None:
        for _ in range(1000):
            if event.is_set():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("never reached")

    try:
        await mem.append({"role": "user", "content": "the kettle arrived", "tokens": 4})
        await mem.indexer.wait_idle()
        await mem.append({"role": "user", "content": "the parcel is late", "tokens": 4})
        await until(merge_in)  # two segments: a merge runs, held
        waiting = asyncio.create_task(mem.indexer.wait_idle())
        await mem.append({"role": "user", "content": "a storm near porto", "tokens": 4})
        await until(step_in)  # the next catch-up runs, held
        merge_go.set()
        await asyncio.sleep(0.3)
        assert not waiting.done(), "wait_idle returned while a catch-up was running"
    finally:
        merge_go.set()
        step_go.set()
    await waiting
    await mem.indexer.wait_idle()
