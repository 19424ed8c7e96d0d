"""The low items of the third adversarial run (issue 32, item 5): a flush of a memory whose
meta was evicted writes nothing, an async handle used from another event loop is a typed
error, export writes nothing a terminal acts on and refuses what is not UTF-8, an index
backlog is warned of and a writer can keep it bounded, and the archive's dropped messages
leave the index a bounded step at a time."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
import redis

from compozy_memory import (
    EventLoopError,
    ExtractiveSummarizer,
    FlushSettings,
    MemoryEvictedError,
)
from compozy_memory._flush.flusher import Flusher
from compozy_memory._io.translate import RedisClient
from compozy_memory._model.limits import INDEX_STEP_DOCS
from compozy_memory._ops.cli import main
from compozy_memory._wire import eviction
from integration.engines import EngineSpec
from integration.memories import COUNTER, memory, turn

pytestmark = pytest.mark.faults


def script_calls(engine: EngineSpec) -> int:
    total = 0
    for url in engine.node_urls:
        node = redis.Redis.from_url(url)
        stats = node.info("commandstats")
        node.close()
        total += sum(
            int(v["calls"])
            for k, v in stats.items()
            if k.lower() in ("cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_evalsha")
        )
    return total


async def test_a_flush_of_a_memory_whose_meta_was_evicted_writes_nothing(
    engine: EngineSpec, client: RedisClient, memory_key: str, record: Callable[..., None]
) -> None:
    mem = memory(client, memory_key, max_tokens=200)
    mem.attach_flusher(
        Flusher(
            mem.gateway,
            FlushSettings(max_tokens=200, summary_tokens=40),
            ExtractiveSummarizer(COUNTER),
            COUNTER,
            background=False,
        )
    )
    await mem.append_many([turn(i) for i in range(1, 13)])
    await client.delete(mem.keys.meta)  # as an allkeys-* policy may evict it
    with pytest.raises(MemoryEvictedError, match="meta is gone"):
        await mem.flush()
    assert await client.exists(mem.keys.meta, mem.keys.lock) == 0
    assert await client.llen(mem.keys.msgs) == 12
    record(
        group="adversarial-3",
        item=5,
        fault="flush() of a memory whose meta was evicted (its messages still there)",
        engine=engine.name,
        promise="refused (MemoryEvictedError) before anything is written: no new meta with "
        "epoch 1, no lock",
        operations=1,
        acknowledged=0,
        lost=12 - await client.llen(mem.keys.msgs),
        duplicated=await client.exists(mem.keys.meta),  # a meta made again over the others
        observed="MemoryEvictedError from the lock's acquisition; meta and lock still absent, "
        "the 12 messages untouched",
    )


async def test_an_async_handle_used_from_another_event_loop_is_a_typed_error(
    engine: EngineSpec, memory_key: str, record: Callable[..., None]
) -> None:
    client = engine.client()
    mem = memory(client, memory_key)
    failure: list[BaseException] = []

    def elsewhere() -> None:
        try:
            asyncio.run(mem.append(turn(1)))  # the client's connections: that loop's
        except BaseException as exc:  # pragma: no cover - reported below
            failure.append(exc)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert failure == []
    sent = script_calls(engine)
    refused = 0
    for call in (mem.read, lambda: mem.append(turn(2)), lambda: mem.context(1_000)):
        with pytest.raises(EventLoopError, match="another event loop") as info:
            await call()
        assert isinstance(info.value, RuntimeError)
        refused += 1
    reached = script_calls(engine) - sent
    assert reached == 0
    fresh = memory(engine.client(), memory_key)  # one client per loop: this works
    assert [m.id for m in await fresh.read()] == [1]
    await fresh.client.aclose()
    record(
        group="adversarial-3",
        item=5,
        fault="an async handle whose client was first used in another event loop (a thread's "
        "asyncio.run), then called from this one: read, append, context",
        engine=engine.name,
        promise="a typed error (EventLoopError, also a RuntimeError) before anything is sent",
        operations=3,
        acknowledged=3 - refused,
        lost=0,
        duplicated=reached,
        observed=f"{refused} of 3 raised EventLoopError; {reached} calls reached the server; a "
        "client opened in this loop read the memory",
    )


async def test_export_writes_nothing_a_terminal_acts_on_and_refuses_what_is_not_utf8(
    engine: EngineSpec,
    client: RedisClient,
    capsysbinary: pytest.CaptureFixture[bytes],
    record: Callable[..., None],
) -> None:
    mem = memory(client, "conv:export", project="exports")
    await mem.append(turn(1))
    planted = (
        b'{"id":2,"ts":1,"tokens":1,"priority":2,"role":"user","content":"\x1b]0;x\x07\x1b[2J"}'
    )
    await client.rpush(mem.keys.msgs, planted)
    await client.hincrby(mem.keys.meta, "count", 1)
    base = ["--url", engine.url, *(["--cluster"] if engine.cluster else [])]
    argv = [*base, "export", "-p", "exports", "conv:export", "--format", "jsonl"]
    assert await asyncio.to_thread(main, argv) == 0
    out = capsysbinary.readouterr().out
    assert b"\x1b" not in out
    assert b"\x07" not in out
    assert b"\\u001b]0;x\\u0007\\u001b[2J" in out
    await client.rpush(mem.keys.msgs, planted.replace(b"\x1b[2J", b"\xff\xfe"))
    await client.hincrby(mem.keys.meta, "count", 1)
    code = await asyncio.to_thread(main, argv)
    captured = capsysbinary.readouterr()
    assert code == 1
    assert captured.err.count(b"\n") == 1  # one line, no traceback
    assert b"not UTF-8" in captured.err
    record(
        group="adversarial-3",
        item=5,
        fault="export --format jsonl of a memory holding an envelope written raw with terminal "
        "escapes (ESC, BEL), then one that is not UTF-8",
        engine=engine.name,
        promise="nothing a terminal acts on is written (the escapes as \\u001b: the same "
        "string to a parser); bytes that are not UTF-8 are a typed error in one line, not a "
        "traceback",
        operations=2,
        acknowledged=1,
        lost=0,
        duplicated=0,
        observed="ESC and BEL written as \\u001b and \\u0007; the second export ended with "
        "exit 1 and one line (CorruptDataError: not UTF-8)",
    )


async def test_an_index_backlog_is_warned_of_and_a_writer_keeps_it_bounded(
    engine: EngineSpec,
    client: RedisClient,
    memory_key: str,
    monkeypatch: pytest.MonkeyPatch,
    record: Callable[..., None],
) -> None:
    monkeypatch.setattr(eviction, "INDEX_BACKLOG_WARNING", 500)
    mem = memory(client, memory_key, archive_max=100)
    mem.indexer.background = False
    for start in range(0, 1_200, 200):  # a writer faster than an indexer that never runs
        await mem.append_many([turn(i) for i in range(start + 1, start + 201)])
    health = await mem.health()
    assert health.unindexed == 1_200
    assert health.index_warning is not None
    assert "catch_up" in health.index_warning
    # The documented way to slow writers: index the backlog in the writer's own task.
    progress = await mem.indexer.catch_up()
    worst = 0
    for start in range(1_200, 2_400, 200):
        await mem.append_many([turn(i) for i in range(start + 1, start + 201)])
        worst = max(worst, (await mem.health()).unindexed)
        await mem.indexer.catch_up()
    assert worst <= 200
    assert (await mem.health()).index_warning is None
    # The archive's cap drops messages; their terms leave the index a bounded step at a time.
    await mem.trim(keep_messages=0)
    assert await client.llen(mem.keys.ixgone) > 0
    drained = await mem.indexer.catch_up()
    assert await client.llen(mem.keys.ixgone) == 0
    record(
        group="adversarial-3",
        item=5,
        fault="1,200 messages appended with no indexing (warning threshold set to 500), then "
        "a writer that indexes its own backlog between batches of 200; then a trim past an "
        "archive capped at 100",
        engine=engine.name,
        promise="health() warns of the backlog (index_warning); a writer calling "
        "indexer.catch_up() never runs more than a batch ahead; the dropped messages' "
        "terms leave the index in bounded steps",
        operations=2,
        acknowledged=2,
        lost=0,
        duplicated=0,
        observed=f"warned at 1,200 unindexed (caught up in {progress.steps} steps of at most "
        f"{INDEX_STEP_DOCS}); then at most {worst} unindexed, no warning; ix:gone drained in "
        f"{drained.steps} steps",
    )
