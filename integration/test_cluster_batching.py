"""Per-node pipelining on a real 3-master cluster: every caller gets its own reply, whatever
happens (cancellations, flushed scripts or functions on one node, a slot moved mid-run)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from typing import Any, Literal

import pytest
from redis.asyncio import Redis, RedisCluster

from compozy_memory import ConflictError, MemoryInstance
from compozy_memory._io.batching import batcher_for
from compozy_memory._io.cluster_batching import (
    CLUSTER_BATCHING,
    TRANSACTIONS_A_NODE,
    ClusterBatcher,
)
from compozy_memory._io.delivery import delivery_for, install
from compozy_memory._wire.scripts import script
from compozy_memory.embedded import EmbeddedCluster
from integration.memories import COUNTER

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(
        not CLUSTER_BATCHING, reason="this redis-py's Cluster client is too old to batch"
    ),
]

SESSIONS = 48
TURNS = 20


@pytest.fixture
async def cluster_client(valkey_cluster: EmbeddedCluster) -> AsyncIterator[RedisCluster]:
    name = f"cb{uuid.uuid4().hex[:10]}"  # picks this client's connections out of CLIENT LIST
    client = RedisCluster.from_url(valkey_cluster.url, client_name=name)
    yield client
    await client.aclose()


@pytest.fixture
async def nodes(valkey_cluster: EmbeddedCluster) -> AsyncIterator[list[Redis]]:
    """A plain client per master, for what the cluster client must not do itself."""
    clients = [Redis.from_url(node.url) for node in valkey_cluster.nodes]
    yield clients
    for client in clients:
        await client.aclose()


def open_sessions(client: RedisCluster, prefix: str, count: int = SESSIONS) -> list[MemoryInstance]:
    return [
        # The appends alone: the indexer's background steps would add calls of their own.
        MemoryInstance.open(
            client, project="cbatch", key=f"{prefix}:{s}", counter=COUNTER, background_index=False
        )
        for s in range(count)
    ]


async def converse(mem: MemoryInstance, s: int) -> list[tuple[str, int]]:
    """Session s's TURNS appends, one at a time: (content, id) of each, as acknowledged."""
    acknowledged = []
    for turn in range(TURNS):
        content = f"s{s}-t{turn}"
        result = await mem.append({"role": "user", "content": content})
        acknowledged.append((content, result.first_id))
    return acknowledged


async def stored(client: RedisCluster, mem: MemoryInstance) -> dict[str, int]:
    """content -> id of every message the memory holds."""
    out = {}
    for entry in await client.lrange(mem.keys.msgs, 0, -1):
        message = json.loads(entry)
        out[message["content"]] = message["id"]
    return out


async def owner_port(client: RedisCluster, mem: MemoryInstance) -> int:
    node = client.get_node_from_key(mem.keys.msgs)
    assert node is not None
    return int(node.port)


async def connections(node: Redis, name: str) -> int:
    listed = await node.execute_command("CLIENT", "LIST")  # type: ignore[no-untyped-call]
    text = listed.decode() if isinstance(listed, bytes) else str(listed)
    return sum(1 for line in text.splitlines() if f" name={name} " in f" {line} ")


async def test_concurrent_callers_over_every_master_get_their_own_replies(
    cluster_client: RedisCluster, nodes: list[Redis]
) -> None:
    await install(cluster_client)  # no first call of a node meets a missing library
    mems = open_sessions(cluster_client, uuid.uuid4().hex)
    assert isinstance(batcher_for(cluster_client), ClusterBatcher)

    results = await asyncio.gather(*(converse(mems[s], s) for s in range(SESSIONS)))
    per_master = Counter([await owner_port(cluster_client, m) for m in mems])
    assert len(per_master) == 3  # the memories really are spread over every master
    for s, acknowledged in enumerate(results):
        assert dict(acknowledged) == await stored(cluster_client, mems[s])
        assert [i for _, i in acknowledged] == list(range(1, TURNS + 1))
    # Each master saw this client's calls arrive batched: 48 callers appending at once would
    # have opened about 16 connections per master one call at a time. A pipeline needs one;
    # with replies handed out in turns (RESUME_GROUP) a few pipelines to a node may overlap
    # (more on a loaded machine: a transaction's fallbacks follow it in a pipeline of their
    # own); at most TRANSACTIONS_A_NODE appends go as transactions, each on its connection.
    name = cluster_client.get_connection_kwargs()["client_name"]
    opened = [await connections(node, str(name)) for node in nodes]
    assert max(opened) <= 6 + TRANSACTIONS_A_NODE, opened


