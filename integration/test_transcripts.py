"""Transcripts: Markdown to read, JSON Lines that import back with the same ids and times."""

from __future__ import annotations

import json

import pytest

from compozy_memory import ConflictError, InvalidMessageError, MemoryInstance, MemoryPolicy
from compozy_memory._io.translate import RedisClient
from integration.memories import COUNTER

PROJECT = "transcripts"


def conversation() -> list[dict[str, object]]:
    return [
        {"role": "system", "content": "You are a data agent.", "priority": 0},
        {"role": "user", "content": "How many orders shipped in May?", "metadata": {"k": [1, 2]}},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me query that."},
                {"type": "tool_use", "id": "tu1", "name": "sql", "input": {"q": "select 1"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": "4,211 rows"}],
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "chart"}}],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "chart.png", "priority": 5},
        {"role": "assistant", "content": "4,211 orders shipped in May. Ünïcödé ✓", "name": "bot"},
    ]


async def filled(client: RedisClient, key: str) -> MemoryInstance:
    mem = MemoryInstance.open(
        client, project=PROJECT, key=key, counter=COUNTER, policy=MemoryPolicy()
    )
    await mem.append_many(conversation())
    await mem.append_many([{"role": "user", "content": f"filler {i} about May"} for i in range(6)])
    await mem.trim(keep_messages=8)  # some originals go to the archive (and its index)
    return mem


async def test_export_import_export_is_identical(client: RedisClient, memory_key: str) -> None:
    mem = await filled(client, memory_key)
    exported = await mem.export_transcript("jsonl")
    lines = exported.splitlines()
    assert lines[0] == '{"compozy_transcript":1}'
    parts = [json.loads(line)["part"] for line in lines[1:]]
    assert "archive" in parts
    assert "msgs" in parts

    copy = MemoryInstance.open(client, project=PROJECT, key=memory_key + ":copy")
    assert await copy.import_transcript(exported) == await mem.len()
    assert await copy.export_transcript("jsonl") == exported
    # Ids, times, priorities and blocks are the originals'; totals and search work.
    assert await copy.read() == await mem.read()
    assert (await copy.health()).token_count == (await mem.health()).token_count
    assert (await copy.health()).last_id == (await mem.health()).last_id
    assert [h.id for h in await copy.search("orders shipped May")] == [
        h.id for h in await mem.search("orders shipped May")
    ]
    # New appends continue after the imported ids.
    later = await copy.append({"role": "user", "content": "and June?"})
    assert later.first_id == (await mem.health()).last_id + 1
    # A memory that holds anything is refused, whole.
    with pytest.raises(ConflictError):
        await copy.import_transcript(exported)
    # A cleared memory has given out those ids already: refused too.
    await mem.clear()
    with pytest.raises(ConflictError):
        await mem.import_transcript(exported)


async def test_an_import_larger_than_an_index_step_is_indexed_whole(
    client: RedisClient, memory_key: str
) -> None:
    # The indexer's step takes the live tail and the archive being built: together more
    # than one step's documents (INDEX_STEP_DOCS), which are cut into steps.
    mem = MemoryInstance.open(client, project=PROJECT, key=memory_key, counter=COUNTER)
    turns = [{"role": "user", "content": f"note {i}"} for i in range(700)]
    await mem.append_many(turns)
    await mem.trim(keep_messages=400)
    copy = MemoryInstance.open(client, project=PROJECT, key=memory_key + ":copy")
    await copy.import_transcript(await mem.export_transcript("jsonl"))
    await copy.indexer.wait_idle()  # the background indexer may take some of it
    assert (await copy.indexer.catch_up()).unindexed == 0
    for i in (5, 150, 299, 300, 650):  # archived and live alike
        assert (await copy.search(f"note {i}"))[0].id == i + 1


async def test_markdown_folds_tools_and_marks_summaries(
    client: RedisClient, memory_key: str
) -> None:
    mem = await filled(client, memory_key)
    text = await mem.export_transcript("markdown")
    assert text.startswith(f"# Transcript of `{mem.keys.key}`")
    assert "## Conversation" in text
    assert "## Archived originals" not in text
    with_archive = await mem.export_transcript("markdown", include_archived=True)
    assert "## Archived originals" in with_archive
    assert "<summary>tool call sql (tu1)</summary>" in with_archive
    assert "<summary>tool result for tu1</summary>" in with_archive
    assert "### assistant (bot) · " in with_archive
    assert " UTC · #" in with_archive


async def test_a_flushed_memory_round_trips_with_its_summaries(
    client: RedisClient, memory_key: str
) -> None:
    from integration.flush_support import open_memory

    mem = open_memory(client, memory_key, 400, background=False)
    for i in range(30):
        await mem.append({"role": "user", "content": f"turn {i} about shipping " + "word " * 12})
    result = await mem.flush()
    assert result.summary_id is not None
    exported = await mem.export_transcript("jsonl")
    assert '"part":"summaries"' in exported
    copy = MemoryInstance.open(client, project="flush", key=memory_key + ":copy")
    await copy.import_transcript(exported)
    assert await copy.export_transcript("jsonl") == exported
    assert (await copy.health()).summary_tokens == (await mem.health()).summary_tokens
    markdown = await copy.export_transcript("markdown")
    assert "## Summaries" in markdown
    assert "> **Summary** #" in markdown


HEAD = '{"id":%d,"ts":1732250000123,"tokens":3,"priority":2,'


@pytest.mark.parametrize(
    "envelope",
    [
        # A second "id" key: the scripts read the head's, a parser the last one.
        HEAD % 1 + '"role":"user","content":"kettle","id":5}',
        # Ids no index or total can hold.
        HEAD % (2 * 10**15) + '"role":"user","content":"kettle"}',
        '{"id":0,"ts":1,"tokens":3,"priority":2,"role":"user","content":"kettle"}',
    ],
)
async def test_an_import_refuses_ids_the_memory_could_not_index(
    client: RedisClient, memory_key: str, envelope: str
) -> None:
    mem = MemoryInstance.open(client, project=PROJECT, key=memory_key, counter=COUNTER)
    text = '{"compozy_transcript":1}\n' + f'{{"part":"msgs","envelope":{envelope}}}\n'
    with pytest.raises(InvalidMessageError, match="line 2"):
        await mem.import_transcript(text)
    assert await client.exists(*mem.keys.data) == 0  # nothing written
