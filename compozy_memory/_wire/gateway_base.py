"""What every gateway of a memory shares: how a script call is built and decoded.

:class:`GatewayBase` builds a script's KEYS from the names its header declares and its ARGV by
name through the script's :class:`~compozy_memory._wire.contracts.Contract`, as a
:class:`~compozy_memory._wire.steps.ScriptCall` effect, and decodes the reply by the names of
its ``REPLY`` line. It sends nothing itself: its methods are steps, which the handle's
transport drives (:class:`~compozy_memory._wire.transport.Transport` on ``redis.asyncio``,
:class:`~compozy_memory._wire.sync_transport.SyncTransport` on redis-py's blocking client), or
which ``await`` runs on the transport the gateway was made with.
:class:`~compozy_memory._wire.gateway.MemoryGateway` adds a method per script.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compozy_memory._metrics import MemoryMetrics, default_metrics
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.policy import MemoryPolicy
from compozy_memory._wire.scripts import ScriptArg, script
from compozy_memory._wire.steps import CommandCall, ScriptCall
from compozy_memory.errors import ReadOnlyMemoryError

__all__ = ["WAITED", "GatewayBase"]


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
        metrics: MemoryMetrics | None = None,
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
        self.metrics = metrics or default_metrics()
        # Each script's KEYS for this memory, built once: a dozen f-strings per call otherwise.
        self._keys_of: dict[str, list[str]] = {}

    def _decode(self, name: str, reply: Any) -> dict[str, Any]:
        return script(name).contract.decode(reply)

    def _check_writable(self, name: str) -> None:
        if self.read_only:
            raise ReadOnlyMemoryError(f"{name} refused: this handle is read-only", key=self.name)

    def _writing(
        self, name: str, values: dict[str, ScriptArg], rest: Sequence[ScriptArg] = ()
    ) -> ScriptCall:
        """The call of write script ``name`` (ReadOnlyMemoryError on a read-only handle)."""
        self._check_writable(name)
        return self._call(name, values, rest, write=name in WAITED)

    def _reading(
        self, name: str, values: dict[str, ScriptArg], rest: Sequence[ScriptArg] = ()
    ) -> ScriptCall:
        return self._call(name, values, rest, write=False)

    def _call(
        self, name: str, values: dict[str, ScriptArg], rest: Sequence[ScriptArg], *, write: bool
    ) -> ScriptCall:
        code = script(name)
        contract = code.contract
        keys = self._keys_of.get(name)
        if keys is None:
            keys = self._keys_of[name] = [getattr(self.keys, part) for part in contract.keys]
        # Text goes as UTF-8 whatever encoding the client is set up with, as bodies do.
        args = [a.encode() if isinstance(a, str) else a for a in contract.argv_for(values, rest)]
        return ScriptCall(code, keys, args, self.name, write)

    def _command(self, operation: str, method: str, *args: Any) -> CommandCall:
        """A plain command on this memory's keys (``operation`` names it in the metrics)."""
        return CommandCall(operation, method, args, self.name)


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
