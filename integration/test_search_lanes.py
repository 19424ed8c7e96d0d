"""Summaries in a lane of their own, on real servers: a search without roles lists messages
only and gives the summaries that match apart (``Hits.summaries``); a summary written between
two turns (a flush between the question and its reply) is passed over by the neighbour boost;
``context(query=)`` sends the turns' hits to the recall layer, not summaries."""

from __future__ import annotations

from typing import Any

from compozy_memory._io.translate import RedisClient
from compozy_memory._search.ranking import neighbours
from integration.flush_support import open_memory

FILLER = [
    "The rain has not stopped since Tuesday.",
    "I binged three episodes of that baking show.",
    "Work is fine, a lot of meetings.",
    "The music shop on the corner closed down.",
]


def turn(name: str, text: str) -> dict[str, Any]:
    return {"role": "user", "name": name, "content": text, "tokens": 12}


async def test_summaries_have_their_own_lane_and_the_reply_past_one_is_found(
    client: RedisClient, memory_key: str
) -> None:
    mem = open_memory(client, memory_key, 240, background=False)
    await mem.append(turn("Ravi", "I booked Greek language lessons in Athens for March."))
    for n in range(23):
        await mem.append(turn("Anouk" if n % 2 else "Ravi", FILLER[n % 4]))
    await mem.append(turn("Anouk", "Which language are you learning at the moment, Ravi?"))
    flushed = await mem.flush()
    reply = await mem.append(turn("Ravi", "Greek. The grammar is brutal."))
    for n in range(4):
        await mem.append(turn("Anouk" if n % 2 else "Ravi", FILLER[n]))
    await mem.indexer.catch_up()
    asked = reply.first_id - 1
    assert flushed.summary_id == asked, "the flush's summary sits between question and reply"
    assert flushed.summary is not None
    assert "Greek language lessons" in flushed.summary.text

    hits = await mem.search("Which language is Ravi studying?")
    ids = [h.id for h in hits]
    assert all(h.where != "summary" for h in hits)
    # The question's turn is two ids before its reply: the boost passed over the summary.
    assert reply.first_id in ids[:3]
    assert [h.id for h in hits.summaries] == [asked]
    assert hits.summaries[0].where == "summary"

    only = await mem.search("Which language is Ravi studying?", roles=["summary"])
    assert [h.id for h in only] == [asked]
    assert only.summaries == ()

    layers = await mem.context_layers(4_000, query="Which language is Ravi studying?")
    assert reply.first_id in [m.id for m in layers.recalled + layers.window]


def test_a_neighbour_is_the_nearest_turn_past_summaries() -> None:
    assert neighbours(10, ()) == (9, 11)
    assert neighbours(10, {9, 11, 12}) == (8, 13)
    # At most MAX_SKIP away: a long run of summaries is not crossed.
    assert neighbours(10, set(range(11, 40))) == (9, 14)
