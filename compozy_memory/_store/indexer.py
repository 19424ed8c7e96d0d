"""The indexer: keeps a memory's search index caught up, off the write path, in bounded steps.

Appends never index. After a write this handle made, the indexer runs in the background
(debounced: a task of the event loop for an async handle, a background thread for a sync one,
:mod:`compozy_memory._wire.background`): it asks Redis what is not indexed yet
(``lua/index_pending.lua``: the live tail past the index, new summaries, and while an index is
rebuilt the archive), analyses the text here (only the client can stem), and writes one step of
at most ``INDEX_STEP_DOCS`` documents and ``INDEX_STEP_POSTINGS`` postings
(``lua/index_apply.lua``). Every step is checked against where the index stood when it was
read, so indexers on many replicas can race: one step wins, the others read again. A message
moves to the archive only once indexed (trim, replace and a flush run the indexer first when
they must), so search never misses an archived message; the live tail it has not reached yet is
what ``unindexed`` counts. Removed documents (dropped by the archive's cap) leave the document
frequencies through the same steps, and compaction rewrites the blocks holding their postings
once they are a quarter of all.

``compozy_memory_index_lag_seconds`` observes, per step, how long its oldest message waited
since it was appended (server clocks); ``compozy_memory_index_unindexed`` is the number of
messages this process last saw waiting.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from compozy_memory._model.limits import (
    DATA_FORMAT,
    INDEX_STEP_DOCS,
    INDEX_STEP_POSTINGS,
    MAX_CALL_BYTES,
)
from compozy_memory._model.messages import Message
from compozy_memory._search.analysis import ANALYZER_VERSION
from compozy_memory._search.documents import document, document_terms
from compozy_memory._wire.background import Backgrounded, Debounced
from compozy_memory._wire.effects import MetricsSink, Observe, Offload
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.replies import IndexPending
from compozy_memory._wire.steps import Steps, op
from compozy_memory.errors import CompozyMemoryError, ConflictError

__all__ = ["IndexProgress", "Indexer"]

log = logging.getLogger("compozy_memory.index")

#: Bytes of envelopes one pending read returns (at least one envelope, whatever its size).
_READ_BYTES = 1024 * 1024
#: Compaction starts once dead postings are this share of all, and at least this many.
_COMPACT_SHARE = 0.25
_COMPACT_MIN = 4_096
#: Analysing more documents than this at once goes to a worker thread.
_THREAD_DOCS = 32


@dataclass(frozen=True, slots=True)
class IndexProgress:
    """Where an index stands after :meth:`Indexer.catch_up`."""

    #: Steps written by this call.
    steps: int
    #: Documents this call indexed.
    indexed: int
    #: Messages still waiting (0: caught up) when the call stopped.
    unindexed: int


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
        debounce: float = 0.05,
        background: bool = True,
    ) -> None:
        self.gateway = gateway
        #: Where the index's lag is measured (None: the metrics of the driver that runs it).
        self.metrics = metrics
        self.name = name
        self.debounce = debounce
        #: False: writes never start a catch-up; only :meth:`catch_up` (and the operations
        #: that need an indexed message) do.
        self.background = background
        #: A write of this handle has left messages the index has not seen.
        self.dirty = False
        self._job = Debounced.of_steps(
            lambda: self.catch_up(), gateway.transport, debounce, failed=self._failed
        )

    @property
    def transport(self) -> Any:
        return self.gateway.transport

    # -- background trigger ---------------------------------------------------------------

    def notice(self) -> None:
        """A write made messages to index: catch up soon, in the background."""
        self.dirty = True
        if not self.background or self.gateway.read_only:
            return
        self._job.fire()

    def _failed(self, exc: CompozyMemoryError) -> None:
        """A background catch-up's failure: logged, the next write tries again."""
        log.exception("indexing %s failed", self.gateway.name, extra={"memory": self.name})

    # -- steps ------------------------------------------------------------------------------

    @op
    def catch_up(self, *, max_steps: int | None = None) -> Steps[IndexProgress]:
        """Index what is waiting, a step at a time, until nothing is (or ``max_steps``
        steps were written); compact when removed documents' postings have piled up."""
        steps = indexed = 0
        unindexed = 0
        caught_up = False
        while max_steps is None or steps < max_steps:
            pending = yield from self.gateway.index_pending(INDEX_STEP_DOCS, _READ_BYTES)
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
            applied = yield from self._step(pending)
            steps += 1
            if applied is not None:
                indexed += applied
        self.dirty = not caught_up
        yield from Observe("index_unindexed", (self.name,), unindexed, self.metrics)
        return IndexProgress(steps, indexed, unindexed)

    @op
    def compact(self) -> Steps[int]:
        """Run compaction to the end of a sweep; returns the postings it removed."""
        removed = 0
        while True:
            gone, _, _, done = yield from self.gateway.index_compact()
            removed += gone
            if done:
                return removed

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

    def _step(self, pending: IndexPending) -> Steps[int | None]:
        """Write one step: the longest run of what ``pending`` holds that fits one call."""
        adds, upto, seq_upto = yield from self._documents(pending)
        removed, gone_first = self._removed(
            pending.gones, INDEX_STEP_POSTINGS - adds[1], first=not adds[0]
        )
        applied = yield from self.gateway.index_apply(
            pending,
            analyzer=str(ANALYZER_VERSION),
            upto=upto,
            seq_upto=seq_upto,
            documents=adds[0],
            removed=removed,
            gone_first=gone_first,
        )
        if not applied.applied:
            return None  # another indexer moved the index meanwhile: read again
        if adds[2] is not None and adds[2].ts is not None:
            lag = max(0.0, time.time() - adds[2].ts / 1000)
            yield from Observe("index_lag", (self.name,), lag, self.metrics)
        if applied.dead_postings >= max(_COMPACT_MIN, _COMPACT_SHARE * applied.postings):
            yield from self.compact()
        return applied.indexed

    def _documents(
        self, pending: IndexPending
    ) -> Steps[tuple[tuple[list[str], int, Message | None], int, int]]:
        """The documents of ``pending.adds`` that fit one call, with the ids and seqs the
        step then covers: ((arguments, postings, the oldest message), upto, seq_upto)."""
        items = pending.adds
        if len(items) > _THREAD_DOCS:
            analysed = yield from Offload(lambda: _analyse(items))
        else:
            analysed = _analyse(items)
        documents: list[str] = []
        postings = size = 0
        upto, seq_upto = pending.upto, pending.seq_upto
        for (where, seq, message), (arg, n) in zip(items, analysed, strict=True):
            if documents and (
                postings + n > INDEX_STEP_POSTINGS
                or size + len(arg) > MAX_CALL_BYTES
                or len(documents) >= INDEX_STEP_DOCS  # live and archived: up to twice that
            ):
                # The rest waits for the next step: this one covers up to just before it (the
                # live tail and summaries come first, then the archive being rebuilt).
                if where == "a":
                    seq_upto = seq - 1
                else:
                    upto = (message.id or 0) - 1
                    seq_upto = max(0, pending.seq_from - 1)
                break
            documents.append(arg)
            postings += n
            size += len(arg)
        oldest = items[0][2] if items else None
        return (documents, postings, oldest), upto, seq_upto

    def _removed(
        self, gones: tuple[Message, ...], room: int, *, first: bool
    ) -> tuple[list[str], int]:
        """Removed documents' arguments that fit ``room`` postings (the first always, when
        ``first``: a step with nothing else to do), and the first one's id."""
        out: list[str] = []
        for message in gones:
            tf, _ = document_terms(message)
            if len(tf) > room and not (first and not out):
                break
            room -= len(tf)
            out.append(f"{message.id}\t0\t0\t0\t" + "\t".join(f"{t}\t{n}" for t, n in tf.items()))
        return out, (gones[0].id or 0) if out else 0


def _analyse(items: tuple[tuple[str, int, Message], ...]) -> list[tuple[str, int]]:
    """Each item's index argument and its number of postings."""
    out = []
    for where, seq, message in items:
        arg = document(message, seq=seq, summary=where == "s")
        out.append((arg, (arg.count("\t") - 3) // 2))
    return out
