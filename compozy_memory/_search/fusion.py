"""Fusing BM25 with dense scores over a bounded candidate set.

Without a vector engine on the server, dense scores are computed in Python for a bounded set
of candidates only: the best ``candidates`` BM25 documents and their two neighbours (where a
paraphrased question's answer often sits), plus any documents the caller adds (the live
window). :func:`fuse` then combines the two scores, by product, score or rank, and applies
the neighbour boost to the fused score.

The defaults (:data:`DEFAULT_FUSION`) were chosen on the tuning split of the project's hard
recall benchmark (``python -m benchmarks.bench_hard_recall --tune``), among the settings that
do not lose recall to BM25 alone over 100,000 messages of the project's generated
conversations (``python -m benchmarks.bench_dense_scale``), and only then measured on the
held-out split: product fusion (the dense score scales BM25's, weighted 0.8: a look-alike
turn with fewer of the query's words cannot overtake the turn that has them, which a sum
lets it do among hundreds of near-duplicates), the turn after a match lifted by 0.95 of its
score (the reply to the turn that asked: just under 1, so the turn that matched keeps the
first place of a tie, which would go to the newer turn) and the turn before it by 0.3, 100
BM25 candidates.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from compozy_memory._search.ranking import neighbour_lift
from compozy_memory.errors import ConfigurationError

__all__ = [
    "DEFAULT_FUSION",
    "Fusion",
    "candidate_ids",
    "fuse",
    "neighbour_lift",
    "product_fusion",
    "rank_fusion",
    "score_fusion",
]


@dataclass(frozen=True, slots=True)
class Fusion:
    """How dense and BM25 scores are combined.

    ``method`` ``"product"``: ``bm25 / max(bm25) * ((1 - dense_weight) + dense_weight *
    dense)``, with the dense cosine rescaled to [0, 1] over the candidates (the dense score
    reorders what BM25 found, by up to ``1 / (1 - dense_weight)`` times); ``"score"``:
    ``(1 - dense_weight) * bm25 / max(bm25) + dense_weight * dense``; ``"rank"``: weighted
    reciprocal rank fusion, ``sum(weight / (rank_k + rank))``. ``candidates``: the BM25
    documents (best first) whose vectors are read, each with its two neighbours.
    ``neighbour_weight``: how much of the fused score of the turn before it a turn gains (a
    reply, from the turn that asked); ``before_weight``: likewise from the turn after it. A
    document gains the larger of the two.
    """

    method: Literal["product", "score", "rank"] = "product"
    dense_weight: float = 0.8
    rank_k: int = 5
    candidates: int = 100
    neighbour_weight: float = 0.95
    before_weight: float = 0.3

    def __post_init__(self) -> None:
        if self.method not in ("product", "score", "rank"):
            raise ConfigurationError(
                f"fusion method must be 'product', 'score' or 'rank', not {self.method!r}"
            )
        if not 0 <= self.dense_weight <= 1:
            raise ConfigurationError(f"dense_weight must be in [0, 1], got {self.dense_weight}")
        if (
            self.rank_k < 1
            or self.candidates < 1
            or not self.neighbour_weight >= 0
            or not self.before_weight >= 0
        ):
            raise ConfigurationError(
                "fusion needs rank_k >= 1, candidates >= 1, neighbour_weight >= 0 and "
                "before_weight >= 0"
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


def _rescaled(dense: Mapping[int, float]) -> dict[int, float]:
    """Dense scores min-max rescaled to [0, 1] (all 0 when they are equal)."""
    low = min(dense.values(), default=0.0)
    span = max(dense.values(), default=0.0) - low
    return {doc_id: (d - low) / span if span > 0 else 0.0 for doc_id, d in dense.items()}


def product_fusion(
    bm25: Mapping[int, float], dense: Mapping[int, float], dense_weight: float
) -> dict[int, float]:
    """Max-normalised BM25 scaled by ``(1 - dense_weight) + dense_weight * dense``, the dense
    score min-max rescaled over the documents BM25 scored: a document BM25 did not score gets
    0 (its neighbours may lift it), one without a dense score is scaled by
    ``1 - dense_weight``. Only the dense scores of BM25's documents count, so a search
    need not read the vectors of their neighbours."""
    top = max(bm25.values(), default=0.0)
    fused = dict.fromkeys(dense.keys() - bm25.keys(), 0.0)
    if top <= 0:
        return fused | dict.fromkeys(bm25, 0.0)
    scaled = _rescaled({doc_id: dense[doc_id] for doc_id in bm25 if doc_id in dense})
    lexical = 1.0 - dense_weight
    for doc_id, b in bm25.items():
        fused[doc_id] = b / top * (lexical + dense_weight * scaled.get(doc_id, 0.0))
    return fused


def score_fusion(
    bm25: Mapping[int, float], dense: Mapping[int, float], dense_weight: float
) -> dict[int, float]:
    """Convex combination of max-normalised BM25 and min-max-rescaled dense scores over the
    union of both mappings (a document missing from one scores 0 there)."""
    top = max(bm25.values(), default=0.0)
    scaled = _rescaled(dense)
    lexical = 1.0 - dense_weight
    fused: dict[int, float] = {}
    for doc_id in bm25.keys() | dense.keys():
        b = bm25.get(doc_id, 0.0) / top if top > 0 else 0.0
        fused[doc_id] = lexical * b + dense_weight * scaled.get(doc_id, 0.0)
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
    skip: Container[int] = (),
) -> dict[int, float]:
    """Fused scores of every document in ``bm25`` or ``dense``, neighbour boost included.

    ``dense`` holds the cosine similarities of the candidates (:func:`candidate_ids`);
    ``exists`` says which doc ids are in the memory, for the neighbour boost; ``skip``: ids
    that are not turns (summaries), which a neighbour is looked for past.
    """
    if fusion.method == "rank":
        fused = rank_fusion(bm25, dense, fusion.dense_weight, fusion.rank_k)
    elif fusion.method == "score":
        fused = score_fusion(bm25, dense, fusion.dense_weight)
    else:
        fused = product_fusion(bm25, dense, fusion.dense_weight)
    return neighbour_lift(fused, fusion.neighbour_weight, fusion.before_weight, exists, skip)
