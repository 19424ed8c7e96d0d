"""Many OS processes writing one memory at once, on every real engine."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import re
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor

import pytest

from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.limits import ttl_slack
from compozy_memory._model.messages import Message
from compozy_memory._model.tokens import count_message
from integration.engines import EngineSpec
from integration.faults import meta_counts
from integration.memories import COUNTER
from integration.workers import WRITER_TTL_SECONDS, append_worker, tokens_for

WRITERS = 4
APPENDS = 200
PROJECT = "fleet"


async def reloads(spec: EngineSpec) -> int:
    """How many times the servers were given the scripts again: FUNCTION LOAD (the client's
    recovery when the library is gone) and EVAL (when the script cache is)."""
    total = 0
    for node in spec.node_clients():
        stats = await node.info("commandstats")
        for name in ("cmdstat_eval", "cmdstat_function|load"):
            total += int(stats.get(name, {}).get("calls", 0))
        await node.aclose()
    return total


async def flush_scripts_until(spec: EngineSpec, done: asyncio.Event) -> int:
    """Delete the Functions library and the script cache on every node, over and over."""
    nodes = spec.node_clients()
    flushes = 0
    try:
        while not done.is_set():
            for node in nodes:
                await node.function_flush()
                await node.script_flush()
            flushes += 1
            await asyncio.sleep(0.02)
    finally:
        for node in nodes:
            await node.aclose()
    return flushes


@pytest.mark.slow
async def test_concurrent_writers_lose_nothing_while_the_scripts_are_deleted(
    engine: EngineSpec, memory_key: str
) -> None:
    keys = InstanceKeys.build(PROJECT, memory_key)
    reloads_before = await reloads(engine)
    context = multiprocessing.get_context("spawn")
    loop = asyncio.get_running_loop()
    with context.Manager() as manager, ProcessPoolExecutor(WRITERS, mp_context=context) as pool:
        start = manager.Barrier(WRITERS + 1)
        futures = [
            loop.run_in_executor(
                pool, append_worker, engine, PROJECT, memory_key, w, APPENDS, start
            )
            for w in range(WRITERS)
        ]
        await loop.run_in_executor(None, start.wait, 60)
        done = asyncio.Event()
        flusher = asyncio.create_task(flush_scripts_until(engine, done))
        acknowledged = await asyncio.gather(*futures)
        done.set()
        flushes = await flusher

    client = engine.client(decode_responses=True)
    try:
        envelopes = [json.loads(e) for e in await client.lrange(keys.msgs, 0, -1)]
        meta = meta_counts(await client.hgetall(keys.meta))
        ttls = [await client.pttl(k) for k in (keys.msgs, keys.meta)]
    finally:
        await client.aclose()

    # Nothing lost, nothing duplicated: exactly the acknowledged appends, once each.
    stored = {(e["metadata"]["writer"], e["metadata"]["seq"]): e["id"] for e in envelopes}
    assert len(envelopes) == len(stored) == WRITERS * APPENDS
    expected = {(w, seq): id_ for w, acks in enumerate(acknowledged) for seq, id_ in acks}
    assert stored == expected
    # Ids are unique and increase along the list; each writer's order is kept.
    ids = [e["id"] for e in envelopes]
    assert ids == sorted(ids) == list(range(1, WRITERS * APPENDS + 1))
    per_writer: dict[int, list[int]] = defaultdict(list)
    for e in envelopes:
        per_writer[e["metadata"]["writer"]].append(e["metadata"]["seq"])
    assert all(seqs == list(range(APPENDS)) for seqs in per_writer.values())
    # Totals in meta are exactly the sum of the stored counts, which are the counts sent.
    counter = COUNTER
    for e in envelopes:
        w, seq = e["metadata"]["writer"], e["metadata"]["seq"]
        message = Message.model_validate({k: v for k, v in e.items() if k not in ("id", "ts")})
        supplied = tokens_for(w, seq)
        sent = (
            supplied
            if supplied is not None
            else count_message(message.model_copy(update={"tokens": None}), counter)
        )
        assert e["tokens"] == sent
    assert meta["tokens"] == sum(e["tokens"] for e in envelopes)
    assert meta["count"] == WRITERS * APPENDS
    assert meta["last_id"] == WRITERS * APPENDS
    per_priority = sum(v for k, v in meta.items() if re.fullmatch(r"p:\d+:tokens", k))
    assert per_priority == meta["tokens"]
    ttl = WRITER_TTL_SECONDS * 1000
    assert all(0 < t <= ttl + ttl_slack(ttl) for t in ttls)
    # The scripts were deleted while the writers ran, and the writers loaded them again.
    assert flushes >= 1
    assert await reloads(engine) > reloads_before
