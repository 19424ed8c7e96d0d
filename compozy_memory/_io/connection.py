"""Opening a client for a standalone server or a cluster from a URL, async or blocking."""

from __future__ import annotations

import weakref
from typing import Any

import redis
import redis.cluster
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.retry import Retry as SyncRetry

from compozy_memory._io.client_calls import SyncRedisClient, is_blocking, is_cluster
from compozy_memory._io.retry import RetryPolicy
from compozy_memory._io.sync_transport import SyncTransport
from compozy_memory._io.translate import RedisClient
from compozy_memory._io.transport import Transport
from compozy_memory._metrics import MemoryMetrics
from compozy_memory.errors import ConfigurationError

__all__ = [
    "DEFAULT_TIMEOUTS",
    "close_twin",
    "connect",
    "connect_sync",
    "sync_twin",
    "transport_for",
]

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


def connect_sync(url: str, *, cluster: bool = False, **options: Any) -> SyncRedisClient:
    """A blocking redis-py client for ``url``, for :class:`~compozy_memory.SyncMemoryInstance`
    and :class:`~compozy_memory.SyncMemoryManager`: as :func:`connect`, and safe to share
    between threads (each call takes a connection of the client's pool)."""
    options = {**DEFAULT_TIMEOUTS, **options}
    if cluster:
        return redis.cluster.RedisCluster.from_url(url, **options)
    options.setdefault("retry", SyncRetry(NoBackoff(), 0))
    return redis.Redis.from_url(url, **options)


def transport_for(
    client: Any,
    *,
    retry: RetryPolicy | None = None,
    batching: bool = True,
    key: str = "",
    memory: str = "memory",
    metrics: MemoryMetrics | None = None,
) -> Transport | SyncTransport:
    """The transport (without WAIT) that fits ``client``: async or blocking."""
    if is_blocking(client):
        return SyncTransport(client, retry=retry, key=key, memory=memory, metrics=metrics)
    return Transport(
        client, retry=retry, batching=batching, key=key, memory=memory, metrics=metrics
    )


# The settings of a connection a twin takes from the client it copies (redis-py keeps
# private state beside them in the same mapping).
_SETTINGS = {
    "host",
    "port",
    "db",
    "path",
    "username",
    "password",
    "credential_provider",
    "socket_timeout",
    "socket_connect_timeout",
    "socket_keepalive",
    "socket_keepalive_options",
    "encoding",
    "encoding_errors",
    "decode_responses",
    "client_name",
    "lib_name",
    "lib_version",
    "health_check_interval",
    "protocol",
}
_TWINS: weakref.WeakKeyDictionary[Any, SyncRedisClient] = weakref.WeakKeyDictionary()


def sync_twin(client: RedisClient) -> SyncRedisClient:
    """A blocking client of the same server(s) as the async ``client``, with the same
    credentials, TLS and timeouts, made on first use and kept while ``client`` lives: what
    the adapters' synchronous methods use, in any thread and inside a running loop."""
    twin = _TWINS.get(client)
    if twin is not None:
        return twin
    if is_cluster(client):
        assert isinstance(client, RedisCluster)
        settings = _settings(client.connection_kwargs)
        known = client.get_nodes() or list(client.nodes_manager.startup_nodes.values())
        nodes = [redis.cluster.ClusterNode(n.host, n.port) for n in known]  # type: ignore[no-untyped-call]
        twin = redis.cluster.RedisCluster(startup_nodes=nodes, **settings)
    elif isinstance(client, Redis):
        pool = client.connection_pool
        settings = _settings(pool.connection_kwargs)
        kind = pool.connection_class.__name__
        if kind == "UnixDomainSocketConnection":
            settings["unix_socket_path"] = settings.pop("path")
        elif kind == "SSLConnection":
            settings["ssl"] = True
        settings["retry"] = SyncRetry(NoBackoff(), 0)
        twin = redis.Redis(**settings)
    else:
        raise ConfigurationError(f"no blocking twin for a {type(client).__name__}")
    _TWINS[client] = twin
    return twin


def close_twin(client: RedisClient) -> None:
    """Close the blocking twin of ``client``, if one was made (closing ``client`` is the
    caller's)."""
    twin = _TWINS.pop(client, None)
    if twin is not None:
        twin.close()


def _settings(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in kwargs.items()
        if k in _SETTINGS or (k.startswith("ssl_") and v is not None)
    }
