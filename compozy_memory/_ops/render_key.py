"""``render-key``: the memory keys an agent gets in a given context, to debug key templates."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, Optional

import typer

from compozy_memory._model.keys import decode_key
from compozy_memory._ops.common import EXIT_USAGE, fail
from compozy_memory._ops.inspect_cmds import Json
from compozy_memory._ops.output import Out, key_column, text_column
from compozy_memory.errors import ConfigurationError

__all__ = ["parse_context", "render_key"]


def render_key(
    path: Annotated[str, typer.Argument(help="the project folder or its compozy.yaml")],
    agent: Annotated[str, typer.Argument(help="the agent id, as the project declares it")],
    set_: Annotated[
        Optional[list[str]],  # noqa: UP045 - typer 0.12 reads no `X | None`
        typer.Option(
            "--set", "-s", help="a context value, dotted: workflow.input.user_id=alice (repeat)"
        ),
    ] = None,
    context_json: Annotated[
        str, typer.Option("--context", help="the context as one JSON object")
    ] = "",
    json_mode: Json = False,
) -> None:
    """Render an agent's memory key templates with a context, as MemoryManager would: the
    template, the text it gives, the stored key and the Redis key prefix of each memory."""
    context = parse_context(set_ or [], context_json or None)
    rows = asyncio.run(_render(path, agent, context))
    out = Out(json_mode)
    if json_mode:
        out.data({"agent": agent, "context": context, "memories": rows})
        return
    table = [
        (r["memory"], r["mode"], r["template"], r["text"] or "(shortened)", r["prefix"])
        for r in rows
    ]
    columns = (
        text_column("MEMORY"),
        text_column("MODE"),
        text_column("TEMPLATE"),
        key_column("TEXT"),
        key_column("REDIS KEYS"),
    )
    out.table(columns, table, title=agent)


def parse_context(pairs: list[str], context_json: str | None) -> dict[str, Any]:
    """``a.b=c`` pairs (over ``context_json``) as the nested mapping templates read."""
    context: dict[str, Any] = {}
    if context_json is not None:
        try:
            loaded = json.loads(context_json)
        except json.JSONDecodeError as exc:
            raise fail(f"--context is not JSON: {exc}", EXIT_USAGE) from exc
        if not isinstance(loaded, dict):
            raise fail("--context must be a JSON object", EXIT_USAGE)
        context = loaded
    for pair in pairs:
        name, sep, value = pair.partition("=")
        parts = name.split(".")
        if not sep or not all(parts):
            raise fail(f"--set {pair!r}: write name=value (name dotted: user.id=42)", EXIT_USAGE)
        node = context
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise fail(f"--set {pair!r}: {part!r} already has a value", EXIT_USAGE)
            node = child
        node[parts[-1]] = value
    return context


async def _render(path: str, agent: str, context: dict[str, Any]) -> list[dict[str, Any]]:
    from compozy_memory._config.registry import MemoryRegistry
    from compozy_memory._io.connection import connect
    from compozy_memory._manager import MemoryManager
    from compozy_memory._model.tokens import HeuristicCounter

    registry = MemoryRegistry.load(path)
    refs = registry.agent(agent)
    client = connect("redis://127.0.0.1:1/0")  # never used: rendering makes no call
    manager = MemoryManager(registry, client, counter=HeuristicCounter(), flushing=False)
    try:
        handles = await manager.for_agent(agent, context)
    finally:
        await manager.aclose()
        await client.aclose()
    rows = []
    for ref, handle in zip(refs, handles, strict=True):
        template = ref.key or registry.get(ref.id).default_key_template or ""
        try:
            text: str | None = decode_key(handle.keys.key)
        except ConfigurationError:
            text = None
        rows.append(
            {
                "memory": ref.id,
                "mode": ref.mode,
                "template": template,
                "text": text,
                "key": handle.keys.key,
                "prefix": handle.keys.prefix,
            }
        )
    return rows
