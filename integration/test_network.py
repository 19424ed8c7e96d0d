"""Slow, stalled and broken networks between the client and a real server (FaultProxy)."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from compozy_memory import BackendTimeoutError, RetryPolicy, connect
from integration.engines import EngineSpec
from integration.faults import FaultProxy, Load, consistency_problems, tally
from integration.memories import memory

# Run by scripts/reliability: its counts become rows of RELIABILITY.md.
pytestmark = pytest.mark.faults

PATIENT = RetryPolicy(attempts=50, deadline=30.0, max_backoff=0.2)


@pytest.fixture
def proxy(standalone: EngineSpec) -> Iterator[FaultProxy]:
    port = int(standalone.url.rsplit(":", 1)[1].split("/")[0])
    with FaultProxy(port) as p:
        yield p


@pytest.fixture
async def direct(standalone: EngineSpec) -> AsyncIterator[Redis]:
    client = Redis.from_url(standalone.url)
    yield client
    await client.aclose()


def through(proxy: FaultProxy, **options: Any) -> Redis:
    client = connect(proxy.url, **options)
    assert isinstance(client, Redis)
    return client


def new_key() -> str:
    return f"n:{uuid.uuid4().hex}"


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "direct"])
async def test_a_lost_reply_is_not_applied_twice(
    proxy: FaultProxy,
    direct: Redis,
    standalone: EngineSpec,
    batching: bool,
    record: Callable[..., None],
) -> None:
    """The server runs the append, the reply never arrives, the call is retried: one copy."""
    client = through(proxy)
    mem = memory(client, new_key(), batching=batching, retry=PATIENT)
    mem.indexer.background = False  # the lost replies are the appends', not the indexer's
    # Load the script first, so the lost replies are results, not NOSCRIPT.
    warm = memory(client, new_key())
    warm.indexer.background = False
    await warm.append({"role": "user", "content": "warm-up"})
    rounds = 20
    results = []
    for i in range(rounds):
        proxy.lose_replies(1)
        results.append(await mem.append({"role": "user", "content": f"m{i}"}))
    await client.aclose()
    assert proxy.lost_replies == rounds
    stored = [m.content for m in await memory(direct, mem.keys.key).read()]
    assert stored == [f"m{i}" for i in range(rounds)]
    # Each retry found the key its first attempt stored: that attempt ran, so without the key
    # the retry would have stored a second copy. It reports the ids the first attempt got.
    assert [r.duplicate for r in results] == [True] * rounds
    assert [r.first_id for r in results] == list(range(1, rounds + 1))
    assert await consistency_problems(direct, mem.keys) == []
    t = await tally(direct, [mem.keys], rounds, {f"m{i}" for i in range(rounds)})
    record(
        fault=f"reply lost after the server ran the append ({'batched' if batching else 'direct'})",
        engine=standalone.name,
        promise="nothing lost, nothing duplicated",
        tally=t,
        observed=f"{proxy.lost_replies} replies dropped; every retry answered duplicate=True",
    )


@pytest.mark.slow
async def test_cut_connections_and_lost_replies_under_load(
    proxy: FaultProxy, direct: Redis, standalone: EngineSpec, record: Callable[..., None]
) -> None:
    """8 writers on 4 memories while every connection is reset every 10-50 ms and 10% of
    script replies are dropped: every acknowledged append is stored exactly once."""
    client = through(proxy, socket_timeout=2)
    mems = [memory(client, new_key(), retry=PATIENT) for _ in range(4)]
    load = Load(lambda w, s: mems[w % len(mems)], per_writer=250)

    async def saboteur(stop: asyncio.Event) -> None:
        rng = random.Random(5)
        while not stop.is_set():
            await asyncio.sleep(rng.uniform(0.01, 0.05))
            await asyncio.to_thread(proxy.cut)

    proxy.reply_loss = 0.1
    stop = asyncio.Event()
    chaos = asyncio.create_task(saboteur(stop))
    await asyncio.gather(*load.start(8))
    stop.set()
    await chaos
    await client.aclose()
    t = await tally(direct, [m.keys for m in mems], load.attempted, load.acknowledged)
    failed = load.failed
    for mem in mems:
        assert await consistency_problems(direct, mem.keys) == []
    assert proxy.cuts > 10
    assert proxy.lost_replies > 5
    assert (t.lost, t.duplicated, failed) == (0, 0, 0)
    record(
        fault="all connections reset every 10-50 ms and 10% of replies dropped, 8 writers",
        engine=standalone.name,
        promise="nothing lost, nothing duplicated",
        tally=t,
        observed=f"{proxy.cuts} resets, {proxy.lost_replies} replies dropped, "
        f"{failed} calls failed after retries",
    )


async def test_a_stalled_network_gives_a_typed_timeout_and_a_safe_retry(
    proxy: FaultProxy, direct: Redis, standalone: EngineSpec, record: Callable[..., None]
) -> None:
    """A hung link: the call fails within its bounds as BackendTimeoutError. The stalled bytes
    may still reach the server later; repeating with the same dedupe key stores one copy."""
    client = through(proxy, socket_timeout=0.3)
    bounded = RetryPolicy(attempts=3, deadline=1.0)
    mem = memory(client, new_key(), retry=bounded)
    await mem.append({"role": "user", "content": "before"})
    proxy.stall()
    started = time.monotonic()
    with pytest.raises(BackendTimeoutError) as info:
        await mem.append({"role": "user", "content": "during"}, dedupe_key="turn-2")
    waited = time.monotonic() - started
    assert mem.key in str(info.value)
    assert waited < 3.0  # deadline 1 s plus one socket timeout, with scheduling slack
    proxy.resume()  # the held request is delivered now, after the caller gave up
    retried = await mem.append({"role": "user", "content": "during"}, dedupe_key="turn-2")
    await asyncio.sleep(0.2)
    stored = [m.content for m in await memory(direct, mem.keys.key).read()]
    await client.aclose()
    assert stored == ["before", "during"]
    assert await consistency_problems(direct, mem.keys) == []
    record(
        fault="network stalled (no bytes either way), then resumed",
        engine=standalone.name,
        promise="typed timeout within the retry deadline; a retry with the same dedupe key "
        "stores once",
        operations=3,
        acknowledged=2,
        lost=0,
        duplicated=stored.count("during") - 1,
        observed=f"BackendTimeoutError after {waited * 1000:.0f} ms; the retry "
        f"{'found the late delivery (duplicate=True)' if retried.duplicate else 'stored it'}",
    )


@pytest.mark.slow
async def test_a_slow_network_changes_latency_only(
    proxy: FaultProxy, direct: Redis, standalone: EngineSpec, record: Callable[..., None]
) -> None:
    proxy.delay = 0.02
    client = through(proxy)
    mem = memory(client, new_key())
    acknowledged: set[str] = set()

    async def writer(w: int) -> None:
        for s in range(40):
            content = f"w{w}:s{s}"
            await mem.append({"role": "user", "content": content})
            acknowledged.add(content)
            window = await mem.read_window(10_000)
            assert content in {m.content for m in window}

    started = time.monotonic()
    await asyncio.gather(*(writer(w) for w in range(4)))
    elapsed = time.monotonic() - started
    await client.aclose()
    t = await tally(direct, [mem.keys], 160, acknowledged)
    assert (t.lost, t.duplicated) == (0, 0)
    assert await consistency_problems(direct, mem.keys) == []
    record(
        fault="20 ms added to every chunk each way, 4 writers reading their writes",
        engine=standalone.name,
        promise="nothing lost, nothing duplicated; each writer reads its own write",
        tally=t,
        observed=f"{elapsed:.1f} s for 320 calls",
    )


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "direct"])
async def test_a_cancelled_call_never_hands_its_reply_to_another_caller(
    proxy: FaultProxy,
    direct: Redis,
    standalone: EngineSpec,
    batching: bool,
    record: Callable[..., None],
) -> None:
    """Many callers share a client; calls are cancelled at random points in flight. Every
    reply that arrives belongs to the memory its caller asked about."""
    proxy.delay = 0.002
    client = through(proxy)
    mems = [memory(client, f"cancel:{uuid.uuid4().hex}:{i}", batching=batching) for i in range(24)]
    for i, mem in enumerate(mems):
        await mem.append({"role": "user", "content": f"owner {i}"})
    rng = random.Random(11)
    checked = cancelled = 0

    async def caller(i: int) -> None:
        nonlocal checked, cancelled
        for _ in range(25):
            try:
                window = await asyncio.wait_for(mems[i].read(), rng.uniform(0.0, 0.06))
            except TimeoutError:
                cancelled += 1
                continue
            assert {m.content for m in window} == {f"owner {i}"}, f"caller {i} got {window}"
            checked += 1

    await asyncio.gather(*(caller(i) for i in range(len(mems))))
    await client.aclose()
    assert cancelled > 20
    assert checked > 20
    record(
        fault="calls cancelled mid-flight on a shared client "
        f"({'batched' if batching else 'direct'})",
        engine=standalone.name,
        promise="no reply reaches the wrong caller",
        operations=checked + cancelled,
        acknowledged=checked,
        lost=0,
        duplicated=0,
        observed=f"{cancelled} cancelled, {checked} replies checked, 0 misdelivered",
    )
