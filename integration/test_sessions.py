"""The session index: sessions per project and agent, by last activity, on every engine."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any, TypeVar

from compozy_memory import BackendUnavailableError, MemoryManager, MemoryRegistry
from compozy_memory._io.translate import RedisClient
from compozy_memory._io.transport import Transport, adrive
from compozy_memory._sessions.index import TOUCH_ATTEMPTS
from compozy_memory._wire.effects import Call, RunScript
from compozy_memory._wire.steps import Steps
from integration.memories import COUNTER

PROJECT_DIR = Path(__file__).resolve().parent / "sessions_project"
FLUSHING_DIR = Path(__file__).resolve().parent / "sessions_flushing"


def manager(client: RedisClient) -> MemoryManager:
    registry = MemoryRegistry.load(PROJECT_DIR)
    mgr = MemoryManager(registry, client, counter=COUNTER, flushing=False)
    # A project of its own per test run, so listings see only this test's sessions.
    mgr.sessions.__init__(client, f"sessions-{uuid.uuid4().hex[:12]}")  # type: ignore[misc]
    return mgr


T = TypeVar("T")


class Failing:
    """A driver whose index updates fail, as if the index's node were down."""

    def __init__(self, real: Transport) -> None:
        self.real = real
        self.metrics = real.metrics
        self.calls = 0

    async def drive(self, steps: Steps[T]) -> T:
        return await adrive(steps, self)

    async def call(self, call: Call[Any]) -> Any:
        if isinstance(call.send, RunScript):
            self.calls += 1
            raise BackendUnavailableError("index node down", key=call.key)
        return await self.real.call(call)


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
    # later: activity is kept in milliseconds, and ties list the greater key first). The
    # others' entries are sent first: an entry's time is when it was noticed, give or take
    # how long its call waited, which a loaded machine can stretch past a few ms.
    await mgr.sessions.flushed()
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


class Counting:
    """A driver that counts the index calls, and how many were out at once."""

    def __init__(self, real: Transport) -> None:
        self.real = real
        self.metrics = real.metrics
        self.calls = 0
        self.sessions = 0
        self.out = 0
        self.most_out = 0

    async def drive(self, steps: Steps[T]) -> T:
        return await adrive(steps, self)

    async def call(self, call: Call[Any]) -> Any:
        if not isinstance(call.send, RunScript):
            return await self.real.call(call)
        self.calls += 1
        self.sessions += (len(call.send.args) - 1) // 5
        self.out += 1
        self.most_out = max(self.most_out, self.out)
        try:
            return await self.real.call(call)
        finally:
            self.out -= 1


async def test_appends_never_wait_for_the_index_and_share_its_calls(client: RedisClient) -> None:
    """200 appends to 20 sessions from 20 tasks: the index is written by a few calls, one out
    at a time, each carrying many sessions; every session's entry ends exact."""
    mgr = manager(client)
    counting = Counting(mgr.sessions.transport)
    mgr.sessions.transport = counting
    handles = [(await mgr.session("chat", agent="coder"))[1] for _ in range(20)]

    async def writer(memory: Any) -> None:
        for i in range(10):
            await memory.append({"role": "user", "content": f"m {i}", "tokens": 2})

    await asyncio.gather(*(writer(m) for m in handles))
    await mgr.sessions.flushed()
    assert counting.most_out == 1
    assert counting.calls <= 12  # ~one a round trip, never one an append (200)
    assert counting.sessions < 200
    page = await mgr.list_sessions(limit=50)
    assert {s.key: (s.messages, s.tokens) for s in page.sessions} == {
        m.keys.key: (10, 20) for m in handles
    }
    assert {s.agent for s in page.sessions} == {"coder"}


async def test_counts_follow_flushes_trims_and_clears(client: RedisClient) -> None:
    registry = MemoryRegistry.load(FLUSHING_DIR)
    mgr = MemoryManager(registry, client, counter=COUNTER)
    mgr.sessions.__init__(client, f"sessions-{uuid.uuid4().hex[:12]}")  # type: ignore[misc]
    (memory,) = await mgr.for_agent("writer", {"user": "ann"})
    for i in range(30):  # 10 tokens each: passes the 80% threshold of 200 tokens
        await memory.append({"role": "user", "content": f"turn {i}", "tokens": 10})
    assert memory.flusher is not None
    await memory.flusher.wait_idle()
    health = await memory.health()
    assert health.flush_count >= 1
    (entry,) = (await mgr.list_sessions()).sessions
    assert (entry.messages, entry.tokens) == (health.message_count, health.token_count)
    assert entry.agent == "writer"  # for_agent's agent, with none in the context
    await memory.trim(keep_messages=2)
    await mgr.sessions.flushed()  # the index is touched off the write path
    (entry,) = (await mgr.list_sessions()).sessions
    assert entry.messages == 2
    await memory.clear()
    await mgr.sessions.flushed()
    (entry,) = (await mgr.list_sessions()).sessions
    assert (entry.messages, entry.tokens) == (0, 0)
    await mgr.aclose()


async def test_a_late_older_entry_never_replaces_a_newer_one(client: RedisClient) -> None:
    mgr = manager(client)
    index = mgr.sessions
    await index.touch("s", agent="a", last_id=5, messages=5, tokens=50)
    await index.touch("s", agent="a", last_id=5, messages=2, tokens=20)  # a flush
    await index.touch("s", agent="a", last_id=5, messages=5, tokens=50)  # late, older
    await index.touch("s", agent="a", last_id=4, messages=4, tokens=40)  # later, older still
    (entry,) = (await index.page()).sessions
    assert (entry.last_id, entry.messages, entry.tokens) == (5, 2, 20)
    await index.touch("s", agent="a", last_id=6, messages=3, tokens=30)  # an append after it
    (entry,) = (await index.page()).sessions
    assert (entry.last_id, entry.messages, entry.tokens) == (6, 3, 30)
