"""The calls that maintain a memory rather than serve a conversation: an import's steps and
an export's pages. The indexer's calls are search's
(:mod:`compozy_memory._search.runtime.index_calls`)."""

from __future__ import annotations

from collections.abc import Sequence

from compozy_memory._model.limits import MAX_READ
from compozy_memory._wire import replies
from compozy_memory._wire.gateway_base import GatewayBase
from compozy_memory._wire.steps import Steps, op

__all__ = ["MaintenanceCalls"]


class MaintenanceCalls(GatewayBase):
    """Import and export calls of one memory."""

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
