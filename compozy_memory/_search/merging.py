"""Merging segments, and which to merge next: tiers of similar sizes, and the removals to
purge.

Each indexing step adds a small segment; a search reads every segment's bucket for each of
its terms, so segments are merged in tiers as Lucene's tiered policy does: a segment's tier
is the power of :data:`TIER` its document count reaches past :data:`BASE`, and :data:`TIER`
segments of one tier become one of the next. Each document is rewritten about
``log(N / BASE) / log(TIER)`` times in its life once past the smallest tier, by clients,
never by the server; inside the smallest tier a merged segment stays there and is merged
again with the next small ones, so a conversation's steps of a message or two are rewritten
a few more times there (``benchmarks/bench_index_cpu.py`` prints how many). A smaller BASE
rewrites less and leaves more segments for a search to read.

Negative segments (documents removed since they were indexed) cancel out against the positive
segments that hold those documents: once they reach :data:`PURGE_SHARE` of the documents of
the positive segments they overlap, those are merged together, and both leave.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from itertools import pairwise
from typing import Any

from compozy_memory._model.limits import (
    INDEX_READ_BYTES,
    INDEX_READ_FIELDS,
    MAX_SEGMENTS,
    STEP_FIELDS,
)
from compozy_memory._search.documents import KINDS, document_terms, kind_of
from compozy_memory._search.segment_reads import Bucket, block_postings, decode_block
from compozy_memory._search.segments import (
    Encoded,
    Postings,
    Segment,
    SegmentEntry,
    block_field,
    bucket_field,
    encode,
    encode_step,
)
from compozy_memory.errors import CorruptDataError

__all__ = [
    "BASE",
    "PURGE_SHARE",
    "TIER",
    "decode_segment",
    "merge",
    "merged_segment",
    "plan_merge",
    "read_chunks",
    "step_segments",
    "tier",
    "write_chunks",
]

#: Segments of one tier merged into one of the next.
TIER = 8
#: Documents of the smallest tier's largest segment, divided by TIER. At a message a step, 8
#: (rather than 16) rewrites a message 8.0 times in a memory of 100,000 rather than 12.7, and
#: 5.8 rather than 10.5 in one of 2,000, for 7-12% more segments on average.
BASE = 8
#: Removed documents, as a share of the documents of the segments they overlap, that make a
#: purge merge worth its bytes.
PURGE_SHARE = 0.25
#: Listed segments past which the smallest are merged whatever their tiers.
CROWDED = MAX_SEGMENTS // 2


def tier(entry: SegmentEntry) -> int:
    """The tier of a segment: 0 below BASE x TIER documents, then one per power of TIER."""
    if entry.docs < BASE * TIER:
        return 0
    return int(math.log(entry.docs / BASE, TIER))


def _overlap(a: SegmentEntry, b: SegmentEntry) -> bool:
    return a.first <= b.last and b.first <= a.last


def plan_merge(
    segments: Sequence[SegmentEntry], claimed: Collection[int] = (), *, everything: bool = False
) -> list[SegmentEntry]:
    """The segments to merge next ([] for none); ``claimed``: generations another merge
    has. ``everything``: all of them that are free (a full compaction)."""
    free = [s for s in segments if s.gen not in claimed]
    if everything:
        return free if len(free) > 1 else []
    positives = sorted((s for s in free if s.sign > 0), key=lambda s: s.first)
    negatives = sorted((s for s in free if s.sign < 0), key=lambda s: s.first)
    purge = _purge(positives, negatives, segments, claimed)
    if purge:
        return purge
    for group in (positives, negatives):
        by_tier: dict[int, list[SegmentEntry]] = {}
        for s in group:
            by_tier.setdefault(tier(s), []).append(s)
        for level in sorted(by_tier):
            members = by_tier[level]
            if len(members) >= TIER:
                return members[:TIER]
    if len(segments) >= CROWDED:
        for group in (positives, negatives):
            if len(group) >= 2:
                return sorted(group, key=lambda s: s.docs)[:TIER]
    return []


def _purge(
    positives: Sequence[SegmentEntry],
    negatives: Sequence[SegmentEntry],
    segments: Sequence[SegmentEntry],
    claimed: Collection[int],
) -> list[SegmentEntry]:
    if not negatives:
        return []
    removed = sum(n.docs for n in negatives)
    overlapping = [p for p in positives if any(_overlap(p, n) for n in negatives)]
    # Every positive segment that may hold a removed document must take part (else the
    # removal would outlive the merge): none of them may be another merge's.
    if any(
        s.sign > 0 and s.gen in claimed and any(_overlap(s, n) for n in negatives) for s in segments
    ):
        return []
    held = sum(p.docs for p in overlapping)
    if not overlapping or removed < PURGE_SHARE * held:
        return []
    return [*overlapping, *negatives]


def decode_segment(entry: SegmentEntry, values: Mapping[str, bytes | None]) -> Segment:
    """A whole segment from its fields (``values`` by field name; missing buckets are
    empty), for a merge. Terms of the same postings share them: none is changed in place."""
    terms: dict[str, Postings] = {}
    seen: dict[tuple[int, bytes], Postings] = {}
    blocks: dict[tuple[int, bytes], Postings] = {}  # read only: the terms' lists copy them
    lists: list[list[int]] = []
    for k in range(entry.buckets):
        raw = values.get(bucket_field(entry.gen, k))
        if raw is None:
            continue
        for term, t in Bucket(raw, entry.first).lists(seen):
            if isinstance(t, Postings):  # its df: the bucket's entry, checked on reading
                p = t
            else:
                p = Postings()
                for i in range(len(t.block_last)):
                    block = values.get(block_field(entry.gen, t.first_block + i))
                    if block is None:
                        raise CorruptDataError(
                            f"block {t.first_block + i} of index segment {entry.gen} is missing"
                        )
                    n = block_postings(t, i)
                    part = blocks.get((n, block))
                    if part is None:  # (terms of the same messages: blocks of the same bytes)
                        part = blocks[n, block] = decode_block(block, n, entry.first)
                    p.ids += part.ids
                    p.tfs += part.tfs
                    p.lengths += part.lengths
                if len(p.ids) != t.df:
                    raise CorruptDataError(f"term {term!r} of index segment {entry.gen} is short")
            terms[term] = p
            lists.append(p.ids)
    # One union of every list (C-level), not an update per term.
    return Segment(entry.sign, terms, sorted(set().union(*lists)))


def merge(
    parts: Sequence[Segment], *, reuse: bool = False
) -> tuple[Segment | None, Segment | None]:
    """Merge segments into at most one positive and one negative segment: postings add up
    with their signs, so a document indexed by one part and removed by another leaves both.
    Returns (positive, negative), either ``None`` when empty. ``reuse``: the parts are not
    used again, so their postings may become the result's (no copy of each term's lists)."""
    net: dict[int, int] = {}
    seen: set[tuple[int, int]] = set()
    for part in parts:
        for doc_id in part.docs:
            if (doc_id, part.sign) in seen:
                raise CorruptDataError(
                    f"document {doc_id} is {'indexed' if part.sign > 0 else 'removed'} twice"
                )
            seen.add((doc_id, part.sign))
            net[doc_id] = net.get(doc_id, 0) + part.sign
    ordered = sorted(parts, key=lambda s: s.docs[0] if s.docs else 0)
    disjoint = all(not a.docs or not b.docs or a.docs[-1] < b.docs[0] for a, b in pairwise(ordered))
    signs = {part.sign for part in parts}
    if disjoint and len(signs) == 1:
        # A tier's merge: parts of one sign over disjoint id ranges, so nothing cancels and
        # each term's postings are its parts' lists end to end (no work per posting).
        return _concatenated(ordered, signs.pop(), sorted(net), reuse=reuse)
    out: dict[int, dict[str, Postings]] = {1: {}, -1: {}}
    for part in ordered:
        for term, p in part.terms.items():
            for i, doc_id in enumerate(p.ids):
                s = net[doc_id]
                if s == 0:
                    continue
                q = out[s].get(term)
                if q is None:
                    q = out[s][term] = Postings()
                q.ids.append(doc_id)
                q.tfs.append(p.tfs[i])
                q.lengths.append(p.lengths[i])
    if not disjoint:
        for terms in out.values():
            for p in terms.values():
                if any(b <= a for a, b in pairwise(p.ids)):
                    order = sorted(range(len(p.ids)), key=p.ids.__getitem__)
                    p.ids = [p.ids[i] for i in order]
                    p.tfs = [p.tfs[i] for i in order]
                    p.lengths = [p.lengths[i] for i in order]
    result: list[Segment | None] = []
    for s in (1, -1):
        docs = sorted(d for d, v in net.items() if v == s)
        result.append(Segment(s, out[s], docs) if docs else None)
    return result[0], result[1]


def _concatenated(
    ordered: Sequence[Segment], sign: int, docs: list[int], *, reuse: bool
) -> tuple[Segment | None, Segment | None]:
    terms: dict[str, Postings] = {}
    # Terms whose lists were made here: a part's may be another term's too (a decoded
    # segment shares the postings its terms have in common), so they are never extended.
    joined: set[str] = set()
    get = terms.get
    for part in ordered:
        for term, p in part.terms.items():
            q = get(term)
            if q is None:
                terms[term] = p if reuse else Postings(p.ids[:], p.tfs[:], p.lengths[:])
            elif not reuse or term in joined:
                q.ids += p.ids
                q.tfs += p.tfs
                q.lengths += p.lengths
            else:
                terms[term] = Postings(q.ids + p.ids, q.tfs + p.tfs, q.lengths + p.lengths)
                joined.add(term)
    if not docs:
        return None, None
    merged = Segment(sign, terms, docs)
    return (merged, None) if sign > 0 else (None, merged)


# -- what clients write: a step's segments, a merge's output, in bounded calls ----------

Doc = tuple[int, "Counter[str]", int]


def analysed(message: dict[str, Any], *, summary: bool) -> tuple[int, int, Counter[str], int]:
    """(id, kind, term frequencies, length) of one stored envelope (parsed JSON), as a step
    indexes it; CorruptDataError for fields no append writes."""
    kind = KINDS["summary"] if summary else kind_of(message)
    try:
        tf, length = document_terms(message, kind=kind)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise CorruptDataError(
            f"a stored message cannot be analysed ({type(exc).__name__}): it was not written "
            "by compozy-memory"
        ) from None
    return int(message["id"]), kind, tf, length


def step_segments(
    items: list[tuple[str, int, dict[str, Any]]], gones: list[dict[str, Any]]
) -> tuple[list[tuple[int, int, int, int]], Encoded | None, Encoded | None]:
    """The documents' records, their segment and the removed documents' negative segment."""
    documents: list[tuple[int, int, int, int]] = []
    docs: list[Doc] = []
    for where, seq, message in items:
        doc_id, kind, tf, length = analysed(message, summary=where == "s")
        documents.append((doc_id, kind, length, seq))
        if tf:
            docs.append((doc_id, tf, length))
    removed: list[Doc] = []
    for message in gones:
        doc_id, _, tf, length = analysed(message, summary=False)
        if tf:
            removed.append((doc_id, tf, length))
    positive = _encoded(docs, 1)
    negative = _encoded(removed, -1)
    return documents, positive, negative


def _encoded(docs: list[Doc], sign: int) -> Encoded | None:
    if not docs:
        return None
    return encode_step(docs, sign=sign)


def read_chunks(inputs: Sequence[SegmentEntry], most: int) -> list[list[str]]:
    """The inputs' fields in reads of about ``most`` bytes each, under the read caps (by
    their segments' mean field size, with room: a field may be larger than its segment's
    mean)."""
    chunks: list[list[str]] = [[]]
    budget = min(most, INDEX_READ_BYTES // 2)
    used = 0
    for entry in inputs:
        names = entry.fields()
        mean = entry.size // max(1, entry.buckets + entry.blocks) + 1
        for name in names:
            if chunks[-1] and (len(chunks[-1]) >= INDEX_READ_FIELDS or used + mean > budget):
                chunks.append([])
                used = 0
            chunks[-1].append(name)
            used += mean
    return [c for c in chunks if c]


def write_chunks(fields: Mapping[str, bytes], limit: int) -> list[dict[str, bytes]]:
    """``fields`` in calls of about ``limit`` bytes each, under the write caps (one call,
    maybe empty, at least)."""
    chunks: list[dict[str, bytes]] = [{}]
    used = 0
    for name, value in fields.items():
        if chunks[-1] and (len(chunks[-1]) >= STEP_FIELDS or used + len(value) > limit):
            chunks.append({})
            used = 0
        chunks[-1][name] = value
        used += len(value) + len(name)
    return chunks


def merged_segment(
    inputs: Sequence[SegmentEntry], values: Mapping[str, bytes | None]
) -> Encoded | None:
    """The merge of ``inputs`` (their fields in ``values``), encoded; None when they cancel
    out whole."""
    # The parts are let go once merged: what the result did not take is freed before the
    # encode (fewer objects alive for the collector to walk).
    positive, negative = merge([decode_segment(e, values) for e in inputs], reuse=True)
    if positive is not None and negative is not None:
        raise CorruptDataError(
            "a merge left removals of documents no merged segment holds: the index does not "
            "match its removals (reset it to build it again)"
        )
    out = positive or negative
    if out is None:
        return None
    try:
        return encode(out)
    except ValueError as exc:  # what a segment never holds: an empty term, a tf past 65,535
        raise CorruptDataError(f"a merged index segment holds {exc}") from None
