"""BM25 over a memory's segments, in the client: a plan that says which fields to read next.

The search does no I/O itself (as h11 keeps HTTP apart from sockets): :class:`SearchPlan`
names the fields of ``ix:s`` it needs, is handed their values, and in the end ranks the
documents. Its cost follows the query, not the history:

1. For each query term and segment, one dictionary bucket: the term's document frequency in
   the segment, and its postings when the list is short. A term's frequency is the sum over
   positive segments less the negative ones (documents removed since).
2. Candidates come from the rarest terms' postings, newest first, while they fit
   ``QUERY_BUDGET`` postings in all (the rarest term is always read, at most
   ``QUERY_POSTINGS`` of it); long lists are read a block at a time.
3. The terms left over (common ones: a speaker's name, a month) are scored on the best
   candidates only, from the blocks whose id range holds one (``RESCORE_BLOCKS`` at most).
4. A document's score gains ``neighbour_weight`` times its better neighbour's
   (:func:`~compozy_memory._search.ranking.neighbour_boost`). Summaries are not turns: the
   postings of ``marker`` (the term every summary's document holds) whose blocks hold a
   candidate or a neighbour of one say which ids are summaries (:attr:`SearchPlan.summaries`),
   which the boost passes over and a search ranks in a lane of their own.

The live messages the index has not reached yet (the tail a search reads with the list:
:mod:`compozy_memory._search.tail`) are documents too: they count in N, the mean length and
every term's frequency, and each is scored on every query term (a tail is short).

The scores of the documents it returns are BM25's over every live document (checked against
``benchmarks/bm25_reference.py``); which documents can come back is bounded by the budgets.
Removed documents whose removal the indexer has not written yet still count in the document
frequencies, and are dropped when the hits are fetched.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from compozy_memory._model.limits import (
    QUERY_BUDGET,
    QUERY_POSTINGS,
    RESCORE_BLOCKS,
    RESCORE_POOL,
    RESCORE_TERMS,
)
from compozy_memory._search.ranking import MAX_SKIP, neighbour_boost, top_k
from compozy_memory._search.segment_reads import Bucket, block_postings, decode_block
from compozy_memory._search.segments import (
    SegmentEntry,
    TermEntry,
    block_field,
    bucket_field,
    bucket_of,
)
from compozy_memory._search.tail import TailDoc

__all__ = ["SearchPlan", "SearchSettings"]


@dataclass(frozen=True, slots=True)
class SearchSettings:
    """BM25's parameters and the filters of one search."""

    limit: int
    k1: float = 1.2
    b: float = 0.75
    neighbour_weight: float = 0.5
    since_id: int = 0
    #: How many ranked documents to return (the hits are fetched from the best of them,
    #: some may be gone or filtered out): at least ``limit``.
    pool: int = 0


@dataclass(slots=True)
class _Term:
    term: str
    df: int = 0
    #: Its postings in positive segments (removed documents' included until a merge).
    stored: int = 0
    weight: float = 0.0
    #: (segment, its entry for the term), positive and negative segments.
    found: list[tuple[SegmentEntry, TermEntry]] = field(default_factory=list)
    #: Documents removed that hold the term (negative segments' postings), once read.
    dead: set[int] = field(default_factory=set)
    #: Documents whose share of this term was added while candidates were gathered.
    counted: set[int] = field(default_factory=set)


