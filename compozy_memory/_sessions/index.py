"""The session index: every session (memory) of a project, per agent, by last activity.

A session is a memory. Its index entry is written after writes to it, in a slot of the
project's own (keys and scripts: :mod:`compozy_memory._sessions.calls`), so listing is
one bounded range read whatever the number of sessions (no ``KEYS``, no ``SCAN``), on Redis
Cluster as on one server. Every index write of a project lands on one node.

**Off the append path.** An append never waits for the index: :meth:`SessionIndex.noticed`
records the memory's totals in memory and returns. The entries noticed in one event-loop tick
go out together, one ``session_touch`` call per agent, sent when the loop next runs. While
writes keep coming, the next call waits for the one before it and then :data:`INTERVAL` (50 ms)
more, and carries every entry noticed meanwhile (the newest totals of each session). So there
is at most one index call in flight per project and process, and at most about 20 a second
whatever the number of appends; an entry lags the write it follows by at most ``interval`` plus
two round trips (plus the retries below). ``await manager.aclose()`` (or
:meth:`SessionIndex.flushed`) waits for what is still pending; ``list_sessions`` does too, so a
process reads its own writes. On a blocking client (a
:class:`~compozy_memory.SyncMemoryManager`'s index) the calls go from a background thread
(:mod:`compozy_memory._wire.background`) instead of a task, and ``flushed_sync`` waits. A
process that ends without either loses at most the entries of its last ``interval``; the next
write to those sessions brings them back.

**After flushes, trims and clears.** Their new totals, which their scripts return, are
recorded the same way, under the last id the writer knew (a flush: its snapshot's; a trim or
clear: the handle's last write), so ``ls`` shows the counts after a flush. No read is added.

**Consistency.** The index cannot share the memory's slot, so it is updated by a second call.
A failed call is retried (:data:`TOUCH_ATTEMPTS`); if every try fails, the writes stand and
those entries are stale (their counts and last-active time lag) until the sessions' next
write, or until :meth:`SessionIndex.repair` rewrites them from the memories' own totals.
Counts from an older state never replace newer ones (``lua/sessions/session_touch.lua``). A session
whose memory expired stays listed until :meth:`SessionIndex.prune` drops entries inactive for
longer than the TTL.

Session ids: :func:`uuid7` (RFC 9562 version 7, time-ordered), for callers that have none.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compozy_memory._io.connection import sync_twin, transport_for
from compozy_memory._io.retry import RetryPolicy
from compozy_memory._model.keys import validate_project
from compozy_memory._model.limits import MAX_SESSIONS_PAGE
from compozy_memory._model.results import AppendResult
from compozy_memory._sessions.calls import SessionGateway, Touch
from compozy_memory._store.handle import Handle
from compozy_memory._wire.background import Debounced
from compozy_memory._wire.effects import Call, Command, Gather, Sleep, raw
from compozy_memory._wire.steps import Steps, is_sync, op
from compozy_memory.errors import CompozyMemoryError, UsageError

__all__ = [
    "INTERVAL",
    "TOUCH_ATTEMPTS",
    "IndexEntry",
    "SessionIndex",
    "SessionInfo",
    "SessionPage",
    "uuid7",
]

log = logging.getLogger("compozy_memory.sessions")

#: How many times an index update is tried before its entries are left stale.
TOUCH_ATTEMPTS = 3
#: Seconds between two index calls of a project while writes keep coming.
INTERVAL = 0.05


def uuid7() -> str:
    """A new UUID version 7 (RFC 9562): 48 bits of Unix milliseconds, then 74 random bits,
    so ids sort by creation time. (``uuid.uuid7`` arrives in Python 3.14.)"""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")  # 80 bits; 74 are used
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version
    value |= ((rand >> 68) & 0xFFF) << 64  # rand_a, 12 bits
    value |= 0b10 << 62  # variant
    value |= rand & ((1 << 62) - 1)  # rand_b, 62 bits
    return str(uuid.UUID(int=value))


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One session of the index."""

    key: str
    agent: str | None
    created_ms: int
    last_active_ms: int
    messages: int
    tokens: int
    last_id: int


@dataclass(frozen=True, slots=True)
class SessionPage:
    sessions: list[SessionInfo]
    #: Pass to the next call for the page after this one; None: this was the last.
    cursor: str | None


