"""``compozy-memory mcp``: the MCP SDK's own client lists the tools and calls them against a
live memory on the embedded Valkey, over stdio and streamable HTTP, as the project's
read-only ACL user."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult

from compozy_memory import MemoryInstance
from compozy_memory._io.connection import connect
from compozy_memory._ops.acl import acl_setuser
from compozy_memory.embedded import EmbeddedServer

PROJECT = "mcp-demo"
TOOLS = {"search", "recall", "facts", "context"}
pytestmark = pytest.mark.slow


@pytest.fixture
async def reader_url(valkey_server: EmbeddedServer) -> AsyncIterator[tuple[str, str]]:
    """The URL of the project's read-only ACL user, and a memory key with an archive."""
    client = connect(valkey_server.url)
    key = f"support-{uuid.uuid4().hex[:8]}"
    memory = MemoryInstance.open(client, project=PROJECT, key=key)
    await memory.append_many(
        [
            {"role": "user", "content": "my invoice number is INV-4471 and it was charged twice"},
            {"role": "assistant", "content": "I have refunded the duplicate charge."},
            {"role": "user", "content": "thanks, what about shipping to Lisbon?"},
            {"role": "assistant", "content": "Shipping to Lisbon takes four days."},
        ]
    )
    await memory.facts.set("customer", "ACME Corp")
    await memory.trim(keep_messages=2)  # the first turn goes to the archive, indexed
    user = f"mcp-{uuid.uuid4().hex[:8]}"
    await client.execute_command(*acl_setuser(user, PROJECT, read_only=True, password="pw-mcp"))
    yield f"redis://{user}:pw-mcp@127.0.0.1:{valkey_server.port}/0", key
    await client.execute_command("ACL", "DELUSER", user)
    await client.aclose()


def _server_command(url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "compozy_memory._ops.cli", "--url", url, "mcp", "-p", PROJECT,
            *extra]  # fmt: skip


async def _exercise(client: Client, key: str) -> None:
    tools = await client.list_tools()
    assert {tool.name for tool in tools.tools} == TOOLS
    found = _payload(await client.call_tool("search", {"key": key, "query": "invoice charged"}))
    assert found[0]["message"]["content"].startswith("my invoice number is INV-4471")
    assert _payload(await client.call_tool("facts", {"key": key})) == {"customer": "ACME Corp"}
    recalled = _payload(await client.call_tool("recall", {"key": key}))
    assert [m["role"] for m in recalled] == ["user", "assistant"]
    context = _payload(await client.call_tool("context", {"key": key, "max_tokens": 500}))
    assert context[-1]["content"] == "Shipping to Lisbon takes four days."
    # A key is resolved inside the project: another project's memory cannot be named.
    refused = await client.call_tool("search", {"key": "{x}", "query": "invoice"})
    assert refused.is_error


def _payload(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    structured = result.structured_content
    assert structured is not None
    return structured.get("result", structured)


async def test_stdio(reader_url: tuple[str, str]) -> None:
    url, key = reader_url
    command = _server_command(url)
    async with Client(StdioServerParameters(command=command[0], args=command[1:])) as client:
        await _exercise(client, key)


@pytest.fixture
def http_server(reader_url: tuple[str, str]) -> Iterator[str]:
    url, _ = reader_url
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        _server_command(url, "--transport", "http", "--port", str(port)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
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
        process.stderr.close()


async def test_streamable_http(reader_url: tuple[str, str], http_server: str) -> None:
    async with Client(http_server) as client:
        await _exercise(client, reader_url[1])
