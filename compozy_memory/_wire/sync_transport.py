"""The sync transport: one handle's script calls on redis-py's blocking clients.

:class:`SyncTransport` is :class:`~compozy_memory._wire.transport.Transport`'s twin on
``redis.Redis`` and ``redis.cluster.RedisCluster``: the same delivery (FCALL or EVALSHA, the
library loaded where missing, old servers refused), the same WAIT/WAITAOF after writes, the
same :class:`RetryPolicy` loop and the same latency metric, all driven from the steps they
share. What it does not do is batch: a thread's calls go one by one (each blocking its thread
only), and many threads' calls share the client's connection pool, which redis-py makes safe
to use from several threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from compozy_memory import _telemetry
from compozy_memory._metrics import MemoryMetrics
from compozy_memory._model.policy import WaitPolicy
from compozy_memory._wire.client_calls import SyncRedisClient
from compozy_memory._wire.retry import RetryPolicy
from compozy_memory._wire.scripts import Args, Keys, Script
from compozy_memory._wire.steps import Op, Steps, drive
from compozy_memory._wire.translate import backend_errors
from compozy_memory._wire.transport import OPERATIONS, TransportBase

__all__ = ["SyncTransport"]

T = TypeVar("T")

_clock = time.perf_counter


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

    def drive(self, steps: Steps[T] | Op[T], *, between: Callable[[], None] | None = None) -> T:
        """Run ``steps`` on this transport, in the calling thread."""
        return drive(steps, self, between=between)

    def run(self, code: Script, keys: Keys, args: Args, *, key: str, write: bool = False) -> Any:
        """Run ``script``, retried within the policy; ``write`` calls wait for replicas when
        the policy asks (ReplicationError, carrying the raw reply, when they do not)."""
        code.contract.check_keys(keys)
        operation = OPERATIONS.get(code.name, code.name)
        wait = self.wait
        if wait is not None and write:
            steps: Callable[[], Steps[Any]] = lambda: self._run_and_wait(  # noqa: E731
                code, keys, args, wait, key
            )
        else:
            steps = lambda: self.delivery.run(code, keys, args, key)  # noqa: E731
        records = _telemetry.record_count(code.contract.argv, args)
        return self._timed(
            operation,
            key,
            records,
            lambda: self.retry.call_sync(
                lambda: drive(steps(), self), what=operation, memory=self.memory, key=key
            ),
        )

    def command(self, operation: str, method: str, *args: Any, key: str, **options: Any) -> Any:
        """A plain redis-py command (``method`` of the client), retried like scripts."""

        def attempt() -> Any:
            with backend_errors(operation, key):
                return getattr(self.client, method)(*args, **options)

        return self._timed(
            operation,
            key,
            None,
            lambda: self.retry.call_sync(attempt, what=operation, memory=self.memory, key=key),
        )

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
