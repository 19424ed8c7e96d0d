"""How the scripts reach a server: as a Redis Functions library (FCALL), or by EVALSHA.

Functions are the default where the server has them (Redis 7+, Valkey 7.2+): a library is
persisted and replicated with the data, so no call meets NOSCRIPT after a restart or a
failover, and tenants need ``FCALL``/``FCALL_RO`` only, never ``EVAL`` (with which any script
of theirs could allocate past ``maxmemory`` or loop and stop the server for everyone).

The library is loaded by an operator (``compozy-memory install``) or, where the user may run
``FUNCTION LOAD``, on first use: a call that finds no function loads the library on the node
that answered and runs again (after several loads that another client's FUNCTION FLUSH undid,
that one call is sent with its source by EVALSHA/EVAL instead). A server without Functions,
or a user allowed ``EVALSHA`` but not ``FUNCTION LOAD``, gets the scripts by EVALSHA instead (see
:func:`~compozy_memory._wire.translate.run_script`). The choice is made once per client.

On a Cluster, redis-py would ask the server for the keys of every FCALL (``COMMAND GETKEYS``),
so calls are sent to the node that owns the first key's slot directly; redirects after a
resharding are followed by redis-py as for any command.

A server that answers FCALL with "unknown command" is asked its version (``INFO server``)
before anything falls back to EVALSHA: one older than Redis 7.0 or Valkey 7.2 is refused with
:class:`~compozy_memory.UnsupportedServerError` (:mod:`compozy_memory._wire.server_version`),
as it is by :func:`require_supported`, which ``warm()``, :func:`install` and the CLI call first.
A user who may not run ``INFO`` (a tenant, see ``compozy-memory acl``) is not refused by it.

Loading the library is idempotent (a second FUNCTION LOAD of the same library answers "already
exists"), so a load whose reply was lost is simply sent again: by the handle's RetryPolicy,
which repeats the whole call, or, for :func:`install` and ``warm()``, by a RetryPolicy of their
own. Either way the caller sees a typed error, never redis-py's ConnectionError.

Falling back to EVALSHA is logged once per client, at WARNING on ``compozy_memory.delivery``,
with its cause (``extra``: ``key``, the instance whose call found out; the client serves
every memory, so there is no one ``memory`` to name).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from typing import Any, Literal

from redis import exceptions as redis_errors
from redis.asyncio import Redis, RedisCluster

from compozy_memory._wire.retry import RetryPolicy
from compozy_memory._wire.scripts import SCRIPT_NAMES, Script, ScriptArg, library
from compozy_memory._wire.scripts import script as script_named
from compozy_memory._wire.server_version import check_server
from compozy_memory._wire.translate import (
    RedisClient,
    backend_errors,
    error_cause,
    eval_commands,
    run_script,
    translate,
)
from compozy_memory.errors import (
    BackendOutOfMemoryError,
    BackendPermissionError,
    BackendUnavailableError,
    ScriptError,
)

__all__ = ["Delivery", "delivery_for", "install", "require_supported"]

Mode = Literal["unknown", "functions", "eval"]

log = logging.getLogger("compozy_memory.delivery")


class Delivery:
    """The way one client's script calls travel."""

    def __init__(self, client: RedisClient, mode: Mode = "unknown") -> None:
        self.client = client
        self.mode: Mode = mode
        self._logged = False

    def _fall_back(self, reason: BaseException, key: str) -> None:
        """Log, once per client, that scripts go by EVALSHA, and why."""
        if self._logged:
            return
        self._logged = True
        cause = reason.__cause__ or reason
        why = (
            "the server has no Functions"
            if isinstance(reason, _NoFunctions)
            else "this user may not load the functions library (run `compozy-memory install`)"
        )
        log.warning(
            "falling back to EVALSHA on this client: %s (%s: %s)",
            why,
            type(cause).__name__,
            cause,
            extra={"key": key},
        )

    async def _no_functions(self, reason: _NoFunctions, key: str) -> None:
        """The server has no Functions: refuse it if it is too old, else go by EVALSHA."""
        await require_supported(self.client, key)
        self.mode = "eval"
        self._fall_back(reason, key)

    def command(self, script: Script) -> tuple[str, str]:
        """The command and first argument that run ``script`` in a pipeline."""
        if self.mode == "eval":
            return (eval_commands(script, self.client)[0], script.sha)
        return ("FCALL_RO" if script.read_only else "FCALL", script.function)

    def needs_reload(self, reply: object) -> bool:
        """Whether a pipelined call failed only because the server lacks the script (or
        Functions altogether): nothing ran, and it can be sent again."""
        if isinstance(reply, redis_errors.NoScriptError) or _function_missing(reply):
            return True
        return isinstance(reply, redis_errors.ResponseError) and _unknown_command(reply)

    async def reload(self, script: Script, key: str) -> tuple[str, str]:
        """After ``needs_reload``: make the script available and say how to send it again."""
        if self.mode != "eval":
            try:
                await self._load(None, key)
                return self.command(script)
            except _NoFunctions as exc:
                await self._no_functions(exc, key)
            except _LoadRefused as exc:
                # this user may not load the library; perhaps it may send the script
                self._fall_back(exc, key)
        return (eval_commands(script, self.client)[1], script.source)

    async def run(
        self, script: Script, keys: Sequence[str], args: Sequence[ScriptArg], key: str
    ) -> Any:
        """Run ``script`` once; errors come out typed."""
        if self.mode != "eval":
            try:
                return await self._fcall(script, keys, args, key)
            except _NoFunctions as exc:
                await self._no_functions(exc, key)
            except _LoadRefused as exc:
                self._fall_back(exc, key)
                try:
                    return await run_script(self.client, script, keys, args, key)
                except BackendPermissionError as exc:
                    raise BackendPermissionError(
                        f"{script.name}: the server has no {library().name} functions library "
                        "and this user may load neither it nor scripts: an operator runs "
                        f"`compozy-memory install` once per server ({exc.args[0]})",
                        key=key,
                    ) from exc
        return await run_script(self.client, script, keys, args, key)

    async def _fcall(
        self, script: Script, keys: Sequence[str], args: Sequence[ScriptArg], key: str
    ) -> Any:
        command = "FCALL_RO" if script.read_only else "FCALL"
        node = self._node(keys)
        for attempt in range(_LOAD_ATTEMPTS):
            try:
                reply = await self._send(node, command, script.function, len(keys), *keys, *args)
            except redis_errors.ResponseError as exc:
                if _unknown_command(exc):
                    raise _NoFunctions from exc
                if not _function_missing(exc):
                    raise translate(exc, script.name, key) from error_cause(exc)
                if attempt == _LOAD_ATTEMPTS - 1:
                    # the library keeps vanishing between our load and our call (FUNCTION
                    # FLUSH in a loop, a failover storm): this call carries its source
                    return await run_script(self.client, script, keys, args, key)
                await self._load(node, key)
                continue
            except redis_errors.RedisError as exc:
                raise translate(exc, script.name, key) from exc
            self.mode = "functions"
            return reply
        raise AssertionError("unreachable")  # pragma: no cover

    async def _load(self, node: Any, key: str) -> None:
        """Load the library on ``node`` once; a lost reply raises BackendUnavailableError,
        which the handle's RetryPolicy answers by repeating the whole call."""
        await _load_library(self.client, node, key=key)

    async def warm(self, key: str) -> None:
        """Make every script ready on every primary before the first call needs one: the
        Functions library where the server has Functions (loading it where this user may),
        else every script by SCRIPT LOAD. A refusal to load is left for the first call to
        meet (an operator may have installed the library); an unreachable server raises, and
        so does one older than Redis 7.0 / Valkey 7.2 (UnsupportedServerError)."""
        await require_supported(self.client, key)
        for node in await _primaries(self.client):
            if self.mode != "eval":
                try:
                    await _load_library(self.client, node, key=key, retry=_SETUP_RETRY)
                except _NoFunctions as exc:
                    await self._no_functions(exc, key)
                except (_LoadRefused, ScriptError, BackendOutOfMemoryError) as exc:
                    log.debug("warm: FUNCTION LOAD refused: %s", exc, extra={"key": key})
                    continue
                else:
                    continue
            for name in SCRIPT_NAMES:
                try:
                    await self._send(node, "SCRIPT", "LOAD", script_named(name).source)
                except redis_errors.ResponseError as exc:
                    log.debug("warm: SCRIPT LOAD refused: %s", exc, extra={"key": key})
                    break
                except redis_errors.RedisError as exc:
                    raise translate(exc, "warm", key) from exc

    def _node(self, keys: Sequence[str]) -> Any:
        if isinstance(self.client, RedisCluster) and keys:
            return self.client.get_node_from_key(keys[0])
        return None

    async def _send(self, node: Any, *command: Any) -> Any:
        return await _send(self.client, node, *command)


