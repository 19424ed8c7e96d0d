"""BM25 over an archive, as a plain in-memory reference (a test and benchmark oracle, not
shipped in the wheel).

``Index`` is the reference the Redis-side index (Lua scripts over hashes) is tested
against: after any sequence of ``add`` and ``remove`` both must hold the same postings,
document frequencies and lengths. ``bm25_scores`` is the formula over plain mappings; the
ranking (:mod:`compozy_memory._search.ranking`) is the package's own.

Postings cap: each term keeps at most ``postings_cap`` postings, those of the newest (largest)
doc ids, so a query's cost is bounded whatever the archive's size. A posting pushed out by the
cap is gone: removing a newer document later does not bring it back (Redis cannot either
without keeping the full list). Document frequencies are not capped: they count every live
document holding the term, so IDF stays true.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from compozy_memory._search.ranking import neighbour_boost, top_k

__all__ = [
    "DEFAULT_B",
    "DEFAULT_K1",
    "DEFAULT_NEIGHBOUR_WEIGHT",
    "Index",
    "IndexSnapshot",
    "bm25_scores",
    "idf",
    # The ranking the package applies, so a benchmark ranks with the reference in one import.
    "neighbour_boost",
    "top_k",
]

DEFAULT_K1 = 1.2
DEFAULT_B = 0.75
# Tuned on benchmarks/recall_data.py with benchmarks/recall_eval_offline.py.
DEFAULT_NEIGHBOUR_WEIGHT = 0.5


def idf(doc_freq: int, n_docs: int) -> float:
    """Inverse document frequency, in the form that never goes negative.

    ``ln(1 + (N - df + 0.5) / (df + 0.5))``: a term in every document still counts a little,
    so a speaker's name or a month helps without ever hurting.
    """
    return math.log1p((n_docs - doc_freq + 0.5) / (doc_freq + 0.5))


def bm25_scores(
    query_terms: Iterable[str],
    postings: Mapping[str, Mapping[int, int]],
    doc_lengths: Mapping[int, int],
    n_docs: int,
    avg_len: float,
    k1: float = DEFAULT_K1,
    b: float = DEFAULT_B,
    *,
    doc_freqs: Mapping[str, int] | None = None,
) -> dict[int, float]:
    """BM25 score of every document in ``postings`` holding at least one query term.

    ``postings`` maps a term to ``{doc_id: term frequency}``; ``doc_lengths`` must hold every
    doc id that appears there. ``doc_freqs`` gives each term's true document frequency when
    the postings are capped (else the size of its postings is used). Repeated query terms
    count once.
    """
    scores: dict[int, float] = {}
    if n_docs <= 0:
        return scores
    length_scale = b / avg_len if avg_len > 0 else 0.0
    base = 1.0 - b
    k1_plus_1 = k1 + 1.0
    for term in dict.fromkeys(query_terms):
        plist = postings.get(term)
        if not plist:
            continue
        df = doc_freqs.get(term, len(plist)) if doc_freqs is not None else len(plist)
        weight = idf(df, n_docs) * k1_plus_1
        get = scores.get
        for doc_id, tf in plist.items():
            norm = k1 * (base + length_scale * doc_lengths[doc_id])
            scores[doc_id] = get(doc_id, 0.0) + weight * tf / (tf + norm)
    return scores


class IndexSnapshot(NamedTuple):
    """Everything that defines an index's content, in plain comparable containers."""

    postings: dict[str, dict[int, int]]
    doc_freqs: dict[str, int]
    doc_lengths: dict[int, int]


