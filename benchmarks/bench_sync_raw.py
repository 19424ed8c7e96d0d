"""redis-py alone, without compozy-memory: what its sync client costs a call against its
async client, for the very command ``read_window`` sends.

:mod:`benchmarks.bench_sync` compares the two APIs; this takes our code out, to show what is
redis-py's. It records the ``FCALL_RO`` one ``SyncMemoryInstance.read_window()`` sends for each
of ``--memories`` memories of 200 messages, then sends those commands (no reply decoding),
each mode a short burst in turn within a round (in reverse order every other round):

* **sync, shared pool**: one thread per memory on one ``redis.Redis`` (as the sync API does:
  each call takes a connection from the pool and gives it back);
* **sync, pinned connection**: the same threads, each on a ``single_connection_client`` of
  the same pool (no pool check-out a call);
* **async, pipelined**: the memories' commands in one pipeline a step, which is what the
  async API's batcher sends when every task calls in the same event-loop iteration;
* **async, one by one**: one task per memory, each awaiting its own command.

Each figure is the median over ``--rounds``: operations a second, this process's CPU time a
call, and the round's ratio to the pipelined async mode.

Run: ``python -m benchmarks.bench_sync_raw [--url URL] [--memories 8] [--ops 40] [--rounds 30]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from benchmarks.bench_sync import PRELOAD, policy, text
from compozy_memory import SyncMemoryInstance, connect, connect_sync
from compozy_memory.embedded import start_server

Command = tuple[Any, ...]


def recorded_commands(client: redis.Redis, memories: int) -> list[Command]:
    """The command one ``read_window()`` sends, for each of ``memories`` filled memories."""
    commands: list[Command] = []
    send = client.execute_command

    def record(*args: Any, **options: Any) -> Any:
        commands.append(args)
        return send(*args, **options)  # type: ignore[no-untyped-call]

    for m in range(memories):
        handle = SyncMemoryInstance.open(client, project="bench", key=f"raw{m}", policy=policy())
        handle.clear()
        handle.append_many([{"role": "user", "content": text(i)} for i in range(PRELOAD)])
        handle.indexer.wait_idle()
        handle.read_window()  # the library loaded: the recorded call is the read alone
        client.execute_command = record  # type: ignore[method-assign]
        try:
            handle.read_window()
        finally:
            del client.execute_command
    return commands


def threads_burst(clients: list[redis.Redis], commands: list[Command], ops: int) -> float:
    """One burst, one thread per command; the wall time."""
    ready = threading.Barrier(len(commands) + 1)

    def worker(client: redis.Redis, command: Command) -> None:
        ready.wait()
        for _ in range(ops):
            client.execute_command(*command)  # type: ignore[no-untyped-call]

    threads = [
        threading.Thread(target=worker, args=(clients[m], c)) for m, c in enumerate(commands)
    ]
    for thread in threads:
        thread.start()
    ready.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


async def pipelined_burst(client: Any, commands: list[Command], ops: int) -> float:
    started = time.perf_counter()
    for _ in range(ops):
        async with client.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            await pipe.execute()
    return time.perf_counter() - started


async def tasks_burst(client: Any, commands: list[Command], ops: int) -> float:
    async def worker(command: Command) -> None:
        for _ in range(ops):
            await client.execute_command(*command)

    started = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in commands))
    return time.perf_counter() - started


def main(args: argparse.Namespace) -> None:
    server = None if args.url else start_server()
    url = args.url or server.url  # type: ignore[union-attr]
    memories, ops = args.memories, args.ops
    client = connect_sync(url, max_connections=2 * memories + 4)
    assert isinstance(client, redis.Redis)
    pinned = [
        redis.Redis(connection_pool=client.connection_pool, single_connection_client=True)
        for _ in range(memories)
    ]
    runner = asyncio.Runner()
    aclient = runner.run(_connect(url, memories))
    try:
        commands = recorded_commands(client, memories)
        modes: dict[str, Callable[[], float]] = {
            "sync, shared pool": lambda: threads_burst([client] * memories, commands, ops),
            "sync, pinned connection": lambda: threads_burst(pinned, commands, ops),
            "async, pipelined": lambda: runner.run(pipelined_burst(aclient, commands, ops)),
            "async, one by one": lambda: runner.run(tasks_burst(aclient, commands, ops)),
        }
        rates: dict[str, list[float]] = {name: [] for name in modes}
        cpu: dict[str, list[float]] = {name: [] for name in modes}
        for burst in modes.values():  # untimed: connections made, code warm
            burst()
        calls = memories * ops
        for r in range(args.rounds):
            for name in list(modes) if r % 2 == 0 else reversed(list(modes)):
                started = time.process_time()
                elapsed = modes[name]()
                cpu[name].append((time.process_time() - started) / calls * 1e6)
                rates[name].append(calls / elapsed)
        base = rates["async, pipelined"]
        print(
            f"engine: {'embedded valkey' if server else url}; {memories} memories, bursts of "
            f"{ops} calls a memory, {args.rounds} rounds, medians; load average "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
        print("| mode | ops/s | ratio to async, pipelined | CPU us/call |")
        print("|---|---|---|---|")
        for name in modes:
            ratio = statistics.median(a / b for a, b in zip(rates[name], base, strict=True))
            print(
                f"| {name} | {statistics.median(rates[name]):,.0f} | {ratio:.2f}x "
                f"| {statistics.median(cpu[name]):,.0f} |"
            )
    finally:
        for one in pinned:
            one.close()
        client.close()
        runner.run(aclient.aclose())
        runner.close()
        if server is not None:
            server.stop()


async def _connect(url: str, memories: int) -> Any:
    return connect(url, max_connections=memories + 4)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing server; default: start an embedded Valkey")
    parser.add_argument("--memories", type=int, default=8)
    parser.add_argument("--ops", type=int, default=40, help="calls a memory, a burst")
    parser.add_argument("--rounds", type=int, default=30)
    main(parser.parse_args())
