"""compozy-memory: Redis-native distributed memory for fleets of LLM agents."""

from compozy_memory.agents import MemoryReference
from compozy_memory.config import MemoryResource
from compozy_memory.connection import connect
from compozy_memory.errors import (
    BackendError,
    BackendOutOfMemoryError,
    BackendUnavailableError,
    BudgetExceededError,
    CompozyMemoryError,
    ConfigFileError,
    ConfigurationError,
    ConflictError,
    InvalidMessageError,
    MemoryNotFoundError,
    MessageTooLargeError,
    MissingTokenCountError,
    ReadOnlyMemoryError,
    ScriptError,
    TemplateError,
)
from compozy_memory.instance import AppendResult, MemoryHealth, MemoryInstance, TrimResult
from compozy_memory.keys import InstanceKeys, sanitize_key
from compozy_memory.manager import MemoryManager
from compozy_memory.messages import Message
from compozy_memory.policy import MemoryPolicy
from compozy_memory.registry import MemoryRegistry
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
    "ConfigFileError",
    "ConfigurationError",
    "ConflictError",
    "HeuristicCounter",
    "InstanceKeys",
    "InvalidMessageError",
    "MemoryHealth",
    "MemoryInstance",
    "MemoryManager",
    "MemoryNotFoundError",
    "MemoryPolicy",
    "MemoryReference",
    "MemoryRegistry",
    "MemoryResource",
    "Message",
    "MessageTooLargeError",
    "MissingTokenCountError",
    "ReadOnlyMemoryError",
    "ScriptError",
    "SuppliedCounter",
    "TemplateError",
    "TiktokenCounter",
    "TokenCounter",
    "TrimResult",
    "__version__",
    "connect",
    "sanitize_key",
]
