"""The commands that change a memory: ``flush``, ``clear`` and ``purge``."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from compozy_memory._ops.common import (
    EXIT_ABORTED,
    EXIT_FAILED,
    EXIT_USAGE,
    fail,
    memory_keys,
    open_client,
    open_memory,
    require_memory,
    settings,
)
from compozy_memory._ops.inspect_cmds import Json, KeyArgument, ProjectOption, TextOption
from compozy_memory._ops.output import Out

if TYPE_CHECKING:
    from compozy_memory._model.keys import InstanceKeys
    from compozy_memory._model.results import FlushResult

__all__ = ["clear", "flush", "prune", "purge"]


YesOption = Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")]


def flush(
    ctx: typer.Context,
    project: ProjectOption,
    key: KeyArgument,
    config: Annotated[
        str,
        typer.Option(help="the project folder (or compozy.yaml) declaring the memory's resource"),
    ] = "",
    memory: Annotated[
        str, typer.Option(help="with --config: the resource id (default: KEY up to ':')")
    ] = "",
    max_tokens: Annotated[
        int, typer.Option(min=0, help="without --config: the budget to flush towards")
    ] = 0,
    text: TextOption = False,
    json_mode: Json = False,
) -> None:
    """Flush one memory now, as its resource says (--config) or towards --max-tokens with the
    rule-based summary; prints the FlushResult. Exit 1 when another replica holds the lock."""
    out = Out(json_mode)
    keys = memory_keys(project, key, text=text)
    if bool(config) == bool(max_tokens):
        raise fail("give either --config (the memory's resource) or --max-tokens", EXIT_USAGE)
    result = asyncio.run(_flush(ctx, keys, config or None, memory or None, max_tokens or None))
    plan = result.plan
    report: dict[str, Any] = {
        "outcome": result.outcome,
        "committed": result.committed,
        "summarized_count": result.summarized_count,
        "evicted_count": len(plan.evict_ids) if plan and result.committed else 0,
        "tokens_saved": result.tokens_saved,
        "removed_tokens": result.removed_tokens,
        "context_tokens": result.context_tokens,
        "summary_id": result.summary_id,
        "epoch": result.epoch,
        "rounds": result.rounds,
        "tier": plan.tier if plan else None,
        "blocked": plan.blocked if plan else None,
    }
    if json_mode:
        out.data({"project": keys.project, "key": keys.key, **report})
    else:
        rows = [(name, "-" if value is None else str(value)) for name, value in report.items()]
        out.table(("FIELD", "VALUE"), rows, title=f"flush of {keys.key}")
    if result.outcome == "skipped":
        raise typer.Exit(EXIT_FAILED)


async def _flush(
    ctx: typer.Context,
    keys: InstanceKeys,
    config: str | None,
    memory_id: str | None,
    max_tokens: int | None,
) -> FlushResult:
    from compozy_memory._config.registry import MemoryRegistry
    from compozy_memory._flush.flusher import Flusher
    from compozy_memory._flush.settings import FlushSettings, summary_budget
    from compozy_memory._flush.summarizers import RuleBasedSummarizer
    from compozy_memory._manager import build_summarizer, flush_settings
    from compozy_memory._model.policy import ContextPolicy
    from compozy_memory._model.tokens import default_counter

    if config is not None:
        registry = MemoryRegistry.load(config)
        if registry.project != keys.project:
            raise fail(
                f"{config} is project {registry.project!r}, not {keys.project!r}", EXIT_USAGE
            )
        resource = registry.get(memory_id or keys.key.partition(":")[0])
        counter = default_counter()
        settings_ = flush_settings(resource)
        summarizer = build_summarizer(resource.summarizer, counter)
        lock_ttl, policy = resource.locking.flush_ttl, resource.policy()
    else:
        assert max_tokens is not None
        counter = default_counter()
        settings_ = FlushSettings(
            max_tokens=max_tokens,
            summary_tokens=summary_budget(max_tokens, ContextPolicy().summary_share),
        )
        summarizer, lock_ttl, policy = RuleBasedSummarizer(counter), None, None
    async with open_client(settings(ctx)) as client:
        await require_memory(client, keys)
        handle = open_memory(client, keys, read_only=False, policy=policy)
        options: dict[str, Any] = {} if lock_ttl is None else {"lock_ttl": lock_ttl}
        flusher = Flusher(
            handle.gateway, settings_, summarizer, counter, background=False, **options
        )
        handle.attach_flusher(flusher)
        try:
            return await handle.flush()
        finally:
            close = getattr(summarizer, "aclose", None)
            if close is not None:
                await close()


def confirm(question: str, yes: bool) -> None:
    """Ask on stderr and read the answer from stdin: only y or yes goes on (no answer is
    no, exit 6). Ctrl-C aborts: exit 130, nothing changed. Called
    outside the event loop: asyncio.run() would hold Ctrl-C back until the answer came."""
    if yes:
        return
    try:
        sys.stderr.write(f"{question} [y/N]: ")
        sys.stderr.flush()
        answer = sys.stdin.readline() if sys.stdin is not None else ""
    except KeyboardInterrupt:
        sys.stderr.write("\naborted\n")  # typer turns the interrupt into exit 130
        raise
    if answer.strip().lower() not in ("y", "yes"):
        raise fail("not confirmed: nothing was changed", EXIT_ABORTED)


def clear(
    ctx: typer.Context,
    project: ProjectOption,
    key: KeyArgument,
    yes: YesOption = False,
    text: TextOption = False,
    json_mode: Json = False,
) -> None:
    """Remove a memory's messages, summaries, archive, index and facts (ids stay monotonic;
    meta stays, and so does the memory's TTL). Asks first unless --yes."""
    out = Out(json_mode)
    keys = memory_keys(project, key, text=text)
    asyncio.run(_exists(ctx, keys))
    confirm(f"Clear every message of {keys.key} in {keys.project}?", yes)
    removed = asyncio.run(_clear(ctx, keys))
    if json_mode:
        out.data({"project": keys.project, "key": keys.key, "cleared_messages": removed})
    else:
        out.line(f"cleared {keys.key}: {removed} live messages removed", "green")


