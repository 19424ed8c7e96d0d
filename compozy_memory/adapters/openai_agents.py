"""An OpenAI Agents SDK session kept in a compozy memory (extra ``openai-agents``).

:class:`CompozySession` implements the SDK's ``Session`` protocol over one memory (a
:class:`~compozy_memory.MemoryInstance` or a :class:`~compozy_memory.SyncMemoryInstance`): one
memory is one session. Build it on a memory, or
with :meth:`CompozySession.from_manager` on a memory a :class:`~compozy_memory.MemoryManager`
opens (its policy and flushing apply), or :meth:`CompozySession.from_url`.

What maps to what:

* ``add_items(items)``: one ``append_many`` of the whole list, atomic and applied at most once
  (the handle's random dedupe key; the SDK gives the session no idempotency key). Lists above
  the script's limit (10,000 items) go in several appends.
* ``get_items(limit)``: the memory's summaries, as ``system`` message items, then every live
  item (one atomic read); with ``limit`` (or ``session_settings.limit``, as the SDK's
  sessions do), the newest ``limit`` of that sequence, read with ``read(-limit, -1)``.
* ``pop_item()``: removes the newest message by a compare-and-set ``replace`` (see
  :mod:`compozy_memory.adapters._edits`: O(items), the old messages go to the archive).
* ``clear_session()``: ``clear()``.
* ``session_settings``: a ``SessionSettings`` or a dict, coerced as the SDK's own sessions
  coerce it (unknown keys raise); ``SessionSettings()`` when not given.
* Responses compaction (``OpenAIResponsesCompactionSession`` over this session): the
  snapshot hook reads the newest items and replaces a suffix of them with a compare-and-set
  ``replace(if_last_id=, if_incarnation=)``, so a compaction that raced an append anywhere in
  the fleet changes nothing and is retried by the SDK, never a clear followed by an add.
* ``close()``: closes the client when the session opened it (:meth:`from_url`); a closed
  session refuses further calls.
* Event loops: the SDK may call a session on any loop (``Runner.run_sync`` makes a new one
  per call). On the loop its client belongs to, the session uses the memory's async handle;
  on any other, its blocking twin in a worker thread (see
  :mod:`compozy_memory.adapters._door`), so a session made on one loop works on the next.

Each input item is one memory message, and ``get_items`` returns exactly the dicts that were
added (equal, key order included), as long as they are JSON:

* a message item (``role`` ``user``, ``assistant``, ``system`` or ``developer``) keeps its role,
  and its ``content`` (text, or content parts, which all carry a ``type``) becomes the
  message's content, from which tokens are counted;
* a ``*_call_output`` item with a ``call_id`` becomes a ``tool`` message answering that call,
  with its ``output`` as content;
* a ``function_call`` becomes an ``assistant`` message with one OpenAI tool call (its
  ``call_id``, ``name`` and ``arguments``), so a window never starts with an orphaned output;
* any other item (``reasoning``, ``computer_call``, ``file_search_call``, ...) becomes an
  ``assistant`` message with empty content: only the message framing counts towards tokens.

The message's ``type`` is the item's ``type`` (``message`` when it has none), so
``MemoryPolicy.content_priorities`` can give item kinds their own priorities. The rest of the
item is kept in ``metadata["openai_agents"]``. Items written by other code come back as
``{"role", "content"}`` messages, or ``function_call_output`` items for tool messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from agents.memory.session import _CompactionSnapshot
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from compozy_memory._config.agents import MemoryReference
from compozy_memory._io.connection import close_twin, connect
from compozy_memory._manager import MemoryManager
from compozy_memory._model.keys import decode_key
from compozy_memory._model.limits import MAX_BATCH
from compozy_memory._model.messages import Message
from compozy_memory._store.core import MemoryCore, MessageInput
from compozy_memory._store.instance import MemoryInstance
from compozy_memory._wire.steps import Steps
from compozy_memory.adapters._door import AnyMemory, Door, running_loop
from compozy_memory.adapters._edits import remove_at, replace_if_unchanged
from compozy_memory.adapters._reads import summaries_then_messages
from compozy_memory.errors import ConfigurationError, SessionClosedError

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

__all__ = ["CompozySession", "from_item", "to_item"]

_FIELD = "openai_agents"
_MESSAGE_ROLES = {"user", "assistant", "system", "developer"}


class CompozySession:
    """The SDK's ``Session`` protocol over one compozy memory.

    ``session_id`` defaults to the memory's key text; ``session_settings`` is a
    ``SessionSettings`` or a dict of its fields.
    """

    def __init__(
        self,
        memory: AnyMemory,
        *,
        session_id: str | None = None,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> None:
        self.memory = memory
        self._door = Door(memory, running_loop())
        self.session_id = session_id if session_id is not None else _key_text(memory)
        self.session_settings: SessionSettings | None = (
            SessionSettings()
            if session_settings is None
            else coerce_session_settings(cast("SessionSettings | dict[str, Any]", session_settings))
        )
        self._owns_client = False
        self._closed = False

    @classmethod
    def from_url(
        cls,
        session_id: str,
        *,
        url: str,
        project: str,
        key_prefix: str = "openai-agents:",
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        **options: Any,
    ) -> CompozySession:
        """A session on memory ``<key_prefix><session_id>`` of ``project`` at ``url``, on a
        client of its own that :meth:`close` closes; ``options`` go to
        :class:`MemoryInstance` (``policy``, ``counter``, ``retry``...)."""
        memory = MemoryInstance.open(
            connect(url), project=project, key=key_prefix + session_id, **options
        )
        session = cls(memory, session_id=session_id, session_settings=session_settings)
        session._owns_client = True
        return session

    @classmethod
    async def from_manager(
        cls,
        manager: MemoryManager,
        memory_id: str,
        session_id: str,
        *,
        context: Mapping[str, Any] | None = None,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> CompozySession:
        """The session ``session_id`` as instance ``<memory_id>:<session_id>`` of the
        manager's memory ``memory_id``: its policy, TTL and flushing apply, so the session
        is summarised as it grows. ``context`` adds what else the memory's settings read;
        the session id is passed as ``session_id``."""
        reference = MemoryReference(memory_id, key="{{ session_id }}")
        memory = await manager.get(reference, {**(context or {}), "session_id": session_id})
        return cls(memory, session_id=session_id, session_settings=session_settings)

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The summaries, then every item, or the newest ``limit`` of those, oldest first."""
        self._check_open()
        chosen = resolve_session_limit(limit, self.session_settings)
        stored = await self._door.acall(lambda m: summaries_then_messages(m, chosen))
        return [to_item(m) for m in stored]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        self._check_open()
        converted = [from_item(item) for item in items]

        def appending(memory: MemoryCore) -> Steps[None]:
            for start in range(0, len(converted), MAX_BATCH):
                batch = converted[start : start + MAX_BATCH]
                yield from memory.steps.append_many(batch)

        await self._door.acall(appending)

    async def pop_item(self) -> TResponseInputItem | None:
        self._check_open()
        removed = await self._door.acall(lambda m: remove_at(m, -1))
        return None if removed is None else to_item(removed)

    async def clear_session(self) -> None:
        self._check_open()
        await self._door.acall(lambda m: m.steps.clear())

    async def close(self) -> None:
        """Refuse further calls; close the client if :meth:`from_url` opened it."""
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            memory = self.memory
            if isinstance(memory, MemoryInstance):
                close_twin(memory.client)
                await memory.client.aclose()
            else:
                memory.client.close()

    async def _get_compaction_snapshot(
        self,
        limit: int,
        *,
        prune_prefix: Callable[[TResponseInputItem], bool] | None = None,
    ) -> _CompactionSnapshot | None:
        """The newest ``limit`` items, and a compare-and-set replacement of a suffix of them
        (``OpenAIResponsesCompactionSession`` calls this). None for a subclass that changes
        how items are read or written: the snapshot must not bypass it."""
        self._check_open()
        if self._items_overridden():
            return None
        snap = await self._door.acall(lambda m: m.steps.conversation())
        live = list(snap.messages)
        tail = live[max(0, len(live) - limit) :]
        items = [to_item(m) for m in tail]

        async def replace_suffix(start: int, output: list[TResponseInputItem]) -> bool:
            if not tail[start:]:
                return False
            before = live[: len(live) - len(tail) + start]
            if prune_prefix is not None:
                while before and prune_prefix(to_item(before[0])):
                    before.pop(0)
            kept: list[MessageInput] = [*before, *(from_item(item) for item in output)]
            return await self._door.acall(lambda m: replace_if_unchanged(m, snap, kept))

        return _CompactionSnapshot(
            items, not snap.summaries and len(tail) == len(live), replace_suffix
        )

    async def _atomic_replace_items(self, items: list[TResponseInputItem]) -> bool:
        """Replace every item in one atomic ``replace`` (the compaction session's fallback
        when it has no snapshot to compare against). False, changing nothing, for a subclass
        that changes how items are read or written."""
        self._check_open()
        if self._items_overridden():
            return False
        converted = [from_item(item) for item in items]
        await self._door.acall(lambda m: m.steps.replace(converted))
        return True

    def _items_overridden(self) -> bool:
        kind = type(self)
        return any(
            getattr(kind, name) is not getattr(CompozySession, name)
            for name in ("get_items", "add_items", "pop_item", "clear_session")
        )

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(
                f"{type(self).__name__} is closed (session {self.session_id!r})",
                key=self.memory.key,
            )


