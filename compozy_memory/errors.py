"""Every error compozy-memory raises, rooted at one class a caller can catch.

    CompozyMemoryError
    ├── ConfigurationError          bad settings: a policy, a counter, an engine binary
    ├── InvalidMessageError         a message that cannot be stored as given
    │   └── MissingTokenCountError  a counter that needs supplied counts got none
    ├── BudgetExceededError         a limit of the memory would be broken
    │   └── MessageTooLargeError    one message is larger than the whole budget
    ├── ReadOnlyMemoryError         a write through a read-only handle
    ├── ConflictError               a compare-and-swap lost to another writer
    └── BackendError                Redis refused or could not be reached
        ├── BackendUnavailableError connection refused, reset or timed out
        ├── BackendOutOfMemoryError the server is at maxmemory; the write was refused whole
        └── ScriptError             a script failed in a way the library did not expect

Errors raised while talking to Redis carry the instance key they were about, so a log line
says which conversation failed.
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "BackendOutOfMemoryError",
    "BackendUnavailableError",
    "BudgetExceededError",
    "CompozyMemoryError",
    "ConfigurationError",
    "ConflictError",
    "InvalidMessageError",
    "MessageTooLargeError",
    "MissingTokenCountError",
    "ReadOnlyMemoryError",
    "ScriptError",
]


class CompozyMemoryError(Exception):
    """Root of every error raised by compozy-memory."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text} (memory {self.key})" if self.key else text


class ConfigurationError(CompozyMemoryError):
    """A setting is invalid: the message says which and what to write instead."""


class InvalidMessageError(CompozyMemoryError, ValueError):
    """A message cannot be stored: wrong types, empty role, text that is not valid UTF-8."""


class MissingTokenCountError(InvalidMessageError):
    """The counter only accepts counts supplied by the caller, and a message had none."""


class BudgetExceededError(CompozyMemoryError):
    """Storing this would break a limit of the memory."""


class MessageTooLargeError(BudgetExceededError, InvalidMessageError):
    """A single message has more tokens than the memory may hold at all."""


class ReadOnlyMemoryError(CompozyMemoryError):
    """A write was attempted through a read-only handle; nothing was sent to Redis."""


class ConflictError(CompozyMemoryError):
    """A conditional write found the memory changed since the caller read it."""


class BackendError(CompozyMemoryError):
    """Redis answered with an error, or could not be reached."""


class BackendUnavailableError(BackendError):
    """The connection to Redis was refused, reset or timed out."""


class BackendOutOfMemoryError(BackendError):
    """Redis is at ``maxmemory`` and refused a write script before it ran: nothing changed."""


class ScriptError(BackendError):
    """A Lua script failed in a way the library does not map to a narrower error."""
