"""Code that runs in spawned OS processes acting as agent replicas."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from threading import Barrier

from compozy_memory import HeuristicCounter, MemoryInstance, MemoryPolicy
from integration.engines import EngineSpec

WRITER_TTL_SECONDS = 600


def tokens_for(writer: int, seq: int) -> int | None:
    """Even writers supply exact counts (as from an LLM's usage); odd ones let a counter count."""
    return None if writer % 2 else 1 + (writer * 7 + seq) % 40


def append_worker(
    spec: EngineSpec, project: str, key: str, writer: int, count: int, start: Barrier
) -> list[tuple[int, int]]:
    """Append ``count`` messages one by one; return (seq, id) of every acknowledged append."""
    return asyncio.run(_append(spec, project, key, writer, count, start))


async def _append(
    spec: EngineSpec, project: str, key: str, writer: int, count: int, start: Barrier
) -> list[tuple[int, int]]:
    client = spec.client()
    mem = MemoryInstance.open(
        client,
        project=project,
        key=key,
        counter=HeuristicCounter(),
        policy=MemoryPolicy(ttl=timedelta(seconds=WRITER_TTL_SECONDS)),
    )
    acknowledged: list[tuple[int, int]] = []
    try:
        await client.ping()
        start.wait(timeout=60)
        for seq in range(count):
            result = await mem.append(
                {
                    "role": "user" if seq % 2 else "assistant",
                    "content": f"writer {writer} turn {seq} " + "word " * (seq % 13),
                    "tokens": tokens_for(writer, seq),
                    "metadata": {"writer": writer, "seq": seq},
                }
            )
            acknowledged.append((seq, result.first_id))
            if seq % 50 == 0:
                await asyncio.sleep(0.001)  # let the other replicas interleave
    finally:
        await client.aclose()
    return acknowledged


def shared_memory_agent(
    spec: EngineSpec, project_dir: str, agent: str, context: dict[str, object], count: int
) -> dict[str, object]:
    """Act as ``agent`` of the example project: write ``count`` facts if it may, then report
    what it sees and which of its writes were refused."""
    return asyncio.run(_shared_memory_agent(spec, project_dir, agent, context, count))


async def _shared_memory_agent(
    spec: EngineSpec, project_dir: str, agent: str, context: dict[str, object], count: int
) -> dict[str, object]:
    from compozy_memory import MemoryManager, MemoryRegistry, ReadOnlyMemoryError

    client = spec.client()
    manager = MemoryManager(MemoryRegistry.load(project_dir), client, counter=HeuristicCounter())
    try:
        (memory,) = [m for m in await manager.for_agent(agent, context) if "knowledge" in m.key]
        refused = 0
        for i in range(count):
            try:
                await memory.append({"role": "system", "type": "knowledge", "content": f"f{i}"})
            except ReadOnlyMemoryError:
                refused += 1
        return {
            "key": memory.key,
            "read_only": memory.read_only,
            "refused": refused,
            "seen": [m.content for m in await memory.read()],
        }
    finally:
        await client.aclose()
