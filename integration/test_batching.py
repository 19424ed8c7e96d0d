"""Automatic pipelining on real engines: every caller gets its own reply, whatever happens."""

from __future__ import annotations

import asyncio
import json

import pytest
from redis.asyncio import Redis

from compozy_memory import ConflictError, MemoryInstance, MessageTooLargeError, RetryPolicy
from compozy_memory._io.translate import RedisClient
from compozy_memory._model.policy import MemoryPolicy
from integration.engines import EngineSpec
from integration.faults import FaultProxy
from integration.memories import COUNTER, memory

SESSIONS = 40
TURNS = 25


def sessions(client: RedisClient, prefix: str) -> list[MemoryInstance]:
    return [
        MemoryInstance.open(client, project="batch", key=f"{prefix}:{s}", counter=COUNTER)
        for s in range(SESSIONS)
    ]


async def stored_ids(client: RedisClient, mem: MemoryInstance) -> dict[str, int]:
    return {
        json.loads(e)["content"]: json.loads(e)["id"]
        for e in await client.lrange(mem.keys.msgs, 0, -1)
    }


async def test_concurrent_callers_get_their_own_replies(
    engine: EngineSpec, client: RedisClient, memory_key: str
) -> None:
    mems = sessions(client, memory_key)
    flusher_nodes = engine.node_clients()

    async def converse(s: int) -> list[tuple[str, int]]:
        acknowledged = []
        for turn in range(TURNS):
            content = f"s{s}-t{turn}"
            result = await mems[s].append({"role": "user", "content": content})
            acknowledged.append((content, result.first_id))
            if turn == TURNS // 2 and s == 0:
                for node in flusher_nodes:
                    await node.script_flush()  # the other sessions' next batch meets NOSCRIPT
        return acknowledged

    results = await asyncio.gather(*(converse(s) for s in range(SESSIONS)))
    for node in flusher_nodes:
        await node.aclose()
    for s, acknowledged in enumerate(results):
        assert dict(acknowledged) == await stored_ids(client, mems[s])
        assert [i for _, i in acknowledged] == list(range(1, TURNS + 1))


async def test_a_failing_call_does_not_disturb_its_batch(
    client: RedisClient, memory_key: str
) -> None:
    policy = MemoryPolicy(max_tokens=50)
    mems = [
        MemoryInstance.open(client, project="batch", key=f"{memory_key}:{i}", policy=policy)
        for i in range(6)
    ]
    await mems[0].append({"role": "user", "content": "seed", "tokens": 1})
    outcomes = await asyncio.gather(
        mems[0].replace([], if_last_id=999),  # conflict
        mems[1].append({"role": "user", "content": "ok-1", "tokens": 2}),
        mems[2].append({"role": "user", "content": "ok-2", "tokens": 3}),
        mems[3].append_many([{"role": "user", "content": "ok-3", "tokens": 1}] * 3),
        mems[4].append({"role": "user", "content": "ok-4", "tokens": 4}),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], ConflictError)
    assert [getattr(o, "total_tokens", None) for o in outcomes[1:]] == [2, 3, 3, 4]
    assert [m.content for m in await mems[0].read()] == ["seed"]
    # Errors raised by our own validation, before Redis, are unaffected by batching too.
    with pytest.raises(MessageTooLargeError):
        await mems[5].append({"role": "user", "content": "x", "tokens": 51})


async def test_cancelled_callers_never_receive_or_steal_a_reply(
    client: RedisClient, memory_key: str
) -> None:
    mems = sessions(client, memory_key)
    for round_ in range(10):
        tasks = [
            asyncio.create_task(mems[s].append({"role": "user", "content": f"s{s}-r{round_}"}))
            for s in range(SESSIONS)
        ]
        await asyncio.sleep(0)  # queued in the batcher
        for s in range(0, SESSIONS, 3):
            tasks[s].cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for s, task in enumerate(tasks):
            if task.cancelled():
                continue
            ids = await stored_ids(client, mems[s])
            assert ids[f"s{s}-r{round_}"] == task.result().last_id
    for s in range(SESSIONS):
        contents = list((await stored_ids(client, mems[s])).keys())
        assert len(contents) == len(set(contents))  # a cancelled append ran at most once


async def test_batches_decode_replies_like_their_client(
    engine: EngineSpec, memory_key: str
) -> None:
    client = engine.client(decode_responses=True)
    try:
        mems = sessions(client, memory_key)
        results = await asyncio.gather(
            *(m.append({"role": "user", "content": f"hi {i}"}) for i, m in enumerate(mems))
        )
        assert [r.first_id for r in results] == [1] * SESSIONS
        windows = await asyncio.gather(*(m.read_window(100) for m in mems))
        assert [w[0].content for w in windows] == [f"hi {i}" for i in range(SESSIONS)]
    finally:
        await client.aclose()


async def test_callers_answered_by_one_pipeline_go_on_in_turns(
    client: RedisClient, memory_key: str
) -> None:
    """Replies are handed out RESUME_GROUP at a time, with a loop turn between groups, so
    the first callers' next calls leave while the rest are still being answered."""
    from redis.asyncio import RedisCluster

    from compozy_memory._io.pipelining import RESUME_GROUP

    if isinstance(client, RedisCluster):
        pytest.skip("a Cluster client sends one pipeline per node, each under a group")
    assert SESSIONS > RESUME_GROUP  # one pipeline must answer more than one group
    mems = sessions(client, memory_key)
    await asyncio.gather(*(m.append({"role": "user", "content": "warm"}) for m in mems))
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    ticking = asyncio.create_task(count_turns())
    resumed_at: list[int] = []

    async def converse(mem: MemoryInstance) -> int:
        result = await mem.append({"role": "user", "content": "again"})
        resumed_at.append(turns)
        return result.last_id

    try:
        ids = await asyncio.gather(*(converse(m) for m in mems))
    finally:
        ticking.cancel()
    assert ids == [2] * SESSIONS  # each caller got its own reply
    by_turn = [resumed_at.count(turn) for turn in sorted(set(resumed_at))]
    assert len(by_turn) >= -(-SESSIONS // RESUME_GROUP)
    assert max(by_turn) <= RESUME_GROUP


async def test_a_batch_of_large_replies_on_a_slow_link_gets_a_timeout_a_reply(
    standalone: EngineSpec,
) -> None:
    """``socket_timeout`` bounds each reply, as when they were read one by one, not a
    batch's: 8 reads of 60 KB each through a link that forwards a 64 KB chunk every 0.2 s
    take about 1.8 s with each reply well within 1 s (one deadline for all timed them out)."""
    port = int(standalone.url.rsplit(":", 1)[1].split("/")[0])
    direct = Redis.from_url(standalone.url)
    with FaultProxy(port) as proxy:
        slow = Redis.from_url(proxy.url, socket_timeout=1.0)
        try:
            key = f"conv:slow-link:{id(proxy)}"
            setup = memory(direct, key, background_index=False)
            for _ in range(4):
                await setup.append({"role": "user", "content": "x" * 60_000, "tokens": 5})
            mem = memory(slow, key, background_index=False, retry=RetryPolicy(attempts=1))
            await mem.read(0, 0)  # connected, the script loaded
            proxy.delay = 0.2
            pages = await asyncio.gather(*(mem.read(i % 4, i % 4) for i in range(8)))
            assert [len(page) for page in pages] == [1] * 8
        finally:
            proxy.delay = 0.0
            await slow.aclose()
            await direct.aclose()
