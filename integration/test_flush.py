"""Flushing on every real engine: nothing lost, nothing twice, stale holders refused."""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import os
import signal
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest

from compozy_memory import ConflictError, FencedLock, FlushPlan, LockLostError, Message, Summary
from compozy_memory._io.translate import RedisClient
from compozy_memory._model.keys import InstanceKeys
from integration.engines import EngineSpec
from integration.flush_support import (
    PROJECT,
    audit,
    flusher_of,
    open_counted_memory,
    open_memory,
    paused_flusher,
    writer_with_flushes,
)

WRITERS = 4
APPENDS = 200
BUDGET = 1500


async def fill(memory: object, count: int, start: int = 0) -> list[int]:
    from compozy_memory import MemoryInstance

    assert isinstance(memory, MemoryInstance)
    result = await memory.append_many(
        {"role": "user" if i % 2 else "assistant", "content": f"turn {i}: order #{i} noted."}
        for i in range(start, start + count)
    )
    return list(result.ids)


async def test_a_flush_replaces_exactly_what_it_planned(
    client: RedisClient, memory_key: str
) -> None:
    memory = open_memory(client, memory_key, budget=200, background=False)
    assert memory.flusher is not None
    ids = await fill(memory, 40)
    before = await memory.health()
    assert before.token_count > 200
    result = await memory.flush()
    assert result.outcome == "summarised"
    assert result.plan is not None
    found = await audit(client, memory_key, ids)
    assert found.context_tokens <= result.plan.projected_tokens <= 200  # the plan is a bound
    assert sorted(found.covered) == list(result.plan.summarize_ids)
    assert found.summaries == 1
    (summary,) = (await memory.snapshot()).summaries
    assert summary.content_type == "summary"
    assert summary.covered_ids == list(result.plan.summarize_ids)
    assert summary.metadata == {"method": "extractive"}
    context = await memory.context()
    assert context[0].id == summary.id
    assert sum(m.tokens or 0 for m in context) <= 200
    recalled = await memory.recall(0, 5)
    assert [m.id for m in recalled] == list(result.plan.summarize_ids[:5])


async def test_a_flooded_memory_is_flushed_in_bounded_rounds(
    client: RedisClient, memory_key: str
) -> None:
    # No background flush: one its appends set off would hold the lock, and this flush skip.
    memory = open_memory(client, memory_key, budget=300, background=False)
    assert memory.flusher is not None
    flusher_of(memory).settings = dataclasses.replace(
        flusher_of(memory).settings, snapshot_limit=40
    )
    ids = await fill(memory, 400)
    result = await memory.flush()
    assert result.outcome == "summarised"
    assert result.rounds > 1  # no round read or moved more than 40 messages
    assert result.plan is not None
    assert len(result.plan.prefix_ids) <= 40
    found = await audit(client, memory_key, ids)
    assert found.context_tokens <= 300


async def test_summaries_are_utf8_whatever_the_clients_encoding(
    engine: EngineSpec, memory_key: str
) -> None:
    client = engine.client(encoding="latin-1")
    try:
        # No background flush: the audit's reads are not one snapshot, and a flush the
        # append set off could commit between them (seen under load).
        memory = open_memory(client, memory_key, budget=150, background=False)
        result = await memory.append_many(
            {"role": "user", "content": f"東京 order #{i} ships on 2026-12-0{i % 9 + 1}."}
            for i in range(20)
        )
        assert (await memory.flush()).outcome == "summarised"
        (summary,) = (await memory.snapshot()).summaries
        assert "東京" in summary.text
        await audit(client, memory_key, list(result.ids))
    finally:
        await client.aclose()


async def test_messages_appended_during_summarisation_stay(
    client: RedisClient, memory_key: str
) -> None:
    # No background flush: the appends made while summarising would set one off, and it may
    # summarise them before the audit (seen under load: a cascade, each summary appending more).
    memory = open_memory(client, memory_key, budget=200, background=False)
    assert memory.flusher is not None
    ids = await fill(memory, 30)
    late: list[int] = []

    class AppendingSummarizer:
        async def summarize(self, messages: Sequence[Message], *, max_tokens: int) -> Summary:
            late.extend(await fill(memory, 5, start=100))  # another replica keeps writing
            return Summary("summary text", "test")

    flusher_of(memory).summarizer = AppendingSummarizer()
    result = await memory.flush()
    assert result.outcome == "summarised"
    found = await audit(client, memory_key, ids + late)
    assert set(late) <= set(found.live)


async def test_a_changed_memory_is_replanned_not_half_written(
    client: RedisClient, memory_key: str
) -> None:
    # No background flush: the 30 appends set one off, and if it takes the lock first this
    # flush is skipped (seen under load).
    memory = open_memory(client, memory_key, budget=200, background=False)
    assert memory.flusher is not None
    await fill(memory, 30)
    calls = 0

    class TrimmingSummarizer:
        async def summarize(self, messages: Sequence[Message], *, max_tokens: int) -> Summary:
            nonlocal calls
            calls += 1
            if calls == 1:
                await memory.trim(keep_messages=25)  # the plan's prefix moves away
            return Summary("summary text", "test")

    flusher_of(memory).summarizer = TrimmingSummarizer()
    result = await memory.flush()
    assert result.outcome == "summarised"
    assert calls == 2  # the first commit was refused, the second plan went through
    await audit(client, memory_key)


