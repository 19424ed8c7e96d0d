"""The usual append as a checked transaction (``WATCH`` ... ``MULTI``/``EXEC``), on real
engines: it leaves the bytes the append script leaves, loses nothing to a concurrent writer,
and gives way to the script whenever its memory changed or is not plain."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from datetime import timedelta
from typing import Any

import pytest
import redis
from redis.asyncio import Redis
from redis.asyncio.connection import Connection

from compozy_memory import (
    CorruptDataError,
    HeuristicCounter,
    MemoryEvictedError,
    MemoryInstance,
    SyncMemoryInstance,
)
from compozy_memory._io.transactions import Transactions, transactions_for
from compozy_memory._io.translate import RedisClient
from compozy_memory._ops.acl import acl_rules
from compozy_memory.embedded import EmbeddedCluster
from integration.engines import EngineSpec, spec_for
from integration.memories import memory, turn


def state(client: Any) -> Transactions:
    return transactions_for(client)


async def play(mem: MemoryInstance, seed: int, steps: int) -> list[tuple[Any, ...]]:
    """A seeded mix of writes, each with a dedupe key of its own (a handle's form,
    ``~<process>:<n>``, so both runs keep the same records), some retried, some the
    transaction does not take (pinned, two priorities, a caller's own key)."""
    rng = random.Random(seed)
    replies: list[tuple[Any, ...]] = []
    used: list[str] = []
    for i in range(1, steps + 1):
        roll = rng.random()
        key = f"~play{seed}:{i}"
        if roll < 0.06 and used:
            key = rng.choice(used)  # a retry: the first attempt's ids, nothing stored
            result = await mem.append(turn(i), dedupe_key=key)
        elif roll < 0.10:
            result = await mem.append_many([turn(i), turn(i + 1)], dedupe_key=key)
        elif roll < 0.13:
            two = [turn(i, priority=2), turn(i, priority=3)]
            result = await mem.append_many(two, dedupe_key=key)
        elif roll < 0.15:
            result = await mem.append(turn(i, priority=0), dedupe_key=key)
        elif roll < 0.20:
            result = await mem.append(turn(i), dedupe_key=f"own-{seed}-{i}")
        else:
            result = await mem.append(turn(i, tokens=rng.randint(1, 90)), dedupe_key=key)
        used.append(key)
        replies.append(
            (result.first_id, result.last_id, result.total_tokens, result.total_count,
             result.summary_tokens, result.duplicate, result.version)
        )  # fmt: skip
    return replies


async def stored(client: RedisClient, mem: MemoryInstance) -> dict[str, Any]:
    """What a memory holds, but its times: messages without their stamps, meta without its
    incarnation, the dedupe set, and which keys expire."""
    keys = mem.keys
    messages = []
    for envelope in await client.lrange(keys.msgs, 0, -1):
        message = json.loads(envelope)
        assert isinstance(message.pop("ts"), int)
        messages.append(message)
    meta = await client.hgetall(keys.meta)
    for timed in (b"inc", b"rid"):
        meta.pop(timed, None)
    expiring = {
        name: await client.pttl(key) > 0
        for name, key in (("msgs", keys.msgs), ("meta", keys.meta), ("dedupe", keys.dedupe))
    }
    return {
        "messages": messages,
        "meta": meta,
        "dedupe": await client.zrange(keys.dedupe, 0, -1, withscores=True),
        "expiring": expiring,
    }


@pytest.mark.parametrize("ttl", [None, timedelta(hours=1)], ids=["no-ttl", "ttl"])
async def test_a_transaction_leaves_the_bytes_the_script_leaves(
    standalone: EngineSpec, ttl: timedelta | None
) -> None:
    scripted, planned = Redis.from_url(standalone.url), Redis.from_url(standalone.url)
    state(scripted).on = False
    try:
        options: dict[str, Any] = {"background_index": False}
        if ttl is not None:
            options["ttl"] = ttl
        a = memory(scripted, **options)
        b = memory(planned, **options)
        steps = 240  # past DEDUPE_CHUNK and DEDUPE_SWEEP several times: seals and sweeps
        assert await play(a, 7, steps) == await play(b, 7, steps)
        assert await stored(scripted, a) == await stored(scripted, b)
        # Both roads were taken: most appends as transactions, the rest as the script.
        stats = state(planned).stats
        assert stats.applied > steps // 2
        assert stats.as_script > 0
        assert state(scripted).stats.applied == 0
    finally:
        await scripted.aclose()
        await planned.aclose()


async def test_writers_on_many_clients_lose_nothing(standalone: EngineSpec) -> None:
    """Three clients (three batchers), 24 writers on 3 shared memories: every append stored
    once, ids without a gap, totals exact, whichever road each append took."""
    clients = [Redis.from_url(standalone.url) for _ in range(3)]
    keys = [f"conv:tx-many:{random.random()}" for _ in range(3)]
    try:
        mems = [[memory(c, k, background_index=False) for k in keys] for c in clients]
        written: list[tuple[int, str, int]] = []

        async def writer(w: int) -> None:
            rng = random.Random(w)
            for s in range(30):
                at = rng.randrange(len(keys))
                tokens = rng.randint(1, 50)
                content = f"w{w}-s{s}"
                await mems[w % len(clients)][at].append(
                    {"role": "user", "content": content, "tokens": tokens}
                )
                written.append((at, content, tokens))

        await asyncio.gather(*(writer(w) for w in range(24)))
        for at, key in enumerate(keys):
            mine = [(content, tokens) for k, content, tokens in written if k == at]
            found = [json.loads(e) for e in await clients[0].lrange(mems[0][at].keys.msgs, 0, -1)]
            assert sorted((m["content"], m["tokens"]) for m in found) == sorted(mine)
            assert [m["id"] for m in found] == list(range(1, len(mine) + 1))
            meta = await clients[0].hgetall(mems[0][at].keys.meta)
            assert int(meta[b"count"]) == len(mine) == int(meta[b"last_id"])
            assert int(meta[b"tokens"]) == sum(t for _, t in mine), key
        assert sum(state(c).stats.applied for c in clients) > 0
    finally:
        for c in clients:
            await c.aclose()


class Interloper(Connection):
    """A connection that, before it sends a transaction (``MULTI``), lets ``write`` run: a
    writer on another client changes the memory between the transaction's two round trips."""

    write: Any = None

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        payload = command if isinstance(command, bytes) else b"".join(map(bytes, command))
        if payload.startswith(b"*1\r\n$5\r\nMULTI") and Interloper.write is not None:
            write, Interloper.write = Interloper.write, None
            await write()
        await super().send_packed_command(command, check_health)


async def test_a_memory_written_between_the_round_trips_gets_the_script(
    standalone: EngineSpec,
) -> None:
    client = Redis.from_url(standalone.url, connection_class=Interloper)
    other = Redis.from_url(standalone.url)
    try:
        key = f"conv:tx-race:{random.random()}"
        mem, rival = memory(client, key), memory(other, key)
        mem.indexer.background = rival.indexer.background = False
        await mem.append(turn(1))
        await mem.append(turn(2))
        before = state(client).stats.as_script

        async def write() -> None:
            await rival.append({"role": "user", "content": "between", "tokens": 5})

        Interloper.write = write
        result = await mem.append({"role": "user", "content": "planned", "tokens": 7})
        assert Interloper.write is None  # the rival wrote between the two round trips
        # WATCH saw the rival's write: the transaction applied nothing, the script did it.
        assert state(client).stats.as_script == before + 1
        assert (result.first_id, result.total_count) == (4, 4)
        contents = [m.content for m in await mem.read()]
        assert contents[2:] == ["between", "planned"]
        meta = await other.hgetall(mem.keys.meta)
        assert (meta[b"count"], meta[b"last_id"]) == (b"4", b"4")
        assert int(meta[b"tokens"]) == 20 + 20 + 5 + 7
    finally:
        Interloper.write = None
        await client.aclose()
        await other.aclose()


async def test_a_client_that_decodes_replies_takes_the_transaction(
    standalone: EngineSpec,
) -> None:
    client = Redis.from_url(standalone.url, decode_responses=True)
    try:
        mem = memory(client, background_index=False)
        results = [await mem.append(turn(i)) for i in range(1, 6)]
        assert [r.first_id for r in results] == [1, 2, 3, 4, 5]
        assert results[-1].total_tokens == 100
        assert results[-1].version.startswith("5:")
        assert state(client).stats.applied >= 3
        assert [m.content for m in await mem.read()] == [turn(i)["content"] for i in range(1, 6)]
    finally:
        await client.aclose()


async def test_a_list_gone_under_its_meta_is_refused_and_left_alone(
    standalone: EngineSpec,
) -> None:
    client = Redis.from_url(standalone.url)
    try:
        mem = memory(client, background_index=False)
        for i in range(1, 4):
            await mem.append(turn(i))
        await client.delete(mem.keys.msgs)  # evicted, as maxmemory would
        meta = await client.hgetall(mem.keys.meta)
        with pytest.raises(MemoryEvictedError):
            await mem.append(turn(4))
        assert await client.exists(mem.keys.msgs) == 0
        assert await client.hgetall(mem.keys.meta) == meta
    finally:
        await client.aclose()


async def test_a_user_refused_watch_appends_through_the_function(
    standalone: EngineSpec,
) -> None:
    """Rules written before appends went as transactions grant no WATCH: the client turns
    them off at the first refusal and appends as the function."""
    admin = Redis.from_url(standalone.url)
    # The functions installed, as an operator does (the user may not load them).
    await memory(admin, background_index=False).append(turn(1))
    user = f"tx-{random.randrange(10**9)}"
    rules = [r for r in acl_rules("itest", read_only=False) if r not in ("+watch", "+unwatch")]
    await admin.acl_setuser(user, enabled=True, passwords=["+secret-pw"], reset=True)
    await admin.execute_command("ACL", "SETUSER", user, *rules)  # type: ignore[no-untyped-call]
    client = Redis.from_url(standalone.url, username=user, password="secret-pw")
    try:
        mem = memory(client, background_index=False)
        results = [await mem.append(turn(i)) for i in range(1, 5)]
        assert [r.last_id for r in results] == [1, 2, 3, 4]
        assert state(client).on is False
        assert state(client).stats.applied == 0
        assert [m.content for m in await mem.read()] == [turn(i)["content"] for i in range(1, 5)]
    finally:
        await client.aclose()
        await admin.acl_deluser(user)
        await admin.aclose()


async def test_a_planted_dedupe_record_is_read_once_then_left_to_the_script(
    standalone: EngineSpec,
) -> None:
    """A record longer than any the scripts write was planted raw: the transaction's read
    copies it once, then the memory's appends go as the script, which sizes it first and
    refuses it (nothing written)."""
    client = Redis.from_url(standalone.url)
    try:
        mem = memory(client, background_index=False)
        await mem.append(turn(1))
        await mem.append(turn(2))
        meta = mem.keys.meta
        (field,) = [f for f in await client.hkeys(meta) if f.startswith(b"w:")]  # type: ignore[arg-type]
        await client.hset(meta, field, b"9:0:0:1" + b",1:1" * 20_000)  # 80 KB, raw
        before = await client.hgetall(meta)
        stats = state(client).stats
        as_script = stats.as_script
        for _ in range(3):
            with pytest.raises(CorruptDataError):
                await mem.append(turn(3))
        assert stats.as_script == as_script + 1  # planned once; then the script directly
        assert await client.hgetall(meta) == before
        assert await client.llen(mem.keys.msgs) == 2
    finally:
        await client.aclose()


def sync_memory(client: redis.Redis, key: str) -> SyncMemoryInstance:
    return SyncMemoryInstance.open(
        client, project="itest", key=key, counter=HeuristicCounter(), background_index=False
    )


def test_the_synchronous_api_takes_the_transaction_and_leaves_the_same_bytes(
    standalone: EngineSpec,
) -> None:
    """The blocking client's appends go as transactions too, one at a time, and leave what the
    function leaves; writers in several threads lose nothing."""
    scripted, planned = redis.Redis.from_url(standalone.url), redis.Redis.from_url(standalone.url)
    state(scripted).on = False
    try:
        tag = f"{random.random()}"
        a, b = sync_memory(scripted, f"tx-sync-a:{tag}"), sync_memory(planned, f"tx-sync-b:{tag}")
        for mem in (a, b):
            for i in range(1, 101):
                key = f"~sync{tag[2:8]}:{i}"
                mem.append(turn(i, tokens=i), dedupe_key=key)
                if i % 9 == 0:
                    assert mem.append(turn(i, tokens=i), dedupe_key=key).duplicate
        assert state(planned).stats.applied > 50
        assert state(scripted).stats.applied == 0

        def held(client: redis.Redis, mem: SyncMemoryInstance) -> tuple[Any, ...]:
            envelopes = [json.loads(e) for e in client.lrange(mem.keys.msgs, 0, -1)]
            for envelope in envelopes:
                envelope.pop("ts")
            meta = client.hgetall(mem.keys.meta)
            meta.pop(b"inc")
            return envelopes, meta, client.zrange(mem.keys.dedupe, 0, -1, withscores=True)

        assert held(scripted, a) == held(scripted, b)

        shared = sync_memory(planned, f"tx-sync-shared:{tag}")
        written: list[int] = []

        def writer(w: int) -> None:
            for s in range(40):
                result = shared.append({"role": "user", "content": f"w{w}-s{s}", "tokens": 3})
                written.append(result.first_id)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(written) == list(range(1, 241))
        found = [json.loads(e) for e in planned.lrange(shared.keys.msgs, 0, -1)]
        assert sorted(m["content"] for m in found) == sorted(
            f"w{w}-s{s}" for w in range(6) for s in range(40)
        )
        assert planned.hget(shared.keys.meta, "tokens") == b"720"
    finally:
        scripted.close()
        planned.close()


@pytest.mark.cluster
async def test_a_cluster_client_appends_as_transactions_one_a_slot(
    valkey_cluster: EmbeddedCluster,
) -> None:
    """On a Cluster each memory's appends go as transactions on its node (a transaction's
    keys share a slot), beside the node's pipeline: the same bytes as the function's, and
    writers on many memories at once lose nothing."""
    spec = spec_for("valkey-cluster", valkey_cluster)
    scripted, planned = spec.client(), spec.client()
    state(scripted).on = False
    try:
        options: dict[str, Any] = {"background_index": False, "ttl": timedelta(hours=1)}
        a, b = memory(scripted, **options), memory(planned, **options)
        assert await play(a, 11, 150) == await play(b, 11, 150)
        assert await stored(scripted, a) == await stored(scripted, b)
        assert state(planned).stats.applied > 75
        assert state(scripted).stats.applied == 0

        mems = [memory(planned, background_index=False) for _ in range(12)]

        async def writer(w: int) -> None:
            for s in range(20):
                await mems[(w + s) % len(mems)].append(
                    {"role": "user", "content": f"w{w}-s{s}", "tokens": 2}
                )

        await asyncio.gather(*(writer(w) for w in range(24)))
        contents: list[str] = []
        for mem in mems:
            found = [json.loads(e) for e in await planned.lrange(mem.keys.msgs, 0, -1)]
            assert [m["id"] for m in found] == list(range(1, len(found) + 1))
            assert await planned.hget(mem.keys.meta, "tokens") == b"%d" % (2 * len(found))
            contents += [m["content"] for m in found]
        assert sorted(contents) == sorted(f"w{w}-s{s}" for w in range(24) for s in range(20))
    finally:
        await scripted.aclose()
        await planned.aclose()


@pytest.mark.parametrize(
    "planted",
    [b"0:" + b"1" * 5000 + b":0:2,1:1,2:2", b"0:0:0:" + b"1" * 5000 + b",1:1,2:2"],
    ids=["z", "k"],
)
async def test_a_record_with_a_number_past_pythons_digits_goes_as_the_script(
    standalone: EngineSpec, planted: bytes
) -> None:
    """A tenant plants a record whose z or k has more digits than Python converts (4300):
    the plan must not raise (a ValueError failed the whole batch, other tenants' appends
    with it); the append goes as the script, which reads the number as a float."""
    client = Redis.from_url(standalone.url)
    try:
        mem = memory(client, background_index=False)
        other = memory(client, background_index=False)
        for m in (mem, other):
            await m.append(turn(1), dedupe_key="~pp:1")
            await m.append(turn(2), dedupe_key="~pp:2")
        await client.hset(mem.keys.meta, "w:pp", planted)
        mine, theirs = await asyncio.gather(
            mem.append(turn(3), dedupe_key="~pp:3"), other.append(turn(3), dedupe_key="~pp:3")
        )
        assert (mine.last_id, mine.total_count) == (3, 3)
        assert (theirs.last_id, theirs.total_count) == (3, 3)
        assert await client.llen(mem.keys.msgs) == 3
    finally:
        await client.aclose()


class Sleeper(Connection):
    """A connection whose caller resumes ``pause`` seconds late after it sends a
    transaction's reads (``WATCH``): a busy event loop between the two round trips."""

    pause = 0.0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        payload = command if isinstance(command, bytes) else b"".join(map(bytes, command))
        await super().send_packed_command(command, check_health)
        if payload.startswith(b"*") and b"\r\nWATCH\r\n" in payload[:32] and Sleeper.pause:
            await asyncio.sleep(Sleeper.pause)


async def test_a_late_second_round_trip_still_moves_a_due_deadline(
    standalone: EngineSpec,
) -> None:
    """The plan checks the deadline against the server clock of the first round trip; when
    EXEC runs more than the slack later, the deadline the script would move stays: the
    memory's keys would expire less than its TTL after its last write."""
    ttl = timedelta(seconds=60)  # slack 1875 ms: the plan keeps deadlines 937 ms ahead
    key = f"conv:tx-late:{random.random()}"
    direct = Redis.from_url(standalone.url)
    slow = Redis.from_url(standalone.url, connection_class=Sleeper)
    try:
        setup = memory(direct, key, ttl=ttl, background_index=False)
        await setup.append(turn(1))
        await setup.append(turn(2))
        mem = memory(slow, key, ttl=ttl, background_index=False)
        seconds, micros = await direct.time()
        before_ms = seconds * 1000 + micros // 1000
        Sleeper.pause = 2.5
        await mem.append(turn(3))
        Sleeper.pause = 0.0
        # The write ran at least 2.5 s after before_ms: its keys must live a TTL past that.
        for part in (mem.keys.meta, mem.keys.msgs):
            at = await direct.pexpiretime(part)
            assert at >= before_ms + 2500 + 60_000, (part, at - before_ms)
    finally:
        Sleeper.pause = 0.0
        await direct.aclose()
        await slow.aclose()


async def test_a_busy_server_does_not_turn_transactions_off(standalone: EngineSpec) -> None:
    """WATCH refused with BUSY (another client's long script) is a refusal for now: the
    append goes as the script (retried), and later appends take the transaction again. Only
    a refusal for good (NOPERM, an unknown command) turns them off."""
    admin, busy = Redis.from_url(standalone.url), Redis.from_url(standalone.url)
    client = Redis.from_url(standalone.url)
    (threshold,) = (await admin.config_get("busy-reply-threshold")).values()
    try:
        mem = memory(client, background_index=False)
        await mem.append(turn(1))
        await mem.append(turn(2))
        await admin.config_set("busy-reply-threshold", 50)
        spin = (
            "local t = redis.call('TIME'); local s = t[1] * 1000 + t[2] / 1000 "
            "while true do local n = redis.call('TIME') "
            "if n[1] * 1000 + n[2] / 1000 - s > 400 then return 1 end end"
        )

        async def run_spin() -> Any:
            return await busy.eval(spin, 0)

        long_script = asyncio.create_task(run_spin())
        await asyncio.sleep(0.15)
        assert (await mem.append(turn(3))).last_id == 3
        await long_script
        assert state(client).on is True
        applied = state(client).stats.applied
        await mem.append(turn(4))
        assert state(client).stats.applied == applied + 1
    finally:
        await admin.config_set("busy-reply-threshold", threshold or 5000)
        for c in (admin, busy, client):
            await c.aclose()


async def test_a_long_run_drops_the_oldest_chunks_as_the_script_does(
    standalone: EngineSpec,
) -> None:
    """Past DEDUPE_CHUNKS sealed chunks a seal drops the oldest (its meta field and its
    member): 1,100 appends of one process, both roads, the same bytes; and 1,100 with a
    caller's own keys, past the dedupe window."""
    scripted, planned = Redis.from_url(standalone.url), Redis.from_url(standalone.url)
    state(scripted).on = False
    try:
        a = memory(scripted, background_index=False)
        b = memory(planned, background_index=False)
        for mem in (a, b):
            for i in range(1, 1101):
                await mem.append(turn(i, tokens=1 + i % 50), dedupe_key=f"~long:{i}")
        held = await stored(scripted, b)
        assert held == await stored(scripted, a)
        chunks = [f for f in held["meta"] if f.startswith(b"w:long.")]
        assert len(chunks) == 32  # DEDUPE_CHUNKS
        assert b"w:long.0" not in chunks  # the oldest were dropped
        assert state(planned).stats.as_script < 1100 // 32
        # A caller's own keys past the window: the set swept as the ids cross 64s.
        a = memory(scripted, background_index=False)
        b = memory(planned, background_index=False)
        for mem in (a, b):
            for i in range(1, 1101):
                await mem.append(turn(i, tokens=2), dedupe_key=f"order-{i}")
        held = await stored(scripted, b)
        assert held == await stored(scripted, a)
        assert 1000 <= len(held["dedupe"]) <= 1064
        assert state(planned).stats.as_script < 2 * (1100 // 32)
    finally:
        await scripted.aclose()
        await planned.aclose()
