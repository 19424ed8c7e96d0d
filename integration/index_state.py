"""A memory's search index as Redis holds it, decoded, and the index built from scratch over
what the memory holds: the two must be equal once the indexer has caught up.

The decoder reads the packed layout ``lua/lib/postings.lua`` and ``lua/lib/docs.lua``
describe (written again here, in Python, so a test does not trust the scripts to read what
they wrote).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from compozy_memory import InstanceKeys, Message
from compozy_memory._io.translate import RedisClient
from compozy_memory._search.documents import KINDS, document_terms, kind_of

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


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _postings(data: bytes, at: int, n: int, base: int) -> list[tuple[int, int, int]]:
    out, doc = [], base
    for _ in range(n):
        z, at = _varint(data, at)
        doc += z // 2 if z % 2 == 0 else -(z + 1) // 2
        tf, at = _varint(data, at)
        length, at = _varint(data, at)
        out.append((doc, tf, length))
    return out


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("latin-1")


async def stored_index(client: RedisClient, keys: InstanceKeys) -> IndexState:
    """The index of ``keys``' memory, decoded from Redis. Postings of removed documents are
    left out (readers skip them too); a term's df must count exactly those left."""
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
    by_term: dict[str, list[tuple[int, int, int]]] = {}
    headers: dict[str, int] = {}
    for raw_field, raw_value in (await client.hgetall(keys.ixpost)).items():
        name, value = _bytes(raw_field), _bytes(raw_value)
        if name.endswith(b"\0"):
            continue  # a directory
        if b"\0" in name:
            term = name.split(b"\0")[0].decode()
            base, at = _varint(value, 0)
            n, at = _varint(value, at)
            by_term.setdefault(term, []).extend(_postings(value, at, n, base))
            continue
        term = name.decode()
        df, at = _varint(value, 0)
        _first, at = _varint(value, at)
        _nb, at = _varint(value, at)
        base, at = _varint(value, at)
        _last, at = _varint(value, at)
        tailn, at = _varint(value, at)
        _dirhigh, at = _varint(value, at)
        headers[term] = df
        by_term.setdefault(term, []).extend(_postings(value, at, tailn, base))
    for term, postings in by_term.items():
        alive = {doc: tf for doc, tf, length in postings if doc in state.docs}
        for doc, _, length in postings:
            if doc in state.docs:
                assert state.docs[doc][1] == length, f"{term}: length of {doc}"
        assert len(alive) == sum(1 for doc, _, _ in postings if doc in state.docs), term
        if alive:
            state.postings[term] = alive
            state.doc_freqs[term] = headers.get(term, -1)
        else:
            assert headers.get(term, 0) == 0, f"{term} has df {headers[term]} and no document"
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
            tf, length = document_terms(message)
            kind = KINDS["summary"] if part == "summaries" else kind_of(message)
            state.docs[message.id] = (kind, length)
            if part == "archive":
                state.seqs[message.id] = base + at + 1
            for term, n in tf.items():
                state.postings.setdefault(term, {})[message.id] = n
    state.doc_freqs = {term: len(docs) for term, docs in state.postings.items()}
    return state
