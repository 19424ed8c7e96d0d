"""A transaction of planned appends as steps: the two round trips on one connection.

:class:`~compozy_memory._wire.optimistic.AppendPlan` says what one append reads and writes;
:func:`transaction` is several plans' ``WATCH`` and reads, then their ``MULTI`` ... ``EXEC``,
as steps a driver sends on one connection (:mod:`compozy_memory._io.transactions`), sent
each round trip's replies.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

from compozy_memory._wire.dedupe_plan import as_bytes
from compozy_memory._wire.optimistic import AppendPlan
from compozy_memory.errors import ScriptError

__all__ = ["Outcome", "RoundTrips", "time_texts", "transaction"]


def time_texts(reply: Sequence[Any]) -> tuple[bytes, bytes]:
    """``TIME``'s reply as the server clock in milliseconds and in microseconds, as digits:
    what ``lib/clock.lua``'s ``now_texts`` gives a script."""
    seconds, micros = (as_bytes(part) or b"" for part in reply)
    us = micros.rjust(6, b"0")
    return seconds + us[:3], seconds + us


#: Steps on one connection: each yields the commands of a round trip and is sent their
#: replies (an error reply as its exception, in its place).
RoundTrips = Generator[list[tuple[Any, ...]], list[Any], "Outcome"]


@dataclass(slots=True)
class Outcome:
    """What a transaction of plans came to: for each plan the script's reply (applied), None
    (nothing applied: send the script) or the error that it applied otherwise than planned;
    and the error ``WATCH`` or ``TIME`` met, if any (a user's ACL refusing them, a Cluster
    node redirecting the keys), which the driver judges."""

    replies: list[Any]
    refused: BaseException | None = None


def transaction(plans: Sequence[AppendPlan]) -> RoundTrips:
    """The plans' transaction on one connection: ``WATCH`` their keys with their reads and
    ``TIME``; then ``MULTI``, the writes of the plans that can go, ``EXEC`` (or ``UNWATCH``
    when none can). ``EXEC`` applies nothing when a watched key changed between the round
    trips: every plan is then None."""
    watched = [key for plan in plans for key in plan.watch]
    reads = [plan.reads() for plan in plans]
    commands: list[tuple[Any, ...]] = [("WATCH", *watched)]
    for some in reads:
        commands += some
    commands.append(("TIME",))
    started = time.monotonic()
    replies = yield commands
    none: list[Any] = [None] * len(plans)
    for reply in (replies[0], replies[-1]):
        if isinstance(reply, BaseException):
            yield [("UNWATCH",)]
            return Outcome(none, refused=reply)
    clock = time_texts(replies[-1])
    writes: list[list[tuple[Any, ...]]] = []
    at = 1
    for plan, some in zip(plans, reads, strict=True):
        try:
            writes.append(plan.writes(replies[at : at + len(some)], clock))
        except Exception:  # stored data the plan did not foresee: it is the script's
            writes.append([])
        at += len(some)
    # A deadline checked at the reads' server clock may be due by EXEC: a late caller (a
    # busy loop, a slow link) leaves it to the script, which moves it.
    elapsed_ms = (time.monotonic() - started) * 1000
    writes = [
        [] if some and plan.late(elapsed_ms) else some
        for plan, some in zip(plans, writes, strict=True)
    ]
    if not any(writes):
        yield [("UNWATCH",)]
        return Outcome(none)
    commands = [("MULTI",)]
    for some in writes:
        commands += some
    commands.append(("EXEC",))
    applied = (yield commands)[-1]
    if not isinstance(applied, list):  # None: a watched key changed; or EXECABORT
        return Outcome(none)
    out: list[Any] = []
    at = 0
    for plan, some in zip(plans, writes, strict=True):
        if not some:
            out.append(None)
            continue
        done = applied[at : at + len(some)]
        at += len(some)
        reply = plan.reply(done)
        out.append(
            reply
            if reply is not None
            else ScriptError(
                f"append: the transaction applied otherwise than planned ({done!r})",
                key=plan.meta,
            )
        )
    return Outcome(out)
