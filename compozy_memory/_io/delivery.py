"""How the scripts reach a server: as a Redis Functions library (FCALL), or by EVALSHA.

Functions are the default where the server has them (Redis 7+, Valkey 7.2+): a library is
persisted and replicated with the data, so no call meets NOSCRIPT after a restart or a
failover, and tenants need ``FCALL``/``FCALL_RO`` only, never ``EVAL`` (with which any script
of theirs could allocate past ``maxmemory`` or loop and stop the server for everyone).

The library is loaded by an operator (``compozy-memory install``) or, where the user may run
``FUNCTION LOAD``, on first use: a call that finds no function loads the library on the node
that answered and runs again (after several loads that another client's FUNCTION FLUSH undid,
that one call is sent with its source by EVALSHA/EVAL instead). A server without Functions, or
a user allowed ``EVALSHA`` but not ``FUNCTION LOAD``, gets the scripts by EVALSHA instead (see
:func:`~compozy_memory._io.translate.run_script`). The choice is made once per client.

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

Every decision here is written once, as client steps over the closed set of client effects
of :mod:`compozy_memory._io.client_calls`: the async driver and the sync one run the same
FCALL, load, fallback and version check on their clients.

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

from compozy_memory._io.client_calls import (
    PRIMARIES,
    ClientSteps,
    Exec,
    RefreshSlots,
    arun_client,
    is_cluster,
    is_standalone,
    run_client,
)
from compozy_memory._io.retry import RetryPolicy
from compozy_memory._io.translate import (
    backend_errors,
    error_cause,
    eval_commands,
    run_script,
    translate,
)
from compozy_memory._wire.scripts import SCRIPT_NAMES, Script, ScriptArg, library
from compozy_memory._wire.scripts import script as script_named
from compozy_memory._wire.server_version import check_server
from compozy_memory.errors import (
    BackendOutOfMemoryError,
    BackendPermissionError,
    BackendUnavailableError,
    ScriptError,
)

__all__ = [
    "Delivery",
    "delivery_for",
    "install",
    "install_steps",
    "require_supported",
    "supported_steps",
]

Mode = Literal["unknown", "functions", "eval"]

log = logging.getLogger("compozy_memory.delivery")


class Delivery:
    """The way one client's script calls travel."""

    def __init__(self, client: object, mode: Mode = "unknown") -> None:
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

    def _no_functions(self, reason: _NoFunctions, key: str) -> ClientSteps[None]:
        """The server has no Functions: refuse it if it is too old, else go by EVALSHA."""
        yield from supported_steps(self.client, key)
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

    def reload(self, script: Script, key: str) -> ClientSteps[tuple[str, str]]:
        """After ``needs_reload``: make the script available and say how to send it again."""
        if self.mode != "eval":
            try:
                yield from _load_library(self.client, None, key=key)
                return self.command(script)
            except _NoFunctions as exc:
                yield from self._no_functions(exc, key)
            except _LoadRefused as exc:
                # this user may not load the library; perhaps it may send the script
                self._fall_back(exc, key)
        return (eval_commands(script, self.client)[1], script.source)

    def run(
        self, script: Script, keys: Sequence[str], args: Sequence[ScriptArg], key: str
    ) -> ClientSteps[Any]:
        """Run ``script`` once; errors come out typed."""
        if self.mode != "eval":
            try:
                return (yield from self._fcall(script, keys, args, key))
            except _NoFunctions as exc:
                yield from self._no_functions(exc, key)
            except _LoadRefused as exc:
                self._fall_back(exc, key)
                try:
                    return (yield from run_script(self.client, script, keys, args, key))
                except BackendPermissionError as exc:
                    raise BackendPermissionError(
                        f"{script.name}: the server has no {library().name} functions library "
                        "and this user may load neither it nor scripts: an operator runs "
                        f"`compozy-memory install` once per server ({exc.args[0]})",
                        key=key,
                    ) from exc
        return (yield from run_script(self.client, script, keys, args, key))

    async def send(
        self, script: Script, keys: Sequence[str], args: Sequence[ScriptArg], key: str
    ) -> Any:
        """:meth:`run` on this delivery's async client (the batchers' unbatched road)."""
        return await arun_client(self.run(script, keys, args, key), self.client)

    def _fcall(
        self, script: Script, keys: Sequence[str], args: Sequence[ScriptArg], key: str
    ) -> ClientSteps[Any]:
        command = "FCALL_RO" if script.read_only else "FCALL"
        node = self._node(keys)
        for attempt in range(_LOAD_ATTEMPTS):
            try:
                reply = yield Exec(node, (command, script.function, len(keys), *keys, *args))
            except redis_errors.ResponseError as exc:
                if _unknown_command(exc):
                    raise _NoFunctions from exc
                if not _function_missing(exc):
                    raise translate(exc, script.name, key) from error_cause(exc)
                if attempt == _LOAD_ATTEMPTS - 1:
                    # the library keeps vanishing between our load and our call (FUNCTION
                    # FLUSH in a loop, a failover storm): this call carries its source
                    return (yield from run_script(self.client, script, keys, args, key))
                # Load the library on that node once; a lost reply raises
                # BackendUnavailableError, which the handle's RetryPolicy answers by
                # repeating the whole call.
                yield from _load_library(self.client, node, key=key)
                continue
            except redis_errors.RedisError as exc:
                raise translate(exc, script.name, key) from exc
            self.mode = "functions"
            return reply
        raise AssertionError("unreachable")  # pragma: no cover

    def warm(self, key: str) -> ClientSteps[None]:
        """Make every script ready on every primary before the first call needs one: the
        Functions library where the server has Functions (loading it where this user may),
        else every script by SCRIPT LOAD. A refusal to load is left for the first call to
        meet (an operator may have installed the library); an unreachable server raises, and
        so does one older than Redis 7.0 / Valkey 7.2 (UnsupportedServerError)."""
        yield from supported_steps(self.client, key)
        nodes: list[Any] = yield PRIMARIES
        for node in nodes:
            if self.mode != "eval":
                try:
                    yield from _load_library(self.client, node, key=key, retry=True)
                except _NoFunctions as exc:
                    yield from self._no_functions(exc, key)
                except (_LoadRefused, ScriptError, BackendOutOfMemoryError) as exc:
                    log.debug("warm: FUNCTION LOAD refused: %s", exc, extra={"key": key})
                    continue
                else:
                    continue
            for name in SCRIPT_NAMES:
                try:
                    yield Exec(node, ("SCRIPT", "LOAD", script_named(name).source))
                except redis_errors.ResponseError as exc:
                    log.debug("warm: SCRIPT LOAD refused: %s", exc, extra={"key": key})
                    break
                except redis_errors.RedisError as exc:
                    raise translate(exc, "warm", key) from exc

    def _node(self, keys: Sequence[str]) -> Any:
        if keys and is_cluster(self.client):
            return self.client.get_node_from_key(keys[0])  # type: ignore[attr-defined]
        return None


