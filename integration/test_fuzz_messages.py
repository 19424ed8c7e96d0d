"""Fuzzing appends against a real server: any input is stored or refused with a typed error,
and the instance is consistent after every example."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from compozy_memory import (
    CompozyMemoryError,
    InvalidMessageError,
    MemoryInstance,
    MemoryPolicy,
)
from compozy_memory._io.translate import RedisClient
from compozy_memory._model.messages import EncodedMessage
from compozy_memory.embedded import EmbeddedServer
from integration.engines import EngineSpec
from integration.faults import consistency_problems
from integration.memories import COUNTER, memory, turn

# Run by scripts/reliability: its counts become rows of RELIABILITY.md.
pytestmark = pytest.mark.faults

# Every code point, surrogates included, and the strings that break naive JSON or Lua code.
ANY_TEXT = st.one_of(
    st.text(st.characters(), max_size=40),
    st.sampled_from(
        ["", "\x00", "\ud800", "\udfff x", '"}', '{"id":1}', "\\", "%d%s", "\u2028", "🙂" * 50]
    ),
    st.text(st.characters(codec="utf-8"), min_size=3_000, max_size=5_000),
)
FIELD_VALUES = st.one_of(
    ANY_TEXT,
    st.none(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.binary(max_size=20),
    st.lists(st.one_of(ANY_TEXT, st.dictionaries(ANY_TEXT, ANY_TEXT, max_size=3)), max_size=3),
)
MESSAGES = st.one_of(
    st.fixed_dictionaries(
        {"role": st.one_of(st.sampled_from(["user", "assistant", "system", "tool"]), ANY_TEXT)},
        optional={
            "content": FIELD_VALUES,
            "tokens": st.one_of(st.integers(-5, 3_000), FIELD_VALUES),
            "priority": st.one_of(st.integers(-2, 120), FIELD_VALUES),
            "content_type": FIELD_VALUES,
            "tool_call_id": FIELD_VALUES,
            "metadata": FIELD_VALUES,
            "id": FIELD_VALUES,
            "unknown_field": FIELD_VALUES,
        },
    ),
    FIELD_VALUES,
)
# Valid messages with unusual text, so that stores are exercised as much as refusals.
VALID = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "system"]),
        "content": st.text(st.characters(codec="utf-8"), max_size=300),
    },
    optional={"priority": st.integers(0, 99), "tokens": st.integers(1, 2_000)},
)
BATCHES = st.one_of(
    st.lists(VALID, min_size=1, max_size=4),
    st.lists(st.one_of(VALID, MESSAGES), min_size=0, max_size=4),
)
KEYS = st.one_of(st.none(), st.none(), st.sampled_from(["k1", "k2"]), ANY_TEXT)


@pytest.mark.slow
def test_any_append_is_stored_or_refused_and_the_memory_stays_consistent(
    valkey_server: EmbeddedServer, record: Callable[..., None]
) -> None:
    memory_key = f"fuzz:{uuid.uuid4().hex}"
    outcomes = {"stored": 0, "refused": 0}

    @settings(
        max_examples=300,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(BATCHES, KEYS)
    def check(batch: list[Any], dedupe_key: str | None) -> None:
        asyncio.run(one_example(valkey_server.url, memory_key, batch, dedupe_key, outcomes))

    check()
    assert outcomes["stored"] > 20
    assert outcomes["refused"] > 20
    record(
        group="input",
        fault="fuzzed appends: any code point, lone surrogates, control characters, 5k-char "
        "text, bytes, wrong types, unknown fields, odd dedupe keys",
        engine="valkey",
        promise="stored, or refused whole with InvalidMessageError; the memory consistent "
        "after every example",
        operations=outcomes["stored"] + outcomes["refused"],
        acknowledged=outcomes["stored"],
        lost=0,
        duplicated=0,
        observed=f"{outcomes['stored']} stored, {outcomes['refused']} refused, 0 untyped "
        "errors, 0 inconsistencies",
    )


async def one_example(
    url: str, memory_key: str, batch: list[Any], dedupe_key: str | None, outcomes: dict[str, int]
) -> None:
    client = Redis.from_url(url)
    try:
        mem = MemoryInstance.open(
            client,
            project="fuzz",
            key=memory_key,
            counter=COUNTER,
            policy=MemoryPolicy(max_tokens=2_000),
        )
        before = await client.lrange(mem.keys.msgs, 0, -1), await client.hgetall(mem.keys.meta)
        try:
            result = await mem.append_many(batch, dedupe_key=dedupe_key)
        except InvalidMessageError:
            outcomes["refused"] += 1
            after = await client.lrange(mem.keys.msgs, 0, -1), await client.hgetall(mem.keys.meta)
            assert after == before
        except CompozyMemoryError as exc:  # any other typed error would be a finding
            raise AssertionError(f"unexpected {type(exc).__name__}: {exc}") from exc
        else:
            outcomes["stored"] += 1
            stored = await client.lrange(mem.keys.msgs, 0, -1)
            new = stored[len(before[0]) :]
            if result.duplicate:
                assert new == []
            else:
                assert len(new) == len(batch)
                for raw, envelope in zip(batch, new, strict=True):
                    if isinstance(raw, dict) and isinstance(raw.get("content"), str):
                        assert json.loads(envelope)["content"] == raw["content"]
        assert await consistency_problems(client, mem.keys) == []
    finally:
        await client.aclose()


@pytest.mark.parametrize("tokens", [2**63, 10**300, 2**53 + 1])
async def test_absurd_token_counts_are_refused_and_change_nothing(
    client: RedisClient, memory_key: str, tokens: int, engine: EngineSpec, record: Any
) -> None:
    mem = memory(client, memory_key)
    await mem.append(turn(1))
    with pytest.raises(InvalidMessageError):
        await mem.append({"role": "user", "content": "x", "tokens": tokens})
    # Past the Python checks, the script bounds them too.
    with pytest.raises(InvalidMessageError):
        await mem.gateway.append([EncodedMessage(tokens, 2, b'{"role":"user","content":"x"}')], "")
    health = await mem.health()
    assert health.token_count == 20
    assert len(await mem.read()) == 1
    assert len(await mem.context(1_000)) == 1
    record(
        group="adversarial",
        fault=f"token counts of {tokens:.3g} sent through the handle and to the script",
        engine=engine.name,
        promise="counts are bounded where they enter; totals stay exact",
        operations=2,
        acknowledged=0,
        lost=0,
        duplicated=0,
        observed="both refused (InvalidMessageError); the memory and its totals unchanged",
    )
