"""The index's segments (compozy_memory._search.segments) and the search over them
(compozy_memory._search.scoring), without a server: fields in a dict stand for ``ix:s``."""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.bm25_reference import Index
from compozy_memory._search.merging import decode_segment, merge
from compozy_memory._search.scoring import SearchPlan, SearchSettings
from compozy_memory._search.segment_reads import Bucket
from compozy_memory._search.segments import (
    BLOCK,
    COLUMNS_UPTO,
    INLINE,
    Segment,
    SegmentEntry,
    build,
    encode,
    encode_one,
    encode_step,
)
from compozy_memory.errors import CorruptDataError

Doc = tuple[int, Counter[str], int]

WORDS = [f"w{i}" for i in range(60)] + ["caroline", "melanie", "puppy", "biscuit", "dinner"]


def docs(rng: random.Random, ids: range, *, zipf: bool = True) -> list[Doc]:
    out = []
    for doc_id in ids:
        n = rng.randint(1, 30)
        words = [WORDS[min(int(rng.paretovariate(1.2)) - 1, len(WORDS) - 1)] for _ in range(n)]
        if not zipf:
            words = [rng.choice(WORDS) for _ in range(n)]
        if rng.random() < 0.3:
            words.append(f"n{doc_id}")  # a number: one document only
        tf = Counter(words)
        out.append((doc_id, tf, n + (1 if rng.random() < 0.3 else 0)))
    return out


class Store:
    """``ix:s`` as a dict: segments stored under the generations a script would give them."""

    def __init__(self) -> None:
        self.fields: dict[str, bytes] = {}
        self.entries: list[SegmentEntry] = []
        self.gen = 0

    def add(self, segment: Segment) -> SegmentEntry:
        enc = encode(segment)
        self.gen += 1
        for name, value in enc.fields.items():
            sep = "." if name[0] == "b" else ":"
            self.fields[f"{self.gen}{sep}{name[1:]}"] = value
        entry = SegmentEntry(
            self.gen, enc.sign, enc.docs, enc.first, enc.last, enc.buckets, enc.blocks, enc.size
        )
        self.entries.append(entry)
        return entry

    def read(self, entry: SegmentEntry) -> Segment:
        return decode_segment(entry, {f: self.fields.get(f) for f in entry.fields()})

    def drop(self, entry: SegmentEntry) -> None:
        self.entries.remove(entry)
        for f in entry.fields():
            self.fields.pop(f, None)

    def search(
        self, terms: list[str], n_docs: int, total: int, settings: SearchSettings
    ) -> list[tuple[int, float]]:
        plan = SearchPlan(terms, self.entries, n_docs, total, settings)
        plan.take_buckets({f: self.fields.get(f) for f in plan.bucket_fields()})
        while names := plan.wanted():
            plan.take({f: self.fields.get(f) for f in names})
        return plan.ranking()


def same(a: Segment | None, b: Segment | None) -> None:
    assert (a is None) == (b is None)
    if a is None or b is None:
        return
    assert a.sign == b.sign
    assert a.terms.keys() == b.terms.keys()
    for term, p in a.terms.items():
        q = b.terms[term]
        assert (p.ids, p.tfs, p.lengths) == (q.ids, q.tfs, q.lengths), term


def test_a_segment_reads_back_as_built_with_inline_lists_and_blocks() -> None:
    rng = random.Random(1)
    built = build(docs(rng, range(1, 2_000)))
    assert max(len(p) for p in built.terms.values()) > 3 * BLOCK  # blocks are exercised
    assert min(len(p) for p in built.terms.values()) <= INLINE
    store = Store()
    entry = store.add(built)
    assert entry.blocks > 0
    same(store.read(entry), built)


def test_widths_cover_large_ids_gaps_tfs_and_lengths() -> None:
    huge = [(5, Counter({"a": 1, "b": 70_000 % 65_536}), 65_535), (2**40, Counter({"a": 3}), 1)]
    store = Store()
    built = build(huge)
    same(store.read(store.add(built)), built)
    with pytest.raises(ValueError, match="at most 65,535"):
        encode(build([(1, Counter({"a": 70_000}), 70_000)]))


