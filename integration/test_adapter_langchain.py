"""The LangChain chat history adapter, on a real Valkey, with the real langchain-core."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

pytest.importorskip("langchain_core")

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from compozy_memory import MemoryInstance, SyncMemoryInstance, connect
from compozy_memory._io.connection import connect_sync
from compozy_memory._io.translate import RedisClient
from compozy_memory.adapters.langchain import CompozyChatMessageHistory
from compozy_memory.embedded import EmbeddedServer
from integration.adapter_fleet import APPENDS, WRITERS, in_writer_order, run_fleet, tally
from integration.adapter_workers import PROJECT, close_unused, langchain_writer, open_memory
from integration.memories import COUNTER


def every_kind() -> list[BaseMessage]:
    return [
        SystemMessage(content="You are terse.", id="sys-1"),
        HumanMessage(content="What is 2+2?", name="ada", additional_kwargs={"trace": [1, 2]}),
        AIMessage(
            content="",
            id="run-1",
            tool_calls=[{"name": "add", "args": {"a": 2, "b": 2}, "id": "call-1"}],
            usage_metadata={"input_tokens": 10, "output_tokens": 3, "total_tokens": 13},
            response_metadata={"model_name": "m", "finish_reason": "tool_calls"},
        ),
        ToolMessage(content="4", tool_call_id="call-1", name="add"),
        AIMessage(content=[{"type": "text", "text": "It is 4."}], id="run-2"),
        HumanMessage(
            content=[
                "plain string part",
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ]
        ),
        ChatMessage(role="developer", content="Prefer digits."),
        ChatMessage(role="critic", content="Fine."),
        FunctionMessage(name="legacy", content='{"ok": true}'),
    ]


@pytest.fixture
async def memory(valkey_server: EmbeddedServer) -> AsyncIterator[MemoryInstance]:
    client = connect(valkey_server.url)
    yield open_memory(client, f"lc:{uuid.uuid4().hex}")
    await client.aclose()


async def test_it_is_a_langchain_chat_history(memory: MemoryInstance) -> None:
    history = CompozyChatMessageHistory(memory)
    assert isinstance(history, BaseChatMessageHistory)
    assert await history.aget_messages() == []


async def test_every_kind_of_message_reads_back_equal(memory: MemoryInstance) -> None:
    history = CompozyChatMessageHistory(memory)
    sent = every_kind()
    await history.aadd_messages(sent)
    got = await history.aget_messages()
    assert got == sent
    assert [type(m) for m in got] == [type(m) for m in sent]
    # Stored as the memory's own messages: roles mapped, tool calls visible to windows.
    stored = await memory.read()
    assert [m.role for m in stored] == [
        "system", "user", "assistant", "tool", "assistant", "user", "developer", "user", "tool",
    ]  # fmt: skip
    assert stored[2].tool_use_ids == ("call-1",)
    assert stored[3].tool_result_ids == ("call-1",)
    assert stored[1].content == "What is 2+2?"
    assert stored[5].content == "plain string part"  # the text is what gets counted
    # One batch is one append: consecutive ids.
    assert [m.id for m in stored] == list(range(stored[0].id or 0, (stored[0].id or 0) + 9))


async def test_convenience_methods_and_clear(memory: MemoryInstance) -> None:
    history = CompozyChatMessageHistory(memory)
    await history.aadd_messages([HumanMessage(content="hi")])
    await history.aadd_messages([AIMessage(content="hello")])
    assert [m.content for m in await history.aget_messages()] == ["hi", "hello"]
    await history.aclear()
    assert await history.aget_messages() == []
    assert await memory.len() == 0
    await history.aadd_messages([])  # nothing to add is not an error
    assert await history.aget_messages() == []


async def test_messages_written_by_other_code_map_by_role(memory: MemoryInstance) -> None:
    await memory.append_many(
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a", "tool_calls": [{"id": "c", "name": "f"}]},
            {"role": "tool", "content": "t", "tool_call_id": "c"},
        ]
    )
    got = await CompozyChatMessageHistory(memory).aget_messages()
    assert [type(m) for m in got] == [SystemMessage, HumanMessage, AIMessage, ToolMessage]
    assert isinstance(got[3], ToolMessage)
    assert got[3].tool_call_id == "c"


async def test_max_tokens_reads_the_newest_window(memory: MemoryInstance) -> None:
    history = CompozyChatMessageHistory(memory, max_tokens=3 * 20)
    await history.aadd_messages([HumanMessage(content="x" * 40) for _ in range(10)])
    window = await history.aget_messages()
    assert 0 < len(window) < 10
    assert len(await CompozyChatMessageHistory(memory).aget_messages()) == 10


async def test_sync_methods_inside_a_running_loop_store_and_read(
    memory: MemoryInstance,
) -> None:
    """A sync call in an async handler (or a notebook) goes by the handle's blocking twin:
    it blocks the loop for one call, and stores what it was given."""
    history = CompozyChatMessageHistory(memory)
    history.add_messages([HumanMessage(content="from a running loop")])
    await history.aadd_messages([AIMessage(content="and from the loop itself")])
    assert [m.content for m in history.messages] == [
        "from a running loop",
        "and from the loop itself",
    ]
    assert await memory.len() == 2
    history.clear()
    assert await memory.len() == 0


async def test_messages_after_ainvoke_on_the_same_client(memory: MemoryInstance) -> None:
    """The sync read after async writes on one client: no 'Event loop is closed'."""
    history = CompozyChatMessageHistory(memory)
    await history.aadd_messages([HumanMessage(content="async first")])
    assert [m.content for m in history.messages] == ["async first"]
    history.add_messages([AIMessage(content="then sync")])
    assert [m.content for m in await history.aget_messages()] == ["async first", "then sync"]


async def test_invoke_inside_an_async_handler_stores_each_turn(memory: MemoryInstance) -> None:
    """RunnableWithMessageHistory.invoke (sync) called from a coroutine: LangChain swallows a
    history's errors, so only reading the store back shows the turns were kept."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.runnables.history import RunnableWithMessageHistory

    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history"), ("human", "{question}")]
    )
    model = FakeListChatModel(responses=["first answer", "second answer"])
    history = CompozyChatMessageHistory(memory)
    with pytest.warns(DeprecationWarning, match="RunnableWithMessageHistory"):
        chain = RunnableWithMessageHistory(
            prompt | model,
            lambda session_id: history,
            input_messages_key="question",
            history_messages_key="history",
        )
    config = {"configurable": {"session_id": "s1"}}
    chain.invoke({"question": "one?"}, config=config)  # type: ignore[arg-type]
    await chain.ainvoke({"question": "two?"}, config=config)  # type: ignore[arg-type]
    got = [(m.role, m.text) for m in await memory.read()]
    assert got == [
        ("user", "one?"),
        ("assistant", "first answer"),
        ("user", "two?"),
        ("assistant", "second answer"),
    ]


