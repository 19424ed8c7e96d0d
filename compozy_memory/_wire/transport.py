"""How one handle's script calls reach Redis: retries, batching, WAIT, Cluster readiness.

Every call of a :class:`~compozy_memory._wire.gateway.MemoryGateway` goes through
:meth:`Transport.run`, which decides how it travels:

* with a :class:`WaitPolicy`, a write goes out in a pipeline of its own followed by ``WAIT``
  or ``WAITAOF``, so the acknowledgement counts that write's connection;
* otherwise, calls made in the same event-loop iteration share one pipeline on a standalone
  client (:mod:`compozy_memory._wire.batching`), one pipeline per node on a Cluster client
  (:mod:`compozy_memory._wire.cluster_batching`);
* with batching off, each call goes alone (on a Cluster, once the client is initialised).

Calls that meet an unreachable server are retried within the :class:`RetryPolicy`.

:class:`Transport` runs on ``redis.asyncio``;
:class:`~compozy_memory._wire.sync_transport.SyncTransport` is its twin on redis-py's blocking
clients (no batching: a thread's calls go one by one). Both drive the same steps
(:mod:`compozy_memory._wire.steps`): delivery, WAIT and the retry loop are written once.

Each call's latency, retries included, is observed once here in
``compozy_memory_operation_latency_seconds{memory, operation, outcome}``: the script's name
says the operation (:data:`OPERATIONS`), the outcome is ``ok`` or the error's class. Once
OpenTelemetry is on (:func:`compozy_memory.instrument_opentelemetry`), each memory operation
is also one span here (:mod:`compozy_memory._telemetry`), on both transports.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from redis import exceptions as redis_errors
from redis.asyncio import RedisCluster

from compozy_memory import _telemetry
from compozy_memory._metrics import MemoryMetrics, default_metrics
from compozy_memory._model.policy import WaitPolicy
from compozy_memory._wire.batching import batcher_for
from compozy_memory._wire.client_calls import Pipelined, is_standalone
from compozy_memory._wire.delivery import delivery_for
from compozy_memory._wire.retry import RetryPolicy
from compozy_memory._wire.scripts import Args, Keys, Script, ScriptArg
from compozy_memory._wire.steps import Op, Steps, adrive
from compozy_memory._wire.translate import RedisClient, backend_errors, translate
from compozy_memory.errors import ConfigurationError, ReplicationError, ScriptError

__all__ = ["OPERATIONS", "ScriptTransport", "Transport", "TransportBase"]

T = TypeVar("T")


class ScriptTransport(Protocol):
    """What the gateway needs of a transport (the real one, or a fake in unit tests)."""

    async def run(
        self, code: Script, keys: Keys, args: Args, *, key: str, write: bool = False
    ) -> Any: ...

    async def command(
        self, operation: str, method: str, *args: Any, key: str, **options: Any
    ) -> Any: ...


#: The operation each script performs, as the handle's method that sends it is named (the
#: metrics' ``operation`` label). ``read`` also serves replace() and trim(), which read the
#: live messages before their own script; plain commands name their operation themselves
#: (``recall``, ``len``, ``token_count``).
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
    "search": "search",
    "snapshot": "snapshot",
    "health": "health",
}

_clock = time.perf_counter


class TransportBase:
    """What both transports share: the client's delivery, the policies, the metrics, and
    the steps of a write followed by WAIT."""

    def __init__(
        self,
        client: Any,
        *,
        retry: RetryPolicy | None = None,
        wait: WaitPolicy | None = None,
        key: str = "",
        memory: str = "memory",
        metrics: MemoryMetrics | None = None,
    ) -> None:
        if wait is not None and not is_standalone(client):
            raise ConfigurationError(
                "persistence.wait needs a standalone client: WAIT and WAITAOF must follow the "
                "write on its own connection, which redis-py's Cluster client cannot do",
                key=key or None,
            )
        self.client = client
        self.retry = retry or RetryPolicy()
        self.wait = wait
        self.delivery = delivery_for(client)
        #: The memory resource id metrics and logs are labelled with.
        self.memory = memory
        self.metrics = metrics or default_metrics()
        # operation -> the latency child for (memory, operation, "ok"): one dict lookup a call
        self._ok: dict[str, Any] = {}
        # The server's (address, port) for telemetry, looked up at its first span.
        self._server: object = _UNKNOWN

    def server_address(self) -> tuple[str, int] | None:
        """The server's (address, port) for telemetry (None for a Cluster or a socket),
        looked up once."""
        if self._server is _UNKNOWN:
            self._server = _address(self.client)
        return self._server if isinstance(self._server, tuple) else None

    def _span(
        self, telemetry: _telemetry.Telemetry, operation: str, key: str, records: int | None
    ) -> AbstractContextManager[None]:
        """The OpenTelemetry span of one operation (only when telemetry is on)."""
        server = self.server_address()
        return telemetry.span(
            operation, store=key, resource=self.memory, server=server, records=records
        )

    def _bind(self, operation: str) -> Any:
        child = self.metrics.latency(self.memory, operation)
        self._ok[operation] = child
        return child

    def _failed(self, operation: str, exc: BaseException, started: float) -> None:
        # Errors are rare: the child is looked up (cached by the metrics) each time.
        outcome = "cancelled" if isinstance(exc, asyncio.CancelledError) else type(exc).__name__
        self.metrics.latency(self.memory, operation, outcome).observe(_clock() - started)

    def _run_and_wait(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[ScriptArg],
        wait: WaitPolicy,
        key: str,
    ) -> Steps[Any]:
        """Run a write script and then WAIT/WAITAOF on the same connection (one pipeline).

        WAIT counts the replicas that acknowledged this connection's writes, so it must follow
        the write on the connection that made it; a pipeline guarantees that."""
        reply: Any = None
        acks: Any = None
        delivery = self.delivery
        command, body = delivery.command(script)
        for attempt in range(3):
            try:
                reply, acks = yield Pipelined(
                    [(command, body, len(keys), *keys, *args), wait.command()]
                )
            except redis_errors.RedisError as exc:
                raise translate(exc, script.name, key) from exc
            if attempt == 2 or not delivery.needs_reload(reply):
                break
            command, body = yield from delivery.reload(script, key)
        if isinstance(reply, redis_errors.RedisError):
            raise translate(reply, script.name, key) from reply
        if isinstance(acks, redis_errors.RedisError):
            hint = " (WAITAOF needs Redis or Valkey 7.2+ with appendonly yes)" if wait.aof else ""
            raise ScriptError(
                f"{script.name} was applied, but {wait.command()[0]} failed: {acks}{hint}",
                key=key,
            ) from acks
        _check_acks(script.name, wait, acks, reply, key)
        return reply


class Transport(TransportBase):
    """The road every call of one memory handle takes to Redis, on ``redis.asyncio``."""

    def __init__(
        self,
        client: RedisClient,
        *,
        retry: RetryPolicy | None = None,
        wait: WaitPolicy | None = None,
        batching: bool = True,
        key: str = "",
        memory: str = "memory",
        metrics: MemoryMetrics | None = None,
    ) -> None:
        super().__init__(client, retry=retry, wait=wait, key=key, memory=memory, metrics=metrics)
        self.client: RedisClient = client
        self._batcher = batcher_for(client) if batching else None
        self._cluster_ready = not isinstance(client, RedisCluster)
        self._homed = False

    def serves_running_loop(self, *, claim: bool = True) -> bool:
        """Whether this transport's client belongs to the running event loop: the loop its
        first call ran on (the client's connections are that loop's), or, if it has made
        none yet and ``claim``, this one, which it then belongs to."""
        loop = asyncio.get_running_loop()
        home = _HOMES.get(self.client)
        if home is None:
            if not claim:
                return False
            self._home()
            return True
        return home() is loop

    def _home(self) -> None:
        _HOMES.setdefault(self.client, weakref.ref(asyncio.get_running_loop()))
        self._homed = True

    async def drive(self, steps: Steps[T] | Op[T]) -> T:
        """Run ``steps`` on this transport."""
        return await adrive(steps, self)

    async def run(
        self, code: Script, keys: Keys, args: Args, *, key: str, write: bool = False
    ) -> Any:
        """Run ``script``, retried within the policy; ``write`` calls wait for replicas when
        the policy asks. A write not acknowledged in time raises ReplicationError carrying
        the raw reply."""
        code.contract.check_keys(keys)
        if not self._homed:
            self._home()
        operation = OPERATIONS.get(code.name, code.name)
        work: Awaitable[Any] = self._run(code, keys, args, key, write, operation)
        telemetry = _telemetry.ACTIVE
        if telemetry is not None and operation in _telemetry.GENAI_OPERATIONS:
            records = _telemetry.record_count(code.contract.argv, args)
            work = self._traced(telemetry, operation, work, key, records)
        return await self._timed(operation, work)

    async def command(
        self, operation: str, method: str, *args: Any, key: str, **options: Any
    ) -> Any:
        """A plain redis-py command (``method`` of the client, given ``options`` as keyword
        arguments), retried like scripts."""

        async def attempt() -> Any:
            with backend_errors(operation, key):
                return await getattr(self.client, method)(*args, **options)

        async def call() -> Any:
            if not self._homed:
                self._home()
            await self._ready(key)
            return await self.retry.call(attempt, what=operation, memory=self.memory, key=key)

        work: Awaitable[Any] = call()
        telemetry = _telemetry.ACTIVE
        if telemetry is not None and operation in _telemetry.GENAI_OPERATIONS:
            work = self._traced(telemetry, operation, work, key, None)
        return await self._timed(operation, work)

    async def _traced(
        self,
        telemetry: _telemetry.Telemetry,
        operation: str,
        work: Awaitable[Any],
        key: str,
        records: int | None,
    ) -> Any:
        """``work`` inside its OpenTelemetry span."""
        with self._span(telemetry, operation, key, records):
            return await work

    async def _timed(self, operation: str, call: Awaitable[Any]) -> Any:
        """Await ``call``, observing its latency under ``operation`` and its outcome."""
        started = _clock()
        try:
            reply = await call
        except BaseException as exc:
            self._failed(operation, exc, started)
            raise
        child = self._ok.get(operation) or self._bind(operation)
        child.observe(_clock() - started)
        return reply

    async def _run(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[ScriptArg],
        key: str,
        write: bool,
        operation: str,
    ) -> Any:
        retry, memory = self.retry, self.memory
        wait = self.wait
        if wait is not None and write:
            return await retry.call(
                lambda: adrive(self._run_and_wait(script, keys, args, wait, key), self),
                what=operation,
                memory=memory,
                key=key,
            )
        batcher = self._batcher
        if batcher is not None:
            return await retry.call(
                lambda: batcher.run(script, keys, args, key=key),
                what=operation,
                memory=memory,
                key=key,
            )
        await self._ready(key)
        delivery = self.delivery
        return await retry.call(
            lambda: delivery.send(script, keys, args, key),
            what=operation,
            memory=memory,
            key=key,
        )

    async def _ready(self, key: str) -> None:
        if self._cluster_ready:
            return
        # redis-py initialises a cluster client lazily on its first command, and many tasks
        # making that first command at once race on half-open connections ('NoneType' object
        # has no attribute 'writelines'). initialize() is idempotent and takes redis-py's own
        # lock, so awaiting it once per handle makes the first use safe.
        assert isinstance(self.client, RedisCluster)
        with backend_errors("connect", key):
            await self.client.initialize()
        self._cluster_ready = True


_UNKNOWN = object()


def _address(client: Any) -> tuple[str, int] | None:
    """The (host, port) a standalone client connects to; None for a Cluster (a call's node
    is redis-py's choice) or a Unix socket."""
    if not is_standalone(client):
        return None
    options = client.connection_pool.connection_kwargs
    host, port = options.get("host"), options.get("port")
    return (str(host), int(port)) if host and port else None


# Each async client's event loop: the one its first call through a transport ran on.
_HOMES: weakref.WeakKeyDictionary[Any, weakref.ref[asyncio.AbstractEventLoop]] = (
    weakref.WeakKeyDictionary()
)


def _check_acks(name: str, wait: WaitPolicy, acks: Any, reply: Any, key: str) -> None:
    if wait.aof:
        local, replicas = (int(v) for v in acks)
        if local >= 1 and replicas >= wait.replicas:
            return
        seen = f"local fsync {local}/1, replicas {replicas}/{wait.replicas}"
        acknowledged = replicas
    else:
        acknowledged = int(acks)
        if acknowledged >= wait.replicas:
            return
        seen = f"{acknowledged}/{wait.replicas} replicas"
    raise ReplicationError(
        f"{name} was applied on the primary but not acknowledged within "
        f"{wait.timeout_ms} ms ({seen}); it is not undone. Repeat it with the same "
        "dedupe_key to wait again without writing twice",
        key=key,
        required=wait.replicas,
        acknowledged=acknowledged,
        reply=reply,
    )
