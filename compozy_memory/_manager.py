"""MemoryManager: from a memory reference and a request's context to a shared instance handle."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from compozy_memory._config.agents import MemoryReference
from compozy_memory._config.registry import MemoryRegistry
from compozy_memory._config.schema import MemoryResource
from compozy_memory._config.templates import compile_template
from compozy_memory._flush.flusher import Flusher
from compozy_memory._flush.planner import FlushSettings
from compozy_memory._flush.summarizers import Summarizer, build_summarizer
from compozy_memory._metrics import FlushMetrics, default_metrics
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.tokens import TokenCounter
from compozy_memory._store.instance import MemoryInstance, default_counter
from compozy_memory._wire.retry import RetryPolicy
from compozy_memory._wire.scripts import RedisClient
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
        self.batching = batching
        self.flushing = flushing
        self.metrics = metrics or default_metrics()
        self._summarizer = summarizer
        self._summarizers: dict[tuple[str, int], Summarizer] = {}
        self._handles: weakref.WeakValueDictionary[_HandleKey, MemoryInstance] = (
            weakref.WeakValueDictionary()
        )

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
        rendered = compile_template(source).render_key(values)
        keys = InstanceKeys.build(self.registry.project, f"{resource.id}:{rendered}")
        handle_key = (resource.id, keys.key, reference.read_only, self.registry.generation)
        handle = self._handles.get(handle_key)
        if handle is None:
            handle = MemoryInstance(
                self.client,
                keys,
                policy=resource.policy(),
                counter=self.counter,
                read_only=reference.read_only,
                batching=self.batching,
                retry=self.retry,
            )
            budget = resource.effective_max_tokens
            if self.flushing and not reference.read_only and budget is not None:
                handle.attach_flusher(
                    Flusher(
                        handle,
                        FlushSettings.from_resource(resource),
                        self._summarizer_for(resource),
                        lock_ttl=resource.locking.flush_ttl,
                        metrics=self.metrics,
                        name=resource.id,
                    )
                )
            self._handles[handle_key] = handle
        return handle

    async def for_agent(
        self, agent: str | Mapping[str, Any], context: Mapping[str, Any] | None = None
    ) -> list[MemoryInstance]:
        """Handles for every memory of an agent: its id in the project files, or its settings."""
        refs = (
            self.registry.agent(agent) if isinstance(agent, str) else self.registry.resolve(agent)
        )
        return [await self.get(ref, context) for ref in refs]

    def _summarizer_for(self, resource: MemoryResource) -> Summarizer:
        if self._summarizer is not None:
            return self._summarizer
        cache_key = (resource.id, self.registry.generation)
        summarizer = self._summarizers.get(cache_key)
        if summarizer is None:
            summarizer = build_summarizer(resource.summarizer, self.counter, metrics=self.metrics)
            self._summarizers[cache_key] = summarizer
        return summarizer

    async def aclose(self) -> None:
        """Close what the manager's summarizers opened (LLM clients); the Redis client is
        the caller's to close."""
        for summarizer in self._summarizers.values():
            close = getattr(summarizer, "aclose", None)
            if close is not None:
                await close()
        self._summarizers.clear()

    @property
    def open_handles(self) -> int:
        """How many distinct handles are alive (for monitoring and tests)."""
        return len(self._handles)
