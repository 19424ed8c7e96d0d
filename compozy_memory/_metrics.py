"""Prometheus metrics: the twelve of Compozy's memory specification, under ``compozy_memory_``,
and a few more (``docs/operations.md`` lists them; ``docs/design.md`` says what the spec is).

One :class:`MemoryMetrics` per registry; by default prometheus-client's global one, so the
usual ``/metrics`` endpoint (:func:`compozy_memory.start_metrics_server`) shows them. Tests
pass a registry of their own.

Every per-memory series is labelled with the memory's RESOURCE id (``support``), never with
an instance key (``support:user-42``): there is one conversation per user, so a key label
would grow without bound. Handles made outside a :class:`~compozy_memory.MemoryManager` are
labelled ``memory`` unless given a ``memory_id``.

The hot path (every script call) uses label children bound once per (memory, operation) and
cached here, so a call costs two clock reads and one ``observe``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from compozy_memory._wire.effects import Observe

__all__ = ["FlushMetrics", "MemoryMetrics", "default_metrics"]

# Script and command calls take ~0.1 ms to seconds (retries, WAIT): finer low buckets than
# prometheus-client's defaults, which start at 5 ms.
_LATENCY_BUCKETS = (
    0.0002,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


class MemoryMetrics:
    """The metrics of compozy-memory on one registry (the table in docs/operations.md,
    "Metrics, the exporter and logs")."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        # -- the spec's twelve (Compozy's memory specification) ------------------------------
        self.messages = Counter(
            "compozy_memory_messages_total",
            "Messages stored by appends and replaces (duplicates not counted), by priority",
            ["memory", "priority"],
            registry=registry,
        )
        self.trims = Counter(
            "compozy_memory_trim_total",
            "Operations that moved messages out of context without a summary: trim() calls "
            "(strategy=oldest) and evicting flushes (strategy=the flush strategy)",
            ["memory", "strategy"],
            registry=registry,
        )
        self.flushes = Counter(
            "compozy_memory_flush_total",
            "Flushes by type: summary, eviction, nothing, skipped (lock busy), conflicted, lost",
            ["memory", "type"],
            registry=registry,
        )
        self.operation_latency = Histogram(
            "compozy_memory_operation_latency_seconds",
            "Latency of each call to Redis (retries included), by operation and outcome "
            "(ok, or the error class)",
            ["memory", "operation", "outcome"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.lock_acquire = Counter(
            "compozy_memory_lock_acquire_total",
            "Flush lock acquisitions",
            ["memory"],
            registry=registry,
        )
        self.lock_contention = Counter(
            "compozy_memory_lock_contention_total",
            "Flush lock attempts that found the lock taken",
            ["memory"],
            registry=registry,
        )
        self.lock_duration = Histogram(
            "compozy_memory_lock_duration_seconds",
            "How long a flush held the lock",
            ["memory"],
            registry=registry,
        )
        self.lock_refresh = Counter(
            "compozy_memory_lock_refresh_total",
            "Flush lease refreshes: ok, or lost",
            ["memory", "result"],
            registry=registry,
        )
        self.tokens_saved = Counter(
            "compozy_memory_tokens_saved_total",
            "Context tokens removed by flushes, net of the summaries added (the plan's "
            "projection), by flush strategy",
            ["memory", "strategy"],
            registry=registry,
        )
        self.priority_distribution = Gauge(
            "compozy_memory_priority_distribution",
            "Live messages at each priority in the last instance of the memory inspected "
            "(health(), or a flush snapshot that saw every message)",
            ["memory", "priority"],
            multiprocess_mode="mostrecent",
            registry=registry,
        )
        self.config_resolution = Counter(
            "compozy_memory_config_resolution_total",
            "MemoryManager resolutions by configuration pattern (direct, simple, multi, "
            "advanced, stateless) and outcome (ok, or the error class)",
            ["pattern", "outcome"],
            registry=registry,
        )
        self.flush_optimization_hits = Counter(
            "compozy_memory_flush_optimization_hits_total",
            "Appends whose flush check was settled from the counts the append script "
            "returned, with no read of the conversation, and needed no flush",
            ["memory"],
            registry=registry,
        )
        # -- more ----------------------------------------------------------------------------
        self.messages_flushed = Counter(
            "compozy_memory_flush_messages_total",
            "Messages moved out of context by flushes, by how",
            ["memory", "how"],
            registry=registry,
        )
        self.summarizer_seconds = Histogram(
            "compozy_memory_summarizer_seconds",
            "Time spent summarising",
            ["method"],
            registry=registry,
        )
        self.summarizer_fallbacks = Counter(
            "compozy_memory_summarizer_fallbacks_total",
            "Summaries that fell back to the extractive summarizer",
            ["method"],
            registry=registry,
        )
        self.embedder_fallbacks = Counter(
            "compozy_memory_embedder_fallbacks_total",
            "Searches an Embedder failed (reason=error) or kept past its deadline "
            "(reason=timeout): BM25 alone ranked them",
            ["memory", "reason"],
            registry=registry,
        )
        self.index_lag = Histogram(
            "compozy_memory_index_lag_seconds",
            "How long the oldest message of each indexing step waited since it was appended "
            "(search lags writes by this much)",
            ["memory"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0),
            registry=registry,
        )
        self.index_unindexed = Gauge(
            "compozy_memory_index_unindexed",
            "Messages not searchable yet, as this process last saw them",
            ["memory"],
            registry=registry,
        )
        self._latency_children: dict[tuple[str, str, str], Any] = {}
        # (family, labels) -> the bound child's inc, observe or set
        self._recorders: dict[tuple[str, tuple[str, ...]], Callable[[float], None]] = {}
        self._message_children: dict[tuple[str, Any], Any] = {}
        self._priorities_seen: dict[str, set[int]] = {}
        self._lock = threading.Lock()

    def latency(self, memory: str, operation: str, outcome: str = "ok") -> Any:
        """The latency histogram's child for these labels, bound once and cached."""
        label = (memory, operation, outcome)
        child = self._latency_children.get(label)
        if child is None:
            child = self.operation_latency.labels(
                memory=memory, operation=operation, outcome=outcome
            )
            self._latency_children[label] = child
        return child

    def record(self, observed: Observe) -> None:
        """Record a measurement the core made (the drivers hand each
        :class:`~compozy_memory._wire.effects.Observe` effect here)."""
        value = observed.value
        if not isinstance(value, (int, float)):  # by priority: the labels are the memory alone
            memory = observed.labels[0]
            if observed.family != "messages":
                self.set_priority_distribution(memory, dict(value))
                return
            children = self._message_children
            for priority, n in value.items():
                child = children.get((memory, priority))
                if child is None:
                    child = self.messages.labels(memory=memory, priority=str(priority))
                    children[(memory, priority)] = child
                child.inc(n)
            return
        key = (observed.family, observed.labels)
        recorder = self._recorders.get(key)
        if recorder is None:
            family = getattr(self, observed.family)
            child = family.labels(*observed.labels)
            if isinstance(family, Counter):
                recorder = child.inc
            elif isinstance(family, Histogram):
                recorder = child.observe
            else:
                recorder = child.set
            self._recorders[key] = recorder
        recorder(value)

    def count_messages(self, memory: str, priorities: Sequence[Any]) -> None:
        """``priorities``: one per stored message (children bound once per priority)."""
        children = self._message_children
        for priority in priorities:
            child = children.get((memory, priority))
            if child is None:
                child = self.messages.labels(memory=memory, priority=str(priority))
                children[(memory, priority)] = child
            child.inc()

    def set_priority_distribution(self, memory: str, counts: dict[int, int]) -> None:
        """Live messages per priority; priorities seen before and now absent go to 0."""
        with self._lock:
            seen = self._priorities_seen.setdefault(memory, set())
            seen.update(counts)
            for priority in seen:
                self.priority_distribution.labels(memory=memory, priority=str(priority)).set(
                    counts.get(priority, 0)
                )


#: The former name, when flushing and locking were all there was.
FlushMetrics = MemoryMetrics

_DEFAULT: MemoryMetrics | None = None


def default_metrics() -> MemoryMetrics:
    """The process-wide metrics on prometheus-client's global registry."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = MemoryMetrics()
    return _DEFAULT
