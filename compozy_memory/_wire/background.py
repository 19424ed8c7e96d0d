"""Background work after writes: a debounced job per memory, on a task or on a thread.

After a write, a handle's indexer (and its flusher, past the threshold) has work to do off the
caller's path. A :class:`Trigger` runs its ``work`` soon after it is fired, once at a time: a
fire while the work runs makes it run once more, a debounce after it ends, so a burst of
writes costs one or two runs, never one each, and writes that keep coming are taken in
batches a debounce apart.

* :class:`TaskTrigger` (async handles): the work is a task of the running event loop.
* :class:`ThreadTrigger` (sync handles): the work runs on the process's background threads
  (:data:`BACKGROUND_THREADS`, daemons started on first use and again in a forked child).

Summarizers are coroutines (:class:`~compozy_memory.Summarizer`), and a sync handle's flush
still has to run one: :func:`run_coroutine` runs it on one event loop that a daemon thread of
the process keeps for that alone (so an async API client a summarizer keeps, such as
Anthropic's, always meets the loop it was made on). Nothing else of the sync API touches an
event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import heapq
import inspect
import itertools
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
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
    "run_coroutine",
    "wait_background",
]

T = TypeVar("T")

log = logging.getLogger("compozy_memory.background")

#: Threads that run sync handles' background work (index catch-ups, flushes).
BACKGROUND_THREADS = 2


class Trigger(Protocol):
    def fire(self) -> None: ...


class TaskTrigger:
    """Runs ``work`` in a task of the running loop ``debounce`` seconds after a fire; fired
    while it runs, it runs once more, ``debounce`` seconds after it ends (so writes that keep
    coming are taken in batches). Fired where no loop runs, it does nothing (the next
    operation that needs the work does it itself)."""

    def __init__(self, work: Callable[[], Awaitable[None]], debounce: float) -> None:
        self.work = work
        self.debounce = debounce
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._closed = False
        self._working = False

    def fire(self) -> None:
        if self._closed:
            return
        if self._task is not None and not self._task.done():
            self._again = True
            return
        try:
            self._task = asyncio.get_running_loop().create_task(self._run())
        except RuntimeError:  # no running loop
            self._task = None

    async def wait_idle(self) -> None:
        """Wait for the work, if any (for shutdown and tests)."""
        while self._task is not None and not self._task.done():
            task = self._task
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                if not task.cancelled():
                    raise  # the waiter was cancelled, not the work

    def close(self) -> None:
        """Run no more: a run not started yet is dropped (its task cancelled); one under way
        ends with its current work and does not run again."""
        self._closed = True
        self._again = False
        if self._task is not None and not self._task.done() and not self._working:
            self._task.cancel()

    async def _run(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.debounce)
            self._again = False
            self._working = True
            try:
                await self.work()
            finally:
                self._working = False
            if not self._again:
                return


class ThreadTrigger:
    """Runs ``work`` on a background thread ``debounce`` seconds after a fire; fired while
    it is due or running, it runs once more, ``debounce`` seconds after it ends."""

    def __init__(self, work: Callable[[], None], debounce: float) -> None:
        self.work = work
        self.debounce = debounce
        self._lock = threading.Lock()
        self._state = _IDLE
        self._idle = threading.Event()
        self._idle.set()
        self._closed = False

    def fire(self) -> None:
        with self._lock:
            if self._closed:
                return
            if self._state != _IDLE:
                self._state = _AGAIN if self._state == _RUNNING else self._state
                return
            self._state = _DUE
            self._idle.clear()
        _pool().schedule(self.debounce, self._run)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait for the work, if any; False if ``timeout`` passed first."""
        return self._idle.wait(timeout)

    def close(self) -> None:
        """Run no more: a run not started yet is dropped; one under way ends with its current
        work and does not run again."""
        with self._lock:
            self._closed = True
            if self._state == _AGAIN:
                self._state = _RUNNING

    def _run(self) -> None:
        with self._lock:
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
        # Once more, a debounce after this run: writes that keep coming are taken in batches.
        _pool().schedule(self.debounce, self._run)


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

    def fire(self) -> None:
        self.trigger.fire()

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
    """Wait until no background job is due or running (for shutdown and tests); False if
    ``timeout`` passed first."""
    deadline = time.monotonic() + timeout
    while _threads is not None and not _threads.idle():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


_loop: asyncio.AbstractEventLoop | None = None


def run_coroutine(coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coroutine`` on the summarizers' event loop and wait for its result (TimeoutError
    after ``timeout`` seconds, the coroutine cancelled)."""
    global _loop
    with _lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(
                target=_loop.run_forever, name="compozy-memory-summarizers", daemon=True
            ).start()
        loop = _loop
    future = asyncio.run_coroutine_threadsafe(coroutine, loop)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"timed out after {timeout:g}s") from None


def _forget_after_fork() -> None:
    # A forked child has none of its parent's threads: start again on demand.
    global _threads, _loop, _lock
    _threads, _loop, _lock = None, None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
