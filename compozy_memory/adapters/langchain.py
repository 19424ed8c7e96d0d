"""A LangChain chat message history kept in a compozy memory (extra ``langchain``).

:class:`CompozyChatMessageHistory` implements ``langchain_core``'s ``BaseChatMessageHistory``
over one memory: a :class:`~compozy_memory.MemoryInstance` or a
:class:`~compozy_memory.SyncMemoryInstance`.

What maps to what:

* ``add_messages`` / ``aadd_messages``: one ``append_many`` of the whole batch, atomic and
  applied at most once (the handle's random dedupe key makes its own retries safe). Batches
  above the script's limit (10,000 messages) go in several appends.
* ``messages`` / ``aget_messages``: the memory's summaries (as ``SystemMessage``), then every
  live message, oldest first, in one atomic read; or, when the history was made with
  ``max_tokens``, ``context(max_tokens)``: the summaries, then the newest messages that fit.
  :meth:`CompozyChatMessageHistory.from_manager` opens a manager's memory, whose flushing
  keeps the history summarised as it grows.
* ``clear`` / ``aclear``: ``clear()`` (ids stay monotonic).

A LangChain message is stored as a memory message: ``human`` becomes role ``user``, ``ai``
``assistant``, ``system`` ``system``, ``tool`` ``tool`` (with its ``tool_call_id``), a
``ChatMessage`` keeps its role when the memory knows it (else ``user``), and a legacy
``FunctionMessage`` becomes a ``tool`` message answering ``function:<name>``. Text content, or
content blocks that each carry a ``type``, becomes the message's content (so tokens are
counted from it); an AI message's tool calls that have ids become OpenAI ``tool_calls``, so
windows never start with an orphaned tool result. Every other field (``id``, ``name``,
``additional_kwargs``, ``response_metadata``, ``usage_metadata``, ``tool_calls`` as LangChain
wrote them...) is kept in the message's ``metadata["langchain"]``, so a message reads back
equal to the one added, as long as its fields are JSON (``model_dump(mode="json")``).
Messages written by other code (and summaries) are read as ``HumanMessage``, ``AIMessage``,
``SystemMessage`` or ``ToolMessage`` by role.

Sync methods (``messages``, ``add_messages``, ``clear``) run on the memory's blocking twin in
the calling thread, so they work anywhere: in plain threads, and inside a running event loop
(``RunnableWithMessageHistory.invoke`` in an async handler stores its turns). Async methods
run on the memory's async handle when its client belongs to the running loop, else on the
twin in a worker thread (see :mod:`compozy_memory.adapters._door`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)

from compozy_memory._config.agents import MemoryReference
from compozy_memory._manager import MemoryManager
from compozy_memory._model.limits import MAX_BATCH
from compozy_memory._model.messages import Message
from compozy_memory._store.core import MemoryCore
from compozy_memory._wire.steps import Steps
from compozy_memory.adapters._door import AnyMemory, Door, running_loop
from compozy_memory.adapters._reads import summaries_then_messages

__all__ = ["CompozyChatMessageHistory", "from_langchain", "to_langchain"]

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_CORE_ROLES = {"system", "developer", "user", "assistant", "tool"}
_FIELD = "langchain"


class CompozyChatMessageHistory(BaseChatMessageHistory):
    """LangChain's chat history interface over one compozy memory.

    ``max_tokens``: when given, reads return the memory's ``context(max_tokens)`` (summaries,
    then the newest messages that fit) instead of every live message.
    """

    def __init__(self, memory: AnyMemory, *, max_tokens: int | None = None) -> None:
        super().__init__()
        self.memory = memory
        self.max_tokens = max_tokens
        self._door = Door(memory, running_loop())

    @classmethod
    async def from_manager(
        cls,
        manager: MemoryManager,
        memory_id: str,
        session_id: str,
        *,
        context: Mapping[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> CompozyChatMessageHistory:
        """The history ``session_id`` as instance ``<memory_id>:<session_id>`` of the
        manager's memory ``memory_id`` (its policy, TTL and flushing apply). ``context`` adds
        what else the memory's settings read; the id is passed as ``session_id``."""
        reference = MemoryReference(memory_id, key="{{ session_id }}")
        memory = await manager.get(reference, {**(context or {}), "session_id": session_id})
        return cls(memory, max_tokens=max_tokens)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]  # read-only, by design
        """Every message (or the context, with ``max_tokens``), oldest first."""
        return [to_langchain(m) for m in self._door.call(self._read)]

    async def aget_messages(self) -> list[BaseMessage]:
        return [to_langchain(m) for m in await self._door.acall(self._read)]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        self._door.call(_appending([from_langchain(m) for m in messages]))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await self._door.acall(_appending([from_langchain(m) for m in messages]))

    def clear(self) -> None:
        self._door.call(lambda memory: memory.steps.clear())

    async def aclear(self) -> None:
        await self._door.acall(lambda memory: memory.steps.clear())

    def _read(self, memory: MemoryCore) -> Steps[list[Message]]:
        if self.max_tokens is None:
            return (yield from summaries_then_messages(memory))
        layers = yield from memory.steps.context_layers(self.max_tokens)
        return layers.messages


