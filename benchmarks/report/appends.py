"""Append throughput and per-append p99, every contender on the same server, rounds alternating."""

from __future__ import annotations

import asyncio
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from redis.asyncio import RedisCluster

from benchmarks.report.common import Settings, median, percentile
from benchmarks.report.libs import Contender
from compozy_memory._io.translate import RedisClient


@dataclass(frozen=True)
class Sample:
    rate: float  # messages per second over the whole round
    p99: float  # seconds, one append as its caller waits for it


async def wipe(client: RedisClient) -> None:
    """Empty the benchmark's own server (every master of a cluster) between rounds."""
    if isinstance(client, RedisCluster):
        await client.flushdb(target_nodes=RedisCluster.PRIMARIES)
    else:
        await client.flushdb()


async def _async_round(
    contender: Contender, client: RedisClient, sessions: int, appends: int
) -> Sample:
    assert contender.open_async is not None
    run = uuid.uuid4().hex
    opened = [contender.open_async(client, run, s) for s in range(sessions)]
    latencies: list[float] = []

    async def session(append: Any) -> None:
        for seq in range(appends):
            began = time.perf_counter()
            await append(seq)
            latencies.append(time.perf_counter() - began)

    started = time.perf_counter()
    await asyncio.gather(*(session(append) for append in opened))
    elapsed = time.perf_counter() - started
    return Sample(sessions * appends / elapsed, percentile(latencies, 0.99))


def _sync_round(contender: Contender, url: str, sessions: int, appends: int) -> Sample:
    """``threads`` threads, each appending round-robin to its share of the sessions."""
    assert contender.open_sync is not None
    run = uuid.uuid4().hex
    opened = [contender.open_sync(url, run, s) for s in range(sessions)]
    latencies: list[list[float]] = [[] for _ in range(contender.threads)]

    def worker(t: int) -> None:
        mine = opened[t :: contender.threads]
        for seq in range(appends):
            for append in mine:
                began = time.perf_counter()
                append(seq)
                latencies[t].append(time.perf_counter() - began)

    started = time.perf_counter()
    with ThreadPoolExecutor(contender.threads) as pool:
        list(pool.map(worker, range(contender.threads)))
    elapsed = time.perf_counter() - started
    merged = [x for part in latencies for x in part]
    return Sample(sessions * appends / elapsed, percentile(merged, 0.99))


async def one_round(
    contender: Contender, client: RedisClient, url: str, sessions: int, appends: int
) -> Sample:
    if contender.open_sync is not None:
        return await asyncio.to_thread(_sync_round, contender, url, sessions, appends)
    return await _async_round(contender, client, sessions, appends)


async def throughput(
    contenders: list[Contender], client: RedisClient, url: str, settings: Settings
) -> dict[str, Any]:
    """Medians over ``settings.rounds`` alternating rounds, with ratios to the first contender."""
    for contender in contenders:  # warm pools, script caches, imports
        await one_round(contender, client, url, settings.sessions, 3)
    await wipe(client)
    samples: dict[str, list[Sample]] = {c.name: [] for c in contenders}
    for _ in range(settings.rounds):
        for contender in contenders:
            samples[contender.name].append(
                await one_round(contender, client, url, settings.sessions, settings.appends)
            )
            await wipe(client)
    base = contenders[0].name
    base_rate = median([s.rate for s in samples[base]])
    base_p99 = median([s.p99 for s in samples[base]])
    rows = {}
    for contender in contenders:
        rate = median([s.rate for s in samples[contender.name]])
        p99 = median([s.p99 for s in samples[contender.name]])
        rows[contender.name] = {
            "label": contender.label,
            "how": contender.how,
            "msgs_per_s": round(rate, 1),
            "p99_ms": round(p99 * 1e3, 3),
            "rate_ratio": round(rate / base_rate, 3),
            "p99_ratio": round(p99 / base_p99, 3),
            "rounds_msgs_per_s": [round(s.rate, 1) for s in samples[contender.name]],
            "rounds_p99_ms": [round(s.p99 * 1e3, 3) for s in samples[contender.name]],
        }
    return {
        "baseline": base,
        "sessions": settings.sessions,
        "appends_per_session": settings.appends,
        "rounds": settings.rounds,
        "rows": rows,
    }
