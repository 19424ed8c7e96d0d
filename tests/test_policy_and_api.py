from __future__ import annotations

from datetime import timedelta

import pytest

import compozy_memory
from compozy_memory import ConfigurationError, MemoryPolicy, SearchPolicy


def test_public_surface_is_pinned() -> None:
    assert sorted(compozy_memory.__all__) == sorted(
        [
            "AnthropicSummarizer", "AnthropicTokenCounter", "AppendResult", "BackendError",
            "BackendOutOfMemoryError",
            "BackendPermissionError", "BackendTimeoutError", "BackendUnavailableError",
            "BudgetExceededError", "CachedCounter",
            "CompozyMemoryError", "ConcurrentChangeError", "ConfigFileError", "ConfigurationError",
            "ConflictError", "ContextLayers", "ContextOverflowError", "ContextPolicy", "Hit",
            "EmbedderError", "EventLoopError",
            "SearchPolicy",
            "ExtractiveSummarizer", "FencedLock", "FlushMetrics", "FlushPlan", "FlushResult",
            "FlushSettings", "Flusher", "HeuristicCounter", "InstanceKeys",
            "InvalidMessageError", "Lease", "LockBusyError", "LockError", "LockLostError",
            "MemoryHealth", "MemoryInstance", "MemoryManager", "MemorySteps", "MemoryNotFoundError",
            "MemoryPolicy", "MemoryReference", "MemoryRegistry", "MemoryResource", "Message",
            "MessageTooLargeError", "MissingTokenCountError", "NO_RETRY", "ReadOnlyMemoryError",
            "ReplicationError", "RetryPolicy", "WaitPolicy",
            "RuleBasedSummarizer", "ScriptError", "Snapshot", "Summarizer", "Summary",
            "StartupError", "SuppliedCounter", "TemplateError", "TiktokenCounter", "TokenCounter",
            "TrimResult", "UnsupportedServerError", "UsageError", "SessionClosedError",
            "Conversation", "Hits", "IndexProgress", "Indexer", "DataFormatError",
            "CorruptDataError",
            "IndexLagError", "MemoryEvictedError", "ServerBusyError", "StepRequiredError",
            "__version__", "connect", "plan_flush", "sanitize_key", "MemoryTools",
            "tool_definitions", "to_anthropic", "to_openai", "warm",
            "MemoryMetrics", "MetricsServer", "start_metrics_server",
            "instrument_opentelemetry", "uninstrument_opentelemetry",
            "DataRef", "Facts", "Namespace", "ResultCorruptError", "ResultStore",
            "SyncMemoryInstance", "SyncMemoryManager", "connect_sync", "warm_sync",
            "DEFAULT_FUSION", "Embedder", "Fusion", "StaticEmbedder", "VectorProgress",
            "Vectorizer", "OnnxEmbedder", "OpenAIEmbedder", "SentenceTransformerEmbedder",
        ]
    )  # fmt: skip
    for name in compozy_memory.__all__:
        assert hasattr(compozy_memory, name)


def test_every_error_is_a_compozy_error() -> None:
    errors = [getattr(compozy_memory, n) for n in compozy_memory.__all__ if n.endswith("Error")]
    assert all(issubclass(e, compozy_memory.CompozyMemoryError) for e in errors)


def test_policy_defaults_and_priorities() -> None:
    policy = MemoryPolicy(ttl=timedelta(hours=24), content_priorities={"system_prompt": 0})
    assert policy.ttl_ms == 86_400_000
    assert policy.priority_of("system_prompt") == 0
    assert policy.priority_of("message") == 2
    assert MemoryPolicy().ttl_ms == 0


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"max_tokens": 0}, "max_tokens must be a positive integer"),
        ({"max_messages": -3}, "max_messages must be a positive integer"),
        ({"ttl": timedelta(0)}, "ttl must be positive"),
        ({"archive_max": -1}, "archive_max"),
        ({"content_priorities": {"x": 100}}, "priority of 'x'"),
    ],
)
def test_bad_policies_are_refused(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigurationError, match=fragment):
        MemoryPolicy(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("delay", "fragment"),
    [
        (-1, r"in \[0, 3600\] seconds"),
        (3601.0, r"in \[0, 3600\]"),
        (True, "is seconds"),
        ("5s", "is seconds"),
    ],
)
def test_bad_index_delays_are_refused(delay: object, fragment: str) -> None:
    with pytest.raises(ConfigurationError, match=fragment):
        SearchPolicy(index_delay=delay)  # type: ignore[arg-type]
