"""Results pinned by a memory's offloaded messages: they live as long as the memory, and only
the memory that pinned one releases it, once per pin."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest

from compozy_memory import MemoryInstance, ResultStore
from compozy_memory._io.translate import RedisClient
from compozy_memory._results.store import DataRef, result_key
from integration.engines import EngineSpec
from integration.memories import memory

pytestmark = pytest.mark.faults

PROJECT = "pins"


def big() -> str:
    """A result too large for the memory, different each time (results are stored by their
    hash: the same bytes in two tests would be one result)."""
    return uuid.uuid4().hex + "\n".join(f"line {i}: " + "data " * 30 for i in range(400))


def pinned(client: RedisClient, key: str, **policy: Any) -> MemoryInstance:
    """A memory of 500 tokens whose results go to this project's store."""
    results = ResultStore(client, PROJECT)
    return memory(client, key, project=PROJECT, max_tokens=500, results=results, **policy)


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


@pytest.mark.slow
async def test_a_pinned_result_lives_as_long_as_the_memory_that_writes_on(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    ttl = timedelta(seconds=2)
    mem = pinned(client, memory_key, ttl=ttl)
    payload = big()
    ref = await offload(mem, payload)
    key = result_key(PROJECT, ref.namespace, ref.sha256)
    started = asyncio.get_running_loop().time()
    writes = expired = 0
    # The memory is written every half second for three TTLs: its keys never expire, and
    # the result it pins must not either.
    while asyncio.get_running_loop().time() - started < 3 * ttl.total_seconds():
        await mem.append({"role": "user", "content": f"still talking {writes}"})
        writes += 1
        await asyncio.sleep(0.5)
        expired += not await client.exists(key)
    assert expired == 0, f"the pinned result was gone at {expired} of {writes} checks"
    loaded = await mem.results.load_result(ref)
    assert loaded == payload.encode()
    record(
        group="adversarial-2",
        item=1,
        fault="a result offloaded from a memory whose TTL (2 s) later writes keep renewing "
        "for 6 s; load_result at the end",
        engine=engine.name,
        promise="a pinned result lives as long as the memory that pins it",
        operations=writes + 1,
        acknowledged=writes + (loaded == payload.encode()),
        lost=expired,
        duplicated=0,
        observed=f"{writes} writes over 6 s; the result was there at each of {writes} checks "
        "and load_result read it whole at the end",
    )


async def test_only_the_memory_that_pinned_a_result_releases_it_once(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    owner = pinned(client, memory_key)
    ref = await offload(owner, big())
    seen = [await refs(client, ref)]
    # Another memory forges a message naming the same result: its clear must not unpin it.
    forger = pinned(client, memory_key + ":forger")
    await forger.append(
        {"role": "user", "content": "see this", "metadata": {"result_ref": ref.to_json()}}
    )
    await forger.clear()
    seen.append(await refs(client, ref))
    # A replace that keeps the stub moves nothing out of this memory's own pins record.
    kept = [m for m in await owner.read() if m.metadata and "result_ref" in m.metadata]
    await owner.replace(kept)
    seen.append(await refs(client, ref))
    # The owner's clear releases its one pin, once.
    await owner.clear()
    seen.append(await refs(client, ref))
    await owner.clear()
    seen.append(await refs(client, ref))
    assert seen == [1, 1, 1, 0, 0]
    record(
        group="adversarial-2",
        item=2,
        fault="another memory's clear() of a forged result_ref; a replace that keeps the stub; "
        "the owner's clear twice",
        engine=engine.name,
        promise="only the memory that pinned a result releases it, once per pin",
        operations=len(seen) - 1,
        acknowledged=len(seen) - 1,
        lost=seen[0] - min(seen[:3]),  # pins dropped before the owner's clear
        duplicated=seen[3] - seen[4],  # releases after the owner's one pin was gone
        observed=f"refs after the offload, the forger's clear, the replace, the owner's two "
        f"clears: {seen}",
    )
