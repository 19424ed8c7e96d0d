"""How soon a message can be found under sustained appends, and what keeping it searchable
costs the server.

Writer processes (``--writers``) append ~300-token messages (counts supplied) to
``--memories`` memories at ``--rate`` messages a second in all, for ``--seconds``, with every
default of a handle: the background indexer builds and merges segments as the appends come.
Meanwhile this process:

* samples the backlog every half second: messages appended and not indexed yet, summed over
  the memories (``index_read``'s ``unindexed``; a search still finds the newest 128 of a
  memory's, reading them from its live list), and
* probes freshness every ``--probe`` seconds, once every memory's writer is appending:
  appends a message with a word of its own to a random memory (from a handle that does not
  index: the writers' indexers find it), then searches for it from a second, read-only handle
  every 10 ms until that message is among the hits; the time from the append's reply to that
  search is its lag.

With ``--trim``, one more memory holds 30,000 live messages, indexed, and is trimmed to none
half-way through the run, under the load (the moves wait for no index: it is caught up).

Printed: the rate the writers reached, the backlog over time (its worst and at the end), the
probes' lag (median, 99th percentile, worst), and the server's CPU per message (``INFO cpu``,
main thread and all) against the same writers doing raw ``RPUSH`` of the same JSON for the
same time, in the same run. Printed only, never asserted.

Run: ``python -m benchmarks.bench_freshness [--rate 5000] [--seconds 60] [--writers 4]
[--memories 64] [--trim]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import statistics
import time
import uuid
from typing import Any

from redis.asyncio import Redis

from benchmarks.bench_append import texts
from compozy_memory import MemoryInstance, MemoryPolicy, connect
from compozy_memory.embedded import start_server

PROJECT = "fresh"


def memory_key(run: str, n: int) -> str:
    return f"{run}:{n}"


def writer(url: str, run: str, mode: str, keys: list[int], rate: float, seconds: float) -> None:
    """One writer process: ``rate`` messages a second over ``keys``, round robin."""
    asyncio.run(_write(url, run, mode, keys, rate, seconds))


async def _write(
    url: str, run: str, mode: str, keys: list[int], rate: float, seconds: float
) -> None:
    client = connect(url)
    rng = random.Random(os.getpid())
    bodies = texts(rng, 200)
    handles = [MemoryInstance.open(client, project=PROJECT, key=memory_key(run, k)) for k in keys]
    per = max(1, len(keys))
    interval = per / rate  # each memory's own pace
    stop = time.monotonic() + seconds

    async def one(i: int, handle: MemoryInstance) -> None:
        n = 0
        next_at = time.monotonic() + rng.random() * interval
        while (now := time.monotonic()) < stop:
            if now < next_at:
                await asyncio.sleep(next_at - now)
            next_at += interval
            text = bodies[n % len(bodies)] + f" m{i}x{n}"
            message = {"role": "user" if n % 2 else "assistant", "content": text, "tokens": 300}
            if mode == "raw":
                body = json.dumps(message, separators=(",", ":"))
                await client.rpush(f"raw:{run}:{keys[i]}", body)
            else:
                await handle.append(message)
            n += 1

    await asyncio.gather(*(one(i, h) for i, h in enumerate(handles)))
    for handle in handles:
        await handle.indexer.wait_idle()
    await client.aclose()


async def cpu(admin: Redis) -> float:
    info = await admin.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def appended(admin: Redis, run: str, memories: int, mode: str) -> int:
    if mode == "raw":
        return sum([await admin.llen(f"raw:{run}:{k}") for k in range(memories)])
    total = 0
    for k in range(memories):
        keys = MemoryInstance.open(admin, project=PROJECT, key=memory_key(run, k)).keys
        total += int(await admin.hget(keys.meta, "last_id") or 0)
    return total


async def writing(admin: Redis, readers: list[MemoryInstance], procs: list[Any]) -> None:
    """Wait until every memory holds a message (each writer has started appending)."""
    metas = [reader.keys.meta for reader in readers]
    while any(p.is_alive() for p in procs):
        if await admin.exists(*metas) == len(metas):  # one round trip for them all
            return
        await asyncio.sleep(0.05)


async def backlog(readers: list[MemoryInstance]) -> int:
    total = 0
    for reader in readers:
        total += (await reader.gateway.index_read()).unindexed
    return total


async def probe(
    url: str, run: str, memories: int, lags: list[float], stop: float, every: float
) -> None:
    client = connect(url)
    rng = random.Random(7)
    while time.monotonic() < stop:
        k = rng.randrange(memories)
        writer_handle = MemoryInstance.open(client, project=PROJECT, key=memory_key(run, k))
        writer_handle.indexer.background = False  # the fleet's indexers find it, not this one
        reader = MemoryInstance.open(
            client, project=PROJECT, key=memory_key(run, k), read_only=True
        )
        # A word of letters alone: one term, which no other message holds (a word with digits
        # would also be split into its runs, "probe", "4", ..., which other messages hold).
        word = "probe" + uuid.uuid4().hex[:12].translate(_HEX_TO_LETTERS)
        sent = await writer_handle.append({"role": "user", "content": f"find {word}", "tokens": 4})
        appended_at = time.monotonic()
        while True:
            hits = await reader.search(word, limit=3)
            if any(hit.id == sent.last_id for hit in hits):
                lags.append(time.monotonic() - appended_at)
                break
            if time.monotonic() - appended_at > 30:
                lags.append(float("inf"))
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(every)
    await client.aclose()


_HEX_TO_LETTERS = str.maketrans("0123456789", "ghijklmnop")


async def big_memory(url: str, run: str) -> MemoryInstance:
    client = connect(url)
    mem = MemoryInstance.open(
        client, project=PROJECT, key=f"{run}:big", policy=MemoryPolicy(max_tokens=10**12)
    )
    bodies = texts(random.Random(3), 500)
    for start in range(0, 30_000, 1_000):
        await mem.append_many(
            [
                {"role": "user", "content": bodies[(start + i) % 500], "tokens": 300}
                for i in range(1_000)
            ]
        )
    await mem.indexer.catch_up()
    return mem


async def run_mode(args: argparse.Namespace, url: str, mode: str) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    admin = Redis.from_url(url)
    big = await big_memory(url, run) if args.trim and mode != "raw" else None
    readers = [
        MemoryInstance.open(admin, project=PROJECT, key=memory_key(run, k), read_only=True)
        for k in range(args.memories)
    ]
    share = [list(range(w, args.memories, args.writers)) for w in range(args.writers)]
    context = multiprocessing.get_context("spawn")
    procs = [
        context.Process(
            target=writer,
            args=(url, run, mode, keys, args.rate * len(keys) / args.memories, args.seconds),
        )
        for keys in share
    ]
    await asyncio.sleep(0)
    cpu_before = await cpu(admin)
    started = time.monotonic()
    for p in procs:
        p.start()
    lags: list[float] = []
    samples: list[tuple[float, int]] = []
    stop = started + args.seconds
    if mode != "raw":
        # Probes start once every memory's writer is appending: the probe's own handle does
        # not index (the fleet's indexers do), so a probe into a memory whose writer process
        # is still starting (a spawn and its imports: a second or two on a loaded machine)
        # would time that start, not the index.
        await writing(admin, readers, procs)
    prober = (
        asyncio.create_task(probe(url, run, args.memories, lags, stop, args.probe))
        if mode != "raw"
        else None
    )
    trimmed = False
    while any(p.is_alive() for p in procs):
        await asyncio.sleep(0.5)
        at = time.monotonic() - started
        if mode != "raw":
            samples.append((at, await backlog(readers)))
        if big is not None and not trimmed and at >= args.seconds / 2:
            trimmed = True
            t0 = time.monotonic()
            await big.trim(keep_messages=0)
            print(
                f"  ({mode}) trim of 30,000 live messages under load: {time.monotonic() - t0:.1f} s"
            )
    for p in procs:
        p.join()
    if prober is not None:
        await prober
    elapsed = time.monotonic() - started
    total = await appended(admin, run, args.memories, mode)
    if mode != "raw":
        # Caught up: the index's own work done, measured with the appends.
        while (left := await backlog(readers)) > 0:
            samples.append((time.monotonic() - started, left))
            await asyncio.sleep(0.2)
    used = await cpu(admin) - cpu_before
    await admin.aclose()
    return {
        "mode": mode,
        "messages": total,
        "rate": total / args.seconds,
        "elapsed": elapsed,
        "cpu_us": used / max(total, 1) * 1e6,
        "lags": lags,
        "samples": samples,
    }


async def main(args: argparse.Namespace) -> None:
    with start_server() as server:
        print(
            f"# {args.writers} writers, {args.memories} memories, target {args.rate:,} msg/s for "
            f"{args.seconds} s; load average {os.getloadavg()[0]:.1f}\n"
        )
        raw = await run_mode(args, server.url, "raw")
        indexed = await run_mode(args, server.url, "append")
    print("| mode | messages | msg/s reached | server CPU µs a message | x raw |")
    print("| --- | --: | --: | --: | --: |")
    for r in (raw, indexed):
        print(
            f"| {r['mode']} | {r['messages']:,} | {r['rate']:,.0f} | {r['cpu_us']:.1f} | "
            f"{r['cpu_us'] / raw['cpu_us']:.2f} |"
        )
    samples = indexed["samples"]
    worst = max((n for _, n in samples), default=0)
    print(f"\nbacklog (messages not indexed yet), worst {worst:,}; over time:")
    for at, n in samples[:: max(1, len(samples) // 20)]:
        print(f"  {at:6.1f} s  {n:,}")
    lags = sorted(indexed["lags"])
    if lags:
        print(
            f"\nfreshness over {len(lags)} probes: p50 {statistics.median(lags):.2f} s, p99 "
            f"{lags[min(len(lags) - 1, int(len(lags) * 0.99))]:.2f} s, worst {lags[-1]:.2f} s"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=5_000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--memories", type=int, default=64)
    parser.add_argument("--probe", type=float, default=0.5, help="seconds between probes")
    parser.add_argument("--trim", action="store_true", help="trim 30,000 messages half-way")
    asyncio.run(main(parser.parse_args()))
