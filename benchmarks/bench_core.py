"""Core figures, measured in one run against one server, printed (never asserted).

1. Append throughput at 64 concurrent sessions with token counts supplied, against raw
   redis-py ``RPUSH`` of the same JSON from the same client: the cost of the script (ids,
   totals, TTL on every key, validation) over the cheapest possible write.
2. Reading the newest 8k-token window of a 5,000-message memory against the same read on a
   50-message memory: the window read must cost what the window costs, not what the history
   costs.

Rounds of baseline and candidate alternate and the medians are compared, so drift on a busy
machine hits both sides. Run: ``python benchmarks/bench_core.py`` (starts an embedded Valkey)
or ``python benchmarks/bench_core.py --url redis://127.0.0.1:6379/0``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from compozy_memory import MemoryInstance, SuppliedCounter
from compozy_memory.embedded import start_server

SESSIONS = 64
WINDOW_TOKENS = 8_000
MESSAGE_TOKENS = 200


def turn(session: int, seq: int) -> dict[str, object]:
    return {
        "role": "user" if seq % 2 else "assistant",
        "content": f"session {session} turn {seq}: " + "the quick brown fox " * 6,
        "tokens": 31,
    }


async def append_round(client: Redis, appends: int, mode: str) -> float:
    """Messages per second for SESSIONS concurrent sessions doing ``appends`` each.

    ``mode``: "raw" (RPUSH of the JSON), "batched" (MemoryInstance, the default) or
    "unbatched" (MemoryInstance with batching=False).
    """
    run = uuid.uuid4().hex

    async def session(s: int) -> None:
        if mode == "raw":
            key = f"bench:{run}:{s}"
            for seq in range(appends):
                body = json.dumps(turn(s, seq), separators=(",", ":"), ensure_ascii=False)
                await client.rpush(key, body.encode())
        else:
            mem = MemoryInstance.open(
                client,
                project="bench",
                key=f"{run}:{s}",
                counter=SuppliedCounter(),
                batching=mode == "batched",
            )
            for seq in range(appends):
                await mem.append(turn(s, seq))

    started = time.perf_counter()
    await asyncio.gather(*(session(s) for s in range(SESSIONS)))
    return SESSIONS * appends / (time.perf_counter() - started)


async def timed(call: Callable[[], Awaitable[object]], repeat: int) -> float:
    """Median seconds per call."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


async def fill(mem: MemoryInstance, count: int) -> None:
    text = "word " * (MESSAGE_TOKENS * 3 // 4)
    for start in range(0, count, 500):
        await mem.append_many(
            {"role": "user", "content": f"{i} {text}", "tokens": MESSAGE_TOKENS}
            for i in range(start, min(count, start + 500))
        )


async def main(url: str | None, rounds: int, appends: int) -> None:
    server = None if url else start_server()
    client = Redis.from_url(url or server.url, max_connections=SESSIONS)  # type: ignore[union-attr]
    try:
        modes = ("raw", "batched", "unbatched")
        for mode in modes:  # warm the pool and the script cache
            await append_round(client, 20, mode)
        rates: dict[str, list[float]] = {mode: [] for mode in modes}
        for _ in range(rounds):
            for mode in modes:
                rates[mode].append(await append_round(client, appends, mode))
        rate = {mode: statistics.median(values) for mode, values in rates.items()}

        large = MemoryInstance.open(client, project="bench", key=f"large-{uuid.uuid4().hex}")
        small = MemoryInstance.open(client, project="bench", key=f"small-{uuid.uuid4().hex}")
        await fill(large, 5_000)
        await fill(small, 50)
        sizes = {
            len(await large.read_window(WINDOW_TOKENS)),
            len(await small.read_window(WINDOW_TOKENS)),
        }
        assert len(sizes) == 1, f"both windows must hold the same messages, got {sizes}"
        large_times, small_times = [], []
        for _ in range(rounds):
            small_times.append(await timed(lambda: small.read_window(WINDOW_TOKENS), 200))
            large_times.append(await timed(lambda: large.read_window(WINDOW_TOKENS), 200))
        large_t, small_t = statistics.median(large_times), statistics.median(small_times)
    finally:
        await client.aclose()
        if server:
            server.stop()

    print(f"engine: {'embedded valkey' if server else url}; {rounds} alternating rounds, medians")
    print()
    print("| measure | baseline | compozy-memory | ratio | goal |")
    print("| --- | --- | --- | --- | --- |")
    for mode in ("batched", "unbatched"):
        print(
            f"| append, {SESSIONS} sessions, counts supplied, {mode} (msg/s) "
            f"| raw RPUSH {rate['raw']:,.0f} | {rate[mode]:,.0f} "
            f"| {rate[mode] / rate['raw']:.2f}x | >= 0.85x |"
        )
    print(
        f"| newest {WINDOW_TOKENS:,}-token window ({sizes.pop()} msgs), ms per read "
        f"| 50-msg memory {small_t * 1e3:.3f} | 5,000-msg memory {large_t * 1e3:.3f} "
        f"| {large_t / small_t:.2f}x | <= 1.1x |"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing server; default: start an embedded Valkey")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--appends", type=int, default=200, help="appends per session per round")
    options = parser.parse_args()
    asyncio.run(main(options.url, options.rounds, options.appends))
