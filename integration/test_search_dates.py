"""Relative time in a query, on real servers: "last week" is counted from the day of the
memory's newest message (a conversation replayed later is asked about its own time), and
finds the turn of that week before the same words said a month earlier, in ``search()`` and
in ``context(query=)``."""

from __future__ import annotations

from typing import Any

from compozy_memory import MemoryInstance, MemoryPolicy
from compozy_memory._io.translate import RedisClient

FILLER = [
    "The rain has not stopped since Tuesday.",
    "Work is fine, a lot of meetings.",
    "The music shop on the corner closed down.",
    "My neighbour is painting his fence again.",
]


def said(name: str, text: str, day: str) -> dict[str, Any]:
    return {"role": "user", "name": name, "content": text, "metadata": {"date": day}}


async def test_last_week_finds_that_weeks_turn_not_a_month_earlier(
    client: RedisClient, memory_key: str
) -> None:
    mem = MemoryInstance.open(
        client, project="dates", key=memory_key, policy=MemoryPolicy(archive_max=0)
    )
    messages = [said("Ravi", "I baked a lemon cake.", "2023-04-12")]
    messages += [said("Anouk", FILLER[n % 4], "2023-04-12") for n in range(6)]
    # Wednesday 2023-05-10 is in the week before the newest message's (Wednesday 17 May).
    messages.append(
        said("Ravi", "I baked a lemon cake for my sister on her birthday.", "2023-05-10")
    )
    messages += [said("Anouk", FILLER[n % 4], "2023-05-10") for n in range(6)]
    messages += [said("Anouk", FILLER[n % 4], "2023-05-17") for n in range(6)]
    added = await mem.append_many(messages)
    await mem.indexer.catch_up()
    april, may = added.first_id, added.first_id + 7

    plain = await mem.search("What cake did Ravi bake?")
    assert [h.id for h in plain[:2]] == [april, may]  # the shorter turn first
    hits = await mem.search("What cake did Ravi bake last week?")
    assert hits[0].id == may
    assert hits[0].message.metadata == {"date": "2023-05-10"}
    assert hits[0].score > next(h.score for h in hits if h.id == april)
    hits = await mem.search("What cake did Ravi bake last month?")
    assert hits[0].id == april

    layers = await mem.context_layers(60, query="What cake did Ravi bake last week?")
    recalled = [m.id for m in layers.recalled]
    assert may in recalled
    assert april not in recalled
