"""Search recall on the hard benchmark (``benchmarks.hard_recall_data``): BM25, dense, fused.

No Redis: each conversation's messages (all of them, as a search over the whole memory
would see them) are indexed in the reference BM25 ``Index`` and embedded with the offline
``StaticEmbedder`` (7-bit vectors, as stored), and each question is scored four ways:

* ``bm25``: BM25 with the neighbour boost (the library's defaults);
* ``bm25/fusion``: the fusion below with no dense score (its rank transform and neighbour
  boost alone: what the fusion's settings give without vectors);
* ``dense``: cosine similarity over every message (what a server-side vector index gives);
* ``fused``: BM25 and dense over every message, fused (``DEFAULT_FUSION``);
* ``fused/rerank``: dense scores only for the bounded candidates a server without a vector
  engine would read (the best ``candidates`` BM25 hits and their neighbours), fused.

A question is a hit at k when every evidence turn is among the k best (two turns for
multi-hop questions). ``--tune`` searches the fusion settings on the tuning split (it
refuses the held-out one).

Run: ``python -m benchmarks.bench_hard_recall [--split tuning heldout] [--tune]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from benchmarks.bm25_reference import DEFAULT_NEIGHBOUR_WEIGHT, Index, neighbour_boost, top_k
from benchmarks.hard_recall_data import SPLITS, HardQuestion, Split, generate
from benchmarks.recall_data import Conversation
from benchmarks.recall_eval_offline import index_messages
from compozy_memory._search.analysis import analyze_query
from compozy_memory._search.dense import (
    cosines,
    dense_text,
    embed_all,
    speaker_names,
    strip_names,
)
from compozy_memory._search.fusion import DEFAULT_FUSION, Fusion, candidate_ids, fuse
from compozy_memory._search.static_model import StaticEmbedder

METHODS = ("bm25", "bm25/fusion", "dense", "fused", "fused/rerank")
KS = (5, 10)


@dataclass
class Scored:
    """One question's raw scores: BM25 (no boost) and dense cosine over every message."""

    question: HardQuestion
    bm25: dict[int, float]
    dense: dict[int, float]
    index: Index
    query: bytes
    docs: list[bytes]


async def score_split(
    conversations: Sequence[Conversation], embedder: StaticEmbedder
) -> list[Scored]:
    """Raw scores of every question of ``conversations``."""
    out: list[Scored] = []
    for conv in conversations:
        index = index_messages(conv.messages)
        names = speaker_names(conv.messages)
        texts = [dense_text(m, names) for m in conv.messages]
        docs = await embed_all(embedder, texts)
        questions = [q for q in conv.questions if isinstance(q, HardQuestion)]
        asked = [strip_names(q.question, names) for q in questions]
        queries = await embed_all(embedder, asked, query=True)
        for q, query in zip(questions, queries, strict=True):
            dense = dict(enumerate(cosines(query, docs)))
            bm25 = index.scores(analyze_query(q.question))
            out.append(Scored(q, bm25, dense, index, query, docs))
    return out


def ranking(scored: Scored, method: str, fusion: Fusion) -> list[int]:
    """The 10 best doc ids of one question by ``method``."""
    exists = scored.index.__contains__
    if method == "bm25":
        scores = neighbour_boost(scored.bm25, DEFAULT_NEIGHBOUR_WEIGHT, exists)
    elif method == "bm25/fusion":
        scores = fuse(scored.bm25, {}, exists, replace(fusion, dense_weight=0.0))
    elif method == "dense":
        scores = scored.dense
    elif method == "fused":
        scores = fuse(scored.bm25, scored.dense, exists, fusion)
    else:
        keep = candidate_ids(scored.bm25, fusion.candidates, exists)
        dense = {doc_id: scored.dense[doc_id] for doc_id in keep}
        scores = fuse(scored.bm25, dense, exists, fusion)
    return [doc_id for doc_id, _ in top_k(scores, max(KS))]


def hit(question: HardQuestion, ranked: Sequence[int], k: int) -> bool:
    """Whether every evidence turn is among the first ``k``."""
    top = set(ranked[:k])
    return all(e in top for e in question.evidence)


def recall(
    scored: Sequence[Scored], method: str, fusion: Fusion
) -> tuple[dict[int, float], dict[str, list[bool]]]:
    """Recall at each k, and the hits at 10 by question kind."""
    counts: Counter[int] = Counter()
    by_kind: dict[str, list[bool]] = defaultdict(list)
    for s in scored:
        ranked = ranking(s, method, fusion)
        for k in KS:
            counts[k] += hit(s.question, ranked, k)
        by_kind[s.question.kind].append(hit(s.question, ranked, 10))
    n = max(1, len(scored))
    return {k: counts[k] / n for k in KS}, by_kind


