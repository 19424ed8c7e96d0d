"""A LlamaIndex chat store kept in compozy memories (extra ``llama-index``).

:class:`CompozyChatStore` implements ``llama_index.core``'s ``BaseChatStore``: each chat key is
one memory (a :class:`~compozy_memory.MemoryInstance` or a
:class:`~compozy_memory.SyncMemoryInstance`), opened by a factory from the key. For the
``Memory`` class of current LlamaIndex, which takes an ``AsyncDBChatStore``, use
:class:`~compozy_memory.adapters.llama_index_memory.CompozyDBChatStore` over the same memories.
Make it with :meth:`CompozyChatStore.from_client` (memory ``<key_prefix><key>`` of a project),
:meth:`CompozyChatStore.from_manager` (memory ``<memory id>:<key>`` of a
:class:`~compozy_memory.MemoryManager`, with that memory's policy and flushing), or from any
factory (then ``get_keys`` needs a ``listing``).

What maps to what:

* ``add_message`` / ``async_add_message``: ``append_many([message])``: atomic, at most once
  (the handle's random dedupe key; LlamaIndex gives the store no idempotency key). With
  ``idx``, the message is inserted before the ``idx``-th of ``get_messages`` by a
  compare-and-set ``replace`` (as ``delete_message``; a summary stays first).
* ``get_messages`` / ``aget_messages``: the memory's summaries (``system`` messages marked
  ``additional_kwargs["compozy_summary"]``), then every live message, oldest first, in one
  atomic read. ``set_messages`` leaves marked summaries out (they stay the memory's), and
  ``delete_message(key, idx)`` counts ``idx`` over that list (a summary is not deleted).
* ``set_messages`` / ``aset_messages``: ``replace(messages)``, unconditionally (the old ones go
  to the archive). Lists above 10,000 messages are replaced, then appended, in several calls.
* ``delete_messages`` / ``adelete_messages``: reads the messages, then ``clear()`` (which also
  drops summaries and the archive); returns what it read, None for an empty key. A message
  appended between the read and the clear is deleted without being returned.
* ``delete_message(key, idx)`` and ``delete_last_message(key)`` (and async variants): a
  compare-and-set ``replace`` without that message (see
  :mod:`compozy_memory.adapters._edits`: O(messages), and the old messages go to the archive).
  ``idx`` counts from the oldest; negative counts from the newest, as ``list.pop`` does.
* ``get_keys`` / ``aget_keys``: no index of chat keys exists, so it SCANs the server(s) for
  the ``meta`` keys of the project's memories under the prefix (every primary of a Cluster),
  decodes them, and keeps those with live messages: O(keys in the database), for
  administration, not per request. Keys whose encoded form was shortened (over 512
  characters) cannot be decoded and are not listed; a key emptied by ``set_messages(key, [])``
  or a delete is not listed either.

A ``ChatMessage`` is stored as a memory message: roles ``system``, ``developer``, ``user`` and
``assistant`` stay, ``chatbot`` and ``model`` become ``assistant``, ``tool`` and ``function``
become ``tool`` when ``additional_kwargs["tool_call_id"]`` names the call (else ``user``).
Text blocks become the content (tokens are counted from it); other blocks (images, audio...)
are kept as LlamaIndex wrote them and their text, if any, is the content. Everything else of
the message (``additional_kwargs``, block fields) is kept in ``metadata["llama_index"]``, so a
message reads back equal to the one added, as long as ``model_dump(mode="json")`` keeps it.

Sync methods run on the memory's blocking twin in the calling thread (so
``ChatMemoryBuffer.aget``, which runs the sync ``get`` in a thread, works beside the async
``aput`` of ``await chat_engine.achat(...)``); async methods run on the memory's async handle
when its client belongs to the running loop, else on the twin in a worker thread (see
:mod:`compozy_memory.adapters._door`). The factory of :meth:`CompozyChatStore.from_manager`
opens memories without awaiting; a coroutine factory of your own serves the async methods
only.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from llama_index.core.llms import ChatMessage
from llama_index.core.storage.chat_store.base import BaseChatStore
from pydantic import ConfigDict, Field, PrivateAttr

from compozy_memory._config.agents import MemoryReference
from compozy_memory._io.client_calls import is_blocking, is_cluster
from compozy_memory._io.connection import sync_twin
from compozy_memory._manager import MemoryManager
from compozy_memory._model.keys import decode_key, encode_key, validate_project
from compozy_memory._model.limits import MAX_BATCH
from compozy_memory._model.messages import Message
from compozy_memory._store.core import MemoryCore
from compozy_memory._store.instance import MemoryInstance
from compozy_memory._store.sync_instance import SyncMemoryInstance
from compozy_memory._wire.steps import Steps
from compozy_memory.adapters._door import AnyMemory, Door, running_loop
from compozy_memory.adapters._edits import insert_at, remove_at
from compozy_memory.adapters._reads import is_summary, summaries_then_messages
from compozy_memory.errors import ConfigurationError, UsageError

__all__ = [
    "ChatKeyListing",
    "CompozyChatStore",
    "KeyedMemories",
    "from_llama_index",
    "to_llama_index",
]

MemoryFactory = Callable[[str], AnyMemory | Awaitable[AnyMemory]]

_FIELD = "llama_index"
#: ``additional_kwargs`` key of the summaries ``get_messages`` shows first.
SUMMARY_MARK = "compozy_summary"
_ROLES = {
    "system": "system",
    "developer": "developer",
    "user": "user",
    "assistant": "assistant",
    "chatbot": "assistant",
    "model": "assistant",
}
# The end of an encoded prefix that may encode differently once the key follows it.
_UNSTABLE_END = re.compile(r"_(x[0-9a-f]?)?$")


class ChatKeyListing:
    """Where the chat keys of a store live: memories of ``project`` whose key text starts
    with ``prefix`` (the chat key is the rest)."""

    # A plain class, not a dataclass: pydantic would try to resolve its field types.
    def __init__(self, client: Any, project: str, prefix: str) -> None:
        self.client = client
        self.project = validate_project(project)
        self.prefix = prefix

    async def keys(self) -> list[str]:
        """:meth:`keys_sync` in a worker thread (a scan of the whole database)."""
        return await asyncio.to_thread(self.keys_sync)

    def keys_sync(self) -> list[str]:
        """The chat keys with live messages, by SCAN (every primary of a Cluster)."""
        client = self.client
        blocking: Any = client if is_blocking(client) else sync_twin(client)
        encoded = _UNSTABLE_END.sub("", encode_key(self.prefix))
        pattern = f"compozy:{self.project}:memory:{{{encoded}*}}:meta"
        found: list[str] = []
        batch: list[str] = []
        for raw in blocking.scan_iter(match=pattern, count=1000):
            batch.append(raw.decode() if isinstance(raw, bytes) else str(raw))
            if len(batch) >= 500:
                found += self._live(blocking, batch)
                batch = []
        found += self._live(blocking, batch)
        return sorted(set(found))

    def _live(self, client: Any, metas: list[str]) -> list[str]:
        if not metas:
            return []
        if is_cluster(client):
            counts = [client.hget(m, "count") for m in metas]
        else:
            pipe = client.pipeline(transaction=False)
            for meta in metas:
                pipe.hget(meta, "count")
            counts = pipe.execute()
        keys = []
        for meta, count in zip(metas, counts, strict=True):
            if not count or int(count) <= 0:
                continue
            encoded = meta[meta.index("{") + 1 : meta.rindex("}")]
            try:
                text = decode_key(encoded)
            except ConfigurationError:
                continue  # shortened: only a digest of its text is left
            if text.startswith(self.prefix):
                keys.append(text[len(self.prefix) :])
        return keys


class KeyedMemories:
    """What both LlamaIndex stores share: a memory per chat key, reached through a door.

    ``memory_for`` opens the memory of a chat key (it may be a coroutine function, which
    then serves the async methods only); ``listing``, when given, is how ``get_keys`` finds
    the keys. Subclasses are pydantic models declaring those two fields."""

    memory_for: MemoryFactory
    listing: ChatKeyListing | None
    # The loop the store was made in (a private attribute of each pydantic subclass).
    _home: weakref.ref[asyncio.AbstractEventLoop] | None

    @classmethod
    def _from_client(
        cls, client: Any, project: str, key_prefix: str, options: dict[str, Any]
    ) -> dict[str, Any]:
        validate_project(project)
        kind = SyncMemoryInstance if is_blocking(client) else MemoryInstance

        def open_memory(key: str) -> AnyMemory:
            return kind.open(client, project=project, key=key_prefix + key, **options)

        return {"memory_for": open_memory, "listing": ChatKeyListing(client, project, key_prefix)}

    @classmethod
    def _from_manager(
        cls, manager: Any, memory_id: str, context: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        manager.registry.get(memory_id)  # fail now on an unknown memory
        reference = MemoryReference(memory_id, key="{{ chat_key }}")
        values = dict(context or {})
        lookup = manager.lookup if isinstance(manager, MemoryManager) else manager.get

        def open_memory(key: str) -> AnyMemory:
            return lookup(reference, {**values, "chat_key": key})

        listing = ChatKeyListing(manager.client, manager.registry.project, f"{memory_id}:")
        return {"memory_for": open_memory, "listing": listing}

    def door(self, key: str) -> Door:
        """The memory of chat key ``key``, for a sync caller."""
        opened = self.memory_for(key)
        if inspect.isawaitable(opened):
            if inspect.iscoroutine(opened):
                opened.close()
            raise UsageError(
                "this store's memory factory is a coroutine function: its synchronous "
                "methods need a factory that returns the memory (from_client, from_manager)"
            )
        return Door(opened, self._home)

    async def adoor(self, key: str) -> Door:
        """The memory of chat key ``key``, for an async caller."""
        opened = self.memory_for(key)
        return Door(await opened if inspect.isawaitable(opened) else opened, self._home)

    async def memory(self, key: str) -> AnyMemory:
        """The memory of chat key ``key``."""
        return (await self.adoor(key)).memory

    def _keys(self) -> ChatKeyListing:
        if self.listing is None:
            raise UsageError(
                "get_keys needs a listing: make the store with from_client or from_manager, "
                "or pass listing=ChatKeyListing(client, project, prefix)"
            )
        return self.listing


class CompozyChatStore(KeyedMemories, BaseChatStore):
    """LlamaIndex's chat store interface, one compozy memory per chat key.

    ``memory_for`` opens the memory of a chat key (it may be a coroutine function);
    ``listing``, when given, is how ``get_keys`` finds the keys.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory_for: MemoryFactory = Field(exclude=True)
    listing: ChatKeyListing | None = Field(default=None, exclude=True)
    _home: weakref.ref[asyncio.AbstractEventLoop] | None = PrivateAttr(default_factory=running_loop)

    @classmethod
    def class_name(cls) -> str:
        return "CompozyChatStore"

    @classmethod
    def from_client(
        cls,
        client: Any,
        *,
        project: str,
        key_prefix: str = "llama-index:",
        **options: Any,
    ) -> CompozyChatStore:
        """Chat key ``k`` is the memory ``<key_prefix>k`` of ``project`` on ``client``
        (``redis.asyncio`` or blocking); ``options`` go to the handle (``policy``,
        ``counter``, ``retry``...)."""
        return cls(**cls._from_client(client, project, key_prefix, options))

    @classmethod
    def from_manager(
        cls,
        manager: Any,
        memory_id: str,
        *,
        context: Mapping[str, Any] | None = None,
    ) -> CompozyChatStore:
        """Chat key ``k`` is the instance ``<memory_id>:k`` of the manager's memory
        ``memory_id`` (a MemoryManager or a SyncMemoryManager: its policy, TTL and flushing
        apply). ``context`` adds what else the memory's settings read; the key is passed as
        ``chat_key``."""
        return cls(**cls._from_manager(manager, memory_id, context))

    # -- async --------------------------------------------------------------------------

    async def aset_messages(self, key: str, messages: list[ChatMessage]) -> None:
        await (await self.adoor(key)).acall(_setting(messages))

    async def aget_messages(self, key: str) -> list[ChatMessage]:
        stored = await (await self.adoor(key)).acall(summaries_then_messages)
        return [to_llama_index(m) for m in stored]

    async def async_add_message(
        self, key: str, message: ChatMessage, idx: int | None = None
    ) -> None:
        await (await self.adoor(key)).acall(_adding(message, idx))

    async def adelete_messages(self, key: str) -> list[ChatMessage] | None:
        stored = await (await self.adoor(key)).acall(_deleting)
        return [to_llama_index(m) for m in stored] or None

    async def adelete_message(self, key: str, idx: int) -> ChatMessage | None:
        removed = await (await self.adoor(key)).acall(_removing(idx))
        return None if removed is None else to_llama_index(removed)

    async def adelete_last_message(self, key: str) -> ChatMessage | None:
        return await self.adelete_message(key, -1)

    async def aget_keys(self) -> list[str]:
        return await self._keys().keys()

    # -- sync ---------------------------------------------------------------------------

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        self.door(key).call(_setting(messages))

    def get_messages(self, key: str) -> list[ChatMessage]:
        return [to_llama_index(m) for m in self.door(key).call(summaries_then_messages)]

    def add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        self.door(key).call(_adding(message, idx))

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        return [to_llama_index(m) for m in self.door(key).call(_deleting)] or None

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        removed = self.door(key).call(_removing(idx))
        return None if removed is None else to_llama_index(removed)

    def delete_last_message(self, key: str) -> ChatMessage | None:
        return self.delete_message(key, -1)

    def get_keys(self) -> list[str]:
        return self._keys().keys_sync()


