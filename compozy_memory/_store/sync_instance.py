"""SyncMemoryInstance: the same handle on one memory, on redis-py's blocking client.

Every method runs the steps :class:`~compozy_memory.MemoryInstance` runs (``memory.steps``,
:class:`~compozy_memory.MemorySteps`) on a
:class:`~compozy_memory._io.sync_transport.SyncTransport`, in the calling thread: no event
loop, so a sync handle works in plain threads and inside a running loop alike (there it blocks
the loop for the call, as any blocking client does). The methods are documented on
:class:`~compozy_memory.MemoryInstance`; what differs is said here. Both classes' methods are
generated from one table (:mod:`compozy_memory._operations`, ``scripts/gen_facades``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any, Generic, Literal, TypeVar

from compozy_memory import _telemetry
from compozy_memory._facts.facts import Facts
from compozy_memory._io.client_calls import SyncRedisClient
from compozy_memory._io.retry import RetryPolicy
from compozy_memory._io.sync_transport import SyncTransport
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
from compozy_memory._store.core import MemoryCore, MessageInput
from compozy_memory._wire.steps import blocking

__all__ = [
    "SyncFacts",
    "SyncIndexer",
    "SyncMemoryInstance",
    "SyncPart",
    "SyncResults",
    "SyncVectorizer",
]

A = TypeVar("A")


class SyncMemoryInstance(MemoryCore):
    """A blocking handle on one memory instance, for threads.

    Works with ``redis.Redis`` and ``redis.cluster.RedisCluster`` (see
    :func:`~compozy_memory.connect_sync`); one client and its handles may be shared by any
    number of threads. Every write is the same single script call as
    :class:`~compozy_memory.MemoryInstance`'s, retried within ``retry``, waited for replicas
    under a ``persistence.wait`` policy. Calls are not batched (each blocks only its thread).

    After writes, indexing (embedding, with an ``embedder``; flushing, for a manager's
    memory) runs on the process's background threads; :attr:`indexer` ``.wait_idle()`` waits
    for it. An embedder's coroutines run on the event loop a daemon thread keeps for
    summarizers.
    """

    transport: SyncTransport

    def __init__(
        self,
        client: SyncRedisClient,
        keys: InstanceKeys,
        *,
        policy: MemoryPolicy | None = None,
        counter: TokenCounter | None = None,
        read_only: bool = False,
        retry: RetryPolicy | None = None,
        memory_id: str = "memory",
        metrics: MemoryMetrics | None = None,
        results: ResultStore | None = None,
        background_index: bool = True,
        embedder: Embedder | None = None,
        fusion: Fusion | None = None,
    ) -> None:
        transport = SyncTransport(
            client,
            retry=retry,
            wait=(policy or MemoryPolicy()).wait,
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
        self.client: SyncRedisClient = client
        #: The indexer (``memory.indexer.wait_idle()`` waits for the background catch-up).
        self.indexer = SyncIndexer(self.index_ops, transport)
        #: With an embedder, keeps the vectors caught up (``memory.vectors.wait_idle()``).
        self.vectors = (
            SyncVectorizer(self.vector_ops, transport) if self.vector_ops is not None else None
        )
        #: Session facts: ``memory.facts.set("name", "Ada")``.
        self.facts = SyncFacts(self.fact_ops, transport)
        #: The result store of ``append(..., offload=True)`` and the recall tools.
        self.results = SyncResults(self.result_ops, transport)

    @classmethod
    def open(
        cls, client: SyncRedisClient, *, project: str, key: str, **options: Any
    ) -> SyncMemoryInstance:
        """A handle on ``key`` (encoded) in ``project``'s namespace."""
        return cls(client, InstanceKeys.build(project, key), **options)

    # -- generated by scripts/gen_facades from compozy_memory/_operations: do not edit --

    # -- writes --------------------------------------------------------------------------

    def append(
        self,
        message: MessageInput,
        *,
        dedupe_key: str | None = None,
        offload: bool = False,
        namespace: Namespace | None = None,
    ) -> AppendResult:
        """Store one message (:meth:`MemoryInstance.append`)."""
        return self.transport.drive(
            self.steps.append(message, dedupe_key=dedupe_key, offload=offload, namespace=namespace)
        )

    def append_many(
        self,
        messages: Iterable[MessageInput],
        *,
        dedupe_key: str | None = None,
        offload: bool = False,
        namespace: Namespace | None = None,
    ) -> AppendResult:
        """Store several messages in one atomic step (:meth:`MemoryInstance.append_many`)."""
        return self.transport.drive(
            self.steps.append_many(
                messages, dedupe_key=dedupe_key, offload=offload, namespace=namespace
            )
        )

    def replace(
        self,
        messages: Iterable[MessageInput],
        *,
        if_last_id: int | None = None,
        if_incarnation: str | None = None,
        if_version: str | None = None,
        dedupe_key: str | None = None,
    ) -> AppendResult:
        """Swap the conversation for ``messages`` (:meth:`MemoryInstance.replace`)."""
        messages = list(messages)
        with _telemetry.operation(self, "replace", records=len(messages)):
            return self.transport.drive(
                self.steps.replace(
                    messages,
                    if_last_id=if_last_id,
                    if_incarnation=if_incarnation,
                    if_version=if_version,
                    dedupe_key=dedupe_key,
                )
            )

    def trim(
        self, *, keep_messages: int | None = None, max_tokens: int | None = None
    ) -> TrimResult:
        """Archive the oldest messages in bounded steps (:meth:`MemoryInstance.trim`)."""
        with _telemetry.operation(self, "trim") as span:
            result = self.transport.drive(
                self.steps.trim(keep_messages=keep_messages, max_tokens=max_tokens)
            )
            span.count(result.removed_count)
        return result

    def clear(self) -> int:
        """Remove everything of the memory (:meth:`MemoryInstance.clear`)."""
        with _telemetry.operation(self, "clear") as span:
            result = self.transport.drive(self.steps.clear())
            span.count(result)
        return result

    def set_ttl(self, ttl: timedelta | float | None) -> int:
        """Set or remove the TTL of every key (:meth:`MemoryInstance.set_ttl`)."""
        return self.transport.drive(self.steps.set_ttl(ttl))

    def import_transcript(self, text: str) -> int:
        """Write a JSON Lines transcript into this empty memory
        (:meth:`MemoryInstance.import_transcript`)."""
        return self.transport.drive(self.steps.import_transcript(text))

    def flush(self) -> FlushResult:
        """Flush now, in this thread (:meth:`MemoryInstance.flush`); the summarizer runs on
        the summarizers' event loop thread."""
        return self.transport.drive(self.steps.flush())

    # -- reads ---------------------------------------------------------------------------

    def read(self, start: int = 0, stop: int = -1) -> list[Message]:
        """Messages from ``start`` to ``stop``, paged, one state (:meth:`MemoryInstance.read`)."""
        with _telemetry.operation(self, "read") as span:
            result = self.transport.drive(self.steps.read(start, stop))
            span.found(result)
        return result

    def conversation(self) -> Conversation:
        """Summaries and live messages of one state, with its version
        (:meth:`MemoryInstance.conversation`)."""
        return self.transport.drive(self.steps.conversation())

    def snapshot(self, limit: int = MOVE_STEP) -> Snapshot:
        """Totals, summaries and the oldest messages, read atomically
        (:meth:`MemoryInstance.snapshot`)."""
        return self.transport.drive(self.steps.snapshot(limit))

    def recall(self, offset: int = 0, limit: int = 100) -> list[Message]:
        """Archived originals, oldest first (:meth:`MemoryInstance.recall`)."""
        with _telemetry.operation(self, "recall") as span:
            result = self.transport.drive(self.steps.recall(offset, limit))
            span.found(result)
        return result

    def export_transcript(
        self, format: Literal["markdown", "jsonl"] = "markdown", *, include_archived: bool = False
    ) -> str:
        """The memory as Markdown or JSON Lines (:meth:`MemoryInstance.export_transcript`)."""
        return self.transport.drive(
            self.steps.export_transcript(format, include_archived=include_archived)
        )

    def read_window(
        self, max_tokens: int | None = None, *, max_messages: int | None = None
    ) -> list[Message]:
        """Pinned messages, then the newest that fit (:meth:`MemoryInstance.read_window`)."""
        with _telemetry.operation(self, "read") as span:
            result = self.transport.drive(
                self.steps.read_window(max_tokens, max_messages=max_messages)
            )
            span.found(result)
        return result

    def context(
        self, max_tokens: int | None = None, *, query: str | None = None, reserve_output: int = 0
    ) -> list[Message]:
        """What to send an LLM within the budget (:meth:`MemoryInstance.context`)."""
        with _telemetry.operation(self, "context", query=query) as span:
            result = self.transport.drive(
                self.steps.context(max_tokens, query=query, reserve_output=reserve_output)
            )
            span.found(result)
        return result

    def context_layers(
        self, max_tokens: int | None = None, *, query: str | None = None, reserve_output: int = 0
    ) -> ContextLayers:
        """:meth:`context`, layer by layer (:meth:`MemoryInstance.context_layers`)."""
        with _telemetry.operation(self, "context", query=query) as span:
            result = self.transport.drive(
                self.steps.context_layers(max_tokens, query=query, reserve_output=reserve_output)
            )
            span.found(result.messages)
        return result

    def search(
        self,
        query: str,
        limit: int = 10,
        *,
        roles: Iterable[str] | None = None,
        since_id: int | None = None,
    ) -> Hits:
        """The messages that best match ``query`` (:meth:`MemoryInstance.search`)."""
        with _telemetry.operation(self, "search", query=query) as span:
            result = self.transport.drive(
                self.steps.search(query, limit, roles=roles, since_id=since_id)
            )
            span.found([h.message for h in result], [h.score for h in result])
        return result

    def recall_messages(self, ids: Iterable[int]) -> list[Message]:
        """Bring archived messages back into context (:meth:`MemoryInstance.recall_messages`)."""
        with _telemetry.operation(self, "recall_messages") as span:
            result = self.transport.drive(self.steps.recall_messages(ids))
            span.found(result)
        return result

    def clear_recalled(self) -> int:
        """Drop every recalled message from the context."""
        return self.transport.drive(self.steps.clear_recalled())

    def len(self) -> int:
        """Number of live messages."""
        return self.transport.drive(self.steps.len())

    def token_count(self) -> int:
        """Exact tokens of the live messages, from the totals the scripts keep."""
        return self.transport.drive(self.steps.token_count())

    def health(self) -> MemoryHealth:
        """Totals, flush and index state, in one read (:meth:`MemoryInstance.health`)."""
        return self.transport.drive(self.steps.health())

    # -- end generated --

    def close(self) -> None:
        """Stop this handle's background work: catch-ups of the index and vectors and
        flushes that were due are dropped, one under way ends with its current step, nothing
        is retried, and nothing is printed. The memory is unchanged and can be opened again;
        ``memory.indexer.wait_idle()`` first waits for the index to catch up. The Redis client
        is the caller's to close."""
        self._close_background()


