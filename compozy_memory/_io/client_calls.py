"""The clients compozy-memory speaks through, and the effects that reach a client directly.

Four redis-py clients carry the same calls: ``redis.asyncio.Redis`` and
``redis.asyncio.RedisCluster`` for :class:`~compozy_memory.MemoryInstance`, ``redis.Redis`` and
``redis.cluster.RedisCluster`` for :class:`~compozy_memory.SyncMemoryInstance`. Below the
core's calls (:mod:`compozy_memory._wire.effects`), delivering a script (FCALL, or EVALSHA, a
library load, a version check) and waiting for replicas are steps of the I/O package, made of
the closed set of client effects here (:data:`ClientEffect`: one command, to a node of a
Cluster; the primaries; one pipeline; a new slot map; a backoff), written once and run on a
client by :func:`arun_client` (``redis.asyncio``) or :func:`run_client` (blocking).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import redis
import redis.cluster
from redis import exceptions as redis_errors
from redis.asyncio import Redis, RedisCluster
from redis.client import NEVER_DECODE

from compozy_memory._wire.effects import Command, Sleep

__all__ = [
    "PRIMARIES",
    "AnyClient",
    "ClientEffect",
    "ClientSteps",
    "Exec",
    "Pipelined",
    "Primaries",
    "RefreshSlots",
    "SyncRedisClient",
    "arun_client",
    "command_options",
    "is_blocking",
    "is_cluster",
    "is_standalone",
    "run_client",
]

T = TypeVar("T")

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


def command_options(command: Command) -> dict[str, object]:
    """The keyword arguments redis-py's client is given for ``command``."""
    if command.binary:
        return {**command.options, NEVER_DECODE: []}
    return dict(command.options)


@dataclass(frozen=True, slots=True)
class Exec:
    """One command on the client; to ``node`` of a Cluster when given. redis-py's errors
    come out as they are: the steps that sent it translate them."""

    node: Any
    command: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Primaries:
    """The nodes a command must reach each of: every primary of a Cluster, else ``[None]``."""


PRIMARIES = Primaries()


@dataclass(frozen=True, slots=True)
class Pipelined:
    """Commands in one non-transactional pipeline of a standalone client, on one connection;
    each command's error comes back in its place."""

    commands: Sequence[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class RefreshSlots:
    """Ask a Cluster for its slot map again (a node added since the client started)."""


#: What steps that speak to a client directly yield (a :class:`Sleep` is a retry's backoff).
ClientEffect: TypeAlias = "Exec | Primaries | Pipelined | RefreshSlots | Sleep"
#: Steps on a client: yield client effects, are sent their outcomes, return ``T``.
ClientSteps: TypeAlias = Generator[ClientEffect, Any, T]


async def arun_client(steps: ClientSteps[T], client: Any) -> T:
    """Run ``steps`` on the async ``client``: each effect awaited, its outcome (or its
    exception) handed back, until the steps return."""
    try:
        effect = steps.send(None)
        while True:
            try:
                value = await _aperform(effect, client)
            except BaseException as exc:  # the steps decide: they may catch it
                effect = steps.throw(exc)
            else:
                effect = steps.send(value)
    except StopIteration as done:
        result: T = done.value
        return result


def run_client(steps: ClientSteps[T], client: Any) -> T:
    """:func:`arun_client` on a blocking ``client``."""
    try:
        effect = steps.send(None)
        while True:
            try:
                value = _perform(effect, client)
            except BaseException as exc:
                effect = steps.throw(exc)
            else:
                effect = steps.send(value)
    except StopIteration as done:
        result: T = done.value
        return result


async def _aperform(effect: ClientEffect, client: Any) -> Any:
    match effect:
        case Exec(node, command):
            try:
                if node is not None:
                    return await client.execute_command(*command, target_nodes=node)
                return await client.execute_command(*command)
            except (AttributeError, TypeError) as exc:
                # redis-py can close a connection another task is using (the Cluster client
                # following a MOVED redirect), or a peer can close an idle pooled one, and
                # it then leaks asyncio's internals (its stream None) instead of a
                # ConnectionError (redis-py issue 4287). Treat that like any dropped
                # connection: the call is retried, and dedupe keys make a repeat harmless.
                if "'NoneType' object" in str(exc):
                    raise redis_errors.ConnectionError(
                        f"connection closed while in use ({exc})"
                    ) from exc
                raise
        case Pipelined(commands):
            async with client.pipeline(transaction=False) as pipe:
                for command in commands:
                    pipe.execute_command(*command)
                return list(await pipe.execute(raise_on_error=False))
        case Primaries():
            if isinstance(client, RedisCluster):
                await client.initialize()
                return list(client.get_primaries())
            return [None]
        case RefreshSlots():
            await client.nodes_manager.initialize()
            return None
        case Sleep(seconds):
            await asyncio.sleep(seconds)
            return None


def _perform(effect: ClientEffect, client: Any) -> Any:
    match effect:
        case Exec(node, command):
            if node is not None:
                return client.execute_command(*command, target_nodes=node)
            return client.execute_command(*command)
        case Pipelined(commands):
            with client.pipeline(transaction=False) as pipe:
                for command in commands:
                    pipe.execute_command(*command)
                return list(pipe.execute(raise_on_error=False))
        case Primaries():
            if isinstance(client, redis.cluster.RedisCluster):
                return list(client.get_primaries())  # type: ignore[no-untyped-call]
            return [None]
        case RefreshSlots():
            client.nodes_manager.initialize()
            return None
        case Sleep(seconds):
            time.sleep(seconds)
            return None
