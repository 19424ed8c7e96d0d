"""Search with dense scores: BM25 candidates (ranked here,
:mod:`compozy_memory._search.runtime.searching`) and their vectors, the query embedded here,
both fused (:mod:`compozy_memory._search.fusion`).

The best ``Fusion.candidates`` documents by BM25 are ranked from the index's segments; the
server gives the vectors stored for them and their neighbours
(``lua/search/search_candidates.lua``); the query's vector is compared
with those (int8 cosines, numpy when installed), the two scores are fused with the neighbour
boost, and the best ``limit`` are read with their neighbouring turns
(``lua/search/search_fetch.lua``). A document not embedded yet gets the candidates' mean dense
score, neither favoured nor buried. Without vectors of this embedder's model (none stored
yet, or another model's) or when the embedder fails, the ranking is BM25's with the neighbour
boost, as without an embedder.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from compozy_memory._model.results import Hit, Hits
from compozy_memory._search.dense import Embedder, cosines, strip_names
from compozy_memory._search.documents import KINDS
from compozy_memory._search.fusion import Fusion, fuse
from compozy_memory._search.ranking import neighbour_boost, top_k
from compozy_memory._search.runtime.searching import bm25_ranking
from compozy_memory._search.runtime.vector_calls import Candidates
from compozy_memory._search.runtime.vectors import embed, model_id
from compozy_memory._search.tail import TailDoc
from compozy_memory._wire.effects import Observe
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.steps import Steps
from compozy_memory.errors import CompozyMemoryError

__all__ = ["Ranking", "fused_hits", "fused_ranking"]

log = logging.getLogger("compozy_memory.vectors")


@dataclass(frozen=True, slots=True)
class Ranking:
    """A query's best documents, ``(id, score)`` best first, and what the server said."""

    best: list[tuple[int, float]]
    unindexed: int
    #: Whether dense scores took part (False: BM25 alone).
    dense: bool
    #: Ids known to be summaries (their own lane; the neighbour lift passes over them).
    summaries: frozenset[int] = frozenset()
    #: The ranked live messages past the index, by id (the server has no record of them
    #: yet: a filter by kind is the client's, and so is the check that a hit fetched at one
    #: of these ids is the message ranked).
    tail: Mapping[int, TailDoc] = field(default_factory=dict)
    #: Where that tail began (0: none ranked).
    tail_from: int = 0
    #: The memory's incarnation as the index was read ('' for any): hits are of it only.
    incarnation: str = ""


