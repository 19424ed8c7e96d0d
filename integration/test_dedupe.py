"""A write repeated with its dedupe key is applied once, however large; the set of keys
remembered stays bounded however many writes there are."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections import Counter
from typing import Any

import pytest

from compozy_memory import InvalidMessageError
from compozy_memory._io.translate import RedisClient
from compozy_memory._model.limits import (
    DEDUPE_CHUNK,
    DEDUPE_CHUNKS,
    DEDUPE_SWEEP,
    DEDUPE_WINDOW,
    MAX_BATCH,
)
from integration.engines import EngineSpec
from integration.faults import consistency_problems, meta_counts
from integration.flush_support import PROJECT, audit
from integration.memories import memory, turn

# Run by scripts/reliability: its counts become rows of RELIABILITY.md.
pytestmark = pytest.mark.faults


async def test_a_large_batch_repeated_with_its_dedupe_key_is_stored_once(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    size = MAX_BATCH  # the largest batch one call takes: one more is refused, typed
    mem = memory(client, memory_key, project=PROJECT)
    with pytest.raises(InvalidMessageError, match=f"at most {MAX_BATCH}"):
        await mem.append_many([turn(n, tokens=1) for n in range(size + 1)])
    batch = [turn(n, tokens=1) for n in range(size)]
    first = await mem.append_many(batch, dedupe_key="webhook-1")
    again = await mem.append_many(batch, dedupe_key="webhook-1")  # a retry after a lost reply
    assert not first.duplicate
    assert again.duplicate
    assert again.ids == first.ids
    assert await mem.len() == size
    await audit(client, memory_key, list(first.ids))
    record(
        group="adversarial",
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
    mem = memory(client, memory_key, project=PROJECT)
    for _ in range(12):  # 3,000 writes that add no ids
        await asyncio.gather(*(mem.replace([]) for _ in range(250)))
    assert await client.zcard(mem.keys.dedupe) <= 1_064


def text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def process_key(process: str, n: int) -> str:
    """The dedupe key a handle makes up for its n-th write from process ``process``."""
    return f"~{process}:{n}"


async def test_a_retry_is_stored_once_however_many_newer_writes_of_its_process_came_first(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    """A reply lost long ago: the retry of a process's own key (or of a caller's) arrives
    after hundreds of newer writes, from its recent record, a sealed chunk or the set."""
    mem = memory(client, memory_key, project=PROJECT)
    firsts = {}
    for n in range(1, 701):
        key = process_key("p1", n) if n % 7 else f"event-{n}"
        firsts[key] = await mem.append(turn(n, tokens=1), dedupe_key=key)
    # Depths: the newest writes (the process's record), older ones sealed in chunks, and
    # caller keys among them.
    retried = [process_key("p1", n) for n in (1, 2, 40, 333, 650, 698, 699)]
    retried += ["event-7", "event-350", "event-700"]
    for key in retried:
        again = await mem.append(turn(0, tokens=1), dedupe_key=key)
        assert again.duplicate, key
        assert again.ids == firsts[key].ids, key
    assert await mem.len() == 700
    # Past the window they are forgotten: the same keys store again.
    await mem.append_many([turn(n, tokens=1) for n in range(1_000)])
    late = await mem.append(turn(0, tokens=1), dedupe_key=process_key("p1", 650))
    assert not late.duplicate
    assert not (await mem.append(turn(0, tokens=1), dedupe_key="event-700")).duplicate
    await audit(client, memory_key)
    record(
        group="adversarial",
        fault="retries of 10 writes arriving after up to 700 newer ones of the same process",
        engine=engine.name,
        promise="a retried write is applied at most once within the dedupe window",
        operations=700 + len(retried),
        acknowledged=700,
        lost=0,
        duplicated=0,
        observed="each retry answered duplicate=True with its first call's ids",
    )


async def test_a_write_that_arrives_after_newer_ones_of_its_process_is_stored(
    client: RedisClient, memory_key: str
) -> None:
    # A process's writes may reach the server out of order (two connections): a key below
    # the newest recorded is looked up, not taken for a retry.
    mem = memory(client, memory_key, project=PROJECT)
    for n in (10, 11, 12, 5, 3, 100, 50):
        stored = await mem.append(turn(n, tokens=1), dedupe_key=process_key("p2", n))
        assert not stored.duplicate, n
    for n in (3, 5, 50):
        assert (await mem.append(turn(n, tokens=1), dedupe_key=process_key("p2", n))).duplicate
    # Counters of any length compare as numbers, and the same number written otherwise is
    # another key.
    assert not (await mem.append(turn(1, tokens=1), dedupe_key="~p2:0050")).duplicate
    big = process_key("p2", 10**30)
    assert not (await mem.append(turn(1, tokens=1), dedupe_key=big)).duplicate
    assert (await mem.append(turn(1, tokens=1), dedupe_key=big)).duplicate
    assert not (await mem.append(turn(1, tokens=1), dedupe_key=process_key("p2", 101))).duplicate
    assert await mem.len() == 10


async def test_totals_stay_exact_under_concurrent_appends_and_retries(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    """Random appends from three processes' keys, callers' keys and retries of both, all at
    once: each write stored once, meta's totals the sum of what is stored."""
    mem = memory(client, memory_key, project=PROJECT)
    rng = random.Random(29)
    writes: list[tuple[str, int]] = []  # (dedupe key, batch size), in the order made
    counters = dict.fromkeys(("a", "b", "c"), 0)

    async def writer(w: int) -> None:
        for _ in range(60):
            if writes and rng.random() < 0.25:
                key, size = rng.choice(writes)  # a retry of an earlier write
            else:
                size = rng.choice((1, 1, 1, 2, 5))
                if rng.random() < 0.7:
                    process = rng.choice(tuple(counters))
                    counters[process] += 1
                    key = process_key(process, counters[process])
                else:
                    key = f"caller-{w}-{uuid.uuid4().hex[:8]}"
                writes.append((key, size))
            batch = [
                {"role": "user", "content": f"{key}/{i}", "tokens": rng.randint(0, 50)}
                for i in range(size)
            ]
            result = await mem.append_many(batch, dedupe_key=key)
            assert len(result.ids) == size

    await asyncio.gather(*(writer(w) for w in range(6)))
    stored = [json.loads(e) for e in await client.lrange(mem.keys.msgs, 0, -1)]
    contents = Counter(e["content"] for e in stored)
    expected = {f"{key}/{i}" for key, size in writes for i in range(size)}
    assert set(contents) == expected
    assert set(contents.values()) == {1}
    meta = meta_counts(await client.hgetall(mem.keys.meta))
    assert meta["tokens"] == sum(e["tokens"] for e in stored)
    assert meta["count"] == len(stored)
    for priority in {e["priority"] for e in stored}:
        mine = [e for e in stored if e["priority"] == priority]
        assert meta[f"p:{priority}:tokens"] == sum(e["tokens"] for e in mine)
        assert meta[f"p:{priority}:count"] == len(mine)
    assert await consistency_problems(client, mem.keys) == []
    record(
        group="adversarial",
        fault="6 concurrent writers: three processes' keys, callers' keys, 25% retries",
        engine=engine.name,
        promise="each write stored once; meta's totals exact",
        operations=360,
        acknowledged=len(writes),
        lost=0,
        duplicated=0,
        observed=f"{len(stored)} messages of {len(writes)} writes, totals equal to the envelopes",
    )


