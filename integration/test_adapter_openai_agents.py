"""The OpenAI Agents SDK session adapter, on a real Valkey, with the real openai-agents."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.memory import Session, SessionSettings
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from compozy_memory import MemoryInstance, MemoryPolicy, connect
from compozy_memory._io.translate import RedisClient
from compozy_memory.adapters.openai_agents import CompozySession
from compozy_memory.embedded import EmbeddedServer
from integration.adapter_fleet import APPENDS, WRITERS, in_writer_order, run_fleet, tally
from integration.adapter_workers import (
    PROJECT,
    close_unused,
    open_memory,
    openai_agents_writer,
)
from integration.memories import COUNTER

ITEMS: list[dict[str, Any]] = [
    {"role": "developer", "content": "Answer with digits."},
    {"role": "user", "content": "What is 2+2?"},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "and this picture?"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
        ],
    },
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "add"}]},
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "add",
        "arguments": '{"a": 2, "b": 2}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "4"},
    {
        "id": "msg_1",
        "content": [{"type": "output_text", "text": "4", "annotations": [], "logprobs": []}],
        "role": "assistant",
        "status": "completed",
        "type": "message",
    },
    {"type": "custom_tool_call_output", "call_id": "call_2", "output": {"score": 0.25}},
    {"type": "item_reference", "id": "msg_0"},
]


@pytest.fixture
async def client(valkey_server: EmbeddedServer) -> AsyncIterator[RedisClient]:
    redis = connect(valkey_server.url)
    yield redis
    await redis.aclose()


@pytest.fixture
def memory(client: RedisClient) -> MemoryInstance:
    return open_memory(client, f"oa:{uuid.uuid4().hex}")


async def test_it_is_an_sdk_session(memory: MemoryInstance) -> None:
    session = CompozySession(memory)
    assert isinstance(session, Session)
    assert session.session_id == memory.keys.key  # the key text, here plain
    assert session.session_settings == SessionSettings()
    assert await session.get_items() == []
    assert await session.pop_item() is None


async def test_items_read_back_exactly_as_added(memory: MemoryInstance) -> None:
    session = CompozySession(memory)
    await session.add_items(ITEMS)  # type: ignore[arg-type]
    got = await session.get_items()
    assert got == ITEMS
    assert [list(item) for item in got] == [list(item) for item in ITEMS]  # key order too
    stored = await memory.read()
    assert [m.role for m in stored] == [
        "developer", "user", "user", "assistant", "assistant", "tool", "assistant", "tool",
        "assistant",
    ]  # fmt: skip
    assert [m.content_type for m in stored][3:6] == [
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert stored[1].content == "What is 2+2?"  # tokens are counted from the text
    assert stored[4].tool_use_ids == ("call_1",)
    assert stored[5].tool_result_ids == ("call_1",)
    assert stored[7].content == ""  # a non-text output is kept in metadata only


async def test_limit_returns_the_newest_items_in_order(memory: MemoryInstance) -> None:
    items = [{"role": "user", "content": f"m{i}"} for i in range(5)]
    session = CompozySession(memory)
    await session.add_items(items)  # type: ignore[arg-type]
    assert await session.get_items(limit=2) == items[3:]
    assert await session.get_items(limit=50) == items
    assert await session.get_items(limit=0) == []
    limited = CompozySession(memory, session_settings=SessionSettings(limit=3))
    assert await limited.get_items() == items[2:]
    assert await limited.get_items(limit=1) == items[4:]


async def test_pop_item_removes_the_newest(memory: MemoryInstance) -> None:
    session = CompozySession(memory)
    await session.add_items(ITEMS[:3])  # type: ignore[arg-type]
    assert await session.pop_item() == ITEMS[2]
    assert await session.get_items() == ITEMS[:2]
    await session.add_items([ITEMS[4]])  # type: ignore[list-item]
    assert await session.pop_item() == ITEMS[4]
    assert await session.pop_item() == ITEMS[1]
    assert await session.pop_item() == ITEMS[0]
    assert await session.pop_item() is None
    assert await memory.len() == 0


async def test_concurrent_pops_never_return_one_item_twice(client: RedisClient) -> None:
    key = f"oa-pop:{uuid.uuid4().hex}"
    items = [{"role": "user", "content": f"m{i}"} for i in range(12)]
    await CompozySession(open_memory(client, key)).add_items(items)  # type: ignore[arg-type]
    sessions = [CompozySession(open_memory(client, key)) for _ in range(20)]
    popped = await asyncio.gather(*(s.pop_item() for s in sessions))
    got = [p for p in popped if p is not None]
    assert sorted(str(p["content"]) for p in got) == sorted(str(i["content"]) for i in items)  # type: ignore[typeddict-item]
    assert popped.count(None) == 8
    assert await sessions[0].get_items() == []


async def test_concurrent_pops_of_the_last_item_return_it_once(client: RedisClient) -> None:
    for _ in range(5):
        key = f"oa-last:{uuid.uuid4().hex}"
        await CompozySession(open_memory(client, key)).add_items([ITEMS[1]])  # type: ignore[list-item]
        sessions = [CompozySession(open_memory(client, key)) for _ in range(6)]
        popped = await asyncio.gather(*(s.pop_item() for s in sessions))
        assert [p for p in popped if p is not None] == [ITEMS[1]]


async def test_clear_session(memory: MemoryInstance) -> None:
    session = CompozySession(memory)
    await session.add_items(ITEMS)  # type: ignore[arg-type]
    await session.clear_session()
    assert await session.get_items() == []


async def test_items_written_by_other_code(memory: MemoryInstance) -> None:
    await memory.append_many(
        [
            {"role": "user", "content": "u"},
            {"role": "tool", "content": "r", "tool_call_id": "c1"},
        ]
    )
    assert await CompozySession(memory).get_items() == [
        {"role": "user", "content": "u"},
        {"type": "function_call_output", "call_id": "c1", "output": "r"},
    ]


class ScriptedModel(Model):
    """Answers each call with the next list of output items; remembers what it was sent."""

    def __init__(self, replies: list[list[Any]]) -> None:
        self.replies = replies
        self.inputs: list[list[TResponseInputItem]] = []

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        given = kwargs["input"] if "input" in kwargs else args[1]
        self.inputs.append([] if isinstance(given, str) else list(given))
        return ModelResponse(output=self.replies.pop(0), usage=Usage(), response_id=None)

    async def stream_response(
        self, *args: Any, **kwargs: Any
    ) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError
        yield


def answer(text: str, id_: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=id_,
        content=[ResponseOutputText(annotations=[], text=text, type="output_text")],
        role="assistant",
        status="completed",
        type="message",
    )


async def test_the_sdk_runner_keeps_its_history_in_the_session(memory: MemoryInstance) -> None:
    @function_tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    model = ScriptedModel(
        [
            [
                ResponseFunctionToolCall(
                    arguments='{"a": 2, "b": 2}',
                    call_id="call_1",
                    name="add",
                    type="function_call",
                    id="fc_1",
                    status="completed",
                )
            ],
            [answer("4", "msg_1")],
            [answer("8", "msg_2")],
        ]
    )
    agent = Agent(name="calc", instructions="Add.", model=model, tools=[add])
    session = CompozySession(memory)
    config = RunConfig(tracing_disabled=True)
    first = await Runner.run(agent, "2+2?", session=session, run_config=config)
    assert first.final_output == "4"
    second = await Runner.run(agent, "double it", session=session, run_config=config)
    assert second.final_output == "8"

    items = await session.get_items()
    kinds = [item.get("type", "message") for item in items]
    assert kinds == [
        "message", "function_call", "function_call_output", "message", "message", "message",
    ]  # fmt: skip
    assert items[2] == {"call_id": "call_1", "output": "4", "type": "function_call_output"}
    # The second run's model call saw the first run's history, read back from the memory.
    assert model.inputs[2][:4] == items[:4]
    assert [m.role for m in await memory.read()] == [
        "user", "assistant", "tool", "assistant", "user", "assistant",
    ]  # fmt: skip


def test_run_sync_keeps_its_history(valkey_server: EmbeddedServer) -> None:
    """Runner.run_sync runs the agent on the thread's default loop, and a session made
    outside any loop goes by its memory's blocking twin there (it could not know whether that
    loop outlives the call)."""
    model = ScriptedModel([[answer("4", "msg_1")], [answer("8", "msg_2")]])
    agent = Agent(name="calc", instructions="Add.", model=model)
    client = connect(valkey_server.url)
    session = CompozySession(open_memory(client, f"oa:{uuid.uuid4().hex}"))
    config = RunConfig(tracing_disabled=True)
    try:
        assert (
            Runner.run_sync(agent, "2+2?", session=session, run_config=config).final_output == "4"
        )
        second = Runner.run_sync(agent, "double it", session=session, run_config=config)
        assert second.final_output == "8"
        asyncio.get_event_loop_policy().get_event_loop().close()  # run_sync leaves it open
        items = asyncio.run(session.get_items())
        assert [item.get("role") for item in items] == ["user", "assistant", "user", "assistant"]
        assert model.inputs[1][:2] == items[:2]  # the second run saw the first's history
    finally:
        asyncio.run(session.close())
        close_unused(client)


async def test_a_session_made_on_one_loop_works_on_another(memory: MemoryInstance) -> None:
    session = CompozySession(memory)
    await session.add_items([{"role": "user", "content": "on the session's loop"}])

    def elsewhere() -> list[Any]:
        async def calls() -> list[Any]:
            await session.add_items([{"role": "user", "content": "on another loop"}])
            return await session.get_items()

        return asyncio.run(calls())

    items = await asyncio.to_thread(elsewhere)
    assert [item["content"] for item in items] == ["on the session's loop", "on another loop"]
    assert await session.pop_item() == {"role": "user", "content": "on another loop"}


# Four spawned processes import the framework before writing: minutes on a loaded 2-core
# machine (adapter_fleet.START_TIMEOUT is 300 s), so this test's limit is above that.
@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_writer_processes_add_items_through_the_adapter_losing_nothing(
    valkey_server: EmbeddedServer,
) -> None:
    key = f"oa-fleet:{uuid.uuid4().hex}"
    run = await run_fleet(openai_agents_writer, valkey_server.url, key)
    client = connect(valkey_server.url)
    try:
        memory = MemoryInstance.open(
            client, project=PROJECT, key=key, counter=COUNTER, policy=MemoryPolicy()
        )
        items = await CompozySession(memory).get_items()
    finally:
        await client.aclose()
    pairs: list[tuple[int, int]] = []
    for item in items:
        if item.get("type") == "function_call":
            _, writer, seq = str(item["call_id"]).split("-")  # type: ignore[typeddict-item]
        else:
            _, writer, _, seq = str(item["content"]).split()  # type: ignore[typeddict-item]
        pairs.append((int(writer), int(seq)))
    lost, duplicated = tally(pairs)
    print(f"openai-agents: {run.acknowledged} acknowledged, {len(items)} stored, lost {lost}, "
          f"duplicated {duplicated}, {run.seconds:.1f}s")  # fmt: skip
    assert run.acknowledged == WRITERS * APPENDS == len(items)
    assert (lost, duplicated) == (0, 0)
    assert in_writer_order(pairs)
