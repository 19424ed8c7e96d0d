"""Opening a client for a standalone server or a cluster from a URL."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis, RedisCluster

from compozy_memory.scripts import RedisClient

__all__ = ["connect"]


def connect(url: str, *, cluster: bool = False, **options: Any) -> RedisClient:
    """A ``redis.asyncio`` client for ``url`` (``redis://`` or ``rediss://``).

    With ``cluster=True`` the URL names any one node and the client discovers the rest.
    ``options`` go to redis-py (timeouts, pool size, ``decode_responses``...).
    """
    if cluster:
        return RedisCluster.from_url(url, **options)
    return Redis.from_url(url, **options)