class SyncPart(Generic[A]):
    """A part of a sync handle: the async part's steps run to their results in the caller's
    thread (:func:`~compozy_memory._wire.steps.blocking`)."""

    def __init__(self, part: A, transport: SyncTransport) -> None:
        #: The async part (its steps and state).
        self.part = part
        self._transport = transport


class SyncFacts(SyncPart[Facts]):
    """A sync handle's session facts (:class:`~compozy_memory.Facts`), returning results."""

    set = blocking(Facts.set, "part")
    get = blocking(Facts.get, "part")
    delete = blocking(Facts.delete, "part")
    items = blocking(Facts.items, "part")


class SyncResults(SyncPart[ResultStore]):
    """A sync handle's result store (:class:`~compozy_memory.ResultStore`), returning
    results."""

    store_result = blocking(ResultStore.store_result, "part")
    load_result = blocking(ResultStore.load_result, "part")
    load_slice = blocking(ResultStore.load_slice, "part")
    release = blocking(ResultStore.release, "part")


class SyncIndexer(SyncPart[Indexer]):
    """A sync handle's indexer (:class:`~compozy_memory.Indexer`), returning results."""

    catch_up = blocking(Indexer.catch_up, "part")
    compact = blocking(Indexer.compact, "part")

    @property
    def dirty(self) -> bool:
        return self.part.dirty

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait for the background catch-up, if any; False if ``timeout`` passed first."""
        return self.part.wait_idle_sync(timeout)


class SyncVectorizer(SyncPart[Vectorizer]):
    """A sync handle's vectorizer (:class:`~compozy_memory.Vectorizer`), returning results."""

    catch_up = blocking(Vectorizer.catch_up, "part")

    @property
    def dirty(self) -> bool:
        return self.part.dirty

    @property
    def model(self) -> str:
        return self.part.model

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait for the background catch-up, if any; False if ``timeout`` passed first."""
        return self.part.wait_idle_sync(timeout)
