"""``compozy-memory import`` against the real libraries: each history is written by the
framework's own store on a real server (or SQLite file), imported by ours, and read back
through our adapter as the framework wrote it; a re-run imports nothing twice, an interrupted
run resumes, and every step is a bounded page."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from compozy_memory import MemoryInstance, MemoryManager, MemoryRegistry, connect
from compozy_memory._io.translate import RedisClient
from compozy_memory._ops.cli import main
from compozy_memory._ops.importer import MARK, Source, import_history, source_for
from compozy_memory.embedded import EmbeddedServer
from integration.engines import EngineSpec
from integration.memories import COUNTER

ROOT = Path(__file__).resolve().parent.parent

SDK_ITEMS: list[Any] = [
    {"role": "system", "content": "You are a support agent."},
    {"role": "user", "content": "Where is order #1042?"},
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "order_status",
        "arguments": '{"order": 1042}',
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "shipped on day 3"},
    {"role": "assistant", "content": [{"type": "output_text", "text": "It shipped on day 3."}]},
]


def run(
    capsys: pytest.CaptureFixture[str], url: str, *argv: str, cluster: bool = False
) -> dict[str, Any]:
    """The CLI in process with --json; its report."""
    options = ["--url", url, *(["--cluster"] if cluster else [])]
    assert main([*options, "import", *argv, "--json"]) == 0, capsys.readouterr().err
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


def project() -> str:
    return f"imp-{uuid.uuid4().hex[:8]}"


async def test_openai_agents_redis_session(
    standalone: EngineSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("agents.extensions.memory.redis_session")
    from agents.extensions.memory.redis_session import RedisSession

    from compozy_memory.adapters.openai_agents import CompozySession

    sid = f"sess-{uuid.uuid4().hex[:6]}"
    source_client = connect(standalone.url)
    source = RedisSession(sid, redis_client=source_client)
    await source.add_items(SDK_ITEMS[:3])
    await source.add_items(SDK_ITEMS[3:])
    name = project()
    first = await asyncio.to_thread(
        run, capsys, standalone.url, "openai-agents-redis", "--session", sid, "-p", name, "chat-1"
    )
    assert (first["imported"], first["steps"], first["resumed_after"]) == (5, 1, None)
    client = connect(standalone.url)
    memory = MemoryInstance.open(client, project=name, key="chat-1")
    assert await CompozySession(memory).get_items() == SDK_ITEMS  # as the SDK wrote them
    assert await source.get_items() == SDK_ITEMS  # the source is only read
    # A re-run imports nothing; items the source gains later are imported once.
    again = await asyncio.to_thread(
        run, capsys, standalone.url, "openai-agents-redis", "--session", sid, "-p", name, "chat-1"
    )
    assert (again["imported"], again["resumed_after"]) == (0, 4)
    await source.add_items([{"role": "user", "content": "thanks!"}])
    later = await asyncio.to_thread(
        run, capsys, standalone.url, "openai-agents-redis", "--session", sid, "-p", name, "chat-1"
    )
    assert (later["imported"], later["resumed_after"]) == (1, 4)
    items = await CompozySession(memory).get_items()
    assert items == [*SDK_ITEMS, {"role": "user", "content": "thanks!"}]
    await source.close()
    await source_client.aclose()
    await client.aclose()


async def test_openai_agents_sqlite_session_into_every_engine(
    engine: EngineSpec, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agents.memory.sqlite_session import SQLiteSession

    from compozy_memory.adapters.openai_agents import CompozySession

    db = tmp_path / "sessions.db"
    source = SQLiteSession("sess-a", db)
    other = SQLiteSession("sess-b", db)  # another session in the same file: left alone
    await other.add_items([{"role": "user", "content": "not mine"}])
    for item in SDK_ITEMS:
        await source.add_items([item])
    name = project()
    argv = ["openai-agents-sqlite", "--file", str(db), "--session", "sess-a", "--page", "2"]
    report = await asyncio.to_thread(
        lambda: run(capsys, engine.url, *argv, "-p", name, "a", cluster=engine.cluster)
    )
    assert (report["imported"], report["steps"]) == (5, 3)  # pages of 2: 2 + 2 + 1
    client = engine.client()
    memory = MemoryInstance.open(client, project=name, key="a")
    assert await CompozySession(memory).get_items() == SDK_ITEMS
    kept: list[Any] = [m.metadata for m in await memory.read()]
    assert all(str(k["date"])[:4].isdigit() for k in kept)  # when it was said
    assert {k[MARK]["at"] for k in kept} == {2, 3, 4, 5, 6}  # the rows' ids
    again = await asyncio.to_thread(
        lambda: run(capsys, engine.url, *argv, "-p", name, "a", cluster=engine.cluster)
    )
    assert again["imported"] == 0
    assert await memory.len() == 5
    source.close()
    other.close()
    await client.aclose()


async def test_langchain_redis_chat_message_history(
    standalone: EngineSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    history_module = pytest.importorskip("langchain_community.chat_message_histories.redis")
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    from compozy_memory.adapters.langchain import CompozyChatMessageHistory

    sid = f"lc-{uuid.uuid4().hex[:6]}"
    source = history_module.RedisChatMessageHistory(sid, url=standalone.url)
    written = [
        SystemMessage("You are terse."),
        HumanMessage("What is 2 + 2?", id="h1"),
        AIMessage(
            "",
            tool_calls=[{"name": "add", "args": {"a": 2, "b": 2}, "id": "t1", "type": "tool_call"}],
        ),
        ToolMessage("4", tool_call_id="t1"),
        AIMessage("4.", response_metadata={"model": "x"}),
    ]
    source.add_messages(written)
    assert source.messages == written  # LPUSHed: newest first in Redis
    name = project()
    report = await asyncio.to_thread(
        run, capsys, standalone.url, "langchain-redis", "--session", sid, "-p", name, "lc"
    )
    assert report["imported"] == 5
    client = connect(standalone.url)
    memory = MemoryInstance.open(client, project=name, key="lc")
    assert CompozyChatMessageHistory(memory).messages == written
    source.add_message(HumanMessage("and 3 + 3?"))
    report = await asyncio.to_thread(
        run, capsys, standalone.url, "langchain-redis", "--session", sid, "-p", name, "lc"
    )
    assert (report["imported"], report["resumed_after"]) == (1, 4)
    assert CompozyChatMessageHistory(memory).messages == [*written, HumanMessage("and 3 + 3?")]
    source.clear()
    await client.aclose()


async def test_llama_index_redis_chat_store(
    standalone: EngineSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    store_module = pytest.importorskip("llama_index.storage.chat_store.redis")
    from llama_index.core.llms import ChatMessage, MessageRole

    from compozy_memory.adapters.llama_index import CompozyChatStore

    chat_key = f"user ann {uuid.uuid4().hex[:6]}"
    source = store_module.RedisChatStore(redis_url=standalone.url)
    written = [
        ChatMessage(role=MessageRole.SYSTEM, content="Be kind."),
        ChatMessage(role=MessageRole.USER, content="My parcel is late."),
        ChatMessage(
            role=MessageRole.ASSISTANT,
            content="Sorry! Checking.",
            additional_kwargs={"tool_calls": []},
        ),
    ]
    source.set_messages(chat_key, written)
    name = project()
    report = await asyncio.to_thread(
        run, capsys, standalone.url, "llama-index-redis", "--session", chat_key, "-p", name,
        "--text", f"llama-index:{chat_key}",  # the memory CompozyChatStore.from_client reads
    )  # fmt: skip
    assert report["imported"] == 3
    client = connect(standalone.url)
    store = CompozyChatStore.from_client(client, project=name)
    assert await store.aget_messages(chat_key) == written
    assert source.get_messages(chat_key) == written
    await client.aclose()


class Failing:
    """A source whose reads can be made to fail at a position, to interrupt an import."""

    def __init__(self, items: list[dict[str, Any]], fail_at: int | None) -> None:
        self.items = items
        self.fail_at = fail_at
        self.reads: list[tuple[int, int]] = []

    async def read(self, lo: int, hi: int) -> list[tuple[int, Any]]:
        self.reads.append((lo, hi))
        if self.fail_at is not None and hi > self.fail_at:
            raise ConnectionError("the source went away")
        return list(enumerate(self.items))[lo:hi]

    async def next_at(self, at: int) -> int | None:
        return at if at < len(self.items) else None

    def source(self, client: RedisClient) -> Source:
        template = source_for("openai-agents-redis", "s", client=client)
        return replace(template, read=self.read, next_at=self.next_at)


async def test_interrupted_runs_resume_and_concurrent_runs_store_once(
    client: RedisClient, memory_key: str
) -> None:
    items = [{"role": "user", "content": f"turn {n}"} for n in range(450)]
    failing = Failing(items, fail_at=201)
    source = failing.source(client)
    memory = MemoryInstance.open(client, project="imp", key=memory_key, counter=COUNTER)
    with pytest.raises(ConnectionError):
        await import_history(memory, source, page=100)
    assert await memory.len() == 200  # two whole pages, nothing of the third
    failing.fail_at = None
    stopped = await import_history(memory, source, page=100, max_steps=1)
    assert (stopped.imported, stopped.resumed_after) == (100, 199)
    # Two runs at once: each page is one append with a dedupe key from the source.
    runs = await asyncio.gather(*(import_history(memory, source, page=100) for _ in range(2)))
    assert min(r.resumed_after or 0 for r in runs) == 299
    texts = [m.text for m in await memory.read()]
    assert texts == [f"turn {n}" for n in range(450)]  # every item once, in order
    # Every read was a bounded page, on the grid of 100 positions.
    assert all(hi - lo == 100 and lo % 100 == 0 for lo, hi in failing.reads)
    final = await import_history(memory, source, page=100)
    assert (final.imported, final.resumed_after, final.steps) == (0, 449, 0)


async def test_a_memory_flushed_after_the_import_is_not_imported_again(
    client: RedisClient, memory_key: str
) -> None:
    """The imported messages left the conversation (trimmed to the archive): the run finds
    the last one there."""
    items = [{"role": "user", "content": f"turn {n}"} for n in range(30)]
    source = Failing(items, None).source(client)
    memory = MemoryInstance.open(client, project="imp", key=memory_key, counter=COUNTER)
    await import_history(memory, source, page=8)
    await memory.append({"role": "user", "content": "written by the app after"})
    await memory.trim(keep_messages=1)
    report = await import_history(memory, source, page=8)
    assert (report.imported, report.resumed_after) == (0, 29)


def test_a_broken_item_stops_the_import_saying_where(
    valkey_server: EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    import redis

    sid = f"bad-{uuid.uuid4().hex[:6]}"
    source = redis.Redis.from_url(valkey_server.url)
    key = f"agents:session:{sid}:messages"
    source.rpush(key, json.dumps({"role": "user", "content": "fine"}), "{not json")
    name = project()
    code = main(
        ["--url", valkey_server.url, "import", "openai-agents-redis", "--session", sid,
         "-p", name, "k"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"import stopped: {key}: item 1 is not JSON" in err
    assert err.count("\n") == 1
    source.delete(key)
    source.close()


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["pdf", "--session", "s", "-p", "a", "k"], "is not one of 'openai-agents-redis'"),
        (["langchain-redis", "--session", "s"], "name the memory"),
        (["langchain-redis", "--session", "s", "k"], "KEY needs its project"),
        (["openai-agents-sqlite", "--session", "s", "-p", "a", "k"], "give --file PATH"),
        (
            ["openai-agents-sqlite", "--session", "s", "--file", "/nope.db", "-p", "a", "k"],
            "no such file",
        ),
        (["langchain-redis", "--session", "s", "--config", "x"], "give --memory ID"),
        (
            ["langchain-redis", "--session", "s", "-p", "a", "k", "--memory", "m"],
            "go with --config",
        ),
    ],
)
def test_usage_errors_before_anything_is_read(
    argv: list[str], text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--url", "redis://127.0.0.1:1/0", "import", *argv])
    err = capsys.readouterr().err
    assert code in (2, 5), err
    assert text in err


async def test_through_the_projects_manager_the_memory_is_listed(
    valkey_server: EmbeddedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agents.memory.sqlite_session import SQLiteSession

    db = tmp_path / "s.db"
    source = SQLiteSession("t-1", db)
    await source.add_items(SDK_ITEMS)
    source.close()
    report = await asyncio.to_thread(
        run, capsys, valkey_server.url, "openai-agents-sqlite", "--file", str(db), "--session",
        "t-1", "--config", str(ROOT / "examples" / "project"), "--memory", "customer-support",
        "--set", "workflow.input.user_id=imported-1",
    )  # fmt: skip
    assert report["memory"] == "customer-support:user:imported-1"
    assert report["imported"] == 5
    ls = ["--url", valkey_server.url, "ls", "-p", "acme", "--json"]
    assert await asyncio.to_thread(main, ls) == 0
    listed = json.loads(capsys.readouterr().out)
    assert "customer-support:user:imported-1" in [m["key"] for m in listed["memories"]]
    client = connect(valkey_server.url)
    manager = MemoryManager(MemoryRegistry.load(ROOT / "examples" / "project"), client)
    memory = await manager.get(
        "customer-support", {"workflow": {"input": {"user_id": "imported-1"}}}
    )
    assert await memory.len() == 5
    await memory.clear()
    await manager.aclose()
    await client.aclose()


async def test_json_lines_of_messages(
    standalone: EngineSpec, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [
        {"role": "system", "content": "You are a support agent.", "priority": 0},
        {"role": "user", "content": "Where is order #7?"},
        {"role": "assistant", "content": "On its way.", "metadata": {"date": "2024-05-01"}},
    ]
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines[:2]) + "\n\n")
    name = project()
    first = await asyncio.to_thread(
        run, capsys, standalone.url, "jsonl", "--file", str(path), "-p", name, "k"
    )
    assert first["imported"] == 2
    with path.open("a") as file:  # the file grows: the next run takes only the new line
        file.write(json.dumps(lines[2]) + "\n")
    second = await asyncio.to_thread(
        run, capsys, standalone.url, "jsonl", "--file", str(path), "-p", name, "k"
    )
    assert (second["imported"], second["resumed_after"]) == (1, 2)
    client = connect(standalone.url)
    memory = MemoryInstance.open(client, project=name, key="k")
    stored = await memory.read()
    assert [(m.role, m.text, m.priority) for m in stored] == [
        ("system", "You are a support agent.", 0),
        ("user", "Where is order #7?", 2),
        ("assistant", "On its way.", 2),
    ]
    last: Any = stored[2].metadata
    assert last["date"] == "2024-05-01"
    assert last[MARK]["at"] == 4  # its line
    await client.aclose()


def test_a_json_line_that_is_no_message_stops_the_import_saying_which(
    valkey_server: EmbeddedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text('{"role": "user", "content": "ok"}\n["not", "a", "message"]\n')
    code = main(
        ["--url", valkey_server.url, "import", "jsonl", "--file", str(path), "-p", project(), "k"]
    )
    err = capsys.readouterr().err
    assert code == 1, err
    assert "item 2 cannot be read: a line holds one message, a JSON object; got list" in err
