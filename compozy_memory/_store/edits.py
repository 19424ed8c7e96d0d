"""Trim and replace: read the live messages, then write if they are still the ones read.

Both move messages to the archive, whose index needs their analysed text, which only the
client can make; the scripts check that the live messages are still those the client read
(``COMPOZY_MOVED`` otherwise), and a flush or another trim that moved them in between makes
the call read and try again.
"""

from __future__ import annotations

from compozy_memory._model.results import AppendResult, TrimResult
from compozy_memory._search.analysis import message_index_terms
from compozy_memory._store.selection import message_id, to_trim
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.scripts import ScriptArg
from compozy_memory.errors import ConcurrentChangeError

__all__ = ["MOVED_RETRIES", "replace_live", "trim_oldest"]

#: Attempts before ConcurrentChangeError reaches the caller.
MOVED_RETRIES = 5


async def trim_oldest(
    gateway: MemoryGateway, keep_messages: int | None, max_tokens: int | None
) -> TrimResult:
    """Archive the oldest messages that are not pinned until the limits hold."""
    for _ in range(MOVED_RETRIES):
        live = await gateway.read_range(0, -1)
        chosen = to_trim(live, keep_messages, max_tokens)
        if not chosen:
            return TrimResult(0, 0, sum(m.tokens or 0 for m in live), len(live))
        last = message_id(chosen[-1])
        prefix = [message_id(m) for m in live if message_id(m) <= last]
        try:
            return await gateway.trim(
                prefix, [message_id(m) for m in chosen], [message_index_terms(m) for m in chosen]
            )
        except ConcurrentChangeError:
            continue
    raise ConcurrentChangeError(
        f"trim: the messages kept changing through {MOVED_RETRIES} attempts", key=gateway.name
    )


async def replace_live(
    gateway: MemoryGateway,
    messages: list[ScriptArg],
    *,
    if_last_id: int | None,
    if_incarnation: str,
    token: str,
) -> AppendResult:
    """Swap the live messages for ``messages`` (encoded triples), archiving the old ones."""
    for _ in range(MOVED_RETRIES):
        live = await gateway.read_range(0, -1)
        try:
            return await gateway.replace(
                messages,
                old_ids=[message_id(m) for m in live],
                old_terms=[message_index_terms(m) for m in live],
                if_last_id=if_last_id,
                if_incarnation=if_incarnation,
                dedupe_key=token,
            )
        except ConcurrentChangeError:
            continue
    raise ConcurrentChangeError(
        f"replace: the messages kept changing through {MOVED_RETRIES} attempts",
        key=gateway.name,
    )
