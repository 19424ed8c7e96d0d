"""``compozy-memory mcp`` driven by the official MCP SDK's client, over stdio and streamable
HTTP, against real servers: every tool, the bounds its schema states, hostile arguments, a
server scoped to one user's memories, read-only by flag and under a read-only ACL user."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_types import CallToolResult

from compozy_memory import MemoryInstance, MemoryManager, MemoryRegistry, connect
from compozy_memory._ops.acl import acl_setuser
from compozy_memory.embedded import EmbeddedServer
from integration.engines import EngineSpec
from integration.memories import COUNTER

WRITES = {"remember", "set_facts", "delete_facts", "forget"}
TOOLS = {"list_memories", "search", "recall", "context", "facts", *WRITES}
ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "project"
pytestmark = pytest.mark.slow


def _command(url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "compozy_memory._ops.cli", "--url", url, "mcp", *args]


class Stderr:
    """What a server wrote to stderr, read once it has stopped."""

    def __init__(self) -> None:
        self.text: str | None = None

    def read_text(self) -> str:
        assert self.text is not None, "read once the server has stopped"
        return self.text


@asynccontextmanager
async def served(url: str, *args: str) -> AsyncIterator[tuple[Client, Stderr]]:
    """A stdio server and the SDK's client of it; the server's stderr goes to a file."""
    command = _command(url, *args)
    errors = Stderr()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "stderr"
        try:
            with path.open("w") as errlog:
                params = StdioServerParameters(command=command[0], args=command[1:])
                async with Client(stdio_client(params, errlog=errlog)) as client:
                    yield client, errors
        finally:
            errors.text = path.read_text()


def payload(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    structured = result.structured_content
    assert isinstance(structured, dict)
    text = result.content[0]
    assert json.loads(getattr(text, "text", "")) == structured  # the same answer as text
    return structured


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    text: str = getattr(result.content[0], "text", "")
    return text


def project() -> str:
    return f"mcp-{uuid.uuid4().hex[:8]}"


async def test_every_tool_over_stdio(standalone: EngineSpec) -> None:
    name = project()
    async with served(standalone.url, "-p", name) as (client, errors):
        info = client.server_info
        assert info is not None
        assert info.name == "compozy-memory"
        assert info.version == version("compozy-memory")
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(listed) == TOOLS
        search = listed["search"].input_schema
        assert search["additionalProperties"] is False
        assert search["properties"]["limit"] == {
            "default": 10, "description": "at most this many hits", "maximum": 50, "minimum": 1,
            "type": "integer",
        }  # fmt: skip
        assert search["properties"]["memory"]["maxLength"] == 512
        assert listed["forget"].annotations is not None
        assert listed["forget"].annotations.destructive_hint is True
        assert listed["search"].annotations is not None
        assert listed["search"].annotations.read_only_hint is True

        key = "support:user-42"
        said = [
            ("user", "my invoice number is INV-4471 and it was charged twice"),
            ("assistant", "I have refunded the duplicate charge."),
            ("user", "thanks, what about shipping to Lisbon?"),
        ]
        for role, text in said:
            stored = payload(
                await client.call_tool("remember", {"memory": key, "role": role, "content": text})
            )
            assert stored["duplicate"] is False
        again = {"memory": key, "role": "assistant", "content": "4 days", "dedupe_key": "t-9"}
        first = payload(await client.call_tool("remember", again))
        second = payload(await client.call_tool("remember", again))
        assert (first["id"], first["duplicate"]) == (4, False)
        assert (second["id"], second["duplicate"]) == (4, True)  # stored once

        found = payload(await client.call_tool("search", {"memory": key, "query": "invoice"}))
        assert found["hits"][0]["message"]["content"] == said[0][1]
        assert found["hits"][0]["after"]["content"] == said[1][1]
        payload(
            await client.call_tool(
                "set_facts", {"memory": key, "facts": {"customer": "ACME", "plan": "pro"}}
            )
        )
        facts = payload(await client.call_tool("facts", {"memory": key}))
        assert facts["facts"] == {"customer": "ACME", "plan": "pro"}
        deleted = payload(
            await client.call_tool("delete_facts", {"memory": key, "names": ["plan"]})
        )
        assert deleted["deleted"] == 1
        context = payload(await client.call_tool("context", {"memory": key, "max_tokens": 500}))
        texts = [m.get("text", m["content"]) for m in context["messages"]]
        assert texts[-1] == "4 days"
        assert any("customer" in t and "ACME" in t for t in texts)  # the facts message

        memory = MemoryInstance.open(connect(standalone.url), project=name, key="support:user-42")
        assert [m.text for m in await memory.read()] == [t for _, t in said] + ["4 days"]
        await memory.trim(keep_messages=1)
        await memory.client.aclose()
        recalled = payload(await client.call_tool("recall", {"memory": key, "limit": 2}))
        assert [m["content"] for m in recalled["messages"]] == [said[0][1], said[1][1]]

        forgot = payload(await client.call_tool("forget", {"memory": key}))
        assert forgot["forgotten_messages"] == 1
        assert payload(await client.call_tool("facts", {"memory": key}))["facts"] == {}
    assert errors.read_text() == ""


HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("search", {"memory": "k", "query": "x", "limit": "100"}, "limit: must be an integer"),
    ("search", {"memory": "k", "query": "x", "limit": True}, "limit: must be an integer"),
    ("search", {"memory": "k", "query": "x", "limit": 3.0}, "limit: must be an integer"),
    ("search", {"memory": "k", "query": "x", "limit": 51}, "limit: must be at most 50, got 51"),
    ("search", {"memory": "k", "query": "x", "limit": 0}, "limit: must be at least 1, got 0"),
    ("search", {"memory": "k", "query": "x", "sql": "1; DROP"}, "unknown argument 'sql'"),
    ("search", {"memory": "k"}, "query is required"),
    ("search", {"memory": "k", "query": ""}, "query: must be at least 1 characters"),
    ("search", {"memory": "{other}:x", "query": "x"}, "memory: must match"),
    ("search", {"memory": None, "query": "x"}, "memory: must be a string"),
    ("search", {"memory": "k", "query": "x", "roles": ["root"]}, "roles.0: must be one of"),
    ("remember", {"memory": "k", "role": "admin", "content": "x"}, "role: must be one of"),
    ("remember", {"memory": "k", "role": "user", "content": 5}, "content: must be a string"),
    (
        "remember",
        {"memory": "k", "role": "user", "content": "x", "dedupe_key": "a b"},
        "must match",
    ),
    ("context", {"memory": "k", "max_tokens": -1}, "max_tokens: must be at least 1"),
    ("recall", {"memory": "k", "offset": -5}, "offset: must be at least 0"),
    ("set_facts", {"memory": "k", "facts": {}}, "facts: must have at least 1 items"),
    ("set_facts", {"memory": "k", "facts": {"a": 1}}, "facts.a: must be a string"),
    ("delete_facts", {"memory": "k", "names": "plan"}, "names: must be an array"),
    ("no_such_tool", {}, "unknown tool 'no_such_tool'; this server offers: list_memories"),
]


async def test_hostile_arguments_are_refused_with_a_reason_and_nothing_on_stderr(
    valkey_server: EmbeddedServer,
) -> None:
    name = project()
    async with served(valkey_server.url, "-p", name) as (client, errors):
        for tool, arguments, expected in HOSTILE:
            text = error_text(await client.call_tool(tool, arguments))
            assert expected in text, (tool, arguments, text)
        # Huge arguments: refused at once, and never echoed back whole.
        for size in (1_000_000, 5_000_000):
            started = time.monotonic()
            result = await client.call_tool("search", {"memory": "k" * size, "query": "x"})
            took = time.monotonic() - started
            text = error_text(result)
            assert "memory: must be at most 512 characters" in text
            assert f"({size:,} characters)" in text
            assert len(text) < 400
            assert took < 10, took  # 7.5 s (1 MB) and 43 s (5 MB) before, with a traceback
        huge = {"memory": "k", "role": "user", "content": "x" * 3_000_000}
        text = error_text(await client.call_tool("remember", huge))
        assert "content: must be at most 100000 characters" in text
        assert len(text) < 400
        nested: Any = "x"
        for _ in range(150):  # the SDK's JSON parser stops at 200 levels, before any tool
            nested = [nested]
        text = error_text(await client.call_tool("search", {"memory": nested, "query": "x"}))
        assert "memory: must be a string" in text
        assert len(text) < 400
        # Nothing was written by any of them.
        listed = payload(await client.call_tool("list_memories", {}))
        assert listed["memories"] == []
    assert errors.read_text() == ""  # no traceback, no echo
    redis = connect(valkey_server.url)
    try:
        assert await redis.keys(f"compozy:{name}:*") == []
    finally:
        await redis.aclose()


@pytest.fixture
async def two_users(valkey_server: EmbeddedServer) -> AsyncIterator[MemoryManager]:
    """The example project's memories of users ann and bob, written through a manager."""
    client = connect(valkey_server.url)
    manager = MemoryManager(MemoryRegistry.load(EXAMPLES), client, counter=COUNTER)
    for user in ("ann", "bob"):
        context = {"workflow": {"input": {"user_id": user}}}
        (memory,) = await manager.for_agent("support-bot", context)
        await memory.clear()
        await memory.append({"role": "user", "content": f"I am {user}, my order is late"})
    yield manager
    await manager.aclose()
    await client.aclose()