def _load_library(
    client: object, node: Any, *, key: str, replace: bool = False, retry: bool = False
) -> ClientSteps[bool]:
    """FUNCTION LOAD the library on ``node`` (None: the standalone server); True if this call
    loaded it, False if it was there already. Errors come out typed (_NoFunctions: the server
    has no Functions; _LoadRefused: this user may not load it). With ``retry``, a load whose
    reply was lost (BackendUnavailableError) is sent again within _SETUP_RETRY, and "already
    exists" then means the lost attempt loaded it."""
    del client
    command = ("FUNCTION", "LOAD", *(["REPLACE"] if replace else []), library().source)
    lost = False

    def attempt() -> ClientSteps[bool]:
        nonlocal lost
        try:
            return (yield from _load_once(node, command, key, lost))
        except BackendUnavailableError:
            lost = True
            raise

    if not retry:
        return (yield from attempt())
    return (yield from _SETUP_RETRY.steps(attempt, what="FUNCTION LOAD", key=key))


def _load_once(node: Any, command: tuple[Any, ...], key: str, lost: bool) -> ClientSteps[bool]:
    try:
        yield Exec(node, command)
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
        raise translate(exc, "FUNCTION LOAD", key) from exc
    return True


# install() and warm() load the library with no handle's RetryPolicy around them: their own.
_SETUP_RETRY = RetryPolicy()

