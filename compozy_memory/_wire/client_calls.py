"""The clients compozy-memory speaks through, and the effects that reach a client directly.

Four redis-py clients carry the same calls: ``redis.asyncio.Redis`` and
``redis.asyncio.RedisCluster`` for :class:`~compozy_memory.MemoryInstance`, ``redis.Redis`` and
``redis.cluster.RedisCluster`` for :class:`~compozy_memory.SyncMemoryInstance`. Below the
script calls of :mod:`compozy_memory._wire.steps`, delivering a script (FCALL, or EVALSHA, a
library load, a version check) and waiting for replicas are steps too, made of the effects
here: one command (to a node of a Cluster), the primaries, one pipeline. Each runs on the
``client`` of whatever transport drives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import redis
import redis.cluster
from redis import exceptions as redis_errors
from redis.asyncio import Redis, RedisCluster

__all__ = [
    "PRIMARIES",
    "AnyClient",
    "Exec",
    "OnClient",
    "Pipelined",
    "Primaries",
    "SyncRedisClient",
    "is_blocking",
    "is_cluster",
    "is_standalone",
]

#: redis-py's blocking clients, which the synchronous API runs on.
SyncRedisClient: TypeAlias = "redis.Redis | redis.cluster.RedisCluster"
#: Any client compozy-memory runs on.
AnyClient: TypeAlias = "Redis | RedisCluster | redis.Redis | redis.cluster.RedisCluster"

_CLUSTERS = (RedisCluster, redis.cluster.RedisCluster)
_STANDALONE = (Redis, redis.Redis)


def is_cluster(client: object) -> bool:
    """Whether ``client`` is a Cluster client (async or sync)."""
    return isinstance(client, _CLUSTERS)


def is_blocking(client: object) -> bool:
    """Whether ``client`` is one of redis-py's blocking clients (the sync API's)."""
    return isinstance(client, (redis.Redis, redis.cluster.RedisCluster))


def is_standalone(client: object) -> bool:
    """Whether ``client`` is a client of one server (async or sync)."""
    return isinstance(client, _STANDALONE)


@dataclass(frozen=True, slots=True)
class Exec:
    """One command on the client; to ``node`` of a Cluster when given. redis-py's errors
    come out as they are: the steps that sent it translate them."""

    node: Any
    command: tuple[Any, ...]

    async def arun(self, io: Any) -> Any:
        client = io.client
        try:
            if self.node is not None:
                return await client.execute_command(*self.command, target_nodes=self.node)
            return await client.execute_command(*self.command)
        except (AttributeError, TypeError) as exc:
            # redis-py can close a connection another task is using (the Cluster client
            # following a MOVED redirect), or a peer can close an idle pooled one, and it
            # then leaks asyncio's internals (its stream None) instead of a ConnectionError
            # (redis-py issue 4287). Treat that like any dropped connection: the call is
            # retried, and dedupe keys make a repeat harmless.
            if "'NoneType' object" in str(exc):
                raise redis_errors.ConnectionError(
                    f"connection closed while in use ({exc})"
                ) from exc
            raise

    def run(self, io: Any) -> Any:
        client = io.client
        if self.node is not None:
            return client.execute_command(*self.command, target_nodes=self.node)
        return client.execute_command(*self.command)


class Primaries:
    """The nodes a command must reach each of: every primary of a Cluster, else ``[None]``."""

    __slots__ = ()

    async def arun(self, io: Any) -> list[Any]:
        client = io.client
        if isinstance(client, RedisCluster):
            await client.initialize()
            return list(client.get_primaries())
        return [None]

    def run(self, io: Any) -> list[Any]:
        client = io.client
        if isinstance(client, redis.cluster.RedisCluster):
            return list(client.get_primaries())  # type: ignore[no-untyped-call]
        return [None]


PRIMARIES = Primaries()


@dataclass(frozen=True, slots=True)
class Pipelined:
    """Commands in one non-transactional pipeline of a standalone client, on one connection;
    each command's error comes back in its place."""

    commands: Sequence[tuple[Any, ...]]

    async def arun(self, io: Any) -> list[Any]:
        async with io.client.pipeline(transaction=False) as pipe:
            for command in self.commands:
                pipe.execute_command(*command)
            return list(await pipe.execute(raise_on_error=False))

    def run(self, io: Any) -> list[Any]:
        with io.client.pipeline(transaction=False) as pipe:
            for command in self.commands:
                pipe.execute_command(*command)
            return list(pipe.execute(raise_on_error=False))


@dataclass(frozen=True, slots=True)
class OnClient:
    """The bare client as a transport, for steps that send it commands only (:class:`Exec`,
    :class:`Primaries`): installing the library, checking the server's version."""

    client: Any

    @property
    def synchronous(self) -> bool:
        return not isinstance(self.client, (Redis, RedisCluster))
