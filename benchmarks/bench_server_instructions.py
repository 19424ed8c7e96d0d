"""What a message costs the shared server, counted in instructions: the same modes as
``bench_server_cost``, measured where a shared machine's noise cannot reach.

``bench_server_cost`` times each command with ``INFO commandstats``; on a machine shared with
other work the rounds of one mode spread by 2-3x, more than most changes to a script are
worth. This runs the embedded Valkey under ``valgrind --tool=callgrind`` and counts the
instructions the server executes inside each top-level command of a mode (``--toggle-collect``
on ``processCommand``, which runs every command a client sends, from its lookup and ACL
check to its reply: a script's ``FCALL`` with the commands it calls, a transaction's
``EXEC`` with the commands queued in it, a plain command): the same count
on every run of the same code, whatever else the machine does. Instructions are not time (a
cache miss costs more than an add), but the server's time follows them closely here, and two
versions of a script compare exactly.

Modes, each on a memory already holding ``--warm`` messages (past the dedupe window), ~300-token
messages (:func:`benchmarks.bench_append.texts`) with counts supplied, one client, sequential:
a raw ``RPUSH`` of the same JSON; an empty library function; a function doing only ``HMGET``
meta + ``RPUSH`` + ``HSET`` meta (``bench_server_cost``'s references); ``append`` (the handle's
own dedupe key, as every append has by default); with a TTL; with a caller's ``dedupe_key``;
``append_many`` of 10 (per message); ``append`` kept searchable, its memory's index steps
(``index_pending``, ``index_add``) and merges counted with it, a step after every append
(a conversation's pace while the indexer stepped 0.2 s after a write), after every
``TURN_BATCH`` (the default batching at a turn every ``TURN_SECONDS``: a conversation's pace)
and after every 16 (a busy memory's). Only the public API drives the library.

Then the read path, per call (counted inside ``FCALL`` and ``FCALL_RO``: a search is two
calls, the index's fields and the hits), on a memory of 500 such messages, indexed:
``context(8000)``, ``read_window(8000)``, ``search()`` (10 hits), the same with ``TURN_BATCH``
messages past the index, ``context(8000, query=)`` and ``read(-10, -1)``.

Run: ``python -m benchmarks.bench_server_instructions [--messages 200] [--warm 1100]`` (about a
minute; needs ``valgrind`` on PATH). Printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from benchmarks.bench_server_cost import LIBRARY, TURN_BATCH, TURN_SECONDS, compact, envelope
from compozy_memory import MemoryInstance, MemoryPolicy, TiktokenCounter
from compozy_memory.embedded import find_binary

PROJECT = "srvinstr"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Counted:
    """A valkey-server under callgrind, counting instructions inside one function at a time."""

    def __init__(self, folder: Path, *functions: str) -> None:
        self.port = free_port()
        self.out = folder / f"{functions[0]}.out"
        self.process = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={self.out}",
                "--collect-atstart=no",
                *(f"--toggle-collect={function}" for function in functions),
                "--dump-instr=no",
                str(find_binary()),
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=folder,
        )
        self.parts = 0

    def control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.process.pid)], capture_output=True)

    def count(self) -> int:
        """The instructions since the last count (or the start of measuring)."""
        self.control("-d")
        self.parts += 1
        dump = Path(f"{self.out}.{self.parts}")
        for _ in range(100):
            if dump.exists() and "summary:" in dump.read_text():
                break
            time.sleep(0.1)
        found = re.search(r"^summary: (\d+)", dump.read_text(), re.MULTILINE)
        return int(found.group(1)) if found else 0

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait()


async def connect(port: int) -> Redis:
    client = Redis(port=port)
    for _ in range(300):
        try:
            await client.ping()
            return client
        except (OSError, RedisConnectionError):  # still starting under valgrind
            await asyncio.sleep(0.2)
    raise RuntimeError("valkey-server under callgrind did not start")


async def measure(
    functions: tuple[str, ...],
    modes: dict[str, Callable[[Redis, int], Awaitable[int]]],
    args: Any,
) -> dict[str, float]:
    """Instructions per message (or call) of each mode, counted inside ``functions``."""
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        server = Counted(Path(folder), *functions)
        try:
            client = await connect(server.port)
            await client.function_load(LIBRARY, replace=True)
            for name, run in modes.items():
                await run(client, args.warm)  # to the memory's steady state
                server.count()  # what the warming took: not this mode's
                made = await run(client, args.messages)
                out[name] = server.count() / made
            await client.aclose()
        finally:
            server.stop()
    return out


async def main(args: argparse.Namespace) -> None:
    if shutil.which("valgrind") is None:
        sys.exit("bench_server_instructions needs valgrind on PATH")
    rng = random.Random(29)
    counter = TiktokenCounter()
    run = uuid.uuid4().hex[:8]

    def pool(n: int) -> list[dict[str, Any]]:
        return envelope(rng, counter, n)

    async def raw(client: Redis, n: int) -> int:
        for message in pool(n):
            await client.rpush(f"{PROJECT}:raw:{run}", compact(message))
        return n

    def function(name: str) -> Callable[[Redis, int], Awaitable[int]]:
        async def go(client: Redis, n: int) -> int:
            keys = [f"{{{PROJECT}:{run}}}:l", f"{{{PROJECT}:{run}}}:m"]
            for message in pool(n):
                await client.fcall(name, 2, *keys, compact(message))
            return n

        return go

    def appends(name: str, **options: Any) -> Callable[[Redis, int], Awaitable[int]]:
        async def go(client: Redis, n: int) -> int:
            mem = MemoryInstance.open(
                client, project=PROJECT, key=f"{run}:{name}", background_index=False, **options
            )
            messages = pool(n)
            if name == "many":
                for at in range(0, n, 10):
                    await mem.append_many(messages[at : at + 10])
                return n
            if name.startswith("step"):  # kept searchable: an index step every `every` appends
                every = int(name[4:])
                for at, message in enumerate(messages, start=1):
                    await mem.append(message)
                    if at % every == 0 or at == n:
                        await mem.indexer.catch_up()
                return n
            for message in messages:
                await mem.append(message, dedupe_key=uuid.uuid4().hex if name == "own" else None)
            return n

        return go

    labels = {
        "raw": "raw `RPUSH` of the same JSON",
        "srvcost_empty": "an empty library function (`FCALL`, key and JSON)",
        "srvcost_floor": "a function: `HMGET` meta + `RPUSH` + `HSET` meta",
        "off": "`append`, counts supplied, indexer off",
        "ttl": "the same with a TTL",
        "own": "the same with a caller's `dedupe_key` on every append",
        "many": "`append_many` of 10, counts supplied, indexer off (per message)",
        "step1": "`append` kept searchable: an index step after each (merges included)",
        f"step{TURN_BATCH}": (
            f"`append` kept searchable: an index step every {TURN_BATCH} appends (the default "
            f"batching at a turn every {TURN_SECONDS:g} s; merges included)"
        ),
        "step16": "`append` kept searchable: an index step every 16 appends (merges included)",
    }
    reader: dict[int, MemoryInstance] = {}

    def reads(name: str) -> Callable[[Redis, int], Awaitable[int]]:
        calls = {
            "context": lambda mem: mem.context(8_000),
            "read_window": lambda mem: mem.read_window(8_000),
            "search": lambda mem: mem.search("refund warehouse kettle"),
            "search_tail": lambda mem: mem.search("refund warehouse kettle"),
            "context_query": lambda mem: mem.context(8_000, query="refund warehouse kettle"),
            "read": lambda mem: mem.read(-10, -1),
        }
        # The tail mode's memory has TURN_BATCH messages past its index, as a batch leaves.
        tail = TURN_BATCH if name == "search_tail" else 0

        async def go(client: Redis, n: int) -> int:
            if tail not in reader:  # one memory for the read modes, made (uncounted) once
                mem = MemoryInstance.open(
                    client, project=PROJECT, key=f"{run}:reads{tail}", background_index=False
                )
                for message in pool(500):
                    await mem.append(message)
                await mem.indexer.catch_up()
                for message in pool(tail):
                    await mem.append(message)
                reader[tail] = mem
            calls_made = max(1, n // 10)  # reads cost more than appends: fewer of them
            for _ in range(calls_made):
                await calls[name](reader[tail])
            return calls_made

        return go

    # processCommand runs each command a client sends, once: the commands a script calls or a
    # transaction queued run inside their FCALL's or EXEC's (a nested function would toggle
    # the count off).
    counted = await measure(("processCommand",), {"raw": raw}, args)
    counted |= await measure(
        ("processCommand",),
        {
            "srvcost_empty": function("srvcost_empty"),
            "srvcost_floor": function("srvcost_floor"),
            "off": appends("off"),
            "ttl": appends("ttl", policy=MemoryPolicy(ttl=timedelta(hours=1))),
            "own": appends("own"),
            "many": appends("many"),
            "step1": appends("step1"),
            f"step{TURN_BATCH}": appends(f"step{TURN_BATCH}"),
            "step16": appends("step16"),
        },
        args,
    )
    read_labels = {
        "context": "`context(8000)`",
        "read_window": "`read_window(8000)`",
        "search": "`search(query)` (10 hits; two calls)",
        "search_tail": (
            f"the same with {TURN_BATCH} messages past the index (read and ranked by the client)"
        ),
        "context_query": "`context(8000, query=)` (two calls)",
        "read": "`read(-10, -1)`",
    }
    counted |= await measure(("processCommand",), {name: reads(name) for name in read_labels}, args)
    print(
        f"valkey-server under callgrind; {args.messages} messages a mode on memories holding "
        f"{args.warm}; instructions inside the top-level command (load average "
        f"{os.getloadavg()[0]:.2f}: it does not change the counts)\n"
    )
    print("| per message (~300 tokens, one client, sequential) | instructions | x raw RPUSH |")
    print("| --- | ---: | ---: |")
    for name, label in labels.items():
        print(f"| {label} | {counted[name]:,.0f} | {counted[name] / counted['raw']:.1f}x |")
    print("\n| per call, a memory of 500 such messages, indexed | instructions | x raw RPUSH |")
    print("| --- | ---: | ---: |")
    for name, label in read_labels.items():
        print(f"| {label} | {counted[name]:,.0f} | {counted[name] / counted['raw']:.1f}x |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200, help="messages a mode")
    parser.add_argument(
        "--warm", type=int, default=1_100, help="messages each memory holds before it is counted"
    )
    started = time.perf_counter()
    asyncio.run(main(parser.parse_args()))
    print(f"\n({time.perf_counter() - started:.0f} s)")
