"""Prometheus metrics for flushing and locking.

One :class:`FlushMetrics` per registry; by default prometheus-client's global one, so the
usual ``/metrics`` endpoint shows them. Tests pass a registry of their own.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

__all__ = ["FlushMetrics"]


class FlushMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self.flushes = Counter(
            "compozy_memory_flushes_total",
            "Flushes by outcome: summarised, evicted, nothing, skipped (lock busy), conflicted, "
            "lost",
            ["memory", "outcome"],
            registry=registry,
        )
        self.tokens_saved = Counter(
            "compozy_memory_flush_tokens_saved_total",
            "Context tokens removed by flushes, net of the summaries added",
            ["memory"],
            registry=registry,
        )
        self.messages_flushed = Counter(
            "compozy_memory_flush_messages_total",
            "Messages moved out of context by flushes, by how",
            ["memory", "how"],
            registry=registry,
        )
        self.lock_acquisitions = Counter(
            "compozy_memory_lock_acquisitions_total",
            "Flush lock attempts: acquired, or busy (contention)",
            ["memory", "result"],
            registry=registry,
        )
        self.lock_refreshes = Counter(
            "compozy_memory_lock_refreshes_total",
            "Lease refreshes: ok, or lost",
            ["memory", "result"],
            registry=registry,
        )
        self.lock_hold_seconds = Histogram(
            "compozy_memory_lock_hold_seconds",
            "How long a flush held the lock",
            ["memory"],
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


_DEFAULT: FlushMetrics | None = None


def default_metrics() -> FlushMetrics:
    """The process-wide metrics on prometheus-client's global registry."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = FlushMetrics()
    return _DEFAULT
