"""Opening a client for a standalone server or a cluster from a URL."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from compozy_memory._wire.translate import RedisClient

__all__ = ["DEFAULT_TIMEOUTS", "connect"]

#: Without a socket timeout a stalled network hangs a call forever; with one, it surfaces as
#: BackendTimeoutError and the handle's RetryPolicy decides what happens next.
DEFAULT_TIMEOUTS = {"socket_timeout": 5.0, "socket_connect_timeout": 5.0}


def connect(url: str, *, cluster: bool = False, **options: Any) -> RedisClient:
    """A ``redis.asyncio`` client for ``url`` (``redis://`` or ``rediss://``).

    Credentials come from the URL (``redis://user:password@host:port/db``); TLS options from
    its query (``rediss://host:port?ssl_ca_certs=/path/ca.pem``). With ``cluster=True`` the
    URL names any one node and the client discovers the rest. ``options`` go to redis-py;
    ``socket_timeout`` and ``socket_connect_timeout`` default to 5 seconds.

    A standalone client gets no retries of its own (redis-py's default is 10, with backoff up
    to a second each): every handle retries within its :class:`~compozy_memory.RetryPolicy`,
    and two layers would multiply the wait past the policy's deadline. A Cluster client keeps
    redis-py's, which also refresh the slot map after a node is lost.
    """
    options = {**DEFAULT_TIMEOUTS, **options}
    if cluster:
        return RedisCluster.from_url(url, **options)
    options.setdefault("retry", Retry(NoBackoff(), 0))
    return Redis.from_url(url, **options)
