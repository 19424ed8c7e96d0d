"""``compozy-memory mcp``: one project's memories as Model Context Protocol tools.

An agent platform that speaks MCP (over stdio, or streamable HTTP) gets four read-only tools
on the memories of one project, named by the key ``ls`` shows:

* ``search(key, query, limit)``: the archived messages that best answer ``query``;
* ``recall(key, offset, limit)``: archived originals, oldest first;
* ``facts(key)``: the session facts;
* ``context(key, max_tokens, query)``: what the memory would send an LLM.

Confinement is the CLI's: the project is fixed when the server starts, every key is resolved
inside it (a key cannot name another project's memory or pick a hash slot), every handle is
read-only, and the connection's ACL user (``compozy-memory acl --project P --read-only``, its
credentials in ``--url``) is refused by the server itself outside that project's keys.

Needs the ``mcp`` extra (the official MCP SDK, 2.x).
"""

from __future__ import annotations

from typing import Any, Literal

from mcp.server.mcpserver import MCPServer

from compozy_memory._io.translate import RedisClient
from compozy_memory._model.messages import Message
from compozy_memory._model.results import Hit
from compozy_memory._ops.common import Settings, memory_keys, open_client, open_memory

__all__ = ["build_server", "run"]

Transport = Literal["stdio", "http"]


def build_server(client: RedisClient, project: str) -> MCPServer:
    """The MCP server of ``project``'s memories on ``client`` (which the caller closes)."""
    memory_keys(project, "probe")  # a project id that is not valid fails here, not per call
    server: MCPServer = MCPServer(
        name="compozy-memory",
        instructions=(
            f"Read the conversation memories of project {project!r}: search their archives, "
            "recall archived messages, read session facts and the context an LLM would get. "
            "Name a memory by its key, as `compozy-memory ls` lists them."
        ),
    )

    def memory(key: str) -> Any:
        return open_memory(client, memory_keys(project, key), read_only=True)

    @server.tool(description="Archived messages of memory `key` that best answer `query`.")
    async def search(key: str, query: str, limit: int = 10) -> list[dict[str, Any]]:
        return [_hit(h) for h in await memory(key).search(query, limit)]

    @server.tool(description="Archived originals of memory `key`, oldest first.")
    async def recall(key: str, offset: int = 0, limit: int = 20) -> list[dict[str, Any]]:
        return [_message(m) for m in await memory(key).recall(offset, limit)]

    @server.tool(description="The session facts of memory `key`, as a key-value object.")
    async def facts(key: str) -> dict[str, str]:
        return dict(await memory(key).facts.items())

    @server.tool(
        description=(
            "What memory `key` would send an LLM within `max_tokens`: pinned messages, "
            "facts, summary, recalled and archived hits for `query`, newest messages."
        )
    )
    async def context(key: str, max_tokens: int, query: str | None = None) -> list[dict[str, Any]]:
        return [_message(m) for m in await memory(key).context(max_tokens, query=query)]

    del search, recall, facts, context  # registered on the server
    return server


async def run(options: Settings, project: str, transport: Transport, host: str, port: int) -> None:
    """Serve until the client goes away (stdio) or the process is stopped (HTTP)."""
    async with open_client(options) as client:
        server = build_server(client, project)
        if transport == "stdio":
            await server.run_stdio_async()
        else:
            await server.run_streamable_http_async(host=host, port=port)


def _message(message: Message) -> dict[str, Any]:
    return message.model_dump(mode="json", by_alias=True, exclude_none=True)


def _hit(hit: Hit) -> dict[str, Any]:
    found: dict[str, Any] = {"id": hit.id, "score": hit.score, "message": _message(hit.message)}
    if hit.before is not None:
        found["before"] = _message(hit.before)
    if hit.after is not None:
        found["after"] = _message(hit.after)
    return found
