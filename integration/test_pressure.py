"""A server at maxmemory: writes are refused whole with a typed error, reads go on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from compozy_memory import BackendOutOfMemoryError, MemoryInstance
from compozy_memory.embedded import EmbeddedServer, find_binary, start_server
from integration.engines import require_redis7
from integration.faults import consistency_problems, tally
from integration.memories import COUNTER

# Run by scripts/reliability: its counts become rows of RELIABILITY.md.
pytestmark = pytest.mark.faults


@pytest.fixture(params=["valkey", "redis7"])
def tiny_server(request: pytest.FixtureRequest) -> Iterator[EmbeddedServer]:
    binary: Path | str = (
        find_binary("valkey-server") if request.param == "valkey" else require_redis7()
    )
    with start_server(
        binary, extra_args=["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"]
    ) as server:
        yield server


async def test_appends_at_maxmemory_are_refused_whole(
    tiny_server: EmbeddedServer, record: Callable[..., None]
) -> None:
    client = Redis.from_url(tiny_server.url)
    mems = [
        MemoryInstance.open(client, project="oom", key=f"m{i}", counter=COUNTER) for i in range(4)
    ]
    acknowledged: set[str] = set()
    attempted = refused = 0

    async def conversation_meta(mem: MemoryInstance) -> dict[bytes | str, bytes | str]:
        # The indexer works on in the background (refused too, at the limit): its fields
        # change on their own schedule.
        meta = await client.hgetall(mem.keys.meta)
        return {
            k: v
            for k, v in meta.items()
            if not (k.decode() if isinstance(k, bytes) else k).startswith("ix_")
        }

    filler = "x" * 4000

    async def writer(w: int) -> None:
        nonlocal attempted, refused
        mem, batch, refusals = mems[w], 0, 0
        while refusals < 20:
            contents = [f"w{w}:b{batch}:{i} {filler}" for i in range(10)]
            batch += 1
            attempted += len(contents)
            before = await client.llen(mem.keys.msgs), await conversation_meta(mem)
            try:
                await mem.append_many([{"role": "user", "content": c} for c in contents])
            except BackendOutOfMemoryError:
                refusals += 1
                refused += len(contents)
                after = await client.llen(mem.keys.msgs), await conversation_meta(mem)
                assert after == before  # nothing of the refused batch was written
            else:
                acknowledged.update(contents)

    await asyncio.gather(*(writer(w) for w in range(4)))
    # Reads still work at the limit.
    window = await mems[0].read_window(2_000)
    assert window
    t = await tally(client, [m.keys for m in mems], attempted, acknowledged)
    for mem in mems:
        assert await consistency_problems(client, mem.keys) == []
    assert (t.lost, t.duplicated, t.stored_unacknowledged) == (0, 0, 0)
    await client.config_set("maxmemory", 0)
    assert not (await mems[0].append({"role": "user", "content": "room again"})).duplicate
    await client.aclose()
    record(
        group="pressure",
        fault="maxmemory 4mb, noeviction; 4 writers of 10-message batches until refused",
        engine="valkey" if "valkey" in tiny_server.binary.name else "redis7",
        promise="refused batches write nothing (BackendOutOfMemoryError); acknowledged ones "
        "are whole; reads go on",
        tally=t,
        observed=f"{refused // 10} batches refused, {t.stored_unacknowledged} messages of "
        "refused batches stored; writes resumed once memory was freed",
    )
