"""MemoryManager: from a memory reference and a request's context to a shared instance handle."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Generic, TypeVar

from compozy_memory._config.agents import MemoryReference, configuration_level
from compozy_memory._config.registry import MemoryRegistry
from compozy_memory._config.schema import (
    MemoryResource,
    TokenizerConfig,
)
from compozy_memory._config.templates import compile_template
from compozy_memory._flush.flusher import Flusher
from compozy_memory._flush.resource_settings import (
    ALLOCATION_OF_CONTENT_TYPE,
    DEFAULT_TOKEN_ALLOCATION,
    allocation_category,
    build_summarizer,
    compression_settings,
    flush_settings,
)
from compozy_memory._flush.summarizers import Summarizer
from compozy_memory._metrics import MemoryMetrics, default_metrics
from compozy_memory._model.anthropic_tokens import AnthropicTokenCounter
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.tokens import TokenCounter, counter_for_encoding, default_counter
from compozy_memory._search.dense import Embedder
from compozy_memory._search.fusion import Fusion
from compozy_memory._store.core import MemoryCore, committed
from compozy_memory._store.instance import MemoryInstance
from compozy_memory._store.sessions import SessionIndex, SessionPage, uuid7
from compozy_memory._store.warmup import warm
from compozy_memory._wire.retry import RetryPolicy
from compozy_memory._wire.translate import RedisClient
from compozy_memory.errors import ConfigurationError

# The flush settings of a resource lived here first: callers still find them here.
__all__ = [
    "ALLOCATION_OF_CONTENT_TYPE",
    "DEFAULT_TOKEN_ALLOCATION",
    "ManagerBase",
    "MemoryManager",
    "allocation_category",
    "build_summarizer",
    "compression_settings",
    "flush_settings",
]

log = logging.getLogger("compozy_memory.manager")

# The first get() warms the manager up (start()), but a slow server must not hold it longer.
_LAZY_START_SECONDS = 2.0

_HandleKey = tuple[str, str, bool, int]
H = TypeVar("H", bound=MemoryCore)


class ManagerBase(Generic[H]):
    """What both managers share: configuration made into handles, counters and summarizers.

    :class:`MemoryManager` hands out :class:`MemoryInstance` handles (``redis.asyncio``),
    :class:`~compozy_memory.SyncMemoryManager` :class:`~compozy_memory.SyncMemoryInstance`
    ones (redis-py's blocking client); each adds only how it starts, looks up and closes.

    With an ``embedder`` (an :class:`~compozy_memory.Embedder`, such as the offline
    :class:`~compozy_memory.StaticEmbedder`), every memory keeps dense vectors beside its
    index and fuses them with BM25 in ``search()`` and a query's ``context()`` (``fusion``:
    how, :data:`~compozy_memory.DEFAULT_FUSION` by default).
    """

    def __init__(
        self,
        registry: MemoryRegistry,
        client: Any,
        *,
        counter: TokenCounter | None = None,
        batching: bool = True,
        flushing: bool = True,
        summarizer: Summarizer | None = None,
        metrics: MemoryMetrics | None = None,
        retry: RetryPolicy | None = None,
        embedder: Embedder | None = None,
        fusion: Fusion | None = None,
    ) -> None:
        self.registry = registry
        #: Dense scores for every memory's search (none by default): see MemoryInstance.
        self.embedder = embedder
        self.fusion = fusion
        self.retry = retry
        self.client = client
        self.counter = counter if counter is not None else default_counter()
        self._counter_override = counter
        self._api_counters: dict[tuple[str, float, float], AnthropicTokenCounter] = {}
        self.batching = batching
        self.flushing = flushing
        self.metrics = metrics or default_metrics()
        self._summarizer = summarizer
        self._summarizers: dict[tuple[str, int], Summarizer] = {}
        self._resolutions: dict[tuple[str, str], Any] = {}
        self._handles: weakref.WeakValueDictionary[_HandleKey, H] = weakref.WeakValueDictionary()
        #: The project's session index, updated after every write through read-write handles.
        self.sessions = SessionIndex(client, registry.project, retry=retry)
        self._started = False

    def _open(
        self, keys: InstanceKeys, resource: MemoryResource, counter: TokenCounter, read_only: bool
    ) -> H:
        raise NotImplementedError

    def _handle(
        self,
        ref: str | MemoryReference,
        context: Mapping[str, Any] | None,
        agent: str | None = None,
    ) -> H:
        """The shared handle of ``ref`` in ``context``, made (with its flusher and session
        index hook) if nobody holds one."""
        reference = MemoryReference(ref) if isinstance(ref, str) else ref
        resource = self.registry.get(reference.id)
        source = reference.key or resource.default_key_template
        if source is None:
            raise ConfigurationError(
                f"memory {resource.id!r} has no default_key_template: pass a MemoryReference "
                "with a key, or set default_key_template on the memory"
            )
        values = dict(context or {})
        values.setdefault("project", {"id": self.registry.project})
        rendered = compile_template(source).render_text(values)  # encoded once, by build()
        keys = InstanceKeys.build(self.registry.project, f"{resource.id}:{rendered}")
        handle_key = (resource.id, keys.key, reference.read_only, self.registry.generation)
        handle = self._handles.get(handle_key)
        if handle is None:
            counter = self.counter_for(resource)
            handle = self._open(keys, resource, counter, reference.read_only)
            entry = None if reference.read_only else self.sessions.entry(_agent_id(values, agent))
            limited = resource.effective_max_tokens is not None or resource.max_messages is not None
            if self.flushing and not reference.read_only and limited:
                handle.attach_flusher(
                    Flusher(
                        handle.gateway,
                        flush_settings(resource),
                        self._summarizer_for(resource, counter),
                        counter,
                        lock_ttl=resource.locking.flush_ttl,
                        metrics=self.metrics,
                        name=resource.id,
                        indexer=handle.index_ops,
                        on_commit=None if entry is None else committed(handle),
                    )
                )
            handle.attach_index(entry)
            self._handles[handle_key] = handle
        return handle

    def _looked_up(self, ref: str | MemoryReference, context: Mapping[str, Any] | None) -> H:
        """:meth:`_handle`, counted in ``compozy_memory_config_resolution_total``."""
        try:
            handle = self._handle(ref, context)
        except Exception as exc:
            self._resolved("direct", type(exc).__name__)
            raise
        self._resolved("direct", "ok")
        return handle

    def _references(self, agent: str | Mapping[str, Any]) -> tuple[str, Sequence[MemoryReference]]:
        """An agent's memory references, and the configuration level they use."""
        pattern = "unknown"
        try:
            if isinstance(agent, str):
                pattern = _PATTERNS[self.registry.agent_level(agent)]
                return pattern, self.registry.agent(agent)
            if isinstance(agent, Mapping):
                pattern = _PATTERNS.get(configuration_level(agent), "unknown")
            return pattern, self.registry.resolve(agent)
        except Exception as exc:
            self._resolved(pattern, type(exc).__name__)
            raise

    def _handles_for(
        self,
        agent: str | Mapping[str, Any],
        pattern: str,
        refs: Sequence[MemoryReference],
        context: Mapping[str, Any] | None,
    ) -> list[H]:
        agent_id = agent if isinstance(agent, str) else agent.get("id")
        named = agent_id if isinstance(agent_id, str) and agent_id else None
        try:
            handles = [self._handle(ref, context, named) for ref in refs]
        except Exception as exc:
            self._resolved(pattern, type(exc).__name__)
            raise
        self._resolved(pattern, "ok")
        return handles

    @staticmethod
    def _session_context(
        agent: str | None, session_id: str | None, context: Mapping[str, Any] | None
    ) -> tuple[str, dict[str, Any]]:
        sid = session_id if session_id is not None else uuid7()
        values = {**(context or {}), "session": sid}
        if agent is not None:
            values["agent"] = agent
        return sid, values

    def _index_of(self, project: str | None) -> SessionIndex:
        index = self.sessions
        if project is not None and project != index.project:
            index = SessionIndex(self.client, project, retry=self.retry)
        return index

    def new_session_id(self) -> str:
        """A new time-ordered session id (UUIDv7)."""
        return uuid7()

    def _resolved(self, pattern: str, outcome: str) -> None:
        child = self._resolutions.get((pattern, outcome))
        if child is None:
            child = self.metrics.config_resolution.labels(pattern=pattern, outcome=outcome)
            self._resolutions[(pattern, outcome)] = child
        child.inc()

    def counter_for(self, resource: str | MemoryResource) -> TokenCounter:
        """The counter of a memory (its id, or its resource), as its ``tokenizer`` says."""
        if isinstance(resource, str):
            resource = self.registry.get(resource)
        if self._counter_override is not None:
            return self._counter_override
        return self._build_counter(resource.tokenizer)

    def _counters(self) -> list[TokenCounter]:
        """Every memory's counter, once each."""
        counters = {id(c): c for c in map(self.counter_for, self.registry.list())}
        return list(counters.values()) or [self.counter]

    def _build_counter(self, config: TokenizerConfig | None) -> TokenCounter:
        if config is None:
            return default_counter()
        if config.method == "anthropic_api":
            assert config.model is not None  # the schema insists
            key = (config.model, config.timeout.total_seconds(), config.retry_after.total_seconds())
            counter = self._api_counters.get(key)
            if counter is None:
                counter = AnthropicTokenCounter(
                    config.model, timeout=config.timeout, retry_after=config.retry_after
                )
                self._api_counters[key] = counter
            return counter
        return counter_for_encoding(config.local_encoding)

    def _summarizer_for(self, resource: MemoryResource, counter: TokenCounter) -> Summarizer:
        if self._summarizer is not None:
            return self._summarizer
        if isinstance(counter, AnthropicTokenCounter):
            counter = counter.local  # trial counts of draft summaries: no API call each
        cache_key = (resource.id, self.registry.generation)
        summarizer = self._summarizers.get(cache_key)
        if summarizer is None:
            summarizer = build_summarizer(resource.summarizer, counter, metrics=self.metrics)
            self._summarizers[cache_key] = summarizer
        return summarizer

    def _closing(self) -> list[Coroutine[Any, Any, None]]:
        """What closing the manager awaits: its summarizers' and API counters' clients."""
        closing: list[Coroutine[Any, Any, None]] = []
        for summarizer in self._summarizers.values():
            close = getattr(summarizer, "aclose", None)
            if close is not None:
                closing.append(close())
        self._summarizers.clear()
        closing += [counter.aclose() for counter in self._api_counters.values()]
        self._api_counters.clear()
        return closing

    @property
    def open_handles(self) -> int:
        """How many distinct handles are alive (for monitoring and tests)."""
        return len(self._handles)


