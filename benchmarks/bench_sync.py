"""The sync API against the async API: operations a second, one thread (or task) per memory.

Each round runs, against one server, the same work through both APIs:

* **sync**: ``--memories`` threads, each with its own :class:`SyncMemoryInstance` on one
  shared blocking client (:func:`connect_sync`), each calling ``--ops`` times in a row;
* **async**: ``--memories`` tasks on one event loop, each with its own
  :class:`MemoryInstance` on one shared ``redis.asyncio`` client (:func:`connect`), each
  awaiting ``--ops`` calls in a row.

The operations: ``append`` (a ~60-token message, counted by the default counter, every text
new), ``read_window`` and ``context`` (of a memory of 200 messages). Both sides run the same
steps (:mod:`compozy_memory._wire.steps`); what differs is the driver. The two modes
alternate within a round, in reverse order every other round, and each figure is the median
over ``--rounds`` of that round's ratio, which keeps a shared machine's swings out of it.
The issue's target: sync at least 0.9x async, one thread per memory.

Run: ``python -m benchmarks.bench_sync [--url URL] [--memories 1,8] [--ops 500] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from compozy_memory import (
    MemoryInstance,
    MemoryPolicy,
    SyncMemoryInstance,
    connect,
    connect_sync,
)
from compozy_memory.embedded import start_server

OPERATIONS = ("append", "read_window", "context")
#: Messages a memory holds before its reads are timed.
PRELOAD = 200
WORDS = [
    "order",
    "parcel",
    "refund",
    "carrier",
    "warranty",
    "kettle",
    "address",
    "ticket",
    "storm",
    "invoice",
]


def text(n: int) -> str:
    """A ~60-token message, new for each ``n`` (no cached count helps either side)."""
    return " ".join(f"{WORDS[(n + i) % len(WORDS)]}-{n}-{i}" for i in range(20))


def policy() -> MemoryPolicy:
    return MemoryPolicy(max_tokens=4_000)


def sync_round(url: str, operation: str, memories: int, ops: int, run: str) -> float:
    """Operations a second through ``memories`` threads of the sync API."""
    client = connect_sync(url, max_connections=memories + 4)
    handles = [
        SyncMemoryInstance.open(client, project="bench", key=f"{run}-s{m}", policy=policy())
        for m in range(memories)
    ]
    if operation != "append":
        for handle in handles:
            handle.append_many([{"role": "user", "content": text(i)} for i in range(PRELOAD)])
            handle.indexer.wait_idle()
    call = _sync_call(operation)
    ready = threading.Barrier(memories + 1)

    def worker(handle: SyncMemoryInstance, offset: int) -> None:
        ready.wait()
        for i in range(ops):
            call(handle, offset + i)

    threads = [threading.Thread(target=worker, args=(h, m * ops)) for m, h in enumerate(handles)]
    for thread in threads:
        thread.start()
    ready.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    for handle in handles:
        handle.indexer.wait_idle()
        handle.clear()
    client.close()
    return memories * ops / elapsed


def _sync_call(operation: str) -> Callable[[SyncMemoryInstance, int], Any]:
    if operation == "append":
        return lambda h, n: h.append({"role": "user", "content": text(n)})
    if operation == "read_window":
        return lambda h, n: h.read_window()
    return lambda h, n: h.context()


async def async_round(url: str, operation: str, memories: int, ops: int, run: str) -> float:
    """Operations a second through ``memories`` tasks of the async API."""
    client = connect(url, max_connections=memories + 4)
    handles = [
        MemoryInstance.open(client, project="bench", key=f"{run}-a{m}", policy=policy())
        for m in range(memories)
    ]
    if operation != "append":
        for handle in handles:
            await handle.append_many([{"role": "user", "content": text(i)} for i in range(PRELOAD)])
            await handle.indexer.catch_up()
    call = _async_call(operation)

    async def worker(handle: MemoryInstance, offset: int) -> None:
        for i in range(ops):
            await call(handle, offset + i)

    started = time.perf_counter()
    await asyncio.gather(*(worker(h, m * ops) for m, h in enumerate(handles)))
    elapsed = time.perf_counter() - started
    for handle in handles:
        await handle.indexer.catch_up()
        await handle.clear()
    await client.aclose()
    return memories * ops / elapsed


def _async_call(operation: str) -> Callable[[MemoryInstance, int], Any]:
    if operation == "append":
        return lambda h, n: h.append({"role": "user", "content": text(n)})
    if operation == "read_window":
        return lambda h, n: h.read_window()
    return lambda h, n: h.context()


def measure(url: str, operation: str, memories: int, ops: int, rounds: int) -> None:
    sync_rates, async_rates, ratios = [], [], []
    for r in range(rounds):
        run = uuid.uuid4().hex[:8]
        # Alternate which side goes first, so neither always meets a warmer server.
        if r % 2 == 0:
            s = sync_round(url, operation, memories, ops, run)
            a = asyncio.run(async_round(url, operation, memories, ops, run))
        else:
            a = asyncio.run(async_round(url, operation, memories, ops, run))
            s = sync_round(url, operation, memories, ops, run)
        sync_rates.append(s)
        async_rates.append(a)
        ratios.append(s / a)
    print(
        f"| {operation} | {memories} | {statistics.median(sync_rates):,.0f} "
        f"| {statistics.median(async_rates):,.0f} | {statistics.median(ratios):.2f}x "
        f"| {min(ratios):.2f}-{max(ratios):.2f} |",
        flush=True,
    )


def main(args: argparse.Namespace) -> None:
    server = None if args.url else start_server()
    url = args.url or server.url  # type: ignore[union-attr]
    try:
        print(
            f"engine: {'embedded valkey' if server else url}; {args.ops} calls a memory, "
            f"{args.rounds} rounds, medians (target: sync >= 0.9x async)"
        )
        print(
            "| operation | memories (threads / tasks) | sync ops/s | async ops/s | sync/async "
            "| ratio range |"
        )
        print("|---|---|---|---|---|---|")
        for operation in OPERATIONS:  # untimed: scripts loaded, connections made, code warm
            sync_round(url, operation, 2, 20, "warm")
            asyncio.run(async_round(url, operation, 2, 20, "warm"))
        for memories in args.memories:
            for operation in args.operations:
                measure(url, operation, memories, args.ops, args.rounds)
    finally:
        if server is not None:
            server.stop()


def _ints(value: str) -> list[int]:
    return [int(v) for v in value.split(",")]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing server; default: start an embedded Valkey")
    parser.add_argument("--memories", type=_ints, default=[1, 8], help="comma-separated")
    parser.add_argument("--ops", type=int, default=500, help="calls a memory, a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--operations",
        type=lambda v: v.split(","),
        default=list(OPERATIONS),
        help="comma-separated",
    )
    main(parser.parse_args())
