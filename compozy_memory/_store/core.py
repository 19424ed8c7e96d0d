"""What both memory handles are: one memory's parts, and every operation as steps.

:class:`MemoryCore` holds a memory's keys, policy, counter, gateway, indexer, facts and result
store; :class:`MemorySteps` (a handle's ``steps``) writes each operation once, as steps
(:mod:`compozy_memory._wire.steps`): checking its input, encoding messages, the script calls
and what follows them (the indexer told, the flusher and the session index).
:class:`~compozy_memory.MemoryInstance` runs those steps on ``redis.asyncio`` (its methods are
coroutines); :class:`~compozy_memory.SyncMemoryInstance` runs the same steps on redis-py's
blocking client (its methods return). Both handles' methods are generated from one table
(:mod:`compozy_memory._operations`); neither adds logic of its own beyond how its background
work runs.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable
from datetime import timedelta
from operator import attrgetter
from typing import Any

from compozy_memory._facts.facts import Facts
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.limits import INDEX_BATCH_DOCS
from compozy_memory._model.policy import MemoryPolicy
from compozy_memory._model.results import (
    AppendResult,
    FlushCommit,
    FlushResult,
    TrimResult,
)
from compozy_memory._model.tokens import TokenCounter, default_counter
from compozy_memory._results.store import Namespace, ResultStore
from compozy_memory._search.dense import Embedder
from compozy_memory._search.fusion import DEFAULT_FUSION, Fusion
from compozy_memory._search.runtime.indexer import Indexer
from compozy_memory._search.runtime.vectors import Vectorizer
from compozy_memory._store import transcripts
from compozy_memory._store.edits import replace_live, trim_oldest
from compozy_memory._store.encoding import (
    MessageInput,
    dedupe_token,
    encode_messages,
    ttl_millis,
)
from compozy_memory._store.handle import FlushHook, IndexHook
from compozy_memory._store.offload import PinKeeper, clear_releasing_pins, offloaded
from compozy_memory._store.reads import ContextReads
from compozy_memory._wire.effects import ABOUT, RECORDING, Content, MetricsSink, Observe
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.steps import Steps
from compozy_memory.errors import (
    ConfigurationError,
    InvalidMessageError,
    UsageError,
)

__all__ = ["FlushHook", "IndexHook", "MemoryCore", "MemorySteps", "MessageInput", "committed"]

_log = logging.getLogger("compozy_memory")


class MemoryCore:
    """One memory's parts, and its operations as steps (:attr:`steps`), for a handle to run
    (async or sync)."""

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
        #: Every operation of this memory as steps (:class:`MemorySteps`).
        self.steps = MemorySteps(self)

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "read-write"
        return f"<{type(self).__name__} {self.keys.prefix} {mode}>"

    def attach_flusher(self, flusher: FlushHook) -> None:
        """Flush in the background once appends pass the flusher's threshold."""
        self.steps.check_writable("attach_flusher")
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

    @property
    def session_index(self) -> IndexHook | None:
        """What :meth:`attach_index` attached (the manager's session index), or None."""
        return self._index

    def _close_background(self) -> None:
        """Start no more background work (index catch-ups, vectors, flushes): what was due is
        dropped, what runs ends with its current step, nothing is retried; the next operation
        that needs an index or a flush does it itself."""
        self.index_ops.close()
        if self.vector_ops is not None:
            self.vector_ops.close()
        if self._flusher is not None:
            self._flusher.close()

    def _noticed(self, count: int = 1, size: int = 0) -> None:
        """A write left ``count`` messages (``size`` bytes) to index (and to embed, with an
        embedder)."""
        self.index_ops.notice(count, size)
        if self.vector_ops is not None:
            self.vector_ops.notice()


def _part(name: str) -> Any:
    """A part of the memory, read (and set) through its steps: the memory keeps it."""
    return property(
        attrgetter(f"memory.{name}"), lambda steps, value: setattr(steps.memory, name, value)
    )


