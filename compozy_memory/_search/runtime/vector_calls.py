"""The calls of dense search: the vector step's (``lua/search/vec_*.lua``) and a fused search's
(``lua/search/search_candidates.lua``, ``lua/search/search_fetch.lua``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compozy_memory._model.messages import Message
from compozy_memory._search.tail import envelope_digest
from compozy_memory._wire import replies
from compozy_memory._wire.gateway_base import GatewayBase
from compozy_memory._wire.steps import Steps, op
from compozy_memory.errors import CorruptDataError

__all__ = ["Candidates", "VectorApplied", "VectorCalls", "VectorPending"]


@dataclass(frozen=True, slots=True)
class VectorPending:
    """What ``lua/search/vec_pending.lua`` says the vector step has to do next."""

    #: The model of the stored vectors ('' before any).
    model: str
    vx_next: int
    #: The step moves ``vx_next`` past this id (``vx_next - 1``: nothing to do).
    upto: int
    #: The speaker names kept beside the vectors.
    names: tuple[str, ...]
    #: The messages to embed, by id.
    messages: tuple[Message, ...]

    @property
    def idle(self) -> bool:
        return self.upto < self.vx_next


@dataclass(frozen=True, slots=True)
class VectorApplied:
    """What one vector step did."""

    applied: bool
    vx_next: int
    #: Vectors the memory holds after the step.
    stored: int


@dataclass(frozen=True, slots=True)
class Candidates:
    """``lua/search/search_candidates.lua``'s reply: the documents a fused search scores, as three
    parallel tuples (a few hundred of them a query: no object each)."""

    #: Messages not searchable yet (from the ranking's read; 0 here).
    unindexed: int
    unembedded: int
    model: str
    names: tuple[str, ...]
    ids: tuple[int, ...]
    #: BM25 scores; None for a neighbour that matched no term.
    bm25: tuple[float | None, ...]
    #: Stored vectors; None where there is none yet.
    vectors: tuple[bytes | None, ...]


def _blob(value: Any) -> bytes | None:
    """A stored vector as bytes (a client that decodes replies hands back text: vectors are
    ASCII, see ``compozy_memory._search.dense.quantize``)."""
    if not value:
        return None
    return value if isinstance(value, bytes) else value.encode("ascii")


def _names(value: Any) -> tuple[str, ...]:
    return tuple(n for n in replies.text(value).split("\t") if n)


#: Fetches of one search's hits at most (another only when a tail hit was not the one ranked).
_FETCH_PASSES = 4


def _decoded(
    hit: int, where: Any, env: Any, before: Any, after: Any
) -> tuple[int, str, Message, Message | None, Message | None]:
    """A hit as ``search_fetch.lua`` returned it, decoded: CorruptDataError for an envelope
    that is not a message, or not the one of its id (or of the ids next to it)."""
    message, *around = replies.messages([env, *(n for n in (before, after) if n)])
    left = around.pop(0) if before else None
    right = around.pop(0) if after else None
    for got, want in ((message, hit), (left, hit - 1), (right, hit + 1)):
        if got is not None and got.id != want:
            raise CorruptDataError(
                f"the message stored as {want} says it is {got.id}: it was written raw, not by "
                "compozy-memory"
            )
    return hit, replies.text(where), message, left, right


class VectorCalls(GatewayBase):
    """Vector and fused-search calls of one memory."""

    @op
    def vec_pending(self, max_docs: int, max_bytes: int) -> Steps[VectorPending]:
        """What the vector step has to embed next (``lua/search/vec_pending.lua``)."""
        reply = yield from self._reading(
            "vec_pending",
            {"max_docs": max_docs, "max_bytes": max_bytes},
            self._fields("vec_pending"),
        )
        return VectorPending(
            replies.text(reply["model"]),
            int(reply["vx_next"]),
            int(reply["upto"]),
            _names(reply["names"]),
            tuple(replies.messages(reply["envelope"])),
        )

    @op
    def vec_apply(
        self,
        pending: VectorPending,
        *,
        model: str,
        upto: int,
        names: Sequence[str],
        vectors: Sequence[tuple[int, bytes]],
    ) -> Steps[VectorApplied]:
        """One step of the vector step (``lua/search/vec_apply.lua``)."""
        rest: list[str | bytes | int] = []
        for doc_id, blob in vectors:
            rest += [doc_id, blob]
        reply = yield from self._writing(
            "vec_apply",
            {
                "ttl_ms": self.ttl_ms,
                "model": model,
                "vx_next": pending.vx_next,
                "upto": upto,
                "names": "\t".join(names),
                "n": len(vectors),
            },
            self._fields("vec_apply"),
            rest,
        )
        return VectorApplied(
            bool(int(reply["applied"])), int(reply["vx_next"]), int(reply["stored"])
        )

    @op
    def vec_reset(self, model: str) -> Steps[bool]:
        """Drop vectors of another model than ``model``; False if they were of it."""
        reply = yield from self._writing(
            "vec_reset", {"ttl_ms": self.ttl_ms, "model": model}, self._fields("vec_reset")
        )
        return bool(int(reply["reset"]))

    @op
    def search_candidates(
        self,
        ranked: Sequence[tuple[int, float]],
        *,
        since_id: int,
        kinds: Sequence[int],
        neighbour_vectors: bool = True,
    ) -> Steps[Candidates]:
        """The stored vectors of ``ranked`` (BM25's best documents, scored by the client) and
        of their neighbours (the neighbours' vectors only with ``neighbour_vectors``)."""
        scores = dict(ranked)
        reply = yield from self._reading(
            "search_candidates",
            {
                "neighbour_vectors": int(neighbour_vectors),
                "since_id": since_id,
                "kinds": ",".join(str(k) for k in kinds),
            },
            self._fields("search_candidates"),
            [doc_id for doc_id, _ in ranked],
        )
        flat = reply["docs"]
        ids = tuple(map(int, flat[0::3]))
        return Candidates(
            0,
            int(reply["unembedded"]),
            replies.text(reply["model"]),
            _names(reply["names"]),
            ids,
            tuple(scores[i] if int(c) else None for i, c in zip(ids, flat[1::3], strict=True)),
            tuple(map(_blob, flat[2::3])),
        )

    @op
    def search_fetch(
        self,
        ids: Sequence[int],
        *,
        limit: int,
        kinds: Sequence[int] = (),
        tail_from: int = 0,
        incarnation: str = "",
        tail: Mapping[int, bytes] | None = None,
    ) -> Steps[list[tuple[int, str, Message, Message | None, Message | None]]]:
        """The first ``limit`` of the ranked candidates ``ids`` still indexed and of
        ``kinds`` (every kind: empty), or in the live tail from ``tail_from`` the client
        ranked and filtered (0: none), with their neighbours: (id, where, message, before,
        after) in the order asked; none when the memory's incarnation is no longer
        ``incarnation`` (the one ranked: '' for any). A hit at an id of ``tail`` (the digests
        of the tail's envelopes as the ranking read them) whose envelope is another (the id
        given again: a failover lost the one ranked) is passed over, and the next candidates
        take its place; a hit that does not decode, or not as the message of its id, is
        CorruptDataError."""
        wanted = list(ids)
        # Each pass drops at least one tail id or ends: a few passes, only after a failover.
        for _ in range(_FETCH_PASSES):
            if not wanted:
                return []
            reply = yield from self._reading(
                "search_fetch",
                {
                    "limit": limit,
                    "kinds": ",".join(str(k) for k in kinds),
                    "tail_from": tail_from,
                    "inc": incarnation,
                },
                self._fields("search_fetch"),
                wanted,
            )
            hits = [(int(doc_id), *rest) for doc_id, *rest in reply["hits"]]
            lost = {
                hit
                for hit, _, env, _, _ in hits
                if tail and hit in tail and envelope_digest(env) != tail[hit]
            }
            if not lost:
                return [_decoded(*hit) for hit in hits]
            wanted = [doc_id for doc_id in wanted if doc_id not in lost]
        return [_decoded(*hit) for hit in hits if hit[0] not in lost]
