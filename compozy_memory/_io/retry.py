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

The loop is written once, as client steps (:meth:`RetryPolicy.steps`, whose backoffs are
:class:`~compozy_memory._wire.effects.Sleep` effects); :meth:`RetryPolicy.call` runs it around a
coroutine, :meth:`RetryPolicy.call_sync` around a blocking call.

A call that is retried is logged once, at WARNING on ``compozy_memory.retry``, with the error
that made it retry (``extra``: ``memory``, ``key``, ``operation``); its outcome, when it
recovers, at DEBUG.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from compozy_memory._wire.effects import ONE_ATTEMPT, Sleep
from compozy_memory.errors import BackendUnavailableError, ConfigurationError

__all__ = ["NO_RETRY", "RetryPolicy"]

T = TypeVar("T")
Y = TypeVar("Y")

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
            again = self._again(exc, started, _attempt, what, memory, key)
        try:
            step = again.send(None)
            while True:
                try:
                    if step is _ATTEMPT:
                        value: Any = await operation()
                    else:
                        assert isinstance(step, Sleep)
                        await asyncio.sleep(step.seconds)
                        value = None
                except BaseException as error:
                    step = again.throw(error)
                else:
                    step = again.send(value)
        except StopIteration as done:
            result: T = done.value
            return result

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
            again = self._again(exc, started, _attempt, what, memory, key)
        try:
            step = again.send(None)
            while True:
                try:
                    if step is _ATTEMPT:
                        value: Any = operation()
                    else:
                        assert isinstance(step, Sleep)
                        time.sleep(step.seconds)
                        value = None
                except BaseException as error:
                    step = again.throw(error)
                else:
                    step = again.send(value)
        except StopIteration as done:
            result: T = done.value
            return result

    def steps(
        self,
        attempt: Callable[[], Generator[Y, Any, T]],
        *,
        what: str = "call",
        memory: str | None = None,
        key: str | None = None,
    ) -> Generator[Y | Sleep, Any, T]:
        """:meth:`call` for steps (client steps: :mod:`compozy_memory._io.client_calls`):
        ``attempt()`` makes the steps of one try."""
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
        attempt: Callable[[], Generator[Y, Any, T]],
        what: str,
        memory: str | None,
        key: str | None,
    ) -> Generator[Y | Sleep, Any, T]:
        """After a first failure: try again with jittered exponential backoff until one
        succeeds, ``attempts`` were made or ``deadline`` passed (then the last error)."""
        if self.attempts == 1 or self.deadline <= 0 or ONE_ATTEMPT.get():
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


class _Attempt:
    """What the loop of :meth:`RetryPolicy.call` (and ``call_sync``) yields for one more try
    of its operation."""

    __slots__ = ()


_ATTEMPT = _Attempt()


def _attempt() -> Generator[_Attempt, Any, Any]:
    return (yield _ATTEMPT)


#: One attempt: errors reach the caller at once.
NO_RETRY = RetryPolicy(attempts=1)
