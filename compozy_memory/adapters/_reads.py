"""The adapters' default read: the memory's summaries first, then its live messages.

After a flush the oldest messages live on only in the rolling summary, so a framework that
read only the live messages would lose them; every adapter's default read therefore shows the
summaries first, as system messages, the way the frameworks show a conversation's preamble.
These are steps (run by :class:`~compozy_memory.adapters._door.Door`, async or sync).
"""

from __future__ import annotations

from compozy_memory._model.messages import Message
from compozy_memory._store.core import MemoryCore
from compozy_memory._wire.steps import Steps

__all__ = ["is_summary", "summaries_then_messages"]


def summaries_then_messages(memory: MemoryCore, limit: int | None = None) -> Steps[list[Message]]:
    """The summaries, then every live message, oldest first; with ``limit``, the newest
    ``limit`` of that sequence (a summary only when every live message is among them).

    One state of the memory (read a bounded page a call), except with ``limit``: the newest
    messages are read first, and only a memory that holds fewer than ``limit`` is read again
    whole for its summaries.
    """
    if limit is not None:
        if limit <= 0:
            return []
        newest = yield from memory.steps.read(-limit, -1)
        if len(newest) >= limit:
            return newest
    read = yield from memory.steps.conversation()
    sequence = [*read.summaries, *read.messages]
    return sequence if limit is None else sequence[-limit:]


def is_summary(message: Message) -> bool:
    """Whether ``message`` is a summary a flush wrote (not a message anyone appended)."""
    return message.content_type == "summary" and message.covers is not None
