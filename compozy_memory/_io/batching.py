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

The usual append does not go as its script: :mod:`compozy_memory._wire.optimistic` plans it
as native commands, and a batch's planned appends go as one checked transaction on one
connection (``WATCH`` their keys and read them, then ``MULTI`` ... ``EXEC``), beside the
pipeline of the other calls. An append whose memory changed between the two round trips (the
transaction applied nothing), or that the plan does not take, goes as its script.

Cluster clients are batched per node, by :mod:`compozy_memory._io.cluster_batching`
(redis-py refuses script calls in its own Cluster pipelines); :func:`batcher_for` picks the
batcher that fits a client.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from typing import Any

from redis import exceptions as redis_errors
from redis.asyncio import Redis, RedisCluster

from compozy_memory._io.cluster_batching import CLUSTER_BATCHING, ClusterBatcher
from compozy_memory._io.delivery import delivery_for
from compozy_memory._io.pipelining import (
    MAX_PIPELINE,
    Batcher,
    Call,
    Queue,
    answer_in_turns,
    exchange,
    for_calls,
    settle,
)
from compozy_memory._io.transactions import (
    arun_on_connection,
    pooled,
    transactions_for,
)
from compozy_memory._io.translate import RedisClient, translate
from compozy_memory._wire.optimistic import AppendPlan
from compozy_memory._wire.scripts import Script, ScriptArg

__all__ = ["MAX_PIPELINE", "ScriptBatcher", "batcher_for"]


class ScriptBatcher:
    """Gathers script calls on one client and sends each iteration's calls as one pipeline."""

    def __init__(self, client: Redis) -> None:
        self.client = client
        self.delivery = delivery_for(client)
        self._queue = Queue(self._flush, self.delivery.send)
        #: The client's appends as checked transactions (the module's docstring): shared
        #: with its synchronous twin's road; ``transactions.on = False`` sends every call
        #: as its script.
        self.transactions = transactions_for(client)

    async def run(
        self, script: Script, keys: Sequence[str], args: Sequence[ScriptArg], *, key: str
    ) -> Any:
        return await self._queue.run(script, keys, args, key)

    def _flush(self, pending: list[Call]) -> None:
        for start in range(0, len(pending), MAX_PIPELINE):
            self._queue.spawn(self._send(pending[start : start + MAX_PIPELINE]))

    async def _send(self, calls: list[Call]) -> None:
        transactions, calls = self.transactions.split(calls)
        if not transactions:
            await self._send_scripts(calls)
            return
        planned = self._send_planned(transactions[0])
        if calls:
            await asyncio.gather(self._send_scripts(calls), planned)
        else:
            await planned

    async def _send_planned(self, planned: list[tuple[Call, AppendPlan]]) -> None:
        """Send planned appends as one transaction; those it did not apply, as their script."""
        client = self.client
        scripted = await self.transactions.send(
            planned, lambda steps: arun_on_connection(client, steps)
        )
        await self._send_scripts(scripted)

    async def _send_scripts(self, calls: list[Call]) -> None:
        if not calls:
            return
        if len(calls) == 1:
            script, keys, args, key, future = calls[0]
            await settle(future, self.delivery.send(script, keys, args, key))
            return
        replies = await for_calls(calls, self._pipeline(calls))
        if replies is None:  # failed: every call has its error
            return
        retries: list[Call] = []

        def answer(call: Call, reply: Any) -> None:
            if self.delivery.needs_reload(reply):
                retries.append(call)
            elif isinstance(reply, redis_errors.RedisError):
                call.future.set_exception(translate(reply, call.script.name, call.key))
            else:
                call.future.set_result(reply)

        await answer_in_turns(calls, replies, answer)
        if retries:
            run = self.delivery.send
            await asyncio.gather(
                *(settle(c.future, run(c.script, c.keys, c.args, c.key)) for c in retries)
            )

    async def _pipeline(self, calls: list[Call]) -> list[Any]:
        """Send the calls on one pooled connection and read every reply in order."""
        pool = self.client.connection_pool
        commands = [
            (*self.delivery.command(call.script), len(call.keys), *call.keys, *call.args)
            for call in calls
        ]
        connection = await pooled(pool)
        try:
            return await exchange(connection, commands)
        except BaseException:
            # A reply may be half read: the connection cannot be trusted with another caller.
            await connection.disconnect()
            raise
        finally:
            await pool.release(connection)


_BATCHERS: weakref.WeakKeyDictionary[RedisClient, Batcher] = weakref.WeakKeyDictionary()


def batcher_for(client: RedisClient) -> Batcher | None:
    """The shared batcher of ``client``: one pipeline per iteration for a standalone client,
    one per node for a Cluster client; None for anything else (and for a Cluster client of a
    redis-py too old to batch, see ``CLUSTER_BATCHING``)."""
    batcher = _BATCHERS.get(client)
    if batcher is None:
        if isinstance(client, RedisCluster):
            if not CLUSTER_BATCHING:
                return None
            batcher = ClusterBatcher(client)
        elif isinstance(client, Redis):
            batcher = ScriptBatcher(client)
        else:
            return None
        _BATCHERS[client] = batcher
    return batcher