async def test_the_fence_refuses_a_holder_whose_lease_moved_on(
    client: RedisClient, memory_key: str
) -> None:
    """Nothing in the memory moved, only the lock: the epoch alone must refuse the commit."""
    memory = open_memory(client, memory_key, budget=200, background=False)
    assert memory.flusher is not None
    ids = await fill(memory, 40)

    class PausedSummarizer:
        async def summarize(self, messages: Sequence[Message], *, max_tokens: int) -> Summary:
            await client.delete(memory.keys.lock)  # our lease ends, as after a long pause
            other = await FencedLock(memory.gateway).try_acquire()  # another replica: a newer epoch
            assert other is not None
            await other.release()
            return Summary("stale summary", "test")

    flusher_of(memory).summarizer = PausedSummarizer()
    with pytest.raises(LockLostError, match="stale fencing epoch"):
        await memory.flush()
    assert (await audit(client, memory_key, ids)).summaries == 0


async def test_the_commit_script_refuses_stale_epochs_and_moved_messages(
    client: RedisClient, memory_key: str
) -> None:
    memory = open_memory(client, memory_key, budget=200)
    ids = await fill(memory, 5)
    keys = InstanceKeys.build(PROJECT, memory_key)
    lease = await flusher_of(memory).lock.try_acquire() if memory.flusher else None
    assert lease is not None
    before = await client.lrange(keys.msgs, 0, -1)
    body = b'{"role":"system","content":"s","type":"summary"}'
    plan = FlushPlan(prefix_ids=(ids[0], ids[1]), summarize_ids=(ids[0], ids[1]))
    await memory.indexer.catch_up()  # a message moves to the archive only once indexed
    commit = memory.gateway.flush_commit
    with pytest.raises(LockLostError, match="stale fencing epoch"):
        await commit(
            epoch=lease.epoch - 1,
            incarnation=lease.incarnation,
            plan=plan,
            summary_body=body,
            summary_tokens=3,
        )
    with pytest.raises(LockLostError, match="expired and was written again"):
        await commit(
            epoch=lease.epoch, incarnation="1", plan=plan, summary_body=body, summary_tokens=3
        )
    moved = FlushPlan(prefix_ids=(ids[1], ids[0]), summarize_ids=(ids[0], ids[1]))
    with pytest.raises(ConflictError, match="the plan saw"):
        await commit(
            epoch=lease.epoch,
            incarnation=lease.incarnation,
            plan=moved,
            summary_body=body,
            summary_tokens=3,
        )
    assert await client.lrange(keys.msgs, 0, -1) == before
    await audit(client, memory_key, ids)


@pytest.mark.slow
async def test_writers_and_flushers_together_lose_nothing(
    engine: EngineSpec, memory_key: str
) -> None:
    """4 processes x 200 appends; each process also flushes (300 ms summaries) whenever its
    appends pass the threshold, contending for the one lock."""
    spawn = multiprocessing.get_context("spawn")
    loop = asyncio.get_running_loop()
    with spawn.Manager() as manager, ProcessPoolExecutor(WRITERS, mp_context=spawn) as pool:
        start = manager.Barrier(WRITERS)
        reports = await asyncio.gather(
            *(
                loop.run_in_executor(
                    pool, writer_with_flushes, engine, memory_key, w, APPENDS, BUDGET, 0.3, start
                )
                for w in range(WRITERS)
            )
        )
    acknowledged = [i for r in reports for i in r["acknowledged"]]
    assert len(acknowledged) == len(set(acknowledged)) == WRITERS * APPENDS
    outcomes: dict[str, int] = {}
    for report in reports:
        for outcome, count in report["outcomes"].items():
            outcomes[outcome] = outcomes.get(outcome, 0) + count
    assert sum(r["commits"] for r in reports) >= 3, outcomes  # flushed again and again
    # Every flush planned a context within budget as of its snapshot.
    assert all(p <= BUDGET for r in reports for p in r["projected"])
    client = engine.client()
    try:
        memory = open_memory(client, memory_key, BUDGET)
        assert memory.flusher is not None
        await memory.flush()  # the writers have stopped: one more flush settles the budget
        found = await audit(client, memory_key, acknowledged)
    finally:
        await client.aclose()
    assert found.context_tokens <= BUDGET
    assert len(found.live) + len(found.covered) == WRITERS * APPENDS


MAX_MESSAGES = 10
COUNTED_APPENDS = 100


