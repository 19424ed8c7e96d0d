"""Spawned processes for the agent-runtime tests (session facts under concurrent writers)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from threading import Barrier

from compozy_memory import HeuristicCounter, MemoryInstance, MemoryPolicy
from integration.engines import EngineSpec

FACT_TTL_SECONDS = 600


def facts_worker(
    spec: EngineSpec,
    project: str,
    key: str,
    writer: int,
    count: int,
    cap: int,
    start: Barrier,
    last: Barrier,
) -> int:
    """Set ``count`` facts ``w<writer>:<i>`` one by one, then, after every writer is done,
    set ``w<writer>:0`` again (a move to the newest end). Returns how many facts were set."""
    return asyncio.run(_facts(spec, project, key, writer, count, cap, start, last))


async def _facts(
    spec: EngineSpec,
    project: str,
    key: str,
    writer: int,
    count: int,
    cap: int,
    start: Barrier,
    last: Barrier,
) -> int:
    client = spec.client()
    mem = MemoryInstance.open(
        client,
        project=project,
        key=key,
        counter=HeuristicCounter(),
        policy=MemoryPolicy(ttl=timedelta(seconds=FACT_TTL_SECONDS), facts_max=cap),
    )
    try:
        await client.ping()
        start.wait(timeout=60)
        for i in range(count):
            if i % 5 == 4:  # some calls set two facts at once
                await mem.facts.set({f"w{writer}:{i}": f"v{i}", f"w{writer}:{i}b": f"v{i}b"})
            else:
                await mem.facts.set(f"w{writer}:{i}", f"value {i} of writer {writer}")
        await asyncio.get_running_loop().run_in_executor(None, last.wait, 60)
        await mem.facts.set(f"w{writer}:0", "moved")
    finally:
        await client.aclose()
    return count + count // 5 + 1