def _appending(converted: list[dict[str, Any]]) -> Callable[[MemoryCore], Steps[None]]:
    """Steps that append ``converted`` (batches above the script's limit in several calls)."""

    def steps(memory: MemoryCore) -> Steps[None]:
        for start in range(0, len(converted), MAX_BATCH):
            yield from memory.steps.append_many(converted[start : start + MAX_BATCH])

    return steps


def from_langchain(message: BaseMessage) -> dict[str, Any]:
    """The memory message that stores ``message`` (see the module's docstring)."""
    data: dict[str, Any] = message.model_dump(mode="json")
    kind = _kind(message.type)
    stored: dict[str, Any] = {"role": _ROLES.get(kind, "user")}
    content = data["content"]
    if isinstance(content, str) or _are_blocks(content):
        stored["content"] = data.pop("content")
    else:  # plain strings among the blocks: keep them as written, count their text
        stored["content"] = message.text
    if kind == "tool":
        stored["tool_call_id"] = data["tool_call_id"]
    elif kind == "function":
        stored["role"] = "tool"
        stored["tool_call_id"] = f"function:{data.get('name') or ''}"
    elif kind == "chat" and data.get("role") in _CORE_ROLES:
        stored["role"] = data["role"]
    calls = data.get("tool_calls") or []
    if kind == "ai" and calls and all(isinstance(c.get("id"), str) and c["id"] for c in calls):
        stored["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c.get("args", {}))},
            }
            for c in calls
        ]
    stored["metadata"] = {_FIELD: {"type": message.type, "data": data}}
    return stored


def to_langchain(message: Message) -> BaseMessage:
    """The LangChain message ``message`` stores: the one added, for messages this adapter
    wrote; else one made from its role and content."""
    kept: Any = (message.metadata or {}).get(_FIELD)
    if isinstance(kept, dict) and isinstance(kept.get("data"), dict):
        data: dict[str, Any] = dict(kept["data"])
        data.setdefault("content", message.content)
        return messages_from_dict([{"type": kept["type"], "data": data}])[0]
    content: Any = message.content
    if message.role == "user":
        return HumanMessage(content=content)
    if message.role == "assistant":
        return AIMessage(content=content)
    if message.role == "tool":
        return ToolMessage(content=content, tool_call_id=message.tool_call_id or "")
    return SystemMessage(content=content)


def _kind(message_type: str) -> str:
    """``ai``, ``human``, ``system``, ``tool``, ``function`` or ``chat``, for chunks too."""
    if message_type.endswith("MessageChunk"):
        return message_type.removesuffix("MessageChunk").lower()
    return message_type


def _are_blocks(content: object) -> bool:
    return isinstance(content, list) and all(
        isinstance(block, dict) and isinstance(block.get("type"), str) for block in content
    )
