"""Dense scores in search, on real servers: the vector step keeps a memory's vectors caught up
with its index (bounded, compare-and-set, one model at a time), the vectors live and die with
the memory's other keys (TTL, clear, the archive's cap, eviction checks), and ``search()`` and
``context(query=)`` fuse them with BM25.

Most tests embed with :class:`Concepts`, an embedder whose vectors count the words of a few
concepts: it knows that "puppy" and "dog" mean one thing, as a real model does, and its
scores can be reasoned about. One test runs the offline ``StaticEmbedder``.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from compozy_memory import (
    ConfigurationError,
    ContextPolicy,
    InvalidMessageError,
    MemoryEvictedError,
    MemoryInstance,
    MemoryPolicy,
    SearchPolicy,
    StaticEmbedder,
)
from compozy_memory._io.translate import RedisClient
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.limits import (
    MAX_SPEAKER_NAMES,
    MAX_VECTOR_BYTES,
    VECTOR_SCAN_IDS,
    VECTOR_STEP_BYTES,
    ttl_slack,
)
from compozy_memory._search.dense import quantize
from compozy_memory._search.runtime.searching import bm25_ranking
from compozy_memory._search.runtime.vectors import model_id
from integration.engines import EngineSpec


class Concepts:
    """A deterministic :class:`~compozy_memory.Embedder`: one dimension per concept, the
    count of its words in the text, and a constant one so no vector is zero."""

    model = "concepts"
    dimensions = 5
    GROUPS = (
        {"dog", "puppy", "pet", "adopted", "kennel"},
        {"city", "visited", "trip", "lisbon", "flew"},
        {"job", "hired", "work", "office", "boss"},
        {"weather", "rain", "sunny", "forecast"},
    )

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        self.texts += texts
        out = []
        for text in texts:
            words = re.findall(r"[a-z]+", text.lower())
            out.append([*(float(sum(w in g for w in words)) for g in self.GROUPS), 0.2])
        return out


class OtherConcepts(Concepts):
    model = "concepts-2"


def turn(name: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "name": name, "content": text, **extra}


CHAT = [
    turn("Ann", "Morning! Did you get the tickets for Saturday?"),
    turn("Bob", "Yes, two seats near the front."),
    turn("Bob", "My neighbour's dog barked the whole night again."),
    turn("Ann", "Guess what, I adopted a puppy last week, his name is Rex."),
    turn("Bob", "Congratulations! I flew to Lisbon for a trip in May."),
    turn("Ann", "Lucky you. I got hired at the bakery, new job starts Monday."),
    turn("Bob", "The forecast says rain all weekend."),
    turn("Ann", "Then we stay in and watch films."),
]


def memory(client: RedisClient, key: str, embedder: Any = None, **policy: Any) -> MemoryInstance:
    return MemoryInstance.open(
        client, project="dense", key=key, embedder=embedder, policy=MemoryPolicy(**policy)
    )


async def caught_up(mem: MemoryInstance) -> None:
    await mem.indexer.catch_up()
    assert mem.vectors is not None
    await mem.vectors.wait_idle()
    progress = await mem.vectors.catch_up()
    assert progress.caught_up


async def stored(client: RedisClient, mem: MemoryInstance) -> dict[int, bytes]:
    raw = await client.hgetall(mem.keys.ixvec)
    return {int(k): v if isinstance(v, bytes) else v.encode("ascii") for k, v in raw.items()}


async def meta(client: RedisClient, mem: MemoryInstance, *fields: str) -> list[Any]:
    values = await client.hmget(mem.keys.meta, list(fields))
    return [v.decode() if isinstance(v, bytes) else v for v in values]


async def test_the_vector_step_embeds_every_indexed_message_once(
    client: RedisClient, memory_key: str
) -> None:
    embedder = Concepts()
    mem = memory(client, memory_key, embedder)
    await mem.append({"role": "system", "content": "You are kind.", "priority": 0})
    await mem.append_many(CHAT)
    await caught_up(mem)
    vectors = await stored(client, mem)
    assert sorted(vectors) == list(range(2, 2 + len(CHAT)))  # the pinned message has none
    assert all(len(v) == Concepts.dimensions and max(v) < 128 for v in vectors.values())
    count, model, names = await meta(client, mem, "vx_count", "vx_model", "vx_names")
    assert (int(count), model) == (len(CHAT), model_id(embedder))
    assert sorted(names.split("\t")) == ["ann", "bob"]
    # Speaker names are left to BM25: "Bob" is not in what was embedded.
    assert not any("Bob" in text for text in embedder.texts)
    # Caught up, a step has nothing to do: nothing is embedded twice.
    assert mem.vectors is not None
    again = await mem.vectors.catch_up()
    assert (again.steps, again.embedded) == (0, 0)
    assert len(embedder.texts) == len(CHAT)


async def test_fused_search_finds_the_paraphrase_bm25_misses(
    engine: EngineSpec, memory_key: str
) -> None:
    # A client that decodes replies reads the vectors whole: they are ASCII.
    for decode in (False, True):
        client = engine.client(decode_responses=decode)
        key = f"{memory_key}:{decode}"
        fused, plain = memory(client, key, Concepts()), memory(client, key)
        await fused.append_many(CHAT)
        await fused.trim(keep_messages=3)  # the answer is archived
        await caught_up(fused)
        bm25 = await plain.search("What kind of dog does Ann have?")
        assert bm25[0].id == 3  # the word "dog", in Bob's complaint
        hits = await fused.search("What kind of dog does Ann have?")
        assert hits[0].id == 4
        assert hits[0].where == "archive"
        assert hits[0].message.text.startswith("Guess what, I adopted a puppy")
        assert hits[0].before is not None
        assert hits[0].before.id == 3
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        # The filters hold: no assistant turn here, only ids from 5 on.
        assert list(await fused.search("dog", roles=["assistant"])) == []
        assert all(h.id >= 5 for h in await fused.search("Ann's new dog", since_id=5))
        await client.aclose()


async def test_the_candidates_carry_the_neighbours_vectors_only_when_asked(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key, Concepts())
    await mem.append_many(CHAT)
    await caught_up(mem)
    ranked = (
        await mem.transport.drive(
            bm25_ranking(mem.gateway, ["dog"], limit=2, pool=5, neighbour_weight=0.0)
        )
    ).best
    assert [doc_id for doc_id, _ in ranked] == [3]
    both = await mem.transport.drive(mem.gateway.search_candidates(ranked, since_id=0, kinds=[]))
    scored = await mem.transport.drive(
        mem.gateway.search_candidates(ranked, since_id=0, kinds=[], neighbour_vectors=False)
    )
    assert both.ids == scored.ids == (3, 2, 4)  # "dog" in turn 3, and its two neighbours
    assert both.bm25 == scored.bm25
    assert both.bm25[1:] == (None, None)
    assert all(v is not None for v in both.vectors)
    assert scored.vectors == (both.vectors[0], None, None)


async def test_context_offers_the_fused_hits(client: RedisClient, memory_key: str) -> None:
    mem = memory(client, memory_key, Concepts(), max_tokens=2_000)
    await mem.append_many(CHAT)
    await mem.append_many([turn("Bob", f"Filler line number {n}.") for n in range(40)])
    await mem.trim(keep_messages=40)
    await caught_up(mem)
    layers = await mem.context_layers(200, query="What kind of dog does Ann have?")
    assert 4 in {m.id for m in layers.recalled}
    assert all(m.id not in {w.id for w in layers.window} for m in layers.recalled)


@pytest.mark.parametrize("embedder", [None, Concepts()], ids=["bm25", "fused"])
async def test_the_implicit_query_spends_its_hits_outside_the_window(
    client: RedisClient, memory_key: str, embedder: Concepts | None
) -> None:
    # The newest user turn is the query, and it is its own best match; the turns next to it
    # match too. Those are in the window already: the hits the recall layer takes (2 here)
    # are the best ones outside it, not the best two of which none shows.
    policy = {
        "max_tokens": 2_000,
        "search": SearchPolicy(limit=2),
        "context": ContextPolicy(implicit_query=True),
    }
    mem = memory(client, memory_key, embedder, **policy)
    await mem.append(turn("Ann", "My sister adopted a greyhound called Pixel."))
    await mem.append_many([turn("Bob", f"Filler line number {n}.") for n in range(30)])
    await mem.trim(keep_messages=0)
    await mem.append_many(
        [
            turn("Bob", "A greyhound ran past the sister cafe."),
            turn("Bob", "Greyhound, greyhound: my sister's street is full of them."),
            turn("Ann", "What was the name of my sister's greyhound?"),
        ]
    )
    if embedder is not None:
        await caught_up(mem)
    layers = await mem.context_layers()
    window = {m.id for m in layers.window}
    assert window >= {32, 33, 34}
    assert [m.text for m in layers.recalled][:1] == ["My sister adopted a greyhound called Pixel."]
    assert not window & {m.id for m in layers.recalled}


async def test_the_archive_cap_drops_vectors_with_their_messages(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key, Concepts(), archive_max=5)
    await mem.append_many([turn("Ann", f"my puppy number {n}") for n in range(20)])
    await caught_up(mem)
    assert len(await stored(client, mem)) == 20
    await mem.trim(keep_messages=2)  # 18 archived, the cap keeps 5: 13 dropped
    await caught_up(mem)
    vectors = await stored(client, mem)
    assert sorted(vectors) == list(range(14, 21))
    (count,) = await meta(client, mem, "vx_count")
    assert int(count) == 7
    # Dropped before they were embedded: never embedded.
    await mem.append_many([turn("Ann", f"my kennel number {n}") for n in range(20)])
    await mem.indexer.catch_up()
    await mem.trim(keep_messages=0)
    await caught_up(mem)
    vectors = await stored(client, mem)
    assert sorted(vectors) == list(range(36, 41))
    assert int((await meta(client, mem, "vx_count"))[0]) == 5


async def test_a_long_run_of_dropped_ids_is_passed_over_in_bounded_steps(
    client: RedisClient, memory_key: str
) -> None:
    n = VECTOR_SCAN_IDS + 500
    plain = memory(client, memory_key, archive_max=1)
    for start in range(0, n, 1000):
        await plain.append_many([turn("Ann", f"note {i}") for i in range(start, start + 1000)])
        await plain.trim(keep_messages=2)
    mem = memory(client, memory_key, Concepts(), archive_max=1)
    await caught_up(mem)
    vectors = await stored(client, mem)
    live = [m.id or 0 for m in await mem.read()]
    archived = [m.id or 0 for m in await mem.recall(0, 10)]
    assert sorted(vectors) == sorted(live + archived)
    assert len(vectors) == 3


async def test_clear_removes_the_vectors_and_later_messages_are_embedded(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key, Concepts())
    await mem.append_many(CHAT)
    await caught_up(mem)
    await mem.clear()
    assert await client.exists(mem.keys.ixvec) == 0
    await mem.append(turn("Ann", "My puppy ate my homework."))
    await caught_up(mem)
    assert sorted(await stored(client, mem)) == [len(CHAT) + 1]
    assert mem.vectors is not None
    assert (await mem.vectors.catch_up()).steps == 0  # no walk over the cleared ids


async def test_the_vectors_carry_the_memory_ttl(client: RedisClient, memory_key: str) -> None:
    mem = memory(client, memory_key, Concepts(), ttl=timedelta(hours=1))
    await mem.append_many(CHAT)
    await caught_up(mem)
    assert 0 < await client.pttl(mem.keys.ixvec) <= 3_600_000 + ttl_slack(3_600_000)
    await mem.set_ttl(None)
    assert await client.pttl(mem.keys.ixvec) == -1
    await mem.set_ttl(timedelta(minutes=5))
    assert 0 < await client.pttl(mem.keys.ixvec) <= 300_000 + ttl_slack(300_000)


async def test_another_model_makes_the_vectors_again(client: RedisClient, memory_key: str) -> None:
    first, second = Concepts(), OtherConcepts()
    old = memory(client, memory_key, first)
    await old.append_many(CHAT)
    await caught_up(old)
    new = memory(client, memory_key, second)
    await caught_up(new)
    (model,) = await meta(client, new, "vx_model")
    assert model == model_id(second)
    assert len(second.texts) == len(CHAT)
    # The old model's handle no longer compares its queries with them: BM25 ranks.
    plain = memory(client, memory_key)
    query = "What kind of dog does Ann have?"
    assert [h.id for h in await old.search(query)] == [h.id for h in await plain.search(query)]


async def test_missing_vectors_are_refused_not_rebuilt(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key, Concepts())
    await mem.append_many(CHAT)
    await caught_up(mem)
    await client.delete(mem.keys.ixvec)  # as an eviction would
    with pytest.raises(MemoryEvictedError):
        await mem.search("dog")
    assert len(await memory(client, memory_key).search("dog")) > 0  # BM25 does not need them
    await mem.clear()
    await mem.append_many(CHAT)
    await caught_up(mem)
    assert len(await mem.search("dog")) > 0


async def test_replicas_racing_to_embed_store_each_vector_once(
    client: RedisClient, memory_key: str
) -> None:
    writer = memory(client, memory_key)
    await writer.append_many([turn("Ann", f"puppy {n}") for n in range(600)])
    await writer.indexer.catch_up()
    embedders = [Concepts() for _ in range(3)]
    replicas = [memory(client, memory_key, e) for e in embedders]
    await asyncio.gather(*(r.vectors.catch_up() for r in replicas if r.vectors))
    vectors = await stored(client, writer)
    assert sorted(vectors) == list(range(1, 601))
    assert int((await meta(client, writer, "vx_count"))[0]) == 600
    assert sum(len(e.texts) for e in embedders) >= 600


async def test_an_index_rebuild_keeps_the_vectors(client: RedisClient, memory_key: str) -> None:
    mem = memory(client, memory_key, Concepts())
    await mem.append_many(CHAT)
    await mem.trim(keep_messages=3)
    await caught_up(mem)
    before = await stored(client, mem)
    await mem.gateway.index_reset(force=True)
    assert mem.vectors is not None
    assert (await mem.vectors.catch_up()).steps == 0  # nothing to do while it is rebuilt
    await caught_up(mem)
    assert await stored(client, mem) == before
    assert (await mem.search("What kind of dog does Ann have?"))[0].id == 4


class Wide(Concepts):
    """Concepts spread over the widest vectors a memory keeps: a step stores fewer of them."""

    model = "concepts-wide"
    dimensions = MAX_VECTOR_BYTES

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        narrow = await super().embed(texts, query=query)
        return [
            v * (MAX_VECTOR_BYTES // len(v)) + [0.0] * (MAX_VECTOR_BYTES % len(v)) for v in narrow
        ]


async def test_the_widest_vectors_are_stored_in_smaller_steps(
    client: RedisClient, memory_key: str
) -> None:
    turns = [turn("Cy", f"Note number {i} of the minutes.") for i in range(40)]
    wide, narrow = memory(client, memory_key, Wide()), memory(client, memory_key + ":n", Concepts())
    for mem in (wide, narrow):
        await mem.append_many([*turns, *CHAT])
        await caught_up(mem)
    assert wide.vectors is not None
    assert wide.vectors.step_docs == VECTOR_STEP_BYTES // MAX_VECTOR_BYTES < len(turns)
    vectors = await stored(client, wide)
    assert len(vectors) == len(turns) + len(CHAT)
    assert {len(v) for v in vectors.values()} == {MAX_VECTOR_BYTES}
    # The same concepts over 4,096 dimensions rank as over 5.
    query = "Which city did Bob travel to?"
    hits, expected = await wide.search(query), await narrow.search(query)
    assert [h.id for h in hits] == [h.id for h in expected]
    assert [h.score for h in hits] == pytest.approx([h.score for h in expected], abs=0.02)
    assert len(turns) + 5 in [h.id for h in hits[:3]]  # the trip to Lisbon


@pytest.mark.parametrize("dimensions", [0, MAX_VECTOR_BYTES + 1, "256"])
async def test_an_embedder_of_impossible_dimensions_is_refused(
    client: RedisClient, memory_key: str, dimensions: Any
) -> None:
    class Odd(Concepts):
        pass

    Odd.dimensions = dimensions
    with pytest.raises(ConfigurationError, match="dimensions are 1 to"):
        memory(client, memory_key, Odd())
    assert await client.exists(InstanceKeys.build("dense", memory_key).meta) == 0


@pytest.mark.parametrize(
    ("vectors", "names", "problem"),
    [
        ([(1, b"\x40\xc3\xa9\x40\x40")], [], "bytes in 1..127"),
        ([(1, b"\x40" * 5), (2, b"\x40" * 4)], [], "one length"),
        ([(1, b"")], [], "bytes in 1..127"),
        ([(9, b"\x40" * 5)], [], "a vector id"),
        ([(1, b"\x40" * MAX_VECTOR_BYTES)] * 17, [], "bytes of vectors"),
        ([], [f"n{i}" for i in range(MAX_SPEAKER_NAMES + 1)], "speaker names"),
    ],
)
async def test_bad_vectors_are_refused_and_change_nothing(
    client: RedisClient,
    memory_key: str,
    vectors: list[tuple[int, bytes]],
    names: list[str],
    problem: str,
) -> None:
    mem = memory(client, memory_key)
    await mem.append_many(CHAT[:3])
    await mem.indexer.catch_up()
    pending = await mem.gateway.vec_pending(8, 1_000_000)
    assert pending.upto == 3
    before = await client.hgetall(mem.keys.meta)
    with pytest.raises(InvalidMessageError, match=problem):
        await mem.gateway.vec_apply(pending, model="m/5/v2", upto=3, names=names, vectors=vectors)
    assert await client.hgetall(mem.keys.meta) == before
    assert await client.exists(mem.keys.ixvec) == 0
    # The same step, well formed, applies.
    good = [(1, quantize([1.0, 0, 0, 0, 0.2]))]
    applied = await mem.gateway.vec_apply(
        pending, model="m/5/v2", upto=3, names=["ann"], vectors=good
    )
    assert (applied.applied, applied.vx_next, applied.stored) == (True, 4, 1)
    # Sent again (a retry after a lost reply), it is stale and writes nothing.
    again = await mem.gateway.vec_apply(pending, model="m/5/v2", upto=3, names=[], vectors=good)
    assert (again.applied, again.stored) == (False, 1)


async def test_the_offline_model_ranks_the_answer_first(
    client: RedisClient, memory_key: str
) -> None:
    mem = memory(client, memory_key, StaticEmbedder())
    await mem.append_many(CHAT)
    await caught_up(mem)
    hits = await mem.search("Which city did Bob travel to?")
    assert hits[0].id == 5


def test_the_example_runs_and_the_docs_show_its_providers() -> None:
    root = Path(__file__).resolve().parent.parent
    example = root / "examples" / "dense_search.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "I adopted a puppy last week: Rex!"
    source = example.read_text()
    providers = source[source.index("class OpenAIEmbedder") : source.index("async def main")]
    assert providers.strip() in (root / "docs" / "dense-search.md").read_text()
