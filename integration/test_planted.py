"""What a tenant with the read-write ACL line can plant in its own memory's keys, met by every
reader (issue 32, item 1).

Redis and Valkey check every command a function calls against its caller's ACL rules, so a
user who may FCALL a function that runs HSET may run HSET itself: the read-write line cannot
be FCALL-only (``test_a_function_runs_with_its_callers_rules`` shows it on every engine). What
a tenant writes raw lands in its own project's keys only; what keeps it from stalling the
server through another client's call is that every script sizes what it reads by what is
there (``MEMORY USAGE`` of a key before reading it, ``HSTRLEN`` of a field, the length of a
value before parsing it) and refuses what compozy-memory never writes with
:class:`CorruptDataError`, writing nothing.

Each test plants with the tenant's own line (``compozy-memory acl``), then calls what every
reader calls, and measures the worst time a script held the server (SLOWLOG).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from compozy_memory import (
    BackendPermissionError,
    CorruptDataError,
    InstanceKeys,
    MemoryInstance,
    connect,
)
from compozy_memory._io.translate import RedisClient
from compozy_memory._model.limits import (
    MAX_FACT_KEY,
    MAX_FACT_VALUE,
    MAX_FACTS,
    MAX_MESSAGE_BYTES,
)
from compozy_memory._ops.acl import acl_setuser
from compozy_memory._wire.scripts import library, script
from integration.engines import EngineSpec
from integration.memories import memory, turn

pytestmark = pytest.mark.faults

PLANTED_ENVELOPE = 64 << 20


@dataclass
class Tenant:
    """A user with exactly the read-write line `compozy-memory acl` prints, on every node."""

    client: RedisClient
    project: str


@pytest.fixture
async def tenant(engine: EngineSpec) -> AsyncIterator[Tenant]:
    project = f"p{uuid.uuid4().hex[:8]}"
    user = f"u{uuid.uuid4().hex[:12]}"
    line = acl_setuser(
        user, project, read_only=False, password=f"pw-{user}", cluster=engine.cluster
    )
    nodes = engine.node_clients()
    for node in nodes:
        await node.execute_command(*line)  # type: ignore[no-untyped-call]
    url = engine.url.replace("redis://", f"redis://{user}:pw-{user}@")
    client = connect(url, cluster=engine.cluster)
    yield Tenant(client, project)
    await client.aclose()
    for node in nodes:
        await node.execute_command("ACL", "DELUSER", user)  # type: ignore[no-untyped-call]
        await node.aclose()


class ServerTime:
    """The worst time one of compozy-memory's scripts held a server, from every node's
    SLOWLOG (every call logged while measuring)."""

    def __init__(self, engine: EngineSpec) -> None:
        self.engine = engine
        self.worst_ms = 0.0
        prefix = library().prefix.encode()
        self._names = {prefix + n.encode() for n in _script_names()}
        self._shas = {script(n).sha.encode() for n in _script_names()}

    @contextmanager
    def measuring(self) -> Iterator[None]:
        import redis

        nodes = [redis.Redis.from_url(url) for url in self.engine.node_urls]
        try:
            before = [node.config_get("slowlog-log-slower-than") for node in nodes]
            for node in nodes:
                node.config_set("slowlog-log-slower-than", 0)
                node.config_set("slowlog-max-len", 10_000)
                node.slowlog_reset()
            yield
            for node, old in zip(nodes, before, strict=True):
                for entry in node.slowlog_get(10_000):
                    words = entry["command"].split(b" ")
                    if len(words) > 1 and (words[1] in self._names or words[1] in self._shas):
                        self.worst_ms = max(self.worst_ms, int(entry["duration"]) / 1000)
                node.config_set("slowlog-log-slower-than", str(old["slowlog-log-slower-than"]))
        finally:
            for node in nodes:
                node.close()


def _script_names() -> list[str]:
    from compozy_memory._wire.scripts import SCRIPT_NAMES

    return list(SCRIPT_NAMES)


async def refused(calls: dict[str, Callable[[], Awaitable[Any]]]) -> list[str]:
    """The names of the calls that raised CorruptDataError; any other outcome fails."""
    out = []
    for name, call in calls.items():
        try:
            result = await call()
        except CorruptDataError:
            out.append(name)
        else:
            raise AssertionError(f"{name} returned {result!r:.200} instead of CorruptDataError")
    return out


async def dump(client: RedisClient, keys: InstanceKeys) -> dict[str, bytes | None]:
    """Every key of the memory as DUMP gives it: what must not change."""
    return {k: await client.dump(k) for k in (*keys.data, keys.lock)}


def head(n: int) -> bytes:
    return b'{"id":%d,"ts":1700000000000,"tokens":3,"priority":2,"role":"user","content":"' % n


async def test_a_function_runs_with_its_callers_rules(
    engine: EngineSpec, tenant: Tenant, client: RedisClient
) -> None:
    """Why the read-write line grants the write commands: without HSET, the library's own
    append is refused by the server inside the function (each engine checks a function's
    commands against the caller's rules), so no line can allow FCALL and refuse HSET."""
    keys = InstanceKeys.build(tenant.project, "conv:1")
    owner = memory(client, "conv:1", project=tenant.project)
    await owner.append(turn(1))  # loads the library where the memory lives
    raw = await tenant.client.hset(keys.meta, "planted", "1")
    assert raw == 1  # the line lets the tenant write its own keys raw
    user = f"n{uuid.uuid4().hex[:12]}"
    line = acl_setuser(user, tenant.project, read_only=False, password=f"pw-{user}",
                       cluster=engine.cluster)  # fmt: skip
    no_hset = [rule for rule in line if rule != "+hset"]
    nodes = engine.node_clients()
    for node in nodes:
        await node.execute_command(*no_hset)  # type: ignore[no-untyped-call]
    narrow = connect(engine.url.replace("redis://", f"redis://{user}:pw-{user}@"),
                     cluster=engine.cluster)  # fmt: skip
    try:
        with pytest.raises(BackendPermissionError, match=r"permission|can't run"):
            await MemoryInstance.open(
                narrow, project=tenant.project, key="conv:1", counter=owner.counter
            ).append(turn(2))
    finally:
        await narrow.aclose()
        for node in nodes:
            await node.execute_command("ACL", "DELUSER", user)  # type: ignore[no-untyped-call]
            await node.aclose()


async def test_a_planted_64_mb_envelope_is_refused_unread(
    engine: EngineSpec, tenant: Tenant, client: RedisClient, record: Callable[..., None]
) -> None:
    """The issue's case: a 64 MB envelope set raw in a memory of ten messages. Every reader
    is refused before LRANGE copies it: msgs holds more bytes than ten envelopes can."""
    mem = memory(client, "conv:big", project=tenant.project)
    mem.indexer.background = False
    await mem.append_many([turn(i) for i in range(1, 11)])
    await mem.indexer.catch_up()
    keys = mem.keys
    planted = head(11) + b"x" * PLANTED_ENVELOPE + b'"}'
    await tenant.client.rpush(keys.msgs, planted)  # the line has RPUSH and HINCRBY
    await tenant.client.hincrby(keys.meta, "count", 1)
    before = await dump(client, keys)
    meter = ServerTime(engine)
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "read": mem.read,
        "context": lambda: mem.context(4_000),
        "context(query=)": lambda: mem.context(4_000, query="order 1005"),
        "read_window": lambda: mem.read_window(4_000),
        "snapshot": mem.snapshot,
        "trim": lambda: mem.trim(keep_messages=0),
        "replace": lambda: mem.replace([turn(99)]),
        "recall_messages": lambda: mem.recall_messages([5]),
    }
    with meter.measuring():
        names = await refused(calls)
    after = await dump(client, keys)
    changed = [k for k in before if before[k] != after[k]]
    assert changed == []
    assert meter.worst_ms < 50, meter.worst_ms
    record(
        group="adversarial-3",
        item=1,
        fault="a 64 MB envelope pushed raw (RPUSH and HINCRBY of meta's count, with the "
        "tenant's read-write line) after the 10 messages of a memory, then read, context "
        "(with and without a query), read_window, snapshot, trim, replace and "
        "recall_messages by another handle",
        engine=engine.name,
        promise="every call refused typed (CorruptDataError) before the envelope is read: the "
        "list is sized (MEMORY USAGE) first; nothing written; the server held for "
        "milliseconds",
        operations=len(calls),
        acknowledged=len(calls) - len(names),
        lost=len(changed),
        duplicated=0,
        observed=f"{len(names)} of {len(calls)} calls raised CorruptDataError; no key changed; "
        f"worst script time {meter.worst_ms:.2f} ms (SLOWLOG; before: read 244 ms, context "
        "271 ms)",
    )


