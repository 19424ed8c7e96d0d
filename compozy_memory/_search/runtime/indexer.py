"""The indexer: keeps a memory's search index caught up, off the write path, in bounded steps.

Appends never index. After a handle's writes its indexer runs in the background
(:mod:`compozy_memory._wire.background`), in batches: the policy's ``search.index_delay``
(``INDEX_DELAY``, 30 s, by default) after a write it has not indexed, or a debounce after
its first write or once it wrote ``INDEX_BATCH_DOCS`` or ``INDEX_BATCH_BYTES`` (a step costs
the server about as much for one message as for sixteen; a search ranks the live messages
the index has not reached itself: :mod:`compozy_memory._search.tail`). A step reads what is
pending (``lua/search/index_pending.lua``), builds a segment of it here
(:mod:`compozy_memory._search.segments`) and stores it with one call
(``lua/search/index_add.lua``), in time proportional to its bytes, checked against where the
index stood when it was read: indexers on many replicas race, one step wins. A message moves
to the archive only once indexed (trim, replace and a flush run the indexer first). Documents
the archive's cap dropped come back as a negative segment.

The indexer then keeps the segments few (:mod:`compozy_memory._search.merging`): it merges a
full tier here and stores the result in the inputs' place (``index_merge.lua``,
``index_put.lua``), claiming them (a claim lapses after ``MERGE_LEASE_MS``), and deletes what
merges left a bounded step at a time (``index_gc.lua``). In the background the merges are a
job of their own: the next catch-up's steps do not wait for them. Design: ``docs/design.md``.

``compozy_memory_index_lag_seconds`` observes, per step, how long its oldest message waited
(server clocks); ``compozy_memory_index_unindexed`` the messages this process last saw waiting.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from typing import Any

from compozy_memory._model.limits import (
    DATA_FORMAT,
    INDEX_BATCH_BYTES,
    INDEX_BATCH_DOCS,
    INDEX_STEP_DOCS,
    STEP_FIELDS,
)
from compozy_memory._search.analysis import ANALYZER_VERSION
from compozy_memory._search.merging import (
    merged_segment,
    plan_merge,
    read_chunks,
    step_segments,
    write_chunks,
)
from compozy_memory._search.runtime.index_calls import (
    IndexAdded,
    IndexPending,
    IndexProgress,
    IndexState,
    covered,
)
from compozy_memory._search.segments import (
    SegmentEntry,
)
from compozy_memory._wire.background import Backgrounded, Debounced
from compozy_memory._wire.effects import MetricsSink, Observe, Offload
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.steps import Steps, op
from compozy_memory.errors import (
    BackendUnavailableError,
    CompozyMemoryError,
    ConflictError,
    MessageTooLargeError,
)

__all__ = ["IndexProgress", "Indexer"]

log = logging.getLogger("compozy_memory.index")

#: Bytes of envelopes one pending read returns (at least one envelope, whatever its size).
_READ_BYTES = 1024 * 1024
#: Building or merging more documents than this at once goes to a worker thread.
_THREAD_DOCS = 32
#: Bytes of segment fields one call writes (a step's segment, a part of a merge), and one
#: read of a merge's inputs asks for (by the inputs' mean field size): each call then holds
#: the server well under a millisecond for its bytes.
_WRITE_BYTES = 256 * 1024
_READ_BYTES_EACH = 512 * 1024
#: Merges one catch-up runs at most (the next write's catch-up goes on).
_MERGES_PER_CATCH_UP = 4


class Indexer(Backgrounded):
    """Keeps one memory's index caught up; a :class:`~compozy_memory.MemoryInstance` owns one.

    :meth:`catch_up` and :meth:`compact` are steps: ``await`` them on an async handle's
    indexer; a :class:`~compozy_memory.SyncMemoryInstance` runs them itself."""

    def __init__(
        self,
        gateway: MemoryGateway,
        *,
        metrics: MetricsSink | None = None,
        name: str = "memory",
        debounce: float = 0.2,
        delay: float | None = None,
        background: bool = True,
    ) -> None:
        self.gateway = gateway
        #: Where the index's lag is measured (None: the metrics of the driver that runs it).
        self.metrics = metrics
        self.name = name
        self.debounce = debounce
        #: How long writes wait for more to batch with (fewer than ``INDEX_BATCH_DOCS``):
        #: the policy's ``search.index_delay`` unless given.
        self.delay = gateway.policy.search.index_delay if delay is None else delay
        #: Messages (and their bytes) this handle wrote since its last catch-up started, and
        #: whether one has started: a handle's first write is indexed a debounce later, so
        #: handles that live a request each still keep the index near the writes.
        self.unstepped = 0
        self._unstepped_bytes = 0
        self._stepped = False
        #: False: writes never start a catch-up (:meth:`catch_up` and operations that need
        #: it do).
        self.background = background
        #: A write of this handle has left messages the index has not seen.
        self.dirty = False
        #: The memory's policy keeps an index (``search: {enabled: false}``: none at all).
        self.enabled = gateway.policy.search.enabled
        # Search off: whether this handle has dropped the index (once is enough).
        self._off = False
        self._job = Debounced.of_steps(
            lambda: self._catch_up(None, merge=False),
            gateway.transport,
            debounce,
            failed=self._failed,
            retries=False,
        )
        # A background catch-up leaves its merges to a job of their own: a cascade of tier
        # merges can take a writer's CPU for a second under load, and the steps go on
        # meanwhile (they race as two replicas' indexers do).
        self._merges = Debounced.of_steps(
            lambda: self._merge_job(), gateway.transport, 0.0, failed=self._failed, retries=False
        )
        #: The segment list the last background step returned, for the merge job's plan
        #: (a sync handle's two jobs run on two threads: taken and set under the lock).
        self._known: IndexAdded | None = None
        self._known_lock = threading.Lock()

    @property
    def transport(self) -> Any:
        return self.gateway.transport

    def notice(self, count: int = 1, size: int = 0, *, soon: bool = False) -> None:
        """A write made ``count`` messages (``size`` bytes) to index: catch up a debounce
        later on this handle's first write (it takes what others left), once
        ``INDEX_BATCH_DOCS`` messages or ``INDEX_BATCH_BYTES`` wait, or ``soon`` (a
        summary); else after ``delay``, for a batch."""
        if not self.enabled and self._off:
            return
        self.dirty = True
        self.unstepped += count
        self._unstepped_bytes += size
        if not self.background or self.gateway.read_only:
            return
        due = (
            soon
            or not self._stepped
            or self.unstepped >= INDEX_BATCH_DOCS
            or self._unstepped_bytes >= INDEX_BATCH_BYTES
        )
        # A delay shorter than the debounce (0: no batching) is the debounce: a burst of
        # writes still takes one step.
        self._job.fire(None if due or self.delay <= self.debounce else self.delay)

    def _failed(self, exc: CompozyMemoryError) -> None:
        """A background catch-up's failure: logged, the next write tries again; a server out
        of reach (or a client closed under the work) at debug level: no news to its owner."""
        if isinstance(exc, BackendUnavailableError):
            log.debug(
                "indexing %s stopped: %s", self.gateway.name, exc, extra={"memory": self.name}
            )
            return
        log.exception("indexing %s failed", self.gateway.name, extra={"memory": self.name})

    # -- steps ------------------------------------------------------------------------------

    async def wait_idle(self) -> None:
        """Wait for the background work, if any: the catch-up (one held back for a batch
        starts now), then the merges it left (and again if a catch-up started meanwhile: a
        write while the merges ran)."""
        while True:
            await self._job.wait_idle()
            await self._merges.wait_idle()
            if self._job.task_idle and self._merges.task_idle:
                return

    def close(self) -> None:
        """Start no more background work: what was due and not started is dropped, what
        runs ends with its current step (the next operation that needs it does it itself)."""
        self._job.close()
        self._merges.close()

    def wait_idle_sync(self, timeout: float | None = None) -> bool:
        """:meth:`wait_idle` for a sync handle's indexer; False if ``timeout`` passed."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        while True:
            if not self._job.wait_idle_sync(left()) or not self._merges.wait_idle_sync(left()):
                return False
            if self._job.thread_idle and self._merges.thread_idle:
                return True

    @op
    def catch_up(self, *, max_steps: int | None = None) -> Steps[IndexProgress]:
        """Index what is waiting, a step at a time, until nothing is (or ``max_steps``
        steps were written); then merge segments as their tiers fill up."""
        return (yield from self._catch_up(max_steps, merge=True))

    def _merge_job(self) -> Steps[None]:
        """The background merges a catch-up left: planned on the list its last step saw."""
        with self._known_lock:
            known, self._known = self._known, None
        if self.enabled and known is not None:
            yield from self._maintain(known)

    def _catch_up(self, max_steps: int | None, *, merge: bool) -> Steps[IndexProgress]:
        """:meth:`catch_up`; its merges here when ``merge``, else in the merge job."""
        self.unstepped = self._unstepped_bytes = 0
        self._stepped = True
        steps = indexed = 0
        unindexed = 0
        caught_up = False
        last: IndexAdded | None = None
        if not self.enabled:
            # No index is kept: drop one an earlier configuration left (once per handle), so
            # messages move to the archive without waiting for one.
            if not self._off:
                yield from self.gateway.index_reset(force=True, off=True)
                self._off = True
            self.dirty = False
            return IndexProgress(0, 0, 0)
        while max_steps is None or steps < max_steps:
            pending = yield from self.gateway.index_pending(INDEX_STEP_DOCS, _READ_BYTES)
            if not pending.incarnation:
                # No memory (never written, or every key's deadline passed): nothing to index.
                # Its missing meta reads as format 1, and index_reset finds no memory to
                # reset: asking again would go on without end, max_steps or not.
                caught_up = True
                unindexed = 0
                break
            if pending.fmt < DATA_FORMAT or self._stale_analyzer(pending):
                yield from self.gateway.index_reset(force=pending.fmt >= DATA_FORMAT)
                log.info(
                    "index of %s dropped to be built again (format %d, analyser %s)",
                    self.gateway.name,
                    pending.fmt,
                    pending.analyzer or "none",
                    extra={"memory": self.name},
                )
                continue
            unindexed = max(0, pending.last_id - pending.ix_next + 1)
            if pending.idle:
                caught_up = True
                unindexed = 0
                break
            try:
                added, whole = yield from self._step(pending)
            except ConflictError as exc:
                if "merge first" not in str(exc):
                    raise
                steps += 1
                if not (yield from self._maintain(None, force=True)):
                    # Every segment is claimed by merges under way (or one that died holds its
                    # claim until MERGE_LEASE_MS): stop here, the next catch-up goes on.
                    break
                continue
            steps += 1
            if added.applied:
                indexed += added.indexed
                last = added
                if whole:
                    # The step took everything pending was: caught up as of that read (this
                    # handle's later writes fire the trigger again), without one more read.
                    caught_up = True
                    unindexed = 0
                    break
        self.dirty = not caught_up
        yield from Observe("index_unindexed", (self.name,), unindexed, self.metrics)
        if steps and merge:
            yield from self._maintain(last)
        elif steps and last is not None:
            with self._known_lock:
                self._known = last
            self._merges.fire()
        return IndexProgress(steps, indexed, unindexed)

    @op
    def compact(self) -> Steps[int]:
        """Merge every segment into one (removed documents purged) and delete what merges
        left; returns how many segments were merged away."""
        merged = 0
        if not self.enabled:
            return merged
        while True:
            state = yield from self.gateway.index_read()
            if state.garbage or state.merges:
                yield from self._collect()
                state = yield from self.gateway.index_read()
            if state.merges:
                return merged  # another indexer's merge holds some: let it finish
            inputs = plan_merge(state.segments, everything=True)
            if not inputs:
                return merged
            done = yield from self._merge(inputs, state.incarnation)
            if not done:
                return merged
            merged += len(inputs) - 1

    # -- a step ---------------------------------------------------------------------------

    def _stale_analyzer(self, pending: IndexPending) -> bool:
        if not pending.analyzer or pending.analyzer == str(ANALYZER_VERSION):
            return False
        if int(pending.analyzer) > ANALYZER_VERSION:
            raise ConflictError(
                f"the index of this memory was built by a newer analyser ({pending.analyzer}); "
                f"this release analyses with version {ANALYZER_VERSION}: upgrade it",
                key=self.gateway.name,
            )
        return True

    def _step(self, pending: IndexPending) -> Steps[tuple[IndexAdded, bool]]:
        """Write one step: what ``pending`` holds, cut down to what fits one call; and
        whether it took all of it, leaving nothing pending as of that read."""
        items = list(pending.adds)
        gones = list(pending.gones)
        heavy = len(items) + len(gones) > _THREAD_DOCS
        while True:
            if heavy:
                built = yield from Offload(partial(step_segments, items, gones))
            else:
                built = step_segments(items, gones)
            documents, positive, negative = built
            size = sum(e.size + 8 * len(e.fields) for e in (positive, negative) if e)
            fields = sum(len(e.fields) for e in (positive, negative) if e)
            if size <= _WRITE_BYTES and fields <= STEP_FIELDS:
                break
            if len(items) + len(gones) <= 1:
                raise MessageTooLargeError(
                    "one message's index segment does not fit one call", key=self.gateway.name
                )
            # Half as much: the rest waits for the next step. One message and one removal
            # that do not fit together go in steps of their own (the removal's next).
            if len(items) > 1:
                items = items[: len(items) // 2]
            elif len(gones) > 1:
                gones = gones[: len(gones) // 2]
            else:
                gones = []
        upto, seq_upto = covered(pending, items)
        applied = yield from self.gateway.index_add(
            pending,
            analyzer=str(ANALYZER_VERSION),
            upto=upto,
            seq_upto=seq_upto,
            documents=documents,
            positive=positive,
            negative=negative,
            gone=len(gones),
            gone_first=int(gones[0]["id"]) if gones else 0,
        )
        if not applied.applied:
            return applied, False  # another indexer moved the index meanwhile: read again
        oldest = items[0][2].get("ts") if items else None
        if isinstance(oldest, int | float):
            lag = max(0.0, time.time() - oldest / 1000)
            yield from Observe("index_lag", (self.name,), lag, self.metrics)
        # Removals and the archive's cap come in steps of their own size: after those, read
        # again (the cap's step may have made more).
        whole = (
            len(items) == len(pending.adds)
            and not pending.gones
            and pending.upto >= pending.last_id
            and applied.ix_seq == 0
            and pending.over_cap == 0
        )
        return applied, whole

    # -- merges ---------------------------------------------------------------------------

    def _maintain(self, known: IndexAdded | None, *, force: bool = False) -> Steps[bool]:
        """Merge the segments whose tiers are full (a few merges at most: the next catch-up
        goes on), and delete what merges left; ``known``: the list a step just returned
        (saves a read). Whether a merge was stored."""
        merged = False
        for _ in range(_MERGES_PER_CATCH_UP):
            state: IndexAdded | IndexState
            if known is not None:
                state, known = known, None
            else:
                state = yield from self.gateway.index_read()
            if state.garbage or state.merges:
                # Merges whose claim lapsed go too (the server's clock decides).
                yield from self._collect()
                state = yield from self.gateway.index_read()
            claimed = {g for m in state.merges for g in m.inputs}
            inputs = plan_merge(state.segments, claimed, everything=force and not claimed)
            if not inputs:
                return merged
            done = yield from self._merge(inputs, state.incarnation)
            if not done:
                return merged
            merged = True
            force = False
        return merged

    def _collect(self) -> Steps[None]:
        """Delete what merges left, and drop merges whose claim lapsed (bounded steps)."""
        left = 1
        while left:
            left = yield from self.gateway.index_gc()

    def _merge(self, inputs: list[SegmentEntry], incarnation: str) -> Steps[bool]:
        """Read ``inputs`` (entries of the list of the memory's ``incarnation``), merge them
        here and store the result in their place; False when another indexer got there first
        (nothing lost: the inputs stay)."""
        gens = [e.gen for e in inputs]
        values: dict[str, bytes | None] = {}
        reads = read_chunks(inputs, _READ_BYTES_EACH)
        for chunk in reads:
            state = yield from self.gateway.index_read(gens, chunk)
            # Merged away, or the memory expired and was written again since the list was
            # read: generations start again there, so the entries planned on would name its
            # segments (other first ids, buckets): nothing of it is merged on them.
            if state.stale or not incarnation or state.incarnation != incarnation:
                return False
            values.update(state.values)
        if not reads:
            return False
        parts = sum(e.docs for e in inputs)
        work = (inputs, values)
        if parts > _THREAD_DOCS:
            output = yield from Offload(lambda: merged_segment(*work))
        else:
            output = merged_segment(*work)
        fields = output.fields if output is not None else {}
        chunks = write_chunks(fields, _WRITE_BYTES)
        try:
            done, gen = yield from self.gateway.index_merge(
                gens, output, chunks[0], incarnation=incarnation
            )
            for part in chunks[1:-1]:
                yield from self.gateway.index_put(gen, part, incarnation=incarnation)
            if not done:
                done, _ = yield from self.gateway.index_merge(
                    gens, output, chunks[-1], incarnation=incarnation, reservation=gen
                )
        except ConflictError:
            return False  # another merge took an input (or the index was dropped)
        return done
