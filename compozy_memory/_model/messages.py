"""The message model and its compact envelope in Redis.

A message carries what agents really send: a role, text or a list of content blocks
(Anthropic ``text`` / ``tool_use`` / ``tool_result`` blocks, OpenAI ``tool_calls`` on an
assistant message and ``tool_call_id`` on a tool message), a content type and priority used
by eviction, a token count, and the id and timestamp Redis assigned when it was stored. A
summary lists in ``covers`` the ids of the messages it replaced, as at most 16 ``[first, last]``
ranges (merged across gaps past that, with the exact count in ``metadata.covered``: see
``compozy_memory._flush.coverage``), so its size is bounded, whatever it covers.

On the wire the client sends the message as one compact JSON object without ``id``, ``ts``,
``tokens`` and ``priority``; the append script validates those four as separate arguments and
writes them at the front of the envelope, so the values in Redis are the ones the script
checked and counted into ``meta``::

    {"id":17,"ts":1732250000123,"tokens":12,"priority":2,"role":"user","content":"hi"}

Serialising goes through pydantic-core straight to bytes (faster than
``json.dumps(...).encode()``, with no intermediate str); it also refuses lone surrogates, which
could not be stored as UTF-8.
"""

from __future__ import annotations

import re
from typing import Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticSerializationError

from compozy_memory._model.limits import MAX_MESSAGE_TOKENS, MAX_PRIORITY
from compozy_memory.errors import InvalidMessageError

__all__ = [
    "MAX_PRIORITY",
    "EncodedMessage",
    "Message",
    "Role",
    "encode_body",
    "head_id",
    "id_ranges",
]

Role = Literal["system", "developer", "user", "assistant", "tool"]

# Fields the append script writes itself; everything else is the client's body.
_SCRIPT_FIELDS = {"id", "ts", "tokens", "priority"}
_SURROGATE = re.compile("[\ud800-\udfff]")
# A stored envelope's head id, as the scripts read it (lua/lib/envelope.lua): 16 digits at most.
_HEAD_ID = re.compile(rb'\{"id":([1-9][0-9]{0,15}),')


def head_id(envelope: bytes | str) -> int | None:
    """The id a stored envelope starts with (``{"id":N,``), which is the id the scripts know
    it by, or None; a parser reading a second ``"id"`` key written raw would see another."""
    head = _HEAD_ID.match(envelope.encode() if isinstance(envelope, str) else envelope)
    return None if head is None else int(head.group(1))


# Fields that hold caller text, by name, with the name a caller writes.
_TEXT_FIELDS = {
    "content": "content",
    "name": "name",
    "tool_calls": "tool_calls",
    "tool_call_id": "tool_call_id",
    "content_type": "type",
    "metadata": "metadata",
}


