"""Automatic pipelining on a Redis Cluster: one pipeline per node per event-loop iteration.

redis-py refuses script calls in its own Cluster pipelines, so this batcher builds its own.
The calls of one iteration are grouped by the primary that owns their hash slot (every key of
a memory shares one hash tag, so one memory's calls always go to one node), and each group
goes out as one non-transactional pipeline on a connection of that node's own pool; the
groups of different nodes travel concurrently.

The usual appends go as checked transactions (:mod:`compozy_memory._wire.optimistic`), as
on a standalone client, but one a hash slot: a transaction's keys must share one, and
memories have slots of their own. Each goes on a connection of its node's pool, beside the
node's pipeline, at most ``TRANSACTIONS_A_NODE`` at once: a batch's appends to more memories
of a node go as their script in its pipeline, so a client keeps a few connections a node. An
append whose memory changed, or whose slot moved, goes as its script.

The guarantees are those of the standalone batcher (:mod:`compozy_memory._io.batching`):
each caller gets its own reply or typed error, matched by position; a caller cancelled while
waiting is skipped and never receives or passes on another's reply; a call that found no
script or no Functions library on its node is sent again alone, which loads what is missing
there; a failure while a pipeline's replies are read disconnects that connection.

The slot map can be out of date (a resharding, a failover). A reply that only says the call
belongs elsewhere (``MOVED``, ``ASK``), or that the cluster cannot serve it just now
(``TRYAGAIN``, ``CLUSTERDOWN``), means the call did not run: it is sent again alone through
the Cluster client, which follows the redirect and refreshes its slot map, exactly as an
unbatched call would. A node that cannot be reached fails its group's calls with
:class:`~compozy_memory.BackendUnavailableError` (which the retry policy retries) and has the
slot map read again before the next pipeline is grouped, so the retries find the new owner.
A call whose slot the map does not cover goes alone; a caller cancelled before its pipeline
left is not sent at all.

It needs a redis-py whose Cluster nodes hand connections back and keep their node objects
across a refresh of the slot map (:data:`CLUSTER_BATCHING`); with an older one, Cluster calls
go alone as they always did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redis import exceptions as redis_errors
from redis.asyncio import RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import AbstractConnection

from compozy_memory._io.delivery import delivery_for
from compozy_memory._io.pipelining import (
    MAX_PIPELINE,
    Call,
    Queue,
    answer_in_turns,
    converse,
    exchange,
    fail_all,
    for_calls,
    settle,
)
from compozy_memory._io.transactions import transactions_for
from compozy_memory._io.translate import backend_errors, translate
from compozy_memory._wire.optimistic import AppendPlan
from compozy_memory._wire.scripts import Script, ScriptArg

__all__ = ["CLUSTER_BATCHING", "TRANSACTIONS_A_NODE", "ClusterBatcher"]

T = TypeVar("T")

#: Whether this redis-py's Cluster client can be batched. Older ones (5.0) replace every node
#: object when they read the slot map again, closing connections a pipeline may be using, and
#: hand no connection back by a public call: their calls go alone, as before.
CLUSTER_BATCHING = all(
    hasattr(ClusterNode, name) for name in ("release", "disconnect_free_connections")
)

# Replies that mean "not here, not now": the command did not run, and the Cluster client
# knows what to do with them (MovedError is an AskError).
_REDIRECTS = (
    redis_errors.AskError,
    redis_errors.TryAgainError,
    redis_errors.ClusterDownError,
)


#: The most transactions under way on one node, each on a connection of its own (a
#: transaction's keys share a slot, and each memory has its own): past them, appends go as
#: their script in the node's pipeline, so a client keeps a few connections a node however
#: many conversations it serves.
TRANSACTIONS_A_NODE = 2

# How many keys' slots are remembered; past that, the memory starts again.
_SLOT_CACHE = 65_536


class ClusterBatcher:
    """Gathers script calls on one Cluster client; sends each iteration's calls as one
    pipeline per owning node."""

    def __init__(self, client: RedisCluster) -> None:
        self.client = client
        self.delivery = delivery_for(client)
        self._queue = Queue(self._flush, self.delivery.send)
        # Node failures since the slot map was last read: it is read again before calls are
        # grouped while there are any.
        self._failures = 0
        # key -> its hash slot, which never changes (the slot's owner does): hashing every
        # call's key again cost more than grouping it.
        self._slots: dict[str, int] = {}
        #: The client's appends as checked transactions, one a slot
        #: (:mod:`compozy_memory._wire.optimistic`).
        self.transactions = transactions_for(client)
        # Transactions under way by node name: at most TRANSACTIONS_A_NODE.
        self._in_flight: dict[str, int] = {}

    async def run(
        self, script: Script, keys: Sequence[str], args: Sequence[ScriptArg], *, key: str
    ) -> Any:
        return await self._queue.run(script, keys, args, key)

    def _flush(self, pending: list[Call]) -> None:
        self._queue.spawn(self._dispatch(pending))

    async def _dispatch(self, pending: list[Call]) -> None:
        # A caller cancelled before its pipeline left: its call is not sent at all.
        calls = [call for call in pending if not call.future.done()]
        if not calls:
            return
        try:
            await self._prepare(calls[0].key)
            groups, unowned = self._group(calls)
            sends = [self._alone(call) for call in unowned]
            for node, group in groups:
                for start in range(0, len(group), MAX_PIPELINE):
                    sends.append(self._send(node, group[start : start + MAX_PIPELINE]))
            if len(sends) == 1:
                await sends[0]
            else:
                await asyncio.gather(*sends)
        except Exception as exc:
            # Preparing failed (typed), or a send met the unexpected: it has settled its own
            # calls already, and the others are settled by their own sends.
            fail_all(calls, exc)
        except BaseException as exc:  # cancelled: no caller may wait forever
            fail_all(calls, exc)
            raise

    async def _prepare(self, key: str) -> None:
        """Make sure the slot map is there, and fresh after a node failed."""
        with backend_errors("connect", key):
            # Idempotent and cheap once done; it also re-reads the map after an unbatched
            # call told the client to (a node it could not reach).
            await self.client.initialize()
            failures = self._failures
            if failures:  # concurrent refreshes coalesce in redis-py
                await self.client.nodes_manager.initialize()
                self._failures = max(0, self._failures - failures)

    def _group(self, calls: list[Call]) -> tuple[list[tuple[ClusterNode, list[Call]]], list[Call]]:
        """The calls by the primary that owns their slot, and those with no known owner."""
        groups: dict[str, tuple[ClusterNode, list[Call]]] = {}  # by name: older redis-py
        unowned: list[Call] = []  # nodes are not hashable
        slots, keyslot = self._slots, self.client.keyslot
        owners = self.client.nodes_manager.slots_cache
        for call in calls:
            node: ClusterNode | None = None
            if call.keys:
                key = call.keys[0]
                slot = slots.get(key)
                if slot is None:
                    if len(slots) >= _SLOT_CACHE:
                        slots.clear()
                    slot = slots[key] = keyslot(key)
                replicas = owners.get(slot)
                node = replicas[0] if replicas else None  # else a slot the map does not cover
            if node is None:
                unowned.append(call)
                continue
            group = groups.get(node.name)
            if group is None:
                groups[node.name] = (node, [call])
            else:
                group[1].append(call)
        return list(groups.values()), unowned

    def _alone(self, call: Call) -> Awaitable[None]:
        """Send one call by the unbatched road (the Cluster client routes and redirects it)."""
        return settle(call.future, self.delivery.send(call.script, call.keys, call.args, call.key))

    async def _send(self, node: ClusterNode, calls: list[Call]) -> None:
        """Send a node's calls: its usual appends as checked transactions, one a hash slot
        (a transaction's keys share one), the rest as one pipeline."""
        transactions, calls = self.transactions.split(
            calls,
            group=self._slot,
            most=TRANSACTIONS_A_NODE - self._in_flight.get(node.name, 0),
        )
        if not transactions:
            await self._send_scripts(node, calls)
            return
        sends = [self._send_planned(node, planned) for planned in transactions]
        if calls:
            sends.append(self._send_scripts(node, calls))
        self._in_flight[node.name] = self._in_flight.get(node.name, 0) + len(transactions)
        try:
            await asyncio.gather(*sends)
        finally:
            self._in_flight[node.name] -= len(transactions)

    def _slot(self, call: Call) -> int:
        key = call.keys[0]
        slot = self._slots.get(key)
        return slot if slot is not None else self.client.keyslot(key)

    async def _send_planned(
        self, node: ClusterNode, planned: list[tuple[Call, AppendPlan]]
    ) -> None:
        """One slot's planned appends as one transaction on a connection of ``node``; those it
        did not apply (their memory changed, or the slot moved), as their script."""
        scripted = await self.transactions.send(
            planned, lambda steps: self._on_node(node, lambda c: converse(c, steps))
        )
        await self._send_scripts(node, scripted)

    async def _send_scripts(self, node: ClusterNode, calls: list[Call]) -> None:
        if not calls:
            return
        # A lone call takes this road too: it is much cheaper than the Cluster client's own
        # dispatch, and a batch of one is common when nodes answer at different times.
        replies = await for_calls(calls, self._pipeline(node, calls))
        if replies is None:  # failed: every call has its error
            return
        again: list[Call] = []
        needs_reload = self.delivery.needs_reload

        def answer(call: Call, reply: Any) -> None:
            if isinstance(reply, _REDIRECTS) or needs_reload(reply):
                again.append(call)
            elif isinstance(reply, redis_errors.RedisError):
                call.future.set_exception(translate(reply, call.script.name, call.key))
            else:
                call.future.set_result(reply)

        await answer_in_turns(calls, replies, answer)
        if again:
            await asyncio.gather(*(self._alone(call) for call in again))

    async def _pipeline(self, node: ClusterNode, calls: list[Call]) -> list[Any]:
        """Send the calls on one connection of ``node`` and read every reply in order."""
        command = self.delivery.command
        commands = [
            (*command(call.script), len(call.keys), *call.keys, *call.args) for call in calls
        ]
        return await self._on_node(node, lambda connection: exchange(connection, commands))

    async def _on_node(
        self, node: ClusterNode, work: Callable[[AbstractConnection], Awaitable[T]]
    ) -> T:
        """``work`` on one connection of ``node``."""
        connection = node.acquire_connection()
        try:
            # A connection marked for reconnect after a topology refresh is renewed first.
            renew = getattr(node, "disconnect_if_needed", None)
            if renew is not None:
                await renew(connection)
            # A connection redis-py closed under us (a refresh of the slot map drops idle
            # connections as they are taken) comes out of exchange as a ConnectionError.
            result: T = await work(connection)
            return result
        except BaseException as exc:
            # A reply may be half read: the connection cannot be trusted with another caller.
            await connection.disconnect()
            if isinstance(exc, (redis_errors.ConnectionError, redis_errors.TimeoutError)):
                # The node may be gone (a failover): read the slot map again before the
                # retries are grouped, and drop its idle connections, as redis-py does.
                self._failures += 1
                await node.disconnect_free_connections()
            raise
        finally:
            node.release(connection)
