"""What an adversarial test run broke, each as a test that failed before its fix."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from compozy_memory import (
    ConflictError,
    FencedLock,
    Flusher,
    FlushSettings,
    HeuristicCounter,
    InvalidMessageError,
    LockLostError,
    MemoryInstance,
    MemoryPolicy,
    Message,
    ReadOnlyMemoryError,
    Summary,
    UsageError,
)
from compozy_memory._flush.extractive import ExtractiveSummarizer
from compozy_memory._flush.planner import plan_flush
from compozy_memory._metrics import FlushMetrics
from compozy_memory._model.limits import MAX_BATCH, MAX_PINNED
from compozy_memory._model.messages import EncodedMessage
from compozy_memory._wire.translate import RedisClient
from integration.engines import EngineSpec
from integration.flush_support import audit

pytestmark = pytest.mark.faults

PROJECT = "flush"  # audit() reads this project's keys
COUNTER = HeuristicCounter()


def memory(client: RedisClient, key: str, **policy: Any) -> MemoryInstance:
    return MemoryInstance.open(
        client, project=PROJECT, key=key, counter=COUNTER, policy=MemoryPolicy(**policy)
    )


def flusher(mem: MemoryInstance, budget: int, **settings: Any) -> Flusher:
    flush = Flusher(
        mem.gateway,
        FlushSettings(max_tokens=budget, summary_tokens=min(200, budget // 4), **settings),
        ExtractiveSummarizer(COUNTER),
        COUNTER,
        metrics=FlushMetrics(CollectorRegistry()),
        background=False,  # each test flushes when it means to
    )
    mem.attach_flusher(flush)
    return flush


def turn(n: int, tokens: int = 20, priority: int | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "user" if n % 2 else "assistant",
        "content": f"turn {n} mentions order #{1000 + n}",
        "tokens": tokens,
    }
    if priority is not None:
        message["priority"] = priority
    return message


async def test_a_large_batch_repeated_with_its_dedupe_key_is_stored_once(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    size = MAX_BATCH  # the largest batch one call takes: one more is refused, typed
    mem = memory(client, memory_key)
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
    mem = memory(client, memory_key)
    for _ in range(12):  # 3,000 writes that add no ids
        await asyncio.gather(*(mem.replace([]) for _ in range(250)))
    assert await client.zcard(mem.keys.dedupe) <= 1_064


async def test_a_flusher_paused_across_expiry_cannot_commit_into_the_new_conversation(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    old = memory(client, memory_key, ttl=timedelta(seconds=30))
    await old.append_many([turn(n) for n in range(30)])
    lease = await FencedLock(old.gateway).try_acquire()
    assert lease is not None
    snapshot = await old.gateway.snapshot(256)
    plan = plan_flush(snapshot, FlushSettings(max_tokens=300, summary_tokens=50))
    assert not plan.empty
    # The memory expires while the flusher is paused; a new conversation starts under the
    # same key, and a new flusher takes the lock: its epoch starts again at 1.
    await client.delete(*old.keys.data, old.keys.lock)
    new = memory(client, memory_key, ttl=timedelta(seconds=30))
    fresh = await new.append_many([turn(n) for n in range(30)])
    newer = await FencedLock(new.gateway).try_acquire()
    assert newer is not None
    assert newer.epoch == lease.epoch  # the epoch alone cannot tell them apart
    before = await client.lrange(new.keys.msgs, 0, -1)
    with pytest.raises(LockLostError, match="expired"):
        await old.gateway.flush_commit(
            epoch=lease.epoch,
            incarnation=lease.incarnation,
            plan=plan,
            summary_body=b'{"role":"system","content":"old news","type":"summary"}',
            summary_tokens=3,
        )
    assert await client.lrange(new.keys.msgs, 0, -1) == before
    await newer.release()
    record(
        group="adversarial",
        fault="a flusher paused while its memory expired and a new conversation began",
        engine=engine.name,
        promise="every compare-and-set names the memory's incarnation",
        operations=60,
        acknowledged=len(fresh.ids),
        lost=0,
        duplicated=0,
        observed="the stale commit was refused (STALE); the new conversation untouched",
    )


async def test_replace_if_last_id_taken_before_expiry_is_refused_after_it(
    client: RedisClient, memory_key: str
) -> None:
    old = memory(client, memory_key)
    seen = await old.append_many([turn(n) for n in range(5)])
    await client.delete(*old.keys.data)  # expiry
    other = memory(client, memory_key)
    await other.append_many([turn(n) for n in range(5)])  # the same last_id, 5
    with pytest.raises(ConflictError, match="expired"):
        await old.replace([turn(99)], if_last_id=seen.last_id)
    with pytest.raises(ConflictError, match="expired"):
        await other.replace([turn(99)], if_last_id=seen.last_id, if_incarnation=seen.incarnation)
    assert await other.len() == 5
    done = await other.replace([turn(99)], if_last_id=5)  # its own incarnation: allowed
    assert done.total_count == 1


@pytest.mark.parametrize("tokens", [2**63, 10**300, 2**53 + 1])
async def test_absurd_token_counts_are_refused_and_change_nothing(
    client: RedisClient, memory_key: str, tokens: int, engine: EngineSpec, record: Any
) -> None:
    mem = memory(client, memory_key)
    await mem.append(turn(1))
    with pytest.raises(InvalidMessageError):
        await mem.append({"role": "user", "content": "x", "tokens": tokens})
    # Past the Python checks, the script bounds them too.
    with pytest.raises(InvalidMessageError):
        await mem.gateway.append([EncodedMessage(tokens, 2, b'{"role":"user","content":"x"}')], "")
    health = await mem.health()
    assert health.token_count == 20
    assert len(await mem.read()) == 1
    assert len(await mem.context(1_000)) == 1
    record(
        group="adversarial",
        fault=f"token counts of {tokens:.3g} sent through the handle and to the script",
        engine=engine.name,
        promise="counts are bounded where they enter; totals stay exact",
        operations=2,
        acknowledged=0,
        lost=0,
        duplicated=0,
        observed="both refused (InvalidMessageError); the memory and its totals unchanged",
    )


async def test_hundreds_of_pinned_messages_do_not_stall_flushing(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    mem = memory(client, memory_key)
    flush = flusher(mem, 3_000, snapshot_limit=64)
    await mem.append_many([turn(n, tokens=1, priority=0) for n in range(MAX_PINNED)])
    await mem.append_many([turn(n, tokens=100) for n in range(200)])  # 20,100 tokens
    # One pinned message more than a memory holds is refused whole, typed.
    with pytest.raises(InvalidMessageError, match="pinned"):
        await mem.append_many([turn(0, tokens=1), turn(1, tokens=1, priority=0)])
    assert await mem.len() == MAX_PINNED + 200
    result = await flush.flush()
    assert result.outcome == "summarised"
    health = await mem.health()
    assert health.token_count + health.summary_tokens <= 3_000
    assert health.priority_counts[0] == MAX_PINNED
    await audit(client, memory_key)
    record(
        group="adversarial",
        fault=f"a memory whose {MAX_PINNED} oldest messages are pinned (priority 0, the most it "
        "holds), 7x over budget",
        engine=engine.name,
        promise="a flush always finds what it may remove when the memory is over budget",
        operations=MAX_PINNED + 200,
        acknowledged=MAX_PINNED + 200,
        lost=0,
        duplicated=0,
        observed=f"one flush of {result.rounds} rounds brought it to "
        f"{health.token_count + health.summary_tokens} of 3,000 tokens",
    )


async def test_one_question_then_two_thousand_tool_messages_is_flushed(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    mem = memory(client, memory_key)
    flush = flusher(mem, 3_000)
    await mem.append({"role": "user", "content": "audit every order", "tokens": 10})
    for start in range(0, 1_000, 100):
        pairs: list[dict[str, Any]] = []
        for n in range(start, start + 100):
            call = f"toolu_{n}"
            pairs.append(
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": call, "name": "get", "input": {}}],
                    "tokens": 10,
                }
            )
            pairs.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": call, "content": "ok"}],
                    "tokens": 10,
                }
            )
        await mem.append_many(pairs)
    result = await flush.flush()
    assert result.outcome == "summarised"
    health = await mem.health()
    assert health.token_count + health.summary_tokens <= 3_000
    first = await mem.read(0, 0)
    assert first[0].text == "audit every order"  # the question stays
    # At most one summary a round of 256 (the snapshot limit): a thousand identical "ok"
    # results summarise to one line, too small to fold. Each covers a few ranges, not
    # 1,900 ids.
    summaries = await client.lrange(mem.keys.summaries, 0, -1)
    assert 1 <= len(summaries) <= 2_001 // 256 + 1
    covers = [json.loads(summary)["covers"] for summary in summaries]
    assert all(len(ranges) < 4 for ranges in covers)
    await audit(client, memory_key)
    record(
        group="adversarial",
        fault="one user turn followed by 2,000 tool messages (20,010 tokens, budget 3,000)",
        engine=engine.name,
        promise="a flush finds what it may remove; what a summary covers is bounded",
        operations=2_001,
        acknowledged=2_001,
        lost=0,
        duplicated=0,
        observed=f"flushed to {health.token_count + health.summary_tokens} tokens keeping the "
        f"question; {len(summaries)} summaries cover "
        f"{sum(b - a + 1 for ranges in covers for a, b in ranges):,} ids in "
        f"{sum(map(len, covers))} range(s), {sum(map(len, summaries)):,} bytes",
    )


class Flooding:
    async def summarize(self, messages: Sequence[Message], *, max_tokens: int) -> Summary:
        return Summary("fact " * 1_000_000, "flood")


class Hanging:
    async def summarize(self, messages: Sequence[Message], *, max_tokens: int) -> Summary:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


@pytest.mark.parametrize("summarizer", [Flooding(), Hanging()], ids=["flooding", "hanging"])
async def test_a_summarizer_is_never_trusted(
    client: RedisClient, memory_key: str, summarizer: Any, engine: EngineSpec, record: Any
) -> None:
    mem = memory(client, memory_key)
    flush = Flusher(
        mem.gateway,
        FlushSettings(
            max_tokens=2_000, summary_tokens=400, summarizer_deadline=timedelta(seconds=1)
        ),
        summarizer,
        COUNTER,
        metrics=FlushMetrics(CollectorRegistry()),
        background=False,
    )
    appended = await mem.append_many([turn(n, tokens=100) for n in range(40)])
    result = await asyncio.wait_for(flush.flush(), timeout=30)
    assert result.outcome == "summarised"
    health = await mem.health()
    assert health.summary_tokens <= 400
    assert health.token_count + health.summary_tokens <= 2_000
    assert sum(m.tokens or 0 for m in await mem.context(2_000)) <= 2_000
    assert not await client.exists(mem.keys.lock)  # the lease was given back
    await audit(client, memory_key, list(appended.ids))
    kind = "returns 5,000,000 characters" if isinstance(summarizer, Flooding) else "hangs"
    record(
        group="adversarial",
        fault=f"a custom summarizer that {kind}",
        engine=engine.name,
        promise="every summarizer gets a deadline and its output is checked and fitted",
        operations=40,
        acknowledged=40,
        lost=0,
        duplicated=0,
        observed=f"summary of {health.summary_tokens} tokens (limit 400), context "
        f"{health.token_count + health.summary_tokens} of 2,000; lock released"
        + ("; fell back to extractive after 1 s" if isinstance(summarizer, Hanging) else ""),
    )


async def test_a_read_only_handle_cannot_flush_or_lock(
    client: RedisClient, memory_key: str
) -> None:
    writer = memory(client, memory_key)
    await writer.append_many([turn(n) for n in range(40)])
    reader = MemoryInstance.open(
        client, project=PROJECT, key=memory_key, counter=COUNTER, read_only=True
    )
    before = await client.hgetall(writer.keys.meta)
    with pytest.raises(ReadOnlyMemoryError):
        reader.attach_flusher(flusher(writer, 100))
    with pytest.raises(ReadOnlyMemoryError):
        await reader.flush()
    with pytest.raises(ReadOnlyMemoryError):
        Flusher(
            reader.gateway, FlushSettings(max_tokens=100), ExtractiveSummarizer(COUNTER), COUNTER
        )
    with pytest.raises(ReadOnlyMemoryError):
        await FencedLock(reader.gateway).try_acquire()
    assert await client.hgetall(writer.keys.meta) == before
    assert not await client.exists(writer.keys.lock)


async def test_locking_a_memory_never_written_leaves_nothing_without_its_ttl(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key, ttl=timedelta(seconds=60))
    lease = await FencedLock(mem.gateway).try_acquire()
    assert lease is not None
    assert 0 < await client.pttl(mem.keys.meta) <= 60_000
    await lease.release()


@pytest.mark.parametrize("ttl", [math.nan, math.inf, -1.0, 0, True, "10"])
async def test_bad_ttls_are_usage_errors(client: RedisClient, memory_key: str, ttl: Any) -> None:
    mem = memory(client, memory_key)
    await mem.append(turn(1))
    with pytest.raises(UsageError):
        await mem.set_ttl(ttl)
    assert await client.pttl(mem.keys.msgs) == -1


COLLIDING_USERS = [
    ("张伟", "李娜"),
    ("Иван", "Олег"),
    ("José", "Josù"),
    ("alice@example.com", "alice_example.com"),
    ("user 1", "user/1"),
    ("a_x41", "aA"),
    ("", " "),
]


async def test_users_whose_ids_differ_never_share_a_memory(
    client: RedisClient, engine: EngineSpec, record: Any
) -> None:
    from compozy_memory import MemoryManager, MemoryRegistry, MemoryResource, TemplateError

    project = f"t{memory_key_suffix()}"
    registry = MemoryRegistry(
        project,
        [
            MemoryResource(
                id="support",
                max_tokens=4_000,
                default_key_template="user:{{ .workflow.input.user }}",
            )
        ],
    )
    manager = MemoryManager(registry, client, counter=COUNTER, flushing=False)
    users = [u for pair in COLLIDING_USERS for u in pair]
    written = 0
    for user in users:
        try:
            handle = await manager.get("support", {"workflow": {"input": {"user": user}}})
        except TemplateError:
            assert not user.strip()  # a blank id is refused, never mapped onto another
            continue
        await handle.append({"role": "user", "content": f"secret of {user!r}", "tokens": 5})
        written += 1
    cross = 0
    for user in users:
        if not user.strip():
            continue
        handle = await manager.get("support", {"workflow": {"input": {"user": user}}})
        texts = [m.text for m in await handle.read()]
        cross += sum(1 for t in texts if t != f"secret of {user!r}")
        assert texts == [f"secret of {user!r}"]
    record(
        group="adversarial",
        fault="users whose ids differ only in characters outside the key alphabet "
        "(CJK, Cyrillic, accents, @ vs _, space vs /, an escape look-alike)",
        engine=engine.name,
        promise="two different rendered keys never share a memory",
        operations=2 * written,
        acknowledged=written,
        lost=0,
        duplicated=0,
        observed=f"{written} users, {written} memories, {cross} cross-tenant reads; "
        "blank ids refused",
    )


def memory_key_suffix() -> str:
    import uuid

    return uuid.uuid4().hex[:10]
