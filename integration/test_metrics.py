"""The twelve metrics of Compozy's memory specification, scraped over HTTP after a workload on a
real server."""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from compozy_memory import (
    ConflictError,
    FencedLock,
    MemoryManager,
    MemoryMetrics,
    MemoryNotFoundError,
    MemoryRegistry,
    MemoryResource,
    start_metrics_server,
)
from compozy_memory._io.translate import RedisClient
from integration.memories import COUNTER

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - our http:// URL
        assert response.status == 200
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def message(priority: int, tokens: int = 20, text: str = "hello") -> dict[str, object]:
    return {"role": "user", "content": text, "priority": priority, "tokens": tokens}


async def test_a_workload_shows_in_every_one_of_the_twelve_metrics(client: RedisClient) -> None:
    resource = MemoryResource.model_validate(
        {
            "id": "support",
            "max_tokens": 1000,
            "default_key_template": "user:{{ .user }}",
            "summarizer": {"type": "extractive"},
            "flushing_strategy": {"summary_tokens": 50},
        }
    )
    metrics = MemoryMetrics(CollectorRegistry())
    manager = MemoryManager(
        MemoryRegistry("metrics", [resource]),
        client,
        counter=COUNTER,
        metrics=metrics,
    )
    user = {"user": uuid.uuid4().hex}

    # Config resolution: a direct get, a level-1 agent, an unknown memory.
    memory = await manager.get("support", user)
    (same,) = await manager.for_agent({"memory": "support", "memory_key": "user:{{ .user }}"}, user)
    assert same is memory
    with pytest.raises(MemoryNotFoundError):
        await manager.get("nope", user)

    # Appends under the flush threshold: each settled from the script's counts (a hit).
    await memory.clear()
    await memory.append_many([message(0), *[message(2, 100) for _ in range(5)]])
    await memory.append(message(1), dedupe_key="once")
    await memory.append(message(1), dedupe_key="once")  # a duplicate: stores nothing
    await memory.append(message(1))
    assert len(await memory.read()) == 8
    with pytest.raises(ConflictError):
        await memory.replace([message(2)], if_last_id=1)  # the conversation moved on

    # A trim: the two oldest movable messages (priority 0 is kept).
    trimmed = await memory.trim(keep_messages=6)
    assert trimmed.removed_count == 2

    # The lock, taken by someone else: the flush skips (contention); a refresh.
    flusher = memory.flusher
    assert flusher is not None
    other = FencedLock(memory.gateway, timedelta(seconds=30), metrics=metrics, name="support")
    lease = await other.try_acquire()
    assert lease is not None
    assert (await memory.flush()).outcome == "skipped"
    assert await lease.refresh()
    assert await lease.release()

    # Over the threshold, with background flushes off so that this flush is the only one.
    flusher.background = False  # type: ignore[attr-defined]
    await memory.append_many([message(2, 100, f"fact {i}") for i in range(5)])
    result = await memory.flush()
    assert result.outcome == "summarised"
    assert result.tokens_saved > 0
    health = await memory.health()

    server = start_metrics_server(0, registry=metrics.registry)
    try:
        samples = await asyncio.to_thread(scrape, server.url)
    finally:
        server.stop()

    def get(name: str, **labels: str) -> float | None:
        return value(samples, name, **labels)

    support = {"memory": "support"}
    # 1. messages by priority (the duplicate not counted)
    assert get("compozy_memory_messages_total", priority="0", **support) == 1
    assert get("compozy_memory_messages_total", priority="1", **support) == 2
    assert get("compozy_memory_messages_total", priority="2", **support) == 10
    # 2. trims
    assert get("compozy_memory_trim_total", strategy="oldest", **support) == 1
    # 3. flushes by type
    assert get("compozy_memory_flush_total", type="skipped", **support) == 1
    assert get("compozy_memory_flush_total", type="summary", **support) == 1
    # 4. operation latency and outcome (counts of the histograms)
    latency = "compozy_memory_operation_latency_seconds_count"
    expected = {
        ("append", "ok"): 5,
        ("read", "ok"): 1,
        ("replace", "ConflictError"): 1,
        ("clear", "ok"): 1,
        ("lock_acquire", "ok"): 3,
        ("lock_refresh", "ok"): 1,
        ("lock_release", "ok"): 2,
        ("snapshot", "ok"): 1,
        ("flush_commit", "ok"): 1,
        ("health", "ok"): 1,
    }
    seen = {
        (dict(labels)["operation"], dict(labels)["outcome"]): v
        for (name, labels), v in samples.items()
        if name == latency
    }
    # A trim is one call a bounded step (one more after the indexer catches up, if it had
    # not yet), and the indexer's steps run in the background: how many depends on timing.
    assert seen.pop(("trim", "ok")) >= 1
    assert seen.pop(("index_pending", "ok")) >= 1
    # The indexer's steps, and the index reads of its merges and of a search.
    for step in ("index_add", "index_read", "index_merge", "index_put", "index_gc"):
        seen.pop((step, "ok"), None)
    assert seen == expected
    assert all(dict(labels)["memory"] == "support" for (n, labels) in samples if n == latency)
    # 5-8. the lock
    assert get("compozy_memory_lock_acquire_total", **support) == 2
    assert get("compozy_memory_lock_contention_total", **support) == 1
    assert get("compozy_memory_lock_duration_seconds_count", **support) == 2
    assert get("compozy_memory_lock_refresh_total", result="ok", **support) == 1
    # 9. tokens saved, by strategy
    saved = get("compozy_memory_tokens_saved_total", strategy="hybrid_summary", **support)
    assert saved == result.tokens_saved
    # 10. the priority distribution: the live messages health() counted
    distribution = {
        int(dict(labels)["priority"]): v
        for (name, labels), v in samples.items()
        if name == "compozy_memory_priority_distribution"
    }
    assert distribution == {p: health.priority_counts.get(p, 0) for p in distribution}
    assert distribution[0] == 1
    # 11. config resolution
    resolution = "compozy_memory_config_resolution_total"
    assert get(resolution, pattern="direct", outcome="ok") == 1
    assert get(resolution, pattern="direct", outcome="MemoryNotFoundError") == 1
    assert get(resolution, pattern="simple", outcome="ok") == 1
    # 12. flush checks settled from the append's counts: every append but the last
    assert get("compozy_memory_flush_optimization_hits_total", **support) == 4
