"""The session index's script calls, typed: the only code that builds their KEYS and ARGV.

A project's index lives in a slot of its own, the project's, so one script updates its three
keys atomically, on a Cluster as on one server:

* ``compozy:<project>:sessions:{<project>}:all``    ZSET session -> last active (ms)
* ``compozy:<project>:sessions:{<project>}:agent:<encoded agent>``   the same, one agent's
* ``compozy:<project>:sessions:{<project>}:info``   HASH session -> created, last active,
  last id, messages, tokens, agent

:class:`~compozy_memory._sessions.index.SessionIndex` decides when to write; this class only
speaks the scripts' contracts (``lua/sessions/``: ``session_touch.lua``, ``sessions_list.lua``,
``sessions_forget.lua``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compozy_memory._model.keys import sanitize_key, validate_project
from compozy_memory._model.limits import MAX_BATCH, MAX_SESSION_AGE_MS
from compozy_memory._wire.effects import raw
from compozy_memory._wire.gateway_base import script_call
from compozy_memory._wire.scripts import ScriptArg, script
from compozy_memory._wire.steps import Steps, op

__all__ = ["SessionGateway", "SessionKeys", "Touch"]

# The script's bound: an entry older than that is recorded that old.
_MAX_AGE_MS = MAX_SESSION_AGE_MS


@dataclass(frozen=True, slots=True)
class SessionKeys:
    """The keys of one project's session index."""

    project: str

    @property
    def base(self) -> str:
        return f"compozy:{self.project}:sessions:{{{self.project}}}"

    @property
    def all(self) -> str:
        return f"{self.base}:all"

    @property
    def info(self) -> str:
        return f"{self.base}:info"

    def agent(self, agent: str) -> str:
        return f"{self.base}:agent:{sanitize_key(agent)}"


@dataclass(frozen=True, slots=True)
class Touch:
    """A session's state after a write, as the index records it."""

    session: str
    last_id: int
    messages: int
    tokens: int
    #: When the write was seen (``time.monotonic()``): the entry's last-active time is the
    #: server's clock at the call less the time since (None: now).
    at: float | None = None


class SessionGateway:
    """Every script call of one project's session index."""

    def __init__(self, transport: Any, project: str) -> None:
        self.transport = transport
        self.keys = SessionKeys(validate_project(project))

    @op
    def touch(self, agent: str | None, touches: Sequence[Touch]) -> Steps[int]:
        """Record ``touches`` (sessions of ``agent``, or of no agent), ``MAX_BATCH`` a call
        (the script takes no more); returns the server's clock (ms) at the last call."""
        code = script("session_touch")
        keys = [self.keys.all, self.keys.agent(agent or "-"), self.keys.info]
        now_ms = 0
        for start in range(0, len(touches), MAX_BATCH):
            entries: list[ScriptArg] = []
            now = time.monotonic()
            for t in touches[start : start + MAX_BATCH]:
                age = 0 if t.at is None else min(_MAX_AGE_MS, max(0, round((now - t.at) * 1000)))
                entries += [t.session.encode(), t.last_id, t.messages, t.tokens, age]
            args = code.contract.argv_for(
                {"agent": (agent or "").encode("utf-8", "surrogatepass")}, entries
            )
            now_ms = yield from script_call(code.name, keys, args, self.keys.all, int, write=True)
        return now_ms

    @op
    def forget(self, session: str, agent: str | None) -> Steps[int]:
        """Drop ``session`` from the project's index and ``agent``'s (the agent its entry
        names); 1 when the index held it."""
        code = script("sessions_forget")
        args = code.contract.argv_for({"session": session.encode()})
        keys = [self.keys.all, self.keys.agent(agent or "-"), self.keys.info]
        return (yield from script_call(code.name, keys, args, self.keys.all, int, write=True))

    @op
    def page(
        self, *, agent: str | None, limit: int, before_score: str, before_session: str
    ) -> Steps[list[tuple[Any, Any]]]:
        """(session, info) pairs of one page, most recently active first, as
        ``lua/sessions/sessions_list.lua`` returns them."""
        code = script("sessions_list")
        ranked = self.keys.all if agent is None else self.keys.agent(agent)
        args = code.contract.argv_for(
            {
                "limit": limit,
                "before_score": before_score,
                "before_session": before_session.encode(),
            }
        )
        reply = yield from script_call(code.name, [ranked, self.keys.info], args, ranked, raw)
        return [(reply[i], reply[i + 1]) for i in range(0, len(reply), 2)]
