"""A flush always brings a memory over budget back under it, in bounded work, whatever the
memory holds (hundreds of pinned messages, a flood of tool messages) or the summarizer
does (floods, hangs); what summaries record about what they cover stays bounded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from compozy_memory import (
    ExtractiveSummarizer,
    Flusher,
    FlushSettings,
    InvalidMessageError,
    Message,
    Summary,
)
from compozy_memory._flush.coverage import MAX_COVER_RANGES
from compozy_memory._io.translate import RedisClient
from compozy_memory._metrics import FlushMetrics
from compozy_memory._model.limits import MAX_PINNED
from integration.engines import EngineSpec
from integration.flush_support import PROJECT, audit, manual_flusher
from integration.memories import COUNTER, memory, turn

# Run by scripts/reliability: its counts become rows of RELIABILITY.md.
pytestmark = pytest.mark.faults


async def test_hundreds_of_pinned_messages_do_not_stall_flushing(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    mem = memory(client, memory_key, project=PROJECT)
    flush = manual_flusher(mem, 3_000, snapshot_limit=64)
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
    mem = memory(client, memory_key, project=PROJECT)
    flush = manual_flusher(mem, 3_000)
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
    mem = memory(client, memory_key, project=PROJECT)
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


FLUSHES = 120
PINNED_EVERY = 10  # a pinned message every tenth round: it stays live between covered ranges


@pytest.mark.slow
async def test_what_a_summary_covers_stays_bounded_over_many_flushes(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    mem = memory(client, memory_key, project=PROJECT)
    flusher = Flusher(
        mem.gateway,
        FlushSettings(max_tokens=600, summary_tokens=100),
        ExtractiveSummarizer(COUNTER),
        COUNTER,
        metrics=FlushMetrics(CollectorRegistry()),
        background=False,
    )
    mem.attach_flusher(flusher)
    summarised: set[int] = set()
    pinned: list[int] = []
    flushed = 0
    for n in range(FLUSHES):
        batch: list[dict[str, Any]] = [
            {"role": "user", "content": f"round {n} turn {t} order #{n * 100 + t}", "tokens": 20}
            for t in range(30)
        ]
        if n % PINNED_EVERY == 0:
            batch[3] = {"role": "user", "content": f"keep {n}", "tokens": 5, "priority": 0}
        ids = (await mem.append_many(batch)).ids
        if n % PINNED_EVERY == 0:
            pinned.append(ids[3])
        result = await flusher.flush()
        assert result.outcome == "summarised", result
        flushed += 1
        assert result.plan is not None
        summarised |= set(result.plan.summarize_ids)
    # A rolling summary folds the ones before it once they outgrow their budget; short ones
    # may stand side by side until then. Each lists its ranges, bounded, and a count; the
    # newest's count covers everything summarised.
    summaries = (await mem.snapshot()).summaries
    assert summaries
    size = sum(len(env) for env in await client.lrange(mem.keys.summaries, 0, -1))
    covers = [r for s in summaries for r in (s.covers or [])]
    for summary in summaries:
        assert len(summary.covers or []) <= MAX_COVER_RANGES
    counted = sum(s.covered_count for s in summaries)
    assert counted == len(summarised)  # exact, whatever the ranges span
    spans = [range(a, b + 1) for a, b in covers]
    assert all(any(i in r for r in spans) for i in summarised)  # every one it replaced
    live = {m.id for m in await mem.read()}
    assert set(pinned) <= live
    assert not any(i in r for r in spans for i in live)  # and no live message
    record(
        group="adversarial-2",
        item=11,
        fault=f"{FLUSHES} flushes of one memory, each a rolling summary, a pinned message "
        f"left live every {PINNED_EVERY}th round",
        engine=engine.name,
        promise="what a summary records about what it covers stays bounded",
        operations=FLUSHES,
        acknowledged=flushed,
        lost=len(summarised) - counted + len(set(pinned) - live),
        duplicated=sum(i in r for r in spans for i in live),  # live ones counted covered
        observed=f"{len(summarised):,} messages summarised; {len(summaries)} summaries list "
        f"{len(covers)} ranges (at most {MAX_COVER_RANGES} each), {size:,} bytes, "
        "their counts exact",
    )
