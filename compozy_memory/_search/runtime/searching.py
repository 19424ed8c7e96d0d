"""A query's BM25 ranking: the segments' fields it needs read from Redis, scored here.

:class:`~compozy_memory._search.scoring.SearchPlan` says which fields of ``ix:s`` a query
needs; these steps read them (``lua/search/index_read.lua``: reads only, bounded by bytes) and hand
them back until the plan can rank. A search costs the server the bytes of the buckets and
blocks it reads, nothing per posting.

The segment list the last search of a memory saw is kept, so the next one asks for its
buckets in the same call that reads the list: one round trip while the list has not changed,
two when it has (a step or a merge since).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from compozy_memory._model.limits import DATA_FORMAT, INDEX_READ_FIELDS
from compozy_memory._search.documents import SUMMARY_TERM
from compozy_memory._search.runtime.index_calls import IndexState
from compozy_memory._search.scoring import SearchPlan, SearchSettings
from compozy_memory._search.segments import SegmentEntry
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
        read = yield from gateway.index_read(gens, fields[:_FIELDS_PER_READ])
        state = read
        if read.fmt < DATA_FORMAT or not read.segments:
            _seen[gateway] = read.segments
            return Bm25Ranking([], read.unindexed)
        if read.stale or read.segments != segments:
            segments = _seen[gateway] = read.segments
            continue
        plan = SearchPlan(terms, segments, read.n_docs, read.total_length, settings, SUMMARY_TERM)
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
            return Bm25Ranking(plan.ranking(), read.unindexed, frozenset(plan.summaries))
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
