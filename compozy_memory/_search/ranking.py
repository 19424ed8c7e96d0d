"""Ranking what the index returns: the neighbour boost, then the best ``limit``.

The scores come from Redis (``lua/search_candidates.lua``, or fused with dense scores by
:mod:`compozy_memory._search.fusion`); these take plain mappings so the reference index the
tests check the scripts against ranks the same way.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Container, Mapping

__all__ = ["neighbour_boost", "top_k"]


def neighbour_boost(
    scores: Mapping[int, float],
    weight: float,
    exists: Container[int] | Callable[[int], bool],
) -> dict[int, float]:
    """Add ``weight`` times the better of its two neighbours' scores to each document.

    In a conversation the answer often sits in the turn next to the one holding the
    question's words (the reply to "where did you go?"), so a document's final score is
    ``own + weight * max(score(id - 1), score(id + 1))``. Neighbours of scored documents
    become candidates even with no matching term of their own, if ``exists`` says they are
    in the index.
    """
    if weight == 0 or not scores:
        return dict(scores)
    present: Callable[[int], bool] = exists if callable(exists) else exists.__contains__
    candidates = set(scores)
    for doc_id in scores:
        for near in (doc_id - 1, doc_id + 1):
            if near not in candidates and present(near):
                candidates.add(near)
    get = scores.get
    return {
        doc_id: get(doc_id, 0.0) + weight * max(get(doc_id - 1, 0.0), get(doc_id + 1, 0.0))
        for doc_id in candidates
    }


def top_k(scores: Mapping[int, float], limit: int) -> list[tuple[int, float]]:
    """The ``limit`` best ``(doc_id, score)`` pairs, best first; ties go to the newer doc."""
    if limit <= 0:
        return []
    best = heapq.nlargest(limit, scores.items(), key=lambda item: (item[1], item[0]))
    return [(doc_id, score) for doc_id, score in best]
