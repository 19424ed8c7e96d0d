"""Sending one script call, and turning what redis-py raises into compozy-memory's errors.

Without Functions a call goes out as EVALSHA. When the server has lost its script cache (a
restart, a failover, ``SCRIPT FLUSH``, or a Cluster node that never saw the script) it answers
NOSCRIPT, and the call is repeated once as EVAL, which runs the script and caches it again on
the node that owns the key's slot. Callers see latency, never the NOSCRIPT.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeAlias

from redis import exceptions as redis_errors
from redis.asyncio import Redis, RedisCluster

from compozy_memory._io.client_calls import ClientSteps, Exec, is_cluster
from compozy_memory._wire.scripts import Script, ScriptArg
from compozy_memory.errors import (
    BackendError,
    BackendOutOfMemoryError,
    BackendPermissionError,
    BackendTimeoutError,
    BackendUnavailableError,
    CompozyMemoryError,
    ConcurrentChangeError,
    ConflictError,
    ContextOverflowError,
    CorruptDataError,
    DataFormatError,
    IndexLagError,
    InvalidMessageError,
    LockLostError,
    MemoryEvictedError,
    MessageTooLargeError,
    ScriptError,
    ServerBusyError,
    StepRequiredError,
)

__all__ = [
    "RedisClient",
    "backend_errors",
    "error_cause",
    "eval_commands",
    "run_script",
    "translate",
]

RedisClient: TypeAlias = "Redis | RedisCluster"

_TRANSIENT = (
    redis_errors.ConnectionError,
    redis_errors.TryAgainError,
    redis_errors.ClusterDownError,
)
# NOPERM and the like from commands; from inside a script, Valkey says "ACL failure in script"
# and Redis 7.0 "The user executing the script can't run this command".
_PERMISSION = re.compile(
    r"^(NOPERM|WRONGPASS|NOAUTH)|^ACL failure in script|^The user executing the script can't"
)
_SCRIPT_LOCATION = re.compile(r"\s*script: \w+, on @\w+:\d+\.?$")
_ERRORS: dict[str, type[CompozyMemoryError]] = {
    "COMPOZY_INVALID": InvalidMessageError,
    "COMPOZY_TOOLARGE": MessageTooLargeError,
    "COMPOZY_CONFLICT": ConflictError,
    "COMPOZY_MOVED": ConcurrentChangeError,
    "COMPOZY_OVERFLOW": ContextOverflowError,
    "COMPOZY_STALE": LockLostError,
    "COMPOZY_UNINDEXED": IndexLagError,
    "COMPOZY_LONG": StepRequiredError,
    "COMPOZY_EVICTED": MemoryEvictedError,
    "COMPOZY_FORMAT": DataFormatError,
    "COMPOZY_CORRUPT": CorruptDataError,
}


def eval_commands(script: Script, client: object) -> tuple[str, str]:
    """The by-SHA and by-source commands that run ``script`` on ``client``.

    Read scripts go as EVALSHA_RO/EVAL_RO, which declare their keys as read, so ACL users
    with read-only key permissions (``%R~``) may run them. Not on a Cluster client: redis-py
    routes only EVAL and EVALSHA without asking the server for the keys of every call."""
    if script.read_only and not is_cluster(client):
        return ("EVALSHA_RO", "EVAL_RO")
    return ("EVALSHA", "EVAL")


def run_script(
    client: object, script: Script, keys: Sequence[str], args: Sequence[ScriptArg], key: str
) -> ClientSteps[Any]:
    """Run ``script`` once (by SHA, then by source after NOSCRIPT); errors come out typed.
    ``client`` decides the commands; the transport that drives the steps sends them."""
    by_sha, by_source = eval_commands(script, client)
    try:
        return (yield Exec(None, (by_sha, script.sha, len(keys), *keys, *args)))
    except redis_errors.NoScriptError:
        pass
    except redis_errors.RedisError as exc:
        raise translate(exc, script.name, key) from error_cause(exc)
    try:
        return (yield Exec(None, (by_source, script.source, len(keys), *keys, *args)))
    except redis_errors.RedisError as exc:
        raise translate(exc, script.name, key) from error_cause(exc)


@contextmanager
def backend_errors(operation: str, key: str) -> Iterator[None]:
    """Turn redis-py exceptions raised inside the block into compozy-memory's typed errors."""
    try:
        yield
    except redis_errors.RedisError as exc:
        raise translate(exc, operation, key) from error_cause(exc)


def translate(exc: redis_errors.RedisError, operation: str, key: str) -> CompozyMemoryError:
    """The typed error for a redis-py exception raised by ``operation`` on memory ``key``."""
    if isinstance(
        exc,
        (
            redis_errors.AuthenticationError,
            redis_errors.AuthorizationError,
            redis_errors.NoPermissionError,
        ),
    ) or _PERMISSION.search(str(exc)):
        return BackendPermissionError(f"{operation}: {exc}", key=key)
    if isinstance(exc, redis_errors.TimeoutError):
        return BackendTimeoutError(f"{operation}: {exc}", key=key)
    if isinstance(exc, _TRANSIENT) or _redirects_outlasted(exc):
        # TRYAGAIN (a slot half migrated) and CLUSTERDOWN (a failover) pass, like a dropped
        # connection: the call is retried. So does a call redis-py's Cluster client gave up on
        # after redirect upon redirect (a slot moving back and forth while it asked).
        return BackendUnavailableError(f"{operation}: {exc}", key=key)
    if isinstance(exc, redis_errors.ResponseError) and str(exc).startswith("BUSY "):
        # Another client's script has held the server past busy-reply-threshold: this call
        # was not run, so it is safe to send again, after a backoff.
        return ServerBusyError(f"{operation}: {exc}", key=key)
    if isinstance(exc, redis_errors.OutOfMemoryError):
        return BackendOutOfMemoryError(f"{operation}: {exc}", key=key)
    if isinstance(exc, redis_errors.ResponseError):
        code, _, rest = str(exc).partition(" ")
        typed = _ERRORS.get(code)
        if typed is not None:
            # Some servers append where in the script the error was raised; callers need
            # only our message.
            return typed(_SCRIPT_LOCATION.sub("", rest), key=key)
        return ScriptError(f"{operation}: {exc}", key=key)
    return BackendError(f"{operation}: {exc}", key=key)


def _redirects_outlasted(exc: redis_errors.RedisError) -> bool:
    """redis-py's Cluster client's own words when every try of a call was redirected
    (MOVED, ASK) or failed over until its TTL ran out: the call never ran to its end."""
    return type(exc) is redis_errors.ClusterError and str(exc) == "TTL exhausted."


def error_cause(exc: redis_errors.RedisError) -> redis_errors.RedisError | None:
    # Our own validation errors are complete in themselves; the redis-py traceback adds noise.
    return None if str(exc).startswith("COMPOZY_") else exc
