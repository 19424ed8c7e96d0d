"""The flusher and the fenced lock against a fake transport: no server, every path."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry

from compozy_memory import (
    ConflictError,
    FencedLock,
    Flusher,
    FlushSettings,
    HeuristicCounter,
    LockLostError,
    Message,
    ReadOnlyMemoryError,
    Summary,
)
from compozy_memory._metrics import FlushMetrics
from compozy_memory._model.results import FlushPlan, FlushResult
from tests.fakes import Call, FakeTransport, commit_reply, envelope, gateway, snapshot_reply

COUNTER = HeuristicCounter()


def turns(n: int, *, tokens: int = 50, first: int = 1) -> list[bytes]:
    roles = ("user", "assistant")
    return [
        envelope({"role": roles[i % 2], "content": f"turn {i} about order {i}"}, id=first + i,
                 tokens=tokens)
        for i in range(n)
    ]  # fmt: skip


class Echo:
    """A summarizer that says how many messages it saw."""

    def __init__(self) -> None:
        self.calls = 0

    async def summarize(self, messages: list[Message], *, max_tokens: int) -> Summary:
        self.calls += 1
        return Summary(f"{len(messages)} messages", "echo")


def flusher(
    transport: FakeTransport,
    summarizer: object | None = None,
    *,
    settings: FlushSettings | None = None,
    lock_ttl: timedelta = timedelta(seconds=30),
) -> Flusher:
    return Flusher(
        gateway(transport),
        settings or FlushSettings(max_tokens=400, summary_tokens=40),
        summarizer or Echo(),  # type: ignore[arg-type]
        COUNTER,
        lock_ttl=lock_ttl,
        metrics=FlushMetrics(CollectorRegistry()),
    )


def acquired(epoch: int = 7, incarnation: str = "42") -> list[object]:
    return [epoch, incarnation.encode()]


async def test_a_busy_lock_skips_without_reading_anything() -> None:
    transport = FakeTransport().on("lock_acquire", [0, b"42"])
    result = await flusher(transport).flush()
    assert result.outcome == "skipped"
    assert [c.script for c in transport.calls] == ["lock_acquire"]


async def test_a_flush_commits_exactly_the_plan_with_its_epoch_and_incarnation() -> None:
    messages = turns(12)  # 600 tokens over a 400 budget
    transport = (
        FakeTransport()
        .on("lock_acquire", acquired())
        .on("snapshot", snapshot_reply(messages, incarnation="42"))
        .on("flush_commit", commit_reply(summary_id=13, removed=4, removed_tokens=200))
        .on("lock_release", 1)
    )
    result = await flusher(transport).flush()
    assert result.outcome == "summarised"
    assert result.summary_id == 13
    (commit,) = transport.named("flush_commit")
    assert commit.arg("epoch") == 7
    assert commit.arg("incarnation") == b"42"  # text goes as UTF-8 bytes
    plan = result.plan
    assert plan is not None
    # After the fixed arguments: the prefix ids, then the ids to remove (indexed already: the
    # index is kept off the write path, and the flusher catches it up before it plans).
    n_fixed, n_remove = (
        len(commit.args) - len(plan.prefix_ids) - len(plan.remove_ids),
        len(plan.remove_ids),
    )
    ids_to_remove = commit.args[
        n_fixed + len(plan.prefix_ids) : n_fixed + len(plan.prefix_ids) + n_remove
    ]
    assert ids_to_remove == plan.remove_ids
    assert transport.named("index_pending")
    body = commit.message("summary_body")
    assert body.covered_ids == list(plan.summarize_ids)
    assert transport.named("lock_release")


async def test_a_conflict_re_plans_from_a_fresh_snapshot() -> None:
    first, second = turns(12), turns(12, first=2)  # the oldest was trimmed meanwhile
    transport = (
        FakeTransport()
        .on("lock_acquire", acquired())
        .on("snapshot", snapshot_reply(first), snapshot_reply(second))
        .on("flush_commit", ConflictError("moved"), commit_reply(summary_id=20))
        .on("lock_refresh", 1)
        .on("lock_release", 1)
    )
    result = await flusher(transport).flush()
    assert result.outcome == "summarised"
    commits = transport.named("flush_commit")
    assert len(commits) == 2
    assert commits[0].args != commits[1].args
    assert 1 not in commits[1].args[len(commits[1].args) // 2 :]  # id 1 is gone from the plan


async def test_a_conflict_with_a_lost_lease_stops_before_writing_again() -> None:
    transport = (
        FakeTransport()
        .on("lock_acquire", acquired())
        .on("snapshot", snapshot_reply(turns(12)))
        .on("flush_commit", ConflictError("moved"))
        .on("lock_refresh", 0)
        .on("lock_release", 0)
    )
    with pytest.raises(LockLostError):
        await flusher(transport).flush()
    assert len(transport.named("flush_commit")) == 1


async def test_a_stale_commit_marks_the_lease_lost_and_raises() -> None:
    transport = (
        FakeTransport()
        .on("lock_acquire", acquired())
        .on("snapshot", snapshot_reply(turns(12)))
        .on("flush_commit", LockLostError("stale fencing epoch"))
        .on("lock_release", 0)
    )
    with pytest.raises(LockLostError):
        await flusher(transport).flush()


async def test_a_bounded_snapshot_is_flushed_in_rounds() -> None:
    settings = FlushSettings(max_tokens=400, summary_tokens=40, snapshot_limit=10)
    # Each round reads 10 of the oldest and summarises 8 of them (400 tokens for <= 40); the
    # third round's projection (700 - 400 + 40) fits the budget.
    rounds = [
        snapshot_reply(turns(10, first=1 + 10 * r), count=count, tokens=tokens)
        for r, (count, tokens) in enumerate([(40, 2000), (33, 1500), (26, 700)])
    ]
    transport = (
        FakeTransport()
        .on("lock_acquire", acquired())
        .on("snapshot", *rounds, snapshot_reply(turns(4, first=100), count=4, tokens=200))
        .on("flush_commit", *(commit_reply(summary_id=200 + r) for r in range(4)))
        .on("lock_release", 1)
    )
    result = await flusher(transport, settings=settings).flush()
    assert result.outcome == "summarised"
    assert result.rounds == 3  # the third round's projection fits: no fourth
    assert len(transport.named("flush_commit")) == 3


class Failing:
    async def summarize(self, messages: list[Message], *, max_tokens: int) -> Summary:
        raise RuntimeError("model unavailable")


class Hanging:
    async def summarize(self, messages: list[Message], *, max_tokens: int) -> Summary:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


class Flooding:
    async def summarize(self, messages: list[Message], *, max_tokens: int) -> Summary:
        return Summary("fact " * 1_000_000, "flood")


class NotText:
    async def summarize(self, messages: list[Message], *, max_tokens: int) -> object:
        return {"text": 5}


def committed_summary(transport: FakeTransport) -> Message:
    (commit,) = transport.named("flush_commit")
    return commit.message("summary_body")


def ready(transport: FakeTransport) -> FakeTransport:
    return (
        transport.on("lock_acquire", acquired())
        .on("snapshot", snapshot_reply(turns(12)))
        .on("flush_commit", commit_reply(summary_id=13))
        .on("lock_release", 1)
    )


@pytest.mark.parametrize("summarizer", [Failing(), NotText()], ids=["raises", "not-text"])
async def test_a_failing_summarizer_falls_back_to_the_extractive_summary(
    summarizer: object, caplog: pytest.LogCaptureFixture
) -> None:
    transport = ready(FakeTransport())
    with caplog.at_level(logging.WARNING, logger="compozy_memory.flush"):
        result = await flusher(transport, summarizer).flush()
    assert result.outcome == "summarised"
    # Logged once, with its cause, the memory and the key.
    (record,) = caplog.records
    assert "using extractive" in record.getMessage()
    assert type(summarizer).__name__ != "Failing" or "RuntimeError" in record.getMessage()
    assert record.__dict__["memory"] == "memory"
    assert record.__dict__["key"] == "compozy:units:memory:{conv}"
    summary = committed_summary(transport)
    assert summary.metadata is not None
    assert summary.metadata["method"] == "extractive"
    assert summary.metadata["fallback"]


async def test_a_hanging_summarizer_meets_its_deadline() -> None:
    settings = FlushSettings(
        max_tokens=400, summary_tokens=40, summarizer_deadline=timedelta(milliseconds=50)
    )
    transport = ready(FakeTransport())
    result = await asyncio.wait_for(
        flusher(transport, Hanging(), settings=settings).flush(), timeout=5
    )
    assert result.outcome == "summarised"
    metadata = committed_summary(transport).metadata
    assert metadata is not None
    assert "timed out" in str(metadata["fallback"])


async def test_a_flooding_summarizer_is_fitted_to_the_summary_budget() -> None:
    transport = ready(FakeTransport())
    await flusher(transport, Flooding()).flush()
    (commit,) = transport.named("flush_commit")
    tokens = commit.arg("summary_tokens")
    assert isinstance(tokens, int)
    assert tokens <= 40
    assert COUNTER.count(committed_summary(transport).text) <= 40


async def test_a_lease_lost_before_the_commit_cancels_the_work() -> None:
    gate = asyncio.Event()

    class Slow:
        async def summarize(self, messages: list[Message], *, max_tokens: int) -> Summary:
            gate.set()
            await asyncio.sleep(3600)
            raise AssertionError("unreachable")

    transport = (
        FakeTransport()
        .on("lock_acquire", acquired())
        .on("snapshot", snapshot_reply(turns(12)))
        .on("lock_refresh", 0)
        .on("lock_release", 0)
    )
    with pytest.raises(LockLostError):
        await asyncio.wait_for(
            flusher(transport, Slow(), lock_ttl=timedelta(milliseconds=30)).flush(), timeout=5
        )
    assert not transport.named("flush_commit")


async def test_a_lease_lost_while_committing_does_not_hide_the_commit() -> None:
    """The commit's own epoch check decides once it is sent: a refresh that fails meanwhile
    must not turn a committed flush into a LockLostError."""

    async def slow_commit(call: Call) -> list[int]:
        await asyncio.sleep(0.1)  # the keeper refreshes (and fails) meanwhile
        return commit_reply(summary_id=13)

    def commit(call: Call) -> object:
        return slow_commit(call)

    transport = (
        FakeTransport()
        .on("lock_acquire", acquired())
        .on("snapshot", snapshot_reply(turns(12)))
        .on("lock_refresh", 0)
        .on("lock_release", 0)
    )
    transport.defaults["flush_commit"] = commit
    result = await flusher(transport, lock_ttl=timedelta(milliseconds=30)).flush()
    assert result.outcome == "summarised"
    assert transport.named("lock_refresh")


async def test_a_read_only_gateway_cannot_flush_or_lock() -> None:
    transport = FakeTransport()
    ro = gateway(transport, read_only=True)
    with pytest.raises(ReadOnlyMemoryError):
        Flusher(ro, FlushSettings(max_tokens=100), Echo(), COUNTER)  # type: ignore[arg-type]
    with pytest.raises(ReadOnlyMemoryError):
        await FencedLock(ro).try_acquire()
    with pytest.raises(ReadOnlyMemoryError):
        await ro.flush_commit(
            epoch=1,
            incarnation="",
            plan=FlushPlan(),
            summary_body=b"",
            summary_tokens=0,
        )
    assert transport.calls == []


async def test_a_flush_reports_the_specs_summarized_count_and_tokens_saved() -> None:
    transport = (
        FakeTransport()
        .on("lock_acquire", acquired())
        .on("snapshot", snapshot_reply(turns(12), incarnation="42"))
        .on("flush_commit", commit_reply(summary_id=13, removed=4, removed_tokens=200))
        .on("lock_release", 1)
    )
    result = await flusher(transport).flush()
    assert result.plan is not None
    assert result.summarized_count == len(result.plan.summarize_ids) == 5
    # 600 tokens; 5 x 50 replaced by a summary counted at its whole 40-token budget.
    assert (result.plan.context_tokens, result.plan.projected_tokens) == (600, 390)
    assert result.tokens_saved == 210
    assert (FlushResult("skipped").summarized_count, FlushResult("skipped").tokens_saved) == (0, 0)
    nothing = FlushResult("nothing", FlushPlan(context_tokens=90, projected_tokens=90))
    assert (nothing.summarized_count, nothing.tokens_saved) == (0, 0)
    evicted = FlushResult(
        "evicted", FlushPlan(evict_ids=(1, 2), context_tokens=500, projected_tokens=380)
    )
    assert (evicted.summarized_count, evicted.tokens_saved) == (0, 120)
