"""The effects steps yield: a closed set of plain values, which the drivers interpret.

A step function (:mod:`compozy_memory._wire.steps`) does no I/O. It yields one of the
effects below and is sent its outcome (or has its exception thrown in), as h11's state machine
hands its caller events and never touches a socket. The effects know nothing of transports:
the two drivers of :mod:`compozy_memory._io` (``Transport`` on ``redis.asyncio``,
``SyncTransport`` on redis-py's blocking clients) each perform them in one ``match`` over
:data:`Effect`, and record latency, spans and metrics from what each one says.

==============  ==========================================================  ==============
effect          what the core asks for, and why it cannot do it itself      outcome
==============  ==========================================================  ==============
``Call[T]``     one script or command on Redis, with the decoder of its     ``T``
                reply: the only way the core reaches a server
``Sleep``       a wait (a backoff, the session index's pacing);             ``None``
                ``Sleep(0)`` lets other tasks of an event loop run
``Offload[T]``  CPU work (the indexer's analysis): a worker thread beside   ``T``
                an event loop, the caller's thread otherwise
``Gather[T]``   several steps at once (the session index's agents):         ``list[T]``
                concurrent on a loop, so their calls share a round trip
``Await[T]``    a coroutine the user supplied (a summarizer, an embedder),  ``T``
                within a deadline: awaited, or run on the summarizers' loop
``Count``       token counts: gathered with the loop tick's other counts    counts
                (or one worker job) on an event loop, at once in a thread
``Hold[T]``     steps run under a flush lease kept alive beside them: a     ``T``
                task refreshing it (and cancelling them once it is lost),
                or a refresh between their effects in a thread
``Observe``     a measurement (flushes, locks, index lag...) for the        ``None``
                driver's metrics: the core imports no metrics library
==============  ==========================================================  ==============

A step reads an outcome with ``yield from``: each effect is iterable (as an asyncio
``Future`` is), yielding itself and returning what it was sent, so
``reply = yield from gateway_call`` has the type the effect declares, and mypy checks it. A
bare ``yield`` returns ``object`` (:data:`~compozy_memory._wire.steps.Steps` is sent
``object``): only an effect whose outcome is ``None`` is yielded bare (an ``Observe`` on the
append path, which saves a generator).

Effects are values nothing mutates, yet plain slotted dataclasses rather than frozen ones: a
frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, a microsecond
more on every call of the append path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Coroutine, Generator, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeAlias, TypeVar

from compozy_memory._model.tokens import TokenCounter
from compozy_memory._wire.contracts import ScriptArg

if TYPE_CHECKING:
    from compozy_memory._wire.scripts import Script

__all__ = [
    "ABOUT",
    "ONE_ATTEMPT",
    "RECORDING",
    "Await",
    "Call",
    "Command",
    "Content",
    "Count",
    "Counted",
    "Effect",
    "Family",
    "Gather",
    "Hold",
    "Keeper",
    "MetricsSink",
    "Observe",
    "Offload",
    "RunScript",
    "Sleep",
    "no_retries",
    "raw",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class _Yields(Generic[T]):
    """``yield from effect``: yields the effect, returns its outcome typed ``T``."""

    __slots__ = ()

    def __iter__(self) -> Generator[Effect, Any, T]:
        outcome: T = yield self  # type: ignore[misc]  # each subclass is an Effect
        return outcome


def raw(reply: Any) -> Any:
    """The decoder of a call whose reply is used as Redis sent it."""
    return reply


@dataclass(slots=True)
class RunScript:
    """What a script call sends: a script of ``lua/`` and its KEYS and ARGV (built by a
    gateway from the script's contract)."""

    script: Script
    keys: Sequence[str]
    args: Sequence[ScriptArg]


@dataclass(slots=True)
class Command:
    """What a command call sends: ``method`` of redis-py's client with ``args`` and keyword
    ``options``; ``binary``: the reply as bytes whatever the client's ``decode_responses``."""

    method: str
    args: tuple[object, ...]
    options: Mapping[str, object] = field(default_factory=dict)
    binary: bool = False


@dataclass(slots=True)
class Call(_Yields[T]):
    """One call to Redis and the decoding of its reply.

    ``operation`` names it in the metrics and spans (``append``, ``read``, ``recall``...;
    None: not a memory operation, sent once, neither timed nor traced, such as the eviction
    check of ``health()``); ``key`` is the memory (or index) it is about, named in errors;
    ``write`` asks for WAIT/WAITAOF after it where the handle's policy says so. Errors come
    out typed (:mod:`compozy_memory.errors`); a write the replicas did not acknowledge raises
    ReplicationError carrying the raw reply, for ``decode`` to read."""

    operation: str | None
    key: str
    send: RunScript | Command
    decode: Callable[[Any], T]
    write: bool = False


@dataclass(slots=True)
class Sleep(_Yields[None]):
    """Wait ``seconds`` (0: let other tasks of the event loop run; nothing in a thread)."""

    seconds: float


@dataclass(slots=True)
class Offload(_Yields[T]):
    """``work()``: CPU work, on a worker thread beside an event loop, in the caller's thread
    otherwise."""

    work: Callable[[], T]


@dataclass(slots=True)
class Gather(_Yields[list[T]]):
    """Several steps at once, their results in order: concurrently on an event loop (their
    calls share a round trip where the driver batches), one after the other in a thread."""

    steps: Sequence[Generator[Effect, object, T]]


@dataclass(slots=True)
class Await(_Yields[T]):
    """The coroutine ``make()`` makes (a summarizer's, an embedder's), within ``deadline``
    seconds (TimeoutError past it): awaited on an event loop, run on the summarizers' loop
    from a thread."""

    make: Callable[[], Coroutine[Any, Any, T]]
    deadline: float | None = None


#: A text's token count, or the exception counting it raised.
Counted: TypeAlias = "int | Exception"


@dataclass(slots=True)
class Count(_Yields[list[Counted]]):
    """Each of ``texts`` counted by ``counter``, in order: gathered with the loop tick's other
    counts on an event loop (:mod:`compozy_memory._io.counting`), at once in a thread."""

    counter: TokenCounter
    texts: Sequence[str]


class Keeper(Protocol):
    """What keeps a flush lease alive while its work runs (a :class:`~compozy_memory.Lease`):
    beside the work on an event loop, between its effects in a thread."""

    def hold(self, work: Callable[[], Coroutine[Any, Any, T]]) -> Coroutine[Any, Any, T]: ...

    def hold_sync(self, work: Generator[Effect, object, T], transport: Any) -> T: ...


@dataclass(slots=True)
class Hold(_Yields[T]):
    """``work`` run while ``keeper`` keeps its lease (refreshed every third of its TTL: by a
    task beside the work on an event loop, between the work's effects in a thread); found
    lost before the work commits, the work is stopped with LockLostError."""

    keeper: Keeper
    work: Generator[Effect, object, T]


#: The metric families the core measures (:class:`~compozy_memory.MemoryMetrics`'
#: attributes); the drivers time every call themselves.
Family = Literal[
    "messages",
    "priority_distribution",
    "trims",
    "flushes",
    "flush_optimization_hits",
    "messages_flushed",
    "tokens_saved",
    "lock_acquire",
    "lock_contention",
    "lock_refresh",
    "lock_duration",
    "summarizer_fallbacks",
    "embedder_fallbacks",
    "index_lag",
    "index_unindexed",
]


class MetricsSink(Protocol):
    """Where measurements go (:class:`~compozy_memory.MemoryMetrics`)."""

    def record(self, observed: Observe) -> None: ...


@dataclass(slots=True)
class Observe(_Yields[None]):
    """A measurement of ``family`` under ``labels`` (in the family's label order): a counter
    increased by ``value``, a histogram observing it, a gauge set to it; for the two families
    by priority (``messages``, ``priority_distribution``) ``value`` maps each priority to its
    messages and ``labels`` is the memory alone. Recorded in ``into`` (the metrics a part was
    made with) or else the driver's own."""

    family: Family
    labels: tuple[str, ...]
    value: float | Mapping[int, int] = 1.0
    into: MetricsSink | None = None


#: Every effect a step may yield; the drivers match on exactly these.
Effect: TypeAlias = (
    "Call[Any] | Sleep | Offload[Any] | Gather[Any] | Await[Any] | Count | Hold[Any] | Observe"
)


@dataclass(slots=True)
class Content:
    """What the operation being run is about, for a span that records content (opt-in): the
    messages it stores, or a search's query."""

    records: Sequence[object] | None = None
    query: str | None = None


class _Recording:
    """Whether spans record content: set by
    :func:`~compozy_memory.instrument_opentelemetry` (``capture_content``)."""

    __slots__ = ("content",)

    def __init__(self) -> None:
        self.content = False


#: Read by the steps before they state what an operation is about (:data:`ABOUT`), which
#: then costs nothing while no span records content.
RECORDING = _Recording()

#: The content of the operation the current steps run (set around them by the handle's
#: steps while :data:`RECORDING` says so; a driver's telemetry reads it for its spans).
ABOUT: ContextVar[Content | None] = ContextVar("compozy_memory_about", default=None)


#: Within :func:`no_retries`: every call makes one attempt, whatever the driver's policy.
ONE_ATTEMPT: ContextVar[bool] = ContextVar("compozy_memory_one_attempt", default=False)


@contextlib.contextmanager
def no_retries() -> Iterator[None]:
    """Within the block (and the tasks it starts), every call makes one attempt: for work
    that another call will redo anyway, such as a background catch-up of the index, which
    must not keep a dead server's connection busy for the retry deadline."""
    token = ONE_ATTEMPT.set(True)
    try:
        yield
    finally:
        ONE_ATTEMPT.reset(token)
