"""A memory's search index as Redis holds it, decoded, and the index built from scratch over
what the memory holds: the two must be equal once the indexer has caught up.

The stored index is the sum of its segments, each with its sign (``lua/search/lib/segments.lua``,
:mod:`compozy_memory._search.segments`): positive segments hold what was indexed, negative
ones what was removed since, so a removed document's postings must cancel out exactly, and
each document's length must agree with its record. The records (``lua/lib/docs.lua``) are
decoded here again, so a test does not trust the scripts to read what they wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from compozy_memory import InstanceKeys, MemoryInstance, Message
from compozy_memory._io.translate import RedisClient
from compozy_memory._search.documents import KINDS, document_terms, kind_of
from compozy_memory._search.merging import decode_segment
from compozy_memory._search.runtime.index_calls import parse_list
from integration.memories import memory

__all__ = ["IndexState", "built_from_scratch", "stored_index"]


@dataclass
class IndexState:
    """An index's content, comparable whatever its layout."""

    #: term -> {id: tf}, for documents alive
    postings: dict[str, dict[int, int]] = field(default_factory=dict)
    #: term -> df, for terms with at least one document alive
    doc_freqs: dict[str, int] = field(default_factory=dict)
    #: id -> (kind, length)
    docs: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: id -> seq (archived documents only)
    seqs: dict[int, int] = field(default_factory=dict)


async def indexed(client: RedisClient, key: str, messages: list[dict[str, Any]]) -> MemoryInstance:
    """A handle on ``key`` holding ``messages``, indexed; its writes start no background
    catch-up (a test runs the steps)."""
    mem = memory(client, key, background_index=False)
    await mem.append_many(messages)
    await mem.indexer.catch_up()
    return mem


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


async def stored_index(client: RedisClient, keys: InstanceKeys) -> IndexState:
    """The index of ``keys``' memory, decoded from Redis: its segments summed with their
    signs. Postings of documents whose removal is not written yet are left out (their records
    say they are removed; readers drop them too); a term's df counts exactly those left."""
    state = IndexState()
    for field_name, block in (await client.hgetall(keys.ixdocs)).items():
        number, data = int(_bytes(field_name)), _bytes(block)
        for i in range(len(data) // 8):
            record = data[8 * i : 8 * i + 8]
            if record[0]:
                doc = number * 128 + i
                state.docs[doc] = (record[0], record[1] * 256 + record[2])
                seq = int.from_bytes(record[3:8], "big")
                if seq:
                    state.seqs[doc] = seq
    fields = {_bytes(k).decode(): _bytes(v) for k, v in (await client.hgetall(keys.ixseg)).items()}
    net: dict[str, dict[int, int]] = {}
    for entry in parse_list(fields.get("L", b"").decode()):
        segment = decode_segment(entry, fields)
        for term, p in segment.terms.items():
            tfs = net.setdefault(term, {})
            for doc, tf, length in zip(p.ids, p.tfs, p.lengths, strict=True):
                if segment.sign > 0 and doc in state.docs:
                    assert state.docs[doc][1] == length, f"{term}: length of {doc}"
                left = tfs.get(doc, 0) + segment.sign * tf
                if left:
                    tfs[doc] = left
                else:
                    del tfs[doc]
    for term, tfs in net.items():
        assert all(tf > 0 for tf in tfs.values()), f"{term}: removed more than indexed"
        df = len(tfs)
        alive = {doc: tf for doc, tf in tfs.items() if doc in state.docs}
        if alive:
            state.postings[term] = alive
            state.doc_freqs[term] = df
    return state


async def built_from_scratch(client: RedisClient, keys: InstanceKeys) -> IndexState:
    """The index of everything the memory holds now (pinned messages are never indexed)."""
    state = IndexState()
    parts = [
        ("msgs", await client.lrange(keys.msgs, 0, -1)),
        ("summaries", await client.lrange(keys.summaries, 0, -1)),
        ("archive", await client.lrange(keys.archive, 0, -1)),
    ]
    base = int(await client.hget(keys.meta, "archive_base") or 0)
    for part, envelopes in parts:
        for at, raw in enumerate(envelopes):
            message = Message.model_validate_json(raw)
            assert message.id is not None
            if message.priority == 0:
                continue
            kind = KINDS["summary"] if part == "summaries" else kind_of(message)
            tf, length = document_terms(message, kind=kind)
            state.docs[message.id] = (kind, length)
            if part == "archive":
                state.seqs[message.id] = base + at + 1
            for term, n in tf.items():
                state.postings.setdefault(term, {})[message.id] = n
    state.doc_freqs = {term: len(docs) for term, docs in state.postings.items()}
    return state