class SearchPlan:
    """One search over ``segments`` (the list as read, with ``n_docs`` and ``total_length``
    from the same read) and ``tail`` (the live documents past them, from that read). Use:
    :meth:`bucket_fields`, :meth:`take_buckets`, then while :meth:`wanted` names fields, read
    them and :meth:`take`; finally :meth:`ranking`."""

    def __init__(
        self,
        terms: Iterable[str],
        segments: Sequence[SegmentEntry],
        n_docs: int,
        total_length: int,
        settings: SearchSettings,
        marker: str | None = None,
        tail: Sequence[TailDoc] = (),
    ) -> None:
        self.terms = [_Term(t) for t in dict.fromkeys(terms) if t != marker]
        self._marker = _Term(marker) if marker else None
        self.tail = tail
        #: Ids known to be summaries (``marker``'s postings among the candidates, and the
        #: tail's).
        self.summaries: set[int] = {d.id for d in tail if d.summary}
        # Newest first: the budgets keep the newest postings.
        self.segments = sorted(segments, key=lambda s: s.last, reverse=True)
        n_docs += len(tail)
        total_length += sum(d.length for d in tail)
        self.n_docs = n_docs
        self.settings = settings
        avg = total_length / n_docs if n_docs > 0 else 1.0
        self._fixed = settings.k1 * (1 - settings.b)
        self._per_length = settings.k1 * settings.b / max(avg, 1e-9)
        self.scores: dict[int, float] = {}
        self._lengths: dict[int, int] = {}
        self._blocks: dict[str, bytes | None] = {}
        self._stage = 0
        self._later: list[_Term] = []
        self._ranked: list[int] = []
        self._full: list[tuple[_Term, int]] = []
        self._extra: tuple[_Term, int] | None = None
        self._left = 0
        self._keep = 0

    # -- 1. buckets ------------------------------------------------------------------------

    def bucket_fields(self) -> list[str]:
        """The bucket of every query term in every segment."""
        out: dict[str, None] = {}
        for s in self.segments:
            for t in self._all_terms():
                out[bucket_field(s.gen, bucket_of(t.term, s.buckets))] = None
        return list(out)

    def _all_terms(self) -> list[_Term]:
        return [*self.terms, self._marker] if self._marker is not None else self.terms

    def take_buckets(self, values: Mapping[str, bytes | None]) -> None:
        """The buckets' values by field name (``None``: an empty bucket)."""
        decoded: dict[str, Bucket] = {}
        for s in self.segments:
            for t in self._all_terms():
                name = bucket_field(s.gen, bucket_of(t.term, s.buckets))
                raw = values.get(name)
                if raw is None:
                    continue
                bucket = decoded.get(name)
                if bucket is None:
                    bucket = decoded[name] = Bucket(raw, s.first)
                entry = bucket.get(t.term)
                if entry is not None:
                    t.found.append((s, entry))
                    t.df += s.sign * entry.df
                    if s.sign > 0:
                        t.stored += entry.df
        for t in self.terms:
            t.df += sum(1 for d in self.tail if t.term in d.tf)
        n = self.n_docs
        k1 = self.settings.k1
        self.terms = [t for t in self.terms if t.df > 0]
        for t in self.terms:
            t.weight = math.log1p((n - t.df + 0.5) / (t.df + 0.5)) * (k1 + 1)
        self.terms.sort(key=lambda t: t.df)
        self._stage = 1

    # -- 2. and 3. postings ----------------------------------------------------------------

    def wanted(self) -> list[str]:
        """Fields to read next ([] when the plan can rank)."""
        if self._stage == 1:
            self._stage = 2
            self._full = self._plan_full()
            names = [f for t in self._full for f in self._full_fields(t)]
            if names:
                return names
        if self._stage == 2:
            self._gather()
            self._stage = 3
            names = self._rescore_fields()
            if names:
                return names
        if self._stage == 3:
            self._rescore()
            self._stage = 4
        return []

    def take(self, values: Mapping[str, bytes | None]) -> None:
        """The values of fields :meth:`wanted` named."""
        self._blocks.update(values)

    def _plan_full(self) -> list[tuple[_Term, int]]:
        """The terms read whole (newest first, at most how many postings each); and the
        first of the others, whose newest postings bring more candidates when the rare terms
        match too few (its blocks are read with the rest, in case)."""
        left = QUERY_BUDGET
        full: list[tuple[_Term, int]] = []
        for n, t in enumerate(self.terms):
            if n == 0 or t.stored <= left:
                most = min(t.stored, QUERY_POSTINGS if n == 0 else left)
                full.append((t, most))
                left -= most
            else:
                self._later.append(t)
        self._left = max(left, 0)
        if self._later and self._left > 0:
            self._extra = (self._later[0], min(self._left, 4 * self.settings.limit))
            return [*full, self._extra]
        return full

    def _postings_newest(self, t: _Term, most: int, *, sign: int) -> Iterable[tuple[int, int, int]]:
        """(id, tf, length) of ``t`` in segments of ``sign``, newest first, at most ``most``;
        blocks must have been read (:meth:`_full_fields`)."""
        read = 0
        for s, entry in t.found:
            if s.sign != sign:
                continue
            if entry.postings is not None:
                runs = [entry.postings]
            else:
                runs = []
                for i in range(len(entry.block_last) - 1, -1, -1):
                    raw = self._blocks.get(block_field(s.gen, entry.first_block + i))
                    if raw is None:
                        break  # past the budget: not read
                    runs.insert(0, decode_block(raw, block_postings(entry, i), s.first))
            for p in reversed(runs):
                for i in range(len(p.ids) - 1, -1, -1):
                    if read >= most:
                        return
                    read += 1
                    yield p.ids[i], p.tfs[i], p.lengths[i]

    def _full_fields(self, item: tuple[_Term, int]) -> list[str]:
        """Blocks of the newest ``most`` postings of a term read whole, and every block of
        its negative segments' lists (removed documents: few)."""
        t, most = item
        names: list[str] = []
        left = most
        for s, entry in t.found:
            if entry.postings is not None:
                left -= entry.df if s.sign > 0 else 0
                continue
            for i in range(len(entry.block_last) - 1, -1, -1):
                if s.sign > 0 and left <= 0:
                    break
                names.append(block_field(s.gen, entry.first_block + i))
                if s.sign > 0:
                    left -= block_postings(entry, i)
        return names

    def _add(self, t: _Term, doc_id: int, tf: int, length: int, *, new_only: bool) -> bool:
        old = self.scores.get(doc_id)
        if doc_id < self.settings.since_id or doc_id in t.dead or (new_only and old is not None):
            return False
        norm = self._fixed + self._per_length * length
        self.scores[doc_id] = (old or 0.0) + t.weight * tf / (tf + norm)
        self._lengths[doc_id] = length
        return True

    def _read_dead(self, t: _Term) -> None:
        t.dead = {doc_id for doc_id, _, _ in self._postings_newest(t, 1 << 62, sign=-1)}

    def _gather(self) -> None:
        limit = self.settings.limit
        full = self._full[:-1] if self._extra is not None else self._full
        for t, most in full:
            self._read_dead(t)
            for doc_id, tf, length in self._postings_newest(t, most, sign=1):
                self._add(t, doc_id, tf, length, new_only=False)
        if self._extra is not None and len(self.scores) < 4 * limit:
            t, _ = self._extra
            self._read_dead(t)
            most = min(4 * limit - len(self.scores), self._left)
            for doc_id, tf, length in self._postings_newest(t, most, sign=1):
                if self._add(t, doc_id, tf, length, new_only=True):
                    t.counted.add(doc_id)
        # The tail: every query term on every document of it (no segment holds them, so the
        # rescoring of common terms below never counts them twice).
        for t in self.terms:
            for d in self.tail:
                count = d.tf.get(t.term, 0)
                if count:
                    self._add(t, d.id, count, d.length, new_only=False)
        self._keep = max(4 * limit, RESCORE_POOL if self._later else 0)

    # -- 3. common terms on the candidates -------------------------------------------------

    def _candidates(self) -> list[int]:
        return [doc_id for doc_id, _ in top_k(self.scores, self._keep)]

    def _rescore_fields(self) -> list[str]:
        names = self._marker_fields()
        if not self._later:
            return names
        self._ranked = self._candidates()
        if not self._ranked:
            return names
        wanted = sorted(self._ranked)
        blocks = RESCORE_BLOCKS
        for t in self._later[:RESCORE_TERMS]:
            for s, entry in t.found:
                if entry.postings is not None:
                    continue
                if s.sign < 0:
                    continue  # candidates hold a rare term, whose removals were read
                low = s.first
                for i, high in enumerate(entry.block_last):
                    if _any_within(wanted, low, high):
                        if blocks <= 0:
                            break
                        blocks -= 1
                        names.append(block_field(s.gen, entry.first_block + i))
                    low = high + 1
        return names

    def _near_candidates(self) -> list[int]:
        """The candidates and the ids a neighbour may be looked for at, sorted."""
        out: set[int] = set()
        for doc_id in self.scores:
            out.update(range(doc_id - MAX_SKIP, doc_id + MAX_SKIP + 1))
        return sorted(out)

    def _marker_fields(self) -> list[str]:
        """Blocks of the summaries' postings that hold a candidate or a neighbour of one
        (``RESCORE_BLOCKS`` at most)."""
        if self._marker is None or not self.scores:
            return []
        wanted = self._near_candidates()
        names: list[str] = []
        for s, entry in self._marker.found:
            if entry.postings is not None or s.sign < 0:
                continue
            low = s.first
            for i, high in enumerate(entry.block_last):
                if len(names) >= RESCORE_BLOCKS:
                    return names
                if _any_within(wanted, low, high):
                    names.append(block_field(s.gen, entry.first_block + i))
                low = high + 1
        return names

    def _read_marker(self) -> None:
        if self._marker is None or not self.scores:
            return
        wanted = set(self._near_candidates())
        for s, entry in self._marker.found:
            if s.sign > 0:
                self.summaries.update(d for d, _, _ in self._lookup(s, entry, wanted))

    def _rescore(self) -> None:
        self._read_marker()
        if not self._ranked:
            return
        wanted = set(self._ranked)
        for t in self._later[:RESCORE_TERMS]:
            for s, entry in t.found:
                if s.sign < 0:
                    continue
                for doc_id, tf, length in self._lookup(s, entry, wanted):
                    if doc_id not in t.dead and doc_id not in t.counted:
                        self._add(t, doc_id, tf, length, new_only=False)

    def _lookup(
        self, s: SegmentEntry, entry: TermEntry, wanted: set[int] | None
    ) -> Iterable[tuple[int, int, int]]:
        """(id, tf, length) of ``entry``'s postings read so far: all of them, or those of
        ``wanted`` documents (found by bisection: a block is sorted by id)."""
        runs = []
        if entry.postings is not None:
            runs.append(entry.postings)
        else:
            for i in range(len(entry.block_last)):
                raw = self._blocks.get(block_field(s.gen, entry.first_block + i))
                if raw is not None:
                    runs.append(decode_block(raw, block_postings(entry, i), s.first))
        ordered = sorted(wanted) if wanted is not None else None
        for p in runs:
            if ordered is None:
                yield from zip(p.ids, p.tfs, p.lengths, strict=True)
                continue
            at = bisect_left(ordered, p.ids[0])
            while at < len(ordered) and ordered[at] <= p.ids[-1]:
                doc_id = ordered[at]
                k = bisect_left(p.ids, doc_id)
                if k < len(p.ids) and p.ids[k] == doc_id:
                    yield doc_id, p.tfs[k], p.lengths[k]
                at += 1

    # -- 4. ranking ------------------------------------------------------------------------

    def ranking(self) -> list[tuple[int, float]]:
        """The best documents, best first: ``pool`` of them (at least ``limit``); with
        summaries known (:attr:`summaries`), the best ``pool`` others then the best ``limit``
        summaries."""
        while self.wanted():
            pass  # nothing left to read: a plan without blocks ranks at once
        scores = self.scores
        if self._later and self._ranked:
            scores = {doc_id: scores[doc_id] for doc_id in self._ranked}
        weight = self.settings.neighbour_weight
        skip = self.summaries
        if weight > 0:
            # Every scored document lifts its neighbours (a bounded set: the budgets bound
            # it): a reply whose own score ranks it 50th can still come in with the turn that
            # asked, which only the best 40 lifting would leave out.
            # (A neighbour older than since_id is filtered out as any document is.)
            least = max(1, self.settings.since_id)
            scores = neighbour_boost(scores, weight, lambda doc_id: doc_id >= least, skip)
        most = max(self.settings.pool, self.settings.limit)
        if not skip:
            return top_k(scores, most)
        # Two lanes: the best ``most`` turns, then the best ``limit`` summaries known.
        turns = {doc_id: s for doc_id, s in scores.items() if doc_id not in skip}
        summaries = {doc_id: s for doc_id, s in scores.items() if doc_id in skip}
        return top_k(turns, most) + top_k(summaries, self.settings.limit)


def _any_within(sorted_ids: Sequence[int], low: int, high: int) -> bool:
    """Whether a sorted list holds an id in [low, high]."""
    lo, hi = 0, len(sorted_ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if sorted_ids[mid] < low:
            lo = mid + 1
        else:
            hi = mid
    return lo < len(sorted_ids) and sorted_ids[lo] <= high
