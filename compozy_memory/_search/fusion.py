"""Fusing BM25 with dense scores over a bounded candidate set.

Without a vector engine on the server, dense scores are computed in Python for a bounded set
of candidates only: the best ``candidates`` BM25 documents and their two neighbours (where a
paraphrased question's answer often sits), plus any documents the caller adds (the live
window). :func:`fuse` then combines the two scores, by score or by rank, and applies the
neighbour boost to the fused score.

The defaults (:data:`DEFAULT_FUSION`) were chosen on the tuning split of the project's hard
recall benchmark (``python -m benchmarks.bench_hard_recall --tune``) and only then measured
on its held-out split: score fusion with the dense score weighted 0.7, a full neighbour boost
(1.0: many answers are the reply to the turn that matched, which the dense score finds),
100 BM25 candidates. The settings within 0.02 of its recall@10 form a broad plateau there
(score fusion, dense weight 0.5-0.8, neighbour weight 0.7-1.0, 100-200 candidates; rank
fusion with ``rank_k`` 2-5 about 0.02 lower), so the choice is not a sharp optimum of the
tuning data.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from compozy_memory._search.ranking import neighbour_boost
from compozy_memory.errors import ConfigurationError

__all__ = [
    "DEFAULT_FUSION",
    "Fusion",
    "candidate_ids",
    "fuse",
    "rank_fusion",
    "score_fusion",
]


@dataclass(frozen=True, slots=True)
class Fusion:
    """How dense and BM25 scores are combined.

    ``method`` ``"score"``: ``(1 - dense_weight) * bm25 / max(bm25) + dense_weight * dense``
    with the dense cosine rescaled to [0, 1] over the candidates; ``"rank"``: weighted
    reciprocal rank fusion, ``sum(weight / (rank_k + rank))``. ``candidates``: the BM25
    documents (best first) whose vectors are read, each with its two neighbours.
    ``neighbour_weight``: the boost a document gets from its better neighbour's fused score.
    """

    method: Literal["score", "rank"] = "score"
    dense_weight: float = 0.7
    rank_k: int = 5
    candidates: int = 100
    neighbour_weight: float = 1.0

    def __post_init__(self) -> None:
        if self.method not in ("score", "rank"):
            raise ConfigurationError(
                f"fusion method must be 'score' or 'rank', not {self.method!r}"
            )
        if not 0 <= self.dense_weight <= 1:
            raise ConfigurationError(f"dense_weight must be in [0, 1], got {self.dense_weight}")
        if self.rank_k < 1 or self.candidates < 1 or self.neighbour_weight < 0:
            raise ConfigurationError(
                "fusion needs rank_k >= 1, candidates >= 1 and neighbour_weight >= 0"
            )


DEFAULT_FUSION = Fusion()


def candidate_ids(
    bm25: Mapping[int, float],
    limit: int,
    exists: Container[int] | Callable[[int], bool],
    extra: Iterable[int] = (),
) -> set[int]:
    """The ``limit`` best BM25 documents, their neighbours that ``exists`` says are there,
    and ``extra``: the documents whose dense scores a query computes."""
    present: Callable[[int], bool] = exists if callable(exists) else exists.__contains__
    best = heapq.nlargest(limit, bm25.items(), key=lambda item: (item[1], item[0]))
    out = set(extra)
    for doc_id, _ in best:
        out.add(doc_id)
        for near in (doc_id - 1, doc_id + 1):
            if present(near):
                out.add(near)
    return out


def score_fusion(
    bm25: Mapping[int, float], dense: Mapping[int, float], dense_weight: float
) -> dict[int, float]:
    """Convex combination of max-normalised BM25 and min-max-rescaled dense scores over the
    union of both mappings (a document missing from one scores 0 there)."""
    top = max(bm25.values(), default=0.0)
    low = min(dense.values(), default=0.0)
    span = max(dense.values(), default=0.0) - low
    lexical = 1.0 - dense_weight
    fused: dict[int, float] = {}
    for doc_id in bm25.keys() | dense.keys():
        b = bm25.get(doc_id, 0.0) / top if top > 0 else 0.0
        d = (dense[doc_id] - low) / span if doc_id in dense and span > 0 else 0.0
        fused[doc_id] = lexical * b + dense_weight * d
    return fused


def _ranks(scores: Mapping[int, float]) -> dict[int, int]:
    ordered = sorted(scores.items(), key=lambda item: (-item[1], -item[0]))
    return {doc_id: rank for rank, (doc_id, _) in enumerate(ordered, start=1)}


def rank_fusion(
    bm25: Mapping[int, float], dense: Mapping[int, float], dense_weight: float, k: int
) -> dict[int, float]:
    """Weighted reciprocal rank fusion: ``(1 - w) / (k + bm25 rank) + w / (k + dense rank)``;
    a document absent from a ranking gets nothing from it. Scaled so the best possible
    document scores 1."""
    scale = float(k + 1)
    fused: dict[int, float] = {}
    for weight, ranks in ((1.0 - dense_weight, _ranks(bm25)), (dense_weight, _ranks(dense))):
        for doc_id, rank in ranks.items():
            fused[doc_id] = fused.get(doc_id, 0.0) + scale * weight / (k + rank)
    return fused


def fuse(
    bm25: Mapping[int, float],
    dense: Mapping[int, float],
    exists: Container[int] | Callable[[int], bool],
    fusion: Fusion = DEFAULT_FUSION,
) -> dict[int, float]:
    """Fused scores of every document in ``bm25`` or ``dense``, neighbour boost included.

    ``dense`` holds the cosine similarities of the candidates (:func:`candidate_ids`);
    ``exists`` says which doc ids are in the memory, for the neighbour boost.
    """
    if fusion.method == "rank":
        fused = rank_fusion(bm25, dense, fusion.dense_weight, fusion.rank_k)
    else:
        fused = score_fusion(bm25, dense, fusion.dense_weight)
    return neighbour_boost(fused, fusion.neighbour_weight, exists)
