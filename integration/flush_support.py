"""Helpers for the flush tests: slow summarizers, flusher processes, and the invariant audit."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from threading import Barrier
from typing import Any

from prometheus_client import CollectorRegistry

from compozy_memory import (
    ExtractiveSummarizer,
    Flusher,
    FlushSettings,
    LockLostError,
    MemoryInstance,
    MemoryPolicy,
    Message,
    Summary,
)
from compozy_memory._config.schema import MemoryResource
from compozy_memory._io.translate import RedisClient
from compozy_memory._manager import flush_settings
from compozy_memory._metrics import FlushMetrics
from compozy_memory._model.keys import InstanceKeys
from integration.engines import EngineSpec
from integration.faults import meta_counts
from integration.memories import COUNTER

PROJECT = "flush"


class SlowSummarizer:
    """Extractive, after a delay; announces itself through a marker file if given one."""

    def __init__(self, delay: float, marker: Path | None = None) -> None:
        self.delay = delay
        self.marker = marker
        self.inner = ExtractiveSummarizer(COUNTER)

    async def summarize(self, messages: Sequence[Message], *, max_tokens: int) -> Summary:
        if self.marker is not None:
            self.marker.write_text("summarizing")
        await asyncio.sleep(self.delay)
        return await self.inner.summarize(messages, max_tokens=max_tokens)


def open_memory(
    client: RedisClient,
    key: str,
    budget: int,
    *,
    delay: float = 0.0,
    lock_ttl: timedelta = timedelta(seconds=30),
    marker: Path | None = None,
    background: bool = True,
) -> MemoryInstance:
    """A memory with a flusher; ``background=False``: it flushes only when told to."""
    memory = MemoryInstance.open(
        client,
        project=PROJECT,
        key=key,
        counter=COUNTER,
        policy=MemoryPolicy(max_tokens=budget, archive_max=0, ttl=timedelta(minutes=10)),
    )
    memory.attach_flusher(
        Flusher(
            memory.gateway,
            FlushSettings(max_tokens=budget, summary_tokens=min(120, budget // 4)),
            SlowSummarizer(delay, marker),
            COUNTER,
            lock_ttl=lock_ttl,
            debounce=timedelta(milliseconds=10),
            metrics=FlushMetrics(CollectorRegistry()),
            background=background,
        )
    )
    return memory


def open_counted_memory(
    client: RedisClient,
    key: str,
    max_messages: int,
    *,
    delay: float = 0.0,
    background: bool = True,
) -> MemoryInstance:
    """A ``message_count_based`` memory built from its YAML resource, as the manager builds
    it: the policy and the flush settings both come from the resource."""
    resource = MemoryResource.model_validate(
        {
            "id": "counted",
            "type": "message_count_based",
            "max_messages": max_messages,
            "archive_max": 0,
            "persistence": {"ttl": "10m"},
            "flushing_strategy": {"summary_tokens": 120},
        }
    )
    memory = MemoryInstance.open(
        client, project=PROJECT, key=key, counter=COUNTER, policy=resource.policy()
    )
    memory.attach_flusher(
        Flusher(
            memory.gateway,
            flush_settings(resource),
            SlowSummarizer(delay),
            COUNTER,
            lock_ttl=timedelta(seconds=30),
            debounce=timedelta(milliseconds=10),
            metrics=FlushMetrics(CollectorRegistry()),
            background=background,
        )
    )
    return memory


def manual_flusher(memory: MemoryInstance, budget: int, **settings: Any) -> Flusher:
    """Attach to ``memory`` an extractive flusher to ``budget`` that flushes only when told."""
    flusher = Flusher(
        memory.gateway,
        FlushSettings(max_tokens=budget, summary_tokens=min(200, budget // 4), **settings),
        ExtractiveSummarizer(COUNTER),
        COUNTER,
        metrics=FlushMetrics(CollectorRegistry()),
        background=False,
    )
    memory.attach_flusher(flusher)
    return flusher


def flusher_of(memory: MemoryInstance) -> Flusher:
    """The Flusher open_memory attached (tests reach into its settings and lock)."""
    flusher = memory.flusher
    assert isinstance(flusher, Flusher)
    return flusher


def writer_with_flushes(
    spec: EngineSpec,
    key: str,
    writer: int,
    count: int,
    budget: int,
    delay: float,
    start: Barrier,
    max_messages: int | None = None,
) -> dict[str, Any]:
    """``max_messages``: the memory is ``message_count_based`` with that limit (``budget`` is
    then unused)."""
    return asyncio.run(_writer(spec, key, writer, count, budget, delay, start, max_messages))


async def _writer(
    spec: EngineSpec,
    key: str,
    writer: int,
    count: int,
    budget: int,
    delay: float,
    start: Barrier,
    max_messages: int | None,
) -> dict[str, Any]:
    client = spec.client()
    memory = (
        open_memory(client, key, budget, delay=delay)
        if max_messages is None
        else open_counted_memory(client, key, max_messages, delay=delay)
    )
    assert memory.flusher is not None
    results = []
    original = memory.flusher.flush

    async def recording_flush() -> Any:
        result = await original()
        results.append(result)
        return result

    memory.flusher.flush = recording_flush  # type: ignore[method-assign,assignment]
    acknowledged = []
    try:
        await client.ping()
        start.wait(timeout=60)
        for seq in range(count):
            role = "user" if seq % 3 else "assistant"
            result = await memory.append(
                {"role": role, "content": f"w{writer} s{seq} order #{writer}-{seq}"}
            )
            acknowledged.append(result.first_id)
            # Paced (at least 10 ms every 5 appends) so that flushes interleave with the
            # appends however fast the machine is: a quiet one finished 400 appends within two
            # flushes.
            if seq % 5 == 0:
                await asyncio.sleep(0.01)
        await memory.flusher.wait_idle()
    finally:
        await client.aclose()
    summarised = [r for r in results if r.outcome == "summarised"]
    return {
        "acknowledged": acknowledged,
        "outcomes": dict(Counter(r.outcome for r in results)),
        "commits": sum(r.rounds for r in summarised),
        "projected": [r.plan.projected_tokens for r in summarised if r.plan],
        "projected_counts": [r.plan.projected_count for r in summarised if r.plan],
    }


def paused_flusher(spec: EngineSpec, key: str, budget: int, marker: str, result: str) -> None:
    """Flush with a 1 s lease and a 2 s summary; write the outcome to ``result``."""
    asyncio.run(_paused_flusher(spec, key, budget, Path(marker), Path(result)))


async def _paused_flusher(
    spec: EngineSpec, key: str, budget: int, marker: Path, result: Path
) -> None:
    client = spec.client()
    memory = open_memory(
        client, key, budget, delay=2.0, lock_ttl=timedelta(seconds=1), marker=marker
    )
    assert memory.flusher is not None
    outcome: str
    try:
        outcome = (await memory.flusher.flush()).outcome
    except LockLostError as exc:
        outcome = f"lost: {exc}"
    finally:
        await client.aclose()
    await asyncio.to_thread(result.write_text, outcome)


@dataclass
class Audit:
    live: list[int]
    covered: list[int]
    archived: list[int]
    summaries: int
    context_tokens: int


async def audit(client: RedisClient, key: str, acknowledged: Sequence[int] = ()) -> Audit:
    """Check the memory's invariants from Redis state alone; return what was found."""
    keys = InstanceKeys.build(PROJECT, key)
    # The reads are not one snapshot: a background flush may commit between them. Every
    # commit changes meta, so read until meta is the same before and after.
    for _ in range(50):
        before = await client.hgetall(keys.meta)
        live_envs = [json.loads(e) for e in await client.lrange(keys.msgs, 0, -1)]
        summary_envs = [json.loads(e) for e in await client.lrange(keys.summaries, 0, -1)]
        archive_envs = [json.loads(e) for e in await client.lrange(keys.archive, 0, -1)]
        raw_meta = await client.hgetall(keys.meta)
        if raw_meta == before:
            break
        await asyncio.sleep(0.02)
    meta = meta_counts(raw_meta)

    live = [e["id"] for e in live_envs]
    covered = [i for s in summary_envs for a, b in s["covers"] for i in range(a, b + 1)]
    archived = [e["id"] for e in archive_envs if e.get("type") != "summary"]
    assert len(live) == len(set(live)), "a live message appears twice"
    assert live == sorted(live), "live messages out of order"
    assert len(covered) == len(set(covered)), "a message is covered by two summaries"
    assert not set(live) & set(covered), "a message is both live and summarised"
    assert len(archived) == len(set(archived)), "a message was archived twice"
    # A summary's ranges, merged to stay bounded, may span the summaries it folded in.
    folded = {e["id"] for e in archive_envs if e.get("type") == "summary"}
    assert set(covered) <= set(archived) | folded, "a summarised message is not in the archive"
    for message_id in acknowledged:
        assert message_id in set(live) | set(covered), f"acknowledged message {message_id} lost"
    assert meta.get("tokens", 0) == sum(e["tokens"] for e in live_envs)
    assert meta.get("count", 0) == len(live_envs)
    assert meta.get("summary_tokens", 0) == sum(e["tokens"] for e in summary_envs)
    assert meta.get("summary_count", 0) == len(summary_envs)
    per_priority = sum(v for k, v in meta.items() if re.fullmatch(r"p:\d+:tokens", k))
    assert per_priority == meta.get("tokens", 0)
    return Audit(
        live,
        covered,
        archived,
        len(summary_envs),
        meta.get("tokens", 0) + meta.get("summary_tokens", 0),
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
