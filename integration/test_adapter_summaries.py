"""Summaries through every door: after a flush, each adapter's default read shows the summary
first, the way its framework shows a conversation's preamble, then the newest messages; each
adapter is built on a MemoryManager memory, so flushing is on by default."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from llama_index.core.llms import ChatMessage

from compozy_memory import MemoryInstance, MemoryManager, MemoryRegistry
from compozy_memory._io.translate import RedisClient
from compozy_memory.adapters.langchain import CompozyChatMessageHistory
from compozy_memory.adapters.llama_index import SUMMARY_MARK, CompozyChatStore
from compozy_memory.adapters.openai_agents import CompozySession
from integration.memories import COUNTER

PROJECT_YAML = """
project: doors
memories:
  - id: chat
    type: token_based
    max_tokens: 1200
    flushing_strategy:
      type: hybrid_summary
      summarize_threshold: 0.8
      summary_tokens: 200
      summarize_oldest_percent: 50
    summarizer:
      type: extractive
"""
MESSAGES = 80


@pytest.fixture
async def manager(client: RedisClient, tmp_path: Path) -> AsyncIterator[MemoryManager]:
    (tmp_path / "compozy.yaml").write_text(PROJECT_YAML)
    manager = MemoryManager(MemoryRegistry.load(tmp_path), client, counter=COUNTER)
    yield manager
    await manager.aclose()


async def _summaries(memory: MemoryInstance) -> list[str]:
    return [summary.text for summary in (await memory.snapshot(1)).summaries]


def _turn(i: int) -> str:
    return f"turn {i}: the customer asks about order {1000 + i} and its delivery window"


async def test_openai_agents_session_shows_the_summary_first(manager: MemoryManager) -> None:
    session = await CompozySession.from_manager(manager, "chat", uuid.uuid4().hex)
    memory = session.memory
    assert isinstance(memory, MemoryInstance)
    assert memory.flusher is not None  # flushing is on by default
    for i in range(MESSAGES):
        await session.add_items(
            [{"role": "user" if i % 2 == 0 else "assistant", "content": _turn(i)}]
        )
    await memory.flusher.wait_idle()
    await memory.flush()
    items = await session.get_items()
    summaries = await _summaries(memory)
    assert summaries
    for item, summary in zip(items, summaries, strict=False):
        assert item == {"role": "system", "content": summary}
    assert len(items) < MESSAGES
    assert items[-1] == {"role": "assistant", "content": _turn(MESSAGES - 1)}
    # The newest items follow the summaries in order; a limit reaching past them includes them.
    tail = [str(item["content"]) for item in items[len(summaries) :]]  # type: ignore[typeddict-item]
    assert tail == [_turn(i) for i in range(MESSAGES - len(tail), MESSAGES)]
    assert await session.get_items(limit=len(items)) == items
    assert await session.get_items(limit=2) == items[-2:]


async def test_langchain_history_shows_the_summary_first(manager: MemoryManager) -> None:
    history = await CompozyChatMessageHistory.from_manager(manager, "chat", uuid.uuid4().hex)
    memory = history.memory
    assert isinstance(memory, MemoryInstance)
    assert memory.flusher is not None
    for i in range(MESSAGES):
        message = HumanMessage(_turn(i)) if i % 2 == 0 else AIMessage(_turn(i))
        await history.aadd_messages([message])
    await memory.flusher.wait_idle()
    await memory.flush()
    messages = await history.aget_messages()
    summaries = await _summaries(memory)
    assert summaries
    assert messages[: len(summaries)] == [SystemMessage(text) for text in summaries]
    newest = [m.text for m in messages[len(summaries) :]]
    assert newest == [_turn(i) for i in range(MESSAGES - len(newest), MESSAGES)]
    assert len(newest) < MESSAGES


async def test_llama_index_store_shows_the_summary_first(manager: MemoryManager) -> None:
    store = CompozyChatStore.from_manager(manager, "chat")
    key = uuid.uuid4().hex
    for i in range(MESSAGES):
        role = "user" if i % 2 == 0 else "assistant"
        await store.async_add_message(key, ChatMessage(role=role, content=_turn(i)))
    memory = await store.memory(key)
    assert isinstance(memory, MemoryInstance)
    assert memory.flusher is not None
    await memory.flusher.wait_idle()
    await memory.flush()
    messages = await store.aget_messages(key)
    summaries = await _summaries(memory)
    assert summaries
    for message, summary in zip(messages, summaries, strict=False):
        assert (message.role, message.content) == ("system", summary)
        assert message.additional_kwargs == {SUMMARY_MARK: True}
    newest = [m.content for m in messages[len(summaries) :]]
    assert newest == [_turn(i) for i in range(MESSAGES - len(newest), MESSAGES)]
    assert len(newest) < MESSAGES - 1
    # Writing back what was read keeps the summary the memory's own, not a stored message.
    await store.aset_messages(key, messages)
    assert await store.aget_messages(key) == messages
    assert len(await memory.read()) == len(newest)
    # delete_message counts over what get_messages shows: the summaries come first.
    assert await store.adelete_message(key, 0) is None
    removed = await store.adelete_message(key, len(summaries))
    assert removed is not None
    assert removed.content == newest[0]