class MemoryManager(ManagerBase[MemoryInstance]):
    """Hands out :class:`MemoryInstance` handles for a project's memories.

    The key of an instance is ``<memory id>:<rendered key template>``, sanitised, so two
    memories never share storage and two agents that resolve the same memory and key share
    one conversation. Read-write handles of memories with a token budget or ``max_messages``
    flush in the background as their resource says (summarizer, thresholds, lock TTL).

    Handles for the same memory, key and mode are shared while anyone holds one, and dropped
    with the last reference: a lookup creates no task, connection pool or counter, and
    nothing accumulates per call.

    Messages without ``tokens`` are counted as each resource's ``tokenizer`` says (cl100k
    when it says nothing), unless ``counter`` is given: then it counts for every memory.
    Local counters are shared per encoding across the process; API counters per model.
    :class:`~compozy_memory.SyncMemoryManager` does the same on redis-py's blocking client.
    """

    def __init__(
        self,
        registry: MemoryRegistry,
        client: RedisClient,
        *,
        counter: TokenCounter | None = None,
        batching: bool = True,
        flushing: bool = True,
        summarizer: Summarizer | None = None,
        metrics: MemoryMetrics | None = None,
        retry: RetryPolicy | None = None,
        embedder: Embedder | None = None,
        fusion: Fusion | None = None,
    ) -> None:
        super().__init__(
            registry,
            client,
            counter=counter,
            batching=batching,
            flushing=flushing,
            summarizer=summarizer,
            metrics=metrics,
            retry=retry,
            embedder=embedder,
            fusion=fusion,
        )
        self.client: RedisClient = client

    def _open(
        self, keys: InstanceKeys, resource: MemoryResource, counter: TokenCounter, read_only: bool
    ) -> MemoryInstance:
        return MemoryInstance(
            self.client,
            keys,
            policy=resource.policy(),
            counter=counter,
            read_only=read_only,
            batching=self.batching,
            retry=self.retry,
            memory_id=resource.id,
            metrics=self.metrics,
            embedder=self.embedder,
            fusion=self.fusion,
        )

    async def start(self) -> None:
        """Load now what a first append would otherwise load: every memory's token encoder,
        the server-side scripts on every primary and the search analyser (:func:`warm`).
        ``async with`` calls it, and so does the first :meth:`get` (where a failure is left
        for the first call to report). Raises when the server cannot be reached."""
        self._started = True
        await warm(self.client, counters=self._counters())

    async def _start_once(self) -> None:
        if not self._started:
            try:
                async with asyncio.timeout(_LAZY_START_SECONDS):
                    await self.start()
            except Exception as exc:  # best effort: a handle's first call says what is wrong
                log.debug("warming up at the first get failed: %r", exc)

    async def __aenter__(self) -> MemoryManager:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def get(
        self, ref: str | MemoryReference, context: Mapping[str, Any] | None = None
    ) -> MemoryInstance:
        """The handle for ``ref`` (a memory id, read-write, or a reference) in ``context``.

        ``context`` holds what key templates read: ``workflow``, ``agent``, ``user``...;
        ``project.id`` is filled in from the registry.

        Counted in ``compozy_memory_config_resolution_total{pattern="direct"}``.
        """
        await self._start_once()
        return self._looked_up(ref, context)

    def lookup(
        self, ref: str | MemoryReference, context: Mapping[str, Any] | None = None
    ) -> MemoryInstance:
        """:meth:`get` without awaiting, and so without its lazy warm-up: for code that
        cannot await (the adapters' synchronous methods, a factory called from a thread)."""
        return self._looked_up(ref, context)

    async def session(
        self,
        ref: str | MemoryReference,
        *,
        agent: str | None = None,
        session_id: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> tuple[str, MemoryInstance]:
        """A session's handle: ``ref`` rendered with ``session`` (a new :func:`uuid7` when
        ``session_id`` is None) and ``agent`` in its context. Returns ``(session_id, handle)``;
        the session shows in :meth:`list_sessions` after its first write."""
        sid, values = self._session_context(agent, session_id, context)
        return sid, await self.get(ref, values)

    async def list_sessions(
        self,
        project: str | None = None,
        *,
        agent: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> SessionPage:
        """The project's sessions (or one agent's), most recently active first, with their
        created and last-active times, message and token counts; ``cursor`` from the last
        page gives the next. One bounded read of the index, whatever the number of sessions.
        A handle shared by several agents is indexed under the agent that opened it first."""
        index = self._index_of(project)
        await index.flushed()  # this process's own writes are listed
        return await index.page(agent=agent, limit=limit, cursor=cursor)

    async def for_agent(
        self, agent: str | Mapping[str, Any], context: Mapping[str, Any] | None = None
    ) -> list[MemoryInstance]:
        """Handles for every memory of an agent: its id in the project files, or its settings.

        Counted in ``compozy_memory_config_resolution_total`` by the configuration level the
        settings use (``simple``, ``multi``, ``advanced``, or ``stateless``)."""
        pattern, refs = self._references(agent)
        await self._start_once()
        return self._handles_for(agent, pattern, refs, context)

    async def aclose(self) -> None:
        """Send the session-index entries still pending, and close what the manager's
        summarizers and token counters opened (API clients); the Redis client is the
        caller's to close."""
        await self.sessions.flushed()
        for closing in self._closing():
            await closing


def _agent_id(context: Mapping[str, Any], agent: str | None) -> str | None:
    """The agent a handle's writes are indexed under: ``agent`` in the context (an id, or a
    mapping with an ``id``), else the agent ``for_agent`` was asked for."""
    value = context.get("agent")
    named = value.get("id") if isinstance(value, Mapping) else value
    return named if isinstance(named, str) and named else agent


# compozy_memory_config_resolution_total's ``pattern``: the spec's names of the three levels.
_PATTERNS: dict[int | None, str] = {1: "simple", 2: "multi", 3: "advanced", None: "stateless"}
