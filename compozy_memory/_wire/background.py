"""Background work after writes: a debounced job per memory, on a task or on a thread.

After a write, a handle's indexer (and its flusher, past the threshold) has work to do off the
caller's path. A :class:`Trigger` runs its ``work`` soon after it is fired, once at a time: a
fire while the work runs makes it run once more, a debounce after it ends, so a burst of
writes costs one or two runs, never one each, and writes that keep coming are taken in
batches a debounce apart.

* :class:`TaskTrigger` (async handles): the work is a task of the running event loop.
* :class:`ThreadTrigger` (sync handles): the work runs on the process's background threads
  (:data:`BACKGROUND_THREADS`, daemons started on first use and again in a forked child).

A sync handle's summarizer runs on a loop of its own
(:mod:`compozy_memory._wire.summarizer_loop`).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import inspect
import itertools
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol, TypeVar

from compozy_memory._wire.effects import no_retries
from compozy_memory._wire.steps import Op, Steps, is_sync
from compozy_memory.errors import CompozyMemoryError

__all__ = [
    "BACKGROUND_THREADS",
    "Backgrounded",
    "Debounced",
    "TaskTrigger",
    "ThreadTrigger",
    "Trigger",
    "wait_background",
]

T = TypeVar("T")

log = logging.getLogger("compozy_memory.background")

#: Threads that run sync handles' background work (index catch-ups, flushes).
BACKGROUND_THREADS = 2


class Trigger(Protocol):
    def fire(self, delay: float | None = None) -> None: ...


class TaskTrigger:
    """Runs ``work`` in a task of the running loop ``debounce`` seconds after a fire (or the
    ``delay`` the fire gives: the earliest due wins); fired while it runs, it runs once more,
    that long after it ends (so writes that keep coming are taken in batches). Fired where no
    loop runs, it does nothing (the next operation that needs the work does it itself)."""

    def __init__(self, work: Callable[[], Awaitable[None]], debounce: float) -> None:
        self.work = work
        self.debounce = debounce
        self._task: asyncio.Task[None] | None = None
        self._again: float | None = None
        self._closed = False
        self._working = False
        self._due = 0.0
        self._wake: asyncio.Future[None] | None = None
        # Callers in wait_idle: while any waits, nothing is held back.
        self._waiters = 0

    def fire(self, delay: float | None = None) -> None:
        if self._closed:
            return
        wait = self.debounce if delay is None else delay
        if self._task is not None and not self._task.done():
            if self._working:
                self._again = wait if self._again is None else min(self._again, wait)
            else:
                self._sooner(wait)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no running loop
            self._task = None
            return
        self._due = loop.time() + wait
        self._task = loop.create_task(self._run(), name=f"compozy-memory {self.work!r}")

    def hurry(self) -> None:
        """A run that is due starts now (one under way runs again at once if fired)."""
        if self._task is None or self._task.done() or self._closed:
            return
        if self._working:
            if self._again is not None:
                self._again = 0.0
        else:
            self._sooner(0.0)

    def _sooner(self, wait: float) -> None:
        try:
            due = asyncio.get_running_loop().time() + wait
        except RuntimeError:
            return
        if due < self._due or self._waiters:
            self._due = min(due, self._due)
            if self._wake is not None and not self._wake.done():
                self._wake.set_result(None)

    async def wait_idle(self) -> None:
        """Wait for the work, if any (for shutdown and tests): a run that is due starts now,
        and so does one a fire asks for while this waits."""
        self._waiters += 1
        try:
            self.hurry()
            while self._task is not None and not self._task.done():
                task = self._task
                try:
                    await asyncio.shield(task)
                except asyncio.CancelledError:
                    if not task.cancelled():
                        raise  # the waiter was cancelled, not the work
        finally:
            self._waiters -= 1

    def close(self) -> None:
        """Run no more: a run not started yet is dropped (its task cancelled); one under way
        ends with its current work and does not run again."""
        self._closed = True
        self._again = None
        if self._task is not None and not self._task.done() and not self._working:
            self._task.cancel()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            # Until due: a fire or a wait that moves the time sooner wakes it.
            while not self._waiters and (left := self._due - loop.time()) > 0:
                self._wake = wake = loop.create_future()
                timer = loop.call_later(left, _settle, wake)
                try:
                    await wake
                finally:
                    timer.cancel()
                    self._wake = None
            self._again = None
            self._working = True
            try:
                await self.work()
            finally:
                self._working = False
            if self._again is None:
                return
            self._due = loop.time() + self._again


def _settle(wake: asyncio.Future[None]) -> None:
    if not wake.done():
        wake.set_result(None)


class ThreadTrigger:
    """Runs ``work`` on a background thread ``debounce`` seconds after a fire (or the
    ``delay`` the fire gives: the earliest due wins); fired while it is running, it runs once
    more, that long after it ends."""

    def __init__(self, work: Callable[[], None], debounce: float) -> None:
        self.work = work
        self.debounce = debounce
        self._lock = threading.Lock()
        self._state = _IDLE
        self._idle = threading.Event()
        self._idle.set()
        self._closed = False
        # The due run: when, and its ticket (a run scheduled earlier than one already
        # scheduled takes a new ticket; the later one then finds its ticket stale and ends).
        self._due = 0.0
        self._ticket = 0
        self._again = 0.0
        # Threads in wait_idle: while any waits, nothing is held back.
        self._waiters = 0

    def fire(self, delay: float | None = None) -> None:
        wait = self.debounce if delay is None else delay
        with self._lock:
            if self._closed:
                return
            if self._waiters:
                wait = 0.0
            if self._state == _RUNNING:
                self._state, self._again = _AGAIN, wait
                return
            if self._state == _AGAIN:
                self._again = min(self._again, wait)
                return
            if self._state == _DUE and time.monotonic() + wait >= self._due:
                return
            self._state = _DUE
            self._idle.clear()
            ticket = self._schedule_locked(wait)
        _pool().schedule(wait, partial(self._run, ticket))

    def hurry(self) -> None:
        """A run that is due starts now (one under way runs again at once if fired)."""
        with self._lock:
            if self._closed:
                return
            if self._state == _AGAIN:
                self._again = 0.0
                return
            if self._state != _DUE:
                return
            ticket = self._schedule_locked(0.0)
        _pool().schedule(0.0, partial(self._run, ticket))

    def _schedule_locked(self, wait: float) -> int:
        self._due = time.monotonic() + wait
        self._ticket += 1
        return self._ticket

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait for the work, if any (a run that is due starts now, and so does one a fire
        asks for while this waits); False if ``timeout`` passed first."""
        with self._lock:
            self._waiters += 1
        try:
            self.hurry()
            return self._idle.wait(timeout)
        finally:
            with self._lock:
                self._waiters -= 1

    def close(self) -> None:
        """Run no more: a run not started yet is dropped; one under way ends with its current
        work and does not run again."""
        with self._lock:
            self._closed = True
            if self._state == _AGAIN:
                self._state = _RUNNING
            elif self._state == _DUE:  # its scheduled run finds itself dropped
                self._state = _IDLE
                self._idle.set()

    def _run(self, ticket: int) -> None:
        with self._lock:
            if ticket != self._ticket or self._state != _DUE:
                return  # a sooner run took its place
            if self._closed:
                self._state = _IDLE
                self._idle.set()
                return
            self._state = _RUNNING
        try:
            self.work()
        except Exception:  # the work logs what it expects; this is a bug's last net
            log.exception("background work failed")
        with self._lock:
            if self._state != _AGAIN:
                self._state = _IDLE
                self._idle.set()
                return
            self._state = _DUE
            wait = 0.0 if self._waiters else self._again
            ticket = self._schedule_locked(wait)
        # Once more, after this run: writes that keep coming are taken in batches.
        _pool().schedule(wait, partial(self._run, ticket))


