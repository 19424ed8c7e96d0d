"""The sync API against the async API: operations a second, one thread (or task) per memory.

For each operation and number of memories, one server holds both sides, set up once:

* **sync**: ``--memories`` threads, each with its own :class:`SyncMemoryInstance` on one
  shared blocking client (:func:`connect_sync`), each calling ``--ops`` times in a row;
* **async**: ``--memories`` tasks on one event loop, each with its own
  :class:`MemoryInstance` on one shared ``redis.asyncio`` client (:func:`connect`), each
  awaiting ``--ops`` calls in a row.

The operations: ``append`` (a ~60-token message, counted by the default counter, every text
new), ``read_window`` and ``context`` (of a memory of 200 messages). Both sides run the same
steps (:mod:`compozy_memory._wire.steps`); what differs is the driver. A round is one short
burst of each side, back to back (in reverse order every other round), so both meet the same
load on a shared machine; each figure is the median over ``--rounds`` of the rounds' ratios,
with the middle half of them beside it, and each side's client CPU time a call (this
process's, every thread's: it swings with the machine's load far less than the wall does,
and it is what runs out first when the client is the bottleneck). The issue's target: sync
at least 0.9x async, one thread per memory.

Run: ``python -m benchmarks.bench_sync [--url URL] [--memories 1,8] [--ops 40] [--rounds 40]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Burst:
    """One side's burst: operations a second, and this process's CPU time a call (every
    thread's: the client's cost, which the machine's load inflates less than the wall's)."""

    rate: float
    cpu_us: float

    @classmethod
    def of(cls, calls: int, started: float, cpu: float) -> Burst:
        elapsed = time.perf_counter() - started
        return cls(calls / elapsed, (time.process_time() - cpu) / calls * 1e6)


class SyncSide:
    """``memories`` sync handles on one client, each driven by a thread of its own that
    waits for the next burst (threads are started once, not per burst)."""

    def __init__(self, url: str, operation: str, memories: int, run: str) -> None:
        self.client = connect_sync(url, max_connections=memories + 4)
        self.handles = [
            SyncMemoryInstance.open(
                self.client, project="bench", key=f"{run}-s{m}", policy=policy()
            )
            for m in range(memories)
        ]
        if operation != "append":
            for handle in self.handles:
                handle.append_many([{"role": "user", "content": text(i)} for i in range(PRELOAD)])
                handle.indexer.wait_idle()
        self._call = _sync_call(operation)
        self._ops = 0
        self._offset = 0
        self._start = threading.Barrier(memories + 1)
        self._done = threading.Barrier(memories + 1)
        self._stop = False
        self._threads = [
            threading.Thread(target=self._worker, args=(h, m), daemon=True)
            for m, h in enumerate(self.handles)
        ]
        for thread in self._threads:
            thread.start()

    def _worker(self, handle: SyncMemoryInstance, m: int) -> None:
        while True:
            self._start.wait()
            if self._stop:
                return
            base = self._offset + m * self._ops
            for i in range(self._ops):
                self._call(handle, base + i)
            self._done.wait()

    def burst(self, ops: int) -> Burst:
        """One burst of ``ops`` calls a memory."""
        self._ops = ops
        self._start.wait()
        started, cpu = time.perf_counter(), time.process_time()
        self._done.wait()
        burst = Burst.of(len(self.handles) * ops, started, cpu)
        self._offset += len(self.handles) * ops
        return burst

    def close(self) -> None:
        self._stop = True
        self._start.wait()
        for thread in self._threads:
            thread.join()
        for handle in self.handles:
            handle.indexer.wait_idle()
            handle.clear()
        self.client.close()


def _sync_call(operation: str) -> Callable[[SyncMemoryInstance, int], Any]:
    if operation == "append":
        return lambda h, n: h.append({"role": "user", "content": text(n)})
    if operation == "read_window":
        return lambda h, n: h.read_window()
    return lambda h, n: h.context()


class AsyncSide:
    """``memories`` async handles on one client, driven by as many tasks a burst, on an
    event loop kept for the whole measurement."""

    def __init__(self, url: str, operation: str, memories: int, run: str) -> None:
        self.runner = asyncio.Runner()
        self.handles: list[MemoryInstance] = []
        self._call = _async_call(operation)
        self._offset = 0
        self.runner.run(self._open(url, operation, memories, run))

    async def _open(self, url: str, operation: str, memories: int, run: str) -> None:
        self.client = connect(url, max_connections=memories + 4)
        self.handles = [
            MemoryInstance.open(self.client, project="bench", key=f"{run}-a{m}", policy=policy())
            for m in range(memories)
        ]
        if operation != "append":
            for handle in self.handles:
                messages = [{"role": "user", "content": text(i)} for i in range(PRELOAD)]
                await handle.append_many(messages)
                await handle.indexer.catch_up()

    def burst(self, ops: int) -> Burst:
        """One burst of ``ops`` calls a memory."""
        return self.runner.run(self._burst(ops))

    async def _burst(self, ops: int) -> Burst:
        call = self._call

        async def worker(handle: MemoryInstance, base: int) -> None:
            for i in range(ops):
                await call(handle, base + i)

        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(
            *(worker(h, self._offset + m * ops) for m, h in enumerate(self.handles))
        )
        burst = Burst.of(len(self.handles) * ops, started, cpu)
        self._offset += len(self.handles) * ops
        return burst

    def close(self) -> None:
        self.runner.run(self._close())
        self.runner.close()

    async def _close(self) -> None:
        for handle in self.handles:
            await handle.indexer.catch_up()
            await handle.clear()
        await self.client.aclose()


def _async_call(operation: str) -> Callable[[MemoryInstance, int], Any]:
    if operation == "append":
        return lambda h, n: h.append({"role": "user", "content": text(n)})
    if operation == "read_window":
        return lambda h, n: h.read_window()
    return lambda h, n: h.context()


def measure(url: str, operation: str, memories: int, ops: int, rounds: int) -> None:
    run = uuid.uuid4().hex[:8]
    sync, aio = SyncSide(url, operation, memories, run), AsyncSide(url, operation, memories, run)
    try:
        sync.burst(ops)  # untimed: connections made, code warm
        aio.burst(ops)
        sync_bursts: list[Burst] = []
        async_bursts: list[Burst] = []
        for r in range(rounds):
            # Alternate which side goes first, so neither always meets a warmer server.
            if r % 2 == 0:
                s, a = sync.burst(ops), aio.burst(ops)
            else:
                a, s = aio.burst(ops), sync.burst(ops)
            sync_bursts.append(s)
            async_bursts.append(a)
    finally:
        sync.close()
        aio.close()
    ratios = [s.rate / a.rate for s, a in zip(sync_bursts, async_bursts, strict=True)]
    low, _, high = statistics.quantiles(ratios, n=4)
    print(
        f"| {operation} | {memories} "
        f"| {statistics.median(s.rate for s in sync_bursts):,.0f} "
        f"| {statistics.median(a.rate for a in async_bursts):,.0f} "
        f"| {statistics.median(ratios):.2f}x | {low:.2f}-{high:.2f} "
        f"| {statistics.median(s.cpu_us for s in sync_bursts):,.0f} "
        f"| {statistics.median(a.cpu_us for a in async_bursts):,.0f} |",
        flush=True,
    )


def main(args: argparse.Namespace) -> None:
    server = None if args.url else start_server()
    url = args.url or server.url  # type: ignore[union-attr]
    try:
        print(
            f"engine: {'embedded valkey' if server else url}; bursts of {args.ops} calls a "
            f"memory, {args.rounds} rounds, medians (target: sync >= 0.9x async); "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
        print(
            "| operation | memories (threads / tasks) | sync ops/s | async ops/s | sync/async "
            "| middle half of the rounds | sync CPU us/call | async CPU us/call |"
        )
        print("|---|---|---|---|---|---|---|---|")
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
    parser.add_argument("--ops", type=int, default=40, help="calls a memory, a burst")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument(
        "--operations",
        type=lambda v: v.split(","),
        default=list(OPERATIONS),
        help="comma-separated",
    )
    main(parser.parse_args())
