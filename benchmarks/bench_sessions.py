"""How fast ``list_sessions`` is with 100,000 sessions in a project's index.

Fills the index through ``lua/sessions/session_touch.lua`` (pipelined, 10 agents), then times pages
of 50: the first page, a page deep in by cursor, and one agent's first page. Printed, never
asserted. Run: ``python benchmarks/bench_sessions.py [--sessions 100000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from redis.asyncio import Redis

from compozy_memory._sessions.index import SessionIndex, uuid7
from compozy_memory._wire.scripts import script
from compozy_memory.embedded import start_server


async def fill(client: Redis, index: SessionIndex, n: int) -> None:
    touch = script("session_touch")
    await client.script_load(touch.source)
    for start in range(0, n, 1000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(n, start + 1000)):
            agent = f"agent-{i % 10}"
            pipe.execute_command(
                "EVALSHA", touch.sha, 3, index.all_key, index.agent_key(agent), index.info_key,
                f"chat:session:{uuid7()}", agent, 1, i % 40, 12 * (i % 40),
            )  # fmt: skip
        await pipe.execute()


async def timed(label: str, call: object, repeat: int = 50) -> None:
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        await call()  # type: ignore[operator]
        samples.append((time.perf_counter() - began) * 1000)
    print(f"{label:<40} median {statistics.median(samples):6.2f} ms   p95 "
          f"{sorted(samples)[int(0.95 * len(samples))]:6.2f} ms")  # fmt: skip


async def main(n: int) -> None:
    with start_server() as server:
        client = Redis.from_url(server.url)
        index = SessionIndex(client, "bench")
        began = time.perf_counter()
        await fill(client, index, n)
        print(f"filled {n:,} sessions in {time.perf_counter() - began:.1f} s "
              f"(index: {await client.zcard(index.all_key):,} entries)")  # fmt: skip
        first = await index.page(limit=50)
        await timed("list_sessions(limit=50), first page", lambda: index.page(limit=50))
        cursor = first.cursor
        for _ in range(200):  # 10,000 sessions in
            cursor = (await index.page(limit=50, cursor=cursor)).cursor
        deep = cursor
        await timed("list_sessions(limit=50), page 201", lambda: index.page(limit=50, cursor=deep))
        await timed(
            "list_sessions(agent=..., limit=50)", lambda: index.page(agent="agent-3", limit=50)
        )
        await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=100_000)
    asyncio.run(main(parser.parse_args().sessions))
