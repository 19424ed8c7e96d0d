"""Budgeted reads against history length, each contender's read and its bytes per message."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis

from benchmarks.report.common import MESSAGE_TOKENS, WINDOW_TOKENS, Settings, median, turn
from benchmarks.report.libs import Contender, langchain_history
from compozy_memory import CachedCounter, MemoryInstance, SuppliedCounter, TiktokenCounter
from compozy_memory._io.translate import RedisClient

# What the raw baseline reads: the newest messages that fit the window (all are ~300 tokens).
WINDOW_MESSAGES = WINDOW_TOKENS // MESSAGE_TOKENS
# The libraries keep no token counts: a budgeted read there is "read all, count, keep the
# newest that fit", counted with a cached tiktoken counter as an application would.
_COUNTER = CachedCounter(TiktokenCounter())


def newest_within(texts: list[str], budget: int) -> list[str]:
    kept: list[str] = []
    used = 0
    for text in reversed(texts):
        used += _COUNTER.count(text)
        if used > budget:
            break
        kept.append(text)
    kept.reverse()
    return kept


async def p50_ms(call: Callable[[], Awaitable[object]], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - began)
    return median(samples) * 1e3


async def _fill_compozy(client: RedisClient, size: int) -> MemoryInstance:
    memory = MemoryInstance.open(
        client, project="bench", key=f"read-{uuid.uuid4().hex}", counter=SuppliedCounter()
    )
    for start in range(0, size, 500):
        await memory.append_many(
            {**turn(0, i), "tokens": MESSAGE_TOKENS} for i in range(start, min(size, start + 500))
        )
    return memory


async def _fill_raw(client: RedisClient, size: int) -> str:
    key = f"bench:read:{uuid.uuid4().hex}"
    for start in range(0, size, 1000):
        await client.rpush(
            key,
            *(
                json.dumps(turn(0, i), separators=(",", ":"))
                for i in range(start, min(size, start + 1000))
            ),
        )
    return key


async def history_scaling(client: RedisClient, settings: Settings) -> dict[str, Any]:
    """p50 of ``read_window(8000)`` at each history length, and raw ``LRANGE`` of the same
    window, rounds alternating over the lengths."""
    memories = {size: await _fill_compozy(client, size) for size in settings.read_sizes}
    raws = {size: await _fill_raw(client, size) for size in settings.read_sizes}
    first = memories[settings.read_sizes[0]]
    window = len(await first.read_window(WINDOW_TOKENS))
    for size, memory in memories.items():
        got = len(await memory.read_window(WINDOW_TOKENS))
        if got != min(window, size):
            raise AssertionError(f"{size} messages: window of {got}, expected {window}")
    compozy: dict[int, list[float]] = {size: [] for size in settings.read_sizes}
    raw: dict[int, list[float]] = {size: [] for size in settings.read_sizes}
    for _ in range(settings.rounds):
        for size in settings.read_sizes:
            memory, key = memories[size], raws[size]
            compozy[size].append(
                await p50_ms(lambda m=memory: m.read_window(WINDOW_TOKENS), settings.reads)  # type: ignore[misc]
            )
            raw[size].append(
                await p50_ms(
                    lambda k=key: client.lrange(k, -window, -1),  # type: ignore[misc]
                    settings.reads,
                )
            )
    base = median(compozy[settings.read_sizes[0]])
    rows = []
    for size in settings.read_sizes:
        ours, theirs = median(compozy[size]), median(raw[size])
        rows.append(
            {
                "messages": size,
                "compozy_p50_ms": round(ours, 4),
                "raw_lrange_p50_ms": round(theirs, 4),
                "ratio_to_smallest": round(ours / base, 3),
                "ratio_to_raw": round(ours / theirs, 3),
            }
        )
    for memory in memories.values():
        await memory.clear()
    await client.delete(*raws.values())
    return {
        "budget_tokens": WINDOW_TOKENS,
        "window_messages": window,
        "reads_per_round": settings.reads,
        "rounds": settings.rounds,
        "rows": rows,
    }


# -- each contender holding N messages: bytes per message, and its budgeted read -----------


async def _fill(contender: Contender, client: RedisClient, url: str, run: str, n: int) -> None:
    if contender.open_sync is not None:
        append_sync = contender.open_sync(url, run, 0)

        def fill() -> None:
            for seq in range(n):
                append_sync(seq)

        await asyncio.to_thread(fill)
        return
    assert contender.open_async is not None
    append = contender.open_async(client, run, 0)
    for seq in range(n):
        await append(seq)


async def _memory_usage(client: Redis, run: str) -> tuple[int, int]:
    """(bytes, keys): ``MEMORY USAGE ... SAMPLES 0`` summed over every key naming ``run``."""
    total = keys = 0
    async for key in client.scan_iter(match=f"*{run}*", count=1000):
        total += int(await client.memory_usage(key, samples=0) or 0)
        keys += 1
    return total, keys


def _reader(contender: Contender, client: RedisClient, url: str, run: str) -> Any:
    """A budgeted read of conversation ``run``:0 as that contender's users would do it."""
    name = contender.name
    if name == "raw_rpush":
        key = f"bench:raw:{run}:0"
        return lambda: client.lrange(key, -WINDOW_MESSAGES, -1)
    if name.startswith("compozy"):
        memory = MemoryInstance.open(client, project="bench", key=f"{run}:0")
        return lambda: memory.read_window(WINDOW_TOKENS)
    if name == "llama_index":
        from llama_index.storage.chat_store.redis import RedisChatStore

        store = RedisChatStore(aredis_client=client, redis_client=object())

        async def llama() -> list[str]:
            messages = await store.aget_messages(f"bench:llama:{run}:0")
            return newest_within([str(m.content) for m in messages], WINDOW_TOKENS)

        return llama
    if name == "openai_agents":
        from agents.extensions.memory import RedisSession

        session = RedisSession(f"{run}:0", redis_client=client, key_prefix="bench:openai")

        async def openai() -> list[str]:
            items = await session.get_items()
            return newest_within([str(i.get("content", "")) for i in items], WINDOW_TOKENS)

        return openai
    if name == "langchain":
        history = langchain_history()(f"{run}:0", url=url, key_prefix="bench:langchain:")

        async def langchain() -> list[str]:
            # Newest first in the list: the library reverses it on read.
            return newest_within([str(m.content) for m in history.messages], WINDOW_TOKENS)

        return langchain
    return None  # the spec's design defines no budgeted read


