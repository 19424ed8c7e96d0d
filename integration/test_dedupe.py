"""A write repeated with its dedupe key is applied once, however large; the set of keys
remembered stays bounded however many writes there are."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from compozy_memory import InvalidMessageError
from compozy_memory._io.translate import RedisClient
from compozy_memory._model.limits import MAX_BATCH
from integration.engines import EngineSpec
from integration.flush_support import PROJECT, audit
from integration.memories import memory, turn

# Run by scripts/reliability: its counts become rows of RELIABILITY.md.
pytestmark = pytest.mark.faults


async def test_a_large_batch_repeated_with_its_dedupe_key_is_stored_once(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    size = MAX_BATCH  # the largest batch one call takes: one more is refused, typed
    mem = memory(client, memory_key, project=PROJECT)
    with pytest.raises(InvalidMessageError, match=f"at most {MAX_BATCH}"):
        await mem.append_many([turn(n, tokens=1) for n in range(size + 1)])
    batch = [turn(n, tokens=1) for n in range(size)]
    first = await mem.append_many(batch, dedupe_key="webhook-1")
    again = await mem.append_many(batch, dedupe_key="webhook-1")  # a retry after a lost reply
    assert not first.duplicate
    assert again.duplicate
    assert again.ids == first.ids
    assert await mem.len() == size
    await audit(client, memory_key, list(first.ids))
    record(
        group="adversarial",
        fault=f"an append_many of {size:,} messages repeated with its dedupe key",
        engine=engine.name,
        promise="a retried write is applied at most once",
        operations=2 * size,
        acknowledged=size,
        lost=0,
        duplicated=0,
        observed="the repeat answered duplicate=True with the first call's ids",
    )


async def test_writes_without_new_ids_keep_the_dedupe_set_bounded(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key, project=PROJECT)
    for _ in range(12):  # 3,000 writes that add no ids
        await asyncio.gather(*(mem.replace([]) for _ in range(250)))
    assert await client.zcard(mem.keys.dedupe) <= 1_064
