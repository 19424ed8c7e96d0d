"""Every error compozy-memory raises, rooted at one class a caller can catch.

    CompozyMemoryError
    ├── UsageError                  a call got arguments it cannot take (also a ValueError)
    ├── SessionClosedError          a framework session used after close() (a RuntimeError)
    ├── EventLoopError              an async handle used from another event loop (a RuntimeError)
    ├── EmbedderError               an Embedder failed or passed its deadline in a vector step
    ├── StartupError                an embedded server could not be found or started
    ├── ConfigurationError          bad settings: a policy, a counter, an encoding (a ValueError)
    │   ├── ConfigFileError         project YAML with problems, each with file, line, key path
    │   ├── AgentConfigError        an agent's memory settings (in compozy_memory._config.agents)
    │   ├── MemoryNotFoundError     an id no memory resource has
    │   └── TemplateError           a key template that cannot compile or render
    ├── InvalidMessageError         a message that cannot be stored as given
    │   └── MissingTokenCountError  a counter that needs supplied counts got none
    ├── BudgetExceededError         a limit of the memory would be broken
    │   ├── MessageTooLargeError    one message is larger than the whole budget
    │   └── ContextOverflowError    the pinned messages alone exceed a context's budget
    ├── ReadOnlyMemoryError         a write through a read-only handle
    ├── ConflictError               a compare-and-swap lost to another writer
    │   ├── ConcurrentChangeError   the messages moved between a read and its write, retried
    │   ├── IndexLagError           a message to archive is not indexed yet; indexed, retried
    │   └── StepRequiredError       a move too long for one call; done in bounded steps
    ├── LockError                   the fenced flush lock
    │   ├── LockBusyError           another holder kept it past the caller's retries
    │   └── LockLostError           the lease ended while the caller worked; nothing written
    └── BackendError                Redis refused or could not be reached
        ├── BackendUnavailableError connection refused or reset, server loading; retries spent
        │   ├── BackendTimeoutError no reply in time: the command may have run
        │   └── ServerBusyError     the server was running another script (BUSY): not run
        ├── BackendPermissionError  wrong credentials, or the ACL user may not (NOPERM)
        ├── BackendOutOfMemoryError the server is at maxmemory; the write was refused whole
        ├── ReplicationError        written on the primary, too few replicas acknowledged
        ├── ResultCorruptError      a stored result's bytes do not hash to its reference
        ├── MemoryEvictedError      keys of a memory were evicted or deleted: refused, not rebuilt
        ├── DataFormatError         a memory written by a newer release, in a newer format
        ├── CorruptDataError        stored data that does not decode: damaged, or planted raw
        ├── ScriptError             a script failed in a way the library did not expect
        └── UnsupportedServerError  older than Redis 7.0 / Valkey 7.2: refused before any write

The tree is checked against the classes by tests/test_errors.py.

Errors raised while talking to Redis carry the instance key they were about, so a log line
says which conversation failed.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "BackendError",
    "BackendOutOfMemoryError",
    "BackendPermissionError",
    "BackendTimeoutError",
    "BackendUnavailableError",
    "BudgetExceededError",
    "CompozyMemoryError",
    "ConcurrentChangeError",
    "ConfigFileError",
    "ConfigProblem",
    "ConfigurationError",
    "ConflictError",
    "ContextOverflowError",
    "CorruptDataError",
    "DataFormatError",
    "EmbedderError",
    "EventLoopError",
    "IndexLagError",
    "InvalidMessageError",
    "LockBusyError",
    "LockError",
    "LockLostError",
    "MemoryEvictedError",
    "MemoryNotFoundError",
    "MessageTooLargeError",
    "MissingTokenCountError",
    "ReadOnlyMemoryError",
    "ReplicationError",
    "ResultCorruptError",
    "ScriptError",
    "ServerBusyError",
    "SessionClosedError",
    "StartupError",
    "StepRequiredError",
    "TemplateError",
    "UnsupportedServerError",
    "UsageError",
]


class CompozyMemoryError(Exception):
    """Root of every error raised by compozy-memory."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key

    def __str__(self) -> str:
        text = str(self.args[0]) if self.args else ""
        return f"{text} (memory {self.key})" if self.key else text


class UsageError(CompozyMemoryError, ValueError):
    """A call got arguments it cannot take (a negative limit, an unknown mode); nothing was
    sent to Redis."""


