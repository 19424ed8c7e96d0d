"""MemoryTools.handle answers every call, however malformed, with a tool result; long results
are cut to valid JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from compozy_memory import MemoryTools, Namespace, ResultStore, tool_definitions
from compozy_memory._io.translate import RedisClient
from integration.engines import EngineSpec
from integration.memories import memory

# Run by scripts/reliability: its counts become rows of RELIABILITY.md.
pytestmark = pytest.mark.faults


DEEP = 100_000  # far past the interpreter's recursion limit


def anthropic_call(**fields: Any) -> dict[str, Any]:
    return {"type": "tool_use", **fields}


def openai_call(call_id: str | None, function: dict[str, Any]) -> dict[str, Any]:
    call: dict[str, Any] = {"type": "function", "function": function}
    if call_id is not None:
        call["id"] = call_id
    return call


async def test_the_tool_handler_answers_every_bad_call_with_an_error_result(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    results = ResultStore(client, "tools")
    mem = memory(client, memory_key, project="tools", max_tokens=50_000, results=results)
    await mem.append_many(
        [{"role": "user", "content": f"order {n} " + "detail " * 800} for n in range(60)]
    )
    await mem.trim(keep_messages=2)
    tools = MemoryTools(mem)
    deep_json = "[" * DEEP + "]" * DEEP
    bad_calls: list[tuple[str, dict[str, Any]]] = [
        ("anthropic, no id", anthropic_call(name="search_memory", input={"query": "order"})),
        ("anthropic, no name", anthropic_call(id="toolu_1", input={"query": "order"})),
        ("anthropic, nested input", anthropic_call(id="t", name="search_memory", input=nest())),
        ("openai, no id", openai_call(None, {"name": "clear_recalled", "arguments": "{}"})),
        ("openai, no name", openai_call("call_1", {"arguments": "{}"})),
        ("openai, no function", {"id": "call_1", "type": "function"}),
        (
            "openai, deep arguments",
            openai_call("c", {"name": "recall_memory", "arguments": deep_json}),
        ),
        (
            "openai, deep value",
            openai_call("c", {"name": "search_memory", "arguments": f'{{"query": {deep_json}}}'}),
        ),
        ("openai, bad JSON", openai_call("c", {"name": "search_memory", "arguments": "{query"})),
        ("openai, not an object", openai_call("c", {"name": "search_memory", "arguments": "[1]"})),
        (
            "openai, huge number",
            openai_call("c", {"name": "recall_memory", "arguments": "9" * 5_000}),
        ),
        ("too many ids", anthropic_call(id="t", name="recall_memory", input={"ids": [1] * 51})),
        ("unknown tool", anthropic_call(id="t", name="drop_tables", input={})),
    ]
    raised: list[str] = []
    for what, call in bad_calls:
        try:
            answer = await tools.handle(call)
        except Exception as exc:  # counted for the row, then failed on below
            raised.append(f"{what}: {exc!r}"[:200])
            continue
        error = json.loads(answer["content"])["error"]
        assert isinstance(error, str), what
        assert error, what
        if call.get("type") == "tool_use":
            assert answer["type"] == "tool_result", what
            assert answer["is_error"] is True, what
            assert answer["tool_use_id"] == str(call.get("id", "")), what
        else:
            assert answer["role"] == "tool", what
            assert answer["tool_call_id"] == str(call.get("id", "")), what
    assert raised == []
    too_many = json.loads((await tools.handle(bad_calls[-2][1]))["content"])["error"]
    assert "at most 50" in too_many
    recall_schema = next(t for t in tool_definitions() if t["name"] == "recall_memory")
    assert recall_schema["input_schema"]["properties"]["ids"]["maxItems"] == 50
    kept = await mem.len()
    assert kept == 2  # nothing a bad call did changed the memory

    # Results over the limit are cut to valid JSON that says so, never mid-JSON.
    found = await tools.call("search_memory", {"query": "order detail", "limit": 20})
    assert len(found) <= 8_000
    hits = json.loads(found)
    assert hits
    assert all(h["message"]["text"].endswith("…") for h in hits)
    recalled = await tools.call("recall_memory", {"ids": [h["id"] for h in hits][:20]})
    assert len(recalled) <= 8_000
    assert json.loads(recalled)["recalled"]
    payload = "".join(f'line {i:05d} éè"\n' for i in range(20_000))
    ref = await mem.results.store_result(payload, namespace=Namespace.global_())
    start, pieces, cut = 0, [], [len(found), len(recalled)]
    while True:  # read it all back through the tool, a slice at a time
        text = await tools.call(
            "load_result", {"ref": ref.token, "start": start, "length": 100_000}
        )
        cut.append(len(text))
        assert len(text) <= 8_000
        piece = json.loads(text)
        pieces.append(piece["text"])
        if not piece.get("truncated"):
            break
        assert piece["next_start"] == start + piece["length"]
        start = piece["next_start"]
    joined = "".join(pieces)
    assert joined == payload
    record(
        group="adversarial-2",
        item=7,
        fault="MemoryTools.handle given calls without id or name, 100,000-deep OpenAI "
        "arguments, bad JSON, 51 recall ids; results far over 8,000 characters",
        engine=engine.name,
        promise="every call gets a tool result, none raises into the agent loop; a long "
        "result is cut to valid JSON; recall takes at most 50 ids",
        operations=len(bad_calls) + len(cut),
        acknowledged=len(bad_calls) - len(raised) + len(cut),
        lost=2 - kept + max(0, len(payload) - len(joined)),
        duplicated=max(0, len(joined) - len(payload)),
        observed=f"{len(bad_calls)} bad calls answered with an error result, {len(raised)} "
        f"raised; search, recall and {len(pieces)} load_result slices of at most "
        f"{max(cut):,} characters, valid JSON; the slices put the result back together",
    )


def nest(depth: int = DEEP) -> dict[str, Any]:
    value: Any = "order"
    for _ in range(depth):
        value = [value]
    return {"query": value}
