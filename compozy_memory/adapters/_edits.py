"""Edits the frameworks ask for that a memory has no script for: removing one message by
index, inserting one at an index, or swapping a run of the conversation for another (a
compaction).

Each is a compare-and-set through :meth:`MemoryInstance.replace`: read the conversation from
one state of the memory (:meth:`MemoryInstance.conversation`, with that state's version),
then replace the live messages with the kept ones only if nothing at all was written since
(``if_version``: no append, trim, flush, replace or clear, even one that brought the last id
back to the same number), trying again on a conflict. A replace moves the old messages to the
archive (capped by ``MemoryPolicy.archive_max``) and gives the kept ones new ids, so these
edits cost O(messages) and are meant for the rare correction, not the hot path. Each replace
carries a dedupe key of its own (the handle's default, one per call), so its retry after a
lost reply is not applied twice, and two editors making the same edit of the same state are
told apart: one succeeds, the other reads again. They are steps, for either handle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from compozy_memory._model.messages import Message
from compozy_memory._model.results import Conversation
from compozy_memory._store.core import MemoryCore, MessageInput
from compozy_memory._wire.steps import Steps
from compozy_memory.errors import ConflictError

__all__ = ["edit_live", "insert_at", "remove_at", "replace_if_unchanged"]

_MAX_ATTEMPTS = 100

T = TypeVar("T")


def remove_at(memory: MemoryCore, index: int) -> Steps[Message | None]:
    """Remove the live message at ``index`` (negative counts from the newest); return it, or
    None if there is no such message."""

    def without(messages: list[MessageInput]) -> tuple[list[MessageInput], Message | None]:
        if not -len(messages) <= index < len(messages):
            return messages, None
        removed = messages.pop(index)
        assert isinstance(removed, Message)
        return messages, removed

    return (yield from edit_live(memory, without, f"remove message {index}"))


def insert_at(memory: MemoryCore, index: int, message: MessageInput) -> Steps[None]:
    """Insert ``message`` before the live message at ``index`` (``list.insert`` rules: past
    the end appends, negative counts from the newest)."""

    def with_it(messages: list[MessageInput]) -> tuple[list[MessageInput], None]:
        messages.insert(index, message)
        return messages, None

    yield from edit_live(memory, with_it, f"insert a message at {index}")


def edit_live(
    memory: MemoryCore,
    edit: Callable[[list[MessageInput]], tuple[list[MessageInput], T]],
    what: str,
) -> Steps[T]:
    """Apply ``edit`` (the live messages in, the kept ones and a result out) by
    compare-and-set, again on each conflict; a result of None with nothing changed replaces
    nothing."""
    for _ in range(_MAX_ATTEMPTS):
        read = yield from memory.steps.conversation()
        before: list[MessageInput] = list(read.messages)
        kept, result = edit(list(before))
        if result is None and kept == before:
            return result
        if (yield from replace_if_unchanged(memory, read, kept)):
            return result
    raise ConflictError(
        f"could not {what}: the memory changed on each of {_MAX_ATTEMPTS} tries", key=memory.key
    )


def replace_if_unchanged(
    memory: MemoryCore, read: Conversation, kept: Sequence[MessageInput]
) -> Steps[bool]:
    """Replace the live messages with ``kept`` if nothing was written since ``read``; False,
    changing nothing, if something was."""
    try:
        yield from memory.steps.replace(kept, if_version=read.version)
    except ConflictError:
        return False
    return True