async def test_planted_counts_and_fields_are_refused_before_they_are_read(
    engine: EngineSpec, tenant: Tenant, client: RedisClient, record: Callable[..., None]
) -> None:
    """What else a tenant can plant: a meta field, a dedupe record, more summaries, facts,
    pinned ids or recalled messages than compozy-memory ever keeps, a long meta. Each is
    refused by the first script that meets it, before it reads the planted bytes whole."""
    raw = tenant.client
    meter = ServerTime(engine)
    outcomes: list[tuple[str, list[str], list[str]]] = []

    async def planted(
        name: str,
        plant: Callable[[MemoryInstance], Awaitable[Any]],
        calls: Callable[[MemoryInstance], dict[str, Callable[[], Awaitable[Any]]]],
    ) -> None:
        mem = memory(client, f"conv:{name}", project=tenant.project)
        mem.indexer.background = False
        await mem.append_many([turn(i) for i in range(1, 21)])
        await mem.facts.set({"plan": "gold"})
        await mem.indexer.catch_up()
        await plant(mem)
        before = await dump(client, mem.keys)
        one = ServerTime(engine)
        with one.measuring():
            names = await refused(calls(mem))
        meter.worst_ms = max(meter.worst_ms, one.worst_ms)
        after = await dump(client, mem.keys)
        outcomes.append((name, names, [k for k in before if before[k] != after[k]]))

    big = "x" * (8 << 20)
    await planted(
        "meta-field",
        lambda m: raw.hset(m.keys.meta, "ver", big),
        lambda m: {"read": m.read, "health": m.health, "context": lambda: m.context(4_000)},
    )
    await planted(
        "dedupe-record",
        lambda m: raw.hset(m.keys.meta, "w:planted", "1:0:0:1" + ",1:1" * (2 << 20)),
        lambda m: {"append": lambda: m.append(turn(30), dedupe_key="~planted:7")},
    )

    async def summaries(m: MemoryInstance) -> None:
        for start in range(0, 100_000, 10_000):
            await raw.rpush(
                m.keys.summaries, *[head(i) + b'x"}' for i in range(start, start + 10_000)]
            )
        await raw.hset(m.keys.meta, "summary_count", 100_000)

    await planted(
        "summaries",
        summaries,
        lambda m: {
            "context": lambda: m.context(4_000),
            "snapshot": m.snapshot,
            "search": lambda: m.search("order"),
        },
    )

    async def facts(m: MemoryInstance) -> None:
        for start in range(0, 100_000, 10_000):
            span = range(start, start + 10_000)
            await raw.hset(m.keys.facts, mapping={f"k{i}": f"1\tv{i}" for i in span})
            await raw.zadd(m.keys.factord, {f"k{i}": 1 for i in span})

    await planted(
        "facts",
        facts,
        lambda m: {"context": lambda: m.context(4_000), "facts": m.facts.items},
    )

    async def pinned(m: MemoryInstance) -> None:
        await raw.hset(
            m.keys.meta,
            mapping={
                "pins": "," + ",".join(str(i) for i in range(1, 5_000)) + ",",
                "p:0:count": 1,
                "p:0:tokens": 1,
            },
        )

    await planted("pinned-ids", pinned, lambda m: {"context": lambda: m.context(4_000)})

    async def recalled(m: MemoryInstance) -> None:
        for _ in range(10):
            await raw.rpush(m.keys.recalled, *[head(3) + b'x"}'] * 10_000)

    await planted(
        "recalled", recalled, lambda m: {"recall_messages": lambda: m.recall_messages([2])}
    )

    async def long_meta(m: MemoryInstance) -> None:
        for start in range(0, 100_000, 10_000):
            await raw.hset(
                m.keys.meta, mapping={f"z{i}": "1" for i in range(start, start + 10_000)}
            )

    await planted(
        "meta-fields",
        long_meta,
        lambda m: {
            "health": m.health,
            "snapshot": m.snapshot,
            "replace": lambda: m.replace([turn(40)]),
        },
    )
    calls = sum(len(names) for _, names, _ in outcomes)
    changed = sum(len(c) for _, _, c in outcomes)
    assert changed == 0, outcomes
    assert meter.worst_ms < 50, meter.worst_ms
    record(
        group="adversarial-3",
        item=1,
        fault="planted raw with the read-write line: an 8 MB meta field, an 8 MB dedupe "
        "record, 100,000 summaries (meta counting them), 100,000 facts, 5,000 pinned ids, "
        "100,000 recalled messages, 100,000 meta fields; then what every reader calls",
        engine=engine.name,
        promise="each call refused typed (CorruptDataError) before it reads what was planted "
        "whole or loops over it; nothing written; the server held for milliseconds",
        operations=calls,
        acknowledged=0,
        lost=changed,
        duplicated=0,
        observed=f"{calls} calls over {len(outcomes)} plants, each CorruptDataError; no key "
        f"changed; worst script time {meter.worst_ms:.2f} ms (SLOWLOG)",
    )


