"""MemoryInstance behaviour on every real engine: standalone Valkey, Redis 7, Valkey cluster."""

from __future__ import annotations

import json
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from redis.asyncio import RedisCluster

from compozy_memory import (
    ConflictError,
    CorruptDataError,
    InvalidMessageError,
    MemoryInstance,
    MemoryPolicy,
    Message,
    MessageTooLargeError,
    MissingTokenCountError,
    ReadOnlyMemoryError,
    SuppliedCounter,
)
from compozy_memory._io.translate import RedisClient
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.limits import DEDUPE_CHUNK, MAX_MESSAGE_TOKENS, ttl_slack
from compozy_memory._wire.scripts import ScriptArg
from compozy_memory.embedded import EmbeddedCluster
from integration import memories
from integration.memories import COUNTER
from integration.raw import run_raw

PROJECT = "itest"
# Memories here count with the library's default counter unless a test says otherwise.
memory = partial(memories.memory, project=PROJECT, counter=None)


async def state(client: RedisClient, keys: InstanceKeys) -> dict[str, object]:
    """Everything stored under an instance: contents, and the TTL of every part as a class
    (-2 missing, -1 none, else whether it is over a minute) so ticking clocks compare equal."""
    out: dict[str, object] = {}
    for name in keys.data:
        kind = _text(await client.type(name))
        if kind == "list":
            out[name] = await client.lrange(name, 0, -1)
        elif kind == "hash":
            out[name] = await client.hgetall(name)
        elif kind == "zset":
            out[name] = await client.zrange(name, 0, -1, withscores=True)
        pttl = await client.pttl(name)
        out[f"{name}:ttl"] = pttl if pttl < 0 else ("over 60s" if pttl > 60_000 else "short")
    return out


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def envelope_token_sum(client: RedisClient, keys: InstanceKeys) -> int:
    return sum(json.loads(e)["tokens"] for e in await client.lrange(keys.msgs, 0, -1))


async def test_append_assigns_ids_counts_and_keeps_totals_exact(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key)
    first = await mem.append({"role": "system", "content": "You are terse.", "priority": 0})
    batch = await mem.append_many(
        [
            Message(role="user", content="What is 2 + 2?"),
            Message(role="assistant", content="4", tokens=7),
        ]
    )
    assert (first.first_id, first.last_id) == (1, 1)
    assert list(batch.ids) == [2, 3]
    messages = await mem.read()
    assert [m.id for m in messages] == [1, 2, 3]
    assert [m.role for m in messages] == ["system", "user", "assistant"]
    assert messages[2].tokens == 7
    assert all(m.ts is not None and m.ts > 1_700_000_000_000 for m in messages)
    assert batch.total_tokens == sum(m.tokens or 0 for m in messages)
    assert await mem.token_count() == await envelope_token_sum(client, mem.keys)
    assert await mem.len() == 3
    health = await mem.health()
    assert health.priority_counts == {0: 1, 2: 2}
    assert sum(health.priority_tokens.values()) == health.token_count == batch.total_tokens


async def test_messages_round_trip_every_shape(client: RedisClient, memory_key: str) -> None:
    mem = memory(client, memory_key, counter=COUNTER)
    sent = [
        Message(role="user", content="naïve café — 東京 🚀", metadata={"lang": "mixed"}),
        Message(
            role="assistant",
            content=[
                {"type": "text", "text": "Looking it up."},
                {"type": "tool_use", "id": "tu_1", "name": "search", "input": {"q": "x"}},
            ],
        ),
        Message(
            role="user",
            content=[{"type": "tool_result", "tool_use_id": "tu_1", "content": "found"}],
        ),
        Message(
            role="assistant",
            content="",
            tool_calls=[
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "sql", "arguments": '{"q": 1}'},
                }
            ],
        ),
        Message(role="tool", tool_call_id="call_9", content="[]", type="tool_output"),
    ]
    await mem.append_many(sent)
    got = await mem.read()
    for original, stored in zip(sent, got, strict=True):
        assert stored.model_dump(exclude={"id", "ts", "tokens", "priority"}) == original.model_dump(
            exclude={"id", "ts", "tokens", "priority"}
        )
    assert got[1].tool_use_ids == ("tu_1",)
    assert got[2].tool_result_ids == ("tu_1",)
    assert got[4].content_type == "tool_output"


