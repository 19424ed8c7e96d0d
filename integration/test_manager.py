"""MemoryManager on real engines: shared handles, read-only handles, shared memories."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import shutil
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from redis.asyncio import Redis

from compozy_memory import (
    BackendUnavailableError,
    MemoryManager,
    MemoryNotFoundError,
    MemoryRegistry,
    ReadOnlyMemoryError,
    RetryPolicy,
    TemplateError,
    connect,
)
from compozy_memory._config.agents import MemoryReference
from compozy_memory._io.translate import RedisClient
from integration.engines import EngineSpec
from integration.memories import COUNTER
from integration.workers import shared_memory_agent

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "project"


def context(user: str = "42", workflow: str | None = None) -> dict[str, object]:
    return {
        "workflow": {"id": workflow or uuid.uuid4().hex, "input": {"user_id": user,
                                                                   "ticket_id": "T-1"}},
    }  # fmt: skip


@pytest.fixture
def manager(client: RedisClient) -> MemoryManager:
    return MemoryManager(MemoryRegistry.load(EXAMPLES), client, counter=COUNTER)


async def test_handles_are_shared_per_memory_key_and_mode(manager: MemoryManager) -> None:
    user = uuid.uuid4().hex
    a = await manager.get("customer-support", context(user))
    b = await manager.get("customer-support", context(user))
    reader = await manager.get(MemoryReference("customer-support", "read-only"), context(user))
    other = await manager.get("customer-support", context(user + "x"))
    assert a is b
    assert reader is not a
    assert reader.read_only
    assert other is not a
    assert a.key == f"compozy:acme:memory:{{customer-support:user:{user}}}"
    assert a.policy.max_tokens == 4000
    assert a.policy.priority_of("system_prompt") == 0


async def test_two_memories_with_one_key_never_share_storage(manager: MemoryManager) -> None:
    support, sql = await manager.for_agent("triage-bot", context())
    assert support.key.endswith("{customer-support:ticket:T-1}")
    assert sql.key.endswith("{sql-agent:ticket:T-1}")
    await support.clear()
    await sql.clear()
    await support.append({"role": "user", "content": "only in support"})
    assert await sql.read() == []


async def test_agents_sharing_a_memory_see_each_others_messages(manager: MemoryManager) -> None:
    (curator,) = await manager.for_agent("knowledge-curator", context())
    _, knowledge = await manager.for_agent("sql-analyst", context())
    assert knowledge.key == curator.key == "compozy:acme:memory:{project-knowledge:project:acme}"
    assert knowledge.read_only
    assert not curator.read_only
    await curator.clear()
    await curator.append(
        {"role": "system", "type": "knowledge", "content": "Refunds need a ticket"}
    )
    assert [m.content for m in await knowledge.read()] == ["Refunds need a ticket"]
    assert (await knowledge.read())[0].priority == 1  # knowledge is priority 1 in its resource


async def test_read_only_handles_never_reach_redis() -> None:
    # A client that cannot connect: any command sent would raise BackendUnavailableError.
    dead = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    manager = MemoryManager(MemoryRegistry.load(EXAMPLES), dead, counter=COUNTER)
    reader = await manager.get(MemoryReference("project-knowledge", "read-only"))
    for write in (
        reader.append({"role": "user", "content": "x"}),
        reader.append_many([{"role": "user", "content": "x"}]),
        reader.replace([]),
        reader.trim(keep_messages=0),
        reader.clear(),
        reader.set_ttl(60),
    ):
        with pytest.raises(ReadOnlyMemoryError, match="read-only"):
            await write
    await dead.aclose()


async def test_the_manager_hands_its_retry_policy_to_every_handle() -> None:
    dead = connect("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    quick = RetryPolicy(attempts=3, deadline=0.5, initial_backoff=0.01)
    manager = MemoryManager(MemoryRegistry.load(EXAMPLES), dead, counter=COUNTER, retry=quick)
    handle = await manager.get("sql-agent", {"workflow": {"id": "w1"}})
    assert handle.retry is quick
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError):
        await handle.append({"role": "user", "content": "x"})
    # Bounded by the policy alone: connect() leaves redis-py no retries of its own to stack.
    assert time.monotonic() - started < 1.5
    await manager.aclose()
    await dead.aclose()


async def connected_clients(engine: EngineSpec) -> int:
    total = 0
    for node in engine.node_clients():
        total += int((await node.info("clients"))["connected_clients"])
        await node.aclose()
    return total


async def test_lookups_leak_nothing(engine: EngineSpec, manager: MemoryManager) -> None:
    await manager.start()  # opens the pool's first connection and loads the scripts
    tasks_before = asyncio.all_tasks()
    clients_before = await connected_clients(engine)
    for i in range(5_000):
        handle = await manager.get("customer-support", context(f"user-{i}"))
        assert handle.policy.max_tokens == 4000
    del handle
    gc.collect()
    assert manager.open_handles == 0
    assert asyncio.all_tasks() <= tasks_before  # no task started (one of start()'s may end)
    assert await connected_clients(engine) == clients_before  # lookups open no connection


async def test_errors_name_what_is_wrong(manager: MemoryManager) -> None:
    with pytest.raises(MemoryNotFoundError, match="unknown memory 'customer'"):
        await manager.get("customer", context())
    with pytest.raises(TemplateError, match=r"needs workflow\.input\.user_id"):
        await manager.get("customer-support", {"workflow": {"input": {}}})
    with pytest.raises(MemoryNotFoundError, match="unknown agent 'nobody'"):
        await manager.for_agent("nobody", context())
    assert await manager.for_agent("greeter", context()) == []


async def test_reload_keeps_running_handles_on_their_resource(
    client: RedisClient, tmp_path: Path
) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "p")
    registry = MemoryRegistry.load(tmp_path / "p")
    manager = MemoryManager(registry, client, counter=COUNTER)
    before = await manager.get("customer-support", context("7"))
    path = tmp_path / "p" / "memory" / "customer-support.yaml"
    path.write_text(path.read_text().replace("max_tokens: 4000", "max_tokens: 9000"))
    registry.reload()
    after = await manager.get("customer-support", context("7"))
    assert before.policy.max_tokens == 4000
    assert after.policy.max_tokens == 9000
    assert after.key == before.key  # same conversation, new limits


async def test_reader_and_writer_processes_share_a_memory(engine: EngineSpec) -> None:
    workflow = uuid.uuid4().hex
    client = engine.client()
    registry = MemoryRegistry.load(EXAMPLES)
    curator = await MemoryManager(registry, client).get("project-knowledge")
    await curator.clear()
    await client.aclose()
    spawn = multiprocessing.get_context("spawn")
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(2, mp_context=spawn) as pool:
        writer = await loop.run_in_executor(
            pool, shared_memory_agent, engine, str(EXAMPLES), "knowledge-curator",
            context(workflow=workflow), 5,
        )  # fmt: skip
        reader = await loop.run_in_executor(
            pool, shared_memory_agent, engine, str(EXAMPLES), "sql-analyst",
            context(workflow=workflow), 5,
        )  # fmt: skip
    assert writer["key"] == reader["key"]
    assert (writer["read_only"], writer["refused"]) == (False, 0)
    assert (reader["read_only"], reader["refused"]) == (True, 5)
    assert reader["seen"] == writer["seen"] == [f"f{i}" for i in range(5)]
