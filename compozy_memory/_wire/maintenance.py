"""The calls that maintain a memory rather than serve a conversation: the indexer's steps,
an import's steps and an export's pages."""

from __future__ import annotations

from collections.abc import Sequence

from compozy_memory._model.limits import MAX_READ
from compozy_memory._wire import replies
from compozy_memory._wire.gateway_base import GatewayBase
from compozy_memory._wire.replies import IndexApplied, IndexPending

__all__ = ["MaintenanceCalls"]


class MaintenanceCalls(GatewayBase):
    """Index, import and export calls of one memory."""

    async def index_pending(self, max_docs: int, max_bytes: int) -> IndexPending:
        """What the indexer has to do next (``lua/index_pending.lua``)."""
        reply = await self._read("index_pending", {"max_docs": max_docs, "max_bytes": max_bytes})
        return replies.index_pending(self._decode("index_pending", reply))

    async def index_apply(
        self,
        pending: IndexPending,
        *,
        analyzer: str,
        upto: int,
        seq_upto: int,
        documents: Sequence[str],
        removed: Sequence[str],
        gone_first: int,
    ) -> IndexApplied:
        """One step of the indexer (``lua/index_apply.lua``)."""
        reply = await self._write(
            "index_apply",
            {
                "ttl_ms": self.ttl_ms,
                "archive_max": self.policy.archive_max,
                "analyzer": analyzer,
                "ix_next": pending.ix_next,
                "upto": upto,
                "seq_from": pending.seq_from,
                "seq_upto": seq_upto,
                "n_gone": len(removed),
                "gone_first": gone_first,
                "n_add": len(documents),
            },
            [*documents, *removed],
        )
        return replies.index_applied(self._decode("index_apply", reply))

    async def index_compact(self) -> tuple[int, int, int, bool]:
        """One compaction step: (postings removed, dead postings left, postings, sweep done)."""
        reply = self._decode("index_compact", await self._write("index_compact", {"ttl_ms": 0}))
        return (
            int(reply["removed"]),
            int(reply["dead_postings"]),
            int(reply["postings"]),
            bool(int(reply["done"])),
        )

    async def index_reset(self, *, force: bool) -> bool:
        """Drop the index so the indexer builds it again; False if it was current."""
        reply = await self._write("index_reset", {"ttl_ms": self.ttl_ms, "force": int(force)})
        return bool(int(self._decode("index_reset", reply)["reset"]))

    async def import_step(
        self, token: str, part: str, at: int, last_id: int, envelopes: Sequence[str]
    ) -> tuple[int, int]:
        """One step of an import (``lua/import.lua``): ``(live messages, last id)`` after it."""
        reply = self._decode(
            "import",
            await self._write(
                "import",
                {
                    "ttl_ms": self.ttl_ms,
                    "archive_max": self.policy.archive_max,
                    "token": token,
                    "part": part,
                    "at": at,
                    "last_id": last_id,
                },
                envelopes,
            ),
        )
        return int(reply["count"]), int(reply["last_id"])

    async def transcript_page(
        self, part: str, offset: int, count: int = MAX_READ
    ) -> tuple[str, int, list[str]]:
        """A page of one part for an export: (stamp, the part's length, envelopes)."""
        reply = self._decode(
            "transcript",
            await self._read("transcript", {"part": part, "offset": offset, "count": count}),
        )
        return (
            replies.text(reply["stamp"]),
            int(reply["length"]),
            [replies.text(e) for e in reply["envelope"]],
        )