async def test_what_the_dedupe_keys_keep_is_bounded(client: RedisClient, memory_key: str) -> None:
    mem = memory(client, memory_key, project=PROJECT)
    # One process, many writes: its record holds at most DEDUPE_CHUNK of them and it keeps
    # DEDUPE_CHUNKS sealed chunks.
    for n in range(1, 1_501):
        await mem.append(turn(n, tokens=1), dedupe_key=process_key("busy", n))
    fields = {text(f): text(v) for f, v in (await client.hgetall(mem.keys.meta)).items()}
    chunks = [f for f in fields if f.startswith("w:busy.")]
    assert 0 < len(chunks) <= DEDUPE_CHUNKS
    assert fields["w:busy"].count(",") <= DEDUPE_CHUNK
    # The oldest writes were forgotten with their chunks; the window's are remembered.
    assert not (await mem.append(turn(0), dedupe_key=process_key("busy", 100))).duplicate
    assert (await mem.append(turn(0), dedupe_key=process_key("busy", 600))).duplicate
    # Many processes that each wrote a few times and went quiet: forgotten with their
    # records once the window has passed them.
    for p in range(150):
        for n in range(1, 4):
            await mem.append(turn(n, tokens=1), dedupe_key=process_key(f"quiet-proc-{p}", n))
    assert await client.zcard(mem.keys.dedupe) <= DEDUPE_WINDOW + DEDUPE_SWEEP
    await mem.append_many([turn(n, tokens=1) for n in range(MAX_BATCH)])
    await mem.append_many([turn(n, tokens=1) for n in range(DEDUPE_SWEEP)])
    # (A prefix no handle draws: this process's own random one may start with any letter.)
    quiet = [f for f in await client.hkeys(mem.keys.meta) if text(f).startswith("w:quiet-proc-")]
    assert not quiet
    members = [text(m) for m in await client.zrange(mem.keys.dedupe, 0, -1)]
    assert not [m for m in members if m.startswith(("~quiet-proc-", "~busy"))]


