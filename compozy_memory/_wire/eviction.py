"""The server's ``maxmemory-policy``, and whether it can evict part of a memory.

A memory is several keys. A policy that evicts keys one at a time can take some of a memory's
keys and leave the others: the scripts then refuse the memory
(:class:`~compozy_memory.MemoryEvictedError`) rather than rebuild it silently, and its data is
gone. So:

* ``noeviction`` is safe: at ``maxmemory`` writes are refused whole
  (:class:`~compozy_memory.BackendOutOfMemoryError`) and nothing is lost;
* ``volatile-*`` evicts only keys with a TTL: safe for memories without one, unsafe for
  memories with a TTL (every key of such a memory carries it);
* ``allkeys-*`` may evict any key of any memory: unsafe.
"""

from __future__ import annotations

import logging

from compozy_memory._wire.effects import Call, Command, raw
from compozy_memory._wire.steps import Steps
from compozy_memory.errors import CompozyMemoryError

__all__ = ["eviction_policy", "eviction_warning"]

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
