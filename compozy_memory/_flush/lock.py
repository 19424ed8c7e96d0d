"""The fenced lock that makes one replica at a time flush a memory.

Acquiring is one script: ``SET lock <token> NX PX <ttl>`` and, if that succeeded, an
increment of the memory's fencing ``epoch`` in ``meta`` (same Cluster slot). Each acquisition
returns its own :class:`Lease` with a fresh random token from :mod:`secrets`; a token is
never stored where another task could pick it up (redis-py's thread-local token is shared by
all asyncio tasks of a thread). Refresh and release check the owner inside their scripts.

Exclusion holds only while the lease lasts. A holder that is paused past its lease (a GC
pause, SIGSTOP, a slow network) may still try to commit; the commit script refuses any epoch
but the newest, so its work is dropped instead of overwriting a newer holder's.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

from tenacity import AsyncRetrying, retry_if_result, stop_after_delay, wait_exponential, wait_random

from compozy_memory.errors import BackendError, LockBusyError, LockLostError

if TYPE_CHECKING:
    from compozy_memory._metrics import FlushMetrics
    from compozy_memory._store.instance import MemoryInstance

__all__ = ["FencedLock", "Lease"]

T = TypeVar("T")


class FencedLock:
    """The flush lock of one memory instance."""

    def __init__(
        self,
        instance: MemoryInstance,
        ttl: timedelta = timedelta(minutes=5),
        *,
        metrics: FlushMetrics | None = None,
    ) -> None:
        self.instance = instance
        self.ttl_ms = max(1, int(ttl.total_seconds() * 1000))
        self.metrics = metrics

    async def try_acquire(self) -> Lease | None:
        """A lease if the lock was free, else None (flushers skip: someone else is on it)."""
        token = secrets.token_hex(16)
        keys = self.instance.keys
        epoch = int(
            await self.instance._call("lock_acquire", (keys.lock, keys.meta), [token, self.ttl_ms])
        )
        if self.metrics is not None:
            self.metrics.lock_acquisitions.labels(result="acquired" if epoch else "busy").inc()
        return Lease(self, token, epoch) if epoch else None

    async def acquire(self, *, wait: timedelta = timedelta(seconds=10)) -> Lease:
        """A lease, retrying with jittered exponential backoff for up to ``wait``."""
        retrying = AsyncRetrying(
            stop=stop_after_delay(wait.total_seconds()),
            wait=wait_exponential(multiplier=0.01, max=1.0) + wait_random(0, 0.05),
            retry=retry_if_result(lambda lease: lease is None),
            retry_error_callback=lambda state: None,
        )
        lease: Lease | None = await retrying(self.try_acquire)
        if lease is None:
            raise LockBusyError(
                f"the flush lock stayed taken for {wait.total_seconds():g}s",
                key=self.instance.key,
            )
        return lease


@dataclass
class Lease:
    """One holding of the lock: its owner token and fencing epoch."""

    lock: FencedLock
    token: str
    epoch: int
    acquired_at: float = field(default_factory=time.monotonic)
    lost: bool = False

    async def refresh(self) -> bool:
        """Extend the lease; False if it was lost (expired, or taken by another holder)."""
        instance = self.lock.instance
        ok = bool(
            await instance._call(
                "lock_refresh", (instance.keys.lock,), [self.token, self.lock.ttl_ms]
            )
        )
        if self.lock.metrics is not None:
            self.lock.metrics.lock_refreshes.labels(result="ok" if ok else "lost").inc()
        self.lost = self.lost or not ok
        return ok

    async def release(self) -> bool:
        """Give the lock up if still held; False if it had already expired or moved on."""
        instance = self.lock.instance
        released = bool(await instance._call("lock_release", (instance.keys.lock,), [self.token]))
        if self.lock.metrics is not None:
            self.lock.metrics.lock_hold_seconds.observe(time.monotonic() - self.acquired_at)
        return released

    async def hold(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` while refreshing the lease every ttl/3; if a refresh finds the lease
        lost, ``work`` is cancelled and LockLostError raised."""
        task: asyncio.Task[T] = asyncio.ensure_future(work())
        keeper = asyncio.create_task(self._keep(task))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if self.lost and not _cancelling_us():
                raise LockLostError(
                    "the flush lease was lost; the flush was stopped before writing",
                    key=self.lock.instance.key,
                ) from None
            task.cancel()
            raise
        finally:
            keeper.cancel()

    async def _keep(self, task: asyncio.Task[T]) -> None:
        interval = self.lock.ttl_ms / 3000
        while not task.done():
            await asyncio.sleep(interval)
            try:
                alive = await self.refresh()
            except BackendError:
                alive = False  # cannot prove we still hold it: stop the work
                self.lost = True
            if not alive:
                task.cancel()
                return


def _cancelling_us() -> bool:
    current = asyncio.current_task()
    return current is not None and current.cancelling() > 0