class SessionIndex:
    """A project's session index (see the module's docstring)."""

    def __init__(
        self,
        client: Any,
        project: str,
        *,
        retry: RetryPolicy | None = None,
        transport: Any = None,
        interval: float = INTERVAL,
    ) -> None:
        if transport is None and client is not None:
            base = f"compozy:{project}:sessions:{{{project}}}"
            transport = transport_for(client, retry=retry, batching=True, key=base)
        self.project = validate_project(project)
        self.client = client
        self.retry = retry
        self._gateway = None if transport is None else SessionGateway(transport, project)
        #: Index updates given up after every attempt (each leaves its entries stale).
        self.failures = 0
        #: Seconds between two index calls while writes keep coming (see the module's
        #: docstring): the bound on how far an entry lags, beyond one round trip.
        self.interval = interval
        # agent -> session -> the newest totals noticed and not yet sent (threads of a sync
        # manager notice at once: the lock keeps the buckets whole)
        self._pending: dict[str | None, dict[str, Touch]] = {}
        self._lock = threading.Lock()
        # The drain reads self.transport when it runs (a test may swap it): not of_steps.
        self._job = Debounced(
            sync=is_sync(transport),
            work_async=self._drain_async,
            work_sync=self._drain_sync,
            debounce=0.0,
        )
        self._twin: SessionIndex | None = None

    @property
    def gateway(self) -> SessionGateway:
        if self._gateway is None:
            raise UsageError("this session index has no client")
        return self._gateway

    @property
    def transport(self) -> Any:
        return self.gateway.transport

    @transport.setter
    def transport(self, value: Any) -> None:
        self._gateway = SessionGateway(value, self.project)

    def to_sync(self) -> SessionIndex:
        """This index on a blocking client (the twin of an async one, made on first use):
        what a handle's blocking twin notices its writes in."""
        if is_sync(self.transport):
            return self
        if self._twin is None:
            self._twin = SessionIndex(
                sync_twin(self.client), self.project, retry=self.retry, interval=self.interval
            )
        return self._twin

    @property
    def all_key(self) -> str:
        return self.gateway.keys.all

    @property
    def info_key(self) -> str:
        return self.gateway.keys.info

    def agent_key(self, agent: str) -> str:
        return self.gateway.keys.agent(agent)

    def entry(self, agent: str | None) -> IndexEntry:
        """What a handle written by ``agent`` calls after its writes."""
        return IndexEntry(self, agent)

    @op
    def touch(
        self, session: str, *, agent: str | None, last_id: int, messages: int, tokens: int
    ) -> Steps[int]:
        """Record a write to ``session`` now, in a call of its own; returns its last-active
        time (server clock, ms)."""
        return (yield from self.gateway.touch(agent, [Touch(session, last_id, messages, tokens)]))

    def noticed(self, memory: Handle, result: AppendResult, agent: str | None) -> None:
        """After a write to ``memory``: record its totals with the next index call (never
        waits, never raises)."""
        self._record(
            agent,
            Touch(
                memory.keys.key,
                result.last_id,
                result.total_count,
                result.total_tokens,
                time.monotonic(),
            ),
        )
        self._start()

    def removed(
        self, memory: Handle, agent: str | None, *, last_id: int, messages: int, tokens: int
    ) -> None:
        """After a flush, trim or clear of ``memory`` (its totals after it, and the last id
        the caller knew): record them with the next index call (never waits, never raises).
        If writes the caller did not see came since, their entries are newer and win, and
        this one is dropped: the next write brings the counts back."""
        self._record(agent, Touch(memory.keys.key, last_id, messages, tokens, time.monotonic()))
        self._start()

    async def flushed(self) -> None:
        """Wait until every entry noticed so far has been sent (or given up)."""
        await self._job.wait_idle()

    def flushed_sync(self, timeout: float | None = None) -> bool:
        """:meth:`flushed` for an index on a blocking client; False if ``timeout`` passed."""
        return self._job.wait_idle_sync(timeout)

    def _record(self, agent: str | None, touch: Touch) -> None:
        with self._lock:
            bucket = self._pending.get(agent)
            if bucket is None:
                bucket = self._pending[agent] = {}
            seen = bucket.get(touch.session)
            if seen is None or _newer(touch, seen):
                bucket[touch.session] = touch

    def _start(self) -> None:
        self._job.fire()

    async def _drain_async(self) -> None:
        await self.transport.drive(self._drain())

    def _drain_sync(self) -> None:
        self.transport.drive(self._drain())

    def _drain(self) -> Steps[None]:
        """Send what is pending, one call per agent, until nothing is; between two calls,
        wait ``interval`` for more entries to share the next one."""
        while True:
            with self._lock:
                pending, self._pending = self._pending, {}
            yield from Gather([self._send(a, list(b.values())) for a, b in pending.items()])
            with self._lock:
                if not self._pending:
                    return
            yield from Sleep(self.interval)

    def _send(self, agent: str | None, touches: Sequence[Touch]) -> Steps[None]:
        for attempt in range(TOUCH_ATTEMPTS):
            try:
                yield from self.gateway.touch(agent, touches)
                return
            except CompozyMemoryError as exc:
                if attempt + 1 == TOUCH_ATTEMPTS:
                    self.failures += 1
                    log.warning(
                        "session index not updated for %d session(s) of %s: %s",
                        len(touches),
                        self.project,
                        exc,
                    )
                    return
                yield from Sleep(0.05 * 2**attempt)

    @op
    def page(
        self, *, agent: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> Steps[SessionPage]:
        """Sessions, most recently active first, ``limit`` a page."""
        if (
            not isinstance(limit, int)
            or isinstance(limit, bool)
            or not 1 <= limit <= MAX_SESSIONS_PAGE
        ):
            raise UsageError(f"limit must be in [1, {MAX_SESSIONS_PAGE}], got {limit!r}")
        score, member = "", ""
        if cursor is not None:
            score, sep, member = str(cursor).partition(":")
            if not sep or not score.isdigit():
                raise UsageError(f"{cursor!r:.80} is not a cursor list_sessions returned")
        pairs = yield from self.gateway.page(
            agent=agent, limit=limit, before_score=score, before_session=member
        )
        sessions = [_info(session, info) for session, info in pairs]
        last = sessions[-1] if len(sessions) == limit else None
        return SessionPage(sessions, f"{last.last_active_ms}:{last.key}" if last else None)

    @op
    def repair(self, memories: list[Handle], *, agent: str | None = None) -> Steps[int]:
        """Rewrite the entries of ``memories`` from their own totals (after index updates
        were lost); returns how many were written."""
        for memory in memories:
            health = yield from memory.gateway.health()
            yield from self.touch(
                memory.keys.key,
                agent=agent,
                last_id=health.last_id,
                messages=health.message_count,
                tokens=health.token_count,
            )
        return len(memories)

    @op
    def forget(self, session: str) -> Steps[None]:
        """Drop ``session`` from the index (its memory was purged), if it is there."""
        if self.client is None:
            raise UsageError("forget needs a client")
        info = yield from _command("forget", self.all_key, "hget", self.info_key, session)
        if info is None:
            return
        # One function call drops it (lua/sessions/sessions_forget.lua): a read-write ACL user needs
        # no command of its own for it.
        yield from self.gateway.forget(session, _info(session, info).agent or None)

    @op
    def prune(self, inactive_ms: int, *, agents: tuple[str, ...] = ()) -> Steps[int]:
        """Drop sessions inactive for longer than ``inactive_ms`` (their memories expired)
        from the project's index and ``agents``' indexes; returns how many left the project's.
        Not atomic: a session written while it is pruned loses its info until its next
        write (list_sessions skips entries without info)."""
        now = int(time.time() * 1000)
        cutoff = now - inactive_ms
        if self.client is None:
            raise UsageError("prune needs a client")
        key = self.all_key
        gone = yield from Call(
            "prune", key, Command("zrange", (key, "-inf", cutoff), {"byscore": True}), raw
        )
        if not gone:
            return 0
        yield from _command("prune", key, "zremrangebyscore", key, "-inf", cutoff)
        for agent in agents:
            agent_key = self.agent_key(agent)
            yield from _command("prune", key, "zremrangebyscore", agent_key, "-inf", cutoff)
        yield from _command("prune", key, "hdel", self.info_key, *gone)
        return len(gone)


def _info(session: bytes | str, raw: bytes | str) -> SessionInfo:
    text = raw.decode("utf-8", "surrogatepass") if isinstance(raw, bytes) else raw
    created, last, last_id, messages, tokens, agent = text.split("\t", 5)
    return SessionInfo(
        session.decode() if isinstance(session, bytes) else session,
        agent or None,
        int(created),
        int(last),
        int(messages),
        int(tokens),
        int(last_id),
    )


def _newer(touch: Touch, seen: Touch) -> bool:
    """Whether ``touch`` is a later state of the memory than ``seen`` (the rule of
    ``lua/sessions/session_touch.lua``: ids only grow; at the same last id, messages only leave)."""
    return (touch.last_id, -touch.messages, -touch.tokens) >= (
        seen.last_id,
        -seen.messages,
        -seen.tokens,
    )


class IndexEntry:
    """A handle's link to its project's index, for the agent that opened it."""

    __slots__ = ("agent", "index")

    def __init__(self, index: SessionIndex, agent: str | None) -> None:
        self.index = index
        self.agent = agent

    def noticed(self, memory: Handle, result: AppendResult) -> None:
        self.index.noticed(memory, result, self.agent)

    def removed(self, memory: Handle, *, last_id: int, messages: int, tokens: int) -> None:
        self.index.removed(memory, self.agent, last_id=last_id, messages=messages, tokens=tokens)

    def to_sync(self) -> IndexEntry:
        """This entry in the index's blocking twin (for a handle's blocking twin)."""
        return IndexEntry(self.index.to_sync(), self.agent)


def _command(operation: str, key: str, method: str, *args: object) -> Call[Any]:
    """A plain command on the index's keys, its reply as Redis sent it."""
    return Call(operation, key, Command(method, args), raw)
