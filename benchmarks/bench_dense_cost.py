"""What dense scores cost a search, as a memory grows to 100,000 messages.

Against a real server (an embedded Valkey unless ``--url``): one memory is filled with the
generated conversations of ``benchmarks.recall_data`` (``append_many`` in batches of 500, each
moved to the archive by ``trim(keep_messages=0)``, the index and the vectors of the offline
``StaticEmbedder`` caught up after each batch), and at each size ``--queries`` questions whose
evidence is in the archive are searched (limit 10) by a handle without an embedder (BM25 in
the server) and by one with it (BM25 candidates and their vectors in one call, fused here, then
the hits read with their neighbours: two calls), alternating, after a warm-up. Printed: p50 and
p95 ms end to end, the mean ms inside the server per search (``INFO commandstats``), and
recall@10 of the timed questions (strict: the evidence is a hit).

Run: ``python -m benchmarks.bench_dense_cost [--sizes 1000 10000 100000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from benchmarks.bench_recall import _server_usec, corpus, percentile
from compozy_memory import MemoryInstance, MemoryPolicy, StaticEmbedder
from compozy_memory.embedded import start_server

BATCH = 500


@dataclass
class Row:
    size: int
    method: str
    p50: float
    p95: float
    server_ms: float
    recall10: float


async def timed(
    client: Redis, mem: MemoryInstance, queries: Sequence[tuple[str, int]]
) -> tuple[list[float], float, float]:
    """Per-search ms, mean server ms a search, and recall@10 of ``queries``."""
    samples, found = [], 0
    usec, _ = await _server_usec(client)
    for text, evidence in queries:
        started = time.perf_counter()
        hits = await mem.search(text, limit=10)
        samples.append((time.perf_counter() - started) * 1000)
        found += any(h.id == evidence + 1 for h in hits)  # ids are 1.. in order
    after, _ = await _server_usec(client)
    return samples, (after - usec) / 1000 / max(1, len(queries)), found / max(1, len(queries))


async def measure(
    client: Redis, sizes: Sequence[int], n_queries: int, embedder: StaticEmbedder
) -> tuple[list[Row], float]:
    messages, questions = corpus(max(sizes))
    key = f"{uuid.uuid4().hex[:8]}:dense-cost"
    policy = MemoryPolicy(archive_max=0)
    fused = MemoryInstance.open(client, project="bench", key=key, policy=policy, embedder=embedder)
    plain = MemoryInstance.open(client, project="bench", key=key, policy=policy)
    assert fused.vectors is not None
    rows: list[Row] = []
    filled, fill_seconds = 0, 0.0
    for size in sorted(sizes):
        started = time.perf_counter()
        while filled < size:
            batch = messages[filled : min(size, filled + BATCH)]
            await fused.append_many(batch)
            await fused.trim(keep_messages=0)
            await fused.vectors.wait_idle()
            await fused.vectors.catch_up()
            filled += len(batch)
        fill_seconds += time.perf_counter() - started
        inside = [q for q in questions if q[1] < size]
        step = max(1, len(inside) // n_queries)
        queries = (inside[::step] * n_queries)[:n_queries]
        for handle in (plain, fused):  # warm the scripts, the connection, the tokenizer
            for text, _ in queries[:10]:
                await handle.search(text)
        samples: dict[str, list[float]] = {"bm25": [], "fused": []}
        server: dict[str, float] = {"bm25": 0.0, "fused": 0.0}
        found: dict[str, float] = {"bm25": 0.0, "fused": 0.0}
        half = len(queries) // 2
        for part in (queries[:half], queries[half:]):  # alternate: load swings hit both
            for method, handle in (("bm25", plain), ("fused", fused)):
                times, server_ms, recall = await timed(client, handle, part)
                samples[method] += times
                server[method] += server_ms * len(part) / len(queries)
                found[method] += recall * len(part) / len(queries)
        for method, times in samples.items():
            rows.append(
                Row(
                    size,
                    method,
                    percentile(times, 0.5),
                    percentile(times, 0.95),
                    server[method],
                    found[method],
                )
            )
    await fused.clear()
    return rows, fill_seconds


async def run(args: Any) -> None:
    embedder = StaticEmbedder()
    server = None if args.url else start_server()
    client = Redis.from_url(args.url or server.url)  # type: ignore[union-attr]
    try:
        rows, fill = await measure(client, args.sizes, args.queries, embedder)
    finally:
        await client.aclose()
        if server:
            server.stop()
    print(f"### Search cost with dense scores (limit 10, {args.queries} queries a size)")
    print()
    print("| archived messages | search | p50 ms | p95 ms | mean ms in server | recall@10 |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r.size:,} | {r.method} | {r.p50:.2f} | {r.p95:.2f} | {r.server_ms:.2f} "
            f"| {r.recall10:.3f} |"
        )
    print()
    print(f"fill (append, archive, index, embed): {fill:.0f} s")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--url", help="an existing server; default: start an embedded Valkey")
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
