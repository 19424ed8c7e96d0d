"""MemoryManager: from a memory reference and a request's context to a shared instance handle."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from compozy_memory._config.agents import MemoryReference, configuration_level
from compozy_memory._config.registry import MemoryRegistry
from compozy_memory._config.schema import (
    AnthropicSummarizerConfig,
    CompressionSettings,
    ExtractiveSummarizerConfig,
    MemoryResource,
    RuleBasedSummarizerConfig,
    TokenAllocation,
    TokenizerConfig,
)
from compozy_memory._config.templates import compile_template
from compozy_memory._flush.anthropic_summary import AnthropicSummarizer
from compozy_memory._flush.extractive import ExtractiveSummarizer
from compozy_memory._flush.flusher import Flusher
from compozy_memory._flush.planner import EVICTABLE_PRIORITY
from compozy_memory._flush.settings import BatchSizes, Compression, FlushSettings
from compozy_memory._flush.summarizers import RuleBasedSummarizer, Summarizer
from compozy_memory._metrics import MemoryMetrics, default_metrics
from compozy_memory._model.anthropic_tokens import AnthropicTokenCounter
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.limits import UNBOUNDED_TOKENS
from compozy_memory._model.results import FlushCommit
from compozy_memory._model.tokens import TokenCounter, counter_for_encoding, default_counter
from compozy_memory._search.dense import Embedder
from compozy_memory._search.fusion import Fusion
from compozy_memory._store.instance import MemoryInstance
from compozy_memory._store.sessions import IndexEntry, SessionIndex, SessionPage, uuid7
from compozy_memory._store.warmup import warm
from compozy_memory._wire.retry import RetryPolicy
from compozy_memory._wire.translate import RedisClient
from compozy_memory.errors import ConfigurationError

__all__ = ["MemoryManager"]

log = logging.getLogger("compozy_memory.manager")

# The first get() warms the manager up (start()), but a slow server must not hold it longer.
_LAZY_START_SECONDS = 2.0

_HandleKey = tuple[str, str, bool, int]


class MemoryManager:
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

    With an ``embedder`` (an :class:`~compozy_memory.Embedder`, such as the offline
    :class:`~compozy_memory.StaticEmbedder`), every memory keeps dense vectors beside its
    index and fuses them with BM25 in ``search()`` and a query's ``context()`` (``fusion``:
    how, :data:`~compozy_memory.DEFAULT_FUSION` by default).
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
        self._handles: weakref.WeakValueDictionary[_HandleKey, MemoryInstance] = (
            weakref.WeakValueDictionary()
        )
        #: The project's session index, updated after every write through read-write handles.
        self.sessions = SessionIndex(client, registry.project, retry=retry)
        self._started = False

    async def start(self) -> None:
        """Load now what a first append would otherwise load: every memory's token encoder,
        the server-side scripts on every primary and the search analyser (:func:`warm`).
        ``async with`` calls it, and so does the first :meth:`get` (where a failure is left
        for the first call to report). Raises when the server cannot be reached."""
        self._started = True
        counters = {id(c): c for c in map(self.counter_for, self.registry.list())}
        await warm(self.client, counters=counters.values() or [self.counter])

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
        try:
            handle = await self._get(ref, context)
        except Exception as exc:
            self._resolved("direct", type(exc).__name__)
            raise
        self._resolved("direct", "ok")
        return handle

    async def _get(
        self,
        ref: str | MemoryReference,
        context: Mapping[str, Any] | None,
        agent: str | None = None,
    ) -> MemoryInstance:
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
            handle = MemoryInstance(
                self.client,
                keys,
                policy=resource.policy(),
                counter=counter,
                read_only=reference.read_only,
                batching=self.batching,
                retry=self.retry,
                memory_id=resource.id,
                metrics=self.metrics,
                embedder=self.embedder,
                fusion=self.fusion,
            )
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
                        indexer=handle.indexer,
                        on_commit=None if entry is None else _committed(entry, handle),
                    )
                )
            handle.attach_index(entry)
            self._handles[handle_key] = handle
        return handle

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
        sid = session_id if session_id is not None else uuid7()
        values = {**(context or {}), "session": sid}
        if agent is not None:
            values["agent"] = agent
        return sid, await self.get(ref, values)

    def new_session_id(self) -> str:
        """A new time-ordered session id (UUIDv7)."""
        return uuid7()

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
        index = self.sessions
        if project is not None and project != index.project:
            index = SessionIndex(self.client, project, retry=self.retry)
        await index.flushed()  # this process's own writes are listed
        return await index.page(agent=agent, limit=limit, cursor=cursor)

    async def for_agent(
        self, agent: str | Mapping[str, Any], context: Mapping[str, Any] | None = None
    ) -> list[MemoryInstance]:
        """Handles for every memory of an agent: its id in the project files, or its settings.

        Counted in ``compozy_memory_config_resolution_total`` by the configuration level the
        settings use (``simple``, ``multi``, ``advanced``, or ``stateless``)."""
        pattern = "unknown"
        try:
            if isinstance(agent, str):
                pattern = _PATTERNS[self.registry.agent_level(agent)]
                refs: Sequence[MemoryReference] = self.registry.agent(agent)
            else:
                if isinstance(agent, Mapping):
                    pattern = _PATTERNS.get(configuration_level(agent), "unknown")
                refs = self.registry.resolve(agent)
            await self._start_once()
            agent_id = agent if isinstance(agent, str) else agent.get("id")
            named = agent_id if isinstance(agent_id, str) and agent_id else None
            handles = [await self._get(ref, context, named) for ref in refs]
        except Exception as exc:
            self._resolved(pattern, type(exc).__name__)
            raise
        self._resolved(pattern, "ok")
        return handles

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

    async def aclose(self) -> None:
        """Send the session-index entries still pending, and close what the manager's
        summarizers and token counters opened (API clients); the Redis client is the
        caller's to close."""
        await self.sessions.flushed()
        for summarizer in self._summarizers.values():
            close = getattr(summarizer, "aclose", None)
            if close is not None:
                await close()
        self._summarizers.clear()
        for counter in self._api_counters.values():
            await counter.aclose()
        self._api_counters.clear()

    @property
    def open_handles(self) -> int:
        """How many distinct handles are alive (for monitoring and tests)."""
        return len(self._handles)