async def _send(client: RedisClient, node: Any, *command: Any) -> Any:
    if node is not None:
        return await client.execute_command(*command, target_nodes=node)
    return await client.execute_command(*command)


async def _load_library(
    client: RedisClient,
    node: Any,
    *,
    key: str,
    replace: bool = False,
    retry: RetryPolicy | None = None,
) -> bool:
    """FUNCTION LOAD the library on ``node`` (None: the standalone server); True if this call
    loaded it, False if it was there already. Errors come out typed (_NoFunctions: the server
    has no Functions; _LoadRefused: this user may not load it). With ``retry``, a load whose
    reply was lost (BackendUnavailableError) is sent again, and "already exists" then means
    the lost attempt loaded it."""
    command = ["FUNCTION", "LOAD", *(["REPLACE"] if replace else []), library().source]
    lost = False

    async def attempt() -> bool:
        nonlocal lost
        try:
            await _send(client, node, *command)
        except redis_errors.ResponseError as exc:
            text = str(exc)
            if "already exists" in text:
                return lost  # loaded by our attempt whose reply was lost, or by another client
            if "unknown command" in text.lower():
                raise _NoFunctions(exc) from exc
            error = translate(exc, "FUNCTION LOAD", key)
            if isinstance(error, BackendPermissionError):
                raise _LoadRefused(error) from exc
            raise error from exc
        except redis_errors.RedisError as exc:
            error = translate(exc, "FUNCTION LOAD", key)
            lost = lost or isinstance(error, BackendUnavailableError)
            raise error from exc
        return True

    if retry is None:
        return await attempt()
    return await retry.call(attempt, what="FUNCTION LOAD", key=key)


