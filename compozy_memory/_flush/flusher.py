"""Flushing: bring a memory back under its budget without blocking appends or losing one.

1. Appends return the context's size; past the threshold, :meth:`Flusher.notice` schedules a
   flush in the background (debounced, one at a time per instance in this process).
2. The flush takes the fenced lock (other replicas that find it taken skip), refreshes it
   while working, and is cancelled if the lease is lost.
3. It reads a snapshot, plans (:mod:`compozy_memory._flush.planner`) and summarises with no lock
   that appenders wait on.
4. ``flush_commit.lua`` checks the epoch and that the planned messages are still where the
   plan saw them, then replaces exactly those with the summary and archives the originals.
   Messages appended meanwhile are untouched. A conflict re-plans from a fresh snapshot.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Literal

from compozy_memory._flush.lock import FencedLock, Lease
from compozy_memory._flush.planner import FlushPlan, FlushSettings, plan_flush
from compozy_memory._flush.summarizers import Summarizer, Summary
from compozy_memory._metrics import FlushMetrics, default_metrics
from compozy_memory._model.messages import Message, encode_body
from compozy_memory._model.tokens import MESSAGE_OVERHEAD_TOKENS, count_message
from compozy_memory.errors import CompozyMemoryError, ConflictError, LockLostError, ReplicationError

if TYPE_CHECKING:
    from compozy_memory._store.instance import AppendResult, MemoryInstance

__all__ = ["FlushResult", "Flusher"]

log = logging.getLogger("compozy_memory.flush")
Outcome = Literal["summarised", "evicted", "nothing", "skipped", "conflicted"]


@dataclass(frozen=True, slots=True)
class FlushResult:
    outcome: Outcome
    plan: FlushPlan | None = None
    summary: Summary | None = None
    summary_id: int | None = None
    removed_tokens: int = 0
    context_tokens: int | None = None
    epoch: int | None = None
    rounds: int = 1


class Flusher:
    """Flushes one memory instance; attach with :meth:`MemoryInstance.attach_flusher`."""

    def __init__(
        self,
        instance: MemoryInstance,
        settings: FlushSettings,
        summarizer: Summarizer,
        *,
        lock_ttl: timedelta = timedelta(minutes=5),
        debounce: timedelta = timedelta(milliseconds=50),
        max_conflicts: int = 3,
        max_rounds: int = 20,
        skip_backoff: timedelta = timedelta(milliseconds=500),
        metrics: FlushMetrics | None = None,
        name: str = "memory",
    ) -> None:
        self.instance = instance
        self.settings = settings
        self.summarizer = summarizer
        self.metrics = metrics or default_metrics()
        self.lock = FencedLock(instance, lock_ttl, metrics=self.metrics)
        self.debounce = debounce.total_seconds()
        self.max_conflicts = max_conflicts
        self.max_rounds = max_rounds
        self.skip_backoff = skip_backoff.total_seconds()
        self._quiet_until = 0.0
        self.name = name
        self._task: asyncio.Task[None] | None = None
        self._again = False

    # -- background trigger ---------------------------------------------------------------

    def notice(self, result: AppendResult) -> None:
        """Called with every append's result: schedule a flush once the threshold is passed."""
        due = result.context_tokens >= self.settings.trigger_tokens or self._over_l1(result)
        if due and time.monotonic() >= self._quiet_until:
            self.schedule()

    def schedule(self) -> None:
        """Start a background flush soon, unless one is already running (then run once more)."""
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.get_running_loop().create_task(self._background())

    async def wait_idle(self) -> None:
        """Wait for the background flush, if any (for shutdown and tests)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def _background(self) -> None:
        await asyncio.sleep(self.debounce)
        while True:
            self._again = False
            try:
                await self.flush()
            except LockLostError:
                log.warning("flush of %s stopped: the lease was lost", self.instance.key)
            except CompozyMemoryError:
                log.exception("background flush of %s failed", self.instance.key)
            if not self._again:
                return

    def _over_l1(self, result: AppendResult) -> bool:
        compression = self.settings.compression
        return compression is not None and result.total_count > compression.max_l1_messages

    # -- one flush ------------------------------------------------------------------------

    async def flush(self) -> FlushResult:
        """Flush now if this replica gets the lock; skip if another holds it."""
        lease = await self.lock.try_acquire()
        if lease is None:
            # Another replica is flushing: leave it be for a while instead of asking again on
            # every append.
            self._quiet_until = time.monotonic() + self.skip_backoff
            return self._count(FlushResult("skipped"))
        try:
            return self._count(await lease.hold(lambda: self._flush_with(lease)))
        except LockLostError:
            self.metrics.flushes.labels(memory=self.name, outcome="lost").inc()
            raise
        finally:
            try:
                await lease.release()
            except CompozyMemoryError:
                log.warning("could not release the flush lock of %s", self.instance.key)

    async def _flush_with(self, lease: Lease) -> FlushResult:
        """Rounds of bounded snapshot, plan, summary and commit, until the context fits or
        nothing more can move. A memory that fits its snapshot bound needs one round."""
        result = await self._round(lease)
        rounds = 1
        while (
            result.plan is not None
            and result.plan.partial
            and result.outcome in ("summarised", "evicted")
            and result.plan.projected_tokens > self.settings.max_tokens
            and rounds < self.max_rounds
        ):
            following = await self._round(lease)
            rounds += 1
            if following.outcome not in ("summarised", "evicted"):
                break
            result = following
        return dataclasses.replace(result, rounds=rounds)

    async def _round(self, lease: Lease) -> FlushResult:
        for _ in range(self.max_conflicts):
            snapshot = await self.instance.snapshot(self.settings.snapshot_limit)
            plan = plan_flush(snapshot, self.settings)
            if plan.empty:
                return FlushResult("nothing", plan, context_tokens=plan.context_tokens)
            # Bytes, like every envelope: UTF-8 whatever encoding the client is set up with.
            summary, body, summary_tokens = None, b"", 0
            if plan.summarize_ids:
                chosen, fold = set(plan.summarize_ids), set(plan.fold_summary_ids)
                covered = [m for m in snapshot.messages if m.id in chosen]
                folded = [s for s in snapshot.summaries if s.id in fold]
                # Never larger than what it replaces, framing included: the plan's projection
                # is then an upper bound on the context after the commit.
                replaced = sum(m.tokens or 0 for m in covered)
                limit = min(self.settings.summary_tokens, replaced) - MESSAGE_OVERHEAD_TOKENS
                summary = await self.summarizer.summarize(
                    [*folded, *covered], max_tokens=max(1, limit)
                )
                message = _summary_message(summary, folded, plan)
                body = encode_body(message)
                summary_tokens = count_message(message, self.instance.counter)
            try:
                reply = await self.instance._call(
                    "flush_commit",
                    self.instance.keys.data,
                    [
                        self.instance._ttl_ms,
                        self.instance.policy.archive_max,
                        lease.epoch,
                        len(plan.prefix_ids),
                        len(plan.remove_ids),
                        len(plan.fold_summary_ids),
                        summary_tokens,
                        body,
                        *plan.prefix_ids,
                        *plan.remove_ids,
                        *plan.fold_summary_ids,
                    ],
                )
            except LockLostError:
                lease.lost = True  # the script saw a newer epoch: another holder took over
                raise
            except ReplicationError as exc:
                # Committed on the primary, not acknowledged by its replicas in time: the flush
                # happened, and is reported as such.
                log.warning(
                    "flush of %s committed without replica acknowledgement: %s",
                    self.instance.key,
                    exc,
                )
                reply = exc.result
            except ConflictError:
                # The memory changed under the plan: plan again, if the lease is still ours.
                if not await lease.refresh():
                    raise LockLostError(
                        "the flush lease was lost; the flush was stopped before writing",
                        key=self.instance.key,
                    ) from None
                continue
            summary_id, _, removed_tokens, tokens, _, summary_total = (int(v) for v in reply)
            return FlushResult(
                "summarised" if summary is not None else "evicted",
                plan,
                summary,
                summary_id or None,
                removed_tokens,
                tokens + summary_total,
                lease.epoch,
            )
        return FlushResult("conflicted")

    def _count(self, result: FlushResult) -> FlushResult:
        self.metrics.flushes.labels(memory=self.name, outcome=result.outcome).inc()
        if result.plan is not None and not result.plan.empty:
            saved = result.plan.context_tokens - result.plan.projected_tokens
            self.metrics.tokens_saved.labels(memory=self.name).inc(max(0, saved))
            self.metrics.messages_flushed.labels(memory=self.name, how="summarised").inc(
                len(result.plan.summarize_ids)
            )
            self.metrics.messages_flushed.labels(memory=self.name, how="evicted").inc(
                len(result.plan.evict_ids)
            )
        return result


def _summary_message(summary: Summary, folded: list[Message], plan: FlushPlan) -> Message:
    covers = sorted({*(i for s in folded for i in s.covers or ()), *plan.summarize_ids})
    metadata: dict[str, object] = {"method": summary.method}
    if summary.fallback:
        metadata["fallback"] = summary.fallback
    if folded:
        metadata["folded"] = [s.id for s in folded if s.id is not None]
    return Message.model_validate(
        {
            "role": "system",
            "type": "summary",
            "content": summary.text,
            "covers": covers,
            "metadata": metadata,
        }
    )
