"""Layered context, archive search and the recall tools on every real engine."""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from compozy_memory import ContextOverflowError, Flusher, FlushSettings, MemoryInstance
from compozy_memory._flush.extractive import ExtractiveSummarizer
from compozy_memory._io.translate import RedisClient
from compozy_memory._metrics import FlushMetrics
from compozy_memory._model.policy import ContextPolicy
from integration.engines import EngineSpec
from integration.index_state import built_from_scratch, stored_index
from integration.memories import COUNTER, memory

SYSTEM = {"role": "system", "content": "You are the support agent of ACME.", "priority": 0}


def attach(mem: MemoryInstance, budget: int) -> Flusher:
    flusher = Flusher(
        mem.gateway,
        FlushSettings(max_tokens=budget, summary_tokens=budget // 5),
        ExtractiveSummarizer(COUNTER),
        COUNTER,
        metrics=FlushMetrics(CollectorRegistry()),
    )
    mem.attach_flusher(flusher)
    return flusher


def chat(n: int, *, tokens: int = 30) -> dict[str, Any]:
    speaker = ("user", "assistant")[n % 2]
    return {"role": speaker, "content": f"message {n} about topic{n % 7}", "tokens": tokens}


@pytest.mark.parametrize("with_flusher", [False, True])
async def test_the_system_prompt_leads_a_context_ten_times_over_budget(
    client: RedisClient, memory_key: str, with_flusher: bool
) -> None:
    mem = memory(client, memory_key, max_tokens=1_000)
    if with_flusher:
        attach(mem, 1_000)
    await mem.append({**SYSTEM, "tokens": 20})
    await mem.append_many([chat(n) for n in range(340)])  # ~10,200 tokens
    if with_flusher:
        assert mem.flusher is not None
        await mem.flusher.wait_idle()
    for budget in (1_000, 300, 20):
        context = await mem.context(budget)
        assert context[0].text == SYSTEM["content"]
        assert sum(m.tokens or 0 for m in context) <= budget
        assert [m.priority for m in context].count(0) == 1
    window = await mem.read_window(200)
    assert window[0].priority == 0
    with pytest.raises(ContextOverflowError):
        await mem.context(19)


@settings(
    max_examples=25,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    pinned=st.lists(st.integers(1, 60), max_size=3),
    live=st.lists(st.integers(1, 120), min_size=0, max_size=40),
    archived=st.integers(0, 30),
    recalled=st.integers(0, 5),
    budget=st.integers(0, 1_500),
    shares=st.tuples(st.floats(0, 0.5), st.floats(0, 0.5)),
    query=st.sampled_from([None, "topic3 message", "nothing matches zzz"]),
)
async def test_a_context_never_exceeds_its_budget_and_keeps_its_order(
    client: RedisClient,
    pinned: list[int],
    live: list[int],
    archived: int,
    recalled: int,
    budget: int,
    shares: tuple[float, float],
    query: str | None,
) -> None:
    from compozy_memory._model.policy import ContextPolicy

    key = f"prop:{uuid.uuid4().hex}"  # hypothesis seeds random: uuid4 reads os.urandom
    mem = memory(
        client,
        key,
        context=ContextPolicy(summary_share=shares[0], recall_share=shares[1]),
        max_tokens=2_000,
    )
    for tokens in pinned:
        await mem.append({**SYSTEM, "tokens": tokens})
    if archived:
        await mem.append_many([chat(n, tokens=25) for n in range(archived)])
        await mem.trim(keep_messages=len(pinned))
    if live:
        await mem.append_many([chat(100 + n, tokens=t) for n, t in enumerate(live)])
    if recalled and archived:
        await mem.recall_messages(range(len(pinned) + 1, len(pinned) + 1 + recalled))
    if sum(pinned) > budget:
        with pytest.raises(ContextOverflowError):
            await mem.context(budget, query=query)
        return
    layers = await mem.context_layers(budget, query=query)
    assert layers.tokens <= budget
    assert list(layers.pinned) == [m for m in await mem.read() if m.priority == 0]
    ids = [m.id for m in layers.messages]
    assert len(ids) == len(set(ids)), "a message shown twice"
    # The window is the newest live messages, contiguous, ending at the newest.
    live_ids = [m.id for m in await mem.read() if m.priority != 0]
    window = [m.id for m in layers.window]
    assert window == live_ids[len(live_ids) - len(window) :]
    await client.delete(*mem.keys.data)


@pytest.mark.parametrize(
    "sizes",
    [
        [500] * 150 + [5] * 100,  # the mean says few fit; many small ones do
        [5] * 150 + [500] * 10,  # the mean says many fit; two large ones do
        [40] * 300,
    ],
    ids=["large-then-small", "small-then-large", "even"],
)
async def test_the_window_takes_every_newest_message_that_fits_whatever_their_mean(
    client: RedisClient, memory_key: str, sizes: list[int]
) -> None:
    # The window is read in chunks sized from the live messages' mean: a mean far from the
    # newest messages' sizes reads more chunks, never a different window.
    mem = memory(client, memory_key, max_tokens=10**6)
    await mem.append({**SYSTEM, "tokens": 7})
    await mem.append_many([chat(n, tokens=t) for n, t in enumerate(sizes)])
    budget = 1_007
    layers = await mem.context_layers(budget)
    room, expected = budget - 7, 0
    for tokens in reversed(sizes):
        if tokens > room:
            break
        room -= tokens
        expected += 1
    live = [m.id for m in await mem.read() if m.priority != 0]
    assert [m.id for m in layers.window] == live[len(live) - expected :]
    assert layers.tokens == budget - room


async def test_a_flush_leaves_the_context_nearly_full(client: RedisClient, memory_key: str) -> None:
    mem = memory(client, memory_key, max_tokens=2_000)
    flusher = attach(mem, 2_000)
    await mem.append_many([chat(n, tokens=40) for n in range(150)])  # 6,000 tokens
    await flusher.wait_idle()
    await flusher.flush()
    layers = await mem.context_layers()
    assert layers.tokens >= 0.9 * 2_000
    assert layers.tokens <= 2_000
    assert layers.backfill, "the archive filled what the flush left"


async def test_search_finds_an_archived_fact_and_brings_its_neighbours(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key)
    turns = [chat(n) for n in range(60)]
    turns[20] = {"role": "user", "name": "Caroline", "content": "Where did you adopt Rex?"}
    turns[21] = {"role": "assistant", "content": "At the Oakwood shelter, in May."}
    await mem.append_many(turns)
    await mem.trim(keep_messages=5)
    hits = await mem.search("Where was Rex adopted?", limit=3)
    assert hits[0].message.text == "Where did you adopt Rex?"
    assert hits[0].after is not None
    assert "Oakwood" in hits[0].after.text
    # The answer has no word of the question: it ranks through its neighbour.
    assert any("Oakwood" in h.message.text for h in hits)
    only_users = await mem.search("Rex adopt Oakwood", roles=["assistant"])
    assert only_users
    assert all(h.message.role == "assistant" for h in only_users)
    assert await mem.search("Rex", since_id=100) == []
    assert await mem.search("the of and") == []  # stop words only


async def test_a_query_brings_the_answer_into_the_context(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key, max_tokens=400)
    turns = [chat(n) for n in range(200)]
    turns[30] = {
        "role": "user",
        "content": "My order number is 77123, the blue kettle.",
        "tokens": 15,
    }
    await mem.append_many(turns)
    await mem.trim(keep_messages=8)
    plain = await mem.context()
    assert not any("77123" in m.text for m in plain)
    asked = await mem.context(query="what was the order number for the kettle?")
    assert any("77123" in m.text for m in asked)
    assert sum(m.tokens or 0 for m in asked) <= 400


async def test_recalled_messages_join_the_context_until_cleared(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key, max_tokens=600)
    await mem.append_many([chat(n) for n in range(100)])
    await mem.trim(keep_messages=5)
    brought = await mem.recall_messages([3, 4, 999])
    assert [m.id for m in brought] == [3, 4]
    assert await mem.recall_messages([3]) == []  # already there
    layers = await mem.context_layers()
    assert [m.id for m in layers.recalled] == [3, 4]
    assert (await mem.health()).recalled == 2
    assert await mem.clear_recalled() == 2
    assert (await mem.context_layers()).recalled == ()


@pytest.mark.faults
async def test_a_count_limit_bounds_the_recall_layer_too(
    client: RedisClient, memory_key: str, engine: EngineSpec, record: Any
) -> None:
    """A memory limited by count only: recalling a hundred messages (the most one call takes)
    gives the recall layer its share of ``max_messages``, never a context past the limit."""
    mem = memory(client, memory_key, max_messages=20)
    await mem.append_many([chat(n) for n in range(300)])
    await mem.trim(keep_messages=30)
    recalled = await mem.recall_messages(range(1, 101))
    assert len(recalled) == 100
    layers = await mem.context_layers()
    shown = [*layers.recalled, *layers.backfill, *layers.window]
    assert len(shown) == 20
    assert len(layers.recalled) == int(20 * mem.policy.context.recall_share)
    newest = list(range(300 - len(layers.window) + 1, 301))
    assert [m.id for m in layers.window] == newest
    context = await mem.context()
    assert len(context) == 20
    record(
        group="adversarial-2",
        item=6,
        fault="one recall of 100 archived messages into a count-only memory "
        "(max_messages=20, no token budget), then context()",
        engine=engine.name,
        promise="the recall layer gets its share of max_messages; context() never returns "
        "more than max_messages",
        operations=2,  # the recall, the context
        acknowledged=2,
        lost=len(set(newest) - {m.id for m in layers.window}),
        duplicated=max(0, len(context) - 20),  # messages past the limit
        observed=f"{len(recalled)} recalled; context() returned {len(context)} messages: "
        f"{len(layers.recalled)} recalled, {len(layers.backfill)} backfill, "
        f"{len(layers.window)} newest",
    )


@pytest.mark.slow
async def test_the_index_equals_one_built_from_scratch_after_random_operations(
    client: RedisClient, memory_key: str
) -> None:
    rng = random.Random(7)
    mem = memory(client, memory_key, max_tokens=1_500, archive_max=120)
    mem.indexer.background = False  # the test decides when the indexer runs
    flusher = attach(mem, 1_500)
    n = 0
    for step in range(80):
        action = rng.choice(["append"] * 5 + ["flush", "trim", "replace", "clear", "index"])
        if action == "append":
            await mem.append_many([chat(n + i, tokens=rng.randint(5, 60)) for i in range(8)])
            n += 8
        elif action == "flush":
            await flusher.flush()
        elif action == "trim":
            await mem.trim(keep_messages=rng.randint(0, 10))
        elif action == "replace":
            await mem.replace([chat(n, tokens=20)])
            n += 1
        elif action == "index":
            await mem.indexer.catch_up(max_steps=1)
        elif step % 20 == 19:
            await mem.clear()
    await flusher.wait_idle()
    await mem.indexer.catch_up()
    expected = await built_from_scratch(client, mem.keys)
    stored = await stored_index(client, mem.keys)
    assert stored.postings == expected.postings
    assert stored.doc_freqs == expected.doc_freqs
    assert stored.docs == expected.docs
    assert stored.seqs == expected.seqs
    meta = await client.hmget(mem.keys.meta, "ix_docs", "ix_len", "archive_base")
    total = sum(length for _, length in expected.docs.values())
    assert (int(meta[0] or 0), int(meta[1] or 0)) == (len(expected.docs), total)
    assert int(meta[2] or 0) > 0, "the archive's cap dropped documents on the way"
    # Every indexed document is found where its record says.
    for doc in list(expected.docs)[:40]:
        (found,) = await mem.recall_messages([doc])
        assert found.id == doc
        await mem.clear_recalled()


async def test_the_memory_tools_answer_calls_in_both_wire_formats(
    client: RedisClient, memory_key: str
) -> None:
    from compozy_memory import MemoryTools, tool_definitions

    anthropic_tools = tool_definitions("anthropic")
    openai_tools = tool_definitions("openai")
    assert [t["name"] for t in anthropic_tools] == [
        "search_memory",
        "recall_memory",
        "clear_recalled",
        "load_result",
    ]
    assert all(t["type"] == "function" and "parameters" in t["function"] for t in openai_tools)
    mem = memory(client, memory_key, max_tokens=2_000)
    turns = [chat(n) for n in range(80)]
    turns[10] = {"role": "user", "content": "The warehouse code is ZETA-9.", "tokens": 10}
    await mem.append_many(turns)
    await mem.trim(keep_messages=5)
    tools = MemoryTools(mem)
    result = await tools.handle(
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "search_memory",
            "input": {"query": "warehouse code"},
        }
    )
    assert result["tool_use_id"] == "toolu_1"
    found = json.loads(result["content"])
    assert found[0]["message"]["text"] == "The warehouse code is ZETA-9."
    recall = await tools.handle(
        {
            "id": "call_1",
            "type": "function",
            "function": {
                "name": "recall_memory",
                "arguments": json.dumps({"ids": [found[0]["id"]]}),
            },
        }
    )
    assert recall["role"] == "tool"
    assert recall["tool_call_id"] == "call_1"
    assert any("ZETA-9" in m.text for m in (await mem.context_layers()).recalled)
    bad = json.loads(await tools.call("search_memory", {"limit": 3}))
    assert "error" in bad
    assert json.loads(await tools.call("clear_recalled", {}))["cleared"] == 1
    unknown = json.loads(await tools.call("delete_everything", {}))
    assert "unknown tool" in unknown["error"]


async def test_the_implicit_query_brings_back_what_the_newest_user_turn_asks(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key, max_tokens=600, context=ContextPolicy(implicit_query=True))
    await mem.append({"role": "user", "content": "My sister adopted a greyhound called Pixel."})
    await mem.append_many([chat(n) for n in range(60)])
    await mem.trim(keep_messages=5)
    await mem.append({"role": "user", "content": "What was the name of my sister's greyhound?"})
    texts = [m.text for m in (await mem.context_layers()).recalled]
    assert "My sister adopted a greyhound called Pixel." in texts
    plain = memory(client, memory_key, max_tokens=600)
    assert (await plain.context_layers()).recalled == ()


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
    for field, value in planted.items():
        await client.hset(mem.keys.meta, field, value)
    after = await mem.context_layers(1_000)
    assert [m.id for m in after.window] == [m.id for m in before.window]
