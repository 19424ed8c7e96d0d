"""Search recall on the hard benchmark through the real ``search()`` on a server: BM25 alone
against BM25 fused with dense scores (the offline ``StaticEmbedder``).

Against a real server (an embedded Valkey unless ``--url``): each conversation of
``benchmarks.hard_recall_data`` is appended in order to a fresh memory (``append_many``), all
but the newest ``--live`` messages moved to the archive (``trim``), the index and the vectors
caught up; then every question is searched twice on the same keys: by a handle without an
embedder (BM25 with the neighbour boost, in the server) and by one with the embedder (BM25
candidates and their vectors from the server, fused here with ``DEFAULT_FUSION``). A question
counts at k when every evidence turn is among the first k hits, as in
``benchmarks.bench_hard_recall``, which scores the same questions without a server.

Run: ``python -m benchmarks.bench_hard_search [--split tuning heldout] [--live 200]
[--relative]`` (``--relative``: the tuning split's ``relative`` questions too).
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from redis.asyncio import Redis

from benchmarks.bench_recall import percentile
from benchmarks.hard_recall_data import SPLITS, HardQuestion, Split, generate
from compozy_memory import DEFAULT_FUSION, Fusion, MemoryInstance, MemoryPolicy, StaticEmbedder
from compozy_memory.embedded import start_server

KS = (5, 10)
METHODS = ("bm25", "fused")


def hit(question: HardQuestion, ids: Sequence[int], k: int) -> bool:
    """Whether every evidence turn (message ``i`` has id ``i + 1``) is among the first k."""
    top = set(ids[:k])
    return all(e + 1 in top for e in question.evidence)


async def score_split(
    client: Redis,
    split: Split,
    n_conversations: int,
    live: int,
    embedder: StaticEmbedder,
    fusion: Fusion = DEFAULT_FUSION,
    *,
    relative: bool = False,
) -> tuple[dict[str, Counter[str]], dict[str, list[float]], int]:
    """Hits by method and key (``@5``, ``@10``, ``<kind>``), search ms by method, questions."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    timings: dict[str, list[float]] = defaultdict(list)
    asked = 0
    run = uuid.uuid4().hex[:8]
    for conv in generate(split, n_conversations, relative=relative):
        key = f"{run}:{conv.conversation_id}"
        policy = MemoryPolicy(archive_max=0)
        fused = MemoryInstance.open(
            client, project="bench", key=key, policy=policy, embedder=embedder, fusion=fusion
        )
        plain = MemoryInstance.open(client, project="bench", key=key, policy=policy)
        for start in range(0, len(conv.messages), 500):
            await fused.append_many(conv.messages[start : start + 500])
        await fused.trim(keep_messages=live)
        await fused.indexer.catch_up()
        assert fused.vectors is not None
        await fused.vectors.wait_idle()
        await fused.vectors.catch_up()
        for q in conv.questions:
            if not isinstance(q, HardQuestion):
                continue
            asked += 1
            for method, handle in (("bm25", plain), ("fused", fused)):
                started = time.perf_counter()
                hits = await handle.search(q.question, limit=max(KS))
                timings[method].append((time.perf_counter() - started) * 1000)
                ids = [h.id for h in hits]
                for k in KS:
                    counts[method][f"@{k}"] += hit(q, ids, k)
                counts[method][q.kind] += hit(q, ids, 10)
                counts["asked"][q.kind] += 1 if method == "bm25" else 0
        await fused.clear()
    return counts, timings, asked


def report(
    split: Split,
    counts: dict[str, Counter[str]],
    timings: dict[str, list[float]],
    asked: int,
    live: int,
) -> None:
    print(f"### {split} split: {asked} questions, real search(), newest {live} messages live")
    print()
    print("| method | recall@5 | recall@10 | search p50 ms | p95 ms |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for method in METHODS:
        c, t = counts[method], timings[method]
        print(
            f"| {method} | {c['@5'] / asked:.3f} | {c['@10'] / asked:.3f} "
            f"| {percentile(t, 0.5):.2f} | {percentile(t, 0.95):.2f} |"
        )
    gain = (counts["fused"]["@10"] - counts["bm25"]["@10"]) / asked
    print()
    print(f"fused recall@10 - BM25 recall@10: {gain:+.3f}")
    print()
    kinds = sorted(counts["asked"])
    print("| recall@10 by kind | " + " | ".join(f"{k} (n={counts['asked'][k]})" for k in kinds))
    print("| --- |" + " ---: |" * len(kinds))
    for method in METHODS:
        cells = [counts[method][k] / counts["asked"][k] for k in kinds]
        print(f"| {method} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    print()


async def run(args: Any) -> None:
    embedder = StaticEmbedder()
    fusion = DEFAULT_FUSION
    if args.candidates:
        fusion = replace(fusion, candidates=args.candidates)
    if args.split != ["tuning"] and fusion != DEFAULT_FUSION:
        raise SystemExit("settings other than the defaults are tried on the tuning split only")
    server = None if args.url else start_server()
    client = Redis.from_url(args.url or server.url)  # type: ignore[union-attr]
    started = time.perf_counter()
    try:
        for split in args.split:
            counts, timings, asked = await score_split(
                client,
                split,
                args.conversations,
                args.live,
                embedder,
                fusion,
                relative=args.relative,
            )
            report(split, counts, timings, asked, args.live)
    finally:
        await client.aclose()
        if server:
            server.stop()
    print(f"{time.perf_counter() - started:.0f} s")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--split", nargs="+", choices=SPLITS, default=list(SPLITS))
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--live", type=int, default=200, help="messages left live (not archived)")
    parser.add_argument("--candidates", type=int, help="BM25 candidates (tuning split only)")
    parser.add_argument(
        "--relative",
        action="store_true",
        help="add the relative-time questions (tuning split only)",
    )
    parser.add_argument("--url", help="an existing server; default: start an embedded Valkey")
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
