"""Automatic pipelining: script calls made in one event-loop iteration share one round trip.

A replica serving many conversations issues many small script calls at once. Sent one by
one, each pays a write and a read on its own connection, on the client and on the server;
gathered into one non-transactional pipeline they pay once. ``benchmarks/bench_core.py``
measures the difference.

Semantics stay those of separate calls: each command in the pipeline succeeds or fails on its
own, each caller gets its own reply or typed error, and replies are matched to callers by
position, so a caller that is cancelled while waiting is skipped and never receives, or
passes on, another caller's reply. Commands that found no script (NOSCRIPT, or no Functions
library yet) were not run, and are sent again individually, which loads what is missing.

A batch goes out on one connection from the client's pool, packed by hiredis (in C); any
failure while its replies are read disconnects that connection, so a half-read reply can
never reach a later caller.

Only standalone ``redis.asyncio.Redis`` clients are batched: redis-py refuses script calls in
Cluster pipelines, so Cluster clients send each call directly.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Sequence
from typing import Any, cast

from redis import exceptions as redis_errors
from redis.asyncio import Redis

from compozy_memory._wire.delivery import delivery_for
from compozy_memory._wire.scripts import Script, ScriptArg
from compozy_memory._wire.translate import RedisClient, translate

__all__ = ["MAX_PIPELINE", "ScriptBatcher", "batcher_for"]

MAX_PIPELINE = 256

# hiredis's stub types the command as a one-element tuple; it takes any length.
_Packer = Callable[[tuple[Any, ...]], bytes]
_pack: _Packer | None
try:  # redis[hiredis] brings it; without it, redis-py's own packer is used
    from hiredis import pack_command

    _pack = cast(_Packer, pack_command)
except ImportError:  # pragma: no cover
    _pack = None

_Call = tuple[Script, Sequence[str], Sequence[ScriptArg], str, "asyncio.Future[Any]"]


class ScriptBatcher:
    """Gathers script calls on one client and sends each iteration's calls as one pipeline."""

    def __init__(self, client: Redis) -> None:
        self.client = client
        self.delivery = delivery_for(client)
        self._pending: list[_Call] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(
        self, script: Script, keys: Sequence[str], args: Sequence[ScriptArg], *, key: str
    ) -> Any:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._pending:  # a call from another loop while this one has work queued
                return await self.delivery.run(script, keys, args, key)
            self._loop = loop
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((script, keys, args, key, future))
        if len(self._pending) == 1:
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        assert self._loop is not None
        for start in range(0, len(pending), MAX_PIPELINE):
            task = self._loop.create_task(self._send(pending[start : start + MAX_PIPELINE]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, calls: list[_Call]) -> None:
        if len(calls) == 1:
            script, keys, args, key, future = calls[0]
            await _settle(future, self.delivery.run(script, keys, args, key))
            return
        try:
            replies = await self._pipeline(calls)
        except redis_errors.RedisError as exc:
            for script, _, _, key, future in calls:
                if not future.done():
                    future.set_exception(translate(exc, script.name, key))
            return
        except BaseException as exc:  # cancelled or broken: no caller may wait forever
            for *_, future in calls:
                if future.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(exc)
            raise
        retries = []
        for call, reply in zip(calls, replies, strict=True):
            script, keys, args, key, future = call
            if future.done():
                continue
            if self.delivery.needs_reload(reply):
                retries.append(_settle(future, self.delivery.run(script, keys, args, key)))
            elif isinstance(reply, redis_errors.RedisError):
                future.set_exception(translate(reply, script.name, key))
            else:
                future.set_result(reply)
        if retries:
            await asyncio.gather(*retries)

    async def _pipeline(self, calls: list[_Call]) -> list[Any]:
        """Send the calls on one pooled connection and read every reply in order.

        Commands are packed by hiredis, in C: redis-py's asyncio connection packs in Python,
        which cost more than the script itself for an 11-argument EVALSHA."""
        pool = self.client.connection_pool
        commands = [
            (*self.delivery.command(script), len(keys), *keys, *args)
            for script, keys, args, _, _ in calls
        ]
        try:  # redis-py 5.3+ takes no arguments (and deprecates them); before, a command name
            acquiring = pool.get_connection()  # type: ignore[no-untyped-call]  # redis-py
        except TypeError:  # raised by the call itself, before any connection is taken
            acquiring = pool.get_connection("EVALSHA")  # type: ignore[no-untyped-call]
        connection = await acquiring
        try:
            if _pack is not None:
                payload: bytes | list[bytes] = b"".join(_pack(command) for command in commands)
            else:
                payload = connection.pack_commands(commands)
            await connection.send_packed_command(payload, check_health=False)
            replies: list[Any] = []
            for _ in calls:
                try:
                    replies.append(await connection.read_response())
                except redis_errors.ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            # A reply may be half read: the connection cannot be trusted with another caller.
            await connection.disconnect()
            raise
        finally:
            await pool.release(connection)
        return replies


async def _settle(future: asyncio.Future[Any], call: Any) -> None:
    try:
        result = await call
    except Exception as exc:
        if not future.done():
            future.set_exception(exc)
    else:
        if not future.done():
            future.set_result(result)


_BATCHERS: weakref.WeakKeyDictionary[Redis, ScriptBatcher] = weakref.WeakKeyDictionary()


def batcher_for(client: RedisClient) -> ScriptBatcher | None:
    """The shared batcher of a standalone client; None for a Cluster client."""
    if not isinstance(client, Redis):
        return None
    batcher = _BATCHERS.get(client)
    if batcher is None:
        batcher = _BATCHERS[client] = ScriptBatcher(client)
    return batcher
