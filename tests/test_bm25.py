"""The reference BM25 index: ranking, removal, the postings cap, the neighbour boost."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.bm25_reference import Index, bm25_scores, idf
from compozy_memory._search.analysis import analyze_query
from compozy_memory._search.documents import message_terms
from compozy_memory._search.ranking import neighbour_boost, top_k

CHAT = [
    ("Melanie", "Hey Caroline! How was your week?"),
    ("Caroline", "Busy! Work has been hectic, lots of meetings."),
    ("Melanie", "We took the dog to the park this morning, he loved it."),
    ("Caroline", "Big news: we adopted a puppy last weekend! We named him Biscuit."),
    ("Melanie", "Aww, congrats!! Talk soon!"),
    ("Caroline", "So where did you go for the anniversary dinner?"),
    ("Melanie", "Cedar House, the chef even sent out dessert."),
    ("Caroline", "My sister keeps sending me puppy videos haha"),
]


def _index(postings_cap: int | None = None) -> Index:
    index = Index(postings_cap)
    for doc_id, (name, text) in enumerate(CHAT):
        terms, length = message_terms({"role": "user", "name": name, "content": text})
        index.add(doc_id, terms, length)
    return index


def _ids(results: list[tuple[int, float]]) -> list[int]:
    return [doc_id for doc_id, _ in results]


def test_planted_answer_ranks_first() -> None:
    query = analyze_query("What is the name of the puppy Caroline adopted?")
    assert _ids(_index().search(query, 3, neighbours=0))[0] == 3
    assert _ids(_index().search(query, 3))[0] == 3


def test_neighbour_boost_finds_the_reply() -> None:
    # The answer (doc 6) shares only the speaker's name with the question; the turn before
    # it holds the question's words. Alone it ranks behind Melanie's small talk.
    query = analyze_query("Which restaurant did Melanie pick for the anniversary dinner?")
    index = _index()
    assert 6 not in _ids(index.search(query, 3, neighbours=0))
    assert 6 in _ids(index.search(query, 3, neighbours=0.5))


def test_remove_really_removes() -> None:
    index = _index()
    query = analyze_query("puppy Biscuit")
    before = index.avg_len
    assert index.remove(3) is True
    assert index.remove(3) is False
    assert 3 not in index
    assert len(index) == len(CHAT) - 1
    assert 3 not in _ids(index.search(query, 10))
    assert index.postings("biscuit") == {}
    assert index.doc_freq("biscuit") == 0
    assert index.doc_freq("puppi") == 1
    assert index.avg_len != before
    # Its neighbour is no longer boosted into the results through it either.
    assert all(doc_id in index for doc_id in _ids(index.search(query, 10)))


def test_postings_cap_keeps_the_newest() -> None:
    index = Index(postings_cap=3)
    for doc_id in range(10):
        index.add(doc_id, Counter({"dog": 1, f"only{doc_id}": 1}), 2)
    assert list(index.postings("dog")) == [7, 8, 9]
    assert index.doc_freq("dog") == 10  # IDF stays true
    # An older document added late does not push out newer ones.
    index.add(-1, Counter({"dog": 2}), 2)
    assert list(index.postings("dog")) == [7, 8, 9]
    # An evicted posting is gone for good, even when a newer one is removed.
    index.remove(8)
    assert list(index.postings("dog")) == [7, 9]
    assert index.doc_freq("dog") == 10


def test_postings_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="postings_cap"):
        Index(postings_cap=0)


def test_adding_an_existing_id_replaces_it() -> None:
    index = Index()
    index.add(1, Counter({"cat": 1}), 1)
    index.add(1, Counter({"dog": 2}), 2)
    assert index.postings("cat") == {}
    assert index.postings("dog") == {1: 2}
    assert index.n_docs == 1
    assert index.avg_len == 2


def test_bm25_scores_matches_the_formula() -> None:
    postings = {"dog": {1: 2, 2: 1}, "park": {2: 1}}
    lengths = {1: 4, 2: 8, 3: 6}
    n, avg, k1, b = 3, 6.0, 1.2, 0.75
    scores = bm25_scores(["dog", "park", "dog", "absent"], postings, lengths, n, avg, k1, b)

    def part(tf: int, df: int, length: int) -> float:
        weight = math.log(1 + (n - df + 0.5) / (df + 0.5))
        return weight * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avg))

    assert scores[1] == pytest.approx(part(2, 2, 4))
    assert scores[2] == pytest.approx(part(1, 2, 8) + part(1, 1, 8))
    assert 3 not in scores
    # True document frequencies given separately, as for capped postings.
    capped = bm25_scores(["park"], postings, lengths, n, avg, k1, b, doc_freqs={"park": 3})
    assert capped[2] == pytest.approx(part(1, 3, 8))


def test_idf_is_never_negative() -> None:
    assert idf(100, 100) > 0
    assert idf(1, 100) > idf(50, 100)


def test_neighbour_boost_and_ties() -> None:
    boosted = neighbour_boost({5: 2.0}, 0.5, {4, 5, 6})
    assert boosted == {4: 1.0, 5: 2.0, 6: 1.0}
    assert neighbour_boost({5: 2.0}, 0.5, {5}) == {5: 2.0}
    assert neighbour_boost({5: 2.0}, 0.0, {4, 5, 6}) == {5: 2.0}
    # Equal scores: the newer document first (the latest value of a changed fact).
    assert _ids(top_k({4: 1.0, 6: 1.0, 5: 2.0}, 3)) == [5, 6, 4]


_term = st.sampled_from(["dog", "cat", "park", "order", "1042", "may", "biscuit"])
_doc = st.tuples(st.dictionaries(_term, st.integers(1, 3), min_size=1), st.integers(1, 40))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 30), _doc), max_size=40),
    st.lists(st.integers(0, 30), max_size=40),
    st.randoms(use_true_random=False),
)
def test_incremental_index_equals_index_from_scratch(
    adds: list[tuple[int, tuple[dict[str, int], int]]], removes: list[int], rnd: object
) -> None:
    index = Index()
    live: dict[int, tuple[dict[str, int], int]] = {}
    ops = [("add", a) for a in adds] + [("remove", (r, ({}, 0))) for r in removes]
    rnd.shuffle(ops)  # type: ignore[attr-defined]
    for op, (doc_id, (terms, length)) in ops:
        if op == "add":
            index.add(doc_id, Counter(terms), length)
            live[doc_id] = (terms, length)
        else:
            assert index.remove(doc_id) == (doc_id in live)
            live.pop(doc_id, None)
    scratch = Index.build((d, Counter(t), n) for d, (t, n) in live.items())
    assert index.snapshot() == scratch.snapshot()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_doc, max_size=50),
    st.lists(st.booleans(), max_size=50),
    st.integers(1, 5),
)
def test_capped_index_follows_the_archive_lifecycle(
    docs: list[tuple[dict[str, int], int]], trims: list[bool], cap: int
) -> None:
    # The archive appends with growing ids and trims from the oldest end: under that
    # lifecycle the capped index equals a capped index built from scratch.
    index = Index(postings_cap=cap)
    live: dict[int, tuple[dict[str, int], int]] = {}
    for doc_id, ((terms, length), trim) in enumerate(zip(docs, trims + [False] * 50, strict=False)):
        index.add(doc_id, Counter(terms), length)
        live[doc_id] = (terms, length)
        if trim:
            oldest = min(live)
            index.remove(oldest)
            del live[oldest]
    scratch = Index.build(((d, Counter(t), n) for d, (t, n) in live.items()), postings_cap=cap)
    assert index.snapshot() == scratch.snapshot()


@settings(max_examples=200, deadline=None)
@given(st.lists(_doc, max_size=50), st.lists(st.integers(0, 49), max_size=30), st.integers(1, 5))
def test_capped_postings_are_the_newest_part(
    docs: list[tuple[dict[str, int], int]], removes: list[int], cap: int
) -> None:
    # With removals anywhere, a capped posting list may hold fewer than cap entries, but it
    # is always the newest part of the live documents holding the term.
    index = Index(postings_cap=cap)
    live: dict[int, dict[str, int]] = {}
    for doc_id, (terms, length) in enumerate(docs):
        index.add(doc_id, Counter(terms), length)
        live[doc_id] = terms
    for doc_id in removes:
        index.remove(doc_id)
        live.pop(doc_id, None)
    for term in {t for terms in live.values() for t in terms}:
        holding = sorted(d for d, terms in live.items() if term in terms)
        kept = list(index.postings(term))
        assert len(kept) <= cap
        assert index.doc_freq(term) == len(holding)
        assert kept == holding[len(holding) - len(kept) :]
