"""compozy-memory: Redis-native distributed memory for fleets of LLM agents."""

from compozy_memory.connection import connect
from compozy_memory.errors import (
    BackendError,
    BackendOutOfMemoryError,
    BackendUnavailableError,
    BudgetExceededError,
    CompozyMemoryError,
    ConfigurationError,
    ConflictError,
    InvalidMessageError,
    MessageTooLargeError,
    MissingTokenCountError,
    ReadOnlyMemoryError,
    ScriptError,
)
from compozy_memory.instance import AppendResult, MemoryHealth, MemoryInstance, TrimResult
from compozy_memory.keys import InstanceKeys, sanitize_key
from compozy_memory.messages import Message
from compozy_memory.policy import MemoryPolicy
from compozy_memory.tokens import (
    CachedCounter,
    HeuristicCounter,
    SuppliedCounter,
    TiktokenCounter,
    TokenCounter,
)

__version__ = "0.1.0"

__all__ = [
    "AppendResult",
    "BackendError",
    "BackendOutOfMemoryError",
    "BackendUnavailableError",
    "BudgetExceededError",
    "CachedCounter",
    "CompozyMemoryError",
    "ConfigurationError",
    "ConflictError",
    "HeuristicCounter",
    "InstanceKeys",
    "InvalidMessageError",
    "MemoryHealth",
    "MemoryInstance",
    "MemoryPolicy",
    "Message",
    "MessageTooLargeError",
    "MissingTokenCountError",
    "ReadOnlyMemoryError",
    "ScriptError",
    "SuppliedCounter",
    "TiktokenCounter",
    "TokenCounter",
    "TrimResult",
    "__version__",
    "connect",
    "sanitize_key",
]
