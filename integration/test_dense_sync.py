"""Dense search through the sync API, on real servers: a :class:`SyncMemoryInstance` with an
embedder keeps its vectors on the background threads and fuses them in ``search()`` and
``context(query=)`` as the async handle does, on the same memory."""

from __future__ import annotations

import time
import uuid

from compozy_memory import (
    HeuristicCounter,
    MemoryInstance,
    MemoryRegistry,
    SyncMemoryInstance,
    SyncMemoryManager,
    connect_sync,
)
from compozy_memory._io.translate import RedisClient
from compozy_memory._search.runtime.vectors import model_id
from integration.engines import EngineSpec
from integration.test_dense_search import CHAT, Concepts, turn
from integration.test_sync_api import FLUSHING_DIR

QUESTION = "What kind of dog does Ann have?"


def test_a_sync_handle_embeds_in_the_background_and_fuses_its_search(
    engine: EngineSpec, memory_key: str
) -> None:
    client = connect_sync(engine.url, cluster=engine.cluster)
    embedder = Concepts()
    mem = SyncMemoryInstance.open(client, project="dense", key=memory_key, embedder=embedder)
    plain = SyncMemoryInstance.open(client, project="dense", key=memory_key)
    assert mem.vectors is not None
    assert plain.vectors is None
    mem.append_many(CHAT)
    # Nothing but the writes: the background threads index and embed every message.
    deadline = time.monotonic() + 30
    while len(embedder.texts) < len(CHAT) and time.monotonic() < deadline:
        mem.vectors.wait_idle(1)
    assert len(client.hgetall(mem.keys.ixvec)) == len(CHAT)
    assert client.hget(mem.keys.meta, "vx_model") == model_id(embedder).encode()
    caught = mem.vectors.catch_up()
    assert (caught.steps, caught.embedded, caught.caught_up) == (0, 0, True)
    mem.trim(keep_messages=3)  # the answer is archived
    assert plain.search(QUESTION)[0].id == 3  # BM25 alone: the word "dog", in Bob's complaint
    hits = mem.search(QUESTION)
    assert (hits[0].id, hits[0].where) == (4, "archive")
    assert hits[0].message.text.startswith("Guess what, I adopted a puppy")
    assert hits[0].before is not None
    assert hits[0].before.id == 3
    layers = mem.context_layers(200, query=QUESTION)
    assert 4 in {m.id for m in layers.recalled}
    client.close()


async def test_sync_and_async_handles_rank_one_memory_alike(
    engine: EngineSpec, client: RedisClient, memory_key: str
) -> None:
    # The sync calls run inside this test's running loop: they block it, and need none; the
    # embedder's coroutine runs on the loop a daemon thread keeps for that.
    sync = SyncMemoryInstance.open(
        connect_sync(engine.url, cluster=engine.cluster),
        project="dense",
        key=memory_key,
        embedder=Concepts(),
        background_index=False,
    )
    other = MemoryInstance.open(client, project="dense", key=memory_key, embedder=Concepts())
    sync.append_many(CHAT)
    sync.append_many([turn("Bob", f"Filler line number {n}.") for n in range(10)])
    sync.trim(keep_messages=10)
    assert sync.vectors is not None
    sync.indexer.catch_up()
    assert sync.vectors.catch_up().caught_up
    mine, theirs = sync.search(QUESTION), await other.search(QUESTION)
    assert [(h.id, h.where) for h in mine] == [(h.id, h.where) for h in theirs]
    assert mine[0].id == 4
    # The async handle's twin carries the embedder.
    twin = other.to_sync()
    assert twin.vectors is not None
    assert twin.embedder is other.embedder
    assert [h.id for h in twin.search(QUESTION)] == [h.id for h in mine]


def test_the_sync_manager_hands_out_handles_with_its_embedder(engine: EngineSpec) -> None:
    client = connect_sync(engine.url, cluster=engine.cluster)
    embedder = Concepts()
    with SyncMemoryManager(
        MemoryRegistry.load(FLUSHING_DIR),
        client,
        counter=HeuristicCounter(),
        embedder=embedder,
        flushing=False,
    ) as manager:
        (mem,) = manager.for_agent("writer", {"user": uuid.uuid4().hex})
        assert mem.embedder is embedder
        assert mem.vectors is not None
        mem.append_many(CHAT)
        mem.trim(keep_messages=3)
        assert mem.search(QUESTION)[0].id == 4
    client.close()
