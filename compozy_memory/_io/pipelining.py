"""What both batchers share: the queued call, packing, one round trip, settling a caller.

:mod:`compozy_memory._io.batching` (standalone clients) and
:mod:`compozy_memory._io.cluster_batching` (Cluster clients) gather the script calls of one
event-loop iteration and send them as non-transactional pipelines; this module holds the parts
that do not depend on where a pipeline goes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar, cast

from redis import exceptions as redis_errors
from redis.asyncio.connection import AbstractConnection

from compozy_memory._io.translate import translate
from compozy_memory._wire.scripts import Script, ScriptArg

T = TypeVar("T")

__all__ = [
    "MAX_PIPELINE",
    "RESUME_GROUP",
    "Batcher",
    "Call",
    "Queue",
    "answer_in_turns",
    "converse",
    "exchange",
    "fail_all",
    "for_calls",
    "pack",
    "settle",
]

#: The most calls one pipeline carries; a larger iteration goes out as several.
MAX_PIPELINE = 256

#: Callers answered by one pipeline go on this many at a time, with a turn of the event loop
#: between groups. Handed out all at once, every conversation would run its next step in the
#: same iteration and send it in the same next pipeline: the client would work while the
#: server waited, then wait while the server worked. In turns, the first callers' next calls
#: leave while the last ones are still being handed their replies, and client and server
#: overlap (``benchmarks/bench_append.py`` measures it: appends with their counts supplied,
#: against raw RPUSH).
RESUME_GROUP = 16

# hiredis's stub types the command as a one-element tuple; it takes any length.
_Packer = Callable[[tuple[Any, ...]], bytes]
_pack: _Packer | None
try:  # redis[hiredis] brings it; without it, redis-py's own packer is used
    from hiredis import pack_command

    _pack = cast(_Packer, pack_command)
except ImportError:  # pragma: no cover
    _pack = None


class Batcher(Protocol):
    """What the transport needs of a batcher."""

    async def run(
        self, script: Script, keys: Sequence[str], args: Sequence[ScriptArg], *, key: str
    ) -> Any: ...


class Call(NamedTuple):
    """One caller's script call, waiting for its pipeline."""

    script: Script
    keys: Sequence[str]
    args: Sequence[ScriptArg]
    key: str
    future: asyncio.Future[Any]


