"""An OpenAI Agents SDK session kept in a compozy memory (extra ``openai-agents``).

:class:`CompozySession` implements the SDK's ``Session`` protocol over one
:class:`~compozy_memory.MemoryInstance`: one memory is one session.

What maps to what:

* ``add_items(items)``: one ``append_many`` of the whole list, atomic and applied at most once
  (the handle's random dedupe key; the SDK gives the session no idempotency key). Lists above
  the script's limit (10,000 items) go in several appends.
* ``get_items(limit)``: ``read()``, or ``read(-limit, -1)`` for the newest ``limit`` items in
  order; ``limit=None`` falls back to ``session_settings.limit`` as the SDK's sessions do.
* ``pop_item()``: removes the newest message by a compare-and-set ``replace`` (see
  :mod:`compozy_memory.adapters._edits`: O(items), the old messages go to the archive).
* ``clear_session()``: ``clear()``.

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

Not supported: summaries made by a flusher are not items, and ``get_items`` does not return
them: a flushed session has lost the items it summarised, so attach no flusher to a memory
used as a session (or read ``memory.context()`` yourself).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from compozy_memory._model.keys import decode_key
from compozy_memory._model.limits import MAX_BATCH
from compozy_memory._model.messages import Message
from compozy_memory._store.instance import MemoryInstance
from compozy_memory.adapters._edits import remove_at
from compozy_memory.errors import ConfigurationError

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings

__all__ = ["CompozySession", "from_item", "to_item"]

_FIELD = "openai_agents"
_MESSAGE_ROLES = {"user", "assistant", "system", "developer"}


class CompozySession:
    """The SDK's ``Session`` protocol over one compozy memory.

    ``session_id`` defaults to the memory's key text.
    """

    def __init__(
        self,
        memory: MemoryInstance,
        *,
        session_id: str | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.memory = memory
        self.session_id = session_id if session_id is not None else _key_text(memory)
        self.session_settings = session_settings

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """Every item, or the newest ``limit`` ones, oldest first."""
        chosen = limit
        if chosen is None and self.session_settings is not None:
            chosen = self.session_settings.limit
        if chosen is None:
            stored = await self.memory.read()
        elif chosen <= 0:
            return []
        else:
            stored = await self.memory.read(-chosen, -1)
        return [to_item(m) for m in stored]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        converted = [from_item(item) for item in items]
        for start in range(0, len(converted), MAX_BATCH):
            await self.memory.append_many(converted[start : start + MAX_BATCH])

    async def pop_item(self) -> TResponseInputItem | None:
        removed = await remove_at(self.memory, -1)
        return None if removed is None else to_item(removed)

    async def clear_session(self) -> None:
        await self.memory.clear()


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


def _key_text(memory: MemoryInstance) -> str:
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