class SessionClosedError(CompozyMemoryError, RuntimeError):
    """A framework session was used after its ``close()``; nothing was sent to Redis. A
    ``RuntimeError``, as the frameworks' own sessions raise."""


class EventLoopError(CompozyMemoryError, RuntimeError):
    """An async handle was used from an event loop other than the one its ``redis.asyncio``
    client is bound to (it made its connections there); nothing was sent. Use one handle
    (and client) per event loop, or a :class:`~compozy_memory.SyncMemoryInstance` from
    threads. A ``RuntimeError``, as asyncio's own."""


class EmbedderError(CompozyMemoryError):
    """An :class:`~compozy_memory.Embedder` raised or passed its deadline while the vector step
    embedded messages; the step stored nothing. (A search whose query it fails to embed ranks
    by BM25 alone instead, with a warning and ``compozy_memory_embedder_fallbacks_total``.)"""


class StartupError(CompozyMemoryError):
    """An embedded server could not be found or did not start; the message says why."""


class ConfigurationError(CompozyMemoryError, ValueError):
    """A setting is invalid: the message says which and what to write instead.

    Also a ``ValueError``: a bad argument (``MemoryPolicy(ttl=0)``, an unknown encoding) is
    a bad value, and code written for other libraries (LangChain's tests among them)
    catches ``ValueError`` for it."""


def unknown_name(kind: str, name: str, known: Iterable[str]) -> str:
    """ "unknown memory 'suport' (did you mean 'support'?); the project defines: a, support"."""
    names = sorted(known)
    close = difflib.get_close_matches(name, names, n=1)
    guess = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown {kind} {name!r}{guess}; the project defines: {', '.join(names) or 'none'}"


def unknown_key(name: str, allowed: Iterable[str], *, list_allowed: bool = False) -> str:
    """ "unknown key 'memroy'; did you mean 'memory'?", optionally listing the allowed keys."""
    keys = list(allowed)
    close = difflib.get_close_matches(name, sorted(keys), n=1)
    if list_allowed:
        guess = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown key {name!r}; {guess}allowed: {', '.join(keys)}"
    return f"unknown key {name!r}" + (f"; did you mean {close[0]!r}?" if close else "")


def format_path(path: tuple[str | int, ...]) -> str:
    """``("memories", 0, "mode")`` as ``memories[0].mode``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One problem in a configuration file."""

    file: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ConfigFileError(ConfigurationError):
    """Configuration files have problems; ``problems`` lists every one found."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = problems
        count = f"{len(problems)} problems" if len(problems) > 1 else "1 problem"
        super().__init__(f"{count} in memory configuration:\n" + "\n".join(map(str, problems)))


class MemoryNotFoundError(ConfigurationError, KeyError):
    """No memory resource has this id; the message lists the ids that exist."""

    __str__ = CompozyMemoryError.__str__  # KeyError's own would quote the message


class TemplateError(ConfigurationError):
    """A key template failed to render: a missing variable, bad syntax, or a sandbox refusal."""


class InvalidMessageError(CompozyMemoryError, ValueError):
    """A message cannot be stored: wrong types, empty role, text that is not valid UTF-8."""


class MissingTokenCountError(InvalidMessageError):
    """The counter only accepts counts supplied by the caller, and a message had none."""


class BudgetExceededError(CompozyMemoryError):
    """Storing this would break a limit of the memory."""


class MessageTooLargeError(BudgetExceededError, InvalidMessageError):
    """A single message has more tokens than the memory may hold at all."""


class ContextOverflowError(BudgetExceededError):
    """The pinned messages (priority 0) alone take more tokens than the context's budget:
    nothing can be left out without dropping the system prompt, so nothing is returned."""


class ReadOnlyMemoryError(CompozyMemoryError):
    """A write was attempted through a read-only handle; nothing was sent to Redis."""


class ConflictError(CompozyMemoryError):
    """A conditional write found the memory changed since the caller read it."""


class ConcurrentChangeError(ConflictError):
    """The live messages changed between the read an operation planned from and its write
    (a trim or replace met a flush or another trim). The library reads again and retries;
    this reaches the caller only when the memory kept changing through every retry."""


class IndexLagError(ConflictError):
    """A message a trim, replace or flush would move to the archive is not indexed yet (a
    message moves only once indexed, so the archive never holds what search cannot find).
    The library runs the indexer and tries again; this reaches a caller of the scripts
    themselves."""


class StepRequiredError(ConflictError):
    """A replace met more live messages than one call moves (``MOVE_STEP``): the library
    moves the oldest to the archive in bounded steps first, then replaces. This reaches a
    caller of the scripts themselves."""


class LockError(CompozyMemoryError):
    """The fenced lock that makes one replica at a time flush a memory."""


class LockBusyError(LockError):
    """The lock stayed taken through every retry the caller allowed."""


class LockLostError(LockError):
    """The lease expired or moved to another holder; the protected work was stopped and
    wrote nothing."""


class BackendError(CompozyMemoryError):
    """Redis answered with an error, or could not be reached."""


class BackendUnavailableError(BackendError):
    """The connection to Redis was refused, reset or timed out, or the server was still
    loading its data. Raised once the handle's retries are spent."""


