"""Ranking what the index returns: the neighbour boost, then the best ``limit``.

The scores come from Redis (``lua/search/search_candidates.lua``, or fused with dense scores by
:mod:`compozy_memory._search.fusion`); these take plain mappings so the reference index the
tests check the scripts against ranks the same way.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Container, Mapping

__all__ = ["MAX_SKIP", "neighbour_boost", "neighbour_lift", "neighbours", "top_k"]


#: How many ids in a row a neighbour may be past: the ids of summaries written between two
#: turns (a flush between them) are not turns, and the turn past them is the neighbour.
MAX_SKIP = 4


def neighbours(doc_id: int, skip: Container[int]) -> tuple[int, int]:
    """The ids of the turns before and after ``doc_id``: the nearest ids not in ``skip``
    (summaries), at most ``MAX_SKIP`` away (else the id next to it)."""
    before, after = doc_id - 1, doc_id + 1
    while before in skip and doc_id - before < MAX_SKIP:
        before -= 1
    while after in skip and after - doc_id < MAX_SKIP:
        after += 1
    return before, after


def neighbour_boost(
    scores: Mapping[int, float],
    weight: float,
    exists: Container[int] | Callable[[int], bool],
    skip: Container[int] = (),
) -> dict[int, float]:
    """Add ``weight`` times the better of its two neighbours' scores to each document.

    In a conversation the answer often sits in the turn next to the one holding the
    question's words (the reply to "where did you go?"), so a document's final score is
    ``own + weight * max(score(before), score(after))``. Neighbours of scored documents
    become candidates even with no matching term of their own, if ``exists`` says they are
    in the index. ``skip``: ids that are not turns (summaries): they neither lift nor are
    lifted, and a turn's neighbour is the nearest turn past them (:func:`neighbours`).
    """
    if weight == 0 or not scores:
        return dict(scores)
    return neighbour_lift(scores, weight, weight, exists, skip)


def neighbour_lift(
    scores: Mapping[int, float],
    after: float,
    before: float,
    exists: Container[int] | Callable[[int], bool],
    skip: Container[int] = (),
) -> dict[int, float]:
    """Each document's score plus the larger of ``after`` times the score of the turn before
    it and ``before`` times the score of the turn after it; neighbours of scored documents
    that ``exists`` says are there join. With ``after == before`` this is BM25's symmetric
    neighbour boost (:func:`neighbour_boost`); apart, the reply to a matching turn gains more
    than the turn that led to it. ``skip`` as in :func:`neighbour_boost`."""
    if not scores or after == before == 0:
        return dict(scores)
    present: Callable[[int], bool] = exists if callable(exists) else exists.__contains__
    candidates = set(scores)
    for doc_id in scores:
        if doc_id in skip:
            continue
        for near in neighbours(doc_id, skip):
            if near not in candidates and present(near):
                candidates.add(near)
    get = scores.get
    out: dict[int, float] = {}
    for doc_id in candidates:
        own = get(doc_id, 0.0)
        if doc_id in skip:
            out[doc_id] = own
            continue
        prev, nxt = neighbours(doc_id, skip)
        lift = max(
            after * get(prev, 0.0) if prev not in skip else 0.0,
            before * get(nxt, 0.0) if nxt not in skip else 0.0,
        )
        out[doc_id] = own + lift
    return out


def top_k(scores: Mapping[int, float], limit: int) -> list[tuple[int, float]]:
    """The ``limit`` best ``(doc_id, score)`` pairs, best first; ties go to the newer doc."""
    if limit <= 0:
        return []
    best = heapq.nlargest(limit, scores.items(), key=lambda item: (item[1], item[0]))
    return [(doc_id, score) for doc_id, score in best]
