"""Edits the frameworks ask for that a memory has no script for: removing its newest
message, or one message by index.

Each is a compare-and-set through :meth:`MemoryInstance.replace`: read the live messages
atomically (:meth:`snapshot`), then replace them with the kept ones only if nothing was
appended since (``if_last_id`` and ``if_incarnation``), trying again on a conflict. A replace
moves the old messages to the archive (capped by ``MemoryPolicy.archive_max``) and gives the
kept ones new ids, so these edits cost O(messages) and are meant for the rare correction, not
the hot path.

Two limits of that compare-and-set, both of ``replace`` itself:

* it guards against appends only: a ``trim``, ``flush`` or ``clear`` that lands between the
  snapshot and the replace is undone by it (the replace writes back what the snapshot read,
  less the removed message);
* a replace that leaves the memory empty does not move ``last_id``, so two editors of the same
  one-message memory would both succeed. The replace that empties a memory therefore carries a
  dedupe key naming the state it edits (``incarnation`` and ``last_id``): the second editor's
  call is a duplicate and it reads again. (If the reply of that call is lost and the handle
  retries it, the retry is a duplicate too, and the edit reports that it removed nothing
  although it did.)
"""

from __future__ import annotations

from collections.abc import Sequence

from compozy_memory._model.messages import Message
from compozy_memory._model.results import Snapshot
from compozy_memory._store.instance import MemoryInstance, MessageInput
from compozy_memory.errors import ConflictError

__all__ = ["remove_at", "replace_if_unchanged"]

_MAX_ATTEMPTS = 100


async def remove_at(memory: MemoryInstance, index: int) -> Message | None:
    """Remove the live message at ``index`` (negative counts from the newest); return it, or
    None if there is no such message."""
    for _ in range(_MAX_ATTEMPTS):
        snap = await memory.snapshot(0)
        messages = list(snap.messages)
        if not -len(messages) <= index < len(messages):
            return None
        removed = messages.pop(index)
        if await replace_if_unchanged(memory, snap, messages):
            return removed
    raise ConflictError(
        f"could not remove message {index}: the memory changed on each of {_MAX_ATTEMPTS} tries",
        key=memory.key,
    )


async def replace_if_unchanged(
    memory: MemoryInstance, snap: Snapshot, kept: Sequence[MessageInput]
) -> bool:
    """Replace the live messages with ``kept`` if none was appended since ``snap`` was read
    (in the same incarnation); False, changing nothing, if one was."""
    try:
        result = await memory.replace(
            kept,
            if_last_id=snap.last_id,
            if_incarnation=snap.incarnation,
            dedupe_key=None if kept else f"compozy-adapter-edit:{snap.incarnation}:{snap.last_id}",
        )
    except ConflictError:
        return False
    return bool(kept) or not result.duplicate
