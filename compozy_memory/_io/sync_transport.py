"""The sync driver: one handle's steps run, and its calls sent, on redis-py's blocking clients.

:meth:`SyncTransport.drive` runs steps in the calling thread, performing each effect of the
closed set (:mod:`compozy_memory._wire.effects`) in one ``match`` (:func:`drive`).
:class:`SyncTransport` is :class:`~compozy_memory._io.transport.Transport`'s twin on
``redis.Redis`` and ``redis.cluster.RedisCluster``: the same delivery (FCALL or EVALSHA, the
library loaded where missing, old servers refused), the same WAIT/WAITAOF after writes, the
same :class:`RetryPolicy` loop and the same latency metric, all driven from the steps they
share. What it does not do is batch: a thread's calls go one by one (each blocking its thread
only), and many threads' calls share the client's connection pool, which redis-py makes safe
to use from several threads. The usual append goes as a checked transaction on a client of
one server, as on the async road (:mod:`compozy_memory._wire.optimistic`), one append at a
time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, TypeVar, assert_never

from redis import exceptions as redis_errors

from compozy_memory import _telemetry
from compozy_memory._io.client_calls import (
    ClientSteps,
    SyncRedisClient,
    command_options,
    is_standalone,
    run_client,
)
from compozy_memory._io.counting import count_all
from compozy_memory._io.retry import RetryPolicy
from compozy_memory._io.transactions import Transactions, run_on_connection, transactions_for
from compozy_memory._io.translate import backend_errors, translate
from compozy_memory._io.transport import TransportBase
from compozy_memory._metrics import MemoryMetrics
from compozy_memory._model.policy import WaitPolicy
from compozy_memory._wire.effects import (
    Await,
    Call,
    Count,
    Gather,
    Hold,
    MetricsSink,
    Observe,
    Offload,
    RunScript,
    Sleep,
)
from compozy_memory._wire.optimistic import AppendPlan
from compozy_memory._wire.steps import Op, Steps
from compozy_memory._wire.summarizer_loop import run_coroutine
from compozy_memory._wire.transaction import transaction

__all__ = ["SyncCallTransport", "SyncTransport", "drive"]

T = TypeVar("T")

_clock = time.perf_counter


class SyncCallTransport(Protocol):
    """What :func:`drive` needs of a sync driver: its calls performed (the raw reply), and
    where measurements go."""

    @property
    def metrics(self) -> MetricsSink: ...

    def call(self, call: Call[Any]) -> Any: ...


def drive(
    steps: Steps[T] | Op[T], io: SyncCallTransport, *, between: Callable[[], None] | None = None
) -> T:
    """Run ``steps`` on the sync driver ``io``, in the calling thread. ``between`` runs
    before each effect; what it raises is thrown into the steps as the effect's failure
    would be."""
    gen = iter(steps)
    try:
        effect = gen.send(None)
        while True:
            try:
                if between is not None:
                    between()
                match effect:
                    case Call():
                        value: Any = effect.decode(io.call(effect))
                    case Observe(into=into):
                        (into or io.metrics).record(effect)
                        value = None
                    case Count(counter, texts):
                        value = count_all(counter, texts) if texts else []
                    case Sleep(seconds):
                        if seconds > 0:
                            time.sleep(seconds)
                        value = None
                    case Offload(work):
                        value = work()
                    case Gather(steps=several):
                        value = [drive(s, io) for s in several]
                    case Await(make, deadline):
                        value = run_coroutine(make(), deadline)
                    case Hold(keeper, work):
                        value = keeper.hold_sync(work, io)
                    case _:  # mypy checks that every effect has its case
                        assert_never(effect)
            except BaseException as exc:
                effect = gen.throw(exc)
            else:
                effect = gen.send(value)
    except StopIteration as done:
        result: T = done.value
        return result


class SyncTransport(TransportBase):
    """The road every call of one synchronous memory handle takes to Redis."""

    synchronous: ClassVar[bool] = True

    def __init__(
        self,
        client: SyncRedisClient,
        *,
        retry: RetryPolicy | None = None,
        wait: WaitPolicy | None = None,
        key: str = "",
        memory: str = "memory",
        metrics: MemoryMetrics | None = None,
    ) -> None:
        super().__init__(client, retry=retry, wait=wait, key=key, memory=memory, metrics=metrics)
        self.client: SyncRedisClient = client
        # The usual append as a checked transaction, on a client of one server (a Cluster's
        # appends call the function): compozy_memory._wire.optimistic.
        self._transactions = transactions_for(client) if is_standalone(client) else None

    def drive(self, steps: Steps[T] | Op[T], *, between: Callable[[], None] | None = None) -> T:
        """Run ``steps`` on this transport, in the calling thread."""
        return drive(steps, self, between=between)

    def call(self, call: Call[Any]) -> Any:
        """Perform ``call``: a script retried within the policy (a write waited for by
        replicas when the policy asks: ReplicationError, carrying the raw reply, when they do
        not), or a command retried like scripts; the raw reply."""
        send, key = call.send, call.key
        if not isinstance(send, RunScript):
            method = getattr(self.client, send.method)
            arguments, options = send.args, command_options(send)
            if call.operation is None:  # not a memory operation: once, untimed, untraced
                with backend_errors("command", key):
                    return method(*arguments, **options)
            operation = call.operation

            def attempt() -> Any:
                with backend_errors(operation, key):
                    return method(*arguments, **options)

            return self._timed(
                operation,
                key,
                None,
                lambda: self.retry.call_sync(attempt, what=operation, memory=self.memory, key=key),
            )
        code, keys, args = send.script, send.keys, send.args
        code.contract.check_keys(keys)
        operation = call.operation or code.name
        wait = self.wait
        if wait is not None and call.write:
            steps: Callable[[], ClientSteps[Any]] = lambda: self._run_and_wait(  # noqa: E731
                code, keys, args, wait, key
            )
        else:
            steps = lambda: self.delivery.run(code, keys, args, key)  # noqa: E731
            if self._transactions is not None and code.name == "append":
                state = self._transactions

                def attempt() -> Any:
                    plan = state.plan(code, keys, args)
                    if plan is not None:
                        reply = self._planned(state, plan, code.name, key)
                        if reply is not None:
                            return reply
                    return run_client(steps(), self.client)

                return self._timed(
                    operation,
                    key,
                    _telemetry.record_count(code.contract.argv, args),
                    lambda: self.retry.call_sync(
                        attempt, what=operation, memory=self.memory, key=key
                    ),
                )
        records = _telemetry.record_count(code.contract.argv, args)
        return self._timed(
            operation,
            key,
            records,
            lambda: self.retry.call_sync(
                lambda: run_client(steps(), self.client),
                what=operation,
                memory=self.memory,
                key=key,
            ),
        )

    def _planned(self, state: Transactions, plan: AppendPlan, name: str, key: str) -> Any:
        """The append as a checked transaction: the script's reply, or None when it did not
        apply (the caller sends the script)."""
        try:
            outcome = run_on_connection(self.client, transaction([plan]))
        except redis_errors.RedisError as exc:
            raise translate(exc, name, key) from exc
        state.settle([plan], outcome)
        reply = outcome.replies[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    def _timed(self, operation: str, key: str, records: int | None, call: Callable[[], Any]) -> Any:
        """``call()``, observing its latency under ``operation`` and its outcome, in its
        span when telemetry is on."""
        started = _clock()
        telemetry = _telemetry.ACTIVE
        try:
            if telemetry is not None and operation in _telemetry.GENAI_OPERATIONS:
                with self._span(telemetry, operation, key, records):
                    reply = call()
            else:
                reply = call()
        except BaseException as exc:
            self._failed(operation, exc, started)
            raise
        child = self._ok.get(operation) or self._bind(operation)
        child.observe(_clock() - started)
        return reply
