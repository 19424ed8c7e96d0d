"""MemoryManager: from a memory reference and a request's context to a shared instance handle."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Mapping
from typing import Any

from compozy_memory._config.agents import MemoryReference
from compozy_memory._config.registry import MemoryRegistry
from compozy_memory._config.schema import (
    AnthropicSummarizerConfig,
    CompressionSettings,
    ExtractiveSummarizerConfig,
    MemoryResource,
    RuleBasedSummarizerConfig,
    TokenizerConfig,
)
from compozy_memory._config.templates import compile_template
from compozy_memory._flush.flusher import Flusher
from compozy_memory._flush.settings import BatchSizes, Compression, FlushSettings
from compozy_memory._flush.summarizers import (
    AnthropicSummarizer,
    ExtractiveSummarizer,
    RuleBasedSummarizer,
    Summarizer,
)
from compozy_memory._metrics import FlushMetrics, default_metrics
from compozy_memory._model.anthropic_tokens import AnthropicTokenCounter
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.tokens import TokenCounter, counter_for_encoding, default_counter
from compozy_memory._store.instance import MemoryInstance
from compozy_memory._store.sessions import SessionIndex, SessionPage, uuid7
from compozy_memory._wire.retry import RetryPolicy
from compozy_memory._wire.translate import RedisClient
from compozy_memory.errors import ConfigurationError

__all__ = ["MemoryManager"]

_HandleKey = tuple[str, str, bool, int]


class MemoryManager:
    """Hands out :class:`MemoryInstance` handles for a project's memories.

    The key of an instance is ``<memory id>:<rendered key template>``, sanitised, so two
    memories never share storage and two agents that resolve the same memory and key share
    one conversation. Read-write handles of memories with a token budget flush in the
    background as their resource says (summarizer, thresholds, lock TTL).

    Handles for the same memory, key and mode are shared while anyone holds one, and dropped
    with the last reference: a lookup creates no task, connection pool or counter, and
    nothing accumulates per call.

    Messages without ``tokens`` are counted as each resource's ``tokenizer`` says (cl100k
    when it says nothing), unless ``counter`` is given: then it counts for every memory.
    Local counters are shared per encoding across the process; API counters per model.
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
        metrics: FlushMetrics | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.registry = registry
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
        self._handles: weakref.WeakValueDictionary[_HandleKey, MemoryInstance] = (
            weakref.WeakValueDictionary()
        )
        #: The project's session index, updated after every write through read-write handles.
        self.sessions = SessionIndex(client, registry.project, retry=retry)

    async def get(
        self, ref: str | MemoryReference, context: Mapping[str, Any] | None = None
    ) -> MemoryInstance:
        """The handle for ``ref`` (a memory id, read-write, or a reference) in ``context``.

        ``context`` holds what key templates read: ``workflow``, ``agent``, ``user``...;
        ``project.id`` is filled in from the registry.
        """
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
            )
            budget = resource.effective_max_tokens
            if self.flushing and not reference.read_only and budget is not None:
                handle.attach_flusher(
                    Flusher(
                        handle.gateway,
                        flush_settings(resource),
                        self._summarizer_for(resource, counter),
                        counter,
                        lock_ttl=resource.locking.flush_ttl,
                        metrics=self.metrics,
                        name=resource.id,
                    )
                )
            if not reference.read_only:
                agent = values.get("agent")
                agent_id = agent.get("id") if isinstance(agent, Mapping) else agent
                handle.attach_index(
                    functools.partial(
                        self.sessions.noticed,
                        agent=agent_id if isinstance(agent_id, str) and agent_id else None,
                    )
                )
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
        return await index.page(agent=agent, limit=limit, cursor=cursor)

    async def for_agent(
        self, agent: str | Mapping[str, Any], context: Mapping[str, Any] | None = None
    ) -> list[MemoryInstance]:
        """Handles for every memory of an agent: its id in the project files, or its settings."""
        refs = (
            self.registry.agent(agent) if isinstance(agent, str) else self.registry.resolve(agent)
        )
        return [await self.get(ref, context) for ref in refs]

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
        """Close what the manager's summarizers and token counters opened (API clients);
        the Redis client is the caller's to close."""
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


# Which share of token_allocation limits a priority block: 0 is the system prompt, 1 what the
# memory must keep long, 2 and up the conversation.
_ALLOCATION_OF_PRIORITY = {0: "system", 1: "long_term"}


def flush_settings(resource: MemoryResource) -> FlushSettings:
    """What a flush of ``resource`` aims for."""
    budget = resource.effective_max_tokens
    if budget is None:
        raise ConfigurationError(f"memory {resource.id!r} has no token budget to flush towards")
    allocation = resource.token_allocation
    limits: dict[int, int] = {}
    for block in resource.priority_blocks:
        candidates = [block.max_tokens] if block.max_tokens else []
        if allocation is not None:
            share = getattr(allocation, _ALLOCATION_OF_PRIORITY.get(block.priority, "short_term"))
            candidates.append(int(budget * share))
        if candidates and block.priority > 0:
            limits[block.priority] = min(candidates)
    strategy = resource.flushing_strategy
    compression = resource.compression.resolve() if resource.compression else None
    return FlushSettings(
        max_tokens=budget,
        summarize_threshold=strategy.summarize_threshold,
        summarize_oldest_percent=strategy.summarize_oldest_percent,
        summary_tokens=min(strategy.summary_tokens, budget // 2),
        strategy=strategy.type,
        priority_limits=limits,
        compression=compression_settings(compression) if compression else None,
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
    metrics: FlushMetrics | None = None,
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
