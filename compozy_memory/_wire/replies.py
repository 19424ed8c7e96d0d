"""Decoding the replies of the read scripts whose shape is more than a few numbers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compozy_memory._model.facts import facts_message, parse_stored
from compozy_memory._model.messages import Message
from compozy_memory._model.policy import MemoryPolicy
from compozy_memory._model.results import (
    ContextLayers,
    FlushCommit,
    Hit,
    MemoryHealth,
    Transcript,
)

__all__ = ["context_layers", "flush_commit", "health", "hits", "text", "transcript"]


def text(value: bytes | str | int) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def context_layers(reply: Sequence[Any], facts_header: int) -> ContextLayers:
    """``lua/context.lua``'s reply: pinned, facts, summaries, (score, message) pairs,
    backfill, window."""
    n_pinned = int(reply[0])
    at = 1 + n_pinned
    n_facts = int(reply[at])
    items = []
    for i in range(at + 1, at + 1 + 2 * n_facts, 2):
        tokens, value = parse_stored(reply[i + 1])
        items.append((text(reply[i]), tokens, value))
    facts = (facts_message(items, facts_header),) if items else ()
    rest = [*reply[: 1 + n_pinned], *reply[at + 1 + 2 * n_facts :]]
    at = 0
    layers: list[tuple[Message, ...]] = []
    for step in (1, 1, 2, 1, 1):  # pinned, summaries, (score, message), backfill, window
        n = int(rest[at])
        envelopes = rest[at + 1 : at + 1 + step * n][step - 1 :: step]
        layers.append(tuple(Message.model_validate_json(e) for e in envelopes))
        at += 1 + step * n
    pinned, summaries, recalled, backfill, window = layers
    ordered = tuple(sorted(recalled, key=lambda m: m.id or 0))
    return ContextLayers(pinned, summaries, ordered, backfill, window, facts)


def hits(reply: Sequence[Any]) -> list[Hit]:
    """``lua/search.lua``'s reply: n, then (id, score, message, before, after) per hit."""
    out = []
    for at in range(1, 1 + 5 * int(reply[0]), 5):
        doc_id, score, env, before, after = reply[at : at + 5]
        out.append(
            Hit(
                int(doc_id),
                float(score),
                Message.model_validate_json(env),
                Message.model_validate_json(before) if before else None,
                Message.model_validate_json(after) if after else None,
            )
        )
    return out


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
    return MemoryHealth(
        token_count=int(fields.get("tokens", 0)),
        message_count=int(fields.get("count", 0)),
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
    )


def transcript(reply: Sequence[Any]) -> Transcript:
    """``lua/transcript.lua``'s reply: three counted lists of envelopes."""
    parts: list[tuple[str, ...]] = []
    at = 0
    for _ in range(3):
        n = int(reply[at])
        parts.append(tuple(text(e) for e in reply[at + 1 : at + 1 + n]))
        at += 1 + n
    return Transcript(*parts)


def flush_commit(reply: Any) -> FlushCommit:
    summary_id, removed, removed_tokens, tokens, count, summary_tokens = (int(v) for v in reply)
    return FlushCommit(summary_id or None, removed, removed_tokens, tokens, count, summary_tokens)
