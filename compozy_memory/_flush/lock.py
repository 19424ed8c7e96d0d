"""The fenced lock that makes one replica at a time flush a memory.

Acquiring is one script: ``SET lock <token> NX PX <lease>`` and, if that succeeded, an
increment of the memory's fencing ``epoch`` in ``meta`` (same Cluster slot); the reply also
names the memory's incarnation. Each acquisition returns its own :class:`Lease` with a fresh
random token from :mod:`secrets`; a token is never stored where another task could pick it up
(redis-py's thread-local token is shared by all asyncio tasks of a thread). Refresh and release
check the owner inside their scripts.

Exclusion holds only while the lease lasts. A holder that is paused past its lease (a GC
pause, SIGSTOP, a slow network) may still try to commit; the commit script refuses any epoch
but the newest, and any incarnation but the current one, so its work is dropped instead of
overwriting a newer holder's, or landing in a conversation that started after it expired.

Acquiring, refreshing and releasing are steps (:mod:`compozy_memory._wire.steps`): ``await``
them on an async handle's lock; a flush of a sync handle runs them on its transport. While
work is held, an async lease is refreshed by a task beside it (which cancels the work once the
lease is lost), a sync one between the work's calls (the flusher yields its work as a
:class:`~compozy_memory._wire.effects.Hold` effect, which the driver runs with :meth:`Lease.hold`
or :meth:`Lease.hold_sync`).

Fencing holds across a failover only if the epoch does: with ``persistence.wait`` the
acquisition is waited like any write (WAIT or WAITAOF), and one that the replicas did not
acknowledge hands out no lease. Its lock is released again and ReplicationError raised, so
a replica promoted without that epoch cannot give the same epoch to a second holder.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from compozy_memory._wire.effects import Family, MetricsSink, Observe, Sleep
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.replies import text
from compozy_memory._wire.steps import Steps, op
from compozy_memory.errors import BackendError, LockBusyError, LockLostError, ReplicationError

__all__ = ["FencedLock", "Lease"]

T = TypeVar("T")


class FencedLock:
    """The flush lock of one memory."""

    def __init__(
        self,
        gateway: MemoryGateway,
        ttl: timedelta = timedelta(minutes=5),
        *,
        metrics: MetricsSink | None = None,
        name: str = "memory",
    ) -> None:
        self.gateway = gateway
        self.ttl_ms = max(1, int(ttl.total_seconds() * 1000))
        self.metrics = metrics
        #: Whether acquisitions, refreshes and holds are measured (in ``metrics``, or else
        #: the metrics of the driver that runs them): with metrics given, or for a flusher.
        self.measured = metrics is not None
        #: The memory resource id the metrics are labelled with.
        self.name = name

    @property
    def transport(self) -> Any:
        return self.gateway.transport

    @op
    def try_acquire(self) -> Steps[Lease | None]:
        """A lease if the lock was free, else None (flushers skip: someone else is on it).

        With a WaitPolicy, an acquisition the replicas did not acknowledge in time is
        released and raises ReplicationError: its epoch might not survive a failover."""
        token = secrets.token_hex(16)
        try:
            epoch, incarnation = yield from self.gateway.lock_acquire(token, self.ttl_ms)
        except ReplicationError as exc:
            epoch, incarnation = _acquired(exc.result)
            if not epoch:
                return None  # taken by another holder: nothing of ours to wait for
            with contextlib.suppress(BackendError):  # else the lease ends by itself
                yield from self.gateway.lock_release(token)
            raise ReplicationError(
                f"the flush lock (epoch {epoch}) was taken on the primary but only "
                f"{exc.acknowledged} of {exc.required} replicas acknowledged it in time: it was "
                "given back and no lease is handed out, for a replica promoted without that "
                "epoch could give it to another holder",
                key=self.gateway.name,
                required=exc.required,
                acknowledged=exc.acknowledged,
                reply=(epoch, incarnation),
            ) from exc
        if self.measured:
            family: Family = "lock_acquire" if epoch else "lock_contention"
            yield from Observe(family, (self.name,), into=self.metrics)
        return Lease(self, token, epoch, incarnation) if epoch else None

    @op
    def acquire(self, *, wait: timedelta = timedelta(seconds=10)) -> Steps[Lease]:
        """A lease, retrying with jittered exponential backoff for up to ``wait``."""
        deadline = time.monotonic() + wait.total_seconds()
        for tried in range(1_000_000):
            lease = yield from self.try_acquire()
            if lease is not None:
                return lease
            left = deadline - time.monotonic()
            if left <= 0:
                break
            backoff = min(1.0, 0.01 * 2**tried) + random.uniform(0, 0.05)
            yield from Sleep(min(backoff, left))
        raise LockBusyError(
            f"the flush lock stayed taken for {wait.total_seconds():g}s", key=self.gateway.name
        )


@dataclass
class Lease:
    """One holding of the lock: its owner token, fencing epoch and the memory's incarnation."""

    lock: FencedLock
    token: str
    epoch: int
    incarnation: str = ""
    acquired_at: float = field(default_factory=time.monotonic)
    lost: bool = False
    #: Set by the holder right before it sends its commit: from then on a lost refresh no
    #: longer cancels the work, because the commit itself (fenced by the epoch) decides.
    committing: bool = False

    @property
    def transport(self) -> Any:
        return self.lock.gateway.transport

    @op
    def refresh(self) -> Steps[bool]:
        """Extend the lease; False if it was lost (expired, or taken by another holder)."""
        ok = yield from self.lock.gateway.lock_refresh(self.token, self.lock.ttl_ms)
        if self.lock.measured:
            result = "ok" if ok else "lost"
            yield from Observe("lock_refresh", (self.lock.name, result), into=self.lock.metrics)
        self.lost = self.lost or not ok
        return ok

    @op
    def release(self) -> Steps[bool]:
        """Give the lock up if still held; False if it had already expired or moved on."""
        released = yield from self.lock.gateway.lock_release(self.token)
        if self.lock.measured:
            held = time.monotonic() - self.acquired_at
            yield from Observe("lock_duration", (self.lock.name,), held, self.lock.metrics)
        return released

    async def hold(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` while refreshing the lease every ttl/3; if a refresh finds the lease
        lost before the work started committing, it is cancelled and LockLostError raised."""
        task: asyncio.Task[T] = asyncio.ensure_future(work())
        keeper = asyncio.create_task(self._keep(task))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if self.lost and not _cancelling_us():
                raise LockLostError(
                    "the flush lease was lost; the flush was stopped before writing",
                    key=self.lock.gateway.name,
                ) from None
            task.cancel()
            raise
        finally:
            keeper.cancel()

    def hold_sync(self, work: Steps[T], transport: Any) -> T:
        """:meth:`hold` on a sync transport: ``work`` runs in this thread, and the lease is
        refreshed between its calls once ttl/3 has passed; found lost before the work started
        committing, LockLostError is thrown into the work (no call of it is cut short: each
        is bounded, and its commit is fenced by the epoch anyway)."""
        interval = self.lock.ttl_ms / 3000
        due = time.monotonic() + interval

        def keep() -> None:
            nonlocal due
            if time.monotonic() < due:
                return
            due = time.monotonic() + interval
            try:
                alive = transport.drive(self.refresh())
            except BackendError:
                alive = False  # cannot prove we still hold it: stop the work
                self.lost = True
            if not alive and not self.committing:
                raise LockLostError(
                    "the flush lease was lost; the flush was stopped before writing",
                    key=self.lock.gateway.name,
                )

        result: T = transport.drive(work, between=keep)
        return result

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
                if not self.committing:
                    task.cancel()
                return


def _acquired(reply: object) -> tuple[int, str]:
    """``lua/flush/lock_acquire.lua``'s raw reply, as carried by a ReplicationError."""
    if isinstance(reply, (list, tuple)) and len(reply) >= 2:
        return int(reply[0]), text(reply[1])
    return 0, ""


def _cancelling_us() -> bool:
    current = asyncio.current_task()
    return current is not None and current.cancelling() > 0