async def test_works_with_decode_responses(engine: Any, memory_key: str) -> None:
    client = engine.client(decode_responses=True)
    try:
        mem = memory(client, memory_key)
        await mem.append({"role": "user", "content": "hello"})
        assert [m.content for m in await mem.read()] == ["hello"]
        assert (await mem.health()).message_count == 1
    finally:
        await client.aclose()


async def test_read_ranges(client: RedisClient, memory_key: str) -> None:
    mem = memory(client, memory_key, counter=COUNTER)
    await mem.append_many({"role": "user", "content": f"m{i}"} for i in range(10))
    assert [m.content for m in await mem.read(2, 4)] == ["m2", "m3", "m4"]
    assert [m.content for m in await mem.read(-2)] == ["m8", "m9"]
    assert await memory(client, memory_key + "-empty").read() == []


async def test_read_window_returns_the_newest_messages_that_fit(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key)
    await mem.append_many(
        {"role": "user", "content": f"m{i}", "tokens": 10 + i} for i in range(100)
    )
    assert await mem.read_window(100) == []  # the newest message alone (109) does not fit
    window = await mem.read_window(300)
    assert [m.content for m in window] == ["m98", "m99"]  # 108 + 109; adding 107 would pass 300
    assert sum(m.tokens or 0 for m in window) == 217
    window = await mem.read_window(10_000, max_messages=5)
    assert [m.id for m in window] == [96, 97, 98, 99, 100]
    everything = await mem.read_window(1_000_000)
    assert len(everything) == 100


