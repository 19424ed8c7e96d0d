"""``compozy-memory``: command-line tools.

``compozy-memory validate PATH`` loads a project (its folder or compozy.yaml) and prints the
resolved memory resources and agents, or every problem with file, line and key path. It exits
0 when the project is valid, 1 when it has problems, 2 on a usage error.

``compozy-memory acl --project ID --user NAME [--read-only]`` prints the ``ACL SETUSER`` line
for a user confined to one project's memories (see :mod:`compozy_memory._ops.acl`). A value
that would not be one plain token in that line is refused with exit code 2.

``compozy-memory install --url URL [--cluster]`` loads the scripts as a Redis Functions library
on the server (every primary of a Cluster), as an operator does once per server and again
after adding a Cluster node. It exits 1 when the server cannot be reached or refuses.

``compozy-memory serve-metrics --port N [--addr ADDR] [--multiprocess-dir DIR]`` serves
``/metrics`` until SIGTERM or Ctrl-C. Metrics live in the processes that use the memories, so
on its own this process has only its own: the process collectors, and compozy-memory's metric
families with no samples yet (a check that the exporter and the scrape config work). To see
an application's, call :func:`compozy_memory.start_metrics_server` in it, or run the
application with prometheus-client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``) and
point ``--multiprocess-dir`` (default ``$PROMETHEUS_MULTIPROC_DIR``) at that directory: this
process then serves the sum over the application's processes. It exits 1 when the address
cannot be bound.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import TextIO

from compozy_memory._config.loader import Project, load_project
from compozy_memory._ops.acl import acl_setuser
from compozy_memory._wire.connection import connect
from compozy_memory._wire.delivery import install
from compozy_memory._wire.scripts import library
from compozy_memory.errors import CompozyMemoryError, ConfigFileError

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compozy-memory", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    validate = commands.add_parser("validate", help="check a project's memory configuration")
    validate.add_argument("path", help="a project folder or its compozy.yaml")
    acl = commands.add_parser("acl", help="print the ACL SETUSER line for a project's user")
    acl.add_argument("--project", required=True, help="the project id")
    acl.add_argument("--user", required=True, help="the ACL user name")
    acl.add_argument("--read-only", action="store_true", help="reads only, on this project")
    acl.add_argument("--cluster", action="store_true", help="for a Redis Cluster")
    acl.add_argument(
        "--password",
        default="<password>",
        help="put in the line as >password (default: a placeholder to fill in)",
    )
    install = commands.add_parser("install", help="load the server-side functions library")
    install.add_argument(
        "--url",
        default=os.environ.get("COMPOZY_REDIS_URL", "redis://localhost:6379/0"),
        help="the server (any node of a Cluster); default $COMPOZY_REDIS_URL",
    )
    install.add_argument("--cluster", action="store_true", help="a Redis Cluster")
    serve = commands.add_parser("serve-metrics", help="serve /metrics for Prometheus")
    serve.add_argument("--port", type=int, required=True, help="the port (0: any free one)")
    serve.add_argument("--addr", default="127.0.0.1", help="the address (default 127.0.0.1)")
    serve.add_argument(
        "--multiprocess-dir",
        default=os.environ.get("PROMETHEUS_MULTIPROC_DIR"),
        help="serve the metrics an application's processes write there (prometheus-client "
        "multiprocess mode); default $PROMETHEUS_MULTIPROC_DIR",
    )
    options = parser.parse_args(argv)
    try:
        if options.command == "validate":
            return _validate(options.path, sys.stdout, sys.stderr)
        if options.command == "acl":
            return _acl(options, sys.stdout, sys.stderr)
        if options.command == "install":
            return asyncio.run(_install(options.url, options.cluster, sys.stdout, sys.stderr))
        if options.command == "serve-metrics":
            return _serve_metrics(options, sys.stdout, sys.stderr)
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, without a traceback at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 2  # pragma: no cover - argparse refuses other commands


async def _install(url: str, cluster: bool, out: TextIO, err: TextIO) -> int:
    client = connect(url, cluster=cluster)
    try:
        loaded = await install(client)
    except CompozyMemoryError as exc:
        print(f"error: {exc}", file=err)
        return 1
    finally:
        await client.aclose()
    name = library().name
    if loaded:
        print(f"loaded {name} on {', '.join(loaded)}", file=out)
    else:
        print(f"{name} was already installed", file=out)
    return 0


def _serve_metrics(options: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from prometheus_client import REGISTRY, CollectorRegistry

    from compozy_memory._metrics import default_metrics
    from compozy_memory._ops.exporter import start_metrics_server

    directory: str | None = options.multiprocess_dir
    if directory:
        from prometheus_client.multiprocess import MultiProcessCollector

        if not os.path.isdir(directory):
            print(f"error: --multiprocess-dir {directory!r} is not a directory", file=err)
            return 1
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
        what = f"the metrics written to {directory}"
    else:
        default_metrics()  # the families, so a scrape shows what there will be
        registry = REGISTRY
        what = "this process's registry (no memory is used here: see --help)"
    try:
        server = start_metrics_server(options.port, options.addr, registry)
    except OSError as exc:
        print(f"error: cannot serve on {options.addr}:{options.port}: {exc}", file=err)
        return 1
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    print(f"serving {what} on {server.url}", file=out, flush=True)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        server.stop()
    return 0


def _validate(path: str, out: TextIO, err: TextIO) -> int:
    try:
        project = load_project(path)
    except ConfigFileError as exc:
        for problem in exc.problems:
            print(problem, file=err)
        count = len(exc.problems)
        print(f"{count} problem{'s' if count > 1 else ''}: {path} is not valid", file=err)
        return 1
    for warning in project.warnings:
        print(f"warning: {warning}", file=err)
    _print_project(project, out)
    return 0


def _acl(options: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        line = acl_setuser(
            options.user,
            options.project,
            read_only=options.read_only,
            password=options.password,
            cluster=options.cluster,
        )
    except CompozyMemoryError as exc:  # one line: values are shown with repr()
        print(f"error: {exc}", file=err)
        return 2
    print(" ".join(line), file=out)
    return 0


def _print_project(project: Project, out: TextIO) -> None:
    print(f"project {project.id} ({project.root})", file=out)
    print(f"memories ({len(project.resources)}):", file=out)
    for memory_id in sorted(project.resources):
        entry = project.resources[memory_id]
        print(f"  {memory_id}  [{entry.file}:{entry.line}]", file=out)
        for name, value in entry.resource.summary().items():
            print(f"      {name}: {value}", file=out)
    print(f"agents ({len(project.agents)}):", file=out)
    for agent_id in sorted(project.agents):
        agent = project.agents[agent_id]
        level = f"level {agent.level}" if agent.level else "stateless"
        print(f"  {agent_id}  ({level}) [{agent.file}:{agent.line}]", file=out)
        for ref in agent.memories:
            key = ref.key or f"{project.resources[ref.id].resource.default_key_template} (default)"
            print(f"      {ref.id}: {ref.mode}, key {key}", file=out)
    print(f"OK: {len(project.resources)} memories, {len(project.agents)} agents", file=out)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
