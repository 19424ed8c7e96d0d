"""Decoding the scripts' replies, from the names their headers give (``-- REPLY:``), into
result types."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compozy_memory._facts.lines import facts_message, parse_stored
from compozy_memory._model.limits import DATA_FORMAT
from compozy_memory._model.messages import Message
from compozy_memory._model.policy import MemoryPolicy
from compozy_memory._model.results import (
    ContextLayers,
    FlushCommit,
    MemoryHealth,
)
from compozy_memory.errors import CorruptDataError

__all__ = [
    "Page",
    "TrimStep",
    "context_layers",
    "flush_commit",
    "health",
    "messages",
    "stored_text",
    "text",
    "trim_step",
]


def text(value: bytes | str | int) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def stored_text(value: bytes | str, what: str) -> str:
    """``value`` read from a memory's keys, as text; CorruptDataError when it is not UTF-8
    (compozy-memory writes nothing else: it was written raw)."""
    try:
        return value.decode() if isinstance(value, bytes) else str(value)
    except UnicodeDecodeError as exc:
        raise CorruptDataError(
            f"{what} is not UTF-8 (byte {exc.start}): it was damaged or written raw, not by "
            "compozy-memory; clear() removes it"
        ) from None


def messages(envelopes: Iterable[Any]) -> list[Message]:
    """Stored envelopes as messages; CorruptDataError for one that does not decode as
    compozy-memory writes them (not UTF-8, not JSON, fields of the wrong type)."""
    out = []
    for envelope in envelopes:
        try:
            out.append(Message.model_validate_json(envelope))
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            first = str(exc).splitlines()[1:3] if "\n" in str(exc) else [str(exc)]
            raise CorruptDataError(
                f"a stored message does not decode ({'; '.join(p.strip() for p in first)}): "
                "it was damaged or written raw, not by compozy-memory; clear() removes it"
            ) from None
    return out


@dataclass(frozen=True, slots=True)
class Page:
    """A page of live messages, the memory's length and its version when read."""

    messages: list[Message]
    count: int
    version: str


@dataclass(frozen=True, slots=True)
class TrimStep:
    """One step of ``lua/trim.lua``."""

    moved: int
    moved_tokens: int
    total_tokens: int
    total_count: int
    #: 0: done; 1: more to move; 2: the next message to move is not indexed yet.
    status: int


def trim_step(reply: Mapping[str, Any]) -> TrimStep:
    return TrimStep(
        int(reply["moved"]),
        int(reply["moved_tokens"]),
        int(reply["total_tokens"]),
        int(reply["total_count"]),
        int(reply["status"]),
    )


def context_layers(reply: Mapping[str, Any], facts_header: int) -> ContextLayers:
    """``lua/context.lua``'s reply, layer by layer."""
    items = []
    for key, stored in reply["facts"]:
        tokens, value = parse_stored(stored)
        items.append((text(key), tokens, value))
    facts = (facts_message(items, facts_header),) if items else ()
    recalled = messages(env for _, env in reply["recall"])
    return ContextLayers(
        tuple(messages(reply["pinned"])),
        tuple(messages(reply["summaries"])),
        tuple(sorted(recalled, key=lambda m: m.id or 0)),
        tuple(messages(reply["backfill"])),
        tuple(messages(reply["window"])),
        facts,
    )


def health(reply: Sequence[Any], policy: MemoryPolicy) -> MemoryHealth:
    """``lua/health.lua``'s field/value pairs."""
    fields = {text(reply[i]): text(reply[i + 1]) for i in range(0, len(reply), 2)}
    tokens: dict[int, int] = {}
    counts: dict[int, int] = {}
    for name, value in fields.items():
        if name.startswith("p:"):
            _, priority, what = name.split(":")
            target = tokens if what == "tokens" else counts
            if int(value):
                target[int(priority)] = int(value)
    ttl = int(fields["_ttl_ms"])
    last_flush = fields.get("last_flush")
    fmt = int(fields.get("fmt", 1))
    count = int(fields.get("count", 0))
    archived = int(fields.get("archived", 0)) - int(fields.get("archive_base", 0))
    return MemoryHealth(
        token_count=int(fields.get("tokens", 0)),
        message_count=count,
        last_id=int(fields.get("last_id", 0)),
        priority_tokens=tokens,
        priority_counts=counts,
        archived=int(fields.get("archived", 0)),
        archive_length=int(fields["_archive_len"]),
        summaries=int(fields["_summaries_len"]),
        summary_tokens=int(fields.get("summary_tokens", 0)),
        trimmed=int(fields.get("trimmed", 0)),
        recalled=int(fields["_recalled_len"]),
        indexed=int(fields.get("ix_docs", 0)),
        flush_count=int(fields.get("flushes", 0)),
        last_flush_ms=int(last_flush) if last_flush else None,
        ttl_ms=ttl if ttl >= 0 else None,
        strategy=policy.flush_strategy,
        max_tokens=policy.max_tokens,
        unindexed=_unindexed(fields, fmt, count, archived),
        data_format=fmt,
        evicted=_evicted(fields, fmt, count, archived),
    )


def _unindexed(fields: Mapping[str, str], fmt: int, count: int, archived: int) -> int:
    """As ``unindexed()`` in ``lua/lib/query.lua`` counts it."""
    if fmt < DATA_FORMAT:
        return count + archived
    live = max(0, int(fields.get("last_id", 0)) - int(fields.get("ix_next", 0)) + 1)
    live = min(live, count + int(fields["_summaries_len"]))
    seq = int(fields.get("ix_seq", 0))
    rebuilding = max(0, int(fields.get("archived", 0)) - seq + 1) if seq > 0 else 0
    return live + rebuilding


def _evicted(fields: Mapping[str, str], fmt: int, count: int, archived: int) -> tuple[str, ...]:
    """The parts whose keys are gone while meta says they hold something (as the scripts'
    ``check_parts`` in ``lua/lib/meta.lua`` tells them)."""
    lengths = {
        "msgs": int(fields["_msgs_len"]),
        "archive": int(fields["_archive_len"]),
        "summaries": int(fields["_summaries_len"]),
    }
    if "inc" not in fields:
        # No meta: a new memory, unless other parts are still there.
        present = [name for name, n in lengths.items() if n > 0]
        if int(fields["_ixdocs"]) or int(fields["_facts_len"]):
            present.append("index" if int(fields["_ixdocs"]) else "facts")
        return ("meta",) if present else ()
    gone = []
    if lengths["msgs"] != count:
        gone.append("msgs")
    if lengths["archive"] != archived:
        gone.append("archive")
    if fmt >= 2:
        if lengths["summaries"] != int(fields.get("summary_count", 0)):
            gone.append("summaries")
        if int(fields.get("ix_docs", 0)) > 0 and not int(fields["_ixdocs"]):
            gone.append("index")
        if int(fields["_ixgone_len"]) != int(fields.get("ix_gone", 0)):
            gone.append("ixgone")
    if int(fields["_facts_len"]) != int(fields["_factord_len"]):
        gone.append("facts")
    return tuple(gone)


def flush_commit(reply: Mapping[str, Any]) -> FlushCommit:
    return FlushCommit(
        int(reply["summary_id"]) or None,
        int(reply["removed_count"]),
        int(reply["removed_tokens"]),
        int(reply["tokens"]),
        int(reply["count"]),
        int(reply["summary_tokens"]),
    )