class MemorySteps(ContextReads):
    """Every operation of one memory as steps: generators that yield effects and return the
    operation's result (:mod:`compozy_memory._wire.steps`), one method a public method of
    the handles, with the same name and parameters (:mod:`compozy_memory._operations` lists
    them). ``memory.steps`` is what the handles' methods run, and what code that composes
    several operations into one program runs on either driver, as the framework adapters
    do::

        def append_then_read(memory: MemoryCore) -> Steps[list[Message]]:
            yield from memory.steps.append({"role": "user", "content": "hi"})
            return (yield from memory.steps.read(-10))

    run by ``await memory.transport.drive(append_then_read(memory))`` on an async handle,
    ``memory.transport.drive(append_then_read(memory))`` on a sync one. Steps skip what the
    handles' methods add around them (their OpenTelemetry span).
    """

    gateway: MemoryGateway = _part("gateway")
    policy: MemoryPolicy = _part("policy")
    fact_ops: Facts = _part("fact_ops")
    index_ops: Indexer = _part("index_ops")
    embedder: Embedder | None = _part("embedder")
    fusion: Fusion = _part("fusion")
    vector_ops: Vectorizer | None = _part("vector_ops")
    key: str = _part("key")
    read_only: bool = _part("read_only")

    #: The memory whose parts the steps use.
    memory: MemoryCore

    def __init__(self, memory: MemoryCore) -> None:
        self.memory = memory

    # -- writes -------------------------------------------------------------------------

    def append(
        self,
        message: MessageInput,
        *,
        dedupe_key: str | None = None,
        offload: bool = False,
        namespace: Namespace | None = None,
    ) -> Steps[AppendResult]:
        """:meth:`MemoryInstance.append <compozy_memory.MemoryInstance.append>`, as steps."""
        return self.append_many(
            (message,), dedupe_key=dedupe_key, offload=offload, namespace=namespace
        )

    def append_many(
        self,
        messages: Iterable[MessageInput],
        *,
        dedupe_key: str | None = None,
        offload: bool = False,
        namespace: Namespace | None = None,
    ) -> Steps[AppendResult]:
        """:meth:`MemoryInstance.append_many <compozy_memory.MemoryInstance.append_many>`,
        as steps."""
        memory = self.memory
        self.check_writable("append")
        token = dedupe_token(dedupe_key, memory.key)
        if offload:
            messages = yield from offloaded(memory, messages, namespace or Namespace.global_())
        if RECORDING.content:  # opt-in: the messages go on the span
            messages = list(messages)
            about = ABOUT.set(Content(records=messages))
            try:
                return (yield from self._append(messages, token))
            finally:
                ABOUT.reset(about)
        return (yield from self._append(messages, token))

    def _append(self, messages: Iterable[MessageInput], token: str) -> Steps[AppendResult]:
        memory = self.memory
        args = yield from encode_messages(messages, memory.policy, memory.counter, memory.key)
        if not args:
            raise InvalidMessageError("append_many needs at least one message", key=memory.key)
        result = yield from memory.gateway.append(args, token)
        memory._noticed(result.last_id - result.first_id + 1, sum(len(a.body) for a in args))
        memory.pins.notice()
        if memory._flusher is not None:
            hit = memory._flusher.notice(result)
            if hit is not None:
                yield from hit
        if memory._index is not None:
            memory._last_id = result.last_id
            memory._index.noticed(memory, result)
        return result

    def replace(
        self,
        messages: Iterable[MessageInput],
        *,
        if_last_id: int | None = None,
        if_incarnation: str | None = None,
        if_version: str | None = None,
        dedupe_key: str | None = None,
    ) -> Steps[AppendResult]:
        """:meth:`MemoryInstance.replace <compozy_memory.MemoryInstance.replace>`, as steps."""
        memory = self.memory
        self.check_writable("replace")
        if if_last_id is not None and (not isinstance(if_last_id, int) or if_last_id < 0):
            raise UsageError(
                f"if_last_id must be an integer >= 0, got {if_last_id!r}", key=memory.key
            )
        token = dedupe_token(dedupe_key, memory.key)
        args = yield from encode_messages(messages, memory.policy, memory.counter, memory.key)
        incarnation = if_incarnation if if_incarnation is not None else memory.gateway.incarnation
        if if_last_id is not None and not incarnation:
            raise UsageError(
                "replace(if_last_id=...) needs the incarnation that id was read in: read or "
                "write through this handle first, or pass if_incarnation= (or use if_version=)",
                key=memory.key,
            )
        result = yield from replace_live(
            memory.gateway,
            memory.index_ops,
            args,
            if_last_id=if_last_id,
            if_incarnation=incarnation if if_last_id is not None else "",
            if_version=if_version,
            token=token,
        )
        memory._noticed(len(args), sum(len(a.body) for a in args))
        if memory._index is not None:
            memory._last_id = result.last_id
            memory._index.noticed(memory, result)
        return result

    def trim(
        self, *, keep_messages: int | None = None, max_tokens: int | None = None
    ) -> Steps[TrimResult]:
        """:meth:`MemoryInstance.trim <compozy_memory.MemoryInstance.trim>`, as steps."""
        memory = self.memory
        self.check_writable("trim")
        for name, value in (("keep_messages", keep_messages), ("max_tokens", max_tokens)):
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise UsageError(
                    f"{name} must be a non-negative integer, got {value!r}", key=memory.key
                )
        result = yield from trim_oldest(memory.gateway, memory.index_ops, keep_messages, max_tokens)
        yield from Observe("trims", (memory.memory_id, "oldest"))
        memory._removed(result.total_count, result.total_tokens)
        return result

    def clear(self) -> Steps[int]:
        """:meth:`MemoryInstance.clear <compozy_memory.MemoryInstance.clear>`, as steps."""
        self.check_writable("clear")
        removed = yield from clear_releasing_pins(self.memory)
        self.memory._removed(0, 0)
        return removed

    def set_ttl(self, ttl: timedelta | float | None) -> Steps[int]:
        """:meth:`MemoryInstance.set_ttl <compozy_memory.MemoryInstance.set_ttl>`, as steps."""
        self.check_writable("set_ttl")
        return (yield from self.memory.gateway.expire(ttl_millis(ttl, self.memory.key)))

    def import_transcript(self, text: str) -> Steps[int]:
        """:meth:`MemoryInstance.import_transcript
        <compozy_memory.MemoryInstance.import_transcript>`, as steps."""
        self.check_writable("import_transcript")
        count = yield from transcripts.import_transcript(self.memory, text)
        # The import's messages are indexed (and embedded) from here on, without a batch's wait.
        self.memory._noticed(max(count, INDEX_BATCH_DOCS))
        return count

    def flush(self) -> Steps[FlushResult]:
        """:meth:`MemoryInstance.flush <compozy_memory.MemoryInstance.flush>`, as steps."""
        self.check_writable("flush")
        flusher = self.memory._flusher
        if flusher is None:
            raise ConfigurationError(
                "this memory has no flusher: open it through MemoryManager or attach one",
                key=self.memory.key,
            )
        return (yield from flusher.flush())


def committed(handle: MemoryCore) -> Callable[[FlushCommit, int], None]:
    """A flusher's ``on_commit`` for ``handle``: its session index learns the totals after a
    flush (held weakly: the flusher lives as long as the handle, which must stay free to go)."""
    ref = weakref.ref(handle)

    def removed(commit: FlushCommit, last_id: int) -> None:
        memory = ref()
        if memory is not None:
            memory.flush_committed(commit, last_id)

    return removed
