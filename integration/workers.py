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
