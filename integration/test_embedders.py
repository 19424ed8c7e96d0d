"""Embedders behind a deadline (issue 32, item 4): a search whose query the embedder fails on,
or keeps past its deadline, is ranked by BM25 alone, with a warning and
``compozy_memory_embedder_fallbacks_total``; a vector step it fails raises EmbedderError and
stores nothing. Never a hang, never the provider's own exception, on the async and the
blocking handle."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence

import pytest
from prometheus_client import CollectorRegistry

from compozy_memory import (
    EmbedderError,
    MemoryInstance,
    MemoryMetrics,
    SyncMemoryInstance,
    connect_sync,
)
from compozy_memory._io.translate import RedisClient
from integration.engines import EngineSpec
from integration.memories import COUNTER

pytestmark = pytest.mark.faults

DEADLINE = 0.3


class Flaky:
    """Embeds documents (one dimension per word of a few), then, once ``broken`` says so,
    fails ("error") or hangs ("hang") on what it is asked."""

    model = "flaky"
    dimensions = 4
    timeout = DEADLINE
    WORDS = ("refund", "invoice", "delivery", "password")

    def __init__(self) -> None:
        self.broken: str | None = None

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        if self.broken == "error":
            raise RuntimeError("the provider is down")
        if self.broken == "hang":
            await asyncio.sleep(3600)
        return [[float(w in t.lower()) + 0.1 for w in self.WORDS] for t in texts]


TURNS = [
    {"role": "user", "content": "where is my refund for the last invoice"},
    {"role": "assistant", "content": "the refund was sent on monday"},
    {"role": "user", "content": "and the delivery of the new order"},
    {"role": "assistant", "content": "the delivery comes on friday"},
]


def fallbacks(metrics: MemoryMetrics, reason: str) -> float:
    return float(metrics.embedder_fallbacks.labels("embedded", reason)._value.get())


async def test_a_failing_or_hanging_embedder_leaves_search_to_bm25(
    engine: EngineSpec,
    client: RedisClient,
    caplog: pytest.LogCaptureFixture,
    record: Callable[..., None],
) -> None:
    metrics = MemoryMetrics(CollectorRegistry())
    embedder = Flaky()
    mem = MemoryInstance.open(
        client,
        project="itest",
        key=f"conv:{uuid.uuid4().hex}",
        counter=COUNTER,
        embedder=embedder,
        metrics=metrics,
        memory_id="embedded",
    )
    mem.indexer.background = False
    assert mem.vectors is not None
    mem.vectors.background = False
    await mem.append_many(TURNS)
    await mem.indexer.catch_up()
    await mem.vectors.catch_up()
    calls = 0
    worst = 0.0
    answered = 0
    for broken in ("error", "hang"):
        embedder.broken = broken
        for call in (
            lambda: mem.search("refund"),
            lambda: mem.context(4_000, query="refund"),
        ):
            calls += 1
            started = time.perf_counter()
            result = await call()
            worst = max(worst, time.perf_counter() - started)
            assert result
            answered += 1
    assert worst < DEADLINE + 2.0
    hits = await mem.search("refund")  # still broken ("hang"): BM25's ranking
    assert any("refund" in h.message.text for h in hits)
    assert fallbacks(metrics, "error") == 2
    assert fallbacks(metrics, "timeout") == 3
    assert "BM25 alone ranks it" in caplog.text
    # A vector step the embedder fails stores nothing and says why, typed.
    await mem.append({"role": "user", "content": "my password does not work"})
    await mem.indexer.catch_up()
    refused = 0
    for broken in ("error", "hang"):
        embedder.broken = broken
        with pytest.raises(EmbedderError, match="nothing was stored"):
            await mem.vectors.catch_up()
        refused += 1
    embedder.broken = None
    assert (await mem.vectors.catch_up()).embedded == 1
    record(
        group="adversarial-3",
        item=4,
        fault="an Embedder that raises, then one that hangs, on search(), context(query=) "
        "and the vector step (async handle)",
        engine=engine.name,
        promise="searches are ranked by BM25 alone within the deadline, with a warning and "
        "compozy_memory_embedder_fallbacks_total; a vector step raises EmbedderError, "
        "storing nothing; never a hang, never the provider's exception",
        operations=calls + refused,
        acknowledged=answered,
        lost=calls - answered,
        duplicated=0,
        observed=f"{answered} of {calls} searches answered by BM25 (slowest {worst:.2f} s, "
        f"deadline {DEADLINE} s); fallbacks counted: 2 error, 3 timeout; {refused} vector "
        "steps raised EmbedderError, the next one stored the message",
    )


def test_the_blocking_handle_returns_at_the_deadline_too(engine: EngineSpec) -> None:
    """A SyncMemoryInstance runs the embedder on the summarizers' loop: a hang there ends at
    the deadline as well."""
    client = connect_sync(engine.url, cluster=engine.cluster)
    embedder = Flaky()
    mem = SyncMemoryInstance.open(
        client, project="itest", key=f"conv:{uuid.uuid4().hex}", counter=COUNTER,
        embedder=embedder,
    )  # fmt: skip
    vectors = mem.vectors
    assert vectors is not None
    mem.append_many(TURNS)
    mem.indexer.catch_up()
    vectors.catch_up()
    embedder.broken = "hang"
    started = time.perf_counter()
    hits = mem.search("refund")
    took = time.perf_counter() - started
    assert hits
    assert took < DEADLINE + 2.0
    mem.append({"role": "user", "content": "password again"})
    mem.indexer.catch_up()
    with pytest.raises(EmbedderError):
        vectors.catch_up()
    client.close()
