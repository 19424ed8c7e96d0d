"""The async driver: how one handle's steps run on ``redis.asyncio``, and its calls travel.

:meth:`Transport.drive` runs steps (:mod:`compozy_memory._wire.steps`), performing each effect
of the closed set (:mod:`compozy_memory._wire.effects`) in one ``match`` (:func:`adrive`).
Every :class:`~compozy_memory._wire.effects.Call` goes through :meth:`Transport.call`, which
decides how it travels:

* with a :class:`WaitPolicy`, a write goes out in a pipeline of its own followed by ``WAIT``
  or ``WAITAOF``, so the acknowledgement counts that write's connection;
* otherwise, calls made in the same event-loop iteration share one pipeline on a standalone
  client (:mod:`compozy_memory._io.batching`), one pipeline per node on a Cluster client
  (:mod:`compozy_memory._io.cluster_batching`);
* with batching off, each call goes alone (on a Cluster, once the client is initialised).

Calls that meet an unreachable server are retried within the :class:`RetryPolicy`.

:class:`Transport` runs on ``redis.asyncio``;
:class:`~compozy_memory._io.sync_transport.SyncTransport` is its twin on redis-py's blocking
clients (no batching: a thread's calls go one by one). Both drive the same steps
(:mod:`compozy_memory._wire.steps`): delivery, WAIT and the retry loop are written once.

Each call's latency, retries included, is observed once here in
``compozy_memory_operation_latency_seconds{memory, operation, outcome}``: the call names its
operation, the outcome is ``ok`` or the error's class. Once OpenTelemetry is on
(:func:`compozy_memory.instrument_opentelemetry`), each memory operation is also one span here
(:mod:`compozy_memory._telemetry`), on both transports. The core's other measurements reach
the metrics as :class:`~compozy_memory._wire.effects.Observe` effects.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar, assert_never

from redis import exceptions as redis_errors
from redis.asyncio import RedisCluster

from compozy_memory import _telemetry
from compozy_memory._io.batching import batcher_for
from compozy_memory._io.client_calls import (
    ClientSteps,
    Pipelined,
    arun_client,
    command_options,
    is_standalone,
)
from compozy_memory._io.counting import count_texts
from compozy_memory._io.delivery import delivery_for
from compozy_memory._io.retry import RetryPolicy
from compozy_memory._io.translate import RedisClient, backend_errors, translate
from compozy_memory._metrics import MemoryMetrics, default_metrics
from compozy_memory._model.policy import WaitPolicy
from compozy_memory._wire.effects import (
    ABOUT,
    Await,
    Call,
    Command,
    Count,
    Gather,
    Hold,
    MetricsSink,
    Observe,
    Offload,
    RunScript,
    Sleep,
)
from compozy_memory._wire.scripts import Script, ScriptArg
from compozy_memory._wire.steps import Op, Steps
from compozy_memory.errors import (
    ConfigurationError,
    EventLoopError,
    ReplicationError,
    ScriptError,
)

__all__ = ["CallTransport", "Transport", "TransportBase", "adrive"]

T = TypeVar("T")


class CallTransport(Protocol):
    """What :func:`adrive` needs of a driver (the real one, or a fake in unit tests): its
    calls performed (the raw reply), and where measurements go."""

    @property
    def metrics(self) -> MetricsSink: ...

    async def call(self, call: Call[Any]) -> Any: ...


async def adrive(steps: Steps[T] | Op[T], io: CallTransport) -> T:
    """Run ``steps`` on the async driver ``io``: each effect performed, its outcome (or its
    exception) handed back, until the steps return."""
    gen = iter(steps)
    try:
        effect = gen.send(None)
        while True:
            try:
                match effect:
                    case Call():
                        value: Any = effect.decode(await io.call(effect))
                    case Observe(into=into):
                        (into or io.metrics).record(effect)
                        value = None
                    case Count(counter, texts):
                        value = await count_texts(counter, texts)
                    case Sleep(seconds):
                        await asyncio.sleep(seconds)
                        value = None
                    case Offload(work):
                        value = await asyncio.to_thread(work)
                    case Gather(steps=several):
                        value = list(await asyncio.gather(*(adrive(s, io) for s in several)))
                    case Await(make, None):
                        value = await make()
                    case Await(make, deadline):
                        async with asyncio.timeout(deadline):
                            value = await make()
                    case Hold(keeper, work):
                        value = await keeper.hold(lambda: adrive(work, io))
                    case _:  # mypy checks that every effect has its case
                        assert_never(effect)
            except BaseException as exc:  # the steps decide: they may catch it
                effect = gen.throw(exc)
            else:
                effect = gen.send(value)
    except StopIteration as done:
        result: T = done.value
        return result


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
        content = None
        if telemetry.capture_content:  # what the operation is about, as its steps said
            about = ABOUT.get()
            if about is not None:
                content = _telemetry.content(records=about.records, query=about.query)
        return telemetry.span(
            operation,
            store=key,
            resource=self.memory,
            server=server,
            records=records,
            content=content,
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
    ) -> ClientSteps[Any]:
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

    async def call(self, call: Call[Any]) -> Any:
        """Perform ``call``: a script retried within the policy (a write waited for by
        replicas when the policy asks: ReplicationError, carrying the raw reply, when they do
        not), or a command retried like scripts; the raw reply."""
        operation = call.operation
        send = call.send
        key = call.key
        if not self._homed:
            self._home()
        home = _HOMES.get(self.client)
        if home is not None and home() is not asyncio.get_running_loop():
            raise _foreign_loop(home(), operation or "call", key)
        if isinstance(send, RunScript):
            code, keys, args = send.script, send.keys, send.args
            code.contract.check_keys(keys)
            if operation is None:
                return await self._run(code, keys, args, key, call.write, code.name)
            work: Awaitable[Any] = self._run(code, keys, args, key, call.write, operation)
            records: int | None = None
            telemetry = _telemetry.ACTIVE
            if telemetry is not None and operation in _telemetry.GENAI_OPERATIONS:
                records = _telemetry.record_count(code.contract.argv, args)
                work = self._traced(telemetry, operation, work, key, records)
            return await self._timed(operation, work)
        if operation is None:  # not a memory operation: once, untimed, untraced
            with backend_errors("command", key):
                return await getattr(self.client, send.method)(*send.args, **command_options(send))
        work = self._command(operation, send, key)
        telemetry = _telemetry.ACTIVE
        if telemetry is not None and operation in _telemetry.GENAI_OPERATIONS:
            work = self._traced(telemetry, operation, work, key, None)
        return await self._timed(operation, work)

    async def _command(self, operation: str, send: Command, key: str) -> Any:
        method, args, options = getattr(self.client, send.method), send.args, command_options(send)

        async def attempt() -> Any:
            with backend_errors(operation, key):
                return await method(*args, **options)

        await self._ready(key)
        return await self.retry.call(attempt, what=operation, memory=self.memory, key=key)

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
                lambda: arun_client(self._run_and_wait(script, keys, args, wait, key), self.client),
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


def _foreign_loop(home: asyncio.AbstractEventLoop | None, operation: str, key: str) -> Exception:
    """The typed error for a call on a loop other than its client's (``home``: None when
    that loop is gone). redis.asyncio binds a client's connections to the loop they were made
    on; from another loop it fails with an untyped RuntimeError, or worse."""
    gone = home is None or home.is_closed()
    return EventLoopError(
        f"{operation}: this handle's redis.asyncio client made its connections on another "
        f"event loop{' (now closed: an earlier asyncio.run)' if gone else ''}; a client "
        "serves the loop it was first used on: open a client (and its handles) in this loop, "
        "or use SyncMemoryInstance from threads. Nothing was sent.",
        key=key,
    )


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
