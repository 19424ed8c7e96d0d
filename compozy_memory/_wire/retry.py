"""Bounded retries of calls that failed because Redis could not be reached.

A restart, a failover or a cut connection surfaces in redis-py as ``ConnectionError`` or
``TimeoutError`` (``BusyLoadingError`` while a restarted server loads its data).
:class:`RetryPolicy` retries those, with jittered exponential backoff, until an attempt count
or a deadline is reached; then the typed error reaches the caller. Every script call of a
:class:`~compozy_memory.MemoryInstance` is safe to repeat:

* appends and replaces carry a dedupe key checked inside the script, so a write whose reply
  was lost is not applied twice;
* trims and TTL changes converge to the same state when repeated; a repeated ``clear`` also
  removes what was appended between the two attempts, as a clear a moment later would;
* a repeated flush commit finds its messages gone and re-plans (``ConflictError``);
* reads change nothing.

Permission errors, out-of-memory refusals and script errors are never retried: repeating them
cannot help.

The loop is written once, as steps (:meth:`RetryPolicy.steps`); :meth:`RetryPolicy.call` runs
it around a coroutine, :meth:`RetryPolicy.call_sync` around a blocking call.

A call that is retried is logged once, at WARNING on ``compozy_memory.retry``, with the error
that made it retry (``extra``: ``memory``, ``key``, ``operation``); its outcome, when it
recovers, at DEBUG.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from compozy_memory._wire.steps import Sleep, Steps, adrive, drive
from compozy_memory.errors import BackendUnavailableError, ConfigurationError

__all__ = ["NO_RETRY", "RetryPolicy", "no_retries"]

T = TypeVar("T")

log = logging.getLogger("compozy_memory.retry")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long a handle keeps trying when Redis is unreachable.

    ``attempts`` counts the first try; ``deadline`` (seconds) bounds the whole call, backoff
    included, so a caller waits at most about ``deadline`` plus one ``socket_timeout``.
    """

    attempts: int = 8
    deadline: float = 10.0
    initial_backoff: float = 0.05
    max_backoff: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or self.attempts < 1:
            raise ConfigurationError(
                f"retry attempts must be an integer >= 1, got {self.attempts!r}"
            )
        for name in ("deadline", "initial_backoff", "max_backoff"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0:
                raise ConfigurationError(f"retry {name} must be a number >= 0, got {value!r}")

    async def call(
        self,
        operation: Callable[[], Awaitable[T]],
        *,
        what: str = "call",
        memory: str | None = None,
        key: str | None = None,
    ) -> T:
        """Run ``operation``, again after each :class:`BackendUnavailableError`, within bounds.

        ``what``, ``memory`` and ``key`` name the call in the log record of a retry."""
        started = time.monotonic()
        try:
            return await operation()  # the common case, without building a retry loop
        except BackendUnavailableError as exc:
            again = self._again(exc, started, lambda: _awaited(operation), what, memory, key)
        return await adrive(again, None)

    def call_sync(
        self,
        operation: Callable[[], T],
        *,
        what: str = "call",
        memory: str | None = None,
        key: str | None = None,
    ) -> T:
        """:meth:`call` for a blocking ``operation``."""
        started = time.monotonic()
        try:
            return operation()
        except BackendUnavailableError as exc:
            again = self._again(exc, started, lambda: _called(operation), what, memory, key)
        return drive(again, None)

    def steps(
        self,
        attempt: Callable[[], Steps[T]],
        *,
        what: str = "call",
        memory: str | None = None,
        key: str | None = None,
    ) -> Steps[T]:
        """:meth:`call` for steps: ``attempt()`` makes the steps of one try."""
        started = time.monotonic()
        try:
            return (yield from attempt())
        except BackendUnavailableError as exc:
            first = exc
        return (yield from self._again(first, started, attempt, what, memory, key))

    def _again(
        self,
        first: BackendUnavailableError,
        started: float,
        attempt: Callable[[], Steps[T]],
        what: str,
        memory: str | None,
        key: str | None,
    ) -> Steps[T]:
        """After a first failure: try again with jittered exponential backoff until one
        succeeds, ``attempts`` were made or ``deadline`` passed (then the last error)."""
        if self.attempts == 1 or self.deadline <= 0 or _ONE_ATTEMPT.get():
            raise first
        log.warning(
            "%s of %s failed (%s: %s); retrying for up to %d attempts or %gs",
            what,
            key or memory,
            type(first).__name__,
            first,
            self.attempts,
            self.deadline,
            extra={"memory": memory, "key": key, "operation": what},
        )
        yield Sleep(self.initial_backoff)
        for made in range(2, self.attempts + 1):
            try:
                result = yield from attempt()
            except BackendUnavailableError:
                if made == self.attempts or time.monotonic() - started >= self.deadline:
                    raise
                backoff = min(self.max_backoff, self.initial_backoff * 2 ** (made - 2))
                yield Sleep(backoff + random.uniform(0, self.initial_backoff))
                continue
            log.debug(
                "%s of %s succeeded on attempt %d",
                what,
                key or memory,
                made,
                extra={"memory": memory, "key": key, "operation": what},
            )
            return result
        raise first  # pragma: no cover  (attempts == 1 returned above)


def _awaited(operation: Callable[[], Awaitable[T]]) -> Steps[T]:
    result: T = yield _Await(operation)
    return result


def _called(operation: Callable[[], T]) -> Steps[T]:
    result: T = yield _Call(operation)
    return result


@dataclass(frozen=True, slots=True)
class _Await:
    operation: Callable[[], Awaitable[Any]]

    def arun(self, io: Any) -> Awaitable[Any]:
        del io
        return self.operation()

    def run(self, io: Any) -> Any:  # pragma: no cover  (only driven by adrive)
        raise TypeError("a coroutine's retry runs on an event loop")


@dataclass(frozen=True, slots=True)
class _Call:
    operation: Callable[[], Any]

    async def arun(self, io: Any) -> Any:  # pragma: no cover  (only driven by drive)
        raise TypeError("a blocking call's retry runs in its thread")

    def run(self, io: Any) -> Any:
        del io
        return self.operation()


#: One attempt: errors reach the caller at once.
NO_RETRY = RetryPolicy(attempts=1)

_ONE_ATTEMPT: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "compozy_memory_one_attempt", default=False
)


@contextlib.contextmanager
def no_retries() -> Iterator[None]:
    """Within the block (and the tasks it starts), every call makes one attempt: for work
    that another call will redo anyway, such as a background catch-up of the index, which
    must not keep a dead server's connection busy for the retry deadline."""
    token = _ONE_ATTEMPT.set(True)
    try:
        yield
    finally:
        _ONE_ATTEMPT.reset(token)
