"""Results pinned by a memory's offloaded messages: they live as long as the memory, and only
the memory that pinned one releases it, once per pin."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest

from compozy_memory import HeuristicCounter, MemoryInstance, MemoryPolicy, ResultStore
from compozy_memory._store.results_store import DataRef, result_key
from compozy_memory._wire.translate import RedisClient
from integration.engines import EngineSpec

pytestmark = pytest.mark.faults

PROJECT = "pins"


def big() -> str:
    """A result too large for the memory, different each time (results are stored by their
    hash: the same bytes in two tests would be one result)."""
    return uuid.uuid4().hex + "\n".join(f"line {i}: " + "data " * 30 for i in range(400))


def memory(client: RedisClient, key: str, **policy: Any) -> MemoryInstance:
    return MemoryInstance.open(
        client,
        project=PROJECT,
        key=key,
        counter=HeuristicCounter(),
        policy=MemoryPolicy(**{"max_tokens": 500, **policy}),
        results=ResultStore(client, PROJECT),
    )


async def offload(mem: MemoryInstance, payload: str) -> DataRef:
    call = f"c{uuid.uuid4().hex[:8]}"
    await mem.append(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": call, "function": {"name": "q"}}],
        }
    )
    await mem.append({"role": "tool", "tool_call_id": call, "content": payload}, offload=True)
    (stub,) = [m for m in await mem.read() if m.tool_call_id == call]
    assert stub.metadata is not None
    return DataRef.from_json(stub.metadata["result_ref"])


async def refs(client: RedisClient, ref: DataRef) -> int:
    return int(await client.hget(result_key(PROJECT, ref.namespace, ref.sha256), "refs") or 0)


async def test_a_pinned_result_lives_as_long_as_the_memory_that_writes_on(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    ttl = timedelta(seconds=2)
    mem = memory(client, memory_key, ttl=ttl)
    payload = big()
    ref = await offload(mem, payload)
    key = result_key(PROJECT, ref.namespace, ref.sha256)
    started = asyncio.get_running_loop().time()
    writes = 0
    # The memory is written every half second for three TTLs: its keys never expire, and
    # the result it pins must not either.
    while asyncio.get_running_loop().time() - started < 3 * ttl.total_seconds():
        await mem.append({"role": "user", "content": f"still talking {writes}"})
        writes += 1
        await asyncio.sleep(0.5)
        assert await client.exists(key), f"the pinned result expired after {writes} writes"
    assert await mem.results.load_result(ref) == payload.encode()
    record(
        group="adversarial",
        fault="a result pinned by a memory whose TTL (2 s) is renewed by writes for 6 s",
        engine=engine.name,
        promise="a pinned result lives as long as the memory that pins it",
        operations=writes,
        acknowledged=writes,
        lost=0,
        duplicated=0,
        observed=f"{writes} writes over 6 s; load_result read the result at the end",
    )


async def test_only_the_memory_that_pinned_a_result_releases_it_once(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    owner = memory(client, memory_key)
    ref = await offload(owner, big())
    assert await refs(client, ref) == 1
    # Another memory forges a message naming the same result: its clear must not unpin it.
    forger = memory(client, memory_key + ":forger")
    await forger.append(
        {"role": "user", "content": "see this", "metadata": {"result_ref": ref.to_json()}}
    )
    await forger.clear()
    assert await refs(client, ref) == 1
    # A replace that keeps the stub moves nothing out of this memory's own pins record.
    kept = [m for m in await owner.read() if m.metadata and "result_ref" in m.metadata]
    await owner.replace(kept)
    assert await refs(client, ref) == 1
    # The owner's clear releases its one pin, once.
    await owner.clear()
    assert await refs(client, ref) == 0
    await owner.clear()
    assert await refs(client, ref) == 0
    record(
        group="adversarial",
        fault="a forged result_ref in another memory, a replace that keeps the stub, two clears",
        engine=engine.name,
        promise="only the memory that pinned a result releases it, once per pin",
        operations=5,
        acknowledged=5,
        lost=0,
        duplicated=0,
        observed="refs 1 after the forger's clear and after the replace; 0 after the owner's "
        "first clear, still 0 after its second",
    )
