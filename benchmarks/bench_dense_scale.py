"""Does fusion lose to BM25 in a large memory of look-alike turns? Recall without a server.

The generated conversations of ``benchmarks.recall_data`` (the corpus of
``benchmarks.bench_dense_cost``), 1,000 to 100,000 messages in one memory: every message
indexed in the reference BM25 ``Index`` and embedded with the offline ``StaticEmbedder``
(7-bit vectors, as stored), and 200 questions a size whose evidence is among them. Each is
ranked by BM25 with the library's neighbour boost, and by the fusion of the bounded
candidates a server gives (the best ``candidates`` BM25 documents and their neighbours),
with ``DEFAULT_FUSION`` and with the previous default (score fusion, dense weight 0.7, a
symmetric neighbour boost of 1.0). Recall is strict: the evidence message itself is a hit.

These conversations reuse the same sentences across hundreds of speakers, so at 100,000
messages a query's candidates hold many near-duplicates that differ only in a name or a
value: the case where a dense score that ignores names can bury BM25's clear winner. No
fusion setting is chosen on this data; ``DEFAULT_FUSION`` was chosen on the hard
benchmark's tuning split among the settings that do not lose here.

Run: ``python -m benchmarks.bench_dense_scale [--sizes 1000 10000 100000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from benchmarks.bench_recall import corpus
from benchmarks.bm25_reference import DEFAULT_NEIGHBOUR_WEIGHT
from benchmarks.recall_eval_offline import index_messages
from compozy_memory._search.analysis import analyze_query
from compozy_memory._search.dense import cosines, dense_text, embed_all, speaker_names, strip_names
from compozy_memory._search.fusion import DEFAULT_FUSION, Fusion, candidate_ids, fuse
from compozy_memory._search.ranking import neighbour_boost, top_k
from compozy_memory._search.static_model import StaticEmbedder

PREVIOUS = Fusion(method="score", dense_weight=0.7, neighbour_weight=1.0, before_weight=1.0)
Ranker = Callable[[Mapping[int, float], bytes], dict[int, float]]


def fused(fusion: Fusion, docs: Sequence[bytes]) -> Ranker:
    """A ranking by ``fusion`` of the bounded candidates' dense scores."""

    def exists(doc_id: int) -> bool:
        return 0 <= doc_id < len(docs)

    def rank(bm25: Mapping[int, float], query: bytes) -> dict[int, float]:
        keep = sorted(candidate_ids(bm25, fusion.candidates, exists))
        dense = dict(zip(keep, cosines(query, [docs[i] for i in keep]), strict=True))
        return fuse(bm25, dense, set(keep), fusion)

    return rank


async def measure(
    size: int, n_queries: int, embedder: StaticEmbedder
) -> dict[str, tuple[float, float]]:
    """recall@5 and @10 of each method over ``size`` messages."""
    messages, questions = corpus(size)
    inside = [q for q in questions if q[1] < size]
    step = max(1, len(inside) // n_queries)
    queries = (inside[::step] * n_queries)[:n_queries]
    names = speaker_names(messages)
    docs = await embed_all(embedder, [dense_text(m, names) for m in messages])
    asked = await embed_all(embedder, [strip_names(q, names) for q, _ in queries], query=True)
    index = index_messages(messages)
    methods: dict[str, Ranker] = {
        "bm25": lambda bm25, _: neighbour_boost(bm25, DEFAULT_NEIGHBOUR_WEIGHT, index.__contains__),
        "fused (previous default)": fused(PREVIOUS, docs),
        "fused (DEFAULT_FUSION)": fused(DEFAULT_FUSION, docs),
    }
    found = {name: [0, 0] for name in methods}
    for (text, evidence), query in zip(queries, asked, strict=True):
        bm25 = index.scores(analyze_query(text))
        for name, rank in methods.items():
            best = [doc_id for doc_id, _ in top_k(rank(bm25, query), 10)]
            found[name][0] += evidence in best[:5]
            found[name][1] += evidence in best
    n = max(1, len(queries))
    return {name: (at5 / n, at10 / n) for name, (at5, at10) in found.items()}


async def run(args: Any) -> None:
    started = time.perf_counter()
    embedder = StaticEmbedder()
    print(
        "### Strict recall over one memory of look-alike conversations "
        f"({args.queries} questions a size)"
    )
    print()
    print("| messages | search | recall@5 | recall@10 |")
    print("| ---: | --- | ---: | ---: |")
    for size in args.sizes:
        for name, (at5, at10) in (await measure(size, args.queries, embedder)).items():
            print(f"| {size:,} | {name} | {at5:.3f} | {at10:.3f} |")
    print()
    print(f"{time.perf_counter() - started:.0f} s")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
