"""Counting a tick's texts together, off the event loop (compozy_memory._io.counting)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from compozy_memory import CachedCounter, HeuristicCounter, TiktokenCounter
from compozy_memory._io.counting import INLINE_CHARS, count_texts
from compozy_memory.errors import MissingTokenCountError
from tests.counters import BatchWordCounter, WordCounter

BIG = "the quick brown fox jumps over the lazy dog " * (INLINE_CHARS // 40)


async def test_a_ticks_texts_are_counted_together_in_a_worker_thread() -> None:
    counter = WordCounter()
    texts = [[f"{BIG} caller {i}", f"name{i}"] for i in range(32)]
    results = await asyncio.gather(*(count_texts(counter, t) for t in texts))
    assert results == [[len(a.split()), 1] for a, _ in texts]
    assert len(counter.threads) == 64
    assert all(name.startswith("compozy-count") for name in counter.threads)


async def test_small_batches_and_unsafe_counters_count_on_the_loop() -> None:
    counter = WordCounter()
    assert await count_texts(counter, ["a b c"]) == [3]
    assert counter.threads == [threading.current_thread().name]

    unsafe = WordCounter(thread_safe=False)
    assert await count_texts(unsafe, [BIG]) == [len(BIG.split())]
    assert unsafe.threads == [threading.current_thread().name]
    assert await count_texts(HeuristicCounter(), [BIG]) == [HeuristicCounter().count(BIG)]


async def test_the_loop_runs_while_texts_are_counted() -> None:
    counter = WordCounter(delay=0.05)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    running = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    await count_texts(counter, [BIG, BIG])  # 100 ms of counting, in a thread
    running.cancel()
    assert ticks >= 20, f"the loop ticked {ticks} times in 100 ms of counting"


async def test_an_error_reaches_only_the_caller_whose_text_raised_it() -> None:
    counter = WordCounter()
    good, bad = await asyncio.gather(
        count_texts(counter, [BIG, "x y"]), count_texts(counter, [BIG + " refuse"])
    )
    assert good == [len(BIG.split()), 2]
    assert isinstance(bad[0], MissingTokenCountError)


async def test_a_cancelled_caller_is_skipped() -> None:
    counter = WordCounter(delay=0.02)
    first = asyncio.ensure_future(count_texts(counter, [BIG + " first"]))
    second = asyncio.ensure_future(count_texts(counter, [BIG + " second"]))
    await asyncio.sleep(0)
    first.cancel()
    assert await second == [len(BIG.split()) + 1]
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_a_counter_that_holds_the_gil_counts_a_ticks_texts_together_on_the_loop() -> None:
    counter = BatchWordCounter()
    texts = [[f"{BIG} caller {i}", f"name{i}"] for i in range(16)]
    results = await asyncio.gather(*(count_texts(counter, t) for t in texts))
    assert results == [[len(a.split()), 1] for a, _ in texts]
    assert counter.batches == [(threading.current_thread().name, 32)]  # one call, no hop


async def test_a_batch_error_reaches_only_the_caller_whose_text_raised_it() -> None:
    counter = BatchWordCounter()
    good, bad, other = await asyncio.gather(
        count_texts(counter, ["a b", "c"]),
        count_texts(counter, ["refuse this"]),
        count_texts(counter, ["d e f"]),
    )
    assert good == [2, 1]
    assert isinstance(bad[0], MissingTokenCountError)
    assert other == [3]


async def test_exact_counts_and_remembered_texts_stay_on_the_loop() -> None:
    exact = TiktokenCounter(engine="tiktoken")
    cached = CachedCounter(TiktokenCounter(engine="tiktoken"))
    texts = [f"{BIG} {i}" for i in range(4)]
    assert await count_texts(cached, texts) == [exact.count(t) for t in texts]
    assert cached.thread_safe
    inner = WordCounter()
    remembering = CachedCounter(inner)
    await count_texts(remembering, [BIG])
    await count_texts(remembering, [BIG])
    assert len(inner.threads) == 1  # the second call found it remembered
