"""The session index: every session (memory) of a project, per agent, by last activity.

A session is a memory. Its index entry is written after each write to it, in a slot of the
project's own, so listing is one bounded range read whatever the number of sessions (no
``KEYS``, no ``SCAN``), on Redis Cluster as on one server:

* ``compozy:<project>:sessions:{<project>}:all``    ZSET session -> last active (ms)
* ``compozy:<project>:sessions:{<project>}:agent:<encoded agent>``   the same, one agent's
* ``compozy:<project>:sessions:{<project>}:info``   HASH session -> created, last active,
  last id, messages, tokens, agent

The braces put a project's index in one slot, so ``lua/session_touch.lua`` updates the three
keys atomically; every index write of a project lands on one node (one ZADD and one HSET a
write: cheap, but a project with very many writing agents concentrates there).

**Consistency.** The index is written by a second call after the memory's write, which
cannot share the memory's slot. The manager retries that call a few times
(:data:`TOUCH_ATTEMPTS`); if every try fails, the write stands and the index is stale for
that session (its counts and last-active time lag) until its next write, or until
:meth:`SessionIndex.repair` rewrites the entry from the memory's own totals. Counts from a
late retry never replace newer ones: each carries the memory's ``last_id``. A session whose
memory expired stays listed until :meth:`SessionIndex.prune` drops entries inactive for
longer than the TTL.

Session ids: :func:`uuid7` (RFC 9562 version 7, time-ordered), for callers that have none.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

from compozy_memory._model.keys import sanitize_key, validate_project
from compozy_memory._model.results import AppendResult
from compozy_memory._store.handle import Handle
from compozy_memory._wire.connection import transport_for
from compozy_memory._wire.retry import RetryPolicy
from compozy_memory._wire.scripts import script
from compozy_memory._wire.steps import CommandCall, ScriptCall, Sleep, Steps, op
from compozy_memory.errors import CompozyMemoryError, UsageError

__all__ = ["TOUCH_ATTEMPTS", "SessionIndex", "SessionInfo", "SessionPage", "uuid7"]

log = logging.getLogger("compozy_memory.sessions")

#: How many times an index update is tried after a write before it is left stale.
TOUCH_ATTEMPTS = 3


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
    ) -> None:
        self.project = validate_project(project)
        base = f"compozy:{project}:sessions:{{{project}}}"
        self.all_key, self.info_key = f"{base}:all", f"{base}:info"
        self._base = base
        if transport is None and client is not None:
            transport = transport_for(client, retry=retry, batching=True, key=base)
        self.client = client
        self._transport = transport
        #: Index updates given up after every attempt (each leaves one entry stale).
        self.failures = 0

    @property
    def transport(self) -> Any:
        if self._transport is None:
            raise UsageError("this session index has no client")
        return self._transport

    @transport.setter
    def transport(self, value: Any) -> None:
        self._transport = value

    def agent_key(self, agent: str) -> str:
        return f"{self._base}:agent:{sanitize_key(agent)}"

    @op
    def touch(
        self, session: str, *, agent: str | None, last_id: int, messages: int, tokens: int
    ) -> Steps[int]:
        """Record a write to ``session``; returns its last-active time (ms)."""
        code = script("session_touch")
        args = code.contract.argv_for(
            {
                "session": session.encode(),
                "agent": (agent or "").encode("utf-8", "surrogatepass"),
                "last_id": last_id,
                "messages": messages,
                "tokens": tokens,
            }
        )
        keys = [self.all_key, self.agent_key(agent or "-"), self.info_key]
        return int((yield ScriptCall(code, keys, args, self.all_key, write=True)))

    def noticed(self, memory: Handle, result: AppendResult, agent: str | None) -> Steps[None]:
        """After a write to ``memory``: update its entry, retried; never raises. Steps, run
        by the handle that wrote (its calls go through this index's transport)."""
        for attempt in range(TOUCH_ATTEMPTS):
            try:
                yield self.touch(
                    memory.keys.key,
                    agent=agent,
                    last_id=result.last_id,
                    messages=result.total_count,
                    tokens=result.total_tokens,
                )
                return
            except CompozyMemoryError as exc:
                if attempt + 1 == TOUCH_ATTEMPTS:
                    self.failures += 1
                    log.warning("session index not updated for %s: %s", memory.key, exc)
                    return
                yield Sleep(0.05 * 2**attempt)

    @op
    def page(
        self, *, agent: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> Steps[SessionPage]:
        """Sessions, most recently active first, ``limit`` a page."""
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
            raise UsageError(f"limit must be in [1, 1000], got {limit!r}")
        score, member = "", ""
        if cursor is not None:
            score, sep, member = str(cursor).partition(":")
            if not sep or not score.isdigit():
                raise UsageError(f"{cursor!r:.80} is not a cursor list_sessions returned")
        code = script("sessions_list")
        ranked = self.all_key if agent is None else self.agent_key(agent)
        args = code.contract.argv_for(
            {"limit": limit, "before_score": score, "before_session": member.encode()}
        )
        reply = yield ScriptCall(code, [ranked, self.info_key], args, ranked)
        sessions = [_info(reply[i], reply[i + 1]) for i in range(0, len(reply), 2)]
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
        gone = yield CommandCall("prune", "zrange", (key, "-inf", cutoff), key, {"byscore": True})
        if not gone:
            return 0
        yield CommandCall("prune", "zremrangebyscore", (key, "-inf", cutoff), key)
        for agent in agents:
            agent_key = self.agent_key(agent)
            yield CommandCall("prune", "zremrangebyscore", (agent_key, "-inf", cutoff), key)
        yield CommandCall("prune", "hdel", (self.info_key, *gone), key)
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
