"""The sync API on real servers: the same memory as the async API sees, from plain threads and
from inside a running loop, with its manager's flushes and session index."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from compozy_memory import (
    ConflictError,
    InvalidMessageError,
    MemoryInstance,
    MemoryRegistry,
    ReadOnlyMemoryError,
    SyncMemoryInstance,
    SyncMemoryManager,
    UsageError,
    connect_sync,
)
from compozy_memory._io.translate import RedisClient
from compozy_memory._sessions.index import SessionIndex
from compozy_memory.embedded import EmbeddedServer
from integration.engines import EngineSpec
from integration.memories import COUNTER

FLUSHING_DIR = Path(__file__).resolve().parent / "sessions_flushing"


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


async def test_a_sync_handle_and_an_async_one_share_one_memory(
    engine: EngineSpec, client: RedisClient, memory_key: str
) -> None:
    # The sync calls run inside this test's running loop: they block it, and need none.
    sync = SyncMemoryInstance.open(
        connect_sync(engine.url, cluster=engine.cluster), project="sync", key=memory_key
    )
    other = MemoryInstance.open(client, project="sync", key=memory_key)
    first = sync.append_many([_user("the kettle arrived broken"), _user("refund please")])
    assert list(first.ids) == [1, 2]
    assert [m.text for m in await other.read()] == ["the kettle arrived broken", "refund please"]
    await other.append(_user("sent a photo"))
    with pytest.raises(ConflictError):
        sync.replace([_user("nothing")], if_version=first.version)  # stale since the append
    assert [m.text for m in sync.read()] == [m.text for m in await other.read()]
    trimmed = sync.trim(keep_messages=1)
    assert (trimmed.removed_count, trimmed.total_count) == (2, 1)
    assert await other.len() == 1
    assert [m.text for m in sync.recall()] == ["the kettle arrived broken", "refund please"]
    hits = sync.search("kettle")
    assert (hits[0].message.text, hits[0].where) == ("the kettle arrived broken", "archive")
    mine, theirs = sync.health(), await other.health()
    assert (mine.message_count, mine.token_count, mine.last_id, mine.archived) == (
        theirs.message_count,
        theirs.token_count,
        theirs.last_id,
        theirs.archived,
    )
    assert sync.clear() == 1
    assert await other.len() == 0


def test_threads_share_one_client_and_lose_nothing(
    valkey_server: EmbeddedServer, memory_key: str
) -> None:
    client = connect_sync(valkey_server.url)
    memory = SyncMemoryInstance.open(client, project="sync", key=memory_key)
    threads, each = 8, 25
    duplicates: list[bool] = []

    def writer(t: int) -> None:
        for i in range(each):
            memory.append(_user(f"{t}:{i}"), dedupe_key=f"{t}:{i}")
        duplicates.append(memory.append(_user("again"), dedupe_key=f"{t}:0").duplicate)

    running = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
    stored = memory.read()
    assert duplicates == [True] * threads
    assert [m.id for m in stored] == list(range(1, threads * each + 1))
    for t in range(threads):  # each writer's order kept
        mine = [m.text for m in stored if m.text.startswith(f"{t}:")]
        assert mine == [f"{t}:{i}" for i in range(each)]
    client.close()


def test_bad_input_is_refused_and_changes_nothing(
    valkey_server: EmbeddedServer, memory_key: str
) -> None:
    client = connect_sync(valkey_server.url)
    memory = SyncMemoryInstance.open(client, project="sync", key=memory_key)
    memory.append(_user("kept"))
    with pytest.raises(UsageError):
        memory.trim(keep_messages=-1)
    with pytest.raises(InvalidMessageError):
        memory.append_many([])
    with pytest.raises(InvalidMessageError):
        memory.append({"role": "user"})
    reader = SyncMemoryInstance.open(client, project="sync", key=memory_key, read_only=True)
    with pytest.raises(ReadOnlyMemoryError):
        reader.clear()
    assert [m.text for m in reader.read()] == ["kept"]
    client.close()


def test_the_sync_manager_flushes_in_the_background_and_lists_its_sessions(
    valkey_server: EmbeddedServer,
) -> None:
    client = connect_sync(valkey_server.url)
    with SyncMemoryManager(MemoryRegistry.load(FLUSHING_DIR), client, counter=COUNTER) as manager:
        # A project of its own per run, so the listing sees only this test's session.
        manager.sessions = SessionIndex(client, f"sessions-{uuid.uuid4().hex[:12]}")
        (memory,) = manager.for_agent("writer", {"user": uuid.uuid4().hex})
        for i in range(30):  # 10 tokens each: passes the 80% threshold of 200 tokens
            memory.append({"role": "user", "content": f"turn {i}", "tokens": 10})
        assert memory.flusher is not None
        assert memory.flusher.wait_idle_sync(30)
        health = memory.health()
        assert health.flush_count >= 1
        assert memory.snapshot().summaries  # the flush's summary stands
        (entry,) = manager.list_sessions().sessions
        assert (entry.messages, entry.tokens) == (health.message_count, health.token_count)
        assert entry.agent == "writer"
    client.close()
