"""The reliability building blocks that need no server: wait and retry policies, the error
mapping, ACL rules, and dedupe key checks."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from redis import exceptions as redis_errors
from redis.asyncio import Redis

from compozy_memory import (
    NO_RETRY,
    BackendError,
    BackendOutOfMemoryError,
    BackendPermissionError,
    BackendTimeoutError,
    BackendUnavailableError,
    ConfigurationError,
    HeuristicCounter,
    InvalidMessageError,
    MemoryInstance,
    RetryPolicy,
    WaitPolicy,
    connect,
)
from compozy_memory._config.schema import MemoryResource
from compozy_memory._io.pipelining import exchange
from compozy_memory._io.translate import translate
from compozy_memory._ops.acl import READ_COMMANDS, WRITE_COMMANDS, acl_rules
from compozy_memory._wire.scripts import SCRIPT_NAMES, script

LUA = Path(__file__).resolve().parent.parent / "lua"


def test_wait_policy_commands_and_checks() -> None:
    assert WaitPolicy(replicas=2).command() == ("WAIT", 2, 1000)
    aof = WaitPolicy(replicas=1, aof=True, timeout=timedelta(milliseconds=250))
    assert aof.command() == ("WAITAOF", 1, 1, 250)
    assert WaitPolicy(aof=True).command() == ("WAITAOF", 1, 0, 1000)
    with pytest.raises(ConfigurationError, match="replicas >= 1, or aof"):
        WaitPolicy()
    with pytest.raises(ConfigurationError, match="timeout must be positive"):
        WaitPolicy(replicas=1, timeout=timedelta(0))
    with pytest.raises(ConfigurationError, match="replicas must be >= 0"):
        WaitPolicy(replicas=-1, aof=True)


def test_wait_from_yaml() -> None:
    r = MemoryResource.model_validate(
        {"id": "m", "max_tokens": 100, "persistence": {"wait": {"replicas": 1, "timeout": "250ms"}}}
    )
    assert r.policy().wait == WaitPolicy(replicas=1, timeout=timedelta(milliseconds=250))
    assert r.summary()["wait"] == "1 replica(s), timeout 250ms"
    assert MemoryResource.model_validate({"id": "m", "max_tokens": 9}).policy().wait is None
    for bad, fragment in [
        ({}, "wait needs replicas >= 1, or aof: true"),
        ({"replicas": 1, "timout": "1s"}, "Extra inputs are not permitted"),
        ({"replicas": -1}, "greater than or equal to 0"),
        ({"replicas": 1, "timeout": "soon"}, "not a duration"),
    ]:
        with pytest.raises(ValidationError, match=re.escape(fragment)):
            MemoryResource.model_validate(
                {"id": "m", "max_tokens": 9, "persistence": {"wait": bad}}
            )


async def test_retry_policy_retries_only_unavailability_within_bounds() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise BackendUnavailableError("connection reset")
        return "ok"

    assert await RetryPolicy(attempts=3, initial_backoff=0.001).call(flaky) == "ok"
    assert calls == 3

    calls = 0
    with pytest.raises(BackendUnavailableError):
        await RetryPolicy(attempts=2, initial_backoff=0.001).call(flaky)
    assert calls == 2

    calls = 0
    with pytest.raises(BackendUnavailableError):
        await NO_RETRY.call(flaky)
    assert calls == 1

    for error in (BackendPermissionError, BackendOutOfMemoryError, BackendError):
        attempts = 0

        async def refused(error: type[Exception] = error) -> None:
            nonlocal attempts
            attempts += 1
            raise error("no")

        with pytest.raises(error):
            await RetryPolicy(attempts=5, initial_backoff=0.001).call(refused)
        assert attempts == 1


async def test_retry_policy_stops_at_its_deadline() -> None:
    calls = 0

    async def down() -> None:
        nonlocal calls
        calls += 1
        raise BackendUnavailableError("refused")

    policy = RetryPolicy(attempts=1000, deadline=0.2, initial_backoff=0.01, max_backoff=0.02)
    with pytest.raises(BackendUnavailableError):
        await policy.call(down)
    assert 2 < calls < 100


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ({"attempts": 0}, "attempts must be an integer >= 1"),
        ({"deadline": -1}, "deadline must be a number >= 0"),
        ({"max_backoff": "1"}, "max_backoff must be a number"),
    ],
)
def test_bad_retry_policies(bad: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigurationError, match=fragment):
        RetryPolicy(**bad)


@pytest.mark.parametrize(
    ("raised", "typed"),
    [
        (redis_errors.TimeoutError("Timeout reading"), BackendTimeoutError),
        (redis_errors.ConnectionError("Connection refused"), BackendUnavailableError),
        (redis_errors.BusyLoadingError("LOADING"), BackendUnavailableError),
        (redis_errors.TryAgainError("TRYAGAIN"), BackendUnavailableError),
        (redis_errors.ClusterDownError("CLUSTERDOWN"), BackendUnavailableError),
        (redis_errors.ClusterError("TTL exhausted."), BackendUnavailableError),
        (redis_errors.ClusterError("something else"), BackendError),
        (redis_errors.AuthenticationError("invalid password"), BackendPermissionError),
        (redis_errors.NoPermissionError("no permissions"), BackendPermissionError),
        (redis_errors.ResponseError("NOPERM User x has no permissions"), BackendPermissionError),
        (redis_errors.OutOfMemoryError("OOM"), BackendOutOfMemoryError),
    ],
)
def test_redis_errors_map_to_typed_errors(raised: Exception, typed: type[Exception]) -> None:
    error = translate(raised, "append", "compozy:p:memory:{k}")  # type: ignore[arg-type]
    assert type(error) is typed
    assert "compozy:p:memory:{k}" in str(error)


def test_timeouts_and_permission_errors_are_told_apart_by_retry() -> None:
    assert issubclass(BackendTimeoutError, BackendUnavailableError)  # retried
    assert not issubclass(BackendPermissionError, BackendUnavailableError)  # never retried


def test_acl_rules_cover_every_command_the_scripts_call() -> None:
    def commands(source: str) -> set[str]:
        found = re.findall(r"redis\.call\('([A-Z]+)'(?:, '([A-Za-z]+)')?", source)
        # MEMORY USAGE and INFO replication are granted as subcommands (acl.py).
        return {f"{c}|{sub}".lower() if c in ("MEMORY", "INFO") else c.lower() for c, sub in found}

    every = {name for path in LUA.rglob("*.lua") for name in commands(path.read_text())}
    assert every <= set(READ_COMMANDS) | set(WRITE_COMMANDS)
    read_scripts = [name for name in SCRIPT_NAMES if script(name).read_only]
    assert set(read_scripts) >= {
        "read",
        "health",
        "snapshot",
        "index_read",
        "search_fetch",
        "context",
    }
    for name in read_scripts:
        # What the script runs, its helpers included.
        assert commands(script(name).source) <= set(READ_COMMANDS), name


def test_acl_rules_for_each_kind_of_user() -> None:
    reader = acl_rules("acme", read_only=True)
    assert "%R~compozy:acme:memory:*" in reader
    assert not {f"+{c}" for c in WRITE_COMMANDS} & set(reader)
    cluster_reader = acl_rules("acme", read_only=True, cluster=True)
    assert "%R~compozy:acme:memory:*" in cluster_reader  # reads go as FCALL_RO there too
    assert "+cluster|slots" in cluster_reader
    writer = acl_rules("acme", read_only=False)
    # Never anything that runs a tenant's own code.
    for rule in (*reader, *writer, *cluster_reader):
        assert not rule.startswith(("+eval", "+function", "+script", "+@")), rule
    assert "~compozy:acme:memory:*" in writer
    assert "+rpush" in writer
    with pytest.raises(ConfigurationError, match="project id"):
        acl_rules("acme:*", read_only=True)  # no widening the pattern through the project id


@pytest.mark.parametrize("key", ["", "k" * 257, "\ud800", 42])
async def test_bad_dedupe_keys_are_refused_before_redis(key: Any) -> None:
    client = Redis(port=1)  # nothing listens there: a call that reached it would fail
    mem = MemoryInstance.open(client, project="p", key="k", counter=HeuristicCounter())
    with pytest.raises(InvalidMessageError, match="dedupe_key"):
        await mem.append({"role": "user", "content": "x"}, dedupe_key=key)
    await client.aclose()


def test_connect_sets_timeouts_unless_told_otherwise() -> None:
    client = connect("redis://127.0.0.1:1/0")
    kwargs = client.connection_pool.connection_kwargs  # type: ignore[union-attr]
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (5.0, 5.0)
    own = connect("redis://127.0.0.1:1/0", socket_timeout=0.5)
    assert own.connection_pool.connection_kwargs["socket_timeout"] == 0.5  # type: ignore[union-attr]


class _ClosedUnderWrite:
    """A redis-py connection whose transport the peer closed: on some Pythons redis-py then
    leaks asyncio's internals from the write (redis-py issue 4287)."""

    def __init__(self, raised: Exception) -> None:
        self.raised = raised

    async def send_packed_command(self, payload: object, check_health: bool = True) -> None:
        raise self.raised

    def pack_commands(self, commands: object) -> list[bytes]:
        return [b""]


@pytest.mark.parametrize(
    "raised",
    [
        AttributeError("'NoneType' object has no attribute 'writelines'"),
        AttributeError("'NoneType' object has no attribute '_add_writer'"),
        TypeError("'NoneType' object is not callable"),
    ],
)
async def test_a_connection_closed_under_a_pipeline_is_a_dropped_connection(
    raised: Exception,
) -> None:
    connection: Any = _ClosedUnderWrite(raised)
    with pytest.raises(redis_errors.ConnectionError, match="closed while in use"):
        await exchange(connection, [("PING",)])


async def test_other_errors_of_a_pipeline_write_are_not_taken_for_a_dropped_connection() -> None:
    connection: Any = _ClosedUnderWrite(AttributeError("'Connection' object has no attribute 'x'"))
    with pytest.raises(AttributeError):
        await exchange(connection, [("PING",)])