async def footprint(
    contenders: list[Contender], client: RedisClient, url: str, settings: Settings
) -> dict[str, Any]:
    """Each contender's conversation of ``settings.bytes_messages`` messages: bytes per message
    (MEMORY USAGE) against the JSON payload, and the p50 of its budgeted read."""
    n = settings.bytes_messages
    payload = sum(
        len(json.dumps(turn(0, i), separators=(",", ":"), ensure_ascii=False).encode())
        for i in range(n)
    )
    runs = {c.name: uuid.uuid4().hex for c in contenders}
    for contender in contenders:
        await _fill(contender, client, url, runs[contender.name], n)
    rows: dict[str, Any] = {}
    readers = {c.name: _reader(c, client, url, runs[c.name]) for c in contenders}
    read_times: dict[str, list[float]] = {name: [] for name, r in readers.items() if r}
    for reader in readers.values():  # warm the token cache and the connections
        if reader is not None:
            await reader()
    for _ in range(settings.rounds):
        for name, reader in readers.items():
            if reader is not None:
                read_times[name].append(await p50_ms(reader, settings.reads))
    assert isinstance(client, Redis)
    base_name = contenders[0].name
    for contender in contenders:
        used, keys = await _memory_usage(client, runs[contender.name])
        if keys == 0:
            raise AssertionError(f"{contender.label}: no keys found for its conversation")
        rows[contender.name] = {
            "label": contender.label,
            "keys": keys,
            "bytes_per_message": round(used / n, 1),
            "ratio_to_json_payload": round(used / payload, 3),
            "read_p50_ms": (
                round(median(read_times[contender.name]), 4)
                if contender.name in read_times
                else None
            ),
        }
    base = rows[base_name]
    for row in rows.values():
        row["bytes_ratio_to_baseline"] = round(
            row["bytes_per_message"] / base["bytes_per_message"], 3
        )
        if row["read_p50_ms"] is not None:
            row["read_ratio_to_baseline"] = round(row["read_p50_ms"] / base["read_p50_ms"], 3)
    return {
        "messages": n,
        "json_payload_bytes_per_message": round(payload / n, 1),
        "budget_tokens": WINDOW_TOKENS,
        "baseline": base_name,
        "rows": rows,
    }