def _setting(messages: list[ChatMessage]) -> Callable[[MemoryCore], Steps[None]]:
    # Summaries read back by get_messages stay the memory's own: not stored as messages.
    converted = [from_llama_index(m) for m in messages if not m.additional_kwargs.get(SUMMARY_MARK)]

    def steps(memory: MemoryCore) -> Steps[None]:
        yield from memory.steps.replace(converted[:MAX_BATCH])
        for start in range(MAX_BATCH, len(converted), MAX_BATCH):
            yield from memory.steps.append_many(converted[start : start + MAX_BATCH])

    return steps


def _adding(message: ChatMessage, idx: int | None) -> Callable[[MemoryCore], Steps[None]]:
    converted = from_llama_index(message)

    def steps(memory: MemoryCore) -> Steps[None]:
        if idx is None:
            yield from memory.steps.append_many([converted])
            return
        at = idx
        if at >= 0:  # idx counts over get_messages, summaries first; they stay first
            at = max(0, at - len((yield from memory.steps.snapshot(1)).summaries))
        yield from insert_at(memory, at, converted)

    return steps


def _deleting(memory: MemoryCore) -> Steps[list[Message]]:
    stored = yield from memory.steps.read(0, -1)
    yield from memory.steps.clear()
    return stored


def _removing(idx: int) -> Callable[[MemoryCore], Steps[Message | None]]:
    def steps(memory: MemoryCore) -> Steps[Message | None]:
        at = idx
        if at >= 0:  # idx counts over get_messages, summaries first; they cannot be deleted
            at -= len((yield from memory.steps.snapshot(1)).summaries)
            if at < 0:
                return None
        return (yield from remove_at(memory, at))

    return steps