def test_a_sync_memory_serves_both_kinds_of_method(valkey_server: EmbeddedServer) -> None:
    memory = SyncMemoryInstance.open(
        connect_sync(valkey_server.url), project=PROJECT, key=f"lc:{uuid.uuid4().hex}"
    )
    history = CompozyChatMessageHistory(memory)
    try:
        history.add_messages([HumanMessage(content="sync")])

        async def from_a_loop() -> list[BaseMessage]:
            await history.aadd_messages([AIMessage(content="async, in a worker thread")])
            return await history.aget_messages()

        got = asyncio.run(from_a_loop())
        assert [m.content for m in got] == ["sync", "async, in a worker thread"]
    finally:
        memory.client.close()


def test_sync_methods_outside_a_loop(valkey_server: EmbeddedServer) -> None:
    client: RedisClient = connect(valkey_server.url)
    history = CompozyChatMessageHistory(open_memory(client, f"lc:{uuid.uuid4().hex}"))
    try:
        sent = every_kind()
        history.add_messages(sent[:4])
        history.add_message(sent[4])
        history.add_user_message("and you?")
        history.add_ai_message("fine")
        got = history.messages
        assert got[:5] == sent[:5]
        assert [m.content for m in got[5:]] == ["and you?", "fine"]
        assert "Human: and you?" in str(history)
        history.clear()
        assert history.messages == []
    finally:
        close_unused(client)


async def test_runnable_with_message_history_records_each_turn(memory: MemoryInstance) -> None:
    """LangChain's own history-keeping runnable, with its fake chat model, over the adapter."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.runnables.history import RunnableWithMessageHistory

    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history"), ("human", "{question}")]
    )
    model = FakeListChatModel(responses=["first answer", "second answer"])
    histories: dict[str, CompozyChatMessageHistory] = {}

    def history_for(session_id: str) -> CompozyChatMessageHistory:
        return histories.setdefault(session_id, CompozyChatMessageHistory(memory))

    with pytest.warns(DeprecationWarning, match="RunnableWithMessageHistory"):
        chain = RunnableWithMessageHistory(
            prompt | model,
            history_for,
            input_messages_key="question",
            history_messages_key="history",
        )
    config = {"configurable": {"session_id": "s1"}}
    await chain.ainvoke({"question": "one?"}, config=config)  # type: ignore[arg-type]
    await chain.ainvoke({"question": "two?"}, config=config)  # type: ignore[arg-type]
    got = await histories["s1"].aget_messages()
    assert [(type(m), m.content) for m in got] == [
        (HumanMessage, "one?"),
        (AIMessage, "first answer"),
        (HumanMessage, "two?"),
        (AIMessage, "second answer"),
    ]


# Four spawned processes import the framework before writing: minutes on a loaded 2-core
# machine (adapter_fleet.START_TIMEOUT is 300 s), so this test's limit is above that.
@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_writer_processes_append_through_the_adapter_losing_nothing(
    valkey_server: EmbeddedServer,
) -> None:
    key = f"lc-fleet:{uuid.uuid4().hex}"
    run = await run_fleet(langchain_writer, valkey_server.url, key)
    client = connect(valkey_server.url)
    try:
        memory = MemoryInstance.open(client, project=PROJECT, key=key, counter=COUNTER)
        got = await CompozyChatMessageHistory(memory).aget_messages()
    finally:
        await client.aclose()
    pairs = [tuple(map(int, str(m.id).split(":"))) for m in got]
    lost, duplicated = tally(pairs)  # type: ignore[arg-type]
    print(f"langchain: {run.acknowledged} acknowledged, {len(got)} stored, lost {lost}, "
          f"duplicated {duplicated}, {run.seconds:.1f}s")  # fmt: skip
    assert run.acknowledged == WRITERS * APPENDS == len(got)
    assert (lost, duplicated) == (0, 0)
    assert in_writer_order(pairs)  # type: ignore[arg-type]
