"""Review of the background merge job (review-5): what it plans on, and what its waits cover."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from compozy_memory._io.translate import RedisClient
from compozy_memory._search import merging
from compozy_memory._search.runtime import indexer as indexer_module
from integration.memories import memory
from integration.test_index_segments import fields_match_the_list, same_as_from_scratch

WORDS = [f"word{n}x" for n in range(120)]


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
    await other.append({"role": "user", "content": " ".join(WORDS), "tokens": 200})
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