def from_item(item: TResponseInputItem | dict[str, Any]) -> dict[str, Any]:
    """The memory message that stores ``item`` (see the module's docstring)."""
    original: dict[str, Any] = dict(cast("dict[str, Any]", item))
    kind = original.get("type", "message")
    role = original.get("role")
    stored: dict[str, Any] = {"type": str(kind)[:64] or "message"}
    payload: str | None = None
    if kind == "message" and role in _MESSAGE_ROLES:
        stored["role"] = role
        payload = "content"
    elif str(kind).endswith("_output") and _nonblank(original.get("call_id")):
        stored["role"] = "tool"
        stored["tool_call_id"] = original["call_id"]
        payload = "output"
    else:
        stored["role"] = "assistant"
        if kind == "function_call" and _nonblank(original.get("call_id")):
            stored["tool_calls"] = [
                {
                    "id": original["call_id"],
                    "type": "function",
                    "function": {
                        "name": original.get("name", ""),
                        "arguments": original.get("arguments", ""),
                    },
                }
            ]
    kept: dict[str, Any] = {"item": original}
    value = original.get(payload) if payload else None
    if payload and (isinstance(value, str) or _are_blocks(value)):
        kept["at"] = list(original).index(payload)
        kept["field"] = payload
        stored["content"] = value
        kept["item"] = {k: v for k, v in original.items() if k != payload}
    else:
        stored["content"] = ""
    stored["metadata"] = {_FIELD: kept}
    return stored


