"""The session index: sessions per project and agent, by last activity, on every engine."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compozy_memory import BackendUnavailableError, HeuristicCounter, MemoryManager, MemoryRegistry
from compozy_memory._store.sessions import TOUCH_ATTEMPTS
from compozy_memory._wire.gateway import ScriptTransport
from compozy_memory._wire.scripts import Script, ScriptArg
from compozy_memory._wire.translate import RedisClient

PROJECT_DIR = Path(__file__).resolve().parent / "sessions_project"


def manager(client: RedisClient) -> MemoryManager:
    registry = MemoryRegistry.load(PROJECT_DIR)
    mgr = MemoryManager(registry, client, counter=HeuristicCounter(), flushing=False)
    # A project of its own per test run, so listings see only this test's sessions.
    mgr.sessions.__init__(client, f"sessions-{uuid.uuid4().hex[:12]}")  # type: ignore[misc]
    return mgr


class Failing:
    """A transport whose index updates fail, as if the index's node were down."""

    def __init__(self, real: ScriptTransport) -> None:
        self.real = real
        self.calls = 0

    async def run(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[ScriptArg],
        *,
        key: str,
        write: bool = False,
    ) -> Any:
        self.calls += 1
        raise BackendUnavailableError("index node down", key=key)

    async def command(self, operation: str, method: str, *args: Any, key: str, **o: Any) -> Any:
        return await self.real.command(operation, method, *args, key=key, **o)


async def test_sessions_are_listed_per_project_and_agent(client: RedisClient) -> None:
    mgr = manager(client)
    opened = []
    for n in range(5):
        agent = "planner" if n % 2 else "coder"
        sid, mem = await mgr.session("chat", agent=agent)
        assert uuid.UUID(sid).version == 7
        await mem.append_many([{"role": "user", "content": f"hello {i}"} for i in range(n + 1)])
        opened.append((sid, mem, agent, n + 1))
    # The first session is written again: it becomes the most recently active (a few ms
    # later: activity is kept in milliseconds, and ties list the greater key first).
    await asyncio.sleep(0.005)
    await opened[0][1].append({"role": "assistant", "content": "back again"})

    page = await mgr.list_sessions()
    keys = [s.key for s in page.sessions]
    assert keys[0] == opened[0][1].keys.key
    assert set(keys) == {m.keys.key for _, m, _, _ in opened}
    assert page.cursor is None  # fewer than a page
    first = page.sessions[0]
    assert first.messages == 2
    assert first.agent == "coder"
    assert first.tokens == await opened[0][1].token_count()
    assert all(s.created_ms <= s.last_active_ms for s in page.sessions)
    actives = [s.last_active_ms for s in page.sessions]
    assert actives == sorted(actives, reverse=True)

    planner = await mgr.list_sessions(agent="planner")
    assert {s.key for s in planner.sessions} == {
        m.keys.key for _, m, a, _ in opened if a == "planner"
    }

    # Pages of two, by cursor, cover everything once.
    seen: list[str] = []
    cursor = None
    while True:
        part = await mgr.list_sessions(limit=2, cursor=cursor)
        seen += [s.key for s in part.sessions]
        cursor = part.cursor
        if cursor is None:
            break
    assert seen == keys


async def test_a_lost_index_update_leaves_the_write_and_repair_fixes_it(
    client: RedisClient,
) -> None:
    mgr = manager(client)
    sid, mem = await mgr.session("chat", agent="coder")
    await mem.append({"role": "user", "content": "one"})
    await mgr.sessions.flushed()
    real = mgr.sessions.transport
    failing = Failing(real)
    mgr.sessions.transport = failing
    result = await mem.append({"role": "user", "content": "two"})  # the write still succeeds
    assert result.total_count == 2
    await mgr.sessions.flushed()
    assert failing.calls == TOUCH_ATTEMPTS
    assert mgr.sessions.failures == 1
    mgr.sessions.transport = real
    (stale,) = (await mgr.list_sessions()).sessions
    assert stale.messages == 1  # the index lags
    assert await mgr.sessions.repair([mem], agent="coder") == 1
    (fixed,) = (await mgr.list_sessions()).sessions
    assert fixed.messages == 2
    assert fixed.key == mem.keys.key
    assert sid in mem.key