def from_llama_index(message: ChatMessage) -> dict[str, Any]:
    """The memory message that stores ``message`` (see the module's docstring)."""
    data: dict[str, Any] = message.model_dump(mode="json")
    role = str(data.get("role"))
    stored: dict[str, Any] = {"role": _ROLES.get(role, "user")}
    call_id = (data.get("additional_kwargs") or {}).get("tool_call_id")
    if role in ("tool", "function") and isinstance(call_id, str) and call_id:
        stored["role"] = "tool"
        stored["tool_call_id"] = call_id
    blocks = data.get("blocks") or []
    if blocks and all(
        b.keys() == {"block_type", "text"} and b["block_type"] == "text" for b in blocks
    ):
        del data["blocks"]
        texts = [str(b["text"]) for b in blocks]
        stored["content"] = (
            texts[0] if len(texts) == 1 else [{"type": "text", "text": t} for t in texts]
        )
    else:
        stored["content"] = message.content or ""
    stored["metadata"] = {_FIELD: data}
    return stored


def to_llama_index(message: Message) -> ChatMessage:
    """The ``ChatMessage`` ``message`` stores: the one added, for messages this adapter wrote;
    else one made from its role and text."""
    kept: Any = (message.metadata or {}).get(_FIELD)
    if is_summary(message):
        return ChatMessage(
            role="system", content=message.text, additional_kwargs={SUMMARY_MARK: True}
        )
    if isinstance(kept, dict):
        data = dict(kept)
        if "blocks" not in data:
            texts = (
                [message.content]
                if isinstance(message.content, str)
                else [str(b.get("text", "")) for b in message.content]
            )
            data["blocks"] = [{"block_type": "text", "text": t} for t in texts]
        return ChatMessage.model_validate(data)
    extra: dict[str, Any] = {}
    if message.tool_call_id:
        extra["tool_call_id"] = message.tool_call_id
    return ChatMessage(role=message.role, content=message.text, additional_kwargs=extra)
