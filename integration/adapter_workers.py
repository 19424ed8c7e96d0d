"""Spawned processes that append through the framework adapters, as agent replicas would.

Even writers use the adapters' synchronous methods (no event loop in the process, so the
private loop runs them); odd writers use the async ones inside ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
from threading import Barrier

from compozy_memory import HeuristicCounter, MemoryInstance, connect
from compozy_memory._wire.translate import RedisClient
from compozy_memory.adapters._sync import run_sync

PROJECT = "adapters"


def open_memory(client: RedisClient, key: str) -> MemoryInstance:
    return MemoryInstance.open(client, project=PROJECT, key=key, counter=HeuristicCounter())


def langchain_writer(url: str, key: str, writer: int, count: int, start: Barrier) -> int:
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

    from compozy_memory.adapters.langchain import CompozyChatMessageHistory

    def message(seq: int) -> BaseMessage:
        kind = HumanMessage if seq % 2 else AIMessage
        return kind(content=f"writer {writer} turn {seq}", id=f"{writer}:{seq}")

    if writer % 2 == 0:
        client = connect(url)
        history = CompozyChatMessageHistory(open_memory(client, key))
        start.wait(timeout=60)
        for seq in range(count):
            history.add_messages([message(seq)])
        run_sync(client.aclose(), method="aclose", instead="")
        return count

    async def run() -> int:
        client = connect(url)
        history = CompozyChatMessageHistory(open_memory(client, key))
        await client.ping()
        start.wait(timeout=60)
        for seq in range(count):
            await history.aadd_messages([message(seq)])
        await client.aclose()
        return count

    return asyncio.run(run())


def openai_agents_writer(url: str, key: str, writer: int, count: int, start: Barrier) -> int:
    from compozy_memory.adapters.openai_agents import CompozySession

    async def run() -> int:
        client = connect(url)
        session = CompozySession(open_memory(client, key))
        await client.ping()
        start.wait(timeout=60)
        for seq in range(count):
            if seq % 2:
                item = {"role": "user", "content": f"writer {writer} turn {seq}"}
            else:
                item = {
                    "type": "function_call",
                    "call_id": f"call-{writer}-{seq}",
                    "name": "lookup",
                    "arguments": f'{{"writer": {writer}, "seq": {seq}}}',
                }
            await session.add_items([item])  # type: ignore[list-item]
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

    if writer % 2 == 0:
        client = connect(url)
        store = CompozyChatStore.from_client(client, project=PROJECT, counter=HeuristicCounter())
        start.wait(timeout=60)
        for seq in range(count):
            store.add_message(key, message(seq))
        run_sync(client.aclose(), method="aclose", instead="")
        return count

    async def run() -> int:
        client = connect(url)
        store = CompozyChatStore.from_client(client, project=PROJECT, counter=HeuristicCounter())
        await client.ping()
        start.wait(timeout=60)
        for seq in range(count):
            await store.async_add_message(key, message(seq))
        await client.aclose()
        return count

    return asyncio.run(run())
