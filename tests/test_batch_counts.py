"""Token counts of a batch: each text counted as it would be alone, the tick's counting
batch, and its failure paths."""

from __future__ import annotations

import asyncio
import random

import pytest

from compozy_memory import CachedCounter, HeuristicCounter, TiktokenCounter
from compozy_memory._io import counting
from compozy_memory._io.counting import INLINE_CHARS, count_texts
from compozy_memory._model.tokens import TokenCounter, rs_bpe_available
from compozy_memory.errors import MissingTokenCountError
from tests.counters import BatchWordCounter

PIECES = [
    "a", "b", " ", "  ", "\n", "\r\n", "\r", "\t", "'s", "'LL", "1", "123", "é", "e\u0301",
    "\u0301", "\u200d", "😀", "\ud83d", "\ude00", "<|endofprompt|>", "<|endoftext|>",
    "<|endof", "prompt|>", "<|", "|>", "<", "|", ">", "你好", "ǅ", "٣", "\u00a0", "\u3000",
    "?!", "/", "\x00", "ß", "İ", "\u2028", "\u0085",
]  # fmt: skip


def texts_from(rng: random.Random) -> list[str]:
    return [
        "".join(rng.choice(PIECES) for _ in range(rng.randrange(12)))
        for _ in range(rng.randrange(7))
    ]


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_a_batch_count_is_each_texts_own_count_and_rs_bpe_agrees(encoding: str) -> None:
    tiktoken = TiktokenCounter(encoding, engine="tiktoken")
    fast = TiktokenCounter(encoding, engine="rs-bpe") if rs_bpe_available() else tiktoken
    rng = random.Random(15)
    for _ in range(3000):
        texts = texts_from(rng)
        alone = [tiktoken.count(t) for t in texts]
        assert tiktoken.count_many(texts) == alone, texts
        assert fast.count_many(texts) == alone, texts


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_long_runs_and_separator_spellings_count_alike(encoding: str) -> None:
    tiktoken = TiktokenCounter(encoding, engine="tiktoken")
    fast = TiktokenCounter(encoding, engine="rs-bpe") if rs_bpe_available() else tiktoken
    for text in [
        " " * 20_000,
        " \n" * 10_000,
        "\r\n" * 10_000,
        "1" * 20_000,
        "<|endofprompt|>" * 2_000,
        "<|endoftext|><|endofprompt" * 1_000,
        "\u0301" * 20_000,
        "😀\ud83d" * 5_000,
    ]:
        alone = tiktoken.count(text)
        assert fast.count(text) == alone
        assert tiktoken.count_many(["", text, "<|endof", text, "prompt|>", ""]) == [
            0, alone, tiktoken.count("<|endof"), alone, tiktoken.count("prompt|>"), 0
        ]  # fmt: skip


def test_a_cached_batch_count_matches_counting_each_text() -> None:
    inner = TiktokenCounter(engine="tiktoken")
    cached = CachedCounter(inner, maxsize=8)
    rng = random.Random(7)
    for _ in range(500):
        texts = [*texts_from(rng), "same", "same"]
        assert cached.count_many(texts) == [inner.count(t) for t in texts]
    with pytest.raises(MissingTokenCountError):
        CachedCounter(BatchWordCounter(thread_safe=False)).count_many(["one", "refuse me"])


async def test_mixed_counters_in_one_tick_each_get_their_own_counts_or_errors() -> None:
    big = "word " * (INLINE_CHARS // 5)
    counters: list[TokenCounter] = [
        BatchWordCounter(thread_safe=True),
        BatchWordCounter(thread_safe=False),
        HeuristicCounter(),
        CachedCounter(BatchWordCounter(thread_safe=True)),
    ]
    jobs = []
    for i in range(120):
        counter = counters[i % len(counters)]
        texts = [f"{big} caller {i}" if i % 3 == 0 else f"caller {i}", "x " * i]
        if i % 7 == 0:
            texts.append(f"refuse {i}")
        jobs.append((counter, texts, asyncio.ensure_future(count_texts(counter, texts))))
    await asyncio.sleep(0)
    for n, (_, _, task) in enumerate(jobs):
        if n % 11 == 5:
            task.cancel()
    for counter, texts, task in jobs:
        try:
            got = await asyncio.wait_for(task, 10)
        except asyncio.CancelledError:
            assert task.cancelled()
            continue
        for text, value in zip(texts, got, strict=True):
            if isinstance(counter, HeuristicCounter):
                assert value == counter.count(text)
            elif "refuse" in text:  # its own error, the one its own text raised
                assert isinstance(value, MissingTokenCountError)
                assert str(value) == text
            else:
                assert value == len(text.split())


async def test_no_caller_waits_forever_when_the_counting_threads_refuse_work() -> None:
    """The executor may refuse a job (shut down: at interpreter exit, concurrent.futures
    refuses every new job). Its callers must not wait forever: they are counted on the
    loop instead, and still get their own counts."""
    counter = BatchWordCounter(thread_safe=True)
    counting._executor().shutdown(wait=True)
    try:
        task = asyncio.ensure_future(count_texts(counter, ["word " * INLINE_CHARS]))
        other = asyncio.ensure_future(count_texts(counter, ["two words " * INLINE_CHARS]))
        done, _ = await asyncio.wait({task, other}, timeout=2)
        assert len(done) == 2, "a caller still waits after 2 s: its job was refused and lost"
        assert task.result() == [INLINE_CHARS]
        assert other.result() == [2 * INLINE_CHARS]
    finally:
        other.cancel()
        task.cancel()
        counting._forget_executor()
