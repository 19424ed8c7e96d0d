"""Tool exchanges: a tool call and the results that answer it are one unit.

An assistant message that makes tool calls (OpenAI ``tool_calls``, Anthropic ``tool_use``
blocks) and the messages that answer them (a ``tool`` message's ``tool_call_id``, ``tool_result``
blocks) go together or not at all: a flush summarises or evicts them as one, a context layer
shows them whole, a request body never carries a result without its call or a call without
its result (both APIs refuse one). These pure functions are that rule, written once for every
part of the library that selects, cuts or renders messages; ``lua/context.lua`` keeps a
window's start by the same rule (a window never starts with a result whose call it left out),
and ``integration/test_tool_exchanges.py`` checks the two agree.

The ids come from :attr:`Message.tool_use_ids` and :attr:`Message.tool_result_ids`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from compozy_memory._model.messages import Message

__all__ = [
    "answered_ids",
    "exchange_groups",
    "orphan_results",
    "partnered",
    "pending_calls",
    "result_text",
    "whole_exchanges",
]

T = TypeVar("T")


def answered_ids(messages: Iterable[Message]) -> set[str]:
    """The ids of the calls some message among ``messages`` answers."""
    return {call_id for m in messages for call_id in m.tool_result_ids}


def pending_calls(messages: Sequence[Message]) -> list[tuple[str, ...]]:
    """Per message, the ids of its calls no message of ``messages`` answers (a call not
    answered yet, or whose results lie outside what was read)."""
    answered = answered_ids(messages)
    return [tuple(c for c in m.tool_use_ids if c not in answered) for m in messages]


def orphan_results(messages: Sequence[Message]) -> list[bool]:
    """Per message, whether it answers a call ``messages`` does not hold (the call was cut
    off, trimmed or never stored)."""
    calls = {call_id for m in messages for call_id in m.tool_use_ids}
    return [any(c not in calls for c in m.tool_result_ids) for m in messages]


def exchange_groups(messages: Sequence[Message]) -> list[int]:
    """A group number per message: a tool call and its results share one (union-find);
    every other message is a group of its own."""
    parent = list(range(len(messages)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    caller: dict[str, int] = {}
    for i, message in enumerate(messages):
        for call_id in message.tool_use_ids:
            caller[call_id] = i
    for i, message in enumerate(messages):
        for call_id in message.tool_result_ids:
            if call_id in caller:
                parent[find(i)] = find(caller[call_id])
    return [find(i) for i in range(len(messages))]


def whole_exchanges(messages: Sequence[Message]) -> tuple[Message, ...]:
    """``messages`` without the results whose call is not there and the calls none of whose
    results are."""
    orphans = orphan_results(messages)
    pending = pending_calls(messages)
    return tuple(
        m
        for m, orphan, unanswered in zip(messages, orphans, pending, strict=True)
        if not orphan and not (m.tool_use_ids and len(unanswered) == len(m.tool_use_ids))
    )


def partnered(
    items: Iterable[T], id_of: Callable[[T], str | None], partners: set[str], seen: set[str]
) -> tuple[list[T], bool]:
    """The rule on a request body's parts (blocks or calls): ``items`` without those whose
    id (``id_of``; None for a part that is neither a call nor a result) has no partner in
    ``partners`` or came already (``seen``, which this extends); and whether any was
    dropped."""
    kept: list[T] = []
    dropped = False
    for item in items:
        call_id = id_of(item)
        if call_id is not None:
            if call_id not in partners or call_id in seen:
                dropped = True
                continue
            seen.add(call_id)
        kept.append(item)
    return kept, dropped


def result_text(content: Any) -> str:
    """A tool result's content (text, a list of content blocks, or any JSON) as text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(item.get("text", "")) if isinstance(item, dict) else str(item) for item in content
        )
    return "" if content is None else json.dumps(content)
