"""compozy-memory: Redis-native distributed memory for fleets of LLM agents."""

from compozy_memory._config.agents import MemoryReference
from compozy_memory._config.registry import MemoryRegistry
from compozy_memory._config.schema import MemoryResource
from compozy_memory._context.render import to_anthropic, to_openai
from compozy_memory._context.tools import MemoryTools, tool_definitions
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
from compozy_memory._search.dense import Embedder
from compozy_memory._search.fusion import DEFAULT_FUSION, Fusion
from compozy_memory._search.static_model import StaticEmbedder
from compozy_memory._store.indexer import Indexer, IndexProgress
from compozy_memory._store.instance import Facts, MemoryInstance
from compozy_memory._store.results_store import DataRef, Namespace, ResultStore
from compozy_memory._store.sync_instance import SyncMemoryInstance
from compozy_memory._store.vectors import Vectorizer, VectorProgress
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
    "MemoryTools",
    "Message",
    "MessageTooLargeError",
    "MetricsServer",
    "MissingTokenCountError",
    "Namespace",
    "ReadOnlyMemoryError",
    "ReplicationError",
    "ResultCorruptError",
    "ResultStore",
    "RetryPolicy",
    "RuleBasedSummarizer",
    "ScriptError",
    "SearchPolicy",
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