async def test_what_compozy_memory_writes_at_its_caps_passes_every_size_check(
    client: RedisClient, memory_key: str
) -> None:
    """The size checks refuse only what the scripts never write: messages of the largest size
    accepted, facts at every cap, a meta holding many processes' dedupe records all read."""
    mem = memory(client, memory_key, facts_max=MAX_FACTS)
    mem.indexer.background = False
    body = "y" * (MAX_MESSAGE_BYTES - 200)
    for i in range(3):
        await mem.append({"role": "user", "content": body, "tokens": 10}, dedupe_key=f"k{i}")
    for start in range(0, MAX_FACTS, 100):
        await mem.facts.set(
            {f"{i:0{MAX_FACT_KEY - 8}d}": "v" * MAX_FACT_VALUE for i in range(start, start + 100)}
        )
    for p in range(300):  # 300 processes' records in meta
        await mem.append(turn(p), dedupe_key=f"~proc{p}:1")
    await mem.indexer.catch_up()
    assert len(await mem.read(0, 2)) == 3
    context = await mem.context_layers(10**9)
    assert len(context.facts) == 1  # every fact, in one message
    assert (await mem.health()).message_count == 303
    assert (await mem.snapshot()).incarnation
    assert len(await mem.facts.items()) == MAX_FACTS
    await mem.trim(keep_messages=0)
    assert len(await mem.recall(0, 3)) == 3


