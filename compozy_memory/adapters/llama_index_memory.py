"""An ``AsyncDBChatStore`` for LlamaIndex's ``Memory`` class (extra ``llama-index``).

Current LlamaIndex builds short-term memory with ``Memory.from_defaults(...)``, whose store is
an ``AsyncDBChatStore``: a FIFO queue of ``ACTIVE`` messages per key, from which ``Memory``
archives the oldest as the token limit is passed (handing them to its memory blocks).
:class:`CompozyDBChatStore` is that store over compozy memories, one per key, made like
:class:`~compozy_memory.adapters.llama_index.CompozyChatStore` (``from_client``,
``from_manager``, or a factory)::

    memory = Memory.from_defaults(session_id="chat-1", token_limit=4000,
                                  chat_store=CompozyDBChatStore.from_manager(manager, "support"))

What maps to what:

* ``ACTIVE`` messages are the memory's summaries (first, as marked ``system`` messages) and
  its live messages; ``ARCHIVED`` ones its archive (what trims, replaces and flushes moved
  out, oldest first). ``status=None`` is the archive, then the active messages.
* ``add_message(s)``: ``append_many``, ``ACTIVE`` only (the archive is written by moves).
* ``archive_oldest_messages(n)`` and ``delete_oldest_messages(n)``: ``trim(keep_messages=
  live - n)``, returning the oldest ``n`` live messages as read just before (like every
  removal in compozy, a deletion moves them to the archive). A write landing between the
  read and the trim moves more of the oldest (to the archive: nothing is lost) than were
  returned. ``n`` counts over the active messages, summaries first (never removed).
* ``delete_message(idx)``: a compare-and-set ``replace`` without it
  (:mod:`compozy_memory.adapters._edits`). A replace archives the whole conversation it
  replaced, so the archive then holds a copy of each message kept.
* ``set_messages``: ``replace``; ``delete_messages(status=None)``: ``clear()``;
  ``delete_messages(ACTIVE)``: ``replace([])`` (the archive keeps them).
* ``count_messages``: from the memory's totals, one read.

Every method runs on the memory's async handle when its client belongs to the running loop,
else on its blocking twin in a worker thread, so ``Memory``'s synchronous wrappers (which run
its coroutines on a loop of their own) work too.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from llama_index.core.llms import ChatMessage
from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore, MessageStatus
from pydantic import ConfigDict, Field, PrivateAttr

from compozy_memory._model.limits import MAX_READ
from compozy_memory._model.messages import Message
from compozy_memory._store.core import MemoryCore
from compozy_memory._wire.steps import Steps
from compozy_memory.adapters._door import running_loop
from compozy_memory.adapters._edits import remove_at
from compozy_memory.adapters._reads import summaries_then_messages
from compozy_memory.adapters.llama_index import (
    ChatKeyListing,
    KeyedMemories,
    MemoryFactory,
    from_llama_index,
    to_llama_index,
)
from compozy_memory.errors import UsageError

__all__ = ["CompozyDBChatStore"]


class CompozyDBChatStore(KeyedMemories, AsyncDBChatStore):
    """LlamaIndex's ``AsyncDBChatStore`` (the store of ``Memory``), one compozy memory per
    key (see the module's docstring)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory_for: MemoryFactory = Field(exclude=True)
    listing: ChatKeyListing | None = Field(default=None, exclude=True)
    _home: weakref.ref[asyncio.AbstractEventLoop] | None = PrivateAttr(default_factory=running_loop)

    @classmethod
    def class_name(cls) -> str:
        return "CompozyDBChatStore"

    @classmethod
    def from_client(
        cls, client: Any, *, project: str, key_prefix: str = "llama-index:", **options: Any
    ) -> CompozyDBChatStore:
        """Key ``k`` is the memory ``<key_prefix>k`` of ``project`` on ``client``."""
        return cls(**cls._from_client(client, project, key_prefix, options))

    @classmethod
    def from_manager(
        cls, manager: Any, memory_id: str, *, context: Mapping[str, Any] | None = None
    ) -> CompozyDBChatStore:
        """Key ``k`` is the instance ``<memory_id>:k`` of the manager's memory ``memory_id``
        (its policy, TTL and flushing apply)."""
        return cls(**cls._from_manager(manager, memory_id, context))

    async def get_messages(
        self,
        key: str,
        status: MessageStatus | None = MessageStatus.ACTIVE,
        limit: int | None = None,
        offset: int | None = None,
    ) -> list[ChatMessage]:
        if (limit is not None and limit < 0) or (offset is not None and offset < 0):
            raise UsageError(f"limit and offset are >= 0, got {limit!r} and {offset!r}")

        def steps(memory: MemoryCore) -> Steps[list[Message]]:
            found: list[Message] = []
            if status != MessageStatus.ACTIVE:
                found += yield from _archive(memory)
            if status != MessageStatus.ARCHIVED:
                found += yield from summaries_then_messages(memory)
            start = offset or 0
            return found[start : None if limit is None else start + limit]

        stored = await (await self.adoor(key)).acall(steps)
        return [to_llama_index(m) for m in stored]

    async def count_messages(
        self, key: str, status: MessageStatus | None = MessageStatus.ACTIVE
    ) -> int:
        health = await (await self.adoor(key)).acall(lambda m: m.steps.health())
        active = health.message_count + health.summaries
        if status == MessageStatus.ACTIVE:
            return active
        if status == MessageStatus.ARCHIVED:
            return health.archive_length
        return active + health.archive_length

    async def add_message(
        self, key: str, message: ChatMessage, status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        await self.add_messages(key, [message], status)

    async def add_messages(
        self,
        key: str,
        messages: list[ChatMessage],
        status: MessageStatus = MessageStatus.ACTIVE,
    ) -> None:
        _active_only(status, "add")
        if not messages:
            return
        converted = [from_llama_index(m) for m in messages]
        await (await self.adoor(key)).acall(lambda m: m.steps.append_many(converted))

    async def set_messages(
        self,
        key: str,
        messages: list[ChatMessage],
        status: MessageStatus = MessageStatus.ACTIVE,
    ) -> None:
        _active_only(status, "set")
        door = await self.adoor(key)
        converted = [from_llama_index(m) for m in messages if not _is_marked(m)]
        await door.acall(lambda m: m.steps.replace(converted))

    async def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        removed = await (await self.adoor(key)).acall(_taking(idx))
        return None if removed is None else to_llama_index(removed)

    async def delete_messages(self, key: str, status: MessageStatus | None = None) -> None:
        if status == MessageStatus.ARCHIVED:
            raise UsageError("the archive is cleared with the memory: delete_messages(key)")
        door = await self.adoor(key)
        if status is None:
            await door.acall(lambda m: m.steps.clear())
        else:
            await door.acall(lambda m: m.steps.replace([]))

    async def delete_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        return await self.archive_oldest_messages(key, n)

    async def archive_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        if not isinstance(n, int) or n < 0:
            raise UsageError(f"n is a count of messages, got {n!r}")

        def steps(memory: MemoryCore) -> Steps[list[Message]]:
            read = yield from memory.steps.conversation()
            live = list(read.messages)
            oldest = live[: max(0, n - len(read.summaries))]
            if oldest:
                yield from memory.steps.trim(keep_messages=len(live) - len(oldest))
            return oldest

        archived = await (await self.adoor(key)).acall(steps)
        return [to_llama_index(m) for m in archived]

    async def get_keys(self) -> list[str]:
        return await self._keys().keys()


def _archive(memory: MemoryCore) -> Steps[list[Message]]:
    """The whole archive, oldest first, a page a call."""
    found: list[Message] = []
    while True:
        page = yield from memory.steps.recall(len(found), MAX_READ)
        found += page
        if len(page) < MAX_READ:
            return found


def _taking(idx: int) -> Callable[[MemoryCore], Steps[Message | None]]:
    """Steps removing the active message at ``idx`` (summaries first, never removed; a
    negative ``idx`` counts from the newest) by compare-and-set; the removed one."""

    def steps(memory: MemoryCore) -> Steps[Message | None]:
        at = idx
        if at >= 0:
            at -= len((yield from memory.steps.snapshot(1)).summaries)
            if at < 0:
                return None
        return (yield from remove_at(memory, at))

    return steps


def _active_only(status: MessageStatus, what: str) -> None:
    if status != MessageStatus.ACTIVE:
        raise UsageError(
            f"{what}: messages are written ACTIVE; the archive is written by trims and flushes"
        )


def _is_marked(message: ChatMessage) -> bool:
    return bool(message.additional_kwargs.get("compozy_summary"))