def rerank_ms(scored: Sequence[Scored], fusion: Fusion) -> float:
    """Mean milliseconds of the Python side of a rerank: the candidates, their cosines
    (7-bit integers, numpy) and the fusion, from BM25 scores and stored vectors in memory."""
    started = time.perf_counter()
    for s in scored:
        keep = sorted(candidate_ids(s.bm25, fusion.candidates, s.index.__contains__))
        dense = dict(zip(keep, cosines(s.query, [s.docs[i] for i in keep]), strict=True))
        top_k(fuse(s.bm25, dense, s.index.__contains__, fusion), max(KS))
    return (time.perf_counter() - started) * 1000 / max(1, len(scored))


def report(split: Split, scored: Sequence[Scored], fusion: Fusion) -> None:
    print(f"### {split} split: {len(scored)} questions, fusion {fusion}")
    print()
    print("| method | recall@5 | recall@10 |")
    print("| --- | ---: | ---: |")
    kinds: dict[str, dict[str, list[bool]]] = {}
    for method in METHODS:
        at, by_kind = recall(scored, method, fusion)
        kinds[method] = by_kind
        print(f"| {method} | {at[5]:.3f} | {at[10]:.3f} |")
    print()
    names = sorted(kinds["bm25"])
    print(
        "| recall@10 by kind | "
        + " | ".join(f"{k} (n={len(kinds['bm25'][k])})" for k in names)
        + " |"
    )
    print("| --- |" + " ---: |" * len(names))
    for method in METHODS:
        cells = [sum(kinds[method][k]) / len(kinds[method][k]) for k in names]
        print(f"| {method} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    print()
    sizes = [len(candidate_ids(s.bm25, fusion.candidates, s.index.__contains__)) for s in scored]
    print(
        f"rerank: {sum(sizes) / max(1, len(sizes)):.0f} candidates a query on average, "
        f"{rerank_ms(scored, fusion):.2f} ms a query in Python (candidates, cosines, fusion)"
    )
    print()


GRID: dict[str, tuple[Any, ...]] = {
    "method": ("product", "score", "rank"),
    "dense_weight": (0.5, 0.7, 0.75, 0.8, 0.9),
    "rank_k": (2, 5, 20),
    "candidates": (50, 100, 200),
    "neighbour_weight": (0.7, 1.0),
    "before_weight": (0.0, 0.3, 1.0),
}


def tune(scored: Sequence[Scored]) -> list[tuple[float, float, Fusion]]:
    """Every fusion of ``GRID``, best first by fused/rerank recall@10 then @5."""
    rows: list[tuple[float, float, Fusion]] = []
    keys = list(GRID)
    for values in itertools.product(*(GRID[k] for k in keys)):
        setting: dict[str, Any] = dict(zip(keys, values, strict=True))
        if setting["method"] != "rank" and setting["rank_k"] != GRID["rank_k"][0]:
            continue  # rank_k only matters to rank fusion
        fusion = replace(DEFAULT_FUSION, **setting)
        at, _ = recall(scored, "fused/rerank", fusion)
        rows.append((at[10], at[5], fusion))
    rows.sort(key=lambda row: (row[0], row[1]), reverse=True)
    return rows


async def run(args: Any) -> None:
    started = time.perf_counter()
    embedder = StaticEmbedder()
    texts = [m["content"] for c in generate("tuning", 1) for m in c.messages]
    begun = time.perf_counter()
    embedder.embed_now(texts)
    per_message = (time.perf_counter() - begun) * 1e6 / len(texts)
    print(
        f"embedder {embedder.model} ({embedder.dimensions} dimensions, 7-bit: "
        f"{embedder.dimensions} bytes a message); embedding: {per_message:.0f} us a "
        "message\n"
    )
    fusion = replace(DEFAULT_FUSION, candidates=args.candidates or DEFAULT_FUSION.candidates)
    for split in args.split:
        conversations = generate(split, args.conversations)
        scored = await score_split(conversations, embedder)
        if args.tune:
            rows = tune(scored)
            print(f"### tuning on the {split} split: best of {len(rows)} fusions")
            print()
            for r10, r5, setting in rows[: args.top]:
                print(f"@10 {r10:.3f}  @5 {r5:.3f}  {setting}")
            print()
            continue
        report(split, scored, fusion)
    print(f"{time.perf_counter() - started:.1f} s")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--split", nargs="+", choices=SPLITS, help="default: both (--tune: tuning)")
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--candidates", type=int, help="BM25 candidates reranked (fused/rerank)")
    parser.add_argument("--tune", action="store_true", help="search the fusion settings")
    parser.add_argument("--top", type=int, default=15, help="fusions printed by --tune")
    args: Any = parser.parse_args(argv)
    if args.split is None:
        args.split = ["tuning"] if args.tune else list(SPLITS)
    if args.tune and "heldout" in args.split:
        parser.error("--tune runs on the tuning split only: nothing is tuned on held-out data")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
