"""How long the dense-search scripts hold the server at their largest input, on a loaded
memory (``benchmarks.bench_server_time`` does the same for every other script).

A memory of 100,000 archived and 30,000 live messages (``--archived``, ``--live``) is built
with the offline ``StaticEmbedder``; then each script of dense search runs at the caps of
``compozy_memory/_model/limits.py``: the vector step over the whole memory (``vec_pending``
and ``vec_apply``, every step), a step of ``VECTOR_STEP_DOCS`` vectors of ``MAX_VECTOR_BYTES``,
``search_candidates`` with ``MAX_SEARCH_CANDIDATES`` candidates and ``MAX_QUERY_TERMS`` terms
(on the loaded memory, and on one whose vectors are all ``MAX_VECTOR_BYTES``),
``search_fetch`` of ``MAX_SEARCH_LIMIT`` ids across the archive, ``search()`` and
``context(query=)`` fused, ``vec_reset`` of the loaded memory, and a tenant's crafted calls
past every cap. Per operation: the worst server time (SLOWLOG) and the worst round trip of a
PING sent every millisecond meanwhile, as ``bench_server_time`` prints them.

Run: ``python -m benchmarks.bench_dense_server_time [--archived N] [--live N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from benchmarks.bench_recall import corpus
from benchmarks.bench_server_time import (
    COUNTER,
    Meter,
    Probe,
    Tenant,
    _realtime,
    messages,
    print_table,
)
from compozy_memory import MemoryInstance, MemoryPolicy, StaticEmbedder, connect
from compozy_memory._io.delivery import install
from compozy_memory._io.translate import RedisClient
from compozy_memory._model import limits
from compozy_memory._search.runtime.searching import bm25_ranking
from compozy_memory._search.selection import query_terms
from compozy_memory.embedded import start_server

PROJECT = "densetime"


def memory(client: RedisClient, key: str, embedder: Any = None) -> MemoryInstance:
    return MemoryInstance.open(
        client,
        project=PROJECT,
        key=key,
        counter=COUNTER,
        policy=MemoryPolicy(archive_max=0),
        embedder=embedder,
        background_index=False,
    )


async def build(meter: Meter, mem: MemoryInstance, archived: int, live: int) -> list[str]:
    texts, questions = corpus(archived + live)
    batch = messages(texts)
    for start in range(0, len(batch), limits.MAX_BATCH):
        await mem.append_many(batch[start : start + limits.MAX_BATCH])
    await mem.indexer.catch_up()
    await mem.trim(keep_messages=live)
    assert mem.vectors is not None
    mem.vectors.background = False
    await meter.measure(
        "vector step (every step)",
        f"{archived + live:,} messages, {mem.vectors.step_docs} a step",
        mem.vectors.catch_up,
    )
    for name, worst in sorted(worst_by_script(meter).items()):
        print(f"    of which {name}: worst {worst / 1000:.2f} ms")
    return [q for q, _ in questions]


def worst_by_script(meter: Meter) -> dict[str, int]:
    """The worst SLOWLOG time of each script since the last measure() began."""
    worst: dict[str, int] = {}
    for entry in meter.admin.slowlog_get(10_000):
        command = entry["command"].split(b" ")
        name = meter.functions.get(command[1]) if len(command) > 1 else None
        if name is not None:
            worst[name] = max(worst.get(name, 0), int(entry["duration"]))
    return worst


async def wide(meter: Meter, client: RedisClient) -> None:
    """A step of the largest vectors, and a search reading the most of them."""
    mem = memory(client, "wide")
    n = 3 * limits.MAX_SEARCH_CANDIDATES
    await mem.append_many([{"role": "user", "content": f"lighthouse keeper {i}"} for i in range(n)])
    await mem.indexer.catch_up()
    vector = b"\x41" * limits.MAX_VECTOR_BYTES
    per_step = limits.VECTOR_STEP_BYTES // limits.MAX_VECTOR_BYTES
    worst_step = None
    while True:
        pending = await mem.gateway.vec_pending(per_step, limits.MAX_CALL_BYTES)
        if pending.idle:
            break
        pairs = [(m.id or 0, vector) for m in pending.messages]

        async def step(p: Any = pending, v: Any = pairs) -> None:
            await mem.gateway.vec_apply(
                p, model=f"wide/{limits.MAX_VECTOR_BYTES}/v2", upto=p.upto, names=[], vectors=v
            )

        if worst_step is None and len(pairs) == per_step:
            worst_step = await meter.measure(
                "vec_apply",
                f"{per_step} vectors of {limits.MAX_VECTOR_BYTES:,} bytes",
                step,
            )
        else:
            await step()
    widest = [(doc_id, 1.0) for doc_id in range(1, limits.MAX_SEARCH_CANDIDATES + 1)]
    await meter.measure(
        "search_candidates (widest vectors)",
        f"{limits.MAX_SEARCH_CANDIDATES} candidates and neighbours, "
        f"{limits.MAX_VECTOR_BYTES:,}-byte vectors",
        lambda: mem.gateway.search_candidates(widest, since_id=0, kinds=[]),
    )
    await mem.clear()


async def loaded(meter: Meter, mem: MemoryInstance, questions: list[str], archived: int) -> None:
    long_query = " ".join(questions[:40])
    terms = query_terms(long_query, "k")
    ranked = await mem.transport.drive(
        bm25_ranking(
            mem.gateway,
            terms,
            limit=limits.MAX_SEARCH_CANDIDATES // 4,
            pool=limits.MAX_SEARCH_CANDIDATES,
            neighbour_weight=0.0,
        )
    )
    await meter.measure(
        "search_candidates",
        f"{len(ranked.best)} candidates ranked for {len(terms)} terms",
        lambda: mem.gateway.search_candidates(ranked.best, since_id=0, kinds=[]),
    )
    spread = [1 + i * (archived // limits.MAX_SEARCH_LIMIT) for i in range(limits.MAX_SEARCH_LIMIT)]
    await meter.measure(
        "search_fetch",
        f"{limits.MAX_SEARCH_LIMIT} ids across the archive",
        lambda: mem.gateway.search_fetch(spread, limit=limits.MAX_SEARCH_LIMIT),
    )
    await meter.measure(
        "search (fused)",
        f"{len(terms)} terms, limit {limits.MAX_SEARCH_LIMIT}",
        lambda: mem.search(long_query, limit=limits.MAX_SEARCH_LIMIT),
    )
    await meter.measure(
        "context (fused)",
        f"budget 10^9, {len(terms)} terms",
        lambda: mem.context(10**9, query=long_query),
    )
    await meter.measure(
        "vec_pending (caught up)",
        f"{limits.VECTOR_STEP_DOCS} documents",
        lambda: mem.gateway.vec_pending(limits.VECTOR_STEP_DOCS, limits.MAX_CALL_BYTES),
    )


async def tenant(meter: Meter, url: str) -> None:
    """Crafted calls past every cap of the dense scripts, by FCALL: each refused."""
    crafter = Tenant(url, PROJECT, "loaded")

    pairs = [x for i in range(10_000) for x in (i + 1, "A" * 300)]
    crafted: list[tuple[str, str, list[Any]]] = [
        ("vec_apply", "10,000 vectors", [0, "m", 1, 10**9, "", 10_000, *pairs]),
        ("vec_apply", "10,000 names", [0, "m", 1, 10**9, "\t".join(["n" * 60] * 10_000), 0]),
        ("vec_pending", "10^9 documents", [10**9, 10**12]),
        (
            "search_candidates",
            "5,000 terms, 10^6 candidates",
            [10**6, "1.2", "0.75", 0, "", *(f"w{i}" for i in range(5_000))],
        ),
        ("search_fetch", "100,000 ids", [str(i) for i in range(1, 100_001)]),
        ("vec_reset", "a 10,000-byte model name", [0, "m" * 10_000]),
    ]
    for name, what, args in crafted:

        async def refused(name: str = name, args: list[Any] = args) -> None:
            crafter.call(name, args)

        await meter.measure(f"tenant: {name}", f"{what}, by FCALL", refused)
    crafter.close()


async def run(args: Any) -> None:
    server = start_server()
    realtime = not args.no_realtime and _realtime(server.process.pid, priority=10)
    client = connect(server.url)
    probe = Probe(server.url, realtime=realtime)
    meter = Meter(server.url, probe)
    started = time.perf_counter()
    try:
        await install(client)
        how = "server and PING probe at SCHED_FIFO" if realtime else "normal scheduling"
        print(
            f"\n## Valkey: {args.archived:,} archived and {args.live:,} live messages, "
            f"StaticEmbedder ({how})\n"
        )
        mem = memory(client, "loaded", StaticEmbedder())
        questions = await build(meter, mem, args.archived, args.live)
        await loaded(meter, mem, questions, args.archived)
        await wide(meter, client)
        await tenant(meter, server.url)
        await meter.measure(
            "vec_reset", "the loaded memory's vectors", lambda: mem.gateway.vec_reset("x/1/v2")
        )
        print_table(meter.rows)
    finally:
        probe.stop()
        await client.aclose()
        server.stop()
    print(f"\n{time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--archived", type=int, default=100_000)
    parser.add_argument("--live", type=int, default=30_000)
    parser.add_argument("--no-realtime", action="store_true")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
