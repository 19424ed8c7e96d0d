"""The server's settings ``health()`` reports: ``maxmemory-policy``, and whether it can evict
part of a memory; ``proto-max-bulk-len`` and ``client-query-buffer-limit``, and whether they
let a tenant send more than compozy-memory ever does.

A memory is several keys. A policy that evicts keys one at a time can take some of a memory's
keys and leave the others: the scripts then refuse the memory
(:class:`~compozy_memory.MemoryEvictedError`) rather than rebuild it silently, and its data is
gone. So:

* ``noeviction`` is safe: at ``maxmemory`` writes are refused whole
  (:class:`~compozy_memory.BackendOutOfMemoryError`) and nothing is lost;
* ``volatile-*`` evicts only keys with a TTL: safe for memories without one, unsafe for
  memories with a TTL (every key of such a memory carries it);
* ``allkeys-*`` may evict any key of any memory: unsafe.

No ACL rule bounds a command's arguments, and the server makes each a Lua string before a
function's first line runs (a million cost it about half a second). Three settings bound what
a tenant sends by hand: ``proto-max-bulk-len`` one argument (so the largest value a tenant with
the read-write line can plant, which a script meeting it in a long list copies once before
refusing it), ``client-query-buffer-limit`` the bytes of an argument still being read, and
``maxmemory-clients`` the memory of every client's buffers and arguments together (a call
whose arguments pass it is dropped before it runs). The defaults (512 MB, 1 GB, none) are far
above what compozy-memory sends: one argument of at most ``MAX_RESULT_BYTES`` (8 MiB, a stored
result), calls of at most a few MiB.
"""

from __future__ import annotations

import logging
from typing import Any

from compozy_memory._model.limits import INDEX_BACKLOG_WARNING, MAX_RESULT_BYTES
from compozy_memory._wire.effects import Call, Command, raw
from compozy_memory._wire.steps import Steps
from compozy_memory.errors import CompozyMemoryError

__all__ = [
    "LIMIT_SETTINGS",
    "SHARED_SERVER_LIMIT",
    "eviction_policy",
    "eviction_warning",
    "index_warning",
    "limits_warning",
    "server_limits",
]

#: What ``proto-max-bulk-len`` and ``client-query-buffer-limit`` are advised to be on a server
#: shared with tenants: twice the largest argument compozy-memory sends (a stored result).
SHARED_SERVER_LIMIT = 2 * MAX_RESULT_BYTES
#: The settings ``health()`` reports (``MemoryHealth.server_limits``).
LIMIT_SETTINGS = ("proto-max-bulk-len", "client-query-buffer-limit", "maxmemory-clients")

log = logging.getLogger("compozy_memory")


def eviction_policy() -> Steps[str | None]:
    """The server's ``maxmemory_policy`` (from ``INFO memory``), or None where this user may
    not ask (the tenants' ACL lines leave INFO out) or the server does not say. Steps: one
    ``INFO`` on the client of the driver that runs them, not retried and not counted as a
    memory operation (it only annotates ``health()``)."""
    try:
        info = yield from Call(
            None, "eviction", Command("execute_command", ("INFO", "memory")), raw
        )
    except CompozyMemoryError:
        return None
    if isinstance(info, dict) and "maxmemory_policy" not in info:
        # A Cluster client answers per node: every node should have the same policy.
        info = next((v for v in info.values() if isinstance(v, dict)), {})
    policy = info.get("maxmemory_policy") if isinstance(info, dict) else None
    if isinstance(policy, bytes):
        policy = policy.decode()
    return str(policy) if policy else None


def eviction_warning(policy: str | None, *, ttl: bool) -> str | None:
    """Why ``policy`` may take part of a memory (``ttl``: the memory has one), or None."""
    if policy is None or policy == "noeviction":
        return None
    if policy.startswith("allkeys-"):
        return (
            f"maxmemory-policy {policy} may evict any key of a memory and leave the others: "
            "set noeviction (writes are then refused whole at maxmemory, nothing is lost)"
        )
    if policy.startswith("volatile-") and ttl:
        return (
            f"maxmemory-policy {policy} may evict keys of this memory (they carry its TTL) and "
            "leave the others: set noeviction, or keep memories without a TTL"
        )
    return None


def server_limits() -> Steps[dict[str, str]]:
    """The server's LIMIT_SETTINGS as it reports them, empty where this user may not ask
    (``CONFIG GET``: the tenants' lines leave it out). Steps, as :func:`eviction_policy`'s."""
    try:
        reply = yield from Call(None, "limits", Command("config_get", LIMIT_SETTINGS), raw)
    except CompozyMemoryError:
        return {}
    values = _config(reply)
    return {name: _text(values[name]) for name in LIMIT_SETTINGS if name in values}


def limits_warning(limits: dict[str, str]) -> str | None:
    """Why the server's limits let a tenant send far more than compozy-memory does, or None
    (nothing known, or every limit at most SHARED_SERVER_LIMIT)."""
    over = []
    for name in ("proto-max-bulk-len", "client-query-buffer-limit"):
        value = _int(limits.get(name))
        if value is not None and value > SHARED_SERVER_LIMIT:
            over.append(f"{name} is {value // (1024 * 1024)} MB")
    if limits.get("maxmemory-clients") in ("0", "0%"):
        over.append("maxmemory-clients is off")
    if not over:
        return None
    mb = SHARED_SERVER_LIMIT // (1024 * 1024)
    return (
        f"{', '.join(over)}: on a server shared with tenants, one may plant a value, or send "
        "a call of arguments, that large (compozy-memory sends at most "
        f"{MAX_RESULT_BYTES // (1024 * 1024)} MB in one argument). Set proto-max-bulk-len and "
        f"client-query-buffer-limit to {mb}mb and maxmemory-clients (for example 5%)"
    )


def _config(reply: Any) -> dict[str, Any]:
    """CONFIG GET's reply as a mapping (a flat list on RESP2; a Cluster client may answer per
    node: every node should have the same settings)."""
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2], strict=False))
    if not isinstance(reply, dict):
        return {}
    out = {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in reply.items()}
    if "proto-max-bulk-len" not in out:
        for value in out.values():
            if isinstance(value, (dict, list)):
                return _config(value)
    return out


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def index_warning(unindexed: int) -> str | None:
    """Why search falls behind the writes (more than INDEX_BACKLOG_WARNING messages wait to be
    indexed), or None."""
    if unindexed <= INDEX_BACKLOG_WARNING:
        return None
    return (
        f"{unindexed:,} messages are not searchable yet: the writers outrun the indexer. Slow "
        "them (await memory.indexer.catch_up() between writes indexes the backlog in the "
        "writer's own task) or shed writes while health().unindexed stays above "
        f"{INDEX_BACKLOG_WARNING:,}"
    )
