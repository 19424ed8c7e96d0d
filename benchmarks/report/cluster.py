"""The same appends and budgeted read on a 3-master Cluster and on the standalone server."""

from __future__ import annotations

import sys
from typing import Any

from redis.exceptions import RedisError

from benchmarks.report.appends import Sample, one_round, wipe
from benchmarks.report.common import MESSAGE_TOKENS, WINDOW_TOKENS, Settings, median, turn
from benchmarks.report.libs import COMPOZY, RAW, Contender
from benchmarks.report.reads import p50_ms
from compozy_memory import MemoryInstance, SuppliedCounter
from compozy_memory._io.translate import RedisClient


async def _read_p50(client: RedisClient, settings: Settings) -> float:
    memory = MemoryInstance.open(
        client, project="bench", key="cluster-read", counter=SuppliedCounter()
    )
    await memory.clear()
    await memory.append_many({**turn(0, i), "tokens": MESSAGE_TOKENS} for i in range(500))
    await memory.read_window(WINDOW_TOKENS)
    return await p50_ms(lambda: memory.read_window(WINDOW_TOKENS), settings.reads)


async def _round(
    contender: Contender, client: RedisClient, sessions: int, appends: int, retried: list[str]
) -> Sample:
    """One round; retried once if the client fails. redis-py's asyncio Cluster client closes
    every connection after one connection error, and the appends in flight on them then fail
    with ``AttributeError`` (seen once, in the warm-up, on a loaded machine). Retries are counted
    in the report."""
    try:
        return await one_round(contender, client, "", sessions, appends)
    except (RedisError, AttributeError) as exc:
        retried.append(f"{contender.name}: {type(exc).__name__}: {exc}")
        print(f"[bench] retrying a round after {retried[-1]}", file=sys.stderr, flush=True)
        await wipe(client)
        return await one_round(contender, client, "", sessions, appends)


async def versus_standalone(
    standalone: RedisClient, cluster: RedisClient, urls: dict[str, str], settings: Settings
) -> dict[str, Any]:
    clients = {"standalone": standalone, "cluster": cluster}
    retried: list[str] = []
    for client in clients.values():
        for contender in (RAW, COMPOZY):
            await _round(contender, client, settings.sessions, 3, retried)
        await wipe(client)
    samples: dict[tuple[str, str], list[Sample]] = {}
    reads: dict[str, list[float]] = {name: [] for name in clients}
    for _ in range(settings.rounds):
        for where, client in clients.items():
            for contender in (RAW, COMPOZY):
                sample = await _round(
                    contender, client, settings.sessions, settings.appends, retried
                )
                samples.setdefault((where, contender.name), []).append(sample)
                await wipe(client)
            reads[where].append(await _read_p50(client, settings))
    rows: dict[str, Any] = {}
    for contender in (RAW, COMPOZY):
        rate = {w: median([s.rate for s in samples[(w, contender.name)]]) for w in clients}
        p99 = {w: median([s.p99 for s in samples[(w, contender.name)]]) for w in clients}
        rows[contender.name] = {
            "label": contender.label,
            "standalone_msgs_per_s": round(rate["standalone"], 1),
            "cluster_msgs_per_s": round(rate["cluster"], 1),
            "cluster_rate_ratio": round(rate["cluster"] / rate["standalone"], 3),
            "standalone_p99_ms": round(p99["standalone"] * 1e3, 3),
            "cluster_p99_ms": round(p99["cluster"] * 1e3, 3),
            "cluster_p99_ratio": round(p99["cluster"] / p99["standalone"], 3),
        }
    read = {w: median(v) for w, v in reads.items()}
    rows["compozy_read"] = {
        "label": f"compozy-memory read_window({WINDOW_TOKENS}) of 500 messages, p50",
        "standalone_ms": round(read["standalone"], 4),
        "cluster_ms": round(read["cluster"], 4),
        "cluster_ratio": round(read["cluster"] / read["standalone"], 3),
    }
    return {
        "baseline": "the same measure on the standalone server",
        "urls": urls,
        "retried_rounds": retried,
        "rows": rows,
    }