async def test_a_failing_call_does_not_disturb_its_node_batch(
    cluster_client: RedisCluster,
) -> None:
    mems = open_sessions(cluster_client, uuid.uuid4().hex, 12)
    for mem in mems:
        await mem.append({"role": "user", "content": "seed"})
    calls: list[Awaitable[object]] = [
        m.replace([], if_last_id=999) if i % 4 == 0 else m.append({"role": "user", "content": "x"})
        for i, m in enumerate(mems)
    ]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    for i, outcome in enumerate(outcomes):
        if i % 4 == 0:
            assert isinstance(outcome, ConflictError), outcome
        else:
            assert getattr(outcome, "first_id", None) == 2, outcome


async def test_cancelled_callers_never_receive_or_steal_a_reply(
    cluster_client: RedisCluster,
) -> None:
    mems = open_sessions(cluster_client, uuid.uuid4().hex)
    for round_ in range(8):
        tasks = [
            asyncio.create_task(mems[s].append({"role": "user", "content": f"s{s}-r{round_}"}))
            for s in range(SESSIONS)
        ]
        await asyncio.sleep(0)  # queued in the batcher
        if round_ % 2:
            await asyncio.sleep(0)  # and, every other round, on their way to the nodes
        for s in range(round_ % 3, SESSIONS, 3):
            tasks[s].cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for s, task in enumerate(tasks):
            if task.cancelled():
                continue
            ids = await stored(cluster_client, mems[s])
            assert ids[f"s{s}-r{round_}"] == task.result().last_id
    for mem in mems:
        contents = list((await stored(cluster_client, mem)).keys())
        assert len(contents) == len(set(contents))  # a cancelled append ran at most once


@pytest.mark.parametrize("mode", ["functions", "eval"])
async def test_scripts_flushed_on_one_node_are_loaded_again_there(
    cluster_client: RedisCluster, nodes: list[Redis], mode: Literal["functions", "eval"]
) -> None:
    delivery = delivery_for(cluster_client)
    if mode == "eval":
        delivery.mode = "eval"  # as on a server whose users may not load functions
    mems = open_sessions(cluster_client, uuid.uuid4().hex)
    await asyncio.gather(*(m.append({"role": "user", "content": "warm"}) for m in mems))
    victim = nodes[1]
    victim_port = int(victim.connection_pool.connection_kwargs["port"])
    on_victim = [m for m in mems if await owner_port(cluster_client, m) == victim_port]
    assert on_victim

    async def converse_and_flush(s: int) -> list[tuple[str, int]]:
        acknowledged = []
        for turn in range(TURNS):
            content = f"s{s}-t{turn}"
            result = await mems[s].append({"role": "user", "content": content})
            acknowledged.append((content, result.first_id))
            if s == 0 and turn in (3, 11):
                # the other sessions' next pipeline to that node finds nothing to run
                if mode == "eval":
                    await victim.script_flush()
                else:
                    await victim.function_flush()
        return acknowledged

    results = await asyncio.gather(*(converse_and_flush(s) for s in range(SESSIONS)))
    for s, acknowledged in enumerate(results):
        stored_ids = await stored(cluster_client, mems[s])
        assert dict(acknowledged) == {c: i for c, i in stored_ids.items() if c != "warm"}
        assert [i for _, i in acknowledged] == list(range(2, TURNS + 2))
    assert delivery.mode == mode
    # Once more, deterministically: one burst, so one pipeline per node, after a flush.
    await (victim.script_flush() if mode == "eval" else victim.function_flush())
    burst = await asyncio.gather(*(m.append({"role": "user", "content": "last"}) for m in mems))
    assert [r.first_id for r in burst] == [TURNS + 2] * SESSIONS
    if mode == "functions":
        assert await victim.function_list() != []  # loaded again where it was flushed
    else:
        assert await victim.script_exists(script("append").sha) == [True]


async def _node_id(node: Redis) -> str:
    reply: Any = await node.execute_command("CLUSTER", "MYID")  # type: ignore[no-untyped-call]
    return reply.decode() if isinstance(reply, bytes) else str(reply)


