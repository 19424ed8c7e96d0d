"""Lua scripts as named units: loaded once, called by SHA, recovered after NOSCRIPT.

Each operation lives in ``lua/<name>.lua`` with a header naming its KEYS, ARGV and return
value. Redis scripts cannot include one another, so the shared helpers in ``lua/_lib.lua`` are
spliced in after each script's ``#!lua`` line when it is loaded.

A call goes out as EVALSHA. When the server has lost its script cache (a restart, a failover,
``SCRIPT FLUSH``, or a Cluster node that never saw the script) it answers NOSCRIPT, and the
call is repeated once as EVAL, which runs the script and caches it again on the node that owns
the key's slot. Callers see latency, never the NOSCRIPT.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeAlias

from redis import exceptions as redis_errors
from redis.asyncio import Redis, RedisCluster

from compozy_memory.errors import (
    BackendError,
    BackendOutOfMemoryError,
    BackendPermissionError,
    BackendTimeoutError,
    BackendUnavailableError,
    CompozyMemoryError,
    ConflictError,
    InvalidMessageError,
    LockLostError,
    MessageTooLargeError,
    ScriptError,
)

__all__ = ["RedisClient", "Script", "backend_errors", "script", "translate"]

RedisClient: TypeAlias = "Redis | RedisCluster"
ScriptArg: TypeAlias = "str | bytes | int"

_TRANSIENT = (
    redis_errors.ConnectionError,
    redis_errors.TryAgainError,
    redis_errors.ClusterDownError,
)
_SCRIPT_LOCATION = re.compile(r"\s*script: [0-9a-f]+, on @\w+:\d+\.?$")
_ERRORS: dict[str, type[CompozyMemoryError]] = {
    "COMPOZY_INVALID": InvalidMessageError,
    "COMPOZY_TOOLARGE": MessageTooLargeError,
    "COMPOZY_CONFLICT": ConflictError,
    "COMPOZY_STALE": LockLostError,
}


def _lua_dir() -> Path:
    package = Path(__file__).resolve().parent.parent
    # An installed wheel carries lua/ inside the package; a source checkout has it beside.
    for candidate in (package / "lua", package.parent / "lua"):
        if (candidate / "_lib.lua").is_file():
            return candidate
    raise FileNotFoundError(f"compozy-memory's lua/ scripts are missing beside {package}")


@dataclass(frozen=True, slots=True)
class Script:
    """One Lua operation, ready to run on any client of a standalone server or a cluster."""

    name: str
    source: str
    sha: str
    #: Declared ``flags=no-writes``: sent as EVALSHA_RO/EVAL_RO, which declare the keys as
    #: read, so ACL users with read-only key permissions (``%R~``) may run it. Not on a
    #: Cluster client: redis-py routes only EVAL and EVALSHA without asking the server for
    #: the keys of every call.
    read_only: bool = False

    def commands(self, client: RedisClient) -> tuple[str, str]:
        """The by-SHA and by-source commands that run this script on ``client``."""
        if self.read_only and not isinstance(client, RedisCluster):
            return ("EVALSHA_RO", "EVAL_RO")
        return ("EVALSHA", "EVAL")

    async def __call__(
        self, client: RedisClient, keys: Sequence[str], args: Sequence[ScriptArg], *, key: str
    ) -> Any:
        """Run with ``keys`` and ``args``; ``key`` names the memory in errors."""
        by_sha, by_source = self.commands(client)
        try:
            return await _run(client, by_sha, self.sha, keys, args)
        except redis_errors.NoScriptError:
            pass
        except redis_errors.RedisError as exc:
            raise translate(exc, self.name, key) from _cause(exc)
        try:
            return await _run(client, by_source, self.source, keys, args)
        except redis_errors.RedisError as exc:
            raise translate(exc, self.name, key) from _cause(exc)


async def _run(
    client: RedisClient, command: str, body: str, keys: Sequence[str], args: Sequence[ScriptArg]
) -> Any:
    # redis-py routes EVAL-family commands on a Cluster by their first key.
    try:
        return await client.execute_command(command, body, len(keys), *keys, *args)
    except AttributeError as exc:
        # redis-py's async Cluster client can close a connection another task is using while
        # it follows a MOVED redirect (its stream becomes None mid-call). Treat that like any
        # dropped connection: the call is retried, and dedupe keys make a repeat harmless.
        if isinstance(client, RedisCluster) and "'NoneType' object" in str(exc):
            raise redis_errors.ConnectionError(f"connection closed while in use ({exc})") from exc
        raise


@contextmanager
def backend_errors(operation: str, key: str) -> Iterator[None]:
    """Turn redis-py exceptions raised inside the block into compozy-memory's typed errors."""
    try:
        yield
    except redis_errors.RedisError as exc:
        raise translate(exc, operation, key) from _cause(exc)


def translate(exc: redis_errors.RedisError, operation: str, key: str) -> CompozyMemoryError:
    """The typed error for a redis-py exception raised by ``operation`` on memory ``key``."""
    if isinstance(
        exc,
        (
            redis_errors.AuthenticationError,
            redis_errors.AuthorizationError,
            redis_errors.NoPermissionError,
        ),
    ) or str(exc).startswith(("NOPERM", "WRONGPASS", "NOAUTH")):
        return BackendPermissionError(f"{operation}: {exc}", key=key)
    if isinstance(exc, redis_errors.TimeoutError):
        return BackendTimeoutError(f"{operation}: {exc}", key=key)
    if isinstance(exc, _TRANSIENT):
        # TRYAGAIN (a slot half migrated) and CLUSTERDOWN (a failover) pass, like a dropped
        # connection: the call is retried.
        return BackendUnavailableError(f"{operation}: {exc}", key=key)
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


def _cause(exc: redis_errors.RedisError) -> redis_errors.RedisError | None:
    # Our own validation errors are complete in themselves; the redis-py traceback adds noise.
    return None if str(exc).startswith("COMPOZY_") else exc


@cache
def script(name: str) -> Script:
    """The script ``lua/<name>.lua`` with the shared helpers spliced in."""
    folder = _lua_dir()
    lib = (folder / "_lib.lua").read_text(encoding="utf-8")
    body = (folder / f"{name}.lua").read_text(encoding="utf-8")
    shebang, newline, rest = body.partition("\n")
    if not shebang.startswith("#!lua"):
        raise FileNotFoundError(f"lua/{name}.lua must start with a '#!lua' line")
    source = f"{shebang}{newline}{lib}\n{rest}"
    read_only = "no-writes" in shebang
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest(), read_only)  # noqa: S324