def test_a_merge_cancels_removed_documents_and_keeps_the_others() -> None:
    rng = random.Random(2)
    all_docs = docs(rng, range(1, 700))
    parts = [build(all_docs[i : i + 100]) for i in range(0, 699, 100)]
    removed = [d for d in all_docs if d[0] % 7 == 0]
    negative = build(removed, sign=-1)
    pos, neg = merge([*parts, negative])
    same(pos, build([d for d in all_docs if d[0] % 7]))
    assert neg is None
    # A removal whose document is not among the parts stays a removal.
    pos, neg = merge([parts[0], build(removed, sign=-1)])
    same(neg, build([d for d in removed if d[0] >= 100], sign=-1))


def test_overlapping_parts_merge_in_id_order() -> None:
    rng = random.Random(3)
    all_docs = docs(rng, range(1, 300))
    odd = build([d for d in all_docs if d[0] % 2])
    even = build([d for d in all_docs if d[0] % 2 == 0])
    pos, _ = merge([even, odd])
    same(pos, build(all_docs))


def test_a_document_indexed_twice_is_refused() -> None:
    one = build([(1, Counter({"a": 1}), 1)])
    with pytest.raises(CorruptDataError, match="indexed twice"):
        merge([one, build([(1, Counter({"a": 1}), 1)])])


def test_the_stored_bytes_are_pinned() -> None:
    # Segments are stored data: indexes written by earlier releases are read and merged by
    # later ones, so an encoder made faster must write the same bytes. This digest was taken
    # from the first encoder (data format 3).
    h = hashlib.sha256()
    rng = random.Random(11)
    for ids, sign in ((range(1, 2_000), 1), (range(5, 12), 1), (range(10**9, 10**9 + 300, 3), -1)):
        e = encode(build(docs(rng, ids), sign=sign))
        h.update(repr((e.sign, e.docs, e.first, e.last, e.buckets, e.blocks)).encode())
        for name in sorted(e.fields):
            h.update(name.encode() + b"=" + e.fields[name] + b";")
    assert h.hexdigest() == "46722248585bfbc59f5de833df8cd6ca7c71e606f1dd880e62596599ac6499ce"


@pytest.mark.parametrize("sign", [1, -1])
def test_a_step_of_one_message_is_encoded_as_a_segment_of_it(sign: int) -> None:
    rng = random.Random(14)
    cases = [
        *docs(rng, range(1, 200)),
        (2**40, Counter({f"t{i}": i % 5 + 1 for i in range(300)}), 65_535),  # many buckets
        (3, Counter({"a": 65_535, "b": 200}), 16_384),  # wide tf and length
    ]
    for doc_id, tf, length in cases:
        one, built = (
            encode_one(doc_id, tf, length, sign=sign),
            encode(build([(doc_id, tf, length)], sign=sign)),
        )
        assert one == built
    with pytest.raises(ValueError, match="at most 65,535"):
        encode_one(1, Counter({"a": 70_000}), 3)


@pytest.mark.parametrize("sign", [1, -1])
def test_a_step_of_several_messages_is_encoded_as_a_segment_of_them(sign: int) -> None:
    # encode_step groups postings by column rather than building the segment: the same bytes,
    # for steps of every size (past COLUMNS_UPTO documents it builds the segment), shuffled
    # input, wide ids and gaps, Zipf and uniform terms.
    rng = random.Random(15 + sign)
    for n in (*range(1, COLUMNS_UPTO + 3), 60, INLINE + 1):
        start = rng.choice([1, 10**6, 2**40])
        gap = rng.choice([1, 3, 1_000])
        step = docs(rng, range(start, start + n * gap, gap), zipf=n % 2 == 0)
        rng.shuffle(step)
        assert encode_step(step, sign=sign) == encode(build(step, sign=sign)), n
    with pytest.raises(ValueError, match="given twice"):
        encode_step([(5, Counter({"a": 1}), 1), (7, Counter({"b": 1}), 1), (5, Counter(), 1)])
    with pytest.raises(ValueError, match="at least one document"):
        encode_step([])
    with pytest.raises(ValueError, match="at most 65,535"):
        encode_step([(1, Counter({"a": 70_000}), 3), (2, Counter({"a": 1}), 3)])


