"""The calls that maintain a memory rather than serve a conversation: the indexer's steps,
an import's steps and an export's pages."""

from __future__ import annotations

from collections.abc import Sequence

from compozy_memory._model.limits import MAX_READ
from compozy_memory._wire import replies
from compozy_memory._wire.gateway_base import GatewayBase
from compozy_memory._wire.replies import IndexPending
from compozy_memory._wire.steps import Steps, op

__all__ = ["MaintenanceCalls"]


class MaintenanceCalls(GatewayBase):
    """Index, import and export calls of one memory."""

    @op
    def index_pending(self, max_docs: int, max_bytes: int) -> Steps[IndexPending]:
        """What the indexer has to do next (``lua/index_pending.lua``)."""
        reply = yield from self._reading(
            "index_pending",
            {
                "max_docs": max_docs,
                "max_bytes": max_bytes,
                "archive_max": self.policy.archive_max,
            },
            self._fields("index_pending"),
        )
        return replies.index_pending(reply)

    @op
    def index_reset(self, *, force: bool, off: bool = False) -> Steps[bool]:
        """Drop the index so the indexer builds it again (``off``: and keep none, search
        turned off); False if it was as asked already."""
        reply = yield from self._writing(
            "index_reset",
            {"ttl_ms": self.ttl_ms, "force": int(force), "off": int(off)},
            self._fields("index_reset"),
        )
        return bool(int(reply["reset"]))

    @op
    def import_step(
        self, token: str, part: str, at: int, last_id: int, envelopes: Sequence[str]
    ) -> Steps[tuple[int, int]]:
        """One step of an import (``lua/import.lua``): ``(live messages, last id)`` after it."""
        reply = yield from self._writing(
            "import",
            {
                "ttl_ms": self.ttl_ms,
                "archive_max": self.policy.archive_max,
                "token": token,
                "part": part,
                "at": at,
                "last_id": last_id,
            },
            self._fields("import"),
            envelopes,
        )
        return int(reply["count"]), int(reply["last_id"])

    @op
    def transcript_page(
        self, part: str, offset: int, count: int = MAX_READ
    ) -> Steps[tuple[str, int, list[str]]]:
        """A page of one part for an export: (stamp, the part's length, envelopes)."""
        reply = yield from self._reading(
            "transcript",
            {"part": part, "offset": offset, "count": count},
            self._fields("transcript"),
        )
        return (
            replies.text(reply["stamp"]),
            int(reply["length"]),
            [
                replies.stored_text(e, f"{part} envelope {offset + i + 1}")
                for i, e in enumerate(reply["envelope"])
            ],
        )