async def test_a_server_for_one_user_reaches_only_that_users_memories(
    valkey_server: EmbeddedServer, two_users: MemoryManager
) -> None:
    args = [
        "--config",
        str(EXAMPLES),
        "--agent",
        "support-bot",
        "--set",
        "workflow.input.user_id=ann",
    ]
    async with served(valkey_server.url, *args) as (client, errors):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        memory_schema = tools["search"].input_schema["properties"]["memory"]
        assert memory_schema["enum"] == ["customer-support"]
        assert memory_schema["default"] == "customer-support"  # the only one: may be left out
        listed = payload(await client.call_tool("list_memories", {}))["memories"]
        assert [(m["memory"], m["key"], m["writable"]) for m in listed] == [
            ("customer-support", "customer-support:user:ann", True)
        ]
        found = payload(await client.call_tool("search", {"query": "order late"}))["hits"]
        assert [h["message"]["content"] for h in found] == ["I am ann, my order is late"]
        payload(await client.call_tool("remember", {"role": "user", "content": "ann again"}))
        # bob's memory cannot be named: not by its memory id's key, nor by any key.
        for other in ("customer-support:user:bob", "bob", "sql-agent"):
            text = error_text(await client.call_tool("facts", {"memory": other}))
            assert "memory: must be one of 'customer-support'" in text
    assert errors.read_text() == ""
    (bob,) = await two_users.for_agent("support-bot", {"workflow": {"input": {"user_id": "bob"}}})
    assert [m.text for m in await bob.read()] == ["I am bob, my order is late"]
    (ann,) = await two_users.for_agent("support-bot", {"workflow": {"input": {"user_id": "ann"}}})
    assert [m.text for m in await ann.read()][-1] == "ann again"


