"""What every gateway of a memory shares: how a script call is built and decoded.

:class:`GatewayBase` builds a script's KEYS from the names its header declares and its ARGV by
name through the script's :class:`~compozy_memory._wire.contracts.Contract`, as a
:class:`~compozy_memory._wire.effects.Call` effect that carries its decoder (the reply by the
names of its ``REPLY`` line, then a result type), so ``yield from`` it returns that type. It
sends nothing itself: its methods are steps, which the handle's driver runs
(:class:`~compozy_memory._io.transport.Transport` on ``redis.asyncio``,
:class:`~compozy_memory._io.sync_transport.SyncTransport` on redis-py's blocking client), or
which ``await`` runs on the driver the gateway was made with. Each call names its operation
(:data:`OPERATIONS`), which the driver's metrics and spans are labelled with.
:class:`~compozy_memory._wire.gateway.MemoryGateway` adds a method per script.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from compozy_memory._model import limits
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.policy import MemoryPolicy
from compozy_memory._wire.effects import Call, Command, RunScript
from compozy_memory._wire.scripts import Script, ScriptArg, script
from compozy_memory.errors import ReadOnlyMemoryError, UsageError

__all__ = ["OPERATIONS", "VARIADIC_MOST", "WAITED", "GatewayBase", "script_call"]

T = TypeVar("T")

#: The operation each script performs, as the handle's method that sends it is named (the
#: metrics' ``operation`` label); a script not named here is its own operation. ``read``
#: also serves replace() and trim(), which read the live messages before their own script;
#: plain commands name their operation themselves (``recall``, ``len``, ``token_count``).
OPERATIONS: dict[str, str] = {
    "append": "append",
    "replace": "replace",
    "trim": "trim",
    "clear": "clear",
    "expire": "set_ttl",
    "flush_commit": "flush_commit",
    "lock_acquire": "lock_acquire",
    "lock_refresh": "lock_refresh",
    "lock_release": "lock_release",
    "promote": "recall_messages",
    "clear_recalled": "clear_recalled",
    "read": "read",
    "context": "context",
    "search_fetch": "search",
    "snapshot": "snapshot",
    "health": "health",
}


#: The most arguments each script with a variadic part takes past its named ones: what its
#: own checks allow. The server makes every argument a Lua string before a script's first
#: line runs (a million cost it about half a second), so a call past this is refused here,
#: before anything is sent (``tests/test_contracts.py`` checks every variadic script has one).
VARIADIC_MOST: dict[str, int] = {
    "append": 3 * limits.MAX_BATCH,
    "replace": 3 * limits.MAX_BATCH,
    "import": limits.MAX_BATCH,
    "flush_commit": 2 * limits.MOVE_STEP + limits.MAX_PINNED + limits.MAX_SUMMARIES,
    "promote": limits.MAX_RECALL_IDS,
    "facts_set": 3 * limits.MAX_FACTS_PER_CALL,
    "facts_delete": limits.MAX_FACTS_PER_CALL,
    "session_touch": 5 * limits.MAX_BATCH,
    "index_add": 2 * limits.INDEX_STEP_DOCS + 2 * limits.STEP_FIELDS,
    "index_read": limits.INDEX_READ_FIELDS,
    "index_merge": 2 * limits.STEP_FIELDS,
    "index_put": 2 * limits.STEP_FIELDS,
    "vec_apply": 2 * limits.VECTOR_STEP_DOCS,
    "search_candidates": limits.MAX_SEARCH_CANDIDATES,
    "search_fetch": limits.MAX_SEARCH_CANDIDATES,
}


def check_arguments(code: Script, args: Sequence[ScriptArg], key: str) -> None:
    """Refuse (UsageError, nothing sent) a call with more arguments than ``code`` takes."""
    extra = len(args) - len(code.contract.argv)
    most = VARIADIC_MOST.get(code.name, 0)
    if extra > most:
        raise UsageError(
            f"{code.name}: {extra} arguments past the named ones, at most {most} "
            "(nothing was sent)",
            key=key,
        )


def script_call(
    name: str,
    keys: Sequence[str],
    args: Sequence[ScriptArg],
    key: str,
    decode: Callable[[Any], T],
    *,
    write: bool = False,
) -> Call[T]:
    """The call of script ``name`` with ``keys`` and ``args`` (laid out by its contract);
    UsageError, with nothing sent, for more arguments than it takes (VARIADIC_MOST)."""
    code = script(name)
    check_arguments(code, args, key)
    return Call(OPERATIONS.get(name, name), key, RunScript(code, keys, args), decode, write)


class GatewayBase:
    """One memory's keys, policy and transport, and the sending of its script calls."""

    def __init__(
        self,
        transport: Any,
        keys: InstanceKeys,
        policy: MemoryPolicy,
        *,
        read_only: bool = False,
        memory: str = "memory",
    ) -> None:
        self.transport = transport
        self.keys = keys
        self.policy = policy
        self.read_only = read_only
        #: The TTL every write sets, in milliseconds (0: none); ``expire`` changes it.
        self.ttl_ms = policy.ttl_ms
        #: The memory's key prefix, named in errors and logs.
        self.name = keys.prefix
        #: The incarnation and version the last reply named (a write's, or a read's): what a
        #: compare-and-set without one expects.
        self.incarnation = ""
        self.version = ""
        #: The memory resource id metrics are labelled with (never the key: cardinality).
        self.memory = memory
        self._labels = (memory,)
        # Each script's KEYS for this memory, built once: a dozen f-strings per call otherwise.
        self._keys_of: dict[str, list[str]] = {}

    def _fields(self, name: str) -> Callable[[Any], dict[str, Any]]:
        """The decoder of script ``name``'s reply: its values by the names of its ``REPLY``."""
        return script(name).contract.decode

    def _check_writable(self, name: str) -> None:
        if self.read_only:
            raise ReadOnlyMemoryError(f"{name} refused: this handle is read-only", key=self.name)

    def _writing(
        self,
        name: str,
        values: dict[str, ScriptArg],
        decode: Callable[[Any], T],
        rest: Sequence[ScriptArg] = (),
    ) -> Call[T]:
        """The call of write script ``name`` (ReadOnlyMemoryError on a read-only handle)."""
        self._check_writable(name)
        return self._call(name, values, rest, decode, write=name in WAITED)

    def _reading(
        self,
        name: str,
        values: dict[str, ScriptArg],
        decode: Callable[[Any], T],
        rest: Sequence[ScriptArg] = (),
    ) -> Call[T]:
        return self._call(name, values, rest, decode, write=False)

    def _call(
        self,
        name: str,
        values: dict[str, ScriptArg],
        rest: Sequence[ScriptArg],
        decode: Callable[[Any], T],
        *,
        write: bool,
    ) -> Call[T]:
        code = script(name)
        contract = code.contract
        keys = self._keys_of.get(name)
        if keys is None:
            keys = self._keys_of[name] = [getattr(self.keys, part) for part in contract.keys]
        # Text goes as UTF-8 whatever encoding the client is set up with, as bodies do.
        args = [a.encode() if isinstance(a, str) else a for a in contract.argv_for(values, rest)]
        check_arguments(code, args, self.name)
        return Call(
            OPERATIONS.get(name, name), self.name, RunScript(code, keys, args), decode, write
        )

    def _command(
        self, operation: str, decode: Callable[[Any], T], method: str, *args: object
    ) -> Call[T]:
        """A plain command on this memory's keys (``operation`` names it in the metrics)."""
        return Call(operation, self.name, Command(method, args), decode)


# Scripts that change the memory: with a WaitPolicy each is followed by WAIT or WAITAOF, and
# so is the lock's acquisition, whose fencing epoch must survive a failover (FencedLock hands
# out no lease the replicas did not acknowledge). Refresh and release are not: a lease is
# short-lived, and fenced by that epoch. Index steps are not either: the index is derived,
# and rebuilt where it was lost.
WAITED = frozenset(
    {
        "append",
        "replace",
        "trim",
        "clear",
        "expire",
        "flush_commit",
        "lock_acquire",
        "promote",
        "clear_recalled",
        "facts_set",
        "facts_delete",
        "import",
    }
)