class Queue:
    """The calls of the current event-loop iteration, handed to ``flush`` on the next one.

    A call made from another event loop while this one has calls queued is not queued: it
    is sent by ``direct`` (the caller's own round trip)."""

    def __init__(
        self,
        flush: Callable[[list[Call]], None],
        direct: Callable[[Script, Sequence[str], Sequence[ScriptArg], str], Awaitable[Any]],
    ) -> None:
        self._flush = flush
        self._direct = direct
        self._pending: list[Call] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def run(
        self, script: Script, keys: Sequence[str], args: Sequence[ScriptArg], key: str
    ) -> Any:
        loop = asyncio.get_running_loop()
        if self.loop is not loop:
            if self._pending:  # a call from another loop while this one has work queued
                return await self._direct(script, keys, args, key)
            self.loop = loop
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append(Call(script, keys, args, key, future))
        if len(self._pending) == 1:
            loop.call_soon(self._take)
        return await future

    def _take(self) -> None:
        pending, self._pending = self._pending, []
        self._flush(pending)

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` as a task of the queue's loop, kept referenced until it ends."""
        assert self.loop is not None
        task = self.loop.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


def pack(commands: Sequence[tuple[Any, ...]]) -> bytes | None:
    """``commands`` packed by hiredis, in C; None without hiredis (redis-py packs them)."""
    if _pack is None:  # pragma: no cover
        return None
    return b"".join(_pack(command) for command in commands)


async def exchange(connection: AbstractConnection, commands: list[tuple[Any, ...]]) -> list[Any]:
    """Send ``commands`` on ``connection`` in one write and read every reply, in order.

    A command's error reply comes back as its exception, in its place. Any other failure
    propagates (a connection closed under the write as ConnectionError), and the caller must
    disconnect ``connection``: a reply may be half read.

    Commands are packed by hiredis, in C: redis-py's asyncio connection packs in Python, which
    costs more than the script itself for an 11-argument FCALL."""
    packed = pack(commands)
    payload = packed if packed is not None else connection.pack_commands(commands)
    try:
        await connection.send_packed_command(payload, check_health=False)
    except (AttributeError, TypeError) as exc:
        if "'NoneType' object" not in str(exc):
            raise
        # redis-py lets a transport closed under it (by the peer, or by another task on a
        # Cluster's slot refresh) leak asyncio's internals instead of a ConnectionError
        # (redis-py issue 4287): nothing was sent, so it is a dropped connection, retried.
        raise redis_errors.ConnectionError(f"connection closed while in use ({exc})") from exc
    return await _read_replies(connection, len(commands))


#: A batch's replies are read under one deadline of the connection's ``socket_timeout``:
#: ``Connection.read_response`` opens a timeout of its own for each reply, which cost a client
#: more than the reply (7 µs of an append's 50). The deadline is moved on a reply that comes
#: this part of the timeout or more after it was last moved, so every reply still gets (all
#: but this part of) ``socket_timeout`` of its own, as it did read one by one: a batch of
#: large replies on a slow link is not timed out as a whole; replies that come together move
#: it once.
_DEADLINE_PART = 16


# redis-py's own reading of a reply: a connection class that replaces it is read through it.
_READ_RESPONSE = AbstractConnection.read_response


async def _read_replies(connection: AbstractConnection, count: int) -> list[Any]:
    """``count`` replies from ``connection``, each error reply as its exception in its place.

    They are read from the connection's parser (which handles RESP3's push messages itself)
    under one deadline (``_DEADLINE_PART``); from the connection, one by one, where it has
    no parser of its own or reads replies its own way (fakeredis's connections)."""
    replies: list[Any] = []
    parser = getattr(connection, "_parser", None)
    timeout = connection.socket_timeout
    if (
        parser is None
        or not hasattr(parser, "read_response")
        or getattr(type(connection), "read_response", None) is not _READ_RESPONSE
    ):
        for _ in range(count):
            try:
                replies.append(await connection.read_response())
            except redis_errors.ResponseError as exc:
                replies.append(exc)
        return replies
    read = parser.read_response
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout) as deadline:
            if timeout is None:
                for _ in range(count):
                    replies.append(await read())
            else:
                step = timeout / _DEADLINE_PART
                moved = loop.time()
                for _ in range(count):
                    replies.append(await read())
                    now = loop.time()
                    if now - moved >= step:
                        deadline.reschedule(now + timeout)
                        moved = now
    except TimeoutError as exc:
        raise redis_errors.TimeoutError(f"Timeout reading from {_where(connection)}") from exc
    except OSError as exc:
        raise redis_errors.ConnectionError(
            f"Error while reading from {_where(connection)}: {exc}"
        ) from exc
    return replies


def _where(connection: AbstractConnection) -> str:
    host, port = getattr(connection, "host", None), getattr(connection, "port", None)
    return f"{host}:{port}" if host else "the server"


async def answer_in_turns(
    calls: Sequence[Call], replies: Sequence[Any], answer: Callable[[Call, Any], None]
) -> None:
    """``answer`` each call still waiting with its reply, RESUME_GROUP calls a turn of the
    event loop; cancelled between turns, every call still waiting is cancelled too."""
    try:
        for turn, (call, reply) in enumerate(zip(calls, replies, strict=True)):
            if turn and turn % RESUME_GROUP == 0:
                await asyncio.sleep(0)  # the callers answered so far go on first
            if not call.future.done():
                answer(call, reply)
    except BaseException as exc:  # no caller may wait forever
        fail_all(calls, exc)
        raise


async def for_calls(calls: Sequence[Call], work: Awaitable[T]) -> T | None:
    """``work``'s outcome, sent on behalf of ``calls``; None when it failed with a Redis
    error, which each call still waiting is then given (translated). Any other failure
    (cancelled, broken) settles every call still waiting and propagates."""
    try:
        return await work
    except redis_errors.RedisError as exc:
        for call in calls:
            if not call.future.done():
                call.future.set_exception(translate(exc, call.script.name, call.key))
        return None
    except BaseException as exc:  # no caller may wait forever
        fail_all(calls, exc)
        raise


async def converse(
    connection: AbstractConnection, steps: Generator[list[tuple[Any, ...]], list[Any], T]
) -> T:
    """Run ``steps`` on ``connection``: each yields a round trip's commands and is sent their
    replies (:func:`exchange`), until it returns."""
    try:
        commands = next(steps)
        while True:
            commands = steps.send(await exchange(connection, commands))
    except StopIteration as done:
        result: T = done.value
        return result


def fail_all(calls: Sequence[Call], exc: BaseException) -> None:
    """Settle every call still waiting with ``exc`` (cancelled, for a cancellation)."""
    for call in calls:
        future = call.future
        if future.done():
            continue
        if isinstance(exc, asyncio.CancelledError):
            future.cancel()
        else:
            future.set_exception(exc)


async def settle(future: asyncio.Future[Any], call: Awaitable[Any]) -> None:
    """Await ``call`` and give its outcome to ``future``, unless its caller has gone."""
    try:
        result = await call
    except Exception as exc:
        if not future.done():
            future.set_exception(exc)
    else:
        if not future.done():
            future.set_result(result)