async def test_max_messages_holds_under_writers_and_flushers(
    engine: EngineSpec, memory_key: str
) -> None:
    """``message_count_based`` with ``max_messages: 10``: 4 processes x 100 appends, each
    flushing (20 ms summaries) as its appends pass 80% of the count, contending for the lock.
    After the flushes settle, at most 10 messages are live and every acknowledged id is live
    or covered by exactly one summary."""
    spawn = multiprocessing.get_context("spawn")
    loop = asyncio.get_running_loop()
    with spawn.Manager() as manager, ProcessPoolExecutor(WRITERS, mp_context=spawn) as pool:
        start = manager.Barrier(WRITERS)
        reports = await asyncio.gather(
            *(
                loop.run_in_executor(
                    pool,
                    writer_with_flushes,
                    engine,
                    memory_key,
                    w,
                    COUNTED_APPENDS,
                    0,
                    0.02,
                    start,
                    MAX_MESSAGES,
                )
                for w in range(WRITERS)
            )
        )
    acknowledged = [i for r in reports for i in r["acknowledged"]]
    assert len(acknowledged) == len(set(acknowledged)) == WRITERS * COUNTED_APPENDS
    # Flushed by count while the writers ran, more than once (a flush folds up to
    # snapshot_limit messages: on a fast machine 400 appends can need only two).
    assert sum(r["commits"] for r in reports) >= 2
    # Every flush planned a live count within max_messages as of its snapshot.
    assert all(c <= MAX_MESSAGES for r in reports for c in r["projected_counts"])
    client = engine.client()
    try:
        memory = open_counted_memory(client, memory_key, MAX_MESSAGES, background=False)
        settled = await audit(client, memory_key, acknowledged)
        await memory.flush()  # the writers have stopped: one more flush settles the count
        found = await audit(client, memory_key, acknowledged)
        layers = await memory.context_layers()  # works with no token budget
    finally:
        await client.aclose()
    print(
        f"\n{engine.name}: max_messages {MAX_MESSAGES}, {WRITERS}x{COUNTED_APPENDS} appends, "
        f"{sum(r['commits'] for r in reports)} commits; live {len(settled.live)} when the "
        f"writers' flushes settled, {len(found.live)} after one more flush; "
        f"{len(found.covered)} covered by {found.summaries} summaries"
    )
    assert len(found.live) <= MAX_MESSAGES
    assert len(found.live) + len(found.covered) == WRITERS * COUNTED_APPENDS
    # The window is the live messages (the implicit query's hits are a layer of their own).
    assert [m.id for m in layers.window] == found.live


def _spawn_flusher(
    engine: EngineSpec, key: str, tmp_path: Path
) -> tuple[multiprocessing.process.BaseProcess, Path, Path]:
    marker, result = tmp_path / "summarizing", tmp_path / "result"
    process = multiprocessing.get_context("spawn").Process(
        target=paused_flusher, args=(engine, key, 200, str(marker), str(result))
    )
    process.start()
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline, "the flusher never started summarising"
        assert process.is_alive(), "the flusher died"
        time.sleep(0.01)
    return process, marker, result


async def test_a_paused_flusher_cannot_commit_after_its_lease(
    engine: EngineSpec, memory_key: str, tmp_path: Path
) -> None:
    client = engine.client()
    try:
        memory = open_memory(client, memory_key, budget=200)
        assert memory.flusher is not None
        ids = await fill(memory, 40)
        process, _, result = _spawn_flusher(engine, memory_key, tmp_path)
        assert process.pid is not None
        os.kill(process.pid, signal.SIGSTOP)  # paused mid-summary, holding a 1 s lease
        await asyncio.sleep(1.5)
        ours = await memory.flush()  # another replica takes over once the lease is gone
        assert ours.outcome == "summarised"
        os.kill(process.pid, signal.SIGCONT)
        process.join(30)
        assert process.exitcode == 0
        assert result.read_text().startswith("lost: ")
        found = await audit(client, memory_key, ids)
        assert found.summaries == 1  # only the second replica's summary
        assert sorted(found.covered) == list(ours.plan.summarize_ids if ours.plan else ())
    finally:
        await client.aclose()


async def test_a_killed_flusher_leaves_nothing_half_written(
    engine: EngineSpec, memory_key: str, tmp_path: Path
) -> None:
    client = engine.client()
    try:
        memory = open_memory(client, memory_key, budget=200, lock_ttl=timedelta(seconds=1))
        assert memory.flusher is not None
        ids = await fill(memory, 40)
        keys = InstanceKeys.build(PROJECT, memory_key)
        before = await client.lrange(keys.msgs, 0, -1)
        process, _, _ = _spawn_flusher(engine, memory_key, tmp_path)
        assert process.pid is not None
        os.kill(process.pid, signal.SIGKILL)
        process.join(10)
        assert await client.lrange(keys.msgs, 0, -1) == before
        assert (await audit(client, memory_key, ids)).summaries == 0
        assert (await memory.flush()).outcome == "skipped"  # its lease still runs
        await asyncio.sleep(1.1)
        assert (await memory.flush()).outcome == "summarised"
        await audit(client, memory_key, ids)
    finally:
        await client.aclose()