_IDLE, _DUE, _RUNNING, _AGAIN = range(4)


class Debounced:
    """A handle's background job of either kind: ``work_sync`` on a thread when ``sync``,
    ``work_async`` in a task otherwise; both waits answer at once for the other kind.
    :meth:`of_steps` makes the usual one, the same steps run on either transport."""

    def __init__(
        self,
        *,
        sync: bool,
        work_async: Callable[[], Awaitable[None]],
        work_sync: Callable[[], None],
        debounce: float,
    ) -> None:
        self.trigger: TaskTrigger | ThreadTrigger = (
            ThreadTrigger(work_sync, debounce) if sync else TaskTrigger(work_async, debounce)
        )

    @classmethod
    def of_steps(
        cls,
        steps: Callable[[], Steps[Any] | Op[Any]],
        transport: Any,
        debounce: float,
        *,
        failed: Callable[[CompozyMemoryError], None] | None = None,
        retries: bool = True,
    ) -> Debounced:
        """The job that runs ``steps()`` on ``transport`` (a driver: a task of its loop, or a
        background thread for a sync one), called anew for each run; a library error goes to
        ``failed`` (nobody waits for a background job: it logs), or is raised without it.
        Without ``retries``, each call makes one attempt: for work the next run redoes (the
        index's catch-up), which must not keep retrying a closed client or a dead server."""

        def work_sync() -> None:
            try:
                with contextlib.nullcontext() if retries else no_retries():
                    transport.drive(steps())
            except CompozyMemoryError as exc:
                if failed is None:
                    raise
                failed(exc)

        async def work_async() -> None:
            made = steps()
            try:
                with contextlib.nullcontext() if retries else no_retries():
                    # An Op is awaited as itself, as is a coroutine standing in for the steps.
                    await (made if inspect.isawaitable(made) else transport.drive(made))
            except CompozyMemoryError as exc:
                if failed is None:
                    raise
                failed(exc)

        return cls(
            sync=is_sync(transport), work_async=work_async, work_sync=work_sync, debounce=debounce
        )

    def fire(self, delay: float | None = None) -> None:
        """Run soon: after the debounce, or after ``delay`` seconds (the earliest due wins)."""
        self.trigger.fire(delay)

    def hurry(self) -> None:
        """A run that is due starts now."""
        self.trigger.hurry()

    def close(self) -> None:
        self.trigger.close()

    @property
    def task_idle(self) -> bool:
        """No task run is due or under way (as :meth:`wait_idle` sees it: a thread's run is
        none of its business)."""
        trigger = self.trigger
        return not isinstance(trigger, TaskTrigger) or trigger._task is None or trigger._task.done()

    @property
    def thread_idle(self) -> bool:
        """No thread run is due or under way (as :meth:`wait_idle_sync` sees it)."""
        trigger = self.trigger
        return not isinstance(trigger, ThreadTrigger) or trigger._idle.is_set()

    async def wait_idle(self) -> None:
        if isinstance(self.trigger, TaskTrigger):
            await self.trigger.wait_idle()

    def wait_idle_sync(self, timeout: float | None = None) -> bool:
        return not isinstance(self.trigger, ThreadTrigger) or self.trigger.wait_idle(timeout)


