"""ManagerBase: what the async and the sync manager share, from a memory reference and a
request's context to a handle (the three configuration levels, key templates, counters,
summarizers, the session index)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Coroutine, Mapping, Sequence
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
    build_summarizer,
    flush_settings,
)
from compozy_memory._flush.summarizers import Summarizer
from compozy_memory._io.retry import RetryPolicy
from compozy_memory._metrics import MemoryMetrics, default_metrics
from compozy_memory._model.anthropic_tokens import AnthropicTokenCounter
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.tokens import TokenCounter, counter_for_encoding, default_counter
from compozy_memory._search.dense import Embedder
from compozy_memory._search.fusion import Fusion
from compozy_memory._sessions.index import SessionIndex, uuid7
from compozy_memory._store.core import MemoryCore, committed
from compozy_memory.errors import ConfigurationError

__all__ = ["H", "ManagerBase"]

_HandleKey = tuple[str, str, bool, int]
H = TypeVar("H", bound=MemoryCore)
#: The client type a manager takes (redis.asyncio's, or redis-py's blocking one).
C = TypeVar("C")


class ManagerBase(Generic[C, H]):
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
        client: C,
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
        self.client: C = client
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

    #: The class of the handles this manager opens.
    _handle_type: Callable[..., H]

    def _open(
        self, keys: InstanceKeys, resource: MemoryResource, counter: TokenCounter, read_only: bool
    ) -> H:
        return self._handle_type(
            self.client,
            keys,
            policy=resource.policy(),
            counter=counter,
            read_only=read_only,
            retry=self.retry,
            memory_id=resource.id,
            metrics=self.metrics,
            embedder=self.embedder,
            fusion=self.fusion,
            **self._handle_options(),
        )

    def _handle_options(self) -> dict[str, Any]:
        """What this manager's handles take beyond what every handle does."""
        return {}

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


def _agent_id(context: Mapping[str, Any], agent: str | None) -> str | None:
    """The agent a handle's writes are indexed under: ``agent`` in the context (an id, or a
    mapping with an ``id``), else the agent ``for_agent`` was asked for."""
    value = context.get("agent")
    named = value.get("id") if isinstance(value, Mapping) else value
    return named if isinstance(named, str) and named else agent


# compozy_memory_config_resolution_total's ``pattern``: the spec's names of the three levels.
_PATTERNS: dict[int | None, str] = {1: "simple", 2: "multi", 3: "advanced", None: "stateless"}
