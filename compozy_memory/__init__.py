"""compozy-memory: Redis-native distributed memory for fleets of LLM agents.

Every name below is imported on first use (PEP 562), so ``import compozy_memory`` (and the
pytest plugin, and the CLI's start) costs almost nothing until a name is used: then that
name's module loads, and what it needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compozy_memory._config.agents import MemoryReference
    from compozy_memory._config.registry import MemoryRegistry
    from compozy_memory._config.schema import MemoryResource
    from compozy_memory._context.render import to_anthropic, to_openai
    from compozy_memory._context.tools import MemoryTools, tool_definitions
    from compozy_memory._facts.facts import Facts
    from compozy_memory._flush.anthropic_summary import AnthropicSummarizer
    from compozy_memory._flush.extractive import ExtractiveSummarizer
    from compozy_memory._flush.flusher import Flusher
    from compozy_memory._flush.lock import FencedLock, Lease
    from compozy_memory._flush.planner import plan_flush
    from compozy_memory._flush.settings import FlushSettings
    from compozy_memory._flush.summarizers import RuleBasedSummarizer, Summarizer
    from compozy_memory._io.connection import connect, connect_sync
    from compozy_memory._io.retry import NO_RETRY, RetryPolicy
    from compozy_memory._manager import MemoryManager
    from compozy_memory._metrics import FlushMetrics, MemoryMetrics
    from compozy_memory._model.anthropic_tokens import AnthropicTokenCounter
    from compozy_memory._model.keys import InstanceKeys, sanitize_key
    from compozy_memory._model.messages import Message
    from compozy_memory._model.policy import ContextPolicy, MemoryPolicy, SearchPolicy, WaitPolicy
    from compozy_memory._model.results import (
        AppendResult,
        ContextLayers,
        Conversation,
        FlushPlan,
        FlushResult,
        Hit,
        Hits,
        MemoryHealth,
        Snapshot,
        Summary,
        TrimResult,
    )
    from compozy_memory._model.tokens import (
        CachedCounter,
        HeuristicCounter,
        SuppliedCounter,
        TiktokenCounter,
        TokenCounter,
    )
    from compozy_memory._ops.exporter import MetricsServer, start_metrics_server
    from compozy_memory._results.store import DataRef, Namespace, ResultStore
    from compozy_memory._search.dense import Embedder
    from compozy_memory._search.embedders import (
        OnnxEmbedder,
        OpenAIEmbedder,
        SentenceTransformerEmbedder,
    )
    from compozy_memory._search.fusion import DEFAULT_FUSION, Fusion
    from compozy_memory._search.runtime.indexer import Indexer, IndexProgress
    from compozy_memory._search.runtime.vectors import Vectorizer, VectorProgress
    from compozy_memory._search.static_model import StaticEmbedder
    from compozy_memory._store.core import MemorySteps
    from compozy_memory._store.instance import MemoryInstance
    from compozy_memory._store.sync_instance import SyncMemoryInstance
    from compozy_memory._store.warmup import warm, warm_sync
    from compozy_memory._sync_manager import SyncMemoryManager
    from compozy_memory._telemetry import instrument as instrument_opentelemetry
    from compozy_memory._telemetry import uninstrument as uninstrument_opentelemetry
    from compozy_memory.errors import (
        BackendError,
        BackendOutOfMemoryError,
        BackendPermissionError,
        BackendTimeoutError,
        BackendUnavailableError,
        BudgetExceededError,
        CompozyMemoryError,
        ConcurrentChangeError,
        ConfigFileError,
        ConfigurationError,
        ConflictError,
        ContextOverflowError,
        CorruptDataError,
        DataFormatError,
        EmbedderError,
        EventLoopError,
        IndexLagError,
        InvalidMessageError,
        LockBusyError,
        LockError,
        LockLostError,
        MemoryEvictedError,
        MemoryNotFoundError,
        MessageTooLargeError,
        MissingTokenCountError,
        ReadOnlyMemoryError,
        ReplicationError,
        ResultCorruptError,
        ScriptError,
        ServerBusyError,
        SessionClosedError,
        StartupError,
        StepRequiredError,
        TemplateError,
        UnsupportedServerError,
        UsageError,
    )

#: The public submodules (see the API reference).
_SUBMODULES = frozenset({"adapters", "embedded", "errors", "testing"})
#: Where each exported name lives: "module" (the same name there) or "module:attribute".
_LAZY: dict[str, str] = {
    "MemoryReference": "compozy_memory._config.agents",
    "MemoryRegistry": "compozy_memory._config.registry",
    "MemoryResource": "compozy_memory._config.schema",
    "to_anthropic": "compozy_memory._context.render",
    "to_openai": "compozy_memory._context.render",
    "MemoryTools": "compozy_memory._context.tools",
    "tool_definitions": "compozy_memory._context.tools",
    "AnthropicSummarizer": "compozy_memory._flush.anthropic_summary",
    "ExtractiveSummarizer": "compozy_memory._flush.extractive",
    "Flusher": "compozy_memory._flush.flusher",
    "FencedLock": "compozy_memory._flush.lock",
    "Lease": "compozy_memory._flush.lock",
    "plan_flush": "compozy_memory._flush.planner",
    "FlushSettings": "compozy_memory._flush.settings",
    "RuleBasedSummarizer": "compozy_memory._flush.summarizers",
    "Summarizer": "compozy_memory._flush.summarizers",
    "MemoryManager": "compozy_memory._manager",
    "FlushMetrics": "compozy_memory._metrics",
    "MemoryMetrics": "compozy_memory._metrics",
    "AnthropicTokenCounter": "compozy_memory._model.anthropic_tokens",
    "InstanceKeys": "compozy_memory._model.keys",
    "sanitize_key": "compozy_memory._model.keys",
    "Message": "compozy_memory._model.messages",
    "ContextPolicy": "compozy_memory._model.policy",
    "MemoryPolicy": "compozy_memory._model.policy",
    "SearchPolicy": "compozy_memory._model.policy",
    "WaitPolicy": "compozy_memory._model.policy",
    "AppendResult": "compozy_memory._model.results",
    "ContextLayers": "compozy_memory._model.results",
    "Conversation": "compozy_memory._model.results",
    "FlushPlan": "compozy_memory._model.results",
    "FlushResult": "compozy_memory._model.results",
    "Hit": "compozy_memory._model.results",
    "Hits": "compozy_memory._model.results",
    "MemoryHealth": "compozy_memory._model.results",
    "Snapshot": "compozy_memory._model.results",
    "Summary": "compozy_memory._model.results",
    "TrimResult": "compozy_memory._model.results",
    "CachedCounter": "compozy_memory._model.tokens",
    "HeuristicCounter": "compozy_memory._model.tokens",
    "SuppliedCounter": "compozy_memory._model.tokens",
    "TiktokenCounter": "compozy_memory._model.tokens",
    "TokenCounter": "compozy_memory._model.tokens",
    "MetricsServer": "compozy_memory._ops.exporter",
    "start_metrics_server": "compozy_memory._ops.exporter",
    "Embedder": "compozy_memory._search.dense",
    "OnnxEmbedder": "compozy_memory._search.embedders",
    "OpenAIEmbedder": "compozy_memory._search.embedders",
    "SentenceTransformerEmbedder": "compozy_memory._search.embedders",
    "DEFAULT_FUSION": "compozy_memory._search.fusion",
    "Fusion": "compozy_memory._search.fusion",
    "StaticEmbedder": "compozy_memory._search.static_model",
    "MemorySteps": "compozy_memory._store.core",
    "Indexer": "compozy_memory._search.runtime.indexer",
    "IndexProgress": "compozy_memory._search.runtime.indexer",
    "Facts": "compozy_memory._facts.facts",
    "MemoryInstance": "compozy_memory._store.instance",
    "DataRef": "compozy_memory._results.store",
    "Namespace": "compozy_memory._results.store",
    "ResultStore": "compozy_memory._results.store",
    "SyncMemoryInstance": "compozy_memory._store.sync_instance",
    "Vectorizer": "compozy_memory._search.runtime.vectors",
    "VectorProgress": "compozy_memory._search.runtime.vectors",
    "warm": "compozy_memory._store.warmup",
    "warm_sync": "compozy_memory._store.warmup",
    "SyncMemoryManager": "compozy_memory._sync_manager",
    "instrument_opentelemetry": "compozy_memory._telemetry:instrument",
    "uninstrument_opentelemetry": "compozy_memory._telemetry:uninstrument",
    "connect": "compozy_memory._io.connection",
    "connect_sync": "compozy_memory._io.connection",
    "NO_RETRY": "compozy_memory._io.retry",
    "RetryPolicy": "compozy_memory._io.retry",
    "BackendError": "compozy_memory.errors",
    "BackendOutOfMemoryError": "compozy_memory.errors",
    "BackendPermissionError": "compozy_memory.errors",
    "BackendTimeoutError": "compozy_memory.errors",
    "BackendUnavailableError": "compozy_memory.errors",
    "BudgetExceededError": "compozy_memory.errors",
    "CompozyMemoryError": "compozy_memory.errors",
    "ConcurrentChangeError": "compozy_memory.errors",
    "ConfigFileError": "compozy_memory.errors",
    "ConfigurationError": "compozy_memory.errors",
    "ConflictError": "compozy_memory.errors",
    "ContextOverflowError": "compozy_memory.errors",
    "CorruptDataError": "compozy_memory.errors",
    "DataFormatError": "compozy_memory.errors",
    "EmbedderError": "compozy_memory.errors",
    "EventLoopError": "compozy_memory.errors",
    "IndexLagError": "compozy_memory.errors",
    "InvalidMessageError": "compozy_memory.errors",
    "LockBusyError": "compozy_memory.errors",
    "LockError": "compozy_memory.errors",
    "LockLostError": "compozy_memory.errors",
    "MemoryEvictedError": "compozy_memory.errors",
    "MemoryNotFoundError": "compozy_memory.errors",
    "MessageTooLargeError": "compozy_memory.errors",
    "MissingTokenCountError": "compozy_memory.errors",
    "ReadOnlyMemoryError": "compozy_memory.errors",
    "ReplicationError": "compozy_memory.errors",
    "ResultCorruptError": "compozy_memory.errors",
    "ScriptError": "compozy_memory.errors",
    "ServerBusyError": "compozy_memory.errors",
    "SessionClosedError": "compozy_memory.errors",
    "StartupError": "compozy_memory.errors",
    "StepRequiredError": "compozy_memory.errors",
    "TemplateError": "compozy_memory.errors",
    "UnsupportedServerError": "compozy_memory.errors",
    "UsageError": "compozy_memory.errors",
}

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_FUSION",
    "NO_RETRY",
    "AnthropicSummarizer",
    "AnthropicTokenCounter",
    "AppendResult",
    "BackendError",
    "BackendOutOfMemoryError",
    "BackendPermissionError",
    "BackendTimeoutError",
    "BackendUnavailableError",
    "BudgetExceededError",
    "CachedCounter",
    "CompozyMemoryError",
    "ConcurrentChangeError",
    "ConfigFileError",
    "ConfigurationError",
    "ConflictError",
    "ContextLayers",
    "ContextOverflowError",
    "ContextPolicy",
    "Conversation",
    "CorruptDataError",
    "DataFormatError",
    "DataRef",
    "Embedder",
    "EmbedderError",
    "EventLoopError",
    "ExtractiveSummarizer",
    "Facts",
    "FencedLock",
    "FlushMetrics",
    "FlushPlan",
    "FlushResult",
    "FlushSettings",
    "Flusher",
    "Fusion",
    "HeuristicCounter",
    "Hit",
    "Hits",
    "IndexLagError",
    "IndexProgress",
    "Indexer",
    "InstanceKeys",
    "InvalidMessageError",
    "Lease",
    "LockBusyError",
    "LockError",
    "LockLostError",
    "MemoryEvictedError",
    "MemoryHealth",
    "MemoryInstance",
    "MemoryManager",
    "MemoryMetrics",
    "MemoryNotFoundError",
    "MemoryPolicy",
    "MemoryReference",
    "MemoryRegistry",
    "MemoryResource",
    "MemorySteps",
    "MemoryTools",
    "Message",
    "MessageTooLargeError",
    "MetricsServer",
    "MissingTokenCountError",
    "Namespace",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "ReadOnlyMemoryError",
    "ReplicationError",
    "ResultCorruptError",
    "ResultStore",
    "RetryPolicy",
    "RuleBasedSummarizer",
    "ScriptError",
    "SearchPolicy",
    "SentenceTransformerEmbedder",
    "ServerBusyError",
    "SessionClosedError",
    "Snapshot",
    "StartupError",
    "StaticEmbedder",
    "StepRequiredError",
    "Summarizer",
    "Summary",
    "SuppliedCounter",
    "SyncMemoryInstance",
    "SyncMemoryManager",
    "TemplateError",
    "TiktokenCounter",
    "TokenCounter",
    "TrimResult",
    "UnsupportedServerError",
    "UsageError",
    "VectorProgress",
    "Vectorizer",
    "WaitPolicy",
    "__version__",
    "connect",
    "connect_sync",
    "instrument_opentelemetry",
    "plan_flush",
    "sanitize_key",
    "start_metrics_server",
    "to_anthropic",
    "to_openai",
    "tool_definitions",
    "uninstrument_opentelemetry",
    "warm",
    "warm_sync",
]


# Hidden from type checkers, which then see the names above and flag any other.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """Import an exported name on first use, and keep it (later uses are plain lookups)."""
        if name in _SUBMODULES:  # `compozy_memory.errors` without importing it first
            return importlib.import_module(f"{__name__}.{name}")
        where = _LAZY.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module, _, attribute = where.partition(":")
        value = getattr(importlib.import_module(module), attribute or name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_SUBMODULES})
