"""Append latency while a memory is being flushed, measured in one run, printed.

Three scenarios on one memory, each with the same appenders (16 tasks, one append every
5 ms each) for the same time, rounds alternating:

* ``no flush``: appends only: the baseline.
* ``compozy``: a flusher loops, summarising with a 500 ms summarizer; appends never wait for
  it (the lock guards flushers only; the commit is one short script).
* ``lock held across flush`` (the Compozy spec's design): the flusher holds the memory's lock
  for the whole flush (snapshot, 500 ms summary, replace) and every append takes the same lock.

Run: ``python benchmarks/bench_flush.py`` (starts an embedded Valkey).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import time
import uuid
from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from compozy_memory import (
    ExtractiveSummarizer,
    Flusher,
    FlushSettings,
    HeuristicCounter,
    MemoryInstance,
    MemoryPolicy,
    Message,
    Summary,
    connect,
)
from compozy_memory._io.translate import RedisClient
from compozy_memory._metrics import FlushMetrics
from compozy_memory.embedded import start_server

APPENDERS = 16
INTERVAL = 0.005
SUMMARY_DELAY = 0.5
BUDGET = 3000
# The flush's snapshot bound; the library's default unless SNAPSHOT_LIMIT says otherwise.
SNAPSHOT_LIMIT = int(os.environ.get("SNAPSHOT_LIMIT", FlushSettings(max_tokens=1).snapshot_limit))
COUNTER = HeuristicCounter()


class SlowSummarizer:
    async def summarize(self, messages: Sequence[Message], *, max_tokens: int) -> Summary:
        await asyncio.sleep(SUMMARY_DELAY)
        return await ExtractiveSummarizer(COUNTER).summarize(messages, max_tokens=max_tokens)


def turn(i: int) -> dict[str, object]:
    return {"role": "user" if i % 2 else "assistant", "content": f"turn {i} " + "word " * 12}


async def spin_lock(client: RedisClient, key: str) -> str:
    token = secrets.token_hex(16)
    # A spin lock on purpose: this is the design being compared against.
    while not await client.set(key, token, nx=True, px=30_000):  # noqa: ASYNC110
        await asyncio.sleep(0.002)
    return token


async def spin_unlock(client: RedisClient, key: str, token: str) -> None:
    if (await client.get(key)) in (token, token.encode()):
        await client.delete(key)


async def scenario(client: RedisClient, mode: str, seconds: float) -> list[float]:
    memory = MemoryInstance.open(
        client,
        project="bench",
        key=f"flush-{uuid.uuid4().hex}",
        counter=COUNTER,
        policy=MemoryPolicy(max_tokens=BUDGET),
    )
    flusher = Flusher(
        memory.gateway,
        FlushSettings(max_tokens=BUDGET, summary_tokens=200, snapshot_limit=SNAPSHOT_LIMIT),
        SlowSummarizer(),
        COUNTER,
        metrics=FlushMetrics(CollectorRegistry()),
    )
    await memory.append_many(turn(i) for i in range(150))  # already past the threshold
    lock_key = memory.keys.lock + ":spec"
    latencies: list[float] = []
    stop = time.monotonic() + seconds

    async def appender(n: int) -> None:
        i = 0
        while time.monotonic() < stop:
            started = time.perf_counter()
            if mode == "lock held across flush":
                token = await spin_lock(client, lock_key)
                await memory.append(turn(i))
                await spin_unlock(client, lock_key, token)
            else:
                await memory.append(turn(i))
            latencies.append(time.perf_counter() - started)
            i += 1
            await asyncio.sleep(INTERVAL)

    async def flush_loop() -> None:
        while time.monotonic() < stop:
            if mode == "compozy":
                await flusher.flush()
            else:  # the spec: lock, read everything, summarise, replace, unlock
                token = await spin_lock(client, lock_key)
                messages = await memory.read()
                cut = len(messages) * 3 // 10
                summary = await SlowSummarizer().summarize(messages[:cut], max_tokens=200)
                await memory.replace(
                    [{"role": "system", "type": "summary", "content": summary.text}]
                    + [m.model_dump(exclude={"id", "ts"}, by_alias=True, exclude_none=True)
                       for m in messages[cut:]]
                )  # fmt: skip
                await spin_unlock(client, lock_key, token)

    tasks = [appender(n) for n in range(APPENDERS)]
    if mode != "no flush":
        tasks.append(flush_loop())
    await asyncio.gather(*tasks)
    await memory.clear()
    return latencies


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


async def main(url: str | None, rounds: int, seconds: float) -> None:
    server = None if url else start_server()
    client = connect(url or server.url)  # type: ignore[union-attr]
    modes = ("no flush", "compozy", "lock held across flush")
    p50: dict[str, list[float]] = {m: [] for m in modes}
    p99: dict[str, list[float]] = {m: [] for m in modes}
    try:
        await scenario(client, "no flush", 0.5)  # warm up
        for _ in range(rounds):
            for mode in modes:
                latencies = await scenario(client, mode, seconds)
                p50[mode].append(percentile(latencies, 0.50))
                p99[mode].append(percentile(latencies, 0.99))
    finally:
        await client.aclose()
        if server:
            server.stop()
    base = statistics.median(p99["no flush"])
    print(f"engine: {'embedded valkey' if server else url}; {rounds} rounds x {seconds:g}s "
          f"per scenario, alternating; {APPENDERS} appenders, {SUMMARY_DELAY * 1000:.0f} ms "
          "summaries; medians")  # fmt: skip
    print()
    print("| scenario | append p50 (ms) | append p99 (ms) | p99 vs no flush |")
    print("| --- | --- | --- | --- |")
    for mode in modes:
        median99 = statistics.median(p99[mode])
        print(
            f"| {mode} | {statistics.median(p50[mode]) * 1e3:.2f} | {median99 * 1e3:.2f} "
            f"| {median99 / base:.2f}x |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing server; default: start an embedded Valkey")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument(
        "--interval",
        type=float,
        default=INTERVAL,
        help="seconds each appender waits between appends",
    )
    options = parser.parse_args()
    INTERVAL = options.interval
    asyncio.run(main(options.url, options.rounds, options.seconds))
