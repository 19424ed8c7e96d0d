"""The search index under attack, on real servers: rebuilds the archive's cap outruns, steps
and merges read before a memory expired and sent after it was written again, bookkeeping
fields planted by a tenant, summaries that make a search copy megabytes per hit. Each test
states what must hold; the index is checked against one built from scratch
(integration/index_state.py) where it applies."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis as redis_sync

from compozy_memory import (
    BackendUnavailableError,
    CompozyMemoryError,
    ConflictError,
    CorruptDataError,
    IndexLagError,
    IndexProgress,
    InvalidMessageError,
    MemoryPolicy,
    SearchPolicy,
    SyncMemoryInstance,
    connect,
    connect_sync,
)
from compozy_memory._io.translate import RedisClient
from compozy_memory._search.analysis import ANALYZER_VERSION
from compozy_memory._search.merging import merged_segment, read_chunks, step_segments
from compozy_memory._search.runtime.index_calls import covered
from compozy_memory._search.runtime.indexer import _READ_BYTES_EACH
from compozy_memory._wire.steps import Op
from compozy_memory.embedded import EmbeddedServer
from compozy_memory.errors import ScriptError
from integration.index_state import indexed
from integration.memories import COUNTER, memory
from integration.test_index_segments import (  # noqa: F401 (small_tiers: a fixture)
    chat,
    fields_match_the_list,
    same_as_from_scratch,
    small_tiers,
)


def _said(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content, "tokens": 5}


async def _step_as_read(mem: Any, pending: Any) -> Any:
    """index_add of everything ``pending`` returned, as an indexer that read it would send."""
    items = list(pending.adds)
    documents, positive, negative = step_segments(items, [])
    upto, seq_upto = covered(pending, items)
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
    for chunk in read_chunks(inputs, _READ_BYTES_EACH):
        values.update((await old.gateway.index_read(gens, chunk)).values)
    output = merged_segment(inputs, values)
    assert output is not None
    await client.delete(*old.keys.data)  # every key's one deadline passed
    new = await two_segments("kettle")
    assert [e.gen for e in (await new.gateway.index_read()).segments] == gens
    with pytest.raises(ConflictError):
        await old.gateway.index_merge(gens, output, output.fields, incarnation=state.incarnation)
    assert not await new.search("plutonium")
    await same_as_from_scratch(client, new)
    await fields_match_the_list(client, new)


async def test_a_catch_up_of_a_memory_that_is_not_there_returns(
    client: RedisClient, memory_key: str
) -> None:
    """A memory with no meta (never written, or every key's deadline passed) has nothing to
    index. Its missing meta reads as format 1, which asks for a reset that finds no memory to
    reset: catch_up asked again without end, two calls a turn, max_steps or not (the fleet
    test hung so when the writer's last act was an expiry)."""
    mem = memory(client, memory_key)
    mem.indexer.background = False
    async with asyncio.timeout(10):
        assert await mem.indexer.catch_up(max_steps=1) == IndexProgress(0, 0, 0)
        await mem.append_many([_said(f"kettle descaling {i}") for i in range(3)])
        await client.delete(*mem.keys.data)  # every key's one deadline passed
        assert await mem.indexer.catch_up() == IndexProgress(0, 0, 0)
        assert not mem.indexer.dirty
    assert await client.exists(*mem.keys.data) == 0  # and nothing was written


async def test_a_background_catch_up_whose_memory_expired_before_it_ran_ends(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key)
    await mem.append(_said("kettle descaling"))  # a catch-up is due a debounce from now
    await client.delete(*mem.keys.data)  # every key's one deadline passed meanwhile
    async with asyncio.timeout(10):
        await mem.indexer.wait_idle()
    assert await client.exists(*mem.keys.data) == 0


def test_a_sync_handles_background_catch_up_whose_memory_expired_ends(
    valkey_server: EmbeddedServer, memory_key: str
) -> None:
    """The same steps on a background thread: the thread was never given back."""
    client = connect_sync(valkey_server.url)
    try:
        mem = SyncMemoryInstance.open(client, project="itest", key=memory_key, counter=COUNTER)
        mem.append(_said("kettle descaling"))
        client.delete(*mem.keys.data)
        assert mem.indexer.wait_idle(10)
        assert client.exists(*mem.keys.data) == 0
    finally:
        client.close()


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

    async def index_more() -> None:
        # index_add passes these fields on (or appends to the list) without reading their
        # entries: the indexer that parses its reply refuses them, typed.
        await mem.append(chat(50, rng))
        await mem.indexer.catch_up()

    with pytest.raises(CompozyMemoryError) as raised:
        await index_more()
    assert not isinstance(raised.value, ScriptError), raised.value
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


@pytest.mark.parametrize("field", ["L", "R"])
async def test_bookkeeping_planted_as_bytes_that_are_not_text_is_refused_typed(
    client: RedisClient, memory_key: str, field: str
) -> None:
    # An index step passes the list and the merges back as stored: the indexer decodes them.
    rng = random.Random(2)
    mem = await indexed(client, memory_key, [chat(i, rng) for i in range(10)])
    stored = await client.hget(mem.keys.ixseg, field) or b""
    assert isinstance(stored, bytes)
    await client.hset(mem.keys.ixseg, field, stored + b"\xff")  # as many entries as before
    await mem.append(chat(50, rng))
    with pytest.raises(CorruptDataError):
        await mem.indexer.catch_up()


#: Entries of 16,000 digits that no pattern of the scripts can match: a pattern whose groups
#: split a run of digits two ways backtracked over it for seconds (2.2 s, measured).
LONG_ENTRIES = [
    ("R", "1,2," + "1" * 16_000 + "x"),
    ("R", "1,2," + "1" * 16_000 + ",1,1,1,1,1,1,1,1,x"),
    ("R", "1,2," + "1|" * 8_000 + "x"),
    ("L", "1,1," + "1" * 16_000 + "x"),
]


@pytest.mark.parametrize(("field", "value"), LONG_ENTRIES, ids=["digits", "late", "pipes", "L"])
async def test_a_long_planted_entry_is_refused_in_linear_time(
    valkey_server: EmbeddedServer, memory_key: str, field: str, value: str
) -> None:
    client = connect(valkey_server.url)
    admin = redis_sync.Redis.from_url(valkey_server.url)
    try:
        mem = await indexed(client, memory_key, [chat(i, random.Random(2)) for i in range(10)])
        await client.hset(mem.keys.ixseg, field, value)
        admin.config_set("slowlog-log-slower-than", 0)
        admin.slowlog_reset()
        with pytest.raises(CorruptDataError):
            await mem.gateway.index_read()
        assert _worst_ms(admin, "index_read") < 100
    finally:
        admin.config_set("slowlog-log-slower-than", 10_000)
        admin.close()
        await client.aclose()


async def test_an_envelope_id_past_what_records_hold_is_refused_typed(
    client: RedisClient, memory_key: str
) -> None:
    mem = await indexed(client, memory_key, [_said(f"quokka {i}") for i in range(3)])
    last = (await client.lrange(mem.keys.msgs, -1, -1))[0]
    assert isinstance(last, bytes)
    await client.rpush(mem.keys.msgs, last.replace(b'"id":3,', f'"id":{2**56},'.encode()))
    await client.hincrby(mem.keys.meta, "count", 1)
    await client.hset(mem.keys.meta, "last_id", 2**56)
    with pytest.raises(CorruptDataError):
        await mem.indexer.catch_up()


async def test_a_block_of_records_that_is_not_whole_records_is_refused_typed(
    client: RedisClient, memory_key: str
) -> None:
    mem = await indexed(client, memory_key, [_said(f"quokka {i}") for i in range(3)])
    await mem.append_many([_said(f"wombat {i}") for i in range(3)])
    block = await client.hget(mem.keys.ixdocs, "0")
    assert isinstance(block, bytes)
    await client.hset(mem.keys.ixdocs, "0", block + bytes(5))
    with pytest.raises(CorruptDataError):
        await mem.indexer.catch_up()


def _records_cut(records: bytes) -> bytes:
    return records[:-1]


def _records_with(at: int, byte: int) -> Callable[[bytes], bytes]:
    def spoil(records: bytes) -> bytes:
        return records[:at] + bytes([byte]) + records[at + 1 :]

    return spoil


def _records_of_id(doc_id: int) -> Callable[[bytes], bytes]:
    def spoil(records: bytes) -> bytes:
        return doc_id.to_bytes(7, "big") + records[7:]

    return spoil


#: Document records no client writes: one byte short, a kind outside 1..7, id 0, an id past
#: the step's range (the records are bytes the script reads, not text it parses).
SPOILED: dict[str, Callable[[bytes], bytes]] = {
    "cut short": _records_cut,
    "kind 0": _records_with(7, 0),
    "kind 8": _records_with(7, 8),
    "id 0": _records_of_id(0),
    "id past the step": _records_of_id(10_000),
}


@pytest.mark.parametrize("spoil", list(SPOILED.values()), ids=list(SPOILED))
async def test_a_step_whose_document_records_no_client_writes_is_refused_writing_nothing(
    client: RedisClient,
    memory_key: str,
    monkeypatch: pytest.MonkeyPatch,
    spoil: Callable[[bytes], bytes],
) -> None:
    from compozy_memory._search.runtime import index_calls
    from integration.test_planted import dump

    mem = memory(client, memory_key)
    mem.indexer.background = False
    await mem.append_many([_said(f"quokka number {i}") for i in range(3)])
    pending = await mem.gateway.index_pending(8, 1 << 20)
    before = await dump(client, mem.keys)
    records = index_calls.doc_records
    monkeypatch.setattr(index_calls, "doc_records", lambda docs: spoil(records(docs)))
    with pytest.raises(InvalidMessageError):
        await _step_as_read(mem, pending)
    assert await dump(client, mem.keys) == before
    monkeypatch.undo()
    await mem.indexer.catch_up()
    hits = await mem.search("quokka")
    assert ({hit.id for hit in hits}, hits.unindexed) == ({1, 2, 3}, 0)


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
        assert not hits  # summaries have a lane of their own
        assert [h.where for h in hits.summaries] == ["summary"]
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
        found = (await mem.search(word)).summaries
        assert (found[0].id, found[0].where) == (sid, "summary")
    await same_as_from_scratch(client, mem)


# -- a fleet of indexers, killed and racing ---------------------------------------------------


class _Killer:
    """Kills a handle's index calls at random: before a call is sent, or after it ran (the
    process died before it heard the reply), as a process killed mid-step does."""

    def __init__(self, mem: Any, rng: random.Random, share: float) -> None:
        self.rng = rng
        self.share = share
        self.kills = 0
        self.transport = mem.gateway.transport
        for name in ("index_add", "index_merge", "index_put", "index_gc", "index_read"):
            setattr(mem.gateway, name, self._wrap(getattr(mem.gateway, name)))

    def _wrap(self, call: Callable[..., Any]) -> Callable[..., Op[Any]]:
        def killed(*args: Any, **kwargs: Any) -> Any:
            if self.rng.random() < self.share:
                self.kills += 1
                raise BackendUnavailableError("killed before the call")
            result = yield from call(*args, **kwargs)
            if self.rng.random() < self.share:
                self.kills += 1
                raise BackendUnavailableError("killed after the call ran")
            return result

        return lambda *args, **kwargs: Op(killed(*args, **kwargs), self.transport)


#: What a handle may meet while others race it: its own kills, the races the library types.
EXPECTED = (BackendUnavailableError, ConflictError, IndexLagError)


async def _expire_claims(client: RedisClient, mem: Any) -> None:
    """Every open merge's claim lapses (as MERGE_LEASE_MS after a dead merger's last step)."""
    raw = await client.hget(mem.keys.ixseg, "R")
    text = raw.decode() if isinstance(raw, bytes) else (raw or "")
    if text:
        lapsed = []
        for entry in text.split(";"):
            parts = entry.split(",")
            parts[1] = "1"
            lapsed.append(",".join(parts))
        await client.hset(mem.keys.ixseg, "R", ";".join(lapsed))


@pytest.mark.slow
@pytest.mark.usefixtures("small_tiers")
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
async def test_a_fleet_of_killed_and_racing_indexers_loses_and_duplicates_nothing(
    client: RedisClient, memory_key: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from compozy_memory._search.runtime import indexer as indexer_module
    from integration.test_context import attach

    # Merges written in several calls (index_merge, index_put..., index_merge to publish).
    monkeypatch.setattr(indexer_module, "_WRITE_BYTES", 700)
    rng = random.Random(seed)
    handles = [memory(client, memory_key, max_tokens=1_200, archive_max=40) for _ in range(3)]
    for h in handles:
        h.indexer.background = False
    killers = [_Killer(h, random.Random(seed * 10 + i), 0.06) for i, h in enumerate(handles[1:])]
    flusher = attach(handles[0], 1_200)
    surprises: list[str] = []
    n = 0

    async def guarded_call(work: Awaitable[Any]) -> None:
        try:
            await work
        except EXPECTED:
            pass
        except CompozyMemoryError as exc:
            surprises.append(f"{type(exc).__name__}: {exc}"[:200])

    done = asyncio.Event()

    async def writer() -> None:
        nonlocal n
        for _ in range(250):
            h = rng.choice(handles)
            action = rng.choice(["append"] * 6 + ["trim", "replace", "flush", "clear", "expire"])
            if action == "append":
                batch = [chat(n + i, rng, tokens=rng.randint(5, 60)) for i in range(5)]
                n += 5
                await guarded_call(h.append_many(batch))
            elif action == "trim":
                await guarded_call(h.trim(keep_messages=rng.randint(0, 12)))
            elif action == "replace":
                await guarded_call(h.replace([chat(n, rng)]))
            elif action == "flush":
                await guarded_call(flusher.flush())
            elif action == "clear" and rng.random() < 0.05:
                await guarded_call(h.clear())
            elif action == "expire" and rng.random() < 0.05:
                await client.delete(*h.keys.data)  # the memory's one deadline passed
            await asyncio.sleep(0)
        done.set()

    async def indexer(h: Any) -> None:
        while not done.is_set():
            what = rng.random()
            if what < 0.6:
                await guarded_call(h.indexer.catch_up(max_steps=rng.randint(1, 3)))
            elif what < 0.8:
                await guarded_call(h.indexer.compact())
            elif what < 0.85:
                await guarded_call(h.gateway.index_gc())
            elif what < 0.86:
                await guarded_call(h.gateway.index_reset(force=True))
            await asyncio.sleep(0.002)

    # A hang fails here, named (pytest-timeout's alarm can land in a background task and be
    # lost there): the fleet's run, and the last catch-up after it (an indexer that never
    # returned on a memory whose keys expired hung both).
    async with asyncio.timeout(100):
        await asyncio.gather(writer(), *(indexer(h) for h in handles), indexer(handles[0]))
        await flusher.wait_idle()
        assert not surprises
        assert sum(k.kills for k in killers) > 5
        final = memory(client, memory_key, max_tokens=1_200, archive_max=40)
        final.indexer.background = False
        await _expire_claims(client, final)
        await final.indexer.catch_up()
        await final.indexer.compact()
        await same_as_from_scratch(client, final)
        await fields_match_the_list(client, final)
        state = await final.gateway.index_read()
    assert not state.merges
    assert not state.garbage
    assert len(state.segments) <= 1


async def test_a_full_index_whose_segments_a_dead_merge_claims_does_not_spin_catch_up(
    client: RedisClient, memory_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from compozy_memory._model.limits import MAX_SEGMENTS
    from compozy_memory._search.runtime import indexer as indexer_module
    from compozy_memory._search.segments import Encoded

    mem = memory(client, memory_key)
    mem.indexer.background = False
    with monkeypatch.context() as setup:  # no merges: the list fills up
        setup.setattr(indexer_module, "plan_merge", lambda *a, **k: [])
        for i in range(MAX_SEGMENTS):
            await mem.append(_said(f"parcel {i}"))
            await mem.indexer.catch_up()
    state = await mem.gateway.index_read()
    assert len(state.segments) == MAX_SEGMENTS
    # A compaction claims every segment, writes part of its output, and its process dies.
    gens = [s.gen for s in state.segments]
    output = Encoded(1, 64, 1, 64, 2, 0, {"b0": b"\x01\x01\x00", "b1": b"\x01\x01\x00"})
    done, _ = await mem.gateway.index_merge(
        gens, output, {"b0": output.fields["b0"]}, incarnation=state.incarnation
    )
    assert not done
    await mem.append(_said("one more parcel"))
    reads = 0
    pending = mem.gateway.index_pending

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return pending(*args, **kwargs)

    monkeypatch.setattr(mem.gateway, "index_pending", counted)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(mem.indexer.catch_up(max_steps=1), 3)
    assert reads <= 3, f"catch_up(max_steps=1) read what is pending {reads} times"


async def test_a_message_and_a_removal_that_do_not_fit_one_step_go_in_two(
    client: RedisClient, memory_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step too large for a call is halved until it fits: one message with one removal
    of the archive's cap goes as two steps (it looped without end, never yielding)."""
    from compozy_memory._search.runtime import indexer as indexer_module

    mem = memory(client, memory_key, archive_max=1)
    mem.indexer.background = False
    rng = random.Random(5)
    await mem.append_many([chat(i, rng, tokens=40) for i in range(3)])
    await mem.trim(keep_messages=0)  # archived; the cap drops two of them
    await mem.append(chat(3, rng, tokens=40))
    pending = await mem.gateway.index_pending(1, 1 << 20)
    assert (len(pending.adds), len(pending.gones)) == (1, 1)
    _, positive, negative = step_segments(list(pending.adds), list(pending.gones))
    assert positive is not None
    assert negative is not None
    alone = max(e.size + 8 * len(e.fields) for e in (positive, negative))
    monkeypatch.setattr(indexer_module, "_WRITE_BYTES", alone)
    monkeypatch.setattr(indexer_module, "INDEX_STEP_DOCS", 1)
    progress = await asyncio.wait_for(mem.indexer.catch_up(), 30)
    assert progress.unindexed == 0
    assert progress.steps >= 2
    await same_as_from_scratch(client, mem)
