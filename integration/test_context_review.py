"""Review of the window's first chunk sized from meta's mean (review-5): planted meta values."""

from __future__ import annotations

import pytest

from compozy_memory._io.translate import RedisClient
from integration.memories import memory
from integration.test_context import chat


@pytest.mark.parametrize(
    "planted",
    [
        {"p:0:count": "-0.5"},
        {"p:0:count": "-2.5", "p:0:tokens": "-7.25"},
        {"tokens": "nan"},
        {"tokens": "inf"},
        {"tokens": "-inf"},
        {"tokens": "1e308"},
        {"tokens": "1e-300"},
        {"tokens": "text"},
        {"tokens": "-5"},
    ],
)
async def test_planted_meta_means_give_the_window_they_gave_before(
    client: RedisClient, memory_key: str, planted: dict[str, str]
) -> None:
    mem = memory(client, memory_key, max_tokens=10**6)
    await mem.append_many([chat(n, tokens=10) for n in range(5)])
    before = await mem.context_layers(1_000)
    await client.hset(mem.keys.meta, mapping=planted)
    after = await mem.context_layers(1_000)
    assert [m.id for m in after.window] == [m.id for m in before.window]