class Message(BaseModel):
    """One conversation message, as appended and as read back."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    role: Role
    content: str | list[dict[str, JsonValue]]
    name: str | None = None
    tool_calls: list[dict[str, JsonValue]] | None = None
    tool_call_id: str | None = None
    content_type: str = Field(default="message", alias="type", min_length=1, max_length=64)
    priority: int | None = Field(default=None, ge=0, le=MAX_PRIORITY)
    tokens: int | None = Field(default=None, ge=0, le=MAX_MESSAGE_TOKENS)
    metadata: dict[str, JsonValue] | None = None
    covers: list[tuple[int, int]] | None = None
    id: int | None = None
    ts: int | None = None

    @field_validator("covers", mode="before")
    @classmethod
    def _covers_as_ranges(cls, value: object) -> object:
        # Summaries written before ranges listed every id; read those as ranges too.
        if isinstance(value, list) and all(isinstance(v, int) for v in value):
            return id_ranges(value)
        return value

    @property
    def covered_ids(self) -> list[int]:
        """Every id in this summary's ranges, ascending (a summary whose ranges were merged to
        stay bounded spans ids it did not replace too: see ``metadata.covered``)."""
        return [i for first, last in self.covers or () for i in range(first, last + 1)]

    @property
    def covered_count(self) -> int:
        """How many messages this summary covers (1 for any other message): the exact count
        in ``metadata.covered`` when its ranges were merged, else what they span."""
        if not self.covers:
            return 1
        exact = (self.metadata or {}).get("covered")
        if isinstance(exact, int) and not isinstance(exact, bool) and exact > 0:
            return exact
        return sum(last - first + 1 for first, last in self.covers)

    @field_validator("content")
    @classmethod
    def _blocks_have_a_type(
        cls, value: str | list[dict[str, JsonValue]]
    ) -> str | list[dict[str, JsonValue]]:
        if isinstance(value, list):
            for i, block in enumerate(value):
                if not isinstance(block.get("type"), str):
                    raise ValueError(f"content block {i} needs a string 'type'")
        return value

    @field_validator("tool_calls")
    @classmethod
    def _tool_calls_have_ids(
        cls, value: list[dict[str, JsonValue]] | None
    ) -> list[dict[str, JsonValue]] | None:
        for i, call in enumerate(value or ()):
            if not isinstance(call.get("id"), str) or not call["id"]:
                raise ValueError(f"tool call {i} needs a non-empty string 'id'")
        return value

    @model_validator(mode="after")
    def _coherent(self) -> Message:
        if self.role == "tool" and not self.tool_call_id and not self.tool_result_ids:
            raise ValueError(
                "a 'tool' message needs tool_call_id (OpenAI) or tool_result blocks (Anthropic)"
            )
        # Text with a lone surrogate has no UTF-8 form. In values pydantic's serializer
        # refuses it, but a dict KEY with one was stored as U+FFFD: not the key it was given.
        plain = (  # the common case, checked in well under a microsecond
            isinstance(self.content, str)
            and self.content.isascii()
            and self.content_type.isascii()
            and not (self.metadata or self.tool_calls or self.name or self.tool_call_id)
        )
        if not plain:
            for name in _TEXT_FIELDS:
                where = _surrogate_at(getattr(self, name))
                if where is not None:
                    shown = ".".join(map(str, (_TEXT_FIELDS[name], *where)))
                    raise ValueError(f"{shown} has a lone surrogate, which UTF-8 cannot store")
        return self

    @classmethod
    def parse(cls, data: Message | dict[str, Any]) -> Message:
        """Accept a Message or a plain dict; raise InvalidMessageError with every problem."""
        if isinstance(data, Message):
            return data
        if not isinstance(data, dict):
            raise InvalidMessageError(
                f"a message must be a Message or a dict, got {type(data).__name__}"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise InvalidMessageError(_describe(exc)) from None

    @property
    def text(self) -> str:
        """The plain text of the message: its string, or its text blocks joined."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(
            str(block.get("text", "")) for block in self.content if block.get("type") == "text"
        )

    @property
    def tool_use_ids(self) -> tuple[str, ...]:
        """Ids of the tool calls this message makes (OpenAI tool_calls, Anthropic tool_use)."""
        ids = [str(call["id"]) for call in self.tool_calls or ()]
        if isinstance(self.content, list):
            ids += [str(b["id"]) for b in self.content if b.get("type") == "tool_use"]
        return tuple(ids)

    @property
    def tool_result_ids(self) -> tuple[str, ...]:
        """Ids of the tool calls this message answers."""
        ids = [self.tool_call_id] if self.tool_call_id else []
        if isinstance(self.content, list):
            ids += [str(b["tool_use_id"]) for b in self.content if b.get("type") == "tool_result"]
        return tuple(ids)


def id_ranges(ids: Any) -> list[tuple[int, int]]:
    """Ids (or ``(first, last)`` ranges) as the fewest sorted, inclusive ranges."""
    points: list[tuple[int, int]] = sorted(
        (i, i) if isinstance(i, int) else (int(i[0]), int(i[1])) for i in ids
    )
    merged: list[tuple[int, int]] = []
    for first, last in points:
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


class EncodedMessage(NamedTuple):
    """A message ready to store: what the append and replace scripts take for each message.
    The store builds these; only the gateway lays them out as script arguments."""

    #: Its token count (the counter's, or the one the caller gave).
    tokens: int
    #: Its priority (the message's, or its content type's under the policy).
    priority: int
    #: :func:`encode_body` of it.
    body: bytes


def encode_body(message: Message) -> bytes:
    """The message as compact JSON, without the fields the append script writes."""
    try:
        body = message.__pydantic_serializer__.to_json(
            message, exclude=_SCRIPT_FIELDS, exclude_none=True, by_alias=True
        )
    except PydanticSerializationError as exc:
        raise InvalidMessageError(f"message cannot be stored as UTF-8 JSON: {exc}") from None
    return body


def _surrogate_at(value: object) -> list[str | int] | None:
    """The path to the first string (or dict key) in ``value`` with a lone surrogate."""
    if isinstance(value, str):
        return [] if not value.isascii() and _SURROGATE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and not key.isascii() and _SURROGATE.search(key):
                return [f"{key!r} (a key)"]
            found = _surrogate_at(item)
            if found is not None:
                return [key, *found]
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _surrogate_at(item)
            if found is not None:
                return [i, *found]
    return None


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"])
        text = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {text}" if where else text)
    return "invalid message: " + "; ".join(parts)