class Backgrounded:
    """A part of a handle that works in the background after writes (the indexer, the vector
    step, the flusher): its :class:`Debounced` job, and the waits for it."""

    _job: Debounced

    async def wait_idle(self) -> None:
        """Wait for the background work, if any (for shutdown and tests)."""
        await self._job.wait_idle()

    def close(self) -> None:
        """Start no more background work: what was due and not started is dropped, what
        runs ends with its current step (the next operation that needs it does it itself)."""
        self._job.close()

    def wait_idle_sync(self, timeout: float | None = None) -> bool:
        """:meth:`wait_idle` for a sync handle's part; False if ``timeout`` passed."""
        return self._job.wait_idle_sync(timeout)


class _Pool:
    """The process's background threads and their timetable of due jobs."""

    def __init__(self, threads: int) -> None:
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._ready = threading.Condition()
        self._busy = 0
        for n in range(threads):
            threading.Thread(target=self._serve, name=f"compozy-memory-bg-{n}", daemon=True).start()

    def schedule(self, delay: float, job: Callable[[], None]) -> None:
        with self._ready:
            heapq.heappush(self._due, (time.monotonic() + delay, next(self._order), job))
            self._ready.notify()

    def idle(self) -> bool:
        with self._ready:
            return not self._due and self._busy == 0

    def hurry(self) -> None:
        """Every job waiting for its time is due now."""
        with self._ready:
            now = time.monotonic()
            self._due = [(min(at, now), n, job) for at, n, job in self._due]
            heapq.heapify(self._due)
            self._ready.notify_all()

    def _serve(self) -> None:
        while True:
            with self._ready:
                while not self._due or self._due[0][0] > time.monotonic():
                    wait = self._due[0][0] - time.monotonic() if self._due else None
                    self._ready.wait(wait)
                _, _, job = heapq.heappop(self._due)
                self._busy += 1
            try:
                job()
            finally:
                with self._ready:
                    self._busy -= 1


_lock = threading.Lock()
_threads: _Pool | None = None


def _pool() -> _Pool:
    global _threads
    with _lock:
        if _threads is None:
            _threads = _Pool(BACKGROUND_THREADS)
        return _threads


def wait_background(timeout: float = 30.0) -> bool:
    """Wait until no background job is due or running (for shutdown and tests): jobs waiting
    for their time (an index step held back for a batch) run now; False if ``timeout``
    passed first."""
    deadline = time.monotonic() + timeout
    while _threads is not None and not _threads.idle():
        _threads.hurry()  # an index step held back for a batch runs now
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _forget_after_fork() -> None:
    # A forked child has none of its parent's threads: start again on demand.
    global _threads, _lock
    _threads, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