async def test_read_window_never_starts_with_an_orphaned_tool_result(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key)
    await mem.append_many(
        [
            {"role": "user", "content": "weather?", "tokens": 5},
            {
                "role": "assistant",
                "content": "",
                "tokens": 50,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny", "tokens": 5},
            {"role": "assistant", "content": "It is sunny.", "tokens": 5},
        ]
    )
    window = await mem.read_window(20)  # fits the tool result but not its call
    assert [m.content for m in window] == ["It is sunny."]
    window = await mem.read_window(60)
    assert [m.role for m in window] == ["assistant", "tool", "assistant"]


async def test_trim_archives_and_never_removes_priority_zero(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key, policy=MemoryPolicy(ttl=timedelta(minutes=5)))
    await mem.append({"role": "system", "content": "rules", "tokens": 20, "priority": 0})
    await mem.append_many(
        {"role": "user", "content": f"m{i}", "tokens": 10, "priority": 1 + i % 2} for i in range(10)
    )
    result = await mem.trim(keep_messages=4)
    assert (result.removed_count, result.removed_tokens) == (7, 70)
    assert [m.content for m in await mem.read()] == ["rules", "m7", "m8", "m9"]
    result = await mem.trim(max_tokens=35)
    assert [m.content for m in await mem.read()] == ["rules", "m9"]
    assert result.total_tokens == 30 == await envelope_token_sum(client, mem.keys)
    result = await mem.trim(max_tokens=0)
    assert [m.content for m in await mem.read()] == ["rules"]
    assert result.total_tokens == 20
    health = await mem.health()
    assert health.archive_length == health.archived == health.trimmed == 10
    assert health.priority_counts == {0: 1}
    archived = [json.loads(e)["content"] for e in await client.lrange(mem.keys.archive, 0, -1)]
    assert archived == [f"m{i}" for i in range(10)]
    for key in (mem.keys.msgs, mem.keys.meta, mem.keys.archive):
        assert 0 < await client.pttl(key) <= 300_000 + ttl_slack(300_000)


async def test_archive_is_capped(client: RedisClient, memory_key: str) -> None:
    mem = memory(client, memory_key, policy=MemoryPolicy(archive_max=3))
    await mem.append_many({"role": "user", "content": f"m{i}", "tokens": 1} for i in range(10))
    await mem.trim(keep_messages=0)
    archived = [json.loads(e)["content"] for e in await client.lrange(mem.keys.archive, 0, -1)]
    assert archived == ["m7", "m8", "m9"]
    assert (await mem.health()).archived == 10


async def test_replace_archives_the_old_and_honours_if_last_id(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key)
    await mem.append_many({"role": "user", "content": f"m{i}", "tokens": 3} for i in range(4))
    result = await mem.replace(
        [{"role": "system", "content": "summary of m0-m3", "tokens": 5}], if_last_id=4
    )
    assert (result.first_id, result.last_id, result.total_tokens, result.total_count) == (
        5,
        5,
        5,
        1,
    )
    await mem.indexer.wait_idle()
    before = await state(client, mem.keys)
    with pytest.raises(ConflictError, match="expected last_id 4, found 5"):
        await mem.replace([{"role": "user", "content": "stale", "tokens": 1}], if_last_id=4)
    assert await state(client, mem.keys) == before
    assert (await mem.health()).priority_tokens == {2: 5}
    emptied = await mem.replace([])
    assert (emptied.total_tokens, emptied.total_count) == (0, 0)
    assert (await mem.health()).archived == 5


async def test_clear_keeps_ids_monotonic(client: RedisClient, memory_key: str) -> None:
    mem = memory(client, memory_key)
    await mem.append_many({"role": "user", "content": "x", "tokens": 1} for _ in range(3))
    await mem.trim(keep_messages=1)
    assert await mem.clear() == 1
    assert await mem.read() == []
    assert await client.exists(mem.keys.archive) == 0
    again = await mem.append({"role": "user", "content": "y", "tokens": 1})
    assert again.first_id == 4
    assert (again.total_tokens, again.total_count) == (1, 1)


async def test_every_key_carries_the_ttl(client: RedisClient, memory_key: str) -> None:
    mem = memory(client, memory_key, policy=MemoryPolicy(ttl=timedelta(seconds=90)))
    await mem.append_many({"role": "user", "content": "x", "tokens": 1} for _ in range(3))
    await mem.trim(keep_messages=1)
    await mem.append({"role": "user", "content": "z", "tokens": 1})
    await mem.indexer.wait_idle()  # the index is written off the write path
    # The trim archived (and indexed) two messages: six keys exist.
    parts = (
        mem.keys.msgs,
        mem.keys.meta,
        mem.keys.archive,
        mem.keys.dedupe,
        mem.keys.ixseg,
        mem.keys.ixdocs,
    )
    # One deadline for every key, between the TTL and the TTL and its slack away.
    assert len({await client.pexpiretime(key) for key in parts}) == 1
    for key in parts:
        assert 85_000 < await client.pttl(key) <= 90_000 + ttl_slack(90_000), key
    assert await mem.set_ttl(timedelta(hours=1)) == 6
    await mem.append({"role": "user", "content": "w", "tokens": 1})
    assert len({await client.pexpiretime(key) for key in parts}) == 1
    for key in parts:
        assert 3_590_000 < await client.pttl(key) <= 3_600_000 + ttl_slack(3_600_000), key
    assert await mem.set_ttl(None) == 6
    for key in parts:
        assert await client.pttl(key) == -1
    assert (await mem.health()).ttl_ms is None


BAD_INPUTS: list[tuple[str, Any, type[Exception]]] = [
    ("lone surrogate", {"role": "user", "content": "ok \ud800 no"}, InvalidMessageError),
    (
        "lone surrogate in metadata",
        {"role": "user", "content": "x", "metadata": {"k": "\udfff"}},
        InvalidMessageError,
    ),
    ("empty role", {"role": "", "content": "x"}, InvalidMessageError),
    ("unknown role", {"role": "wizard", "content": "x"}, InvalidMessageError),
    ("content of wrong type", {"role": "user", "content": 42}, InvalidMessageError),
    ("block without type", {"role": "user", "content": [{"text": "x"}]}, InvalidMessageError),
    ("negative tokens", {"role": "user", "content": "x", "tokens": -1}, InvalidMessageError),
    ("tokens as text", {"role": "user", "content": "x", "tokens": "many"}, InvalidMessageError),
    (
        "priority out of range",
        {"role": "user", "content": "x", "priority": 100},
        InvalidMessageError,
    ),
    ("unknown field", {"role": "user", "content": "x", "colour": "red"}, InvalidMessageError),
    ("tool message naming no call", {"role": "tool", "content": "x"}, InvalidMessageError),
    ("not a message", "just a string", InvalidMessageError),
    ("over max tokens", {"role": "user", "content": "x", "tokens": 101}, MessageTooLargeError),
]


@pytest.mark.parametrize(("case", "bad", "error"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
async def test_bad_input_is_a_typed_error_and_changes_nothing(
    client: RedisClient, memory_key: str, case: str, bad: Any, error: type[Exception]
) -> None:
    mem = memory(client, memory_key, policy=MemoryPolicy(max_tokens=100, ttl=timedelta(hours=1)))
    await mem.append({"role": "user", "content": "before", "tokens": 5})
    await mem.indexer.wait_idle()  # the background indexer's write is done before the state
    for key in mem.keys.data:  # any write would set the policy's hour again
        await client.pexpire(key, 30_000)
    before = await state(client, mem.keys)
    good = {"role": "user", "content": "fine", "tokens": 1}
    with pytest.raises(error) as info:
        await mem.append_many([good, bad])  # the good one must not be stored either
    assert str(info.value).endswith(f"(memory {mem.key})")  # errors say which memory
    with pytest.raises(error):
        await mem.replace([bad])
    assert await state(client, mem.keys) == before


async def test_scripts_validate_everything_before_their_first_write(
    client: RedisClient, memory_key: str
) -> None:
    """Calling the scripts directly, past the Python checks: a bad later argument writes nothing."""
    keys = InstanceKeys.build(PROJECT, memory_key)
    # No background indexing: its steps would change the state between the two reads.
    mem = memory(client, memory_key, background_index=False)
    await mem.append({"role": "user", "content": "before", "tokens": 5})
    await mem.indexer.wait_idle()
    before = await state(client, keys)
    # A body goes without its opening '{' (the script's envelope puts it back).
    good: list[ScriptArg] = [3, 2, '"role":"user","content":"ok"}']
    ok: dict[str, ScriptArg] = {"ttl_ms": 0, "max_tokens": 0, "dedupe_key": "", "n": 2}
    cases: list[tuple[dict[str, ScriptArg], list[ScriptArg]]] = [
        (ok, [*good, "x", 2, '"role":"user"}']),  # tokens not a number
        (ok, [*good, 3, 100, '"role":"user"}']),  # priority out of range
        (ok, [*good, 3, 2, "not json"]),  # body not an object
        (ok, [*good, 3, 2, "}"]),  # empty object
        (ok, [*good, 3, 2, '{"role":"user"}']),  # the '{' sent too
        (ok, good),  # fewer triples than n
        ({**ok, "max_tokens": 2}, [*good, 3, 2, '"role":"user"}']),  # over max_tokens
        ({**ok, "ttl_ms": -5, "n": 1}, good),  # negative ttl
        ({**ok, "dedupe_key": "k" * 257, "n": 1}, good),  # dedupe key too long
        ({**ok, "n": 1}, [10**300, 2, '"role":"user"}']),  # a count past any bound
        ({**ok, "n": 1}, [2**63, 2, '"role":"user"}']),
        # Counts and priorities go into the envelope as sent: decimal digits alone.
        ({**ok, "n": 1}, ["1e2", 2, '"role":"user"}']),
        ({**ok, "n": 1}, ["03", 2, '"role":"user"}']),
        ({**ok, "n": 1}, ["3.0", 2, '"role":"user"}']),
        ({**ok, "n": 1}, [" 3", 2, '"role":"user"}']),
        ({**ok, "n": 1}, [3, "02", '"role":"user"}']),
        ({**ok, "n": 1}, [3, "-1", '"role":"user"}']),
        ({**ok, "n": 1}, [3, "", '"role":"user"}']),
    ]
    for values, rest in cases:
        with pytest.raises((InvalidMessageError, MessageTooLargeError)):
            await run_raw(client, "append", keys, values, rest)
    with pytest.raises(ConflictError):
        await run_raw(
            client,
            "replace",
            keys,
            {
                "ttl_ms": 0,
                "max_tokens": 0,
                "archive_max": 0,
                "if_last_id": 99,
                "if_incarnation": "",
                "if_version": "",
                "dedupe_key": "",
                "n": 1,
            },
            good,
        )
    with pytest.raises(ConflictError):
        await run_raw(
            client,
            "replace",
            keys,
            {
                "ttl_ms": 0,
                "max_tokens": 0,
                "archive_max": 0,
                "if_last_id": -1,
                "if_incarnation": "",
                "if_version": "1:not-this-write",
                "dedupe_key": "",
                "n": 1,
            },
            good,
        )
    with pytest.raises(InvalidMessageError):
        await run_raw(
            client,
            "trim",
            keys,
            {
                "ttl_ms": 0,
                "archive_max": 0,
                "keep_messages": "many",
                "max_tokens": -1,
                "everything": 0,
            },
        )
    assert await state(client, keys) == before


async def test_read_only_handle_refuses_every_write_before_redis(
    client: RedisClient, memory_key: str
) -> None:
    writer = memory(client, memory_key)
    await writer.append({"role": "user", "content": "shared", "tokens": 2})
    reader = memory(client, memory_key, read_only=True)
    await writer.indexer.wait_idle()
    before = await state(client, writer.keys)
    for call in (
        reader.append({"role": "user", "content": "x"}),
        reader.append_many([{"role": "user", "content": "x"}]),
        reader.replace([]),
        reader.trim(keep_messages=0),
        reader.clear(),
        reader.set_ttl(10),
    ):
        with pytest.raises(ReadOnlyMemoryError):
            await call
    assert await state(client, writer.keys) == before
    assert [m.content for m in await reader.read()] == ["shared"]


async def test_counters_supplied_and_exact(client: RedisClient, memory_key: str) -> None:
    supplied = memory(client, memory_key, counter=SuppliedCounter())
    with pytest.raises(MissingTokenCountError):
        await supplied.append({"role": "user", "content": "no count"})
    assert (
        await supplied.append({"role": "user", "content": "x", "tokens": 12})
    ).total_tokens == 12
    exact = memory(client, memory_key + "-exact")
    result = await exact.append({"role": "user", "content": "hello world"})
    assert result.total_tokens == 2 + 3  # cl100k: "hello", " world"; 3 framing tokens


async def test_counts_and_priorities_at_every_width_are_stored_as_sent(
    client: RedisClient, memory_key: str
) -> None:
    """The script reads up to four digits from their bytes and longer counts by conversion:
    each width is stored exactly, the clock's stamp included (every digit of it kept)."""
    mem = memory(client, memory_key)
    counts = [0, 7, 10, 99, 100, 999, 1000, 9999, 10_000, 123_456, MAX_MESSAGE_TOKENS]
    priorities = [1, 9, 10, 99, 2, 3, 50, 11, 90, 2, 2]
    result = await mem.append_many(
        [
            {"role": "user", "content": f"m{i}", "tokens": tokens, "priority": priority}
            for i, (tokens, priority) in enumerate(zip(counts, priorities, strict=True))
        ]
    )
    assert result.total_tokens == sum(counts)
    for tokens in (1, 45, 3_000, 77_777):  # one at a time, as most appends are
        await mem.append({"role": "user", "content": "x", "tokens": tokens})
    stored = [json.loads(e) for e in await client.lrange(mem.keys.msgs, 0, -1)]
    assert [e["tokens"] for e in stored] == [*counts, 1, 45, 3_000, 77_777]
    assert [e["priority"] for e in stored] == [*priorities, 2, 2, 2, 2]
    assert [e["id"] for e in stored] == list(range(1, len(stored) + 1))
    now = await client.time()
    for e in stored:
        assert 0 <= now[0] * 1000 + now[1] // 1000 - e["ts"] < 60_000
    health = await mem.health()
    assert health.token_count == sum(counts) + 1 + 45 + 3_000 + 77_777
    assert health.priority_counts == {1: 1, 2: 7, 3: 1, 9: 1, 10: 1, 11: 1, 50: 1, 90: 1, 99: 1}


class _WholeFloats:
    """A counter that returns its counts as floats (7.0): main's script read them as numbers."""

    def count(self, text: str) -> int:
        return float(len(text))  # type: ignore[return-value]


class _Halves:
    def count(self, text: str) -> int:
        return len(text) + 0.5  # type: ignore[return-value]


async def test_a_counter_returning_whole_floats_still_counts(
    client: RedisClient, memory_key: str
) -> None:
    """The script takes counts in decimal digits alone: a counter's 7.0 goes as 7, not as
    '7.0' (which the script refuses), and a count that is not whole is refused before
    anything is sent, naming the counter."""
    mem = memory(client, memory_key, counter=_WholeFloats())
    result = await mem.append({"role": "user", "content": "hello"})
    assert result.total_tokens == 5 + 3  # "hello" and the framing tokens
    assert [m.tokens for m in await mem.read()] == [8]
    halves = memory(client, memory_key, counter=_Halves())
    with pytest.raises(InvalidMessageError, match=r"token counter returned 5\.5"):
        await halves.append({"role": "user", "content": "hello"})
    assert await mem.len() == 1


async def test_an_append_reports_summary_tokens_as_a_number_whatever_meta_holds(
    client: RedisClient, memory_key: str
) -> None:
    """The append keeps meta's totals as text where it can, but its reply's summary tokens
    are a number: text a tenant planted in the field reads as 0 (the write is stored by then,
    so the call may not fail on it), as every release did."""
    mem = memory(client, memory_key)
    await mem.append({"role": "user", "content": "a", "tokens": 3})
    await client.hset(mem.keys.meta, "summary_tokens", "12")
    assert (await mem.append({"role": "user", "content": "b", "tokens": 4})).summary_tokens == 12
    await client.hset(mem.keys.meta, "summary_tokens", "junk")
    result = await mem.append({"role": "user", "content": "c", "tokens": 5})
    assert (result.summary_tokens, result.total_tokens, result.last_id) == (0, 12, 3)


async def test_all_keys_of_an_instance_share_one_cluster_slot(
    valkey_cluster: EmbeddedCluster, memory_key: str
) -> None:
    client = RedisCluster.from_url(valkey_cluster.url)
    try:
        keys = InstanceKeys.build(PROJECT, memory_key)
        slots = {await client.cluster_keyslot(k) for k in (*keys.data, keys.lock)}
        assert len(slots) == 1
        mem = MemoryInstance.open(client, project=PROJECT, key=memory_key)
        await mem.append({"role": "user", "content": "x", "tokens": 1})
        await mem.trim(keep_messages=0)  # a script touching msgs, meta and archive at once
        assert (await mem.health()).archived == 1
    finally:
        await client.aclose()


async def test_a_handles_own_keys_are_remembered_compactly_within_the_window(
    client: RedisClient, memory_key: str
) -> None:
    # A call with no dedupe_key gets '~<process>:<n>'. One process's keys share one record
    # (meta 'w:<process>', its newest DEDUPE_CHUNK writes) and one member of the dedupe set;
    # older writes are sealed a chunk at a time (a field and a member a chunk), not one member
    # a write.
    mem = memory(client, memory_key, counter=COUNTER)
    token = "~testprocess:7"
    first = await mem.append({"role": "user", "content": "a"}, dedupe_key=token)
    for i in range(300):
        await mem.append({"role": "user", "content": f"m{i}"}, dedupe_key=f"~testprocess:{8 + i}")
    await mem.append({"role": "user", "content": "mine"}, dedupe_key="event-1")
    for i in range(20):
        await mem.append({"role": "user", "content": f"o{i}"})  # this process's own keys
    members = {
        m.decode() for m in await client.zrange(mem.keys.dedupe, 0, -1) if isinstance(m, bytes)
    }
    chunks = {m for m in members if m.startswith("~testprocess.")}
    assert chunks == {f"~testprocess.{s}" for s in range(301 // DEDUPE_CHUNK)}
    assert {"~testprocess", "event-1"} <= members
    assert len(members - chunks) == 3  # two processes (this one too) and one caller's key
    again = await mem.append({"role": "user", "content": "a"}, dedupe_key=token)
    assert again.duplicate
    assert again.ids == first.ids
    other = await mem.append({"role": "user", "content": "x"}, dedupe_key="~other:7")
    assert not other.duplicate
    health = await mem.health()  # bookkeeping stays out of the totals a caller reads
    assert health.message_count == 323
    # The window holds for these keys as for a caller's: forgotten 1,000 messages on.
    filler = [{"role": "user", "content": "f", "tokens": 1} for _ in range(500)]
    await mem.append_many(filler)
    assert (await mem.append({"role": "user", "content": "a"}, dedupe_key=token)).duplicate
    await mem.append_many(filler)
    await mem.append_many(filler)
    late = await mem.append({"role": "user", "content": "a"}, dedupe_key=token)
    assert not late.duplicate
    # A process that wrote nothing for the window is forgotten with its record.
    assert await client.hget(mem.keys.meta, "w:other") is None
    assert await client.zscore(mem.keys.dedupe, "~other") is None


async def test_a_dedupe_key_stores_once_within_its_window(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key, counter=COUNTER)
    first = await mem.append({"role": "user", "content": "once"}, dedupe_key="event-1")
    again = await mem.append({"role": "user", "content": "once"}, dedupe_key="event-1")
    assert (first.duplicate, again.duplicate) == (False, True)
    assert (again.first_id, again.last_id) == (first.first_id, first.last_id)
    batch = [{"role": "user", "content": f"b{i}"} for i in range(3)]
    stored = await mem.append_many(batch, dedupe_key="event-2")
    repeat = await mem.append_many(batch, dedupe_key="event-2")
    assert repeat.duplicate
    assert repeat.ids == stored.ids
    assert await mem.len() == 4
    # Remembered until 1,000 more messages have come; then the key is forgotten.
    filler = [{"role": "user", "content": "f", "tokens": 1} for _ in range(500)]
    await mem.append_many(filler)
    assert (await mem.append({"role": "user", "content": "once"}, dedupe_key="event-1")).duplicate
    await mem.append_many(filler)
    await mem.append_many(filler)
    assert await client.zscore(mem.keys.dedupe, "event-1") is None
    late = await mem.append({"role": "user", "content": "once"}, dedupe_key="event-1")
    assert not late.duplicate
    # replace takes one too; clear forgets every key.
    swapped = await mem.replace([{"role": "user", "content": "new"}], dedupe_key="swap-1")
    assert (await mem.replace([], dedupe_key="swap-1")).duplicate
    assert [m.content for m in await mem.read()] == ["new"]
    assert swapped.first_id == swapped.last_id
    await mem.clear()
    assert await client.exists(mem.keys.dedupe) == 0


@pytest.mark.parametrize("field", ["last_id", "count", "tokens"])
@pytest.mark.parametrize("planted", ["1e+20", "nan", "inf", "-5", "1000000000000000"])
async def test_an_append_refuses_totals_no_memory_reaches_and_writes_nothing(
    client: RedisClient, memory_key: str, field: str, planted: str
) -> None:
    """A total a tenant planted as an exponent, nan, inf or a negative would be written back
    (and replied) as text that is no count: the append refuses it before writing."""
    mem = memory(client, memory_key)
    await mem.append({"role": "user", "content": "a", "tokens": 3})
    await client.hset(mem.keys.meta, field, planted)
    before = (await client.hgetall(mem.keys.meta), await client.lrange(mem.keys.msgs, 0, -1))
    with pytest.raises(CorruptDataError, match="not a count a memory reaches"):
        await mem.append({"role": "user", "content": "b", "tokens": 4})
    after = (await client.hgetall(mem.keys.meta), await client.lrange(mem.keys.msgs, 0, -1))
    assert after == before
