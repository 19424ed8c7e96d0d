"""What each tool of ``compozy-memory mcp`` does: a handler takes the server's door (the
memories it reaches) and the checked arguments, calls the library's public methods
(:class:`~compozy_memory.MemoryInstance`), and answers with a JSON object."""

from __future__ import annotations

from typing import Any

from compozy_memory._ops.mcp_tools import message_json, quote

# The door (mcp_server.Door) is typed Any here: that module imports this one.
Door = Any

__all__ = ["HANDLERS", "Refused"]


async def _list_memories(door: Door, args: Any) -> dict[str, Any]:
    if door.named is not None:
        rows = []
        for name, handle in list(door.named.items())[: args.limit]:
            health = await handle.health()
            rows.append(
                {
                    "memory": name,
                    "key": handle.keys.key,
                    "writable": door.writable and not handle.read_only,
                    "messages": health.message_count,
                    "tokens": health.token_count + health.summary_tokens,
                    "max_tokens": health.max_tokens,
                }
            )
        return {"memories": rows}
    from compozy_memory._ops.listing import from_index

    found = await from_index(door.client, door.project, limit=args.limit)
    return {
        "memories": [
            {
                "memory": row.key,
                "key": row.key,
                "writable": door.writable,
                "messages": row.messages,
                "tokens": row.tokens,
                "last_active_ms": row.last_active_ms,
            }
            for row in found
            if row.exists
        ],
        "note": "memories written through a MemoryManager (its session index); others are "
        "reached by their stored key all the same",
    }


def _writable(door: Door, tool: str, name: str) -> Any:
    handle = door.memory(name)
    if handle.read_only:
        raise Refused(f"{tool}: memory {quote(name)} is read-only for this server")
    return handle


async def _remember(door: Door, args: Any) -> dict[str, Any]:
    handle = _writable(door, "remember", args.memory)
    result = await handle.append(
        {"role": args.role, "content": args.content}, dedupe_key=args.dedupe_key
    )
    return {
        "memory": args.memory,
        "id": result.last_id,
        "duplicate": result.duplicate,
        "messages": result.total_count,
        "tokens": result.context_tokens,
        "budget_used": result.budget_used,
    }


async def _search(door: Door, args: Any) -> dict[str, Any]:
    hits = await door.memory(args.memory).search(args.query, args.limit, roles=args.roles)
    found = []
    for hit in hits:
        entry: dict[str, Any] = {
            "id": hit.id,
            "score": hit.score,
            "where": hit.where,
            "message": message_json(hit.message),
        }
        if hit.before is not None:
            entry["before"] = message_json(hit.before)
        if hit.after is not None:
            entry["after"] = message_json(hit.after)
        found.append(entry)
    return {"memory": args.memory, "hits": found, "unindexed": hits.unindexed}


async def _recall(door: Door, args: Any) -> dict[str, Any]:
    messages = await door.memory(args.memory).recall(args.offset, args.limit)
    return {
        "memory": args.memory,
        "offset": args.offset,
        "messages": [message_json(m) for m in messages],
    }


async def _context(door: Door, args: Any) -> dict[str, Any]:
    messages = await door.memory(args.memory).context(args.max_tokens, query=args.query)
    return {
        "memory": args.memory,
        "tokens": sum(m.tokens or 0 for m in messages),
        "messages": [message_json(m) for m in messages],
    }


async def _facts(door: Door, args: Any) -> dict[str, Any]:
    return {"memory": args.memory, "facts": dict(await door.memory(args.memory).facts.items())}


async def _set_facts(door: Door, args: Any) -> dict[str, Any]:
    handle = _writable(door, "set_facts", args.memory)
    await handle.facts.set(dict(args.facts))
    return {"memory": args.memory, "set": sorted(args.facts)}


async def _delete_facts(door: Door, args: Any) -> dict[str, Any]:
    handle = _writable(door, "delete_facts", args.memory)
    deleted = await handle.facts.delete(*args.names)
    return {"memory": args.memory, "deleted": deleted}


async def _forget(door: Door, args: Any) -> dict[str, Any]:
    handle = _writable(door, "forget", args.memory)
    removed = await handle.clear()
    return {"memory": args.memory, "forgotten_messages": removed}


HANDLERS = {
    "list_memories": _list_memories,
    "remember": _remember,
    "search": _search,
    "recall": _recall,
    "context": _context,
    "facts": _facts,
    "set_facts": _set_facts,
    "delete_facts": _delete_facts,
    "forget": _forget,
}


class Refused(Exception):
    """A call refused with a message of this module's (already capped)."""
