"""A query's BM25 ranking: the segments' fields it needs read from Redis, scored here.

:class:`~compozy_memory._search.scoring.SearchPlan` says which fields of ``ix:s`` a query
needs; these steps read them (``lua/search/index_read.lua``: reads only, bounded by bytes) and hand
them back until the plan can rank. A search costs the server the bytes of the buckets and
blocks it reads, nothing per posting.

The read of the list also returns the live messages the index has not reached yet (at most
``SEARCH_TAIL_DOCS``: :mod:`compozy_memory._search.tail`); the plan ranks them with the
segments' documents, so a message is found the moment it is appended, from any replica, and
``unindexed`` counts only what lies past that tail.

The segment list the last search of a memory saw is kept, so the next one asks for its
buckets in the same call that reads the list: one round trip while the list has not changed,
two when it has (a step or a merge since).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from compozy_memory._model.limits import DATA_FORMAT, INDEX_READ_FIELDS, SEARCH_TAIL_DOCS
from compozy_memory._search.documents import SUMMARY_TERM
from compozy_memory._search.runtime.index_calls import IndexState, parse_envelope
from compozy_memory._search.scoring import SearchPlan, SearchSettings
from compozy_memory._search.segments import SegmentEntry
from compozy_memory._search.tail import TailDoc, tail_docs
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.steps import Steps

__all__ = ["Bm25Ranking", "bm25_ranking"]

#: Fields one read asks for at most (buckets are small; blocks at most a few hundred bytes).
_FIELDS_PER_READ = min(INDEX_READ_FIELDS, 1_024)
#: Reads again this many times when merges keep changing the list under a search.
_ATTEMPTS = 4

_seen: weakref.WeakKeyDictionary[MemoryGateway, tuple[SegmentEntry, ...]] = (
    weakref.WeakKeyDictionary()
)


@dataclass(frozen=True, slots=True)
class Bm25Ranking:
    """A query's best documents by BM25, ``(id, score)`` best first."""

    best: list[tuple[int, float]]
    #: Messages not searchable yet when the index was read.
    unindexed: int
    #: Ids known to be summaries, among the candidates and their neighbours.
    summaries: frozenset[int] = frozenset()
    #: The live messages past the index that were ranked, by id: the server has no record
    #: of them yet, so a filter by kind is the client's, and a hit fetched at one of these
    #: ids is that message only if its envelope is the one read (``TailDoc.digest``).
    tail: Mapping[int, TailDoc] = field(default_factory=dict)
    #: Where that tail began (the index's ``ix_next`` as read, at least 1); 0: none ranked.
    tail_from: int = 0
    #: The memory's incarnation as read: the hits are fetched from it only ('' for any).
    incarnation: str = ""


def bm25_ranking(
    gateway: MemoryGateway,
    terms: Sequence[str],
    *,
    limit: int,
    pool: int,
    since_id: int = 0,
    neighbour_weight: float | None = None,
) -> Steps[Bm25Ranking]:
    """The best ``pool`` documents for ``terms`` (analysed query terms), ranked for a search
    of ``limit`` hits (neighbour boost: the policy's, unless ``neighbour_weight``)."""
    search = gateway.policy.search
    settings = SearchSettings(
        limit=limit,
        k1=search.k1,
        b=search.b,
        neighbour_weight=search.neighbour_weight if neighbour_weight is None else neighbour_weight,
        since_id=since_id,
        pool=pool,
    )
    segments = _seen.get(gateway, ())
    state: IndexState | None = None
    for _ in range(_ATTEMPTS):
        plan = SearchPlan(terms, segments, 0, 0, settings, SUMMARY_TERM)
        fields = plan.bucket_fields() if segments else []
        gens = [s.gen for s in segments]
        read = yield from gateway.index_read(gens, fields[:_FIELDS_PER_READ], tail=SEARCH_TAIL_DOCS)
        state = read
        if read.fmt < DATA_FORMAT or not (read.segments or read.tail):
            _seen[gateway] = read.segments
            return Bm25Ranking([], read.unindexed)
        if read.stale or read.segments != segments:
            segments = _seen[gateway] = read.segments
            continue
        tail = tail_docs(read.tail, parse_envelope)
        plan = SearchPlan(
            terms, segments, read.n_docs, read.total_length, settings, SUMMARY_TERM, tail
        )
        values = dict(read.values)
        ok = yield from _read_into(gateway, gens, fields[_FIELDS_PER_READ:], values)
        if not ok:
            segments = ()
            continue
        plan.take_buckets(values)
        while names := plan.wanted():
            more: dict[str, bytes | None] = {}
            ok = yield from _read_into(gateway, gens, names, more)
            if not ok:
                break
            plan.take(more)
        else:
            ranked_tail = {d.id: d for d in tail}
            # Past the index only the tail's documents are documents (the neighbour lift
            # offers any id: a pinned message, or one past the tail read, is none).
            best = [
                (i, score) for i, score in plan.ranking() if i < read.ix_next or i in ranked_tail
            ]
            tail_from = max(read.ix_next, 1) if ranked_tail else 0
            return Bm25Ranking(
                best,
                read.unindexed,
                frozenset(plan.summaries),
                ranked_tail,
                tail_from,
                read.incarnation,
            )
        segments = ()
    # The list changed under every attempt (merges in a burst): rank what was last read.
    assert state is not None
    return Bm25Ranking([], state.unindexed)


def _read_into(
    gateway: MemoryGateway, gens: list[int], names: Sequence[str], into: dict[str, bytes | None]
) -> Steps[bool]:
    """Read ``names`` of segments ``gens`` into ``into``; False when one was merged away."""
    for at in range(0, len(names), _FIELDS_PER_READ):
        chunk = list(names[at : at + _FIELDS_PER_READ])
        read = yield from gateway.index_read(gens, chunk)
        if read.stale:
            return False
        into.update(read.values)
    return True
