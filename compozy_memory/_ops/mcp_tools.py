"""The tools of ``compozy-memory mcp``: their arguments, bounds, descriptions and answers.

Each tool's arguments are a pydantic model in strict mode that forbids unknown fields, and its
JSON schema (what ``tools/list`` shows) is that model's: every bound an argument has is in the
schema (``minimum``/``maximum``, ``minLength``/``maxLength``, ``pattern``, ``enum``,
``maxItems``...), ``additionalProperties`` is false, and the server checks the same model
before anything reaches Redis. So ``"100"`` is not an integer, ``true`` is not 1, an unknown
argument is refused, and the error says which argument, what it must be and what it got (a
value quoted at most :data:`QUOTE` characters long, whatever its size).

The bounds are those of the library (checked again by it, and in Lua), expressed in
characters: a byte limit ``B`` of the library becomes ``B // 4`` characters, the most that can
never exceed it in UTF-8.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, create_model

__all__ = [
    "BOUNDS",
    "QUOTE",
    "ToolSpec",
    "as_text",
    "cap",
    "describe_invalid",
    "message_json",
    "quote",
    "tool_specs",
]

#: What an error message quotes of a value, at most (characters).
QUOTE = 80
#: What an error message says in all, at most (characters).
MESSAGE = 600

#: Every bound the tools' arguments have (tests/test_mcp_tools.py checks them against the
#: library's own limits).
BOUNDS: dict[str, int] = {
    "memory_chars": 512,  # a stored key, as `ls` shows it
    "content_chars": 100_000,  # a message's text (the library's cap: 1 MiB of JSON)
    "dedupe_chars": 256,  # printable ASCII: one byte a character (MAX_DEDUPE_KEY bytes)
    "query_chars": 1_000,
    "search_limit": 50,  # MAX_SEARCH_LIMIT
    "recall_limit": 100,
    "recall_offset": 1_000_000_000,
    "context_tokens": 1_000_000,
    "fact_name_chars": 64,  # MAX_FACT_KEY (256 bytes) // 4
    "fact_value_chars": 256,  # MAX_FACT_VALUE (1,024 bytes) // 4
    "facts_per_call": 100,  # MAX_FACTS_PER_CALL
    "list_limit": 100,
}

STORED_KEY = r"^[a-zA-Z0-9\-_.:#]+$"
PRINTABLE = r"^[!-~]+$"

_STRICT = ConfigDict(strict=True, extra="forbid")

MemoryKey = Annotated[
    str, StringConstraints(min_length=1, max_length=BOUNDS["memory_chars"], pattern=STORED_KEY)
]
Content = Annotated[str, StringConstraints(min_length=1, max_length=BOUNDS["content_chars"])]
DedupeKey = Annotated[
    str, StringConstraints(min_length=1, max_length=BOUNDS["dedupe_chars"], pattern=PRINTABLE)
]
Query = Annotated[str, StringConstraints(min_length=1, max_length=BOUNDS["query_chars"])]
FactName = Annotated[str, StringConstraints(min_length=1, max_length=BOUNDS["fact_name_chars"])]
FactValue = Annotated[str, StringConstraints(max_length=BOUNDS["fact_value_chars"])]
Role = Literal["user", "assistant", "system"]
SearchRole = Literal["user", "assistant", "system", "tool", "summary"]


def quote(value: object) -> str:
    """``value`` as an error message shows it: its repr, cut to :data:`QUOTE` characters with
    its full size said (a 5 MB argument costs the message 100 characters, not 5 MB)."""
    if isinstance(value, str | bytes | list | dict):
        size = len(value)
        kind = {str: "characters", bytes: "bytes", list: "items", dict: "entries"}[type(value)]
        if isinstance(value, str) and size > QUOTE:
            return f"{value[:QUOTE]!r}... ({size:,} {kind})"
        text = repr(value)
        if len(text) > QUOTE:
            return f"{text[:QUOTE]}... ({size:,} {kind})"
        return text
    text = repr(value)
    return text if len(text) <= QUOTE else f"{text[:QUOTE]}..."


def cap(text: str) -> str:
    """An error text cut to :data:`MESSAGE` characters (a library message may name a key)."""
    return text if len(text) <= MESSAGE else f"{text[:MESSAGE]}... ({len(text):,} characters)"


def describe_invalid(tool: str, exc: ValidationError, takes: Sequence[str]) -> str:
    """Each problem of ``exc`` on a line: the argument, what it must be, what it got."""
    lines = []
    for error in exc.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in error["loc"]) or "arguments"
        kind = error["type"]
        if kind == "extra_forbidden":
            lines.append(f"unknown argument {quote(where)} ({tool} takes: {', '.join(takes)})")
        elif kind == "missing":
            lines.append(f"{where} is required")
        else:
            got = error.get("input")
            template = _TYPES.get(kind)
            what = template.format(**error.get("ctx", {})) if template else str(error["msg"])
            lines.append(f"{where}: {what[0].lower()}{what[1:]}, got {quote(got)}")
    more = len(exc.errors()) - len(lines)
    if more > 0:
        lines.append(f"and {more} more")
    return cap(f"{tool}: invalid arguments: " + "; ".join(lines))


_TYPES = {
    "int_type": "must be an integer (a JSON number without a fraction, not a string or bool)",
    "string_type": "must be a string",
    "list_type": "must be an array",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "less_than_equal": "must be at most {le}",
    "greater_than_equal": "must be at least {ge}",
    "string_too_long": "must be at most {max_length} characters",
    "string_too_short": "must be at least {min_length} characters",
    "string_pattern_mismatch": "must match {pattern}",
    "literal_error": "must be one of {expected}",
    "too_long": "must have at most {max_length} items",
    "too_short": "must have at least {min_length} items",
}


# -- argument models ------------------------------------------------------------------------


def _memory_type(names: Sequence[str] | None) -> Any:
    """A stored key of the project, or one of ``names``."""
    if names is None:
        return MemoryKey
    return Literal.__getitem__(tuple(names))


def _models(names: Sequence[str] | None) -> dict[str, type[BaseModel]]:
    """The argument model of every tool, for a server whose memories are ``names`` (None: any
    stored key of the project)."""
    memory_type = _memory_type(names)
    memory_help = (
        "the memory, by the name list_memories gives"
        if names is not None
        else "the memory's stored key, as list_memories (or `compozy-memory ls`) gives it"
    )
    only = names is not None and len(names) == 1
    memory_field: Any = (
        (memory_type, Field(names[0], description=memory_help))  # type: ignore[index]
        if only
        else (memory_type, Field(description=memory_help))
    )

    def model(name: str, **fields: Any) -> type[BaseModel]:
        return create_model(name, __config__=_STRICT, **fields)

    return {
        "list_memories": model(
            "ListMemories",
            limit=(
                int,
                Field(
                    50,
                    ge=1,
                    le=BOUNDS["list_limit"],
                    description="at most this many, the most recently active first",
                ),
            ),
        ),
        "remember": model(
            "Remember",
            memory=memory_field,
            role=(Role, Field(description="who said it")),
            content=(Content, Field(description="what to remember: the message's text")),
            dedupe_key=(
                DedupeKey | None,
                Field(
                    None,
                    description="an id for this message (printable ASCII, no spaces): "
                    "a retry with the same id stores nothing more",
                ),
            ),
        ),
        "search": model(
            "Search",
            memory=memory_field,
            query=(Query, Field(description="what to look for")),
            limit=(
                int,
                Field(10, ge=1, le=BOUNDS["search_limit"], description="at most this many hits"),
            ),
            roles=(
                list[SearchRole] | None,
                Field(
                    None,
                    min_length=1,
                    max_length=5,
                    description="only messages of these roles (summary: the summaries)",
                ),
            ),
        ),
        "recall": model(
            "Recall",
            memory=memory_field,
            offset=(
                int,
                Field(0, ge=0, le=BOUNDS["recall_offset"], description="skip this many first"),
            ),
            limit=(
                int,
                Field(20, ge=1, le=BOUNDS["recall_limit"], description="at most this many"),
            ),
        ),
        "context": model(
            "Context",
            memory=memory_field,
            max_tokens=(
                int,
                Field(ge=1, le=BOUNDS["context_tokens"], description="the token budget"),
            ),
            query=(
                Query | None,
                Field(None, description="recall the earlier messages that best answer this"),
            ),
        ),
        "facts": model("Facts", memory=memory_field),
        "set_facts": model(
            "SetFacts",
            memory=memory_field,
            facts=(
                dict[FactName, FactValue],
                Field(
                    min_length=1,
                    max_length=BOUNDS["facts_per_call"],
                    description="name -> value; a name set again takes the new value",
                ),
            ),
        ),
        "delete_facts": model(
            "DeleteFacts",
            memory=memory_field,
            names=(
                list[FactName],
                Field(
                    min_length=1,
                    max_length=BOUNDS["facts_per_call"],
                    description="the facts to delete",
                ),
            ),
        ),
        "forget": model("Forget", memory=memory_field),
    }


# -- the tools --------------------------------------------------------------------------------

Handler = Callable[[Any, Any], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool: its name, what it does, its arguments, whether it writes, its handler."""

    name: str
    description: str
    model: type[BaseModel]
    writes: bool
    destructive: bool
    handler: Handler

    def schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments (pydantic's, without titles)."""
        schema: dict[str, Any] = _untitled(self.model.model_json_schema())
        return schema

    @property
    def takes(self) -> list[str]:
        return list(self.model.model_fields)


def _untitled(node: Any) -> Any:
    """``node`` without pydantic's titles, and a one-value ``const`` as an ``enum`` (the form
    every client's schema reader knows)."""
    if isinstance(node, dict):
        out = {
            k: _untitled(v) for k, v in node.items() if not (k == "title" and isinstance(v, str))
        }
        if "const" in out and "enum" not in out:
            out["enum"] = [out.pop("const")]
        return out
    if isinstance(node, list):
        return [_untitled(v) for v in node]
    return node


_DESCRIPTIONS = {
    "list_memories": "The memories this server may reach, most recently active first: the name "
    "to pass as `memory`, whether it may be written, its messages and tokens.",
    "remember": "Store one message in a memory, atomically; with `dedupe_key`, at most once.",
    "search": "The messages of a memory (live, archived and summaries) that best match "
    "`query`, best first, each with the turns around it.",
    "recall": "Archived originals of a memory (messages that trims and flushes moved out of "
    "the conversation), oldest first.",
    "context": "What the memory would send an LLM within `max_tokens`: pinned messages, facts, "
    "summaries, earlier messages that answer `query`, then the newest messages.",
    "facts": "The session facts of a memory, as a name -> value object.",
    "set_facts": "Set session facts of a memory (shown in its context right after the pinned "
    "messages; the oldest set are dropped past the memory's cap).",
    "delete_facts": "Delete session facts of a memory by name.",
    "forget": "Forget a memory: remove its messages, summaries, archive and facts. Cannot be "
    "undone.",
}

_WRITES = {"remember", "set_facts", "delete_facts", "forget"}


def tool_specs(names: Sequence[str] | None, handlers: Mapping[str, Handler]) -> dict[str, ToolSpec]:
    """Every tool, in the order ``tools/list`` shows them."""
    models = _models(names)
    return {
        name: ToolSpec(
            name=name,
            description=_DESCRIPTIONS[name],
            model=models[name],
            writes=name in _WRITES,
            destructive=name == "forget",
            handler=handlers[name],
        )
        for name in _DESCRIPTIONS
    }


def message_json(message: Any) -> dict[str, Any]:
    """A stored message as a tool answers with it (its envelope, and its text)."""
    data: dict[str, Any] = message.model_dump(mode="json", by_alias=True, exclude_none=True)
    if not isinstance(data.get("content"), str):
        data["text"] = message.text
    return data


def as_text(payload: dict[str, Any]) -> str:
    """The answer as one JSON text, for clients that read only text content."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
