"""Tools an agent can call to reach its memory's archive: search, recall, clear, and read
large results stored by reference (``load_result``).

:func:`tool_definitions` gives the four tools in the shape each API takes (Anthropic
``tools=[...]`` or OpenAI ``tools=[{"type": "function", ...}]``); :class:`MemoryTools`
answers a call of any of them with the tool result to send back. Recalled messages live in
their own part of the memory (same slot, same TTL) and show in :meth:`MemoryInstance.context`
under the recall share until cleared or until newer recalls need their room.

A call is answered, never raised: a call without an id or a name, arguments that are not a
JSON object (bad JSON, nesting deeper than the interpreter can parse), a tool that does not
exist or arguments it does not take each give an error result the model can correct itself
from. A result longer than ``max_result_chars`` is shortened to valid JSON
(:mod:`compozy_memory._context.tool_results`), and ``load_result`` says where its next slice
starts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from compozy_memory._context.tool_results import MIN_RESULT_CHARS, fit_json, fit_slice
from compozy_memory._model.messages import Message
from compozy_memory._store.instance import MemoryInstance
from compozy_memory.errors import CompozyMemoryError, UsageError

__all__ = ["MAX_RECALL_IDS", "TOOL_NAMES", "MemoryTools", "tool_definitions"]

TOOL_NAMES = ("search_memory", "recall_memory", "clear_recalled", "load_result")
#: The most ids one ``recall_memory`` call may name (as many as a search may return).
MAX_RECALL_IDS = 50
Format = Literal["anthropic", "openai"]
# What a call's arguments may raise while they are parsed and checked: bad JSON and text
# that is not UTF-8 (ValueError), nesting deeper than the parser goes (RecursionError).
_BAD_CALL = (CompozyMemoryError, TypeError, ValueError, RecursionError)

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
                "ids": {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 1},
                    "maxItems": MAX_RECALL_IDS,
                },
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
        if not isinstance(max_result_chars, int) or max_result_chars < MIN_RESULT_CHARS:
            raise UsageError(
                f"max_result_chars is an integer >= {MIN_RESULT_CHARS}, got {max_result_chars!r}"
            )
        self.memory = memory
        self.max_result_chars = max_result_chars

    def handles(self, name: str) -> bool:
        return name in TOOL_NAMES

    async def call(self, name: str, arguments: Mapping[str, Any] | str) -> str:
        """Run tool ``name`` with its arguments (a dict, or the JSON text OpenAI sends) and
        return the result text, JSON of at most ``max_result_chars`` characters; a bad call
        is answered with an error text (``{"error": ...}``), not raised, so the model can
        correct itself."""
        return (await self._answer(name, arguments))[0]

    async def handle(self, call: Mapping[str, Any]) -> dict[str, Any]:
        """The tool result message for one tool call, in the call's own format; never raises
        for what a model or an API put in the call (a missing id or name, bad arguments).

        An Anthropic ``tool_use`` block gives a ``tool_result`` block (``is_error`` set for an
        error); an OpenAI tool call (``{"id", "type": "function", "function": {"name",
        "arguments"}}``) gives a ``tool`` message. A call without an id runs nothing and is
        answered with an error under an empty id. Only a value of neither shape (not a
        mapping, or one whose ``type`` is neither ``tool_use`` nor ``function`` and that has
        no ``function``) raises UsageError: that is the caller's mistake, not the model's."""
        if not isinstance(call, Mapping):
            raise UsageError(f"a tool call is a mapping, got {type(call).__name__}")
        call_id = call.get("id")
        answer_id = call_id if isinstance(call_id, str) else ""
        if call.get("type") == "tool_use":
            name, arguments = call.get("name"), call.get("input") or {}
        elif "function" in call or call.get("type") == "function":
            function = call.get("function")
            name, arguments = None, "{}"
            if isinstance(function, Mapping):
                name, arguments = function.get("name"), function.get("arguments") or "{}"
        else:
            raise UsageError(
                "not a tool call: expected an Anthropic tool_use block or an OpenAI call"
            )
        if answer_id:
            content, failed = await self._answer(name, arguments)
        else:  # its answer could not be matched to it: run nothing
            content, failed = fit_json({"error": "a tool call needs an id"}, MIN_RESULT_CHARS), True
        if call.get("type") == "tool_use":
            block = {"type": "tool_result", "tool_use_id": answer_id, "content": content}
            return {**block, "is_error": True} if failed else block
        return {"role": "tool", "tool_call_id": answer_id, "content": content}

    async def _answer(self, name: object, arguments: object) -> tuple[str, bool]:
        """The result text, and whether it is an error."""
        try:
            if not isinstance(name, str) or not name:
                raise ValueError(f"a tool call names its tool: one of {', '.join(TOOL_NAMES)}")
            if isinstance(arguments, (str, bytes)):
                args = json.loads(arguments)
            elif isinstance(arguments, Mapping):
                args = dict(arguments)
            else:
                raise TypeError("the arguments are a JSON object")
            if not isinstance(args, dict):
                raise TypeError("the arguments are not an object")
            result = await self._run(name, args)
        except _BAD_CALL as exc:
            return fit_json({"error": _error_text(exc)}, self.max_result_chars), True
        if isinstance(result, str):  # already fitted (load_result)
            return result, False
        return fit_json(result, self.max_result_chars), False

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
                if not _is_int(offset):
                    raise TypeError("offset is an integer")
                archived = await self.memory.recall(offset, _limit(args, 10))
                ids = [m.id for m in archived if m.id is not None]
            if not isinstance(ids, list) or not all(_is_int(i) for i in ids):
                raise TypeError("ids is a list of integers")
            if len(ids) > MAX_RECALL_IDS:
                raise ValueError(f"ids holds at most {MAX_RECALL_IDS} ids, got {len(ids)}")
            brought = await self.memory.recall_messages(ids)
            return {"recalled": [_brief(m) for m in brought]}
        if name == "clear_recalled":
            return {"cleared": await self.memory.clear_recalled()}
        if name == "load_result":
            ref, start, length = args.get("ref"), args.get("start", 0), args.get("length", 4000)
            if not isinstance(ref, str):
                raise TypeError("ref is the text a stub names")
            if not _is_int(start) or not _is_int(length) or length > 100_000:
                raise ValueError("start and length are integers, length at most 100000")
            chunk = await self.memory.results.load_slice(ref, start, length)

            def shown(part: bytes) -> dict[str, Any]:
                text = part.decode("utf-8", "replace")
                return {"ref": ref, "start": start, "length": len(part), "text": text}

            return fit_slice(chunk, start, self.max_result_chars, shown)
        raise ValueError(f"unknown tool {name!r}; the memory tools are {', '.join(TOOL_NAMES)}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "RecursionError: the arguments are nested too deeply"
    return f"{type(exc).__name__}: {exc}"


def _limit(args: Mapping[str, Any], default: int) -> int:
    limit = args.get("limit", default)
    if not _is_int(limit) or not 1 <= limit <= 50:
        raise ValueError("limit is an integer from 1 to 50")
    return int(limit)


def _brief(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"id": message.id, "role": message.role, "text": message.text}
    if message.name:
        out["name"] = message.name
    if message.ts:
        out["ts"] = message.ts
    return out