def fused_ranking(
    gateway: MemoryGateway,
    embedder: Embedder,
    fusion: Fusion,
    query: str,
    terms: Sequence[str],
    *,
    limit: int,
    since_id: int = 0,
    kinds: Sequence[int] = (),
) -> Steps[Ranking]:
    """The ``limit`` best documents for ``query`` (``terms``: its analysed terms), fused."""
    ranked = yield from bm25_ranking(
        gateway,
        terms,
        limit=max(1, fusion.candidates // 4),
        pool=fusion.candidates,
        since_id=since_id,
        neighbour_weight=0.0,  # BM25's own scores: the fusion lifts neighbours itself
    )
    found = yield from gateway.search_candidates(
        ranked.best,
        since_id=since_id,
        kinds=kinds,
        # A product gives a document BM25 did not score nothing from its dense score.
        neighbour_vectors=fusion.method != "product",
    )
    bm25 = {i: s for i, s in zip(found.ids, found.bm25, strict=True) if s is not None}
    exists = set(found.ids)
    # Live messages past the index have no record the server could filter or give a vector
    # for: BM25's score, the filter here, and the candidates' mean dense score.
    tail = ranked.tail
    wanted = set(kinds)
    extra = [
        (doc_id, score)
        for doc_id, score in ranked.best
        if doc_id in tail and doc_id not in exists and (not wanted or tail[doc_id].kind in wanted)
    ]
    for doc_id, score in extra:
        bm25[doc_id] = score
    # Any tail message of a kind kept is there to be lifted as a neighbour, as after a step.
    exists.update(
        doc_id
        for doc_id, doc in tail.items()
        if doc_id >= since_id and (not wanted or doc.kind in wanted)
    )
    dense = yield from _dense_scores(gateway, embedder, query, found, (i for i, _ in extra))
    skip = ranked.summaries
    if dense is None:
        scores = neighbour_boost(bm25, gateway.policy.search.neighbour_weight, exists, skip)
    else:
        scores = fuse(bm25, dense, exists, fusion, skip)
    return Ranking(
        top_k(scores, limit),
        ranked.unindexed,
        dense is not None,
        skip,
        tail,
        ranked.tail_from,
        ranked.incarnation,
    )


def fused_hits(
    gateway: MemoryGateway,
    ranked: Steps[Ranking],
    *,
    limit: int,
    kinds: Sequence[int] = (),
    summary_limit: int = 0,
) -> Steps[Hits]:
    """The best ``limit`` documents of a ranking (the steps of :func:`fused_ranking`, or of
    BM25 alone) still indexed and of ``kinds``, as hits with the turns next to them.

    With ``summary_limit`` (a search without roles: two lanes), ``kinds`` are the messages'
    and the hits are messages only; the best ``summary_limit`` summaries go to
    :attr:`Hits.summaries`, fetched apart, so a summary never takes a message's place."""
    ranking = yield from ranked
    scores = dict(ranking.best)
    known = ranking.summaries
    tail, wanted_kinds = ranking.tail, set(kinds)
    ids = [
        doc_id
        for doc_id, _ in ranking.best
        if not wanted_kinds or doc_id not in tail or tail[doc_id].kind in wanted_kinds
    ]
    digests = {doc_id: doc.digest for doc_id, doc in tail.items()}
    if summary_limit > 0:
        ids = [doc_id for doc_id in ids if doc_id not in known]
    fetched = yield from gateway.search_fetch(
        ids,
        limit=limit,
        kinds=kinds,
        tail_from=ranking.tail_from,
        incarnation=ranking.incarnation,
        tail=digests,
    )
    out = Hits(
        Hit(doc_id, scores[doc_id], message, before, after, where)
        for doc_id, where, message, before, after in fetched
    )
    out.unindexed = ranking.unindexed
    wanted = [doc_id for doc_id, _ in ranking.best if doc_id in known][:summary_limit]
    if wanted:
        found = yield from gateway.search_fetch(
            wanted,
            limit=summary_limit,
            kinds=[KINDS["summary"]],
            tail_from=ranking.tail_from,
            incarnation=ranking.incarnation,
            tail=digests,
        )
        out.summaries = tuple(
            Hit(doc_id, scores[doc_id], message, before, after, where)
            for doc_id, where, message, before, after in found
        )
    return out


def _dense_scores(
    gateway: MemoryGateway,
    embedder: Embedder,
    query: str,
    found: Candidates,
    extra: Iterable[int] = (),
) -> Steps[dict[int, float] | None]:
    """Cosines of the query with the candidates' vectors, a mean for those without one (and
    for ``extra``: live messages past the index, which have none yet); None
    when there is nothing to compare (no vectors of this model), or when the embedder failed
    or passed its deadline (``embed_deadline``): BM25 alone ranks the query then, with a
    warning and ``compozy_memory_embedder_fallbacks_total``."""
    ids = [i for i, v in zip(found.ids, found.vectors, strict=True) if v is not None]
    if not ids or found.model != model_id(embedder):
        return None
    try:
        (vector,) = yield from embed(
            embedder, [strip_names(query, frozenset(found.names))], query=True
        )
    except CompozyMemoryError:
        raise
    except Exception as exc:  # the provider's own failure: search goes on with BM25 alone
        reason = "timeout" if isinstance(exc, TimeoutError) else "error"
        log.warning(
            "the embedder %s on a query (%s); BM25 alone ranks it",
            "passed its deadline" if reason == "timeout" else "failed",
            type(exc).__name__,
            exc_info=reason == "error",
            extra={"memory": gateway.memory, "key": gateway.name},
        )
        yield from Observe("embedder_fallbacks", (gateway.memory, reason))
        return None
    values = cosines(vector, [v for v in found.vectors if v is not None])
    dense = dict(zip(ids, values, strict=True))
    mean = sum(values) / len(values)
    for doc_id in (*found.ids, *extra):
        dense.setdefault(doc_id, mean)
    return dense
