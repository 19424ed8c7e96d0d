"""The read-only commands: ``ls``, ``show``, ``tail`` and ``export``."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.markup import escape
from rich.progress import Progress

from compozy_memory._model.keys import validate_project
from compozy_memory._ops.common import (
    EXIT_FAILED,
    EXIT_PERMISSION,
    EXIT_USAGE,
    fail,
    format_ms,
    format_ttl,
    memory_keys,
    open_client,
    open_memory,
    require_memory,
    settings,
)
from compozy_memory._ops.output import (
    Out,
    key_column,
    number_column,
    safe_json_lines,
    text_column,
    visible,
)
from compozy_memory.errors import BackendPermissionError

if TYPE_CHECKING:
    from compozy_memory._model.messages import Message
    from compozy_memory._ops import listing
    from compozy_memory._store.instance import MemoryInstance

__all__ = ["export", "ls", "show", "tail"]

Json = Annotated[bool, typer.Option("--json", help="machine-readable output (stable keys)")]
ProjectOption = Annotated[
    str, typer.Option("--project", "-p", envvar="COMPOZY_PROJECT", help="the project id")
]
KeyArgument = Annotated[str, typer.Argument(help="the memory's stored key, as `ls` shows it")]
TextOption = Annotated[
    bool, typer.Option("--text", help="KEY is the memory's text, to encode (not a stored key)")
]


class Format(enum.StrEnum):
    """What ``export`` writes."""

    markdown = "markdown"
    jsonl = "jsonl"


def ls(
    ctx: typer.Context,
    project: ProjectOption,
    agent: Annotated[str, typer.Option(help="only this agent's memories")] = "",
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="at most this many")] = 50,
    all_: Annotated[bool, typer.Option("--all", help="every memory (no limit)")] = False,
    scan: Annotated[
        bool, typer.Option("--scan", help="SCAN every primary for memories the index lacks")
    ] = False,
    json_mode: Json = False,
) -> None:
    """A project's memories, most recently active first: messages, tokens, TTL, last activity.

    Reads the session index (memories written through MemoryManager): one range read a page,
    whatever the number of memories. --scan finds every memory instead, by SCAN."""
    validate_project(project)
    if scan and agent:
        raise fail("--scan cannot filter by --agent (only the index records agents)", EXIT_USAGE)
    out = Out(json_mode)
    rows = asyncio.run(_ls(ctx, project, agent or None, None if all_ else limit, scan, out))
    if json_mode:
        source = "scan" if scan else "index"
        payload = [r.as_json() for r in rows]
        out.data({"project": project, "source": source, "count": len(rows), "memories": payload})
        return
    table = [
        (
            r.key,
            r.agent or "-",
            str(r.messages),
            str(r.tokens),
            format_ttl(r.ttl_ms, r.exists),
            format_ms(r.last_active_ms),
        )
        for r in rows
    ]
    columns = (
        key_column("KEY"),
        text_column("AGENT"),
        number_column("MESSAGES"),
        number_column("TOKENS"),
        number_column("TTL"),
        text_column("LAST ACTIVE (UTC)"),
    )
    out.table(columns, table, title=f"project {project}")
    if not rows:
        out.note(f"no memories in the session index of {project!r} (try --scan)")


async def _ls(
    ctx: typer.Context, project: str, agent: str | None, limit: int | None, scan: bool, out: Out
) -> list[listing.MemoryRow]:
    try:
        return await _listed(ctx, project, agent, limit, scan, out)
    except BackendPermissionError as exc:
        if scan and "'scan'" in str(exc):
            raise fail(
                f"{exc}: a project's ACL line leaves SCAN out unless made with "
                "`acl --allow-scan` (SCAN shows every project's key names); `ls` without "
                "--scan reads the session index instead",
                EXIT_PERMISSION,
            ) from exc
        raise


async def _listed(
    ctx: typer.Context, project: str, agent: str | None, limit: int | None, scan: bool, out: Out
) -> list[listing.MemoryRow]:
    from compozy_memory._ops import listing

    async with open_client(settings(ctx)) as client:
        # A progress bar only on a terminal, and only for long work: --all or --scan.
        if not out.stderr.is_terminal or (limit is not None and not scan):
            if scan:  # every memory is read to sort them: the limit only cuts the output
                return (await listing.from_scan(client, project))[:limit]
            return await listing.from_index(client, project, agent=agent, limit=limit)
        with Progress(console=out.stderr, transient=True) as bar:
            task = bar.add_task("listing", total=None)

            def advance(n: int) -> None:
                bar.advance(task, n)

            if scan:
                return (await listing.from_scan(client, project, progress=advance))[:limit]
            return await listing.from_index(client, project, agent=agent, progress=advance)


def show(
    ctx: typer.Context,
    project: ProjectOption,
    key: KeyArgument,
    last: Annotated[int, typer.Option("--last", "-n", min=0, help="messages to show")] = 10,
    text: TextOption = False,
    json_mode: Json = False,
) -> None:
    """A memory's health (totals, archive, summaries, flushes, TTL) and its last messages."""
    out = Out(json_mode)
    keys = memory_keys(project, key, text=text)
    health, messages = asyncio.run(_show(ctx, keys, last))
    if json_mode:
        out.data(
            {
                "project": keys.project,
                "key": keys.key,
                "health": dataclasses.asdict(health),
                "messages": [message_json(m) for m in messages],
            }
        )
        return
    rows = [
        ("messages", str(health.message_count)),
        (
            "tokens",
            f"{health.token_count}" + (f" / {health.max_tokens}" if health.max_tokens else ""),
        ),
        ("last id", str(health.last_id)),
        ("summaries", f"{health.summaries} ({health.summary_tokens} tokens)"),
        ("archived", f"{health.archived} ({health.archive_length} kept, {health.indexed} indexed)"),
        ("trimmed", str(health.trimmed)),
        ("flushes", f"{health.flush_count}, last {format_ms(health.last_flush_ms)}"),
        ("ttl", format_ttl(health.ttl_ms)),
        ("unindexed", str(health.unindexed)),
        ("eviction", health.eviction_policy or "- (needs INFO)"),
        ("limits", _limits(health.server_limits)),
    ]
    rows += [
        ("warning", text)
        for text in (health.eviction_warning, health.limits_warning, health.index_warning)
        if text
    ]
    out.table(("FIELD", "VALUE"), rows, title=f"{keys.project} {keys.key}")
    for message in messages:
        print_message(out, message)