class Index:
    """An inverted index of archived messages with BM25 search.

    Doc ids are the archive's message ids: they grow with time, and ``id - 1`` / ``id + 1``
    are the neighbouring turns.
    """

    def __init__(self, postings_cap: int | None = None) -> None:
        if postings_cap is not None and postings_cap < 1:
            raise ValueError("postings_cap must be at least 1 (or None for no cap)")
        self.postings_cap = postings_cap
        # Each term's postings are kept in ascending doc id order, so the oldest posting,
        # the one the cap evicts, is always the first key.
        self._postings: dict[str, dict[int, int]] = {}
        self._doc_freqs: dict[str, int] = {}
        self._doc_terms: dict[int, dict[str, int]] = {}
        self._doc_lengths: dict[int, int] = {}
        self._total_length = 0

    def __len__(self) -> int:
        return len(self._doc_lengths)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._doc_lengths

    @property
    def n_docs(self) -> int:
        """Number of live documents."""
        return len(self._doc_lengths)

    @property
    def avg_len(self) -> float:
        """Mean document length over the live documents (0.0 when empty)."""
        n = len(self._doc_lengths)
        return self._total_length / n if n else 0.0

    def doc_freq(self, term: str) -> int:
        """Number of live documents holding ``term`` (not capped)."""
        return self._doc_freqs.get(term, 0)

    def postings(self, term: str) -> dict[int, int]:
        """A copy of ``term``'s postings, ``{doc_id: tf}`` in ascending doc id order."""
        return dict(self._postings.get(term, {}))

    def add(self, doc_id: int, terms: Mapping[str, int], length: int) -> None:
        """Index one document; adding a doc id already present replaces that document."""
        if doc_id in self._doc_lengths:
            self.remove(doc_id)
        cap = self.postings_cap
        doc_terms = {term: tf for term, tf in terms.items() if tf > 0}
        self._doc_terms[doc_id] = doc_terms
        self._doc_lengths[doc_id] = length
        self._total_length += length
        for term, tf in doc_terms.items():
            self._doc_freqs[term] = self._doc_freqs.get(term, 0) + 1
            plist = self._postings.get(term)
            if plist is None:
                self._postings[term] = {doc_id: tf}
                continue
            if doc_id > next(reversed(plist)):
                plist[doc_id] = tf
            else:
                # Out of order (a re-indexed or back-filled message): keep the order the
                # cap relies on. Rare, so a sort is fine.
                plist[doc_id] = tf
                self._postings[term] = plist = dict(sorted(plist.items()))
            if cap is not None and len(plist) > cap:
                del plist[next(iter(plist))]

    def remove(self, doc_id: int) -> bool:
        """Drop a document and its postings; return whether it was indexed."""
        doc_terms = self._doc_terms.pop(doc_id, None)
        if doc_terms is None:
            return False
        self._total_length -= self._doc_lengths.pop(doc_id)
        for term in doc_terms:
            df = self._doc_freqs[term] - 1
            if df:
                self._doc_freqs[term] = df
                plist = self._postings.get(term)
                if plist is not None:
                    plist.pop(doc_id, None)
                    if not plist:
                        del self._postings[term]
            else:
                del self._doc_freqs[term]
                self._postings.pop(term, None)
        return True

    def scores(
        self, query_terms: Iterable[str], *, k1: float = DEFAULT_K1, b: float = DEFAULT_B
    ) -> dict[int, float]:
        """Plain BM25 scores (no neighbour boost) of the documents matching the query."""
        return bm25_scores(
            query_terms,
            self._postings,
            self._doc_lengths,
            self.n_docs,
            self.avg_len,
            k1,
            b,
            doc_freqs=self._doc_freqs,
        )

    def search(
        self,
        query_terms: Iterable[str],
        limit: int,
        *,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        neighbours: float = DEFAULT_NEIGHBOUR_WEIGHT,
    ) -> list[tuple[int, float]]:
        """The ``limit`` best documents for ``query_terms`` as ``(doc_id, score)``, best first.

        ``neighbours`` is the weight of the neighbour boost (0 turns it off).
        """
        scores = self.scores(query_terms, k1=k1, b=b)
        return top_k(neighbour_boost(scores, neighbours, self._doc_lengths), limit)

    def snapshot(self) -> IndexSnapshot:
        """A deep copy of the index's content, for comparing two indexes."""
        return IndexSnapshot(
            {term: dict(plist) for term, plist in self._postings.items()},
            dict(self._doc_freqs),
            dict(self._doc_lengths),
        )

    @classmethod
    def build(
        cls,
        docs: Iterable[tuple[int, Mapping[str, int], int]],
        postings_cap: int | None = None,
    ) -> Index:
        """An index of ``(doc_id, terms, length)`` documents, added in ascending id order."""
        index = cls(postings_cap)
        for doc_id, terms, length in sorted(docs, key=lambda doc: doc[0]):
            index.add(doc_id, terms, length)
        return index