async def _exists(ctx: typer.Context, keys: InstanceKeys) -> None:
    async with open_client(settings(ctx)) as client:
        await require_memory(client, keys)


async def _clear(ctx: typer.Context, keys: InstanceKeys) -> int:
    from compozy_memory._model.policy import MemoryPolicy

    async with open_client(settings(ctx)) as client:
        await require_memory(client, keys)
        # A handle without a TTL: clear.lua then gives the meta it rewrites the deadline meta
        # had, exactly (and none to a memory that had none).
        return await open_memory(client, keys, read_only=False, policy=MemoryPolicy()).clear()


def purge(
    ctx: typer.Context,
    project: ProjectOption,
    key: KeyArgument,
    yes: YesOption = False,
    text: TextOption = False,
    json_mode: Json = False,
) -> None:
    """Delete every key of a memory, meta and lock included, and its session-index entry,
    through the installed functions (one UNLINK: the server frees big keys in the background).
    Asks first unless --yes."""
    out = Out(json_mode)
    keys = memory_keys(project, key, text=text)
    asyncio.run(_exists(ctx, keys))
    confirm(f"Delete every key of {keys.key} in {keys.project}, meta included?", yes)
    deleted, items = asyncio.run(_purge(ctx, keys))
    if json_mode:
        out.data(
            {"project": keys.project, "key": keys.key, "deleted_keys": deleted, "items": items}
        )
    else:
        out.line(f"purged {keys.key}: {deleted} keys, {items} items", "green")


async def _purge(ctx: typer.Context, keys: InstanceKeys) -> tuple[int, int]:
    from compozy_memory._sessions.index import SessionIndex

    async with open_client(settings(ctx)) as client:
        await require_memory(client, keys)
        # A handle without a policy: purge.lua declares every key of the memory and UNLINKs
        # them in one call, whatever their size.
        handle = open_memory(client, keys, read_only=False)
        deleted, items = await handle.transport.drive(handle.gateway.purge())
        await SessionIndex(client, keys.project).forget(keys.key)
        return deleted, items


def prune(ctx: typer.Context, project: ProjectOption, json_mode: Json = False) -> None:
    """Drop from the project's session index the memories that are gone (expired, or deleted
    by hand), which `ls` shows with TTL `gone`; memories that exist are left alone. Reads the
    index a page of 1,000 at a time, with their TTLs, as `ls --all` does."""
    from compozy_memory._model.keys import validate_project

    validate_project(project)
    out = Out(json_mode)
    dropped, read = asyncio.run(_prune(ctx, project, out))
    if json_mode:
        out.data({"project": project, "pruned": dropped, "entries_read": read})
    else:
        out.line(f"pruned {dropped} entries of memories that are gone ({read} read)", "green")


async def _prune(ctx: typer.Context, project: str, out: Out) -> tuple[int, int]:
    from compozy_memory._io.retry import NO_RETRY
    from compozy_memory._ops.listing import gone_from_index
    from compozy_memory._sessions.index import SessionIndex

    dropped = read = 0
    async with open_client(settings(ctx)) as client:
        index = SessionIndex(client, project, retry=NO_RETRY)
        async for gone, entries in gone_from_index(client, project):
            read += entries
            for key in gone:
                # A memory written again since its TTL was read is dropped too: its next
                # write puts it back in the index.
                await index.forget(key)
                dropped += 1
            if out.stderr.is_terminal and not out.json:
                out.note(f"{read} entries read, {dropped} dropped")
    return dropped, read
