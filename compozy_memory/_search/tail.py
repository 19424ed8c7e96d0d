"""The live messages a search reads past the index, analysed here as the indexer would.

A search reads, in the same consistent read as the segment list, the live messages the index
has not reached yet (``lua/search/index_read.lua``: the newest ``SEARCH_TAIL_DOCS``): each is
analysed exactly as an index step would analyse it (:func:`~compozy_memory._search.merging.
step_segments`), so :class:`~compozy_memory._search.scoring.SearchPlan` ranks them with the
segments' documents and BM25's counts include them, as if they were indexed. A message is
then searchable the moment it is appended, and the indexer is free to take a memory's messages
in batches: a step costs the server about the same for one message as for sixteen.

Envelopes never change once stored (a replace writes new ids), so an analysis is kept per
envelope (by a digest of its bytes) for the next search of the same tail: a tail is read by
every search until a step takes it.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compozy_memory._search.documents import KINDS
from compozy_memory._search.merging import analysed

__all__ = ["TailDoc", "envelope_digest", "tail_docs"]

#: Analyses kept (per process, every memory's tails together).
_KEPT = 2_048


@dataclass(frozen=True, slots=True)
class TailDoc:
    """A live message past the index, as a document of it: id, kind (the role's), terms, and
    the digest of the envelope read (:func:`envelope_digest`): a hit fetched at this id is
    this message only if its envelope has the same."""

    id: int
    kind: int
    tf: Counter[str]
    length: int
    digest: bytes = b""

    @property
    def summary(self) -> bool:
        return self.kind == KINDS["summary"]


_lock = threading.Lock()
_analysed: dict[bytes, TailDoc | None] = {}


def envelope_digest(raw: bytes | str) -> bytes:
    """The digest a tail document keeps of its envelope's bytes."""
    data = raw.encode() if isinstance(raw, str) else raw
    return hashlib.blake2b(data, digest_size=16).digest()


def tail_docs(envelopes: Sequence[bytes], parse: Any) -> list[TailDoc]:
    """The documents of the tail's ``envelopes`` (``parse``: raw envelope to its JSON object,
    refusing a corrupt one, or one whose id is not the one it starts with); pinned messages
    (priority 0) are no document, as in the index."""
    out: list[TailDoc] = []
    for raw in envelopes:
        digest = envelope_digest(raw)
        with _lock:
            seen = digest in _analysed
            known = _analysed.get(digest)
        if not seen:
            known = _analyse(parse(raw), digest)
            with _lock:
                if len(_analysed) >= _KEPT:
                    # Dicts keep insertion order: the oldest analyses go first.
                    for old in list(_analysed)[: _KEPT // 4]:
                        del _analysed[old]
                _analysed[digest] = known
        if known is not None:
            out.append(known)
    return out


def _analyse(message: dict[str, Any], digest: bytes) -> TailDoc | None:
    if message.get("priority") == 0:
        return None  # pinned: never indexed
    return TailDoc(*analysed(message, summary=False), digest)
