"""The scripts as a Redis Functions library: tenants call FCALL and nothing else.

An ACL user made from `compozy-memory acl` may call the installed functions, and may not
run a script of its own (EVAL), load functions, or flush anything: no tenant can allocate
past maxmemory or loop and stop the server for the others.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.crc import key_slot

from compozy_memory import (
    NO_RETRY,
    BackendPermissionError,
    BackendUnavailableError,
    InstanceKeys,
    MemoryInstance,
    RetryPolicy,
    connect,
)
from compozy_memory._io.delivery import delivery_for, install
from compozy_memory._io.translate import RedisClient
from compozy_memory._ops.acl import acl_setuser
from compozy_memory._store.warmup import warm
from compozy_memory._wire.scripts import library
from compozy_memory.embedded import start_cluster
from integration.engines import EngineSpec, require_redis7
from integration.faults import FaultProxy
from integration.memories import COUNTER, memory

pytestmark = pytest.mark.faults

QUICK = RetryPolicy(attempts=2, deadline=1.0)
HOSTILE = [
    ("EVAL", "return 1", 0),
    ("EVAL", "while true do end", 0),
    ("EVAL", "return string.rep('x', 600000000)", 0),
    ("FUNCTION", "LOAD", "#!lua name=evil\nredis.register_function('x', function() end)"),
    ("FUNCTION", "FLUSH"),
    ("FUNCTION", "DELETE", "compozy_memory"),
    ("SCRIPT", "FLUSH"),
    ("SCRIPT", "LOAD", "return 1"),
    ("FLUSHALL",),
    ("CONFIG", "SET", "maxmemory", "0"),
]


async def library_names(node: Redis) -> list[str]:
    """The libraries FUNCTION LIST names (RESP2: a flat field, value list per library)."""
    names = []
    for entry in await node.function_list():
        fields = dict(zip(entry[::2], entry[1::2], strict=True))
        names.append(fields[b"library_name"].decode())
    return names


def handle(client: RedisClient, project: str, key: str = "conv:1") -> MemoryInstance:
    return MemoryInstance.open(client, project=project, key=key, counter=COUNTER, retry=QUICK)


def tenant_url(url: str, user: str) -> str:
    return url.replace("redis://", f"redis://{user}:pw-{user}@")


async def add_user(nodes: list[Redis], project: str, *, read_only: bool, cluster: bool) -> str:
    name = f"u{uuid.uuid4().hex[:12]}"
    line = acl_setuser(name, project, read_only=read_only, password="pw-" + name, cluster=cluster)
    for node in nodes:
        await node.execute_command(*line)  # type: ignore[no-untyped-call]
    return name


@pytest.fixture
async def admin(standalone: EngineSpec) -> AsyncIterator[Redis]:
    client = Redis.from_url(standalone.url)
    await client.function_flush()  # every test starts from a server without the library
    yield client
    await client.function_flush()
    await client.aclose()


async def test_a_tenant_runs_the_installed_functions_and_nothing_of_its_own(
    standalone: EngineSpec, admin: Redis, record: Callable[..., None]
) -> None:
    project = f"p{uuid.uuid4().hex[:8]}"
    assert await install(admin) == ["standalone"]
    assert await install(admin) == []  # idempotent
    user = await add_user([admin], project, read_only=False, cluster=False)
    tenant = Redis.from_url(tenant_url(standalone.url, user))
    try:
        memory = handle(tenant, project)
        result = await memory.append({"role": "user", "content": "hi", "tokens": 3})
        assert result.ids == range(1, 2)
        assert [m.text for m in await memory.read()] == ["hi"]
        assert delivery_for(tenant).mode == "functions"
        refused = 0
        for command in HOSTILE:
            with pytest.raises(redis_errors.NoPermissionError):
                await tenant.execute_command(*command)  # type: ignore[no-untyped-call]
            refused += 1
        assert await admin.ping()  # the server never stopped answering
        record(
            group="security",
            fault="a tenant runs its own scripts (EVAL loops, 600 MB strings), loads or "
            "flushes functions, flushes data",
            engine=standalone.name,
            operations=len(HOSTILE),
            acknowledged=0,
            lost=0,
            duplicated=0,
            promise="no tenant can run code of its own on the shared server",
            observed=f"{refused}/{len(HOSTILE)} refused by the ACL (NOPERM); the server "
            "kept answering; the tenant's own memory worked through FCALL",
        )
    finally:
        await tenant.aclose()


async def test_without_the_library_a_tenant_gets_a_clear_error_and_an_operator_fixes_it(
    standalone: EngineSpec, admin: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    project = f"p{uuid.uuid4().hex[:8]}"
    user = await add_user([admin], project, read_only=False, cluster=False)
    tenant = Redis.from_url(tenant_url(standalone.url, user))
    try:
        memory = handle(tenant, project)
        with caplog.at_level(logging.WARNING, logger="compozy_memory.delivery"):
            for _ in range(2):
                with pytest.raises(BackendPermissionError, match="compozy-memory install"):
                    await memory.append({"role": "user", "content": "hi", "tokens": 3})
        # The fallback is logged once per client, with its cause.
        (record,) = caplog.records
        assert "falling back to EVALSHA" in record.getMessage()
        assert "NoPermissionError" in record.getMessage()
        assert record.__dict__["key"] == memory.key
        assert await admin.function_list() == []  # the tenant could not load it
        assert await install(admin) == ["standalone"]
        await memory.append({"role": "user", "content": "hi", "tokens": 3})
        assert await memory.len() == 1
    finally:
        await tenant.aclose()


async def test_a_user_who_may_load_functions_loads_them_on_first_use(
    standalone: EngineSpec, admin: Redis
) -> None:
    client = Redis.from_url(standalone.url)
    try:
        await handle(client, "firstuse").append({"role": "user", "content": "x", "tokens": 1})
        assert await library_names(admin) == [library().name]
        assert delivery_for(client).mode == "functions"
    finally:
        await client.aclose()


async def test_a_read_only_tenant_reads_through_fcall_ro_and_cannot_write(
    standalone: EngineSpec, admin: Redis
) -> None:
    project = f"p{uuid.uuid4().hex[:8]}"
    await install(admin)
    await handle(admin, project).append({"role": "user", "content": "shared", "tokens": 2})
    user = await add_user([admin], project, read_only=True, cluster=False)
    reader = Redis.from_url(tenant_url(standalone.url, user))
    try:
        # A read-write handle on a read-only user: the library lets it try, the server refuses.
        memory = handle(reader, project)
        assert [m.text for m in await memory.context(100)] == ["shared"]
        assert (await memory.health()).message_count == 1
        with pytest.raises(BackendPermissionError):
            await memory.append({"role": "user", "content": "x", "tokens": 1})
        with pytest.raises(BackendPermissionError):
            await memory.clear()
        assert await handle(admin, project).len() == 1
    finally:
        await reader.aclose()


async def _owner(node: Redis, slot: int) -> str | None:
    for start, end, primary, *_ in await node.execute_command("CLUSTER", "SLOTS"):  # type: ignore[no-untyped-call]
        if start <= slot <= end:
            return str(primary[2].decode())
    return None


async def _until(check: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + 30
    while not await check():  # type: ignore[misc]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


@pytest.fixture(params=["valkey", "redis7"])
def cluster_binary(request: pytest.FixtureRequest) -> str | None:
    if request.param == "valkey":
        return None  # the embedded default
    return require_redis7("Redis 7 cluster")


@pytest.mark.timeout(180)
@pytest.mark.slow
@pytest.mark.cluster
async def test_functions_on_every_primary_and_on_a_node_added_later(
    cluster_binary: str | None, record: Callable[..., None]
) -> None:
    project = f"p{uuid.uuid4().hex[:8]}"
    with start_cluster(3, cluster_binary) as cluster:
        admin = connect(cluster.url, cluster=True)
        nodes = [Redis.from_url(n.url) for n in cluster.nodes]
        tenant: RedisClient | None = None
        try:
            assert len(await install(admin)) == 3
            for node in nodes:
                assert await library_names(node) == [library().name]
            user = await add_user(nodes, project, read_only=False, cluster=True)
            tenant = connect(tenant_url(cluster.url, user), cluster=True)
            for n in range(20):  # memories spread over the three primaries
                await handle(tenant, project, f"conv:{n}").append(
                    {"role": "user", "content": "hi", "tokens": 2}
                )

            # A fourth primary joins by CLUSTER MEET (which copies no functions) and is given
            # the (empty) slot of a memory that does not exist yet.
            added = cluster.add_node()
            new = Redis.from_url(added.url)
            nodes.append(new)
            new_id = (await new.execute_command("CLUSTER", "MYID")).decode()  # type: ignore[no-untyped-call]

            async def everyone_knows_it() -> bool:
                for node in nodes[:3]:
                    if new_id.encode() not in await node.execute_command("CLUSTER", "NODES"):  # type: ignore[no-untyped-call]
                        return False
                return True

            await _until(everyone_knows_it, "the new node to join")
            key = "moved"
            slot = key_slot(InstanceKeys.build(project, key).prefix.encode())
            for node in nodes:
                await node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", new_id)  # type: ignore[no-untyped-call]

            async def moved() -> bool:
                for node in nodes:
                    info = await node.execute_command("CLUSTER", "INFO")  # type: ignore[no-untyped-call]
                    if b"cluster_state:ok" not in info or await _owner(node, slot) != new_id:
                        return False
                return True

            await _until(moved, "every node to agree on the moved slot")
            line = acl_setuser(user, project, read_only=False, password="pw-" + user, cluster=True)
            await new.execute_command(*line)  # type: ignore[no-untyped-call]
            with pytest.raises(BackendPermissionError, match="compozy-memory install"):
                await handle(tenant, project, key).append(
                    {"role": "user", "content": "x", "tokens": 1}
                )
            assert await install(admin) == [f"127.0.0.1:{added.port}"]
            await handle(tenant, project, key).append({"role": "user", "content": "x", "tokens": 1})
            assert await new.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) > 0  # type: ignore[no-untyped-call]
            record(
                group="security",
                fault="Cluster: functions installed on every primary, then a primary added by "
                "CLUSTER MEET takes a slot",
                engine="redis7-cluster" if cluster_binary else "valkey-cluster",
                operations=21,
                acknowledged=21,
                lost=0,
                duplicated=0,
                promise="every primary serves the functions, new ones after `install`",
                observed="the tenant is refused with an install hint on the new node until "
                "`install` loads the library there (and only there); then it is served",
            )
        finally:
            if tenant is not None:
                await tenant.aclose()
            await admin.aclose()
            for node in nodes:
                await node.aclose()


def test_the_install_command_loads_the_library(standalone: EngineSpec) -> None:
    from compozy_memory._ops.cli import main

    assert main(["install", "--url", standalone.url]) == 0
    assert main(["install", "--url", "redis://127.0.0.1:1/0"]) == 3  # unreachable


@pytest.fixture
def proxy(standalone: EngineSpec) -> Iterator[FaultProxy]:
    port = int(standalone.url.rsplit(":", 1)[1].split("/")[0])
    with FaultProxy(port) as p:
        yield p


async def loaded(direct: Redis) -> bool:
    name = library().name
    listed = await direct.execute_command(  # type: ignore[no-untyped-call]
        "FUNCTION", "LIST", "LIBRARYNAME", name
    )
    return bool(listed)


async def test_a_function_load_whose_reply_is_lost_is_typed_and_retried(
    standalone: EngineSpec, proxy: FaultProxy, record: Any
) -> None:
    direct = Redis.from_url(standalone.url)
    lost_before = proxy.lost_replies
    outcomes: list[str] = []
    stored_once = stored_twice = 0
    try:
        for batching in (True, False):  # a call's own load, alone and through the batcher
            await direct.function_flush()
            proxy.lose_replies(1, to=(b"FUNCTION",))
            client = connect(proxy.url)
            # No background indexing: a catch-up still retrying later would load the library
            # again after the FUNCTION FLUSH below, before install() and warm() are measured.
            mem = memory(client, f"lost-load:{batching}", batching=batching, background_index=False)
            result = await mem.append({"role": "user", "content": "hello"})
            assert not result.duplicate
            stored = await mem.len()
            stored_once += stored == 1
            stored_twice += max(0, stored - 1)
            assert stored == 1
            outcomes.append(f"append ({'batched' if batching else 'direct'}) stored once")
            await mem.clear()
            await client.aclose()

        # Without retries the caller gets the typed error, and the next call goes through.
        await direct.function_flush()
        proxy.lose_replies(1, to=(b"FUNCTION",))
        client = connect(proxy.url)
        mem = memory(client, "lost-load:once", retry=NO_RETRY)
        with pytest.raises(BackendUnavailableError, match="FUNCTION LOAD"):
            await mem.append({"role": "user", "content": "hello"})
        assert await loaded(direct)  # the server did load it; only the reply was lost
        await mem.append({"role": "user", "content": "again"})
        await mem.clear()
        await client.aclose()
        outcomes.append("without retries BackendUnavailableError")

        for name, run in (("install", install), ("warm", warm)):
            await direct.function_flush()
            proxy.lose_replies(1, to=(b"FUNCTION",))
            client = connect(proxy.url)
            reply = await run(client)
            if name == "install":
                assert reply == ["standalone"]  # loaded by this call, its reply lost
            assert await loaded(direct)
            await client.aclose()
            outcomes.append(f"{name} loaded it")
    finally:
        await direct.aclose()
    lost = proxy.lost_replies - lost_before
    assert lost == 5
    record(
        group="adversarial-2",
        item=12,
        fault="the reply to FUNCTION LOAD lost (the server loaded the library): appends "
        "batched and direct, without retries, install(), warm()",
        engine=standalone.name,
        promise="a typed error (BackendUnavailableError), and a retry that finds the "
        "library loaded; the append stored once",
        operations=len(outcomes),
        acknowledged=sum("stored once" in o or "loaded it" in o for o in outcomes),
        lost=2 - stored_once,
        duplicated=stored_twice,
        observed=f"{lost} replies dropped: " + "; ".join(outcomes),
    )