def _limits(limits: Mapping[str, str]) -> str:
    """The server settings that bound a tenant, as the CLI shows them."""
    if not limits:
        return "- (needs CONFIG GET)"
    return ", ".join(f"{name} {_size(value)}" for name, value in limits.items())


def _size(value: str) -> str:
    if value.isdigit() and int(value) >= 1024 * 1024:
        return f"{int(value) / (1024 * 1024):g} MB"
    return value


async def _show(ctx: typer.Context, keys: Any, last: int) -> tuple[Any, list[Message]]:
    async with open_client(settings(ctx)) as client:
        await require_memory(client, keys)
        memory = open_memory(client, keys, read_only=True)
        health = await memory.health()
        messages = await memory.read(-last, -1) if last else []
        return health, messages


def message_json(message: Message) -> dict[str, Any]:
    data: dict[str, Any] = message.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["text"] = message.text
    return data


_ROLE_STYLE = {"user": "green", "assistant": "cyan", "system": "magenta", "tool": "yellow"}


def print_message(out: Out, message: Message, width: int = 200) -> None:
    if out.json:
        out.data(message_json(message))
        return
    text = " ".join(message.text.split())
    if len(text) > width:
        text = text[: width - 1] + "…"
    head = f"#{message.id} {format_ms(message.ts)} {message.role} [{message.tokens} tok]"
    out.line(f"{head} {text}", _ROLE_STYLE.get(message.role))  # made visible by line()


def tail(
    ctx: typer.Context,
    project: ProjectOption,
    key: KeyArgument,
    last: Annotated[int, typer.Option("--last", "-n", min=0, help="messages shown first")] = 10,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="then print new messages as they land")
    ] = False,
    count: Annotated[
        int, typer.Option(min=0, help="with -f: stop after this many new messages (0: never)")
    ] = 0,
    timeout: Annotated[
        float, typer.Option(min=0, help="with -f: stop after this many seconds (0: never)")
    ] = 0,
    interval: Annotated[float, typer.Option(min=0.01, help="seconds between polls")] = 0.2,
    text: TextOption = False,
    json_mode: Annotated[bool, typer.Option("--json", help="one JSON object a line")] = False,
) -> None:
    """The last messages of a memory; with -f, new ones as they land, until Ctrl-C (or
    --count / --timeout)."""
    out = Out(json_mode)
    keys = memory_keys(project, key, text=text)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends a follow: exit 0
        stops = (count or None, timeout or None)
        asyncio.run(_tail(ctx, keys, out, last, follow, *stops, interval))


