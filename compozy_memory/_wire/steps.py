"""Steps: the library's logic written once, without I/O, run by an async or a sync transport.

A *step function* is a generator. It does no I/O itself: it yields an *effect* (a script
call, a plain command, a pause, work for a thread...) and is sent back that effect's outcome,
or has its exception thrown in where it yielded, until it returns its result::

    def read_all(gateway) -> Steps[list[Message]]:
        page = yield from gateway.read_page(0, 999)   # one script call, decoded
        ...
        return messages

:func:`adrive` runs steps on an async transport (``redis.asyncio``), :func:`drive` on a sync
one (redis-py's blocking client); each effect says how it runs under each (:meth:`arun`,
:meth:`run`). So the contracts, the encoding, the decoding and every operation of several
calls (a trim's steps, a paged read, the indexer, a flush) exist once, and the two APIs are
two thin drivers over them, as h11 keeps HTTP apart from sockets.

An :class:`Op` is a step function's generator bound to the transport of the object that
made it: ``yield from`` it inside other steps, or ``await`` it where that transport is async
(``await memory.gateway.health()``). Methods decorated with :func:`op` return one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeAlias, TypeVar

from compozy_memory._wire.contracts import ScriptArg
from compozy_memory.errors import UsageError

__all__ = [
    "PAUSE",
    "CommandCall",
    "Effect",
    "Gather",
    "Offload",
    "Op",
    "Pause",
    "ScriptCall",
    "Sleep",
    "Steps",
    "adrive",
    "blocking",
    "drive",
    "is_sync",
    "op",
]

T = TypeVar("T")
P = ParamSpec("P")

#: A step function's generator: yields effects, is sent their outcomes, returns ``T``.
Steps: TypeAlias = Generator["Effect", Any, T]


class Effect(Protocol):
    """Something steps ask for: how it happens on an async and on a sync transport."""

    def arun(self, io: Any) -> Awaitable[Any]: ...

    def run(self, io: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """One script call (built by a gateway from the script's contract); the raw reply."""

    script: Any  # a compozy_memory._wire.scripts.Script (scripts imports contracts only)
    keys: Sequence[str]
    args: Sequence[ScriptArg]
    key: str
    write: bool = False

    def arun(self, io: Any) -> Any:
        return io.run(self.script, self.keys, self.args, key=self.key, write=self.write)

    def run(self, io: Any) -> Any:
        return io.run(self.script, self.keys, self.args, key=self.key, write=self.write)


@dataclass(frozen=True, slots=True)
class CommandCall:
    """A plain redis-py command (``method`` of the client), retried like scripts."""

    operation: str
    method: str
    args: tuple[Any, ...]
    key: str
    options: dict[str, Any] = field(default_factory=dict)

    def arun(self, io: Any) -> Any:
        return io.command(self.operation, self.method, *self.args, key=self.key, **self.options)

    def run(self, io: Any) -> Any:
        return io.command(self.operation, self.method, *self.args, key=self.key, **self.options)


class Pause:
    """Let other work go on (a turn of the event loop; nothing on a sync transport)."""

    __slots__ = ()

    async def arun(self, io: Any) -> None:
        del io
        await asyncio.sleep(0)

    def run(self, io: Any) -> None:
        del io


PAUSE = Pause()


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``seconds`` (a backoff)."""

    seconds: float

    async def arun(self, io: Any) -> None:
        del io
        await asyncio.sleep(self.seconds)

    def run(self, io: Any) -> None:
        del io
        time.sleep(self.seconds)


@dataclass(frozen=True, slots=True)
class Offload:
    """CPU work: on a worker thread beside an event loop, in the caller's thread otherwise."""

    work: Callable[..., Any]
    args: tuple[Any, ...] = ()

    def arun(self, io: Any) -> Awaitable[Any]:
        del io
        return asyncio.to_thread(self.work, *self.args)

    def run(self, io: Any) -> Any:
        del io
        return self.work(*self.args)


@dataclass(frozen=True, slots=True)
class Gather:
    """Several steps at once: concurrently on an event loop (their calls share a round trip
    where the transport batches), one after the other in a thread; their results in order."""

    steps: Sequence[Steps[Any]]

    async def arun(self, io: Any) -> list[Any]:
        return list(await asyncio.gather(*(adrive(s, io) for s in self.steps)))

    def run(self, io: Any) -> list[Any]:
        return [drive(s, io) for s in self.steps]


async def adrive(steps: Steps[T] | Op[T], io: Any) -> T:
    """Run ``steps`` on the async transport ``io``: each effect awaited, its outcome (or its
    exception) handed back, until the steps return."""
    gen = iter(steps)
    try:
        effect = gen.send(None)
        while True:
            try:
                value = await effect.arun(io)
            except BaseException as exc:  # the steps decide: they may catch it
                effect = gen.throw(exc)
            else:
                effect = gen.send(value)
    except StopIteration as done:
        result: T = done.value
        return result


def drive(steps: Steps[T] | Op[T], io: Any, *, between: Callable[[], None] | None = None) -> T:
    """Run ``steps`` on the sync transport ``io``. ``between`` runs before each effect; what
    it raises is thrown into the steps as the effect's failure would be."""
    gen = iter(steps)
    try:
        effect = gen.send(None)
        while True:
            try:
                if between is not None:
                    between()
                value = effect.run(io)
            except BaseException as exc:
                effect = gen.throw(exc)
            else:
                effect = gen.send(value)
    except StopIteration as done:
        result: T = done.value
        return result


def is_sync(io: object) -> bool:
    """Whether ``io`` is a sync transport (its calls block and return)."""
    return getattr(io, "synchronous", False) is True


class Op(Generic[T]):
    """Steps bound to a transport: ``yield from`` them (they run on whatever transport runs
    the steps around them), ``await`` them on an async one, or ``yield`` one as an effect:
    it then runs on its own transport (when it is of the kind that runs the steps around it)
    with that transport's retry policy and metrics (the session index's calls after a
    memory's write)."""

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
        return adrive(self.steps, self.io).__await__()

    def arun(self, io: Any) -> Awaitable[T]:
        return adrive(self.steps, io if is_sync(self.io) else self.io)

    def run(self, io: Any) -> T:
        return drive(self.steps, self.io if is_sync(self.io) else io)


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