def test_a_bucket_read_whole_reads_each_term_as_a_lookup_does() -> None:
    rng = random.Random(12)
    for ids in (range(1, 40), range(1, 2_000), range(3, 600, 7)):
        enc = encode(build(docs(rng, ids)))
        for name, raw in enc.fields.items():
            if name.startswith("b"):
                bucket = Bucket(raw, enc.first)
                read = list(bucket.lists())
                assert [t for t, _ in read] == list(bucket.terms())
                for t, got in read:
                    entry = bucket.get(t)
                    assert entry is not None
                    assert got == (entry if entry.postings is None else entry.postings)


@pytest.mark.parametrize("sign", [1, -1])
@pytest.mark.parametrize("reuse", [False, True])
def test_a_tier_merge_of_disjoint_parts_is_one_build_of_them_all(sign: int, reuse: bool) -> None:
    rng = random.Random(13)
    all_docs = docs(rng, range(1, 900))
    bounds = [0, 1, 2, 40, 41, 300, 899]
    parts = [build(all_docs[lo:hi], sign=sign) for lo, hi in pairwise(bounds)]
    rng.shuffle(parts)  # in any order: a merge orders its parts by their first ids
    before = [build(all_docs[lo:hi], sign=sign) for lo, hi in pairwise(bounds)]
    pos, neg = merge(parts, reuse=reuse)
    same(pos if sign > 0 else neg, build(all_docs, sign=sign))
    assert (neg if sign > 0 else pos) is None
    if not reuse:  # the parts are left as they were
        for part in parts:
            same(part, next(b for b in before if b.docs == part.docs))


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:5],  # cut short
        lambda b: b"\x07" + b[1:],  # unknown version
        lambda b: b + b"\x00" * 3,  # fine: trailing bytes are ignored only if entries agree
        lambda b: bytes([b[0], b[1], 0xFF]) + b[3:],  # terms length past the end
    ],
)
def test_a_damaged_bucket_is_a_typed_error_not_a_crash(damage) -> None:  # type: ignore[no-untyped-def]
    built = build(docs(random.Random(4), range(1, 50)))
    enc = encode(built)
    raw = next(iter(v for k, v in enc.fields.items() if k.startswith("b")))
    try:
        bucket = Bucket(damage(raw), enc.first)
        for _ in bucket.lists():
            pass
    except CorruptDataError:
        pass


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    cuts=st.lists(st.integers(1, 400), min_size=1, max_size=6),
    removed_share=st.sampled_from([0.0, 0.1, 0.4]),
    merges=st.booleans(),
)
def test_search_scores_equal_the_reference_bm25(
    seed: int, cuts: list[int], removed_share: float, merges: bool
) -> None:
    rng = random.Random(seed)
    all_docs = docs(rng, range(1, 401))
    store, reference = Store(), Index()
    bounds = sorted({0, *cuts, 400})
    for lo, hi in pairwise(bounds):
        if hi > lo:
            store.add(build(all_docs[lo:hi]))
    for doc_id, tf, length in all_docs:
        reference.add(doc_id, tf, length)
    removed = [d for d in all_docs if rng.random() < removed_share]
    if removed:
        store.add(build(removed, sign=-1))
        for d in removed:
            reference.remove(d[0])
    if merges and len(store.entries) > 1:
        picked = store.entries[: rng.randint(2, len(store.entries))]
        pos, neg = merge([store.read(e) for e in picked])
        for e in picked:
            store.drop(e)
        for part in (pos, neg):
            if part is not None:
                store.add(part)
    n = reference.n_docs
    total = round(reference.avg_len * n)
    for query in (["puppy", "caroline"], ["w0"], ["w3", "w50", "biscuit"], ["n17", "w1"]):
        got = store.search(query, n, total, SearchSettings(limit=10, neighbour_weight=0))
        expected = reference.scores(query)
        assert bool(got) == bool(expected), query
        for doc_id, score in got:
            assert doc_id in reference
            assert score == pytest.approx(expected[doc_id], rel=1e-9), (query, doc_id)
        if len(expected) <= 40:  # the budgets read everything: the same top ten
            best = sorted(expected.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:10]
            assert [d for d, _ in got] == [d for d, _ in best]


@pytest.mark.parametrize("length", [1, 127, 128, 500, 16_383, 16_384, 65_535])
@pytest.mark.parametrize("tf", [1, 127, 128, 65_535])
def test_one_document_lists_read_back_whatever_their_widths(length: int, tf: int) -> None:
    built = build([(7, Counter({"only": tf}), length), (9, Counter({"other": 1}), 3)])
    store = Store()
    same(store.read(store.add(built)), built)
