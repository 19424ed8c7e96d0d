"""The set-up commands: ``validate``, ``acl``, ``install`` and ``serve-metrics``."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

import typer

from compozy_memory._ops.acl import acl_setuser
from compozy_memory._ops.common import (
    EXIT_USAGE,
    Settings,
    fail,
    open_client,
    settings,
)
from compozy_memory._ops.output import Out
from compozy_memory.errors import ConfigFileError, UsageError

if TYPE_CHECKING:
    from compozy_memory._config.loader import Project

__all__ = ["acl", "install_library", "serve_metrics", "validate"]

JsonOption = Annotated[bool, typer.Option("--json", help="machine-readable output")]


def validate(
    path: Annotated[str, typer.Argument(help="a project folder or its compozy.yaml")],
    json_mode: JsonOption = False,
) -> None:
    """Check a project's memory configuration: print its memories and agents, or every
    problem with file, line and key path (exit 1)."""
    from compozy_memory._config.loader import load_project

    out = Out(json_mode)
    try:
        project = load_project(path)
    except ConfigFileError as exc:
        if json_mode:
            out.data({"valid": False, "path": path, "problems": [str(p) for p in exc.problems]})
        else:
            for problem in exc.problems:
                print(problem, file=sys.stderr)
            count = len(exc.problems)
            print(
                f"{count} problem{'s' if count > 1 else ''}: {path} is not valid", file=sys.stderr
            )
        raise typer.Exit(1) from None
    if json_mode:
        out.data(_project_json(project))
        return
    for warning in project.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    _print_project(project)


def acl(
    ctx: typer.Context,
    project: Annotated[
        str, typer.Option("--project", "-p", envvar="COMPOZY_PROJECT", help="the project id")
    ],
    user: Annotated[str, typer.Option(help="the ACL user name")],
    read_only: Annotated[bool, typer.Option("--read-only", help="reads only")] = False,
    cluster: Annotated[
        bool, typer.Option("--cluster", help="for a Redis Cluster (also the global --cluster)")
    ] = False,
    allow_scan: Annotated[
        bool,
        typer.Option(
            "--allow-scan",
            help="also SCAN, for `ls --scan`: SCAN ignores key patterns, so the user sees the "
            "key names of every project",
        ),
    ] = False,
    password: Annotated[
        str, typer.Option(help="put in the line as >password (default: a placeholder)")
    ] = "<password>",  # noqa: S107 - a placeholder the operator replaces
    json_mode: JsonOption = False,
) -> None:
    """Print the ACL SETUSER line for a user confined to one project's memories: every
    command of this CLI but install and demo works with it (reads only with --read-only;
    `ls --scan` only with --allow-scan)."""
    cluster = cluster or settings(ctx).cluster
    try:
        line = acl_setuser(
            user, project, read_only=read_only, password=password, cluster=cluster, scan=allow_scan
        )
    except UsageError as exc:
        raise fail(str(exc), EXIT_USAGE) from exc
    if json_mode:
        Out(True).data({"user": user, "project": project, "command": line})
    else:
        print(" ".join(line))


def install_library(
    ctx: typer.Context,
    url: Annotated[
        str, typer.Option(help="the server (any node of a Cluster); default: --url")
    ] = "",
    cluster: Annotated[bool, typer.Option("--cluster", help="a Redis Cluster")] = False,
    json_mode: JsonOption = False,
) -> None:
    """Load the scripts as a Redis Functions library (on every primary of a Cluster)."""
    from compozy_memory._wire.scripts import library

    base = settings(ctx)
    options = Settings(url or base.url, cluster or base.cluster)
    loaded = asyncio.run(_install(options))
    name = library().name
    if json_mode:
        Out(True).data({"library": name, "loaded_on": loaded})
    elif loaded:
        print(f"loaded {name} on {', '.join(loaded)}")
    else:
        print(f"{name} was already installed")


async def _install(options: Settings) -> list[str]:
    from compozy_memory._io.delivery import install

    async with open_client(options) as client:
        return list(await install(client))


def serve_metrics(
    port: Annotated[int, typer.Option(help="the port (0: any free one)")],
    addr: Annotated[str, typer.Option(help="the address")] = "127.0.0.1",
    multiprocess_dir: Annotated[
        str,
        typer.Option(
            envvar="PROMETHEUS_MULTIPROC_DIR",
            help="serve the metrics an application's processes write there "
            "(prometheus-client multiprocess mode)",
        ),
    ] = "",
) -> None:
    """Serve /metrics for Prometheus until SIGTERM or Ctrl-C."""
    from prometheus_client import REGISTRY, CollectorRegistry

    from compozy_memory._metrics import default_metrics
    from compozy_memory._ops.exporter import start_metrics_server

    if multiprocess_dir:
        from prometheus_client.multiprocess import MultiProcessCollector

        if not os.path.isdir(multiprocess_dir):
            raise fail(f"--multiprocess-dir {multiprocess_dir!r} is not a directory")
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=multiprocess_dir)  # type: ignore[no-untyped-call]
        what = f"the metrics written to {multiprocess_dir}"
    else:
        default_metrics()  # the families, so a scrape shows what there will be
        registry = REGISTRY
        what = "this process's registry (no memory is used here: see --help)"
    try:
        server = start_metrics_server(port, addr, registry)
    except OSError as exc:
        raise fail(f"cannot serve on {addr}:{port}: {exc}") from exc
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    print(f"serving {what} on {server.url}", flush=True)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        server.stop()


def _project_json(project: Project) -> dict[str, Any]:
    memories = {
        memory_id: {"file": entry.file, "line": entry.line, **entry.resource.summary()}
        for memory_id, entry in sorted(project.resources.items())
    }
    agents = {
        agent_id: {
            "file": agent.file,
            "line": agent.line,
            "level": agent.level,
            "memories": [
                {"id": ref.id, "mode": ref.mode, "key": ref.key} for ref in agent.memories
            ],
        }
        for agent_id, agent in sorted(project.agents.items())
    }
    return {
        "valid": True,
        "project": project.id,
        "root": str(project.root),
        "memories": memories,
        "agents": agents,
        "warnings": [str(w) for w in project.warnings],
    }


def _print_project(project: Project) -> None:
    print(f"project {project.id} ({project.root})")
    print(f"memories ({len(project.resources)}):")
    for memory_id in sorted(project.resources):
        entry = project.resources[memory_id]
        print(f"  {memory_id}  [{entry.file}:{entry.line}]")
        for name, value in entry.resource.summary().items():
            print(f"      {name}: {value}")
    print(f"agents ({len(project.agents)}):")
    for agent_id in sorted(project.agents):
        agent = project.agents[agent_id]
        level = f"level {agent.level}" if agent.level else "stateless"
        print(f"  {agent_id}  ({level}) [{agent.file}:{agent.line}]")
        for ref in agent.memories:
            key = ref.key or f"{project.resources[ref.id].resource.default_key_template} (default)"
            print(f"      {ref.id}: {ref.mode}, key {key}")
    print(f"OK: {len(project.resources)} memories, {len(project.agents)} agents")


def mcp(
    ctx: typer.Context,
    project: Annotated[
        str,
        typer.Option(
            "--project",
            "-p",
            envvar="COMPOZY_PROJECT",
            help="serve any memory of this project, by stored key (or give --config)",
        ),
    ] = "",
    config: Annotated[
        str,
        typer.Option(
            help="serve only the memories of --agent (or --memory) rendered with --set: "
            "the project folder or its compozy.yaml"
        ),
    ] = "",
    agent: Annotated[str, typer.Option(help="with --config: the agent whose memories")] = "",
    memory: Annotated[
        Optional[list[str]],  # noqa: UP045 - typer 0.12 reads no `X | None`
        typer.Option(help="with --config, no --agent: a memory resource id (repeat)"),
    ] = None,
    set_: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option("--set", "-s", help="a key template variable, dotted: user.id=ann (repeat)"),
    ] = None,
    session: Annotated[
        str, typer.Option(help="with --config: the template variable `session`")
    ] = "",
    read_only: Annotated[
        bool, typer.Option("--read-only", help="offer no tool that writes")
    ] = False,
    transport: Annotated[
        str, typer.Option(help="stdio (a client starts this process) or http (streamable HTTP)")
    ] = "stdio",
    host: Annotated[str, typer.Option(help="the address, for http")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="the port, for http (at /mcp)")] = (
        8000
    ),
) -> None:
    """Serve memories to MCP clients: list, remember, search, recall, context, facts, forget.

    With --config and --agent (or --memory) and --set, only the memories those key template
    variables render to (a server per user or session); with --project, any memory of the
    project. Read-only with --read-only, or as a read-only ACL user (`acl --read-only`,
    credentials in --url). Needs the `mcp` extra."""
    if transport not in ("stdio", "http"):
        raise fail(f"--transport is stdio or http, got {transport!r}", EXIT_USAGE)
    scope = _mcp_scope(project, config, agent, memory or [], set_ or [], session, read_only)
    try:
        from compozy_memory._ops import mcp_server
    except ModuleNotFoundError as exc:
        raise fail(
            f"the MCP server needs the official MCP SDK: pip install 'compozy-memory[mcp]' ({exc})",
            EXIT_USAGE,
        ) from exc
    kind: Literal["stdio", "http"] = "stdio" if transport == "stdio" else "http"
    try:
        asyncio.run(mcp_server.run(settings(ctx), scope, kind, host, port))
    except KeyboardInterrupt:
        if kind == "stdio":
            raise
        # Ctrl-C is how an HTTP server is meant to stop: exit 0.


def _mcp_scope(
    project: str,
    config: str,
    agent: str,
    memories: list[str],
    pairs: list[str],
    session: str,
    read_only: bool,
) -> Any:
    """The server's scope from the options, every combination that cannot work refused."""
    from compozy_memory._ops.mcp_server import Scope
    from compozy_memory._ops.render_key import parse_context

    if not config:
        if agent or memories or pairs or session:
            raise fail("--agent, --memory, --set and --session go with --config", EXIT_USAGE)
        if not project:
            raise fail(
                "name what to serve: --project P (any memory of P), or --config PATH with "
                "--agent A (or --memory ID) and --set name=value (one user's or session's)",
                EXIT_USAGE,
            )
        return Scope(project=project, read_only=read_only)
    if bool(agent) == bool(memories):
        raise fail("with --config give --agent A or --memory ID (not both)", EXIT_USAGE)
    context = parse_context(pairs, None)
    if session:
        context["session"] = session
    # The project is loaded (and checked against --project) as the server starts: loading it
    # here would hold back its answer to `initialize`.
    return Scope(
        project=project or None,
        config=config,
        agent=agent or None,
        memories=tuple(dict.fromkeys(memories)),
        context=context,
        read_only=read_only,
    )