# A call that finds no function loads the library and runs again; an operator's FUNCTION
# FLUSH (or a failover to a node without it) between the two can repeat that, a few times.
_LOAD_ATTEMPTS = 5


class _NoFunctions(Exception):
    """The server has no Functions (Redis before 7): scripts go by EVALSHA from now on."""


class _LoadRefused(Exception):
    """This user may not load the library; an operator can (``compozy-memory install``)."""


def _function_missing(exc: object) -> bool:
    return isinstance(exc, redis_errors.ResponseError) and "Function not found" in str(exc)


def _unknown_command(exc: redis_errors.ResponseError) -> bool:
    text = str(exc).lower()
    return "unknown command" in text and "fcall" in text


def supported_steps(client: object, key: str) -> ClientSteps[None]:
    """Raise UnsupportedServerError if a server of ``client`` (every primary of a Cluster) is
    older than Redis 7.0 / Valkey 7.2, from its ``INFO server``. Asked once per client while
    the answer is yes; a user who may not run INFO, or a server whose INFO names no version,
    passes (the first call meets what it must)."""
    if client in _SUPPORTED:
        return
    nodes: list[Any] = yield PRIMARIES
    for node in nodes:
        try:
            info = yield Exec(node, ("INFO", "server"))
        except redis_errors.ResponseError as exc:
            log.debug("INFO server refused, version not checked: %s", exc, extra={"key": key})
            return
        except redis_errors.RedisError as exc:
            raise translate(exc, "INFO server", key) from exc
        check_server(info, where=_address(client, node), key=key)
    _SUPPORTED.add(client)


async def require_supported(client: object, key: str) -> None:
    """:func:`supported_steps` on an async client."""
    await arun_client(supported_steps(client, key), client)


def _address(client: object, node: Any) -> str:
    if node is not None:
        return str(node.name)
    options = client.connection_pool.connection_kwargs if is_standalone(client) else {}  # type: ignore[attr-defined]
    if "path" in options:
        return str(options["path"])
    return f"{options.get('host', 'localhost')}:{options.get('port', 6379)}"


_SUPPORTED: weakref.WeakSet[Any] = weakref.WeakSet()
_DELIVERIES: weakref.WeakKeyDictionary[Any, Delivery] = weakref.WeakKeyDictionary()


def delivery_for(client: object) -> Delivery:
    """The shared delivery state of ``client``."""
    delivery = _DELIVERIES.get(client)
    if delivery is None:
        delivery = _DELIVERIES[client] = Delivery(client)
    return delivery


def install_steps(client: object, *, replace: bool = False) -> ClientSteps[list[str]]:
    """Load the Functions library on every primary; returns the nodes that loaded it now."""
    name = library().name
    loaded: list[str] = []
    if is_cluster(client):
        with backend_errors("install", name):
            yield from _refresh_slots(client)
    yield from supported_steps(client, name)
    nodes: list[Any] = yield PRIMARIES
    for node in nodes:
        try:
            now = yield from _load_library(client, node, key=name, replace=replace, retry=True)
        except _NoFunctions as exc:
            raise ScriptError(f"install: {exc.__cause__}", key=name) from exc
        except _LoadRefused as exc:
            raise exc.args[0] from exc
        if now:
            loaded.append("standalone" if node is None else node.name)
    return loaded


def _refresh_slots(client: object) -> ClientSteps[None]:
    """Ask a Cluster for its slot map again: a node added since the client started must be
    found."""
    yield PRIMARIES  # initialises an async client
    yield RefreshSlots()


async def install(client: object, *, replace: bool = False) -> list[str]:
    """Load the Functions library on every primary; returns the nodes that loaded it now.

    Idempotent: a node that has this version already is left alone. Run it again after adding
    a node to a Cluster. (:func:`install_sync` for redis-py's blocking clients.)"""
    return await arun_client(install_steps(client, replace=replace), client)


def install_sync(client: object, *, replace: bool = False) -> list[str]:
    """:func:`install` on a blocking client."""
    return run_client(install_steps(client, replace=replace), client)
