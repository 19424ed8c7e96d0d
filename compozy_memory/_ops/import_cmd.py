"""``import``: a history from another library's store into a memory (see
:mod:`compozy_memory._ops.importer`)."""

from __future__ import annotations

import asyncio
import enum
import os
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.progress import Progress

from compozy_memory._ops.common import (
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    Settings,
    fail,
    memory_keys,
    open_client,
    settings,
)
from compozy_memory._ops.inspect_cmds import Json, TextOption
from compozy_memory._ops.output import Out

if TYPE_CHECKING:
    from compozy_memory._ops.importer import Format, ImportReport

__all__ = ["SourceFormat", "import_history"]


class SourceFormat(enum.StrEnum):
    """The layouts ``import`` reads (see :mod:`compozy_memory._ops.importer`)."""

    openai_agents_redis = "openai-agents-redis"
    openai_agents_sqlite = "openai-agents-sqlite"
    langchain_redis = "langchain-redis"
    llama_index_redis = "llama-index-redis"
    jsonl = "jsonl"


def import_history(
    ctx: typer.Context,
    source_format: Annotated[
        SourceFormat, typer.Argument(metavar="FORMAT", help="where the history is kept")
    ],
    session: Annotated[
        str,
        typer.Option(help="the session id in the source (LlamaIndex: the chat key; jsonl: none)"),
    ] = "",
    key: Annotated[
        str,
        typer.Argument(metavar="KEY", help="the memory's stored key (with -p), as `ls` shows it"),
    ] = "",
    project: Annotated[
        str,
        typer.Option(
            "--project", "-p", envvar="COMPOZY_PROJECT", help="the project of KEY (or --config)"
        ),
    ] = "",
    config: Annotated[
        str,
        typer.Option(
            help="write through the project's MemoryManager (session index, policy): its "
            "folder or compozy.yaml, with --memory and --set"
        ),
    ] = "",
    memory: Annotated[str, typer.Option(help="with --config: the memory resource id")] = "",
    set_: Annotated[
        Optional[list[str]],  # noqa: UP045 - typer 0.12 reads no `X | None`
        typer.Option("--set", "-s", help="with --config: a key template variable (repeat)"),
    ] = None,
    source_url: Annotated[
        str, typer.Option(help="the Redis the source is in (default: --url)")
    ] = "",
    source_cluster: Annotated[
        bool, typer.Option("--source-cluster", help="the source Redis is a Cluster")
    ] = False,
    prefix: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            help="the source's key prefix (default: agents:session, message_store:, none)"
        ),
    ] = None,
    file: Annotated[
        str, typer.Option(help="openai-agents-sqlite: the SQLite file; jsonl: the JSON Lines file")
    ] = "",
    messages_table: Annotated[
        str, typer.Option(help="openai-agents-sqlite: the messages table")
    ] = "agent_messages",
    page: Annotated[
        int, typer.Option(min=1, max=1000, help="items read and appended a step")
    ] = 200,
    text: TextOption = False,
    json_mode: Json = False,
) -> None:
    """Import a conversation history from the OpenAI Agents SDK's RedisSession or
    SQLiteSession, LangChain's RedisChatMessageHistory or LlamaIndex's RedisChatStore into a
    memory: at most once (a re-run imports only what is new), a page a step; the source is
    only read."""
    from compozy_memory._ops.importer import FILE_FORMATS

    if bool(config) == bool(key):
        raise fail(
            "name the memory: -p PROJECT KEY, or --config PATH --memory ID --set ...", EXIT_USAGE
        )
    if config and not memory:
        raise fail("with --config give --memory ID (the memory resource to write)", EXIT_USAGE)
    if not config and (memory or set_):
        raise fail("--memory and --set go with --config", EXIT_USAGE)
    reads_file = source_format in FILE_FORMATS
    if reads_file and not file:
        raise fail(f"{source_format} reads a file: give --file PATH", EXIT_USAGE)
    if file and not reads_file:
        raise fail(f"--file is for {' and '.join(FILE_FORMATS)}, not {source_format}", EXIT_USAGE)
    if file and not os.path.isfile(file):
        raise fail(f"--file {file}: no such file", EXIT_NOT_FOUND)
    if source_format == "jsonl" and session:
        raise fail("a jsonl file holds one history: it takes no --session", EXIT_USAGE)
    if source_format != "jsonl" and not session:
        raise fail(f"{source_format} holds many sessions: give --session ID", EXIT_USAGE)
    target: Any
    if config:
        from compozy_memory._ops.render_key import parse_context

        target = (config, memory, parse_context(set_ or [], None))
    else:
        if not project:
            raise fail("KEY needs its project: -p PROJECT (or $COMPOZY_PROJECT)", EXIT_USAGE)
        target = memory_keys(project, key, text=text)
    out = Out(json_mode)
    options = settings(ctx)
    source_options = Settings(
        source_url or options.url, source_cluster or (not source_url and options.cluster)
    )
    fmt: Format = source_format.value
    report, where = asyncio.run(
        _import(
            options, source_options, fmt, session, prefix, file, messages_table, target, page, out
        )
    )
    if json_mode:
        out.data({"memory": where, **report.as_json()})
    elif report.imported:
        steps = f"{report.steps} step{'s' if report.steps > 1 else ''}"
        out.line(f"imported {report.imported} messages into {where} in {steps}", "green")
    else:
        out.line(f"nothing new to import into {where}: every item of the source is there")


