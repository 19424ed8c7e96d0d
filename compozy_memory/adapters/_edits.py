"""Edits the frameworks ask for that a memory has no script for: removing one message by
index, or swapping a run of the conversation for another (a compaction).

Each is a compare-and-set through :meth:`MemoryInstance.replace`: read the conversation from
one state of the memory (:meth:`MemoryInstance.conversation`, with that state's version),
then replace the live messages with the kept ones only if nothing at all was written since
(``if_version``: no append, trim, flush, replace or clear, even one that brought the last id
back to the same number), trying again on a conflict. A replace moves the old messages to the
archive (capped by ``MemoryPolicy.archive_max``) and gives the kept ones new ids, so these
edits cost O(messages) and are meant for the rare correction, not the hot path. Each replace
carries a dedupe key of its own (the handle's default, one per call), so its retry after a
lost reply is not applied twice, and two editors making the same edit of the same state are
told apart: one succeeds, the other reads again.
"""

from __future__ import annotations

from collections.abc import Sequence

from compozy_memory._model.messages import Message
from compozy_memory._model.results import Conversation
from compozy_memory._store.instance import MemoryInstance, MessageInput
from compozy_memory.errors import ConflictError

__all__ = ["remove_at", "replace_if_unchanged"]

_MAX_ATTEMPTS = 100


async def remove_at(memory: MemoryInstance, index: int) -> Message | None:
    """Remove the live message at ``index`` (negative counts from the newest); return it, or
    None if there is no such message."""
    for _ in range(_MAX_ATTEMPTS):
        read = await memory.conversation()
        messages = list(read.messages)
        if not -len(messages) <= index < len(messages):
            return None
        removed = messages.pop(index)
        if await replace_if_unchanged(memory, read, messages):
            return removed
    raise ConflictError(
        f"could not remove message {index}: the memory changed on each of {_MAX_ATTEMPTS} tries",
        key=memory.key,
    )


async def replace_if_unchanged(
    memory: MemoryInstance, read: Conversation, kept: Sequence[MessageInput]
) -> bool:
    """Replace the live messages with ``kept`` if nothing was written since ``read``; False,
    changing nothing, if something was."""
    try:
        await memory.replace(kept, if_version=read.version)
    except ConflictError:
        return False
    return True
