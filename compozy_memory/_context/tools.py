"""Tools an agent can call to reach its memory's archive: search, recall, clear, and read
large results stored by reference (``load_result``).

:func:`tool_definitions` gives the four tools in the shape each API takes (Anthropic
``tools=[...]`` or OpenAI ``tools=[{"type": "function", ...}]``); :class:`MemoryTools`
answers a call of any of them with the tool result to send back. Recalled messages live in
their own part of the memory (same slot, same TTL) and show in :meth:`MemoryInstance.context`
under the recall share until cleared or until newer recalls need their room.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from compozy_memory._model.messages import Message
from compozy_memory._store.instance import MemoryInstance
from compozy_memory.errors import CompozyMemoryError, UsageError

__all__ = ["TOOL_NAMES", "MemoryTools", "tool_definitions"]

TOOL_NAMES = ("search_memory", "recall_memory", "clear_recalled", "load_result")
Format = Literal["anthropic", "openai"]

_SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    "search_memory": (
        "Search the earlier conversation (what no longer fits in context) for messages about "
        "a topic: names, numbers, dates, decisions. Returns the best matches with their ids "
        "and the turns around them.",
        {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "what to look for, in words"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
            },
            "required": ["query"],
        },
    ),
    "recall_memory": (
        "Bring earlier messages back into the conversation, by their ids (from "
        "search_memory) or by position in the archive (offset from the oldest).",
        {
            "type": "object",
            "properties": {
                "ids": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                "offset": {"type": "integer", "minimum": 0},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
            },
        },
    ),
    "clear_recalled": (
        "Drop every recalled message from the conversation (they stay in the archive).",
        {"type": "object", "properties": {}},
    ),
    "load_result": (
        "Read part of a large result that a message shows only as a stub "
        "('[stored result <ref>: ...]'), by its ref and a character range.",
        {
            "type": "object",
            "properties": {
                "ref": {"type": "string", "description": "the ref the stub names"},
                "start": {"type": "integer", "minimum": 0, "default": 0},
                "length": {"type": "integer", "minimum": 1, "maximum": 100000, "default": 4000},
            },
            "required": ["ref"],
        },
    ),
}


def tool_definitions(format: Format = "anthropic") -> list[dict[str, Any]]:
    """The memory tools as the Anthropic Messages API or OpenAI chat API takes them."""
    if format == "anthropic":
        return [
            {"name": name, "description": text, "input_schema": schema}
            for name, (text, schema) in _SCHEMAS.items()
        ]
    if format == "openai":
        return [
            {
                "type": "function",
                "function": {"name": name, "description": text, "parameters": schema},
            }
            for name, (text, schema) in _SCHEMAS.items()
        ]
    raise UsageError(f"format must be 'anthropic' or 'openai', got {format!r}")


class MemoryTools:
    """Answers the memory tools' calls for one memory."""

    def __init__(self, memory: MemoryInstance, *, max_result_chars: int = 8_000) -> None:
        self.memory = memory
        self.max_result_chars = max_result_chars

    def handles(self, name: str) -> bool:
        return name in TOOL_NAMES

    async def call(self, name: str, arguments: Mapping[str, Any] | str) -> str:
        """Run tool ``name`` with its arguments (a dict, or the JSON text OpenAI sends) and
        return the result text; a bad call is answered with an error text, not raised, so
        the model can correct itself."""
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
            if not isinstance(args, dict):
                raise TypeError("the arguments are not an object")
            result = await self._run(name, args)
        except (CompozyMemoryError, TypeError, ValueError) as exc:
            return json.dumps({"error": f"{type(exc).__name__}: {exc}"})
        text = json.dumps(result, ensure_ascii=False)
        return text if len(text) <= self.max_result_chars else text[: self.max_result_chars]

    async def handle(self, call: Mapping[str, Any]) -> dict[str, Any]:
        """The tool result message for one tool call, in the call's own format.

        An Anthropic ``tool_use`` block gives a ``tool_result`` block; an OpenAI tool call
        (``{"id", "type": "function", "function": {"name", "arguments"}}``) gives a ``tool``
        message."""
        if call.get("type") == "tool_use":
            content = await self.call(str(call["name"]), call.get("input") or {})
            return {"type": "tool_result", "tool_use_id": call["id"], "content": content}
        function = call.get("function")
        if isinstance(function, Mapping):
            content = await self.call(str(function["name"]), function.get("arguments") or "{}")
            return {"role": "tool", "tool_call_id": call["id"], "content": content}
        raise UsageError("not a tool call: expected an Anthropic tool_use block or an OpenAI call")

    async def _run(self, name: str, args: dict[str, Any]) -> Any:
        if name == "search_memory":
            query = args.get("query")
            if not isinstance(query, str) or not query.strip():
                raise ValueError("search_memory needs a query")
            hits = await self.memory.search(query, _limit(args, 5))
            return [
                {
                    "id": hit.id,
                    "score": round(hit.score, 3),
                    "message": _brief(hit.message),
                    "before": _brief(hit.before) if hit.before else None,
                    "after": _brief(hit.after) if hit.after else None,
                }
                for hit in hits
            ]
        if name == "recall_memory":
            ids = args.get("ids")
            if ids is None:
                offset = args.get("offset", 0)
                if not isinstance(offset, int):
                    raise TypeError("offset is an integer")
                archived = await self.memory.recall(offset, _limit(args, 10))
                ids = [m.id for m in archived if m.id is not None]
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise TypeError("ids is a list of integers")
            brought = await self.memory.recall_messages(ids)
            return {"recalled": [_brief(m) for m in brought]}
        if name == "clear_recalled":
            return {"cleared": await self.memory.clear_recalled()}
        if name == "load_result":
            ref, start, length = args.get("ref"), args.get("start", 0), args.get("length", 4000)
            if not isinstance(ref, str):
                raise TypeError("ref is the text a stub names")
            if not isinstance(start, int) or not isinstance(length, int) or length > 100_000:
                raise ValueError("start and length are integers, length at most 100000")
            chunk = await self.memory.results.load_slice(ref, start, length)
            text = chunk.decode("utf-8", "replace")
            return {"ref": ref, "start": start, "length": len(chunk), "text": text}
        raise ValueError(f"unknown tool {name!r}; the memory tools are {', '.join(TOOL_NAMES)}")


def _limit(args: Mapping[str, Any], default: int) -> int:
    limit = args.get("limit", default)
    if not isinstance(limit, int) or not 1 <= limit <= 50:
        raise ValueError("limit is an integer from 1 to 50")
    return limit


def _brief(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"id": message.id, "role": message.role, "text": message.text}
    if message.name:
        out["name"] = message.name
    if message.ts:
        out["ts"] = message.ts
    return out
