"""Spawned processes that append through the framework adapters, as agent replicas would.

Writers take turns at the ways an adapter is reached: its synchronous methods over an async
handle (so through the handle's blocking twin), its synchronous methods over a
:class:`SyncMemoryInstance` on a blocking client, and its async methods inside ``asyncio.run``
(the OpenAI Agents SDK's sessions are async only: some of its writers run each call on a
fresh event loop, as ``Runner.run_sync`` does).
"""

from __future__ import annotations

import asyncio
from threading import Barrier

from compozy_memory import HeuristicCounter, MemoryInstance, SyncMemoryInstance, connect
from compozy_memory._io.connection import close_twin, connect_sync
from compozy_memory._io.translate import RedisClient
from compozy_memory._wire.background import wait_background
from integration.adapter_fleet import START_TIMEOUT
from integration.memories import memory

PROJECT = "adapters"


def open_memory(client: RedisClient, key: str) -> MemoryInstance:
    return memory(client, key, project=PROJECT)


def open_sync_memory(url: str, key: str) -> SyncMemoryInstance:
    client = connect_sync(url)
    return SyncMemoryInstance.open(client, project=PROJECT, key=key, counter=HeuristicCounter())


def close_unused(client: RedisClient) -> None:
    """Close an async client only its blocking twin used (once the twin's background work,
    the index catch-ups its writes set off, is done)."""
    wait_background()
    close_twin(client)
    asyncio.run(client.aclose())


def langchain_writer(url: str, key: str, writer: int, count: int, start: Barrier) -> int:
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

    from compozy_memory.adapters.langchain import CompozyChatMessageHistory

    def message(seq: int) -> BaseMessage:
        kind = HumanMessage if seq % 2 else AIMessage
        return kind(content=f"writer {writer} turn {seq}", id=f"{writer}:{seq}")

    if writer % 4 == 2:
        memory = open_sync_memory(url, key)
        history = CompozyChatMessageHistory(memory)
        start.wait(timeout=START_TIMEOUT)
        for seq in range(count):
            history.add_messages([message(seq)])
        wait_background()
        memory.client.close()
        return count
    if writer % 4 == 0:
        client = connect(url)
        history = CompozyChatMessageHistory(open_memory(client, key))
        start.wait(timeout=START_TIMEOUT)
        for seq in range(count):
            history.add_messages([message(seq)])
        close_unused(client)
        return count

    async def run() -> int:
        client = connect(url)
        history = CompozyChatMessageHistory(open_memory(client, key))
        await client.ping()
        start.wait(timeout=START_TIMEOUT)
        for seq in range(count):
            await history.aadd_messages([message(seq)])
        await client.aclose()
        return count

    return asyncio.run(run())


def openai_agents_writer(url: str, key: str, writer: int, count: int, start: Barrier) -> int:
    from compozy_memory.adapters.openai_agents import CompozySession

    def item(seq: int) -> dict[str, str]:
        if seq % 2:
            return {"role": "user", "content": f"writer {writer} turn {seq}"}
        return {
            "type": "function_call",
            "call_id": f"call-{writer}-{seq}",
            "name": "lookup",
            "arguments": f'{{"writer": {writer}, "seq": {seq}}}',
        }

    if writer % 2 == 0:
        # One session, each call on a new event loop (Runner.run_sync's way): the first
        # loop's client is gone with it, so later calls go by the blocking twin.
        client = connect(url)
        session = CompozySession(open_memory(client, key))
        start.wait(timeout=START_TIMEOUT)
        for seq in range(count):
            asyncio.run(session.add_items([item(seq)]))  # type: ignore[list-item]
        wait_background()
        close_twin(client)
        return count

    async def run() -> int:
        client = connect(url)
        session = CompozySession(open_memory(client, key))
        await client.ping()
        start.wait(timeout=START_TIMEOUT)
        for seq in range(count):
            await session.add_items([item(seq)])  # type: ignore[list-item]
        await client.aclose()
        return count

    return asyncio.run(run())


def llama_index_writer(url: str, key: str, writer: int, count: int, start: Barrier) -> int:
    from llama_index.core.llms import ChatMessage

    from compozy_memory.adapters.llama_index import CompozyChatStore

    def message(seq: int) -> ChatMessage:
        return ChatMessage(
            role="user" if seq % 2 else "assistant",
            content=f"writer {writer} turn {seq}",
            additional_kwargs={"writer": writer, "seq": seq},
        )

    if writer % 4 == 2:  # sync methods over a blocking client
        blocking = connect_sync(url)
        store = CompozyChatStore.from_client(blocking, project=PROJECT, counter=HeuristicCounter())
        start.wait(timeout=START_TIMEOUT)
        for seq in range(count):
            store.add_message(key, message(seq))
        wait_background()
        blocking.close()
        return count
    if writer % 4 == 0:  # sync methods over an async client (its blocking twin)
        client = connect(url)
        store = CompozyChatStore.from_client(client, project=PROJECT, counter=HeuristicCounter())
        start.wait(timeout=START_TIMEOUT)
        for seq in range(count):
            store.add_message(key, message(seq))
        close_unused(client)
        return count

    async def run() -> int:
        client = connect(url)
        store = CompozyChatStore.from_client(client, project=PROJECT, counter=HeuristicCounter())
        await client.ping()
        start.wait(timeout=START_TIMEOUT)
        for seq in range(count):
            await store.async_add_message(key, message(seq))
        await client.aclose()
        return count

    return asyncio.run(run())
