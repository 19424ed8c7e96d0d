"""Search past its postings budget: the common terms it does not read are scored exactly.

A query's rarest terms are read from the index's postings while they fit ``QUERY_BUDGET``;
the terms left over are scored on the best candidates from those documents' own terms. These
tests build archives where a query term is in more documents than the budget, and compare
the scripts' scores with BM25 computed here over the whole archive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from benchmarks.bm25_reference import Index
from compozy_memory import Hit, MemoryInstance, Message, SearchPolicy
from compozy_memory._io.translate import RedisClient
from compozy_memory._model.limits import QUERY_BUDGET
from compozy_memory._search.analysis import analyze_query
from compozy_memory._search.documents import document_terms
from integration.memories import memory

pytestmark = pytest.mark.slow

NO_NEIGHBOURS = SearchPolicy(neighbour_weight=0)  # the reference ranks by BM25 alone


async def reference(client: RedisClient, mem: MemoryInstance) -> Index:
    """BM25 over every archived message, built here from what the archive holds."""
    index = Index()
    for raw in await client.lrange(mem.keys.archive, 0, -1):
        message = Message.model_validate_json(raw)
        tfs, length = document_terms(message)
        assert message.id is not None
        index.add(message.id, tfs, length)
    return index


async def search_matches_bm25(
    client: RedisClient, mem: MemoryInstance, query: str, limit: int
) -> list[Hit]:
    """The memory's hits for ``query``, checked against BM25 over the whole archive: the same
    messages, in the same order, with the same scores (to the precision the script prints)."""
    hits = await mem.search(query, limit=limit)
    expected = (await reference(client, mem)).search(analyze_query(query), limit, neighbours=0)
    assert [h.id for h in hits] == [doc for doc, _ in expected]
    assert [round(h.score, 4) for h in hits] == [round(s, 4) for _, s in expected]
    return hits


async def archive(mem: MemoryInstance, turns: Sequence[dict[str, Any]]) -> None:
    for start in range(0, len(turns), 500):
        await mem.append_many(turns[start : start + 500])
    await mem.trim(keep_messages=0)


async def test_a_term_in_more_documents_than_the_budget_still_counts_exactly(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key, search=NO_NEIGHBOURS)
    turns = []
    for n in range(QUERY_BUDGET + 200):
        # "weather" is in every document: too common to read; "lighthouse" in one in 40.
        text = f"weather note {n}: calm seas"
        if n % 40 == 0:
            text = f"weather at the lighthouse, note {n}" + " weather" * (n % 3)
        turns.append({"role": "user", "content": text, "tokens": 12})
    await archive(mem, turns)
    # The common term's share is in every hit's score: plain BM25.
    hits = await search_matches_bm25(client, mem, "weather at the lighthouse", 10)
    assert len(hits) == 10
    assert all("lighthouse" in h.message.text for h in hits)


async def test_a_number_term_is_not_taken_from_a_length_or_a_count(
    client: RedisClient, memory_key: str
) -> None:
    # Each document's stored terms read 'seq, role, length, term, tf, ...' (the speaker and
    # three date terms make four of its length). "7" is in too many documents to read, so it
    # is scored from each candidate's own terms: it must match a term there, never a length
    # or a count that happens to be 7.
    mem = memory(client, memory_key, search=NO_NEIGHBOURS)
    turns = [
        {"role": "user", "content": f"harbour note 7 from desk {n}", "tokens": 6}
        for n in range(QUERY_BUDGET + 50)
    ]
    turns[100] = {"role": "user", "content": "lighthouse beam keeper", "tokens": 3}  # length 7
    turns[200] = {"role": "user", "content": "lighthouse " * 7, "tokens": 7}  # a tf of 7
    turns[300] = {"role": "user", "content": "lighthouse 7 beam", "tokens": 3}  # the term
    await archive(mem, turns)
    hits = await search_matches_bm25(client, mem, "lighthouse 7", 3)
    assert sorted(h.id for h in hits) == [101, 201, 301]  # the three lighthouse documents


async def test_a_rare_term_with_few_documents_is_topped_up_from_the_next_term(
    client: RedisClient, memory_key: str
) -> None:
    # One document holds the rare term: the common ones' newest documents fill the hits,
    # each scored exactly, the rare one first.
    mem = memory(client, memory_key, search=NO_NEIGHBOURS)
    turns = [
        {"role": "user", "content": f"ferry timetable for harbour {n}", "tokens": 5}
        for n in range(QUERY_BUDGET + 100)
    ]
    turns[42] = {"role": "user", "content": "the ferry to Skye leaves the harbour", "tokens": 7}
    await archive(mem, turns)
    hits = await search_matches_bm25(client, mem, "Skye ferry harbour", 5)
    assert len(hits) == 5
    assert hits[0].id == 43