def _committed(entry: IndexEntry, handle: MemoryInstance) -> Callable[[FlushCommit, int], None]:
    """After a flush commit, record ``handle``'s totals in the index (held weakly: the flusher
    lives as long as the handle, which must stay free to go)."""
    ref = weakref.ref(handle)

    def removed(commit: FlushCommit, last_id: int) -> None:
        memory = ref()
        if memory is not None:
            entry.removed(
                memory, last_id=last_id, messages=commit.total_count, tokens=commit.total_tokens
            )

    return removed


def _agent_id(context: Mapping[str, Any], agent: str | None) -> str | None:
    """The agent a handle's writes are indexed under: ``agent`` in the context (an id, or a
    mapping with an ``id``), else the agent ``for_agent`` was asked for."""
    value = context.get("agent")
    named = value.get("id") if isinstance(value, Mapping) else value
    return named if isinstance(named, str) and named else agent


# compozy_memory_config_resolution_total's ``pattern``: the spec's names of the three levels.
_PATTERNS: dict[int | None, str] = {1: "simple", 2: "multi", 3: "advanced", None: "stateless"}

#: The specification's ``DefaultTokenAllocation``, used when a resource gives none.
DEFAULT_TOKEN_ALLOCATION = TokenAllocation(short_term=0.7, long_term=0.2, system=0.1)

#: The specification's ``mapContentTypesToAllocation``: which share of ``token_allocation``
#: limits a priority block, by content type. A block's first content type listed here decides;
#: a block with none of them is ``short_term``.
ALLOCATION_OF_CONTENT_TYPE = {
    "system_prompt": "system",
    "user_profile": "system",
    "recent_context": "short_term",
    "important_facts": "short_term",
    "historical_messages": "long_term",
}


def allocation_category(content_types: Sequence[str]) -> str:
    """The ``token_allocation`` share (system, short_term, long_term) of a block's types."""
    for content_type in content_types:
        category = ALLOCATION_OF_CONTENT_TYPE.get(content_type)
        if category is not None:
            return category
    return "short_term"


def flush_settings(resource: MemoryResource) -> FlushSettings:
    """What a flush of ``resource`` aims for: its token budget and its ``max_messages``,
    both when it has both; a count-only memory flushes with no token limit.

    Priority limits: for each block of priority 2 or more (the only ones priority eviction
    touches), the lower of its ``max_tokens`` and its share of the budget under
    ``token_allocation`` (the specification's default 0.7 / 0.2 / 0.1 when none is given),
    the share chosen by the block's content types."""
    budget = resource.effective_max_tokens
    if budget is None:
        if resource.max_messages is None:
            raise ConfigurationError(f"memory {resource.id!r} has no budget to flush towards")
        budget = UNBOUNDED_TOKENS  # count only: no token limit, no allocation limits
    allocation = resource.token_allocation or DEFAULT_TOKEN_ALLOCATION
    limits: dict[int, int] = {}
    for block in resource.priority_blocks:
        if block.priority < EVICTABLE_PRIORITY:
            continue
        share = getattr(allocation, allocation_category(block.content_types))
        candidates = [int(budget * share)]
        if block.max_tokens:
            candidates.append(block.max_tokens)
        limits[block.priority] = min(candidates)
    strategy = resource.flushing_strategy
    compression = resource.compression.resolve() if resource.compression else None
    return FlushSettings(
        max_tokens=budget,
        summarize_threshold=strategy.summarize_threshold,
        summarize_oldest_percent=strategy.summarize_oldest_percent,
        # A summary larger than its share of a context would never be shown (context() takes
        # a summary whole or not at all).
        summary_tokens=min(
            strategy.summary_tokens, budget // 2, int(budget * resource.context.summary_share)
        ),
        strategy=strategy.type,
        priority_limits=limits,
        compression=compression_settings(compression) if compression else None,
        max_messages=resource.max_messages,
    )


def compression_settings(settings: CompressionSettings) -> Compression:
    sizes = settings.batch_sizes
    return Compression(
        max_l1_messages=settings.max_l1_messages,
        min_l1_messages=settings.min_l1_messages,
        warning_threshold_percent=settings.warning_threshold_percent,
        critical_threshold_percent=settings.critical_threshold_percent,
        batch_sizes=BatchSizes(sizes.normal, sizes.warning, sizes.critical),
    )


def build_summarizer(
    config: RuleBasedSummarizerConfig | ExtractiveSummarizerConfig | AnthropicSummarizerConfig,
    counter: TokenCounter,
    *,
    metrics: MemoryMetrics | None = None,
) -> Summarizer:
    """The summarizer a resource's ``summarizer`` block asks for."""
    if isinstance(config, AnthropicSummarizerConfig):
        return AnthropicSummarizer(
            counter,
            model=config.model,
            timeout=config.timeout,
            max_retries=config.max_retries,
            metrics=metrics,
        )
    if isinstance(config, ExtractiveSummarizerConfig):
        return ExtractiveSummarizer(counter)
    return RuleBasedSummarizer(counter)