async def test_a_read_only_reference_stays_read_only(valkey_server: EmbeddedServer) -> None:
    args = ["--config", str(EXAMPLES), "--agent", "sql-analyst", "--set", "workflow.id=wf-1"]
    async with served(valkey_server.url, *args) as (client, errors):
        listed = payload(await client.call_tool("list_memories", {}))["memories"]
        assert {m["memory"]: m["writable"] for m in listed} == {
            "sql-agent": True,
            "project-knowledge": False,
        }
        refused = {"memory": "project-knowledge", "role": "user", "content": "x"}
        text = error_text(await client.call_tool("remember", refused))
        assert text == "remember: memory 'project-knowledge' is read-only for this server"
        ok = {"memory": "sql-agent", "role": "user", "content": "SELECT 1"}
        assert payload(await client.call_tool("remember", ok))["id"] >= 1
    assert errors.read_text() == ""


@pytest.fixture
async def reader(valkey_server: EmbeddedServer) -> AsyncIterator[tuple[str, str, str]]:
    """(URL of a read-only ACL user of a project, the project, a key with an archive)."""
    name = project()
    client = connect(valkey_server.url)
    key = f"support-{uuid.uuid4().hex[:8]}"
    memory = MemoryInstance.open(client, project=name, key=key, counter=COUNTER)
    await memory.append_many(
        [
            {"role": "user", "content": "my invoice number is INV-4471 and it was charged twice"},
            {"role": "assistant", "content": "I have refunded the duplicate charge."},
            {"role": "user", "content": "thanks, what about shipping to Lisbon?"},
            {"role": "assistant", "content": "Shipping to Lisbon takes four days."},
        ]
    )
    await memory.facts.set("customer", "ACME Corp")
    await memory.trim(keep_messages=2)
    user = f"mcp-{uuid.uuid4().hex[:8]}"
    await client.execute_command(*acl_setuser(user, name, read_only=True, password="pw-mcp"))
    yield f"redis://{user}:pw-mcp@127.0.0.1:{valkey_server.port}/0", name, memory.keys.key
    await client.execute_command("ACL", "DELUSER", user)
    await client.aclose()


