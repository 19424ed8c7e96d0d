"""MemoryInstance: one conversation memory in Redis, changed only by atomic scripts."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from datetime import timedelta
from typing import Any, Literal, Protocol

from compozy_memory import _telemetry
from compozy_memory._metrics import MemoryMetrics
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.limits import MOVE_STEP
from compozy_memory._model.messages import Message
from compozy_memory._model.policy import MemoryPolicy
from compozy_memory._model.results import (
    AppendResult,
    FlushResult,
    MemoryHealth,
    Snapshot,
    TrimResult,
)
from compozy_memory._model.tokens import TokenCounter, default_counter
from compozy_memory._search.dense import Embedder
from compozy_memory._search.fusion import DEFAULT_FUSION, Fusion
from compozy_memory._store.edits import replace_live, trim_oldest
from compozy_memory._store.encoding import (
    MessageInput,
    dedupe_token,
    encode_messages,
    ttl_millis,
)
from compozy_memory._store.facts import Facts
from compozy_memory._store.indexer import Indexer
from compozy_memory._store.offload import PinKeeper, clear_releasing_pins, offloaded
from compozy_memory._store.reads import ContextReads
from compozy_memory._store.results_store import Namespace, ResultStore
from compozy_memory._store.vectors import Vectorizer
from compozy_memory._wire.eviction import eviction_policy, eviction_warning
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.retry import RetryPolicy
from compozy_memory._wire.scripts import ScriptArg
from compozy_memory._wire.translate import RedisClient
from compozy_memory._wire.transport import Transport
from compozy_memory.errors import (
    ConfigurationError,
    InvalidMessageError,
    UsageError,
)

__all__ = ["Facts", "FlushHook", "IndexHook", "Indexer", "MemoryInstance", "MessageInput"]


_log = logging.getLogger("compozy_memory")


class IndexHook(Protocol):
    """What a handle tells its session index (the manager attaches one): never waits."""

    def noticed(self, memory: MemoryInstance, result: AppendResult) -> None: ...

    def removed(
        self, memory: MemoryInstance, *, last_id: int, messages: int, tokens: int
    ) -> None: ...


class FlushHook(Protocol):
    """What a handle needs of whatever flushes it (the manager attaches a Flusher)."""

    def notice(self, result: AppendResult) -> None: ...

    async def flush(self) -> FlushResult: ...

    async def wait_idle(self) -> None: ...


class MemoryInstance(ContextReads):
    """An async handle on one memory instance.

    Works with ``redis.asyncio.Redis`` and ``redis.asyncio.RedisCluster`` alike, decoding
    responses or not. Every write is one script call, so concurrent replicas never overwrite
    one another; a read-only handle raises :class:`ReadOnlyMemoryError` before any write
    reaches Redis. On a standalone client, calls made by many handles in the same event-loop
    iteration go out as one pipeline; ``batching=False`` sends each call on its own.

    Calls that meet an unreachable server are retried within ``retry``; every call is safe to
    repeat, appends included.

    The search index is kept off the write path: after this handle's writes its
    :attr:`indexer` catches up in the background, in bounded steps (``background_index=False``
    leaves that to the operations that need it: a search indexes this handle's writes first,
    and trim, replace and flush the messages they move).

    With an ``embedder`` (:class:`~compozy_memory.Embedder`), :attr:`vectors` keeps a dense
    vector of every indexed message the same way, and :meth:`search` and a query's
    :meth:`context` fuse BM25 with dense scores as ``fusion`` says
    (:data:`~compozy_memory.DEFAULT_FUSION` by default).
    """

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
        self.client = client
        self.keys = keys
        self.policy = policy or MemoryPolicy()
        self.counter = counter if counter is not None else default_counter()
        self.read_only = read_only
        #: The instance's key prefix, named in errors and logs.
        self.key = keys.prefix
        #: The memory resource id metrics and logs are labelled with (the manager's).
        self.memory_id = memory_id
        transport = Transport(
            client,
            retry=retry,
            wait=self.policy.wait,
            batching=batching,
            key=self.key,
            memory=memory_id,
            metrics=metrics,
        )
        #: How long calls keep trying when Redis is unreachable.
        self.retry = transport.retry
        #: Every script call of this memory goes through the gateway.
        self.gateway = MemoryGateway(
            transport,
            keys,
            self.policy,
            read_only=read_only,
            memory=memory_id,
            metrics=transport.metrics,
        )
        #: Keeps the search index caught up, in the background after this handle's writes
        #: (``await memory.indexer.catch_up()`` to wait for it).
        self.indexer = Indexer(
            self.gateway, metrics=transport.metrics, name=memory_id, background=background_index
        )
        #: Dense scores fused with BM25 in :meth:`search` and a query's :meth:`context`:
        #: none by default. ``vectors`` keeps the memory's vectors caught up with its index
        #: (``await memory.vectors.catch_up()`` to wait for it).
        self.embedder = embedder
        self.fusion = fusion or DEFAULT_FUSION
        self.vectors = (
            Vectorizer(
                self.gateway, embedder, self.indexer, name=memory_id, background=background_index
            )
            if embedder is not None
            else None
        )
        #: Session facts (the kernel layer of :meth:`context`): ``await memory.facts.set(...)``.
        self.facts = Facts(self)
        #: Where ``append(..., offload=True)`` stores large results, and the recall tools
        #: load them from. By default a store that sees only the project's global namespace:
        #: give one opened for your agent (``ResultStore(..., agent=...)``) to keep them apart.
        self.results = results or ResultStore(client, keys.project, transport=transport)
        #: Renews the TTL of the results this memory's messages pin, as its writes renew its.
        self.pins = PinKeeper(self)
        self._flusher: FlushHook | None = None
        self._index: IndexHook | None = None
        # The last id this handle's writes returned, for the index after a trim or clear.
        self._last_id: int | None = None

    @classmethod
    def open(cls, client: RedisClient, *, project: str, key: str, **options: Any) -> MemoryInstance:
        """A handle on ``key`` (encoded) in ``project``'s namespace."""
        return cls(client, InstanceKeys.build(project, key), **options)

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "read-write"
        return f"<MemoryInstance {self.keys.prefix} {mode}>"

    # -- writes -------------------------------------------------------------------------

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
        return await self.append_many(
            (message,), dedupe_key=dedupe_key, offload=offload, namespace=namespace
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
        self._check_writable("append")
        token = self._dedupe_token(dedupe_key)
        if offload:
            messages = await offloaded(self, messages, namespace or Namespace.global_())
        if _telemetry.capturing():  # opt-in: the messages go on the span
            messages = list(messages)
            with _telemetry.content(records=_records(messages)):
                return await self._append(messages, token)
        return await self._append(messages, token)

    async def _append(self, messages: Iterable[MessageInput], token: str) -> AppendResult:
        args = await self._encode(messages)
        if not args:
            raise InvalidMessageError("append_many needs at least one message", key=self.key)
        result = await self.gateway.append(args, token)
        self._noticed()
        self.pins.notice()
        if self._flusher is not None:
            self._flusher.notice(result)
        if self._index is not None:
            self._last_id = result.last_id
            self._index.noticed(self, result)
        return result

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
        self._check_writable("replace")
        if if_last_id is not None and (not isinstance(if_last_id, int) or if_last_id < 0):
            raise UsageError(
                f"if_last_id must be an integer >= 0, got {if_last_id!r}", key=self.key
            )
        token = self._dedupe_token(dedupe_key)
        args = await self._encode(messages)
        incarnation = if_incarnation if if_incarnation is not None else self.gateway.incarnation
        if if_last_id is not None and not incarnation:
            raise UsageError(
                "replace(if_last_id=...) needs the incarnation that id was read in: read or "
                "write through this handle first, or pass if_incarnation= (or use if_version=)",
                key=self.key,
            )
        result = await replace_live(
            self.gateway,
            self.indexer,
            args,
            if_last_id=if_last_id,
            if_incarnation=incarnation if if_last_id is not None else "",
            if_version=if_version,
            token=token,
        )
        self._noticed()
        if self._index is not None:
            self._last_id = result.last_id
            self._index.noticed(self, result)
        return result

    async def trim(
        self, *, keep_messages: int | None = None, max_tokens: int | None = None
    ) -> TrimResult:
        """Remove the oldest messages until at most ``keep_messages`` and ``max_tokens`` remain.

        Priority 0 messages are never removed. Removed originals go to the archive, at most
        ``MOVE_STEP`` (1,000) a call to Redis, so a long trim never holds the server; an
        interrupted trim has trimmed less, and lost nothing.
        """
        self._check_writable("trim")
        for name, value in (("keep_messages", keep_messages), ("max_tokens", max_tokens)):
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise UsageError(
                    f"{name} must be a non-negative integer, got {value!r}", key=self.key
                )
        result = await trim_oldest(self.gateway, self.indexer, keep_messages, max_tokens)
        self.gateway.metrics.trims.labels(memory=self.memory_id, strategy="oldest").inc()
        self._removed(result.total_count, result.total_tokens)
        return result

    async def clear(self) -> int:
        """Remove every message, summary, archived original and session fact; return how
        many messages were live.

        Results the removed messages pinned (``append(..., offload=True)``) are released
        after the clear: read first, released once each after. A message appended between
        the read and the clear keeps its pin (it ends with the memory's TTL), and a release
        that fails is logged, never raised: the clear has happened."""
        self._check_writable("clear")
        removed = await clear_releasing_pins(self)
        self._removed(0, 0)
        return removed

    async def set_ttl(self, ttl: timedelta | float | None) -> int:
        """Set (seconds or timedelta) or remove (None) the TTL of every key of the instance.

        Later writes through this handle keep the new TTL. Returns how many keys exist.
        """
        self._check_writable("set_ttl")
        return await self.gateway.expire(ttl_millis(ttl, self.key))

    # -- reads --------------------------------------------------------------------------

    async def snapshot(self, limit: int = MOVE_STEP) -> Snapshot:
        """Totals, summaries and the oldest live messages until ``limit`` that are not pinned
        (at most ``MOVE_STEP``, 1,000), read atomically.

        The totals always cover the whole memory, so a bounded snapshot is enough to plan
        a flush of a memory far larger than the limit."""
        if not isinstance(limit, int) or not 1 <= limit <= MOVE_STEP:
            raise UsageError(
                f"snapshot limit must be in [1, {MOVE_STEP}], got {limit!r}", key=self.key
            )
        return await self.gateway.snapshot(limit)

    async def recall(self, offset: int = 0, limit: int = 100) -> list[Message]:
        """Originals removed by trims, replaces and flushes, oldest first."""
        if not isinstance(offset, int) or not isinstance(limit, int) or offset < 0 or limit <= 0:
            raise UsageError("recall needs offset >= 0 and limit > 0", key=self.key)
        return await self.gateway.archived(offset, limit)

    def attach_flusher(self, flusher: FlushHook) -> None:
        """Flush in the background once appends pass the flusher's threshold."""
        self._check_writable("attach_flusher")
        self._flusher = flusher

    async def export_transcript(
        self, format: Literal["markdown", "jsonl"] = "markdown", *, include_archived: bool = False
    ) -> str:
        """The memory as Markdown (to read: speakers, times, tool calls folded, summaries
        marked) or JSON Lines (to move: :meth:`import_transcript` reads it back with the
        same ids, times, priorities and blocks), in one consistent read. JSON Lines always
        carry the archived originals, so nothing is lost; Markdown shows them with
        ``include_archived=True``."""
        from compozy_memory._store import transcripts

        if format == "markdown":
            return await transcripts.export_markdown(self, include_archived=include_archived)
        if format == "jsonl":
            return await transcripts.export_jsonl(self, include_archived=True)
        raise UsageError(f"format is 'markdown' or 'jsonl', got {format!r}", key=self.key)

    async def import_transcript(self, text: str) -> int:
        """Write a JSON Lines transcript (:meth:`export_transcript`) into this memory, which
        must be empty, keeping every id and timestamp; returns the live messages."""
        self._check_writable("import_transcript")
        from compozy_memory._store import transcripts

        count = await transcripts.import_transcript(self, text)
        self._noticed()  # the import's messages are indexed (and embedded) from here on
        return count

    def attach_index(self, hook: IndexHook | None) -> None:
        """Told of every append and replace (``noticed``), and of trims and clears
        (``removed``): the manager's session index (its flusher tells it of flushes). A hook
        never waits and never raises: the write has happened."""
        self._index = hook

    def _removed(self, messages: int, tokens: int) -> None:
        """Tell the index the totals after a trim or clear, under the last id this handle
        wrote (a handle that never wrote leaves the entry as it is, until its next write)."""
        if self._index is not None and self._last_id is not None:
            self._index.removed(self, last_id=self._last_id, messages=messages, tokens=tokens)

    @property
    def flusher(self) -> FlushHook | None:
        return self._flusher

    async def flush(self) -> FlushResult:
        """Flush now (waiting for nothing: if another replica holds the lock, this one skips)."""
        self._check_writable("flush")
        if self._flusher is None:
            raise ConfigurationError(
                "this memory has no flusher: open it through MemoryManager or attach one",
                key=self.key,
            )
        return await self._flusher.flush()

    async def len(self) -> int:
        """Number of live messages."""
        return await self.gateway.length()

    async def token_count(self) -> int:
        """Exact tokens of the live messages, from the totals the scripts keep."""
        return await self.gateway.token_count()

    async def health(self) -> MemoryHealth:
        """The memory's totals and sizes in one consistent read, what the indexer has still
        to do, the parts whose keys are gone (``evicted``) and the server's eviction policy,
        with a warning when it may evict part of this memory (logged too)."""
        health = await self.gateway.health()
        policy = await eviction_policy(self.client)
        warning = eviction_warning(policy, ttl=health.ttl_ms is not None)
        if warning:
            _log.warning("%s: %s", self.key, warning)
        return dataclasses.replace(health, eviction_policy=policy, eviction_warning=warning)

    # -- internals ----------------------------------------------------------------------

    def _noticed(self) -> None:
        """A write left messages to index (and to embed, with an embedder)."""
        self.indexer.notice()
        if self.vectors is not None:
            self.vectors.notice()

    def _dedupe_token(self, dedupe_key: str | None) -> str:
        return dedupe_token(dedupe_key, self.key)

    async def _encode(self, messages: Iterable[MessageInput]) -> list[ScriptArg]:
        return await encode_messages(messages, self.policy, self.counter, self.key)


def _records(messages: list[MessageInput]) -> list[tuple[str, str]]:
    """(role, text) of each message, for a span that captures content."""
    parsed = [Message.parse(m) if isinstance(m, dict | Message) else None for m in messages]
    return [(m.role, m.text) for m in parsed if m is not None]
