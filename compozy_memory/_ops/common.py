"""What every command of the CLI shares: exit codes, global settings, output, connections.

Exit codes (also in :mod:`compozy_memory._ops.cli` and the README):

====  =====================================================================================
0     done
1     failed: the server refused, a project has problems, a flush was skipped...
2     usage error: a bad option or value (a project id, a key, a template variable)
3     the server cannot be reached (refused, timed out, Cluster down)
4     authentication failed: wrong or missing password (WRONGPASS, NOAUTH)
5     no such memory: nothing stored under that key, or no memory resource by that id
6     not confirmed: a ``clear`` or ``purge`` answered no (or no terminal to ask on)
7     permission denied: the ACL user may not do that (NOPERM)
130   interrupted: Ctrl-C (at a confirmation prompt too; not ``tail -f``, ``serve-metrics``,
      ``mcp --transport http``, which Ctrl-C ends as they are meant to end: exit 0)
====  =====================================================================================
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import typer

from compozy_memory._model.keys import InstanceKeys, validate_project
from compozy_memory.errors import (
    BackendPermissionError,
    BackendTimeoutError,
    BackendUnavailableError,
    CompozyMemoryError,
    ConfigFileError,
    ConfigurationError,
    MemoryNotFoundError,
    UnsupportedServerError,
    UsageError,
)

if TYPE_CHECKING:
    from compozy_memory._io.translate import RedisClient
    from compozy_memory._model.policy import MemoryPolicy
    from compozy_memory._store.instance import MemoryInstance

# The commands' modules import the library (redis-py, pydantic settings, tokenizers...) in the
# functions that use it, so the CLI starts, shows --help and starts `mcp` without it: see
# tests/test_lazy_imports.py.

__all__ = [
    "EXIT_ABORTED",
    "EXIT_AUTH",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_PERMISSION",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "CliError",
    "Settings",
    "exit_code",
    "fail",
    "format_ms",
    "format_ttl",
    "memory_keys",
    "open_client",
    "open_memory",
    "redact",
    "require_memory",
    "settings",
]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_AUTH = 4
EXIT_NOT_FOUND = 5
EXIT_ABORTED = 6
EXIT_PERMISSION = 7
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it

_AUTH = re.compile(
    r"WRONGPASS|NOAUTH|invalid username-password|Authentication required|invalid password",
    re.IGNORECASE,
)
# An encoded key as `ls` shows it: the key alphabet, '#' for a shortened one.
_STORED_KEY = re.compile(r"[a-zA-Z0-9\-_.:#]{1,512}")


class CliError(Exception):
    """A failure the CLI reports as one line on stderr and exits with ``code``."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def fail(message: str, code: int = EXIT_FAILED) -> CliError:
    return CliError(message, code)


