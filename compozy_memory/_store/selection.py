"""Pure choices a handle makes over messages it read: what a trim removes, what a query
asks, which tool exchanges stay whole."""

from __future__ import annotations

from compozy_memory._model.messages import Message
from compozy_memory._search.analysis import analyze_query
from compozy_memory.errors import UsageError

__all__ = [
    "message_id",
    "query_terms",
    "to_trim",
    "whole_tool_exchanges",
    "without_orphan_results",
]


def message_id(message: Message) -> int:
    assert message.id is not None, "messages read from Redis carry their id"
    return message.id


def to_trim(live: list[Message], keep: int | None, max_tokens: int | None) -> list[Message]:
    """The oldest messages that are not pinned, until at most ``keep`` messages and
    ``max_tokens`` tokens remain."""
    count, tokens = len(live), sum(m.tokens or 0 for m in live)
    chosen: list[Message] = []
    for message in live:
        if (keep is None or count <= keep) and (max_tokens is None or tokens <= max_tokens):
            break
        if message.priority == 0:
            continue
        chosen.append(message)
        count -= 1
        tokens -= message.tokens or 0
    return chosen


def query_terms(query: str | None, key: str) -> list[str]:
    if query is None:
        return []
    if not isinstance(query, str):
        raise UsageError(f"a query is text, got {type(query).__name__}", key=key)
    return analyze_query(query)[:_MAX_QUERY_TERMS]


# A query longer than this many distinct terms is cut: each term costs a postings read.
_MAX_QUERY_TERMS = 32


def whole_tool_exchanges(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """Drop tool results whose call is not there, and calls none of whose results are."""
    calls = {c for m in messages for c in m.tool_use_ids}
    results = {c for m in messages for c in m.tool_result_ids}
    return tuple(
        m
        for m in messages
        if all(c in calls for c in m.tool_result_ids)
        and (not m.tool_use_ids or any(c in results for c in m.tool_use_ids))
    )


def without_orphan_results(window: list[Message]) -> list[Message]:
    # A window is a suffix of the conversation, so a tool result can only have lost its call
    # at the window's start.
    start = 0
    while start < len(window) and window[start].tool_result_ids:
        start += 1
    return window[start:] if start else window