async def _read_only_server(client: Client, key: str, why: str) -> None:
    assert {t.name for t in (await client.list_tools()).tools} == TOOLS - WRITES
    found = payload(await client.call_tool("search", {"memory": key, "query": "invoice charged"}))
    assert found["hits"][0]["message"]["content"].startswith("my invoice number is INV-4471")
    assert payload(await client.call_tool("facts", {"memory": key}))["facts"] == {
        "customer": "ACME Corp"
    }
    for tool, arguments in (
        ("remember", {"memory": key, "role": "user", "content": "x"}),
        ("set_facts", {"memory": key, "facts": {"a": "b"}}),
        ("forget", {"memory": key}),
    ):
        text = error_text(await client.call_tool(tool, arguments))
        assert text.startswith(f"{tool}: not available, "), text
        assert why in text


async def test_read_only_under_a_read_only_acl_user(reader: tuple[str, str, str]) -> None:
    url, name, key = reader
    async with served(url, "-p", name) as (client, errors):
        await _read_only_server(client, key, "read-only ACL user")
        # The server itself confines the user to the project.
        text = error_text(await client.call_tool("search", {"memory": "{x}", "query": "invoice"}))
        assert "memory: must match" in text
    assert errors.read_text() == ""


async def test_read_only_by_flag(
    reader: tuple[str, str, str], valkey_server: EmbeddedServer
) -> None:
    _, name, key = reader
    async with served(valkey_server.url, "-p", name, "--read-only") as (client, errors):
        await _read_only_server(client, key, "started with --read-only")
    assert errors.read_text() == ""


def test_startup_errors_are_one_line_and_an_exit_code(valkey_server: EmbeddedServer) -> None:
    """Before any client speaks: an unreachable server (exit 3), a bad combination of options
    (exit 2), a project that does not match the configuration (exit 2)."""
    cases = [
        (_command("redis://127.0.0.1:1/0", "-p", "acme"), 3, "cannot reach"),
        (_command(valkey_server.url), 2, "name what to serve"),
        (_command(valkey_server.url, "-p", "acme", "--agent", "a"), 2, "go with --config"),
        (_command(valkey_server.url, "--config", str(EXAMPLES)), 2, "give --agent"),
        (
            _command(valkey_server.url, "-p", "other", "--config", str(EXAMPLES), "--agent",
                     "support-bot", "--set", "workflow.input.user_id=1"),
            2,
            "is project 'acme', not 'other'",
        ),
    ]  # fmt: skip
    for command, code, text in cases:
        done = subprocess.run(
            command, input="", capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == code, (command, done.stderr)
        assert text in done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        assert "Traceback" not in done.stderr


@pytest.fixture
def http_server(reader: tuple[str, str, str], valkey_server: EmbeddedServer) -> Iterator[str]:
    _, name, _ = reader
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        _command(valkey_server.url, "-p", name, "--transport", "http", "--port", str(port)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as attempt:
                if attempt.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None, process.communicate()[1].decode()
            assert time.monotonic() < deadline, "the MCP server did not start listening"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)
        assert process.stderr is not None
        err = process.stderr.read().decode()
        process.stderr.close()
        assert "Traceback" not in err
    assert process.returncode in (0, -15)  # SIGTERM is how it is meant to stop


async def test_streamable_http(reader: tuple[str, str, str], http_server: str) -> None:
    _, _, key = reader
    async with Client(http_server) as client:
        assert client.server_info is not None
        assert client.server_info.version == version("compozy-memory")
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        found = payload(await client.call_tool("search", {"memory": key, "query": "Lisbon"}))
        assert "Lisbon" in found["hits"][0]["message"]["content"]
        stored = {"memory": key, "role": "user", "content": "over http"}
        assert payload(await client.call_tool("remember", stored))["duplicate"] is False
        text = error_text(
            await client.call_tool("search", {"memory": key, "query": "x", "limit": "5"})
        )
        assert "limit: must be an integer" in text
