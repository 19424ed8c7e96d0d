"""Steps: the library's logic written once, without I/O, run by an async or a sync driver.

A *step function* is a generator. It does no I/O itself: it yields an *effect* (one of the
closed set of :mod:`compozy_memory._wire.effects`: a call to Redis, a sleep, work for a
thread...) and is sent that effect's outcome, or has its exception thrown in where it
yielded, until it returns its result::

    def read_all(gateway) -> Steps[list[Message]]:
        page = yield from gateway.read_page(0, 999)   # one script call, decoded
        ...
        return messages

The drivers of :mod:`compozy_memory._io` run steps: ``Transport`` on ``redis.asyncio``,
``SyncTransport`` on redis-py's blocking client, each interpreting every effect in one
``match``. So the contracts, the encoding, the decoding and every operation of several calls
(a trim's steps, a paged read, the indexer, a flush) exist once, and the two APIs are two thin
drivers over them, as h11 keeps HTTP apart from sockets.

An :class:`Op` is a step function's generator bound to the driver of the object that made
it: ``yield from`` it inside other steps, or ``await`` it where that driver is async
(``await memory.gateway.health()``). Methods decorated with :func:`op` return one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeAlias, TypeVar

from compozy_memory._wire.effects import Effect
from compozy_memory.errors import UsageError

__all__ = [
    "AsyncDriver",
    "Driver",
    "Op",
    "Steps",
    "SyncDriver",
    "blocking",
    "is_sync",
    "op",
]

T = TypeVar("T")
P = ParamSpec("P")

#: A step function's generator: yields effects, is sent their outcomes, returns ``T``. What
#: a bare ``yield`` returns is ``object``: read outcomes with ``yield from`` (typed).
Steps: TypeAlias = Generator[Effect, object, T]


class AsyncDriver(Protocol):
    """Runs steps on an event loop (:class:`compozy_memory._io.transport.Transport`)."""

    def drive(self, steps: Steps[T] | Op[T]) -> Awaitable[T]: ...


class SyncDriver(Protocol):
    """Runs steps in the calling thread
    (:class:`compozy_memory._io.sync_transport.SyncTransport`)."""

    synchronous: bool

    def drive(self, steps: Steps[T] | Op[T], *, between: Callable[[], None] | None = None) -> T: ...


#: The driver a part of a handle was made with.
Driver: TypeAlias = "AsyncDriver | SyncDriver"


def is_sync(io: object) -> bool:
    """Whether ``io`` is a sync driver (its ``drive`` blocks and returns)."""
    return getattr(io, "synchronous", False) is True


class Op(Generic[T]):
    """Steps bound to a driver: ``yield from`` them (they run on whatever driver runs the
    steps around them), or ``await`` them on an async one."""

    __slots__ = ("io", "steps")

    def __init__(self, steps: Steps[T], io: Any) -> None:
        self.steps = steps
        self.io = io

    def __iter__(self) -> Steps[T]:
        return self.steps

    def __await__(self) -> Generator[Any, None, T]:
        if is_sync(self.io):
            self.steps.close()
            raise UsageError(
                "this object belongs to a synchronous handle: call the handle's methods "
                "(SyncMemoryInstance), which return their results"
            )
        return self.io.drive(self.steps).__await__()  # type: ignore[no-any-return]


class _Bound(Protocol):
    @property
    def transport(self) -> Any: ...


S = TypeVar("S", bound=_Bound)


def blocking(
    method: Callable[Concatenate[S, P], Op[T]], part: str
) -> Callable[Concatenate[Any, P], T]:
    """A sync twin's method: ``method`` (an :func:`op` of the object the twin holds as
    ``part``) run to its result on the twin's ``_transport``; same parameters, same
    documentation."""

    def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = self._transport.drive(method(getattr(self, part), *args, **kwargs))
        return result

    call.__name__ = call.__qualname__ = method.__name__
    call.__doc__ = method.__doc__
    return call


def op(method: Callable[Concatenate[S, P], Steps[T]]) -> Callable[Concatenate[S, P], Op[T]]:
    """Make a step method return an :class:`Op` bound to its object's ``transport``."""

    def bound(self: S, /, *args: P.args, **kwargs: P.kwargs) -> Op[T]:
        return Op(method(self, *args, **kwargs), self.transport)

    bound.__name__ = method.__name__
    bound.__qualname__ = method.__qualname__
    bound.__doc__ = method.__doc__
    return bound
