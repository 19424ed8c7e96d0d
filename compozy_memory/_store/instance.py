"""MemoryInstance: an async handle on one conversation memory, changed only by atomic scripts."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any, Literal

from compozy_memory import _telemetry
from compozy_memory._facts.facts import Facts
from compozy_memory._io.connection import sync_twin
from compozy_memory._io.retry import RetryPolicy
from compozy_memory._io.translate import RedisClient
from compozy_memory._io.transport import Transport
from compozy_memory._metrics import MemoryMetrics
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.limits import MOVE_STEP
from compozy_memory._model.messages import Message
from compozy_memory._model.policy import MemoryPolicy
from compozy_memory._model.results import (
    AppendResult,
    ContextLayers,
    Conversation,
    FlushResult,
    Hits,
    MemoryHealth,
    Snapshot,
    TrimResult,
)
from compozy_memory._model.tokens import TokenCounter
from compozy_memory._results.store import Namespace, ResultStore
from compozy_memory._search.dense import Embedder
from compozy_memory._search.fusion import Fusion
from compozy_memory._search.runtime.indexer import Indexer
from compozy_memory._search.runtime.vectors import Vectorizer
from compozy_memory._store.core import (
    FlushHook,
    IndexHook,
    MemoryCore,
    MessageInput,
    committed,
)
from compozy_memory._store.sync_instance import SyncMemoryInstance

__all__ = ["FlushHook", "IndexHook", "Indexer", "MemoryInstance", "MessageInput"]


class MemoryInstance(MemoryCore):
    """An async handle on one memory instance.

    Works with ``redis.asyncio.Redis`` and ``redis.asyncio.RedisCluster`` alike, decoding
    responses or not. Every write is one script call, so concurrent replicas never overwrite
    one another; a read-only handle raises :class:`ReadOnlyMemoryError` before any write
    reaches Redis. On a standalone client, calls made by many handles in the same event-loop
    iteration go out as one pipeline; ``batching=False`` sends each call on its own.

    Calls that meet an unreachable server are retried within ``retry``; every call is safe to
    repeat, appends included. :class:`~compozy_memory.SyncMemoryInstance` is the same handle
    on redis-py's blocking client, for threads.

    The search index is kept off the write path: after this handle's writes its
    :attr:`indexer` catches up in the background, in bounded steps (``background_index=False``
    leaves that to the operations that need it: a search indexes this handle's writes first,
    and trim, replace and flush the messages they move).

    With an ``embedder`` (:class:`~compozy_memory.Embedder`), :attr:`vectors` keeps a dense
    vector of every indexed message the same way, and :meth:`search` and a query's
    :meth:`context` fuse BM25 with dense scores as ``fusion`` says
    (:data:`~compozy_memory.DEFAULT_FUSION` by default).

    Each method runs the operation's steps, ``memory.steps`` (:class:`~compozy_memory.MemorySteps`:
    the same names and parameters, as generators of effects), on this handle's driver; code
    that composes several operations into one program runs those steps itself.
    """

    transport: Transport

    def __init__(
        self,
        client: RedisClient,
        keys: InstanceKeys,
        *,
        policy: MemoryPolicy | None = None,
        counter: TokenCounter | None = None,
        read_only: bool = False,
        batching: bool = True,
        retry: RetryPolicy | None = None,
        memory_id: str = "memory",
        metrics: MemoryMetrics | None = None,
        results: ResultStore | None = None,
        background_index: bool = True,
        embedder: Embedder | None = None,
        fusion: Fusion | None = None,
    ) -> None:
        transport = Transport(
            client,
            retry=retry,
            wait=(policy or MemoryPolicy()).wait,
            batching=batching,
            key=keys.prefix,
            memory=memory_id,
            metrics=metrics,
        )
        super().__init__(
            client,
            keys,
            transport,
            policy=policy,
            counter=counter,
            read_only=read_only,
            memory_id=memory_id,
            metrics=metrics,
            results=results,
            background_index=background_index,
            embedder=embedder,
            fusion=fusion,
        )
        self.client: RedisClient = client
        #: Keeps the search index caught up, in the background after this handle's writes
        #: (``await memory.indexer.catch_up()`` to wait for it).
        self.indexer: Indexer = self.index_ops
        #: With an embedder, keeps the vectors caught up with the index, in the background
        #: after this handle's writes (``await memory.vectors.catch_up()`` to wait for it).
        self.vectors: Vectorizer | None = self.vector_ops
        #: Session facts (the kernel layer of :meth:`context`): ``await memory.facts.set(...)``.
        self.facts: Facts = self.fact_ops
        #: Where ``append(..., offload=True)`` stores large results, and the recall tools
        #: load them from. By default a store that sees only the project's global namespace:
        #: give one opened for your agent (``ResultStore(..., agent=...)``) to keep them apart.
        self.results: ResultStore = self.result_ops
        self._sync: SyncMemoryInstance | None = None

    @classmethod
    def open(cls, client: RedisClient, *, project: str, key: str, **options: Any) -> MemoryInstance:
        """A handle on ``key`` (encoded) in ``project``'s namespace."""
        return cls(client, InstanceKeys.build(project, key), **options)

    def to_sync(self) -> SyncMemoryInstance:
        """This memory on a blocking client of the same server(s), for calls that cannot
        await (from a thread, or inside a running loop without awaiting): made on first use
        from this client's settings (:func:`~compozy_memory._io.connection.sync_twin`),
        with this handle's policy, counter, mode, retries, flusher and session index."""
        if self._sync is None:
            twin = SyncMemoryInstance(
                sync_twin(self.client),
                self.keys,
                policy=self.policy,
                counter=self.counter,
                read_only=self.read_only,
                retry=self.retry,
                memory_id=self.memory_id,
                metrics=self.transport.metrics,
                embedder=self.embedder,
                fusion=self.fusion,
            )
            if self.flusher is not None:
                twin.attach_flusher(
                    self.flusher.twin(twin.gateway, twin.index_ops, committed(twin))
                )
            if self.session_index is not None:
                twin.attach_index(self.session_index.to_sync())
            self._sync = twin
        return self._sync

    # -- generated by scripts/gen_facades from compozy_memory/_operations: do not edit --

    # -- writes --------------------------------------------------------------------------

    async def append(
        self,
        message: MessageInput,
        *,
        dedupe_key: str | None = None,
        offload: bool = False,
        namespace: Namespace | None = None,
    ) -> AppendResult:
        """Store one message; Redis assigns its id and timestamp.

        With ``offload``, a message larger than the memory's ``max_tokens`` is not refused:
        its content goes to :attr:`results` (in ``namespace``, by default the global one) and
        the message keeps a short stub (kind, size, first lines) and ``metadata.result_ref``.
        """
        return await self.transport.drive(
            self.steps.append(message, dedupe_key=dedupe_key, offload=offload, namespace=namespace)
        )

    async def append_many(
        self,
        messages: Iterable[MessageInput],
        *,
        dedupe_key: str | None = None,
        offload: bool = False,
        namespace: Namespace | None = None,
    ) -> AppendResult:
        """Store several messages in one atomic step, in order, with consecutive ids.

        The append is applied at most once per ``dedupe_key`` (a random key per call when none
        is given, which makes the handle's own retries safe). Pass your own, such as the id of
        the event being recorded, to make retries across processes safe too: a repeat returns
        ``duplicate=True`` and writes nothing. A key is remembered until 1,000 more messages
        have been appended to the memory; it names one append, and reusing it for other
        messages stores nothing.
        """
        return await self.transport.drive(
            self.steps.append_many(
                messages, dedupe_key=dedupe_key, offload=offload, namespace=namespace
            )
        )

    async def replace(
        self,
        messages: Iterable[MessageInput],
        *,
        if_last_id: int | None = None,
        if_incarnation: str | None = None,
        if_version: str | None = None,
        dedupe_key: str | None = None,
    ) -> AppendResult:
        """Swap the conversation for ``messages``; the old ones go to the archive.

        With ``if_version`` (an :class:`AppendResult`'s or a :class:`Snapshot`'s ``version``)
        the swap happens only if nothing was written to the memory since: no append, trim,
        flush, replace or clear, even one that brought the last id back to the same number.
        With ``if_last_id`` only if no message was appended since the caller saw that id, in
        the same incarnation of the memory: ``if_incarnation``, by default the one this
        handle last saw (a read or a write through it); a handle that saw none refuses
        (:class:`UsageError`) rather than guess. Otherwise :class:`ConflictError` is raised
        and nothing changes. ``dedupe_key`` works as for :meth:`append_many`.

        A conversation of more than ``MOVE_STEP`` (1,000) live messages is first archived in
        bounded steps, its oldest first, then swapped: if the swap's condition then fails, the
        messages those steps moved stay in the archive.
        """
        messages = list(messages)
        with _telemetry.operation(self, "replace", records=len(messages)):
            return await self.transport.drive(
                self.steps.replace(
                    messages,
                    if_last_id=if_last_id,
                    if_incarnation=if_incarnation,
                    if_version=if_version,
                    dedupe_key=dedupe_key,
                )
            )

    async def trim(
        self, *, keep_messages: int | None = None, max_tokens: int | None = None
    ) -> TrimResult:
        """Remove the oldest messages until at most ``keep_messages`` and ``max_tokens`` remain.

        Priority 0 messages are never removed. Removed originals go to the archive, at most
        ``MOVE_STEP`` (1,000) a call to Redis, so a long trim never holds the server; an
        interrupted trim has trimmed less, and lost nothing.
        """
        with _telemetry.operation(self, "trim") as span:
            result = await self.transport.drive(
                self.steps.trim(keep_messages=keep_messages, max_tokens=max_tokens)
            )
            span.count(result.removed_count)
        return result

    async def clear(self) -> int:
        """Remove every message, summary, archived original and session fact; return how
        many messages were live.

        Results the removed messages pinned (``append(..., offload=True)``) are released
        after the clear: read first, released once each after. A message appended between
        the read and the clear keeps its pin (it ends with the memory's TTL), and a release
        that fails is logged, never raised: the clear has happened."""
        with _telemetry.operation(self, "clear") as span:
            result = await self.transport.drive(self.steps.clear())
            span.count(result)
        return result

    async def set_ttl(self, ttl: timedelta | float | None) -> int:
        """Set (seconds or timedelta) or remove (None) the TTL of every key of the instance.

        Later writes through this handle keep the new TTL. Returns how many keys exist.
        """
        return await self.transport.drive(self.steps.set_ttl(ttl))

    async def import_transcript(self, text: str) -> int:
        """Write a JSON Lines transcript (:meth:`export_transcript`) into this memory, which
        must be empty, keeping every id and timestamp; returns the live messages."""
        return await self.transport.drive(self.steps.import_transcript(text))

    async def flush(self) -> FlushResult:
        """Flush now (waiting for nothing: if another replica holds the lock, this one skips)."""
        return await self.transport.drive(self.steps.flush())

    # -- reads ---------------------------------------------------------------------------

    async def read(self, start: int = 0, stop: int = -1) -> list[Message]:
        """Messages from index ``start`` to ``stop`` inclusive, oldest first (LRANGE rules).

        A range of more than ``MAX_READ`` (1,000) messages is read a page a call, each call
        bounded; if a write changes the memory between two pages the read starts again
        (:class:`ConcurrentChangeError` after a few tries), so the result is one state of
        the memory."""
        with _telemetry.operation(self, "read") as span:
            result = await self.transport.drive(self.steps.read(start, stop))
            span.found(result)
        return result

    async def conversation(self) -> Conversation:
        """The summaries and every live message, from one state of the memory, with its
        version: read a page (``MAX_READ``) a call, starting again if a write lands between
        two pages. For a compare-and-set edit of the whole conversation:
        ``replace(kept, if_version=conversation.version)``."""
        return await self.transport.drive(self.steps.conversation())

    async def snapshot(self, limit: int = MOVE_STEP) -> Snapshot:
        """Totals, summaries and the oldest live messages until ``limit`` that are not pinned
        (at most ``MOVE_STEP``, 1,000), read atomically.

        The totals always cover the whole memory, so a bounded snapshot is enough to plan
        a flush of a memory far larger than the limit."""
        return await self.transport.drive(self.steps.snapshot(limit))

    async def recall(self, offset: int = 0, limit: int = 100) -> list[Message]:
        """Originals removed by trims, replaces and flushes, oldest first."""
        with _telemetry.operation(self, "recall") as span:
            result = await self.transport.drive(self.steps.recall(offset, limit))
            span.found(result)
        return result

    async def export_transcript(
        self, format: Literal["markdown", "jsonl"] = "markdown", *, include_archived: bool = False
    ) -> str:
        """The memory as Markdown (to read: speakers, times, tool calls folded, summaries
        marked) or JSON Lines (to move: :meth:`import_transcript` reads it back with the
        same ids, times, priorities and blocks), in one consistent read. JSON Lines always
        carry the archived originals, so nothing is lost; Markdown shows them with
        ``include_archived=True``."""
        return await self.transport.drive(
            self.steps.export_transcript(format, include_archived=include_archived)
        )

    async def read_window(
        self, max_tokens: int | None = None, *, max_messages: int | None = None
    ) -> list[Message]:
        """The pinned messages (priority 0), then the newest others that fit the rest of
        ``max_tokens`` (default: the policy's budget, none for a memory limited by count
        only), and at most ``max_messages`` of them (default: the policy's).

        The window is contiguous and ends at the newest message, and holds at most 2,000
        messages. A tool result whose call fell outside the window is dropped from its start,
        so the window can be sent to an LLM as it is. Raises ContextOverflowError if the
        pinned messages alone do not fit.
        """
        with _telemetry.operation(self, "read") as span:
            result = await self.transport.drive(
                self.steps.read_window(max_tokens, max_messages=max_messages)
            )
            span.found(result)
        return result

    async def context(
        self, max_tokens: int | None = None, *, query: str | None = None, reserve_output: int = 0
    ) -> list[Message]:
        """What to send an LLM, within ``max_tokens - reserve_output`` tokens, in one atomic
        read: the pinned messages (system prompt, profile), the rolling summary, messages
        recalled by the recall tools and the earlier messages that best answer ``query``
        (without one, the newest user turn's text: ``ContextPolicy.implicit_query``), then
        the newest messages, and (when all of those fit with room to spare) the newest
        archived originals before them. With an embedder the hits are BM25's fused with
        dense scores, as :meth:`search` ranks them. See :meth:`context_layers`.

        Raises ContextOverflowError if the pinned messages alone exceed the budget."""
        with _telemetry.operation(self, "context", query=query) as span:
            result = await self.transport.drive(
                self.steps.context(max_tokens, query=query, reserve_output=reserve_output)
            )
            span.found(result)
        return result

    async def context_layers(
        self, max_tokens: int | None = None, *, query: str | None = None, reserve_output: int = 0
    ) -> ContextLayers:
        """:meth:`context`, layer by layer. The shares come from the policy's
        :class:`ContextPolicy`; a tool call and its results are never split.

        With a ``max_messages`` policy, the recall layer, the backfill and the window together
        hold at most that many messages, the newest (the recall layer at most ``recall_share``
        of them, as of a token budget); a memory limited by count only has no token limit (and
        no backfill, which would then read the whole archive)."""
        with _telemetry.operation(self, "context", query=query) as span:
            result = await self.transport.drive(
                self.steps.context_layers(max_tokens, query=query, reserve_output=reserve_output)
            )
            span.found(result.messages)
        return result

    async def search(
        self,
        query: str,
        limit: int = 10,
        *,
        roles: Iterable[str] | None = None,
        since_id: int | None = None,
    ) -> Hits:
        """The messages that best match ``query`` (BM25 over the memory's index: live
        messages, archived ones and summaries, a turn's neighbours counting in its rank),
        best first, each with the turns before and after it and where it is
        (:attr:`Hit.where`). ``roles`` keeps only messages of those roles (``"summary"`` for
        summaries); ``since_id`` only messages with that id or newer.

        Messages appended moments ago are found too, from any handle: a search ranks the live
        messages the index has not reached yet itself (up to 128 of them). Past those,
        :attr:`Hits.unindexed` says how many messages search could not see (what this handle
        wrote is indexed first)."""
        with _telemetry.operation(self, "search", query=query) as span:
            result = await self.transport.drive(
                self.steps.search(query, limit, roles=roles, since_id=since_id)
            )
            span.found([h.message for h in result], [h.score for h in result])
        return result

    async def recall_messages(self, ids: Iterable[int]) -> list[Message]:
        """Bring archived messages back into context (the recall share of :meth:`context`):
        they stay until :meth:`clear_recalled`, or until newer recalls need their room.
        Returns the messages brought back now (unknown or already recalled ids are skipped)."""
        with _telemetry.operation(self, "recall_messages") as span:
            result = await self.transport.drive(self.steps.recall_messages(ids))
            span.found(result)
        return result

    async def clear_recalled(self) -> int:
        """Drop every recalled message from the context (they stay in the archive)."""
        return await self.transport.drive(self.steps.clear_recalled())

    async def len(self) -> int:
        """Number of live messages."""
        return await self.transport.drive(self.steps.len())

    async def token_count(self) -> int:
        """Exact tokens of the live messages, from the totals the scripts keep."""
        return await self.transport.drive(self.steps.token_count())

    async def health(self) -> MemoryHealth:
        """The memory's totals and sizes in one consistent read, what the indexer has still
        to do, the parts whose keys are gone (``evicted``) and the server's eviction policy,
        with a warning when it may evict part of this memory (logged too)."""
        return await self.transport.drive(self.steps.health())

    # -- end generated --

    async def aclose(self) -> None:
        """Stop this handle's background work: catch-ups of the index and vectors and
        flushes that were due are dropped, one under way ends with its current step, nothing
        is retried, and nothing is printed. The memory is unchanged and can be opened again;
        ``await memory.indexer.wait_idle()`` first waits for the index to catch up (and
        ``memory.flusher.wait_idle()`` for a flush). The Redis client is the caller's to
        close."""
        self._close_background()