class BackendTimeoutError(BackendUnavailableError):
    """No reply came within the client's ``socket_timeout``.

    The command may or may not have run. Appends and replaces are idempotent (each carries a
    dedupe key, see :meth:`MemoryInstance.append_many`), so retrying with the same
    ``dedupe_key`` is safe."""


class ServerBusyError(BackendUnavailableError):
    """The server answered BUSY: it was running another client's script past its
    ``busy-reply-threshold``. The call was not run; it is retried with backoff like a dropped
    connection."""


class BackendPermissionError(BackendError):
    """The server refused the credentials, or the ACL user may not run this command on these
    keys (NOPERM). Never retried."""


class ReplicationError(BackendError):
    """A write was applied on the primary but fewer replicas (or AOF fsyncs) than required
    acknowledged it within the timeout. The write is not rolled back."""

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        required: int = 0,
        acknowledged: int = 0,
        reply: object = None,
    ) -> None:
        super().__init__(message, key=key)
        self.required = required
        self.acknowledged = acknowledged
        #: What the write returned on the primary (for an append or replace, its
        #: AppendResult): the write happened, only the acknowledgement is missing.
        self.result: object = reply

    def with_result(self, result: object) -> ReplicationError:
        """The same error carrying ``result`` (a decoded reply) instead."""
        return ReplicationError(
            str(self.args[0]),
            key=self.key,
            required=self.required,
            acknowledged=self.acknowledged,
            reply=result,
        )


class BackendOutOfMemoryError(BackendError):
    """Redis is at ``maxmemory`` and refused a write script before it ran: nothing changed."""


class ResultCorruptError(BackendError):
    """A stored result read back does not hash (SHA-256) to the reference that names it, or
    cannot be decompressed: the bytes in Redis were changed or damaged. Never retried."""


class MemoryEvictedError(BackendError):
    """Keys of this memory are gone while its other keys remain: the server evicted them
    (a ``maxmemory-policy`` other than ``noeviction``, or ``volatile-*`` on memories with a
    TTL) or someone deleted them. The scripts refuse the memory rather than rebuild it
    silently (ids would restart, totals go wrong). ``clear()`` removes what is left and the
    memory starts again, keeping its ids increasing where its meta survived."""


class DataFormatError(BackendError):
    """The memory was written by a newer compozy-memory, in a data format this release does
    not read (meta's ``fmt``): upgrade this replica. (A memory of an older format is migrated
    in bounded steps instead.)"""


class CorruptDataError(BackendError):
    """Data read back from a memory's keys does not decode as this release wrote it (a
    segment of the search index, an envelope): damaged, or written raw by someone with write
    access to the keys. Refused, never guessed at."""


class ScriptError(BackendError):
    """A Lua script failed in a way the library does not map to a narrower error."""


class UnsupportedServerError(BackendError):
    """The server is older than compozy-memory needs (Redis 7.0+ or Valkey 7.2+: Functions,
    ``EVALSHA_RO``, the Lua its scripts are written in). Raised before anything is written,
    by the first call, ``warm()``, ``install`` and every CLI command; never retried."""

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        server: str = "",
        version: str = "",
        minimum: str = "",
    ) -> None:
        super().__init__(message, key=key)
        #: What the server calls itself (``redis``, ``valkey``...) and its version.
        self.server = server
        self.version = version
        #: The oldest servers compozy-memory runs on.
        self.minimum = minimum