async def _tail(
    ctx: typer.Context,
    keys: Any,
    out: Out,
    last: int,
    follow: bool,
    count: int | None,
    seconds: float | None,
    interval: float,
) -> None:
    async with open_client(settings(ctx)) as client:
        await require_memory(client, keys)
        memory = open_memory(client, keys, read_only=True)
        seen = await _last_id(memory)
        for message in await memory.read(-last, -1) if last else []:
            print_message(out, message)
        sys.stdout.flush()
        if not follow:
            return
        deadline = None if seconds is None else time.monotonic() + seconds
        stop = _stop_on_signals()
        printed = 0
        while not stop.is_set() and (count is None or printed < count):
            if deadline is not None and time.monotonic() >= deadline:
                break
            newest = await _last_id(memory)
            if newest > seen:
                fresh = await memory.read(-min(newest - seen, 1000), -1)
                for message in fresh:
                    if message.id is not None and message.id > seen:
                        if count is not None and printed >= count:
                            break
                        print_message(out, message)
                        printed += 1
                sys.stdout.flush()
                seen = newest
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)


def _stop_on_signals() -> asyncio.Event:
    """An event Ctrl-C (SIGINT) or SIGTERM sets, so a follow ends between two polls and
    closes its connection (only in the main thread: elsewhere the event is never set)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop.set)
    return stop


async def _last_id(memory: MemoryInstance) -> int:
    from compozy_memory._io.translate import backend_errors

    with backend_errors("tail", memory.key):
        value = await memory.client.hget(memory.keys.meta, "last_id")
    return int(value or 0)


def export(
    ctx: typer.Context,
    project: ProjectOption,
    key: KeyArgument,
    format: Annotated[Format, typer.Option("--format", help="markdown or jsonl")] = (
        Format.markdown
    ),
    output: Annotated[
        str, typer.Option("--output", "-o", help="write here instead of stdout")
    ] = "",
    include_archived: Annotated[
        bool, typer.Option(help="markdown: also the archived originals (jsonl always has them)")
    ] = False,
    text: TextOption = False,
    json_mode: Annotated[bool, typer.Option("--json", help="the same as --format jsonl")] = False,
) -> None:
    """The whole transcript: Markdown to read, or JSON Lines (every envelope, archive and
    summaries included) that import_transcript reads back."""
    out = Out()
    keys = memory_keys(project, key, text=text)
    kind: Literal["markdown", "jsonl"] = "jsonl" if json_mode else format.value
    target = Path(output) if output else None
    if target is not None and not target.parent.is_dir():
        raise fail(f"--output {output}: no directory {str(target.parent)!r}", EXIT_USAGE)
    transcript = asyncio.run(_export(ctx, keys, kind, include_archived, out))
    # Markdown is for reading: control characters shown, not run. JSON Lines keep every
    # value (the escapes are the same strings to a parser).
    transcript = (
        visible(transcript, lines=True) if kind == "markdown" else safe_json_lines(transcript)
    )
    if target is None:
        sys.stdout.write(transcript)
        return
    lines = transcript.splitlines(keepends=True)
    try:
        _write(target, transcript, lines, out)
    except OSError as exc:
        raise fail(f"cannot write {output}: {exc.strerror or exc}", EXIT_FAILED) from exc
    out.note(f"wrote {len(lines)} lines to {output}")


def _write(target: Path, transcript: str, lines: list[str], out: Out) -> None:
    with target.open("w", encoding="utf-8") as file:
        if not out.stderr.is_terminal or len(lines) < 10_000:
            file.write(transcript)
            return
        with Progress(console=out.stderr, transient=True) as bar:
            task = bar.add_task(escape(f"writing {target}"), total=len(lines))
            for start in range(0, len(lines), 5000):
                file.writelines(lines[start : start + 5000])
                bar.advance(task, len(lines[start : start + 5000]))


async def _export(
    ctx: typer.Context, keys: Any, format: Literal["markdown", "jsonl"], archived: bool, out: Out
) -> str:
    async with open_client(settings(ctx)) as client:
        await require_memory(client, keys)
        memory = open_memory(client, keys, read_only=True)
        if not out.stderr.is_terminal:
            return await memory.export_transcript(format, include_archived=archived)
        with out.stderr.status(f"reading {keys.key}"):
            return await memory.export_transcript(format, include_archived=archived)
