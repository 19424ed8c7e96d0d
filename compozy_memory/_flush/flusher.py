"""Flushing: bring a memory back under its budget without blocking appends or losing one.

1. Appends return the context's size; past the threshold, :meth:`Flusher.notice` schedules a
   flush in the background (debounced, one at a time per memory in this process).
2. The flush takes the fenced lock (other replicas that find it taken skip), refreshes it
   while working, and is cancelled if the lease is lost before it commits.
3. It reads a snapshot, plans (:mod:`compozy_memory._flush.planner`) and summarises with no
   lock that appenders wait on. The summarizer has a deadline, and its text is fitted to the
   summary's budget whatever it returned; on failure the extractive summary stands in.
4. ``flush_commit.lua`` checks the epoch, the incarnation, and that the planned messages are
   still where the plan saw them, then replaces exactly those with the summary and archives
   the originals. Messages appended meanwhile are untouched. A conflict re-plans from a fresh
   snapshot.

A flush is steps (:mod:`compozy_memory._wire.steps`), run the same way by an async handle (in
a task, after appends) and by a sync one (on a background thread,
:mod:`compozy_memory._wire.background`); the summarizer, a coroutine, is awaited on the loop
of an async handle and run on the summarizers' loop for a sync one.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, cast

from compozy_memory._flush.coverage import summary_coverage
from compozy_memory._flush.extractive import ExtractiveSummarizer
from compozy_memory._flush.lock import FencedLock, Lease
from compozy_memory._flush.planner import plan_flush
from compozy_memory._flush.settings import FlushSettings
from compozy_memory._flush.summarizers import Summarizer, fit_text
from compozy_memory._model.messages import Message, encode_body
from compozy_memory._model.results import (
    AppendResult,
    FlushCommit,
    FlushPlan,
    FlushResult,
    Snapshot,
    Summary,
)
from compozy_memory._model.tokens import MESSAGE_OVERHEAD_TOKENS, TokenCounter, count_message
from compozy_memory._search.runtime.indexer import Indexer
from compozy_memory._wire.background import Backgrounded, Debounced
from compozy_memory._wire.effects import Await, Hold, MetricsSink, Observe
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.steps import Steps, op
from compozy_memory.errors import (
    CompozyMemoryError,
    ConflictError,
    IndexLagError,
    LockLostError,
    ReadOnlyMemoryError,
    ReplicationError,
)

__all__ = ["Flusher"]

log = logging.getLogger("compozy_memory.flush")


class Flusher(Backgrounded):
    """Flushes one memory; the manager attaches it with ``MemoryInstance.attach_flusher``."""

    def __init__(
        self,
        gateway: MemoryGateway,
        settings: FlushSettings,
        summarizer: Summarizer,
        counter: TokenCounter,
        *,
        lock_ttl: timedelta = timedelta(minutes=5),
        debounce: timedelta = timedelta(milliseconds=50),
        max_conflicts: int = 3,
        max_rounds: int = 20,
        skip_backoff: timedelta = timedelta(milliseconds=500),
        metrics: MetricsSink | None = None,
        name: str = "memory",
        background: bool = True,
        indexer: Indexer | None = None,
        on_commit: Callable[[FlushCommit, int], None] | None = None,
    ) -> None:
        if gateway.read_only:
            raise ReadOnlyMemoryError(
                "a flusher writes: it needs a read-write handle", key=gateway.name
            )
        self.gateway = gateway
        self.settings = settings
        self.summarizer = summarizer
        self.counter = counter
        #: Where the flush's measurements go (None: the metrics of the driver that runs it).
        self.metrics = metrics
        self.name = name
        self.lock = FencedLock(gateway, lock_ttl, metrics=self.metrics, name=name)
        self.lock.measured = True
        #: What is archived must be indexed first: the flusher catches the index up before
        #: it plans (the handle's own indexer, when the manager attaches one).
        self.indexer = indexer or Indexer(
            gateway, metrics=self.metrics, name=name, background=False
        )
        self.debounce = debounce.total_seconds()
        self.max_conflicts = max_conflicts
        self.max_rounds = max_rounds
        self.skip_backoff = skip_backoff.total_seconds()
        #: False: appends never start a flush; only :meth:`flush` does.
        self.background = background
        #: Called with every commit and the last id of the snapshot it was planned from (the
        #: manager's session index records the totals); it must not wait or raise.
        self.on_commit = on_commit
        self._fallback = ExtractiveSummarizer(counter)
        # Made once: notice() runs on every append.
        self._hit = Observe("flush_optimization_hits", (name,), into=metrics)
        self._log = {"memory": name, "key": gateway.name}
        self._quiet_until = 0.0
        # flush looked up at each run, so a wrapper set on the instance is the one run
        self._job = Debounced.of_steps(
            lambda: self.flush(), gateway.transport, self.debounce, failed=self._failed
        )

    @property
    def transport(self) -> Any:
        return self.gateway.transport

    def twin(
        self,
        gateway: MemoryGateway,
        indexer: Indexer,
        on_commit: Callable[[FlushCommit, int], None] | None,
    ) -> Flusher:
        """This flusher for another handle of the same memory (a handle's sync twin): the
        same settings, summarizer and lock, through ``gateway``."""
        return Flusher(
            gateway,
            self.settings,
            self.summarizer,
            self.counter,
            lock_ttl=timedelta(milliseconds=self.lock.ttl_ms),
            debounce=timedelta(seconds=self.debounce),
            max_conflicts=self.max_conflicts,
            max_rounds=self.max_rounds,
            skip_backoff=timedelta(seconds=self.skip_backoff),
            metrics=self.metrics,
            name=self.name,
            background=self.background,
            indexer=indexer,
            on_commit=on_commit if self.on_commit is not None else None,
        )

    # -- background trigger ---------------------------------------------------------------

    def notice(self, result: AppendResult) -> Observe | None:
        """Called with every append's result: schedule a flush once the threshold is passed.
        Returns the measurement of an append settled with no flush and no read, for the
        append's steps to yield (``compozy_memory_flush_optimization_hits_total``)."""
        if not self.background:
            return None
        # Decided from the counts the append script returned: no read of the conversation.
        due = (
            result.context_tokens >= self.settings.trigger_tokens
            or self._over_l1(result)
            or self._over_count(result)
        )
        if not due:
            return self._hit
        if time.monotonic() >= self._quiet_until:
            self.schedule()
        return None

    def schedule(self) -> None:
        """Start a background flush soon, unless one is already running (then run once more)."""
        self._job.fire()

    def _failed(self, exc: CompozyMemoryError) -> None:
        """A background flush's failure is logged: nobody waits for it."""
        if isinstance(exc, LockLostError):
            log.warning(
                "flush of %s stopped: the lease was lost", self.gateway.name, extra=self._log
            )
        else:
            log.exception("background flush of %s failed", self.gateway.name, extra=self._log)

    def _over_count(self, result: AppendResult) -> bool:
        trigger = self.settings.trigger_messages
        return trigger is not None and result.total_count >= trigger

    def _over_l1(self, result: AppendResult) -> bool:
        compression = self.settings.compression
        return compression is not None and result.total_count > compression.max_l1_messages

    # -- one flush ------------------------------------------------------------------------

    @op
    def flush(self) -> Steps[FlushResult]:
        """Flush now if this replica gets the lock; skip if another holds it."""
        lease = yield from self.lock.try_acquire()
        if lease is None:
            # Another replica is flushing: leave it be for a while instead of asking again on
            # every append.
            self._quiet_until = time.monotonic() + self.skip_backoff
            return (yield from self._count(FlushResult("skipped")))
        try:
            result = yield from self._count((yield from Hold(lease, self._flush_with(lease))))
        except LockLostError:
            yield from Observe("flushes", (self.name, "lost"), into=self.metrics)
            raise
        finally:
            try:
                yield from lease.release()
            except CompozyMemoryError:
                log.warning(
                    "could not release the flush lock of %s", self.gateway.name, extra=self._log
                )
        return result

    def _flush_with(self, lease: Lease) -> Steps[FlushResult]:
        """Rounds of bounded snapshot, plan, summary and commit, until the context fits or
        nothing more can move. A memory that fits its snapshot bound needs one round."""
        result = yield from self._round(lease)
        rounds = 1
        while (
            result.plan is not None
            and result.plan.partial
            and result.outcome in ("summarised", "evicted")
            and (
                result.plan.projected_tokens > self.settings.max_tokens
                or self.settings.over_count(result.plan.projected_count)
            )
            and rounds < self.max_rounds
        ):
            following = yield from self._round(lease)
            rounds += 1
            if following.outcome not in ("summarised", "evicted"):
                break
            result = following
        return dataclasses.replace(result, rounds=rounds)

    def _round(self, lease: Lease) -> Steps[FlushResult]:
        for _ in range(self.max_conflicts):
            yield from self.indexer.catch_up()
            snapshot = yield from self.gateway.snapshot(self.settings.snapshot_limit)
            plan = plan_flush(snapshot, self.settings)
            if plan.empty:
                if plan.blocked:
                    log.warning("flush of %s: %s", self.gateway.name, plan.blocked, extra=self._log)
                return FlushResult("nothing", plan, context_tokens=plan.context_tokens)
            summary, message = yield from self._summary(snapshot, plan)
            # Bytes, like every envelope: UTF-8 whatever encoding the client is set up with.
            body = encode_body(message) if message is not None else b""
            tokens = count_message(message, self.counter) if message is not None else 0
            lease.committing = True
            try:
                commit = yield from self.gateway.flush_commit(
                    epoch=lease.epoch,
                    incarnation=lease.incarnation,
                    plan=plan,
                    summary_body=body,
                    summary_tokens=tokens,
                )
            except LockLostError:
                lease.lost = True  # the script saw a newer epoch: another holder took over
                raise
            except ReplicationError as exc:
                # Committed on the primary, not acknowledged by its replicas in time: the flush
                # happened, and is reported as such.
                log.warning(
                    "flush of %s committed without replica acknowledgement: %s",
                    self.gateway.name,
                    exc,
                    extra=self._log,
                )
                commit = cast(FlushCommit, exc.result)
            except ConflictError as exc:
                lease.committing = False
                if isinstance(exc, IndexLagError):
                    yield from self.indexer.catch_up()
                # The memory changed under the plan: plan again, if the lease is still ours.
                if not (yield from lease.refresh()):
                    raise LockLostError(
                        "the flush lease was lost; the flush was stopped before writing",
                        key=self.gateway.name,
                    ) from None
                continue
            lease.committing = False
            # The summary is searched from the index only (it is not a live message): index
            # it soon, not after the batch delay appends wait for.
            self.indexer.notice(soon=True)
            if self.on_commit is not None:
                self.on_commit(commit, snapshot.last_id)
            return FlushResult(
                "summarised" if summary is not None else "evicted",
                plan,
                summary,
                commit.summary_id,
                commit.removed_tokens,
                commit.context_tokens,
                lease.epoch,
            )
        return FlushResult("conflicted")

    def _summary(
        self, snapshot: Snapshot, plan: FlushPlan
    ) -> Steps[tuple[Summary | None, Message | None]]:
        """The summary of what the plan summarises, never larger than what it replaces."""
        if not plan.summarize_ids:
            return None, None
        chosen, fold = set(plan.summarize_ids), set(plan.fold_summary_ids)
        covered = [m for m in snapshot.messages if m.id in chosen]
        folded = [s for s in snapshot.summaries if s.id in fold]
        # Never larger than what it replaces, framing included: the plan's projection is then
        # an upper bound on the context after the commit.
        replaced = sum(m.tokens or 0 for m in [*covered, *folded])
        limit = max(1, min(self.settings.summary_tokens, replaced) - MESSAGE_OVERHEAD_TOKENS)
        summary = yield from self._summarize([*folded, *covered], limit)
        return summary, _summary_message(summary, folded, *summary_coverage(snapshot, plan, folded))

    def _summarize(self, messages: list[Message], limit: int) -> Steps[Summary]:
        """The summarizer's output within its deadline, fitted to ``limit`` tokens; the
        extractive summary (offline, milliseconds) if it fails, hangs or returns something
        that is not text."""
        deadline = self.settings.summarizer_deadline.total_seconds()
        try:
            summary = yield from _summarize(self.summarizer, messages, limit, deadline)
            if not isinstance(summary, Summary) or not isinstance(summary.text, str):
                raise TypeError(f"a summarizer returned {type(summary).__name__}, not a Summary")
            if not summary.text.strip():
                raise ValueError("the summarizer returned no text")
        except Exception as exc:  # any summarizer, custom ones included, may fail
            reason = (
                f"timed out after {deadline:g}s"
                if isinstance(exc, TimeoutError)
                else (f"{type(exc).__name__}: {str(exc)[:200]}")
            )
            log.warning(
                "summarizer of %s failed (%s); using extractive",
                self.gateway.name,
                reason,
                extra=self._log,
            )
            method = type(self.summarizer).__name__
            yield from Observe("summarizer_fallbacks", (method,), into=self.metrics)
            fallback = yield from _summarize(self._fallback, messages, limit, None)
            return Summary(fallback.text, fallback.method, reason)
        text = fit_text(summary.text, limit, self.counter)
        return summary if text == summary.text else dataclasses.replace(summary, text=text)

    def _count(self, result: FlushResult) -> Steps[FlushResult]:
        """``result``, measured."""
        kind = _FLUSH_TYPES.get(result.outcome, result.outcome)
        into, name = self.metrics, self.name
        yield from Observe("flushes", (name, kind), into=into)
        if result.plan is not None and not result.plan.empty:
            strategy = self.settings.strategy
            saved = result.plan.context_tokens - result.plan.projected_tokens
            yield from Observe("tokens_saved", (name, strategy), max(0, saved), into)
            if result.outcome == "evicted":
                yield from Observe("trims", (name, strategy), into=into)
            summarised = len(result.plan.summarize_ids)
            yield from Observe("messages_flushed", (name, "summarised"), summarised, into)
            evicted = len(result.plan.evict_ids)
            yield from Observe("messages_flushed", (name, "evicted"), evicted, into)
        return result


def _summarize(
    summarizer: Summarizer, messages: Sequence[Message], max_tokens: int, deadline: float | None
) -> Await[Summary]:
    """A summarizer's coroutine, within ``deadline`` seconds: awaited on an async handle's
    loop, run on the summarizers' loop for a sync handle."""
    return Await(lambda: summarizer.summarize(messages, max_tokens=max_tokens), deadline)


# compozy_memory_flush_total's ``type``: the spec's summary and eviction; other outcomes keep
# their FlushResult name.
_FLUSH_TYPES = {"summarised": "summary", "evicted": "eviction"}


def _summary_message(
    summary: Summary, folded: list[Message], covers: list[tuple[int, int]], exact: int | None
) -> Message:
    metadata: dict[str, object] = {"method": summary.method}
    if summary.fallback:
        metadata["fallback"] = summary.fallback
    if folded:
        metadata["folded"] = [s.id for s in folded if s.id is not None]
    if exact is not None:
        metadata["covered"] = exact  # the ranges were merged to stay bounded
    return Message.model_validate(
        {
            "role": "system",
            "type": "summary",
            "content": summary.text,
            "covers": covers,
            "metadata": metadata,
        }
    )