def exit_code(exc: BaseException) -> int:
    """The exit code for an error that reached the top of a command."""
    from redis import exceptions as redis_errors

    if isinstance(exc, CliError):
        return exc.code
    if isinstance(exc, BackendPermissionError):
        return EXIT_AUTH if _AUTH.search(str(exc)) or _auth_cause(exc) else EXIT_PERMISSION
    if isinstance(exc, (BackendUnavailableError, BackendTimeoutError)):
        return EXIT_UNREACHABLE
    if isinstance(exc, redis_errors.AuthenticationError):
        return EXIT_AUTH
    if isinstance(exc, (redis_errors.ConnectionError, redis_errors.RedisClusterException)):
        return EXIT_AUTH if _AUTH.search(str(exc)) else EXIT_UNREACHABLE
    if isinstance(exc, MemoryNotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(exc, ConfigFileError):
        return EXIT_FAILED
    if isinstance(exc, (UsageError, ConfigurationError)):
        return EXIT_USAGE
    return EXIT_FAILED


def _auth_cause(exc: BaseException) -> bool:
    from redis import exceptions as redis_errors

    cause = exc.__cause__ or exc.__context__
    while cause is not None:
        if isinstance(cause, redis_errors.AuthenticationError) or _AUTH.search(str(cause)):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


@dataclass(frozen=True, slots=True)
class Settings:
    """The global options: which server, and whether it is a Cluster."""

    url: str
    cluster: bool


def settings(ctx: typer.Context) -> Settings:
    obj = ctx.find_root().obj
    if isinstance(obj, Settings):
        return obj
    return Settings("redis://localhost:6379/0", False)  # pragma: no cover - the callback sets it


def redact(url: str) -> str:
    """``url`` without its password, for messages."""
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


@asynccontextmanager
async def open_client(options: Settings) -> AsyncIterator[RedisClient]:
    """A client for the server, checked with a PING so that an unreachable server or a wrong
    password is reported before any work starts, and with INFO server so that one older than
    Redis 7.0 / Valkey 7.2 is (UnsupportedServerError, exit 1)."""
    from redis import exceptions as redis_errors

    from compozy_memory._io.connection import connect
    from compozy_memory._io.delivery import require_supported
    from compozy_memory._io.translate import backend_errors

    where = redact(options.url)
    try:
        client = connect(options.url, cluster=options.cluster)
    except ValueError as exc:
        raise fail(f"{where} is not a Redis URL: {exc}", EXIT_USAGE) from exc
    try:
        try:
            with backend_errors("connect", where):
                await client.ping()
            await require_supported(client, where)  # before any command a server lacks
        except redis_errors.RedisClusterException as exc:
            code = exit_code(exc)
            raise fail(f"cannot reach the Cluster at {where}: {exc}", code) from exc
        except UnsupportedServerError:
            raise
        except CompozyMemoryError as exc:
            code = exit_code(exc)
            what = "authentication failed at" if code == EXIT_AUTH else "cannot reach"
            detail = exc.args[0] if exc.args else exc
            raise fail(f"{what} {where}: {detail}", code) from exc
        yield client
    finally:
        with suppress(redis_errors.RedisError, OSError, redis_errors.RedisClusterException):
            await client.aclose()


def memory_keys(project: str, key: str, *, text: bool = False) -> InstanceKeys:
    """The keys of a memory named as ``ls`` shows it (its stored key), or by its text."""
    validate_project(project)
    if text:
        return InstanceKeys.build(project, key)
    if not _STORED_KEY.fullmatch(key):
        raise fail(
            f"{key!r} is not a stored key (as `ls` shows them: letters, digits, - _ . : #); "
            "to name a memory by its text, add --text",
            EXIT_USAGE,
        )
    return InstanceKeys(project, key)


def open_memory(
    client: RedisClient, keys: InstanceKeys, *, read_only: bool, policy: MemoryPolicy | None = None
) -> MemoryInstance:
    """A handle that never retries (the CLI reports an unreachable server at once) and never
    loads a tokenizer (the CLI stores no message)."""
    from compozy_memory._io.retry import NO_RETRY
    from compozy_memory._model.tokens import HeuristicCounter
    from compozy_memory._store.instance import MemoryInstance

    return MemoryInstance(
        client,
        keys,
        policy=policy,
        read_only=read_only,
        batching=False,
        retry=NO_RETRY,
        counter=HeuristicCounter(),
        memory_id="cli",
    )


async def require_memory(client: RedisClient, keys: InstanceKeys) -> int | None:
    """Raise exit code 5 unless the memory has keys (meta or messages); return its TTL in ms
    (None: it never expires). By PTTL, which the read-only ACL line allows (EXISTS it does
    not need)."""
    from compozy_memory._io.translate import backend_errors

    with backend_errors("exists", keys.prefix):
        pipe = client.pipeline(transaction=False)
        pipe.pttl(keys.meta)
        pipe.pttl(keys.msgs)
        meta, msgs = (int(v) for v in await pipe.execute())
    if meta == -2 and msgs == -2:
        raise fail(f"no memory {keys.key!r} in project {keys.project!r}", EXIT_NOT_FOUND)
    ttl = meta if meta != -2 else msgs
    return ttl if ttl >= 0 else None


def format_ms(ms: int | None) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def format_ttl(ttl_ms: int | None, exists: bool = True) -> str:
    if not exists:
        return "gone"
    if ttl_ms is None:
        return "none"
    seconds = ttl_ms // 1000
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