def to_item(message: Message) -> TResponseInputItem:
    """The item ``message`` stores: the one added, for messages this adapter wrote; else one
    made from its role and content."""
    kept: Any = (message.metadata or {}).get(_FIELD)
    if isinstance(kept, dict) and isinstance(kept.get("item"), dict):
        item: dict[str, Any] = dict(kept["item"])
        field, at = kept.get("field"), kept.get("at")
        if isinstance(field, str) and isinstance(at, int):
            pairs = list(item.items())
            pairs.insert(at, (field, message.content))
            item = dict(pairs)
        return cast("TResponseInputItem", item)
    if message.role == "tool" and message.tool_call_id:
        return cast(
            "TResponseInputItem",
            {
                "type": "function_call_output",
                "call_id": message.tool_call_id,
                "output": message.content if isinstance(message.content, str) else message.text,
            },
        )
    role = message.role if message.role in _MESSAGE_ROLES else "user"
    return cast("TResponseInputItem", {"role": role, "content": message.content})


def _key_text(memory: AnyMemory) -> str:
    try:
        return decode_key(memory.keys.key)
    except ConfigurationError:  # a shortened key: its text is gone, the key names it
        return memory.keys.key


def _nonblank(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def _are_blocks(content: object) -> bool:
    return isinstance(content, list) and all(
        isinstance(block, dict) and isinstance(block.get("type"), str) for block in content
    )
