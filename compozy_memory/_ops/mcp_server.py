"""``compozy-memory mcp``: conversation memories as Model Context Protocol tools.

An agent platform that speaks MCP (over stdio, or streamable HTTP) gets nine tools
(:mod:`compozy_memory._ops.mcp_tools`): ``list_memories``, ``remember``, ``search``,
``recall``, ``context``, ``facts``, ``set_facts``, ``delete_facts`` and ``forget``.

**What a server reaches** is fixed when it starts, in one of two ways:

* **for a user or a session** (``--config PATH --agent A --set user.id=ann``, or
  ``--session ID``): the memories the agent's references render to with those key template
  variables, as :class:`~compozy_memory.MemoryManager` renders them, and nothing else. A tool
  names a memory by its resource id (the schema's ``enum``); each keeps its mode (a read-only
  reference is read-only here), its policy, flushing and session index.
* **a whole project** (``--project P``): any memory of it, named by its stored key as ``ls``
  shows it. Every key is resolved inside the project (no key names another project's memory or
  picks a hash slot).

**Read-only** with ``--read-only``, and when the connection's ACL user may not write (a
``compozy-memory acl --read-only`` user: one ``PEXPIRE`` of a key no memory can have, sent at
start, tells): the four write tools are then not listed, and calling one says why. The ACL user
confines the server to the project on the server's side too.

**Errors** are tool results (``isError``) that say what was wrong: which argument, what it
must be, what it got (quoted at most 80 characters long), or the library's own message (at
most 600 characters). Nothing is written to stderr for them: no traceback, no echo of an
argument.

Needs the ``mcp`` extra (the official MCP SDK, 2.x). The SDK is imported when the server
starts, and the library's memory code when the first call needs it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from compozy_memory._ops.common import EXIT_USAGE, Settings, fail, memory_keys, open_client
from compozy_memory._ops.mcp_calls import HANDLERS, Refused
from compozy_memory._ops.mcp_tools import (
    ToolSpec,
    as_text,
    cap,
    describe_invalid,
    quote,
    tool_specs,
)
from compozy_memory.errors import BackendPermissionError, CompozyMemoryError

__all__ = ["Scope", "build_server", "run"]

Transport = Literal["stdio", "http"]
log = logging.getLogger("compozy_memory.mcp")

#: Handles a project-wide server keeps open (its most recently used memories).
_OPEN_HANDLES = 64


@dataclass(frozen=True)
class Scope:
    """What a server reaches: a whole ``project``, or the memories of ``agent`` (or of the
    resources ``memories``) of the project at ``config`` rendered with ``context``."""

    project: str | None = None
    config: str | None = None
    agent: str | None = None
    memories: tuple[str, ...] = ()
    context: dict[str, Any] = field(default_factory=dict)
    read_only: bool = False


class Door:
    """The memories a server reaches, and whether it may write: opened (the connection
    checked, the project loaded, write access probed) while the server already answers
    ``initialize``; the tools wait for it."""

    def __init__(self, options: Settings, scope: Scope) -> None:
        self.options = options
        self.client: Any = None
        self.scope = scope
        self.read_only_reason: str | None = (
            "this server was started with --read-only" if scope.read_only else None
        )
        self.project = scope.project or ""
        #: Scoped: memory name -> handle (None: a whole project, any stored key).
        self.named: dict[str, Any] | None = None
        self._manager: Any = None
        self._handles: OrderedDict[str, Any] = OrderedDict()
        self._stack = AsyncExitStack()
        self._opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def ready(self) -> None:
        """Wait until :meth:`open` is done (raises what it raised)."""
        await asyncio.shield(self._opened)

    @property
    def names(self) -> list[str] | None:
        return None if self.named is None else list(self.named)

    @property
    def writable(self) -> bool:
        return self.read_only_reason is None

    async def open(self) -> None:
        """Connect, load the project (scoped), and learn whether the connection may write."""
        try:
            await self._open()
        except BaseException as exc:
            self._opened.set_exception(exc)
            self._opened.exception()  # retrieved: the caller of open() reports it
            raise
        self._opened.set_result(None)

    async def _open(self) -> None:
        # The library's modules load in a thread, so the event loop answers `initialize`
        # meanwhile (imports on the loop would hold it for a second or more).
        await asyncio.to_thread(_load_library, self.scope.config is not None)
        self.client = await self._stack.enter_async_context(open_client(self.options))
        scope = self.scope
        if scope.config is not None:
            from compozy_memory._config.agents import MemoryReference
            from compozy_memory._config.registry import MemoryRegistry
            from compozy_memory._manager import MemoryManager

            registry = await asyncio.to_thread(MemoryRegistry.load, scope.config)
            if scope.project and scope.project != registry.project:
                raise fail(
                    f"{scope.config} is project {registry.project!r}, not {scope.project!r}",
                    EXIT_USAGE,
                )
            self.project = registry.project
            self._manager = MemoryManager(registry, self.client)
            refs: list[Any]
            if scope.agent is not None:
                refs = list(registry.agent(scope.agent))
                handles = await self._manager.for_agent(scope.agent, scope.context)
            else:
                refs = [MemoryReference(m) for m in scope.memories]
                handles = [await self._manager.get(ref, scope.context) for ref in refs]
            self.named = {ref.id: handle for ref, handle in zip(refs, handles, strict=True)}
        else:
            memory_keys(self.project, "probe")  # a project id that is not valid fails here
        if self.writable and not await self._may_write():
            self.read_only_reason = (
                "the server's Redis user may not write here (a read-only ACL user: "
                "`compozy-memory acl --read-only`)"
            )

    async def _may_write(self) -> bool:
        """Whether the connection's user may write the project's memories: PEXPIRE of a key
        inside the project's pattern that no memory can have (no braces), which changes
        nothing. A read-only ACL user is refused it (NOPERM)."""
        from redis import exceptions as redis_errors

        probe = f"compozy:{self.project}:memory:mcp-write-probe"
        try:
            await self.client.pexpire(probe, 1)
        except redis_errors.NoPermissionError:
            return False
        except redis_errors.ResponseError as exc:
            if "NOPERM" in str(exc):
                return False
            raise
        return True

    def memory(self, name: str) -> Any:
        """The handle of the memory ``name`` (checked by the tool's schema already)."""
        if self.named is not None:
            return self.named[name]
        handle = self._handles.get(name)
        if handle is None:
            from compozy_memory._store.instance import MemoryInstance

            handle = MemoryInstance(
                self.client, memory_keys(self.project, name), read_only=not self.writable
            )
            self._handles[name] = handle
            if len(self._handles) > _OPEN_HANDLES:
                self._handles.popitem(last=False)
        else:
            self._handles.move_to_end(name)
        return handle

    async def aclose(self) -> None:
        try:
            if self._manager is not None:
                await self._manager.aclose()
        finally:
            await self._stack.aclose()


def _load_library(scoped: bool) -> None:
    """Import what the door and the tools use (in a thread: see :meth:`Door._open`)."""
    import compozy_memory._io.connection
    import compozy_memory._io.delivery
    import compozy_memory._ops.listing
    import compozy_memory._store.instance

    if scoped:
        import compozy_memory._config.registry
        import compozy_memory._manager  # noqa: F401


# -- the server ------------------------------------------------------------------------------


def _version() -> str:
    try:
        return package_version("compozy-memory")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "0+unknown"


class Tools:
    """The tools a door offers, their listing and their calls."""

    def __init__(self, door: Door) -> None:
        self.door = door
        self._specs: dict[str, ToolSpec] | None = None

    @property
    def specs(self) -> dict[str, ToolSpec]:
        """The tools (their schemas name the memories: built once the door is open)."""
        if self._specs is None:
            self._specs = tool_specs(self.door.names, HANDLERS)
        return self._specs

    def offered(self) -> list[ToolSpec]:
        return [s for s in self.specs.values() if self.door.writable or not s.writes]

    def listing(self) -> list[Any]:
        import mcp_types as types

        return [
            types.Tool(
                name=spec.name,
                description=spec.description,
                input_schema=spec.schema(),
                annotations=types.ToolAnnotations(
                    read_only_hint=not spec.writes,
                    destructive_hint=spec.destructive,
                    idempotent_hint=not spec.writes or spec.name != "remember",
                    open_world_hint=False,
                ),
            )
            for spec in self.offered()
        ]

    async def call(self, name: str, arguments: dict[str, Any] | None) -> tuple[bool, Any]:
        """(ok, answer or error text) of one call; never raises for what a caller sent."""
        spec = self.specs.get(name)
        offered = [s.name for s in self.offered()]
        if spec is None:
            return False, cap(
                f"unknown tool {quote(name)}; this server offers: {', '.join(offered)}"
            )
        if spec.writes and not self.door.writable:
            return False, f"{name}: not available, {self.door.read_only_reason}"
        try:
            args: BaseModel = spec.model.model_validate(arguments or {})
        except ValidationError as exc:
            return False, describe_invalid(name, exc, spec.takes)
        try:
            return True, await spec.handler(self.door, args)
        except Refused as exc:
            return False, str(exc)
        except BackendPermissionError as exc:
            return False, cap(f"{name}: permission denied by the server: {exc}")
        except (CompozyMemoryError, ValueError) as exc:
            return False, cap(f"{name}: {exc}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug, or the server gone: said, never a traceback
            log.debug("%s failed", name, exc_info=True)
            return False, cap(f"{name} failed: {type(exc).__name__}: {exc}")


def build_server(door: Door) -> Any:
    """The MCP server (the SDK's low-level ``Server``) of ``door``'s memories."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    tools = Tools(door)
    scope = door.scope
    where = (
        f"any memory of project {scope.project!r}, named by its stored key"
        if scope.config is None
        else "the memories this server was started for (one user's or one session's), "
        "named by their memory id"
    )
    instructions = (
        f"Conversation memories: {where}. Call list_memories first; remember stores a "
        "message, search and recall find earlier ones, context gives what to send an LLM, "
        "facts hold short name -> value notes, forget removes a memory's content. A "
        "read-only server lists no tool that writes."
    )

    async def list_tools(ctx: Any, params: Any) -> Any:
        await door.ready()
        return types.ListToolsResult(tools=tools.listing())

    async def call_tool(ctx: Any, params: Any) -> Any:
        await door.ready()
        ok, answer = await tools.call(params.name, params.arguments)
        if not ok:
            return types.CallToolResult(
                content=[types.TextContent(text=str(answer))], is_error=True
            )
        return types.CallToolResult(
            content=[types.TextContent(text=as_text(answer))], structured_content=answer
        )

    return Server(
        "compozy-memory",
        version=_version(),
        title="compozy-memory",
        description="Redis-native conversation memory for fleets of LLM agents",
        instructions=instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def run(options: Settings, scope: Scope, transport: Transport, host: str, port: int) -> None:
    """Serve until the client goes away (stdio) or the process is stopped (HTTP).

    Over stdio the server answers ``initialize`` while the door opens (the connection, the
    project, the library's code), and a failure there ends it with that error; over HTTP the
    door opens before the port listens."""
    door = Door(options, scope)
    server = build_server(door)
    try:
        if transport == "stdio":
            from mcp.server.stdio import stdio_server

            failure: BaseException | None = None
            try:
                async with stdio_server() as (read, write):
                    serving = asyncio.create_task(
                        server.run(read, write, server.create_initialization_options())
                    )
                    try:
                        await door.open()
                    except BaseException as exc:
                        failure = exc
                        serving.cancel()
                        with suppress(asyncio.CancelledError):
                            await serving
                        raise
                    await serving
            except BaseExceptionGroup:
                if failure is None:
                    raise
                raise failure from None  # the transport's task group wrapped it
        else:
            import uvicorn

            await door.open()
            app = server.streamable_http_app(host=host)
            config = uvicorn.Config(app, host=host, port=port, log_level="warning")
            await uvicorn.Server(config).serve()
    finally:
        await door.aclose()