async def _import(
    options: Settings,
    source_options: Settings,
    fmt: Format,
    session: str,
    prefix: str | None,
    file: str,
    messages_table: str,
    target: Any,
    page: int,
    out: Out,
) -> tuple[ImportReport, str]:
    from compozy_memory._ops.importer import import_history as run_import
    from compozy_memory._ops.importer import source_for

    async with open_client(options) as client:
        source_client = None
        try:
            if not file:
                source_client = (
                    client if source_options == options else await _source_client(source_options)
                )
            try:
                source = source_for(
                    fmt, session, client=source_client, prefix=prefix, file=file or None,
                    messages_table=messages_table,
                )  # fmt: skip
            except ModuleNotFoundError as exc:  # the framework that reads the items
                extra = {"langchain-redis": "langchain", "llama-index-redis": "llama-index"}
                raise fail(
                    f"{fmt} items are read with their framework's package: pip install "
                    f"'compozy-memory[{extra.get(fmt, 'openai-agents')}]' ({exc})",
                    EXIT_USAGE,
                ) from exc
            except ValueError as exc:
                raise fail(str(exc), EXIT_USAGE) from exc
            memory, manager = await _target(client, target)
            try:
                where = memory.keys.key
                try:
                    if not out.stderr.is_terminal or out.json:
                        return await run_import(memory, source, page=page), where
                    with Progress(console=out.stderr, transient=True) as bar:
                        task = bar.add_task("importing", total=None)
                        report = await run_import(
                            memory, source, page=page, progress=lambda n: bar.advance(task, n)
                        )
                        return report, where
                except ValueError as exc:
                    raise fail(f"import stopped: {exc}") from exc
            finally:
                if manager is not None:
                    await manager.aclose()
        finally:
            if source_client is not None and source_client is not client:
                await source_client.aclose()


async def _source_client(options: Settings) -> Any:
    from compozy_memory._io.connection import connect

    return connect(options.url, cluster=options.cluster)


async def _target(client: Any, target: Any) -> tuple[Any, Any]:
    """The memory to write (and the manager that opened it, to close)."""
    if isinstance(target, tuple):
        from compozy_memory._config.registry import MemoryRegistry
        from compozy_memory._manager import MemoryManager

        config, memory_id, context = target
        registry = await asyncio.to_thread(MemoryRegistry.load, config)
        # No flush while importing: the first write after it flushes as the resource says.
        manager = MemoryManager(registry, client, flushing=False)
        return await manager.get(memory_id, context), manager
    from compozy_memory._store.instance import MemoryInstance

    return MemoryInstance(client, target), None