# install() and warm() load the library with no handle's RetryPolicy around them: their own.
_SETUP_RETRY = RetryPolicy()

# A call that finds no function loads the library and runs again; an operator's FUNCTION
# FLUSH (or a failover to a node without it) between the two can repeat that, a few times.
_LOAD_ATTEMPTS = 5


class _NoFunctions(Exception):
    """The server has no Functions (Redis before 7): scripts go by EVALSHA from now on."""


class _LoadRefused(Exception):
    """This user may not load the library; an operator can (``compozy-memory install``)."""


async def _primaries(client: RedisClient) -> list[Any]:
    """The nodes to send a command to each of: every primary of a Cluster, else [None]."""
    if isinstance(client, RedisCluster):
        await client.initialize()
        return list(client.get_primaries())
    return [None]


def _function_missing(exc: object) -> bool:
    return isinstance(exc, redis_errors.ResponseError) and "Function not found" in str(exc)


def _unknown_command(exc: redis_errors.ResponseError) -> bool:
    text = str(exc).lower()
    return "unknown command" in text and "fcall" in text


async def require_supported(client: RedisClient, key: str) -> None:
    """Raise UnsupportedServerError if a server of ``client`` (every primary of a Cluster) is
    older than Redis 7.0 / Valkey 7.2, from its ``INFO server``. Asked once per client while
    the answer is yes; a user who may not run INFO, or a server whose INFO names no version,
    passes (the first call meets what it must)."""
    if client in _SUPPORTED:
        return
    for node in await _primaries(client):
        try:
            info = await _send(client, node, "INFO", "server")
        except redis_errors.ResponseError as exc:
            log.debug("INFO server refused, version not checked: %s", exc, extra={"key": key})
            return
        except redis_errors.RedisError as exc:
            raise translate(exc, "INFO server", key) from exc
        check_server(info, where=_address(client, node), key=key)
    _SUPPORTED.add(client)


def _address(client: RedisClient, node: Any) -> str:
    if node is not None:
        return str(node.name)
    options = client.connection_pool.connection_kwargs if isinstance(client, Redis) else {}
    if "path" in options:
        return str(options["path"])
    return f"{options.get('host', 'localhost')}:{options.get('port', 6379)}"


_SUPPORTED: weakref.WeakSet[RedisClient] = weakref.WeakSet()
_DELIVERIES: weakref.WeakKeyDictionary[RedisClient, Delivery] = weakref.WeakKeyDictionary()


def delivery_for(client: RedisClient) -> Delivery:
    """The shared delivery state of ``client``."""
    delivery = _DELIVERIES.get(client)
    if delivery is None:
        delivery = _DELIVERIES[client] = Delivery(client)
    return delivery


async def install(client: RedisClient, *, replace: bool = False) -> list[str]:
    """Load the Functions library on every primary; returns the nodes that loaded it now.

    Idempotent: a node that has this version already is left alone. Run it again after adding
    a node to a Cluster."""
    name = library().name
    loaded: list[str] = []
    if isinstance(client, RedisCluster):
        with backend_errors("install", name):
            await client.initialize()
            # Ask again for the slot map: a node added since the client started must be found.
            await client.nodes_manager.initialize()
    await require_supported(client, name)
    for node in await _primaries(client):
        try:
            now = await _load_library(client, node, key=name, replace=replace, retry=_SETUP_RETRY)
        except _NoFunctions as exc:
            raise ScriptError(f"install: {exc.__cause__}", key=name) from exc
        except _LoadRefused as exc:
            raise exc.args[0] from exc
        if now:
            loaded.append("standalone" if node is None else node.name)
    return loaded
