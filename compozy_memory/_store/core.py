"""What both memory handles are: one memory's parts, and every operation as steps.

:class:`MemoryCore` holds a memory's keys, policy, counter, gateway, indexer, facts and result
store, and writes each operation once, as steps (:mod:`compozy_memory._wire.steps`): checking
its input, encoding messages, the script calls and what follows them (the indexer told, the
flusher and the session index). :class:`~compozy_memory.MemoryInstance` runs those steps on
``redis.asyncio`` (its methods are coroutines); :class:`~compozy_memory.SyncMemoryInstance`
runs the same steps on redis-py's blocking client (its methods return). Neither adds logic
of its own beyond how its background work runs.
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, Literal, Protocol

from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.limits import MOVE_STEP
from compozy_memory._model.messages import EncodedMessage, Message
from compozy_memory._model.policy import MemoryPolicy
from compozy_memory._model.results import (
    AppendResult,
    Conversation,
    FlushCommit,
    FlushResult,
    MemoryHealth,
    Snapshot,
    TrimResult,
)
from compozy_memory._model.tokens import TokenCounter, default_counter
from compozy_memory._search.dense import Embedder
from compozy_memory._search.fusion import DEFAULT_FUSION, Fusion
from compozy_memory._store import transcripts
from compozy_memory._store.edits import replace_live, trim_oldest
from compozy_memory._store.encoding import (
    MessageInput,
    dedupe_token,
    encode_messages,
    ttl_millis,
)
from compozy_memory._store.facts import Facts
from compozy_memory._store.handle import Handle
from compozy_memory._store.indexer import Indexer
from compozy_memory._store.offload import PinKeeper, clear_releasing_pins, offloaded
from compozy_memory._store.reads import ContextReads
from compozy_memory._store.results_store import Namespace, ResultStore
from compozy_memory._store.vectors import Vectorizer
from compozy_memory._wire.effects import ABOUT, RECORDING, Content, MetricsSink, Observe
from compozy_memory._wire.eviction import eviction_policy, eviction_warning
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.steps import Op, Steps
from compozy_memory.errors import (
    ConcurrentChangeError,
    ConfigurationError,
    InvalidMessageError,
    UsageError,
)

__all__ = ["FlushHook", "IndexHook", "MemoryCore", "MessageInput", "committed"]

_log = logging.getLogger("compozy_memory")

#: Times a paged read starts again because a write changed the memory between its pages.
_READ_ATTEMPTS = 5


class IndexHook(Protocol):
    """What a handle tells its session index (the manager attaches one): never waits."""

    def noticed(self, memory: Handle, result: AppendResult) -> None: ...

    def removed(self, memory: Handle, *, last_id: int, messages: int, tokens: int) -> None: ...

    def to_sync(self) -> IndexHook: ...


class FlushHook(Protocol):
    """What a handle needs of whatever flushes it (the manager attaches a Flusher)."""

    def notice(self, result: AppendResult) -> Observe | None: ...

    def flush(self) -> Op[FlushResult]: ...

    async def wait_idle(self) -> None: ...

    def wait_idle_sync(self, timeout: float | None = None) -> bool: ...

    def close(self) -> None: ...

    def twin(
        self,
        gateway: MemoryGateway,
        indexer: Indexer,
        on_commit: Callable[[FlushCommit, int], None] | None,
    ) -> FlushHook: ...


class MemoryCore(ContextReads):
    """One memory's parts and operations, for a handle to run (async or sync)."""

    def __init__(
        self,
        client: Any,
        keys: InstanceKeys,
        transport: Any,
        *,
        policy: MemoryPolicy | None,
        counter: TokenCounter | None,
        read_only: bool,
        memory_id: str,
        metrics: MetricsSink | None,
        results: ResultStore | None,
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
        self.transport = transport
        #: How long calls keep trying when Redis is unreachable.
        self.retry = transport.retry
        #: Every script call of this memory goes through the gateway.
        self.gateway = MemoryGateway(
            transport,
            keys,
            self.policy,
            read_only=read_only,
            memory=memory_id,
        )
        # The indexer, the facts and the result store as steps (their methods return Ops);
        # each handle shows them as its own kind (awaited, or returning) as ``indexer``,
        # ``facts`` and ``results``.
        self.index_ops = Indexer(
            self.gateway, metrics=transport.metrics, name=memory_id, background=background_index
        )
        self.fact_ops = Facts(self)
        #: Dense scores fused with BM25 in search and a query's context: none by default.
        self.embedder = embedder
        self.fusion = fusion or DEFAULT_FUSION
        # Keeps the vectors caught up with the index, as steps (each handle shows it as
        # ``vectors``), with an embedder only (and search on: no index, nothing to embed).
        self.vector_ops = (
            Vectorizer(
                self.gateway, embedder, self.index_ops, name=memory_id, background=background_index
            )
            if embedder is not None and self.policy.search.enabled
            else None
        )
        self.result_ops = results or ResultStore(client, keys.project, transport=transport)
        #: Renews the TTL of the results this memory's messages pin, as its writes renew its.
        self.pins = PinKeeper(self)
        self._flusher: FlushHook | None = None
        self._index: IndexHook | None = None
        # The last id this handle's writes returned, for the index after a trim or clear.
        self._last_id: int | None = None

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "read-write"
        return f"<{type(self).__name__} {self.keys.prefix} {mode}>"

    def attach_flusher(self, flusher: FlushHook) -> None:
        """Flush in the background once appends pass the flusher's threshold."""
        self._check_writable("attach_flusher")
        self._flusher = flusher

    def attach_index(self, hook: IndexHook | None) -> None:
        """Told of every append and replace (``noticed``), and of trims and clears
        (``removed``): the manager's session index (its flusher tells it of flushes). A hook
        never waits and never raises: the write has happened."""
        self._index = hook

    def flush_committed(self, commit: FlushCommit, last_id: int) -> None:
        """After a flush commit: tell the index the totals, under the last id its snapshot
        saw (the flusher's ``on_commit``). A trim or clear after it is told under that id at
        least, or the index would keep the flush's totals as the newer ones."""
        self._last_id = max(self._last_id or 0, last_id)
        if self._index is not None:
            self._index.removed(
                self, last_id=last_id, messages=commit.total_count, tokens=commit.total_tokens
            )

    def _removed(self, messages: int, tokens: int) -> None:
        """Tell the index the totals after a trim or clear, under the last id this handle
        wrote (a handle that never wrote leaves the entry as it is, until its next write)."""
        if self._index is not None and self._last_id is not None:
            self._index.removed(self, last_id=self._last_id, messages=messages, tokens=tokens)

    @property
    def flusher(self) -> FlushHook | None:
        return self._flusher

    def _close_background(self) -> None:
        """Start no more background work (index catch-ups, vectors, flushes): what was due is
        dropped, what runs ends with its current step, nothing is retried; the next operation
        that needs an index or a flush does it itself."""
        self.index_ops.close()
        if self.vector_ops is not None:
            self.vector_ops.close()
        if self._flusher is not None:
            self._flusher.close()

    # -- writes -------------------------------------------------------------------------

    def _append_many(
        self,
        messages: Iterable[MessageInput],
        dedupe_key: str | None,
        offload: bool,
        namespace: Namespace | None,
    ) -> Steps[AppendResult]:
        self._check_writable("append")
        token = dedupe_token(dedupe_key, self.key)
        if offload:
            messages = yield from offloaded(self, messages, namespace or Namespace.global_())
        if RECORDING.content:  # opt-in: the messages go on the span
            messages = list(messages)
            about = ABOUT.set(Content(records=messages))
            try:
                return (yield from self._append(messages, token))
            finally:
                ABOUT.reset(about)
        return (yield from self._append(messages, token))

    def _append(self, messages: Iterable[MessageInput], token: str) -> Steps[AppendResult]:
        args = yield from self._encode(messages)
        if not args:
            raise InvalidMessageError("append_many needs at least one message", key=self.key)
        result = yield from self.gateway.append(args, token)
        self._noticed()
        self.pins.notice()
        if self._flusher is not None:
            hit = self._flusher.notice(result)
            if hit is not None:
                yield from hit
        if self._index is not None:
            self._last_id = result.last_id
            self._index.noticed(self, result)
        return result

    def _replace(
        self,
        messages: Iterable[MessageInput],
        if_last_id: int | None,
        if_incarnation: str | None,
        if_version: str | None,
        dedupe_key: str | None,
    ) -> Steps[AppendResult]:
        self._check_writable("replace")
        if if_last_id is not None and (not isinstance(if_last_id, int) or if_last_id < 0):
            raise UsageError(
                f"if_last_id must be an integer >= 0, got {if_last_id!r}", key=self.key
            )
        token = dedupe_token(dedupe_key, self.key)
        args = yield from self._encode(messages)
        incarnation = if_incarnation if if_incarnation is not None else self.gateway.incarnation
        if if_last_id is not None and not incarnation:
            raise UsageError(
                "replace(if_last_id=...) needs the incarnation that id was read in: read or "
                "write through this handle first, or pass if_incarnation= (or use if_version=)",
                key=self.key,
            )
        result = yield from replace_live(
            self.gateway,
            self.index_ops,
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

    def _trim(self, keep_messages: int | None, max_tokens: int | None) -> Steps[TrimResult]:
        self._check_writable("trim")
        for name, value in (("keep_messages", keep_messages), ("max_tokens", max_tokens)):
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise UsageError(
                    f"{name} must be a non-negative integer, got {value!r}", key=self.key
                )
        result = yield from trim_oldest(self.gateway, self.index_ops, keep_messages, max_tokens)
        yield from Observe("trims", (self.memory_id, "oldest"))
        self._removed(result.total_count, result.total_tokens)
        return result

    def _clear(self) -> Steps[int]:
        self._check_writable("clear")
        removed = yield from clear_releasing_pins(self)
        self._removed(0, 0)
        return removed

    def _set_ttl(self, ttl: timedelta | float | None) -> Steps[int]:
        self._check_writable("set_ttl")
        return (yield from self.gateway.expire(ttl_millis(ttl, self.key)))

    def _import_transcript(self, text: str) -> Steps[int]:
        self._check_writable("import_transcript")
        count = yield from transcripts.import_transcript(self, text)
        self._noticed()  # the import's messages are indexed (and embedded) from here on
        return count

    def _flush(self) -> Op[FlushResult]:
        self._check_writable("flush")
        if self._flusher is None:
            raise ConfigurationError(
                "this memory has no flusher: open it through MemoryManager or attach one",
                key=self.key,
            )
        return self._flusher.flush()

    # -- reads --------------------------------------------------------------------------

    def _read(self, start: int, stop: int) -> Steps[list[Message]]:
        for _ in range(_READ_ATTEMPTS):
            page = yield from self.gateway.read_page(start, stop)
            count, messages = page.count, list(page.messages)
            first = max(count + start, 0) if start < 0 else start
            last = count + stop if stop < 0 else min(stop, count - 1)
            while first + len(messages) <= last:
                more = yield from self.gateway.read_page(first + len(messages), last)
                if more.version != page.version or not more.messages:
                    break
                messages += more.messages
            else:
                return messages
        raise ConcurrentChangeError(
            f"read: the memory changed between pages {_READ_ATTEMPTS} times", key=self.key
        )

    def _conversation(self) -> Steps[Conversation]:
        read = yield from transcripts.read_transcript(self.gateway, include_archived=False)
        return Conversation(
            tuple(Message.model_validate_json(e) for e in read.summaries),
            tuple(Message.model_validate_json(e) for e in read.msgs),
            read.version,
        )

    def _snapshot(self, limit: int) -> Steps[Snapshot]:
        if not isinstance(limit, int) or not 1 <= limit <= MOVE_STEP:
            raise UsageError(
                f"snapshot limit must be in [1, {MOVE_STEP}], got {limit!r}", key=self.key
            )
        return (yield from self.gateway.snapshot(limit))

    def _recall(self, offset: int, limit: int) -> Steps[list[Message]]:
        if not isinstance(offset, int) or not isinstance(limit, int) or offset < 0 or limit <= 0:
            raise UsageError("recall needs offset >= 0 and limit > 0", key=self.key)
        return (yield from self.gateway.archived(offset, limit))

    def _export_transcript(
        self, format: Literal["markdown", "jsonl"], include_archived: bool
    ) -> Steps[str]:
        if format == "markdown":
            return (yield from transcripts.export_markdown(self, include_archived=include_archived))
        if format == "jsonl":
            return (yield from transcripts.export_jsonl(self, include_archived=True))
        raise UsageError(f"format is 'markdown' or 'jsonl', got {format!r}", key=self.key)

    def _len(self) -> Steps[int]:
        return (yield from self.gateway.length())

    def _token_count(self) -> Steps[int]:
        return (yield from self.gateway.token_count())

    def _health(self) -> Steps[MemoryHealth]:
        health = yield from self.gateway.health()
        policy = yield from eviction_policy()
        warning = eviction_warning(policy, ttl=health.ttl_ms is not None)
        if warning:
            _log.warning("%s: %s", self.key, warning)
        return dataclasses.replace(health, eviction_policy=policy, eviction_warning=warning)

    def _noticed(self) -> None:
        """A write left messages to index (and to embed, with an embedder)."""
        self.index_ops.notice()
        if self.vector_ops is not None:
            self.vector_ops.notice()

    def _encode(self, messages: Iterable[MessageInput]) -> Steps[list[EncodedMessage]]:
        return encode_messages(messages, self.policy, self.counter, self.key)


def committed(handle: MemoryCore) -> Callable[[FlushCommit, int], None]:
    """A flusher's ``on_commit`` for ``handle``: its session index learns the totals after a
    flush (held weakly: the flusher lives as long as the handle, which must stay free to go)."""
    ref = weakref.ref(handle)

    def removed(commit: FlushCommit, last_id: int) -> None:
        memory = ref()
        if memory is not None:
            memory.flush_committed(commit, last_id)

    return removed
