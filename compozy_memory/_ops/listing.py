"""``ls``: a project's memories with their tokens, messages, TTL and last activity.

Two sources, because a memory reaches the session index only when it is written through
:class:`~compozy_memory.MemoryManager`:

* **the session index** (the default, :mod:`compozy_memory._sessions.index`): one bounded
  range read a page (ZSET by last activity plus its info HASH, both in the project's slot),
  then the TTLs of that page's memories in one pipeline of ``PTTL``. No ``SCAN``: the cost is
  the page, not the number of memories, on a Cluster as on one server.
* **a scan** (``--scan``): every memory that has a ``meta`` key, whoever wrote it.
  ``SCAN MATCH compozy:<project>:memory:*:meta`` on every primary of a Cluster, then the
  totals (``HMGET meta tokens count``), ``PTTL`` and the newest envelope's time
  (``LINDEX msgs -1``) in pipelines of 1000. The cost is the server's keyspace, so it is the
  tool for a memory the index does not know, not for every call.

Neither adds anything to the append path: the index is the one the manager already keeps.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio.cluster import RedisCluster

from compozy_memory._io.retry import NO_RETRY
from compozy_memory._io.translate import RedisClient, backend_errors
from compozy_memory._model.keys import InstanceKeys, validate_project
from compozy_memory._sessions.index import SessionIndex

__all__ = ["MemoryRow", "from_index", "from_scan", "gone_from_index"]

_PIPELINE = 1000
_SCAN_COUNT = 1000
_TS = re.compile(rb'"ts":(\d+)')

Progress = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class MemoryRow:
    """One memory as ``ls`` shows it (``--json`` prints these fields)."""

    key: str
    agent: str | None
    messages: int
    tokens: int
    #: None: no TTL (or the memory is gone: see ``exists``).
    ttl_ms: int | None
    last_active_ms: int | None
    exists: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "agent": self.agent,
            "messages": self.messages,
            "tokens": self.tokens,
            "ttl_ms": self.ttl_ms,
            "last_active_ms": self.last_active_ms,
            "exists": self.exists,
        }


async def from_index(
    client: RedisClient,
    project: str,
    *,
    agent: str | None = None,
    limit: int | None = 50,
    progress: Progress | None = None,
) -> list[MemoryRow]:
    """The ``limit`` most recently active memories of the index (None: all), newest first."""
    index = SessionIndex(client, project, retry=NO_RETRY)
    rows: list[MemoryRow] = []
    cursor: str | None = None
    while limit is None or len(rows) < limit:
        size = 1000 if limit is None else min(1000, limit - len(rows))
        page = await index.page(agent=agent, limit=size, cursor=cursor)
        keys = [InstanceKeys(project, s.key).meta for s in page.sessions]
        ttls = await _pttls(client, project, keys)
        for session, ttl in zip(page.sessions, ttls, strict=True):
            rows.append(
                MemoryRow(
                    key=session.key,
                    agent=session.agent,
                    messages=session.messages,
                    tokens=session.tokens,
                    ttl_ms=ttl if ttl >= 0 else None,
                    last_active_ms=session.last_active_ms,
                    exists=ttl != -2,
                )
            )
        if progress is not None:
            progress(len(page.sessions))
        cursor = page.cursor
        if cursor is None:
            break
    return rows


async def gone_from_index(
    client: RedisClient, project: str, *, progress: Progress | None = None
) -> AsyncIterator[tuple[list[str], int]]:
    """The index's entries whose memory is gone (neither its ``meta`` nor its messages
    exist: expired, or deleted by hand), a page of 1,000 entries at a time: (gone keys, entries
    read). The cursor is the last entry's score and key, so dropping entries meanwhile moves
    no later page."""
    index = SessionIndex(client, project, retry=NO_RETRY)
    cursor: str | None = None
    while True:
        page = await index.page(limit=1000, cursor=cursor)
        names = [InstanceKeys(project, s.key) for s in page.sessions]
        ttls = await _pttls(client, project, [k for n in names for k in (n.meta, n.msgs)])
        gone = [
            n.key for n, meta, msgs in zip(names, ttls[::2], ttls[1::2], strict=True)
            if meta == -2 and msgs == -2
        ]  # fmt: skip
        if progress is not None:
            progress(len(page.sessions))
        yield gone, len(page.sessions)
        cursor = page.cursor
        if cursor is None:
            return


async def _pttls(client: RedisClient, project: str, keys: Sequence[str]) -> list[int]:
    out: list[int] = []
    with backend_errors("ls", f"compozy:{project}:memory:*"):
        for start in range(0, len(keys), _PIPELINE):
            pipe = client.pipeline(transaction=False)
            for key in keys[start : start + _PIPELINE]:
                pipe.pttl(key)
            out += [int(v) for v in await pipe.execute()]
    return out


async def from_scan(
    client: RedisClient, project: str, *, progress: Progress | None = None
) -> list[MemoryRow]:
    """Every memory of ``project`` with a ``meta`` key, most recently active first."""
    validate_project(project)
    prefix = f"compozy:{project}:memory:{{"
    metas: list[str] = []
    with backend_errors("ls --scan", f"{prefix}*"):
        for node in _primaries(client):
            cursor: int | bytes | str = 0
            while True:
                cursor, found = await _scan(client, node, cursor, f"{prefix}*}}:meta")
                metas += [k.decode() if isinstance(k, bytes) else k for k in found]
                if int(cursor) == 0:
                    break
    rows: list[MemoryRow] = []
    with backend_errors("ls --scan", f"{prefix}*"):
        for start in range(0, len(metas), _PIPELINE):
            chunk = metas[start : start + _PIPELINE]
            pipe = client.pipeline(transaction=False)
            for meta in chunk:
                pipe.hmget(meta, "tokens", "count")
                pipe.pttl(meta)
                pipe.lindex(meta[: -len(":meta")] + ":msgs", -1)
            replies = await pipe.execute()
            for i, meta in enumerate(chunk):
                (tokens, count), ttl, newest = replies[3 * i : 3 * i + 3]
                rows.append(
                    MemoryRow(
                        key=meta[len(prefix) : -len("}:meta")],
                        agent=None,
                        messages=int(count or 0),
                        tokens=int(tokens or 0),
                        ttl_ms=int(ttl) if int(ttl) >= 0 else None,
                        last_active_ms=_timestamp(newest),
                        exists=int(ttl) != -2,
                    )
                )
            if progress is not None:
                progress(len(chunk))
    rows.sort(key=lambda r: (r.last_active_ms or 0, r.key), reverse=True)
    return rows


def _primaries(client: RedisClient) -> list[Any]:
    if isinstance(client, RedisCluster):
        return list(client.get_primaries())
    return [None]


async def _scan(client: RedisClient, node: Any, cursor: Any, match: str) -> tuple[Any, list[Any]]:
    if node is None:
        cursor, keys = await client.scan(cursor, match=match, count=_SCAN_COUNT)
        return cursor, list(keys)
    assert isinstance(client, RedisCluster)
    reply = await client.execute_command(
        "SCAN", cursor, "MATCH", match, "COUNT", _SCAN_COUNT, target_nodes=node
    )
    if isinstance(reply, dict):  # {node name: reply}
        (reply,) = reply.values()
    cursor, keys = reply
    if isinstance(cursor, dict):  # redis-py's cluster SCAN: ({node name: cursor}, keys)
        (cursor,) = cursor.values()
    return cursor, list(keys)


def _timestamp(envelope: bytes | str | None) -> int | None:
    """The ``ts`` of an envelope, read from its head (the script writes it second)."""
    if envelope is None:
        return None
    head = envelope[:64] if isinstance(envelope, bytes) else envelope[:64].encode()
    found = _TS.search(head)
    return int(found.group(1)) if found else None
