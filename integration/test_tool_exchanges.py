"""The tool-exchange rule in Lua and in Python agree: a window ``lua/context.lua`` cuts from a
conversation holds no tool result whose call it left out, and drops exactly what
:mod:`compozy_memory._model.exchanges` calls orphans at the cut."""

from __future__ import annotations

from typing import Any

from compozy_memory import MemoryInstance, Message
from compozy_memory._io.translate import RedisClient
from compozy_memory._model.exchanges import orphan_results, whole_exchanges

PROJECT = "exchanges"


def _openai_call(*ids: str) -> dict[str, Any]:
    calls = [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
    ]
    return {"role": "assistant", "content": "", "tool_calls": calls, "tokens": 7}


def _anthropic_call(*ids: str) -> dict[str, Any]:
    blocks = [{"type": "tool_use", "id": i, "name": "f", "input": {}} for i in ids]
    return {"role": "assistant", "content": blocks, "tokens": 7}


def _anthropic_results(*ids: str) -> dict[str, Any]:
    blocks = [{"type": "tool_result", "tool_use_id": i, "content": "ok"} for i in ids]
    return {"role": "user", "content": blocks, "tokens": 5}


def _conversation() -> list[dict[str, Any]]:
    """Both APIs' shapes: single and parallel calls, results one message each or together."""
    return [
        {"role": "tool", "tool_call_id": "lost", "content": "its call was trimmed", "tokens": 5},
        {"role": "user", "content": "plan my trip", "tokens": 4},
        _openai_call("a1", "a2"),
        {"role": "tool", "tool_call_id": "a1", "content": "sunny", "tokens": 5},
        {"role": "tool", "tool_call_id": "a2", "content": "cheap", "tokens": 5},
        {"role": "assistant", "content": "Sunny and cheap.", "tokens": 4},
        _anthropic_call("b1"),
        _anthropic_results("b1"),
        _anthropic_call("c1", "c2"),
        _anthropic_results("c1", "c2"),
        {"role": "user", "content": "thanks", "tokens": 3},
        _openai_call("d1"),
        {"role": "tool", "tool_call_id": "d1", "content": "booked", "tokens": 5},
    ]


def _expected(window: list[Message]) -> list[int]:
    """The Python rule for a window (a suffix of the conversation): its orphan results, which
    can only stand at its start, are left out."""
    orphans = orphan_results(window)
    start = 0
    while start < len(window) and orphans[start]:
        start += 1
    return [m.id or 0 for m in window[start:]]


async def test_a_window_drops_what_the_python_rule_calls_orphans(
    client: RedisClient, memory_key: str
) -> None:
    mem = MemoryInstance.open(client, project=PROJECT, key=memory_key)
    await mem.append_many(_conversation())
    live = await mem.read()
    for count in range(1, len(live) + 1):
        lua = [m.id or 0 for m in await mem.read_window(10_000, max_messages=count)]
        assert lua == _expected(live[-count:]), count
    for start in range(len(live)):  # windows cut by tokens, at every message's edge
        budget = sum(m.tokens or 0 for m in live[start:])
        lua = [m.id or 0 for m in await mem.read_window(budget)]
        assert lua == _expected(live[start:]), budget


async def test_a_trim_that_splits_an_exchange_leaves_a_window_without_the_orphans(
    client: RedisClient, memory_key: str
) -> None:
    mem = MemoryInstance.open(client, project=PROJECT, key=memory_key)
    await mem.append_many(_conversation()[1:])
    await mem.trim(keep_messages=10)  # the oldest exchange loses its call, keeps a result
    live = await mem.read()
    assert live[0].role == "tool"
    assert orphan_results(live)[0]
    window = await mem.read_window(10_000)
    assert [m.id for m in window] == _expected(live)
    assert list(whole_exchanges(live)) == window  # no pending call: the two rules agree
