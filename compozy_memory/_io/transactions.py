"""Appends as checked transactions on a client: which go as one, and on one connection.

:mod:`compozy_memory._wire.optimistic` plans the usual append as native commands and writes a
transaction's two round trips as steps; this module runs them on one pooled connection of a
standalone client (``WATCH`` belongs to a connection), on ``redis.asyncio``
(:func:`arun_on_connection`, the batcher's road) or a blocking client
(:func:`run_on_connection`, the synchronous transport's), and keeps what a client learns on
the way (:class:`Transactions`): whether its server or user refuses ``WATCH`` (then every
append goes as the script), and which memories hold a planted dedupe record (the
transaction's read copies it; the script sizes it first).
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis import exceptions as redis_errors

from compozy_memory._io.pipelining import Call, answer_in_turns, converse, for_calls, pack
from compozy_memory._wire.dedupe_plan import Hint
from compozy_memory._wire.optimistic import AppendPlan
from compozy_memory._wire.scripts import Script, ScriptArg
from compozy_memory._wire.transaction import Outcome, RoundTrips, transaction

__all__ = [
    "TransactionStats",
    "Transactions",
    "answer_planned",
    "arun_on_connection",
    "pooled",
    "run_on_connection",
    "transactions_for",
]

#: The most memories a client remembers to append to as the script, or hints of (then it
#: forgets them all).
_SCRIPTED_MOST = 4096


@dataclass(slots=True)
class TransactionStats:
    """How a client's planned appends went: applied in a transaction, or as their script
    (the transaction found their memory changed, or the plan did not take it)."""

    applied: int = 0
    as_script: int = 0


@dataclass(slots=True)
class Transactions:
    """One client's appends as transactions: on until its server or user refuses ``WATCH``
    or ``TIME``; the memories whose appends go as the script; what became of them."""

    on: bool = True
    stats: TransactionStats = field(default_factory=TransactionStats)
    _scripted: set[str] = field(default_factory=set)
    # (memory's meta, process) -> what this client's last transaction left in the process's
    # dedupe record: when the next write will seal it or move its score, the plan reads the
    # dedupe set too.
    _hints: dict[tuple[str, bytes], Hint] = field(default_factory=dict)

    def plan(
        self, script: Script, keys: Sequence[str], args: Sequence[ScriptArg]
    ) -> AppendPlan | None:
        """The plan of this call, or None when it goes as its script."""
        if not self.on or script.name != "append":
            return None
        plan = AppendPlan.of(keys, args)
        if plan is None or plan.meta in self._scripted:
            return None
        if plan.process is not None:
            plan.expect(self._hints.get((plan.meta, plan.process)))
        return plan

    def split(
        self, calls: Sequence[Call], *, group: Callable[[Call], object] | None = None, most: int = 1
    ) -> tuple[list[list[tuple[Call, AppendPlan]]], list[Call]]:
        """A batch's calls as transactions of planned appends and the rest (their scripts'):
        one transaction a ``group`` of calls (all in one without it), at most ``most``, and
        one append a memory (the next one must read what it wrote)."""
        if not self.on or most < 1:
            return [], list(calls)
        groups: dict[object, list[tuple[Call, AppendPlan]]] = {}
        rest: list[Call] = []
        metas: set[str] = set()
        for call in calls:
            plan = self.plan(call.script, call.keys, call.args)
            if plan is None or plan.meta in metas:
                rest.append(call)
                continue
            name = group(call) if group is not None else None
            members = groups.get(name)
            if members is None:
                if len(groups) == most:  # no room for another transaction
                    rest.append(call)
                    continue
                members = groups[name] = []
            metas.add(plan.meta)
            members.append((call, plan))
        return list(groups.values()), rest

    async def send(
        self,
        planned: Sequence[tuple[Call, AppendPlan]],
        run: Callable[[RoundTrips], Awaitable[Outcome]],
    ) -> list[Call]:
        """Send planned appends as one transaction (``run`` sends its steps on a connection),
        answer those it applied, learn from it; returns the calls that go as their script."""
        calls = [call for call, _ in planned]
        plans = [plan for _, plan in planned]
        outcome = await for_calls(calls, run(transaction(plans)))
        if outcome is None:  # failed: every call has its error
            return []
        self.settle(plans, outcome)
        return await answer_planned(calls, outcome)

    def settle(self, plans: Sequence[AppendPlan], outcome: Outcome) -> None:
        """Learn from a transaction's outcome: a user refused ``WATCH`` or ``TIME`` (an ACL
        written before appends went as transactions), or a server that does not know them,
        turns the client's transactions off; a redirect (a Cluster's slot moved) does not."""
        refused = outcome.refused
        if isinstance(refused, redis_errors.NoPermissionError) or (
            refused is not None and "unknown command" in str(refused).lower()
        ):
            self.on = False
        for plan in plans:
            if plan.oversized:
                if len(self._scripted) >= _SCRIPTED_MOST:
                    self._scripted.clear()
                self._scripted.add(plan.meta)
        for plan, reply in zip(plans, outcome.replies, strict=True):
            if plan.written is not None and isinstance(reply, list) and plan.process is not None:
                if len(self._hints) >= _SCRIPTED_MOST:
                    self._hints.clear()
                self._hints[plan.meta, plan.process] = plan.written
        scripted = outcome.replies.count(None)
        self.stats.as_script += scripted
        self.stats.applied += len(outcome.replies) - scripted


_STATES: weakref.WeakKeyDictionary[Any, Transactions] = weakref.WeakKeyDictionary()


def transactions_for(client: Any) -> Transactions:
    """The transactions state of ``client`` (one per client, whichever handles use it)."""
    state = _STATES.get(client)
    if state is None:
        state = _STATES[client] = Transactions()
    return state


async def pooled(pool: Any) -> Any:
    """A connection from the async ``pool``."""
    try:  # redis-py 5.3+ takes no arguments (and deprecates them); before, a command name
        acquiring = pool.get_connection()
    except TypeError:  # raised by the call itself, before any connection is taken
        acquiring = pool.get_connection("EVALSHA")
    return await acquiring


async def answer_planned(calls: Sequence[Call], outcome: Outcome) -> list[Call]:
    """Answer each call with its plan's reply (a transaction's outcome, in the calls' order),
    in turns as a pipeline's callers are; returns the calls that go as their script."""
    scripted: list[Call] = []

    def answer(call: Call, reply: Any) -> None:
        if reply is None:
            scripted.append(call)
        elif isinstance(reply, Exception):
            call.future.set_exception(reply)
        else:
            call.future.set_result(reply)

    await answer_in_turns(calls, outcome.replies, answer)
    return scripted


async def arun_on_connection(client: Any, steps: RoundTrips) -> Outcome:
    """Run ``steps`` on one pooled connection of the async standalone ``client``."""
    pool = client.connection_pool
    connection = await pooled(pool)
    try:
        return await converse(connection, steps)
    except BaseException:
        # A reply may be half read, a WATCH left: the connection serves no other caller.
        await connection.disconnect()
        raise
    finally:
        await pool.release(connection)


def run_on_connection(client: Any, steps: RoundTrips) -> Outcome:
    """:func:`arun_on_connection` on a blocking standalone ``client``."""
    pool = client.connection_pool
    try:
        connection = pool.get_connection()
    except TypeError:
        connection = pool.get_connection("WATCH")
    try:
        commands = next(steps)
        while True:
            payload = pack(commands)
            # (a list of chunks: the blocking connection iterates what it is given)
            connection.send_packed_command(
                [payload] if payload is not None else connection.pack_commands(commands)
            )
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(connection.read_response())
                except redis_errors.ResponseError as exc:
                    replies.append(exc)
            commands = steps.send(replies)
    except StopIteration as done:
        outcome: Outcome = done.value
        return outcome
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)