async def _migrate(slot: int, source: Redis, target: Redis, everyone: list[Redis]) -> None:
    """Move ``slot`` and its keys from ``source`` to ``target`` as a resharding does."""
    source_id, target_id = await _node_id(source), await _node_id(target)
    target_port = target.connection_pool.connection_kwargs["port"]
    await target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)  # type: ignore[no-untyped-call]
    await source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)  # type: ignore[no-untyped-call]
    await asyncio.sleep(0.02)  # writers meet ASK meanwhile
    while keys := await source.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):  # type: ignore[no-untyped-call]
        await source.execute_command(  # type: ignore[no-untyped-call]
            "MIGRATE", "127.0.0.1", target_port, "", 0, 5000, "KEYS", *keys
        )
    await asyncio.sleep(0.02)
    for node in [target, source, *[n for n in everyone if n not in (target, source)]]:
        await node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)  # type: ignore[no-untyped-call]


@pytest.mark.slow
async def test_slots_moved_mid_run_lose_no_append_and_raise_nothing(
    cluster_client: RedisCluster, nodes: list[Redis]
) -> None:
    mems = open_sessions(cluster_client, uuid.uuid4().hex)
    await cluster_client.initialize()
    ports = [int(n.connection_pool.connection_kwargs["port"]) for n in nodes]
    source, target = nodes[0], nodes[2]
    moving = [m for m in mems if await owner_port(cluster_client, m) == ports[0]][:6]
    assert moving
    slots = sorted({cluster_client.keyslot(m.keys.msgs) for m in moving})
    halfway = asyncio.Event()

    async def converse_slowly(s: int) -> list[tuple[str, int]]:
        acknowledged = []
        for turn in range(TURNS * 2):
            content = f"s{s}-t{turn}"
            result = await mems[s].append({"role": "user", "content": content})
            acknowledged.append((content, result.first_id))
            if turn == 3 and s == 0:
                halfway.set()
            await asyncio.sleep(0.005)  # spread the turns over the migration
        return acknowledged

    async def reshard() -> None:
        await halfway.wait()
        for slot in slots:
            await _migrate(slot, source, target, nodes)

    writers = asyncio.gather(*(converse_slowly(s) for s in range(SESSIONS)))
    await reshard()
    results = await writers  # raises whatever any caller met
    for s, acknowledged in enumerate(results):
        assert dict(acknowledged) == await stored(cluster_client, mems[s])
        assert [i for _, i in acknowledged] == list(range(1, TURNS * 2 + 1))
    for mem in moving:  # the client followed: its slot map names the new owner
        assert await owner_port(cluster_client, mem) == ports[2]
        assert await target.exists(mem.keys.msgs) == 1


async def _kill_connections(node: Redis, name: str) -> int:
    listed = await node.execute_command("CLIENT", "LIST")  # type: ignore[no-untyped-call]
    text = listed.decode() if isinstance(listed, bytes) else str(listed)
    killed = 0
    for line in text.splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if fields.get("name") == name:
            killed += await node.execute_command("CLIENT", "KILL", "ID", fields["id"])  # type: ignore[no-untyped-call]
    return killed


@pytest.mark.slow
async def test_connections_cut_on_one_node_lose_and_duplicate_nothing(
    cluster_client: RedisCluster, nodes: list[Redis]
) -> None:
    """The node's connections die under the pipelines, reply half read or not yet sent: those
    calls are retried (appends carry dedupe tokens) and no reply reaches the wrong caller."""
    await install(cluster_client)
    mems = open_sessions(cluster_client, uuid.uuid4().hex)
    name = str(cluster_client.get_connection_kwargs()["client_name"])
    stop = asyncio.Event()
    killed = 0

    async def cut() -> None:
        nonlocal killed
        while not stop.is_set():
            killed += await _kill_connections(nodes[1], name)
            await asyncio.sleep(0.01)

    cutter = asyncio.create_task(cut())
    try:
        results = await asyncio.gather(*(converse(mems[s], s) for s in range(SESSIONS)))
    finally:
        stop.set()
        await cutter
    assert killed > 0
    for s, acknowledged in enumerate(results):
        assert dict(acknowledged) == await stored(cluster_client, mems[s])
        assert [i for _, i in acknowledged] == list(range(1, TURNS + 1))