async def test_a_record_an_earlier_release_wrote_is_read_and_kept(
    client: RedisClient, memory_key: str
) -> None:
    # An earlier release kept a process's keys as ',<n>:<last id>' without a header.
    mem = memory(client, memory_key, project=PROJECT)
    first = [await mem.append(turn(n, tokens=1)) for n in range(3)]
    await client.hset(mem.keys.meta, "w:old", ",5:1,6:2,9:3")
    await client.zadd(mem.keys.dedupe, {"~old": 3})
    again = await mem.append(turn(0, tokens=1), dedupe_key=process_key("old", 6))
    assert again.duplicate
    assert again.ids == first[1].ids
    assert not (await mem.append(turn(0), dedupe_key=process_key("old", 7))).duplicate
    assert not (await mem.append(turn(0), dedupe_key=process_key("old", 10))).duplicate
    # A header now, with the largest key recorded.
    assert text(await client.hget(mem.keys.meta, "w:old")).startswith("10:")
    for n in (5, 6, 7, 9, 10):
        assert (await mem.append(turn(0), dedupe_key=process_key("old", n))).duplicate
    assert await mem.len() == 5


@pytest.mark.parametrize(
    "planted",
    [
        "99:0:0:40,x:y,z",  # a full record whose list is not one
        "1:2:3:4",  # a header and nothing after it
        ",abc,:,5:",  # an earlier release's form, damaged
        "7:0:999999999:1,7:1",  # a chunk number far past any written
    ],
)
async def test_a_damaged_record_never_fails_an_append_halfway(
    client: RedisClient, memory_key: str, planted: str
) -> None:
    """A process's record is rewritten after the message is pushed: whatever a damaged or
    planted one holds, the append stores its message and meta's totals once, and its retry is
    found."""
    mem = memory(client, memory_key, project=PROJECT)
    await mem.append(turn(0, tokens=3))
    await client.hset(mem.keys.meta, "w:hurt", planted)
    first = await mem.append(turn(1, tokens=5), dedupe_key=process_key("hurt", 1_000))
    again = await mem.append(turn(1, tokens=5), dedupe_key=process_key("hurt", 1_000))
    assert not first.duplicate
    assert again.duplicate
    assert again.ids == first.ids
    assert (first.total_count, first.total_tokens) == (2, 8)
    assert await consistency_problems(client, mem.keys) == []