async def test_a_large_envelope_in_a_long_memory_is_read_once_and_refused(
    engine: EngineSpec, tenant: Tenant, client: RedisClient, record: Callable[..., None]
) -> None:
    """Where a memory is long enough to hold the planted bytes legitimately (300 messages
    may be 300 MiB), the list passes its size check: the planted envelope is then copied once
    by the read that meets it, and refused before anything parses or returns it. That copy is
    what ``proto-max-bulk-len`` bounds (docs/operations.md)."""
    mem = memory(client, "conv:long", project=tenant.project)
    mem.indexer.background = False
    for start in range(1, 301, 100):
        await mem.append_many([turn(i) for i in range(start, start + 100)])
    planted = head(301) + b"x" * (8 << 20) + b'"}'
    await tenant.client.rpush(mem.keys.msgs, planted)
    await tenant.client.hincrby(mem.keys.meta, "count", 1)
    before = await dump(client, mem.keys)
    meter = ServerTime(engine)
    with meter.measuring():
        names = await refused({"read": mem.read, "context": lambda: mem.context(4_000)})
    after = await dump(client, mem.keys)
    assert before == after
    record(
        group="adversarial-3",
        item=1,
        fault="an 8 MB envelope pushed raw after the 300 messages of a memory (which may hold "
        "300 MiB legitimately), then read and context",
        engine=engine.name,
        promise="refused typed (CorruptDataError) after one copy of the planted value, never "
        "parsed or returned; that copy is bounded by proto-max-bulk-len",
        operations=2,
        acknowledged=2 - len(names),
        lost=0,
        duplicated=0,
        observed=f"{len(names)} of 2 calls raised CorruptDataError; no key changed; worst "
        f"script time {meter.worst_ms:.2f} ms for the 8 MB copy (SLOWLOG)",
    )
