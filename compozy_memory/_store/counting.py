"""Token counts for a tick's appends: counted together, off the event loop.

Exact counting (tiktoken) costs more per message than the write itself. A replica serving
many conversations makes many appends in one event-loop iteration; counting each on the loop
would stall every other conversation's I/O meanwhile. Instead the texts that one iteration
asks for are gathered and counted in one job on a worker thread, so the loop goes on
sending and reading other calls, and a thread hop is paid once per iteration, not per
message. tiktoken holds the GIL for much of an encode, so the two overlap only in part
(``benchmarks/bench_append.py``: 0.46x raw RPUSH against 0.39x counting on the loop).

Only counters that say they are safe in a thread (``thread_safe = True``: the tiktoken
counters, and a :class:`CachedCounter` around one) go to the thread; any other counter, and
texts a :class:`CachedCounter` remembers, are counted on the loop, where a small batch is
counted too (a hop would cost more than the count). A counter's error reaches only the caller
whose text raised it, and a caller cancelled while waiting is skipped.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from compozy_memory._model.tokens import TokenCounter

__all__ = ["INLINE_CHARS", "count_texts"]

#: A batch with fewer characters than this is counted on the event loop (~1,000 tokens).
INLINE_CHARS = 4_000

Counted = int | Exception


async def count_texts(counter: TokenCounter, texts: Sequence[str]) -> list[Counted]:
    """Each text's count, or the exception counting it raised, in order."""
    if not texts:
        return []
    if getattr(counter, "thread_safe", False) is not True:
        return _count_all(counter, texts)
    out: list[Counted | None] = [None] * len(texts)
    missing: list[int] = []
    cached = getattr(counter, "cached", None)
    for i, text in enumerate(texts):
        hit = cached(text) if cached is not None else None
        if hit is None:
            missing.append(i)
        else:
            out[i] = hit
    if missing:
        loop = asyncio.get_running_loop()
        counted = await _tick_batcher(loop).submit(counter, [texts[i] for i in missing])
        for i, value in zip(missing, counted, strict=True):
            out[i] = value
    return [value for value in out if value is not None]


def _count_all(counter: TokenCounter, texts: Sequence[str]) -> list[Counted]:
    out: list[Counted] = []
    for text in texts:
        try:
            out.append(counter.count(text))
        except Exception as exc:
            out.append(exc)
    return out


_Request = tuple[TokenCounter, list[str], "asyncio.Future[list[Counted]]"]


class _TickBatcher:
    """One event loop's pending count requests, sent as one job at the end of the tick."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: list[_Request] = []

    def submit(self, counter: TokenCounter, texts: list[str]) -> asyncio.Future[list[Counted]]:
        future: asyncio.Future[list[Counted]] = self.loop.create_future()
        if not self.pending:
            self.loop.call_soon(self._flush)
        self.pending.append((counter, texts, future))
        return future

    def _flush(self) -> None:
        batch, self.pending = self.pending, []
        live = [request for request in batch if not request[2].done()]
        if not live:
            return
        if sum(len(text) for _, texts, _ in live for text in texts) < INLINE_CHARS:
            _deliver(live, [_count_all(counter, texts) for counter, texts, _ in live])
            return
        job = self.loop.run_in_executor(
            _executor(), _count_requests, [(counter, texts) for counter, texts, _ in live]
        )
        job.add_done_callback(lambda done: _finish(live, done))


def _count_requests(requests: list[tuple[TokenCounter, list[str]]]) -> list[list[Counted]]:
    return [_count_all(counter, texts) for counter, texts in requests]


def _finish(requests: list[_Request], job: asyncio.Future[list[list[Counted]]]) -> None:
    error = job.exception() if not job.cancelled() else asyncio.CancelledError()
    if error is not None:  # the executor itself failed (shut down): every caller hears it
        for _, _, future in requests:
            if not future.done():
                future.set_exception(error)
        return
    _deliver(requests, job.result())


def _deliver(requests: list[_Request], results: list[list[Counted]]) -> None:
    for (_, _, future), counted in zip(requests, results, strict=True):
        if not future.done():  # a caller cancelled meanwhile gets nothing
            future.set_result(counted)


_BATCHERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _TickBatcher] = (
    weakref.WeakKeyDictionary()
)


def _tick_batcher(loop: asyncio.AbstractEventLoop) -> _TickBatcher:
    batcher = _BATCHERS.get(loop)
    if batcher is None:
        batcher = _BATCHERS[loop] = _TickBatcher(loop)
    return batcher


_EXECUTOR: ThreadPoolExecutor | None = None
_EXECUTOR_LOCK = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    """The process's counting threads: one per core beyond the loop's, at most four."""
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None:
            workers = max(1, min(4, (os.cpu_count() or 2) - 1))
            _EXECUTOR = ThreadPoolExecutor(workers, thread_name_prefix="compozy-count")
        return _EXECUTOR


def _forget_executor() -> None:
    """In a forked child the parent's threads do not exist: start afresh."""
    global _EXECUTOR, _EXECUTOR_LOCK
    _EXECUTOR, _EXECUTOR_LOCK = None, threading.Lock()
    _BATCHERS.clear()


os.register_at_fork(after_in_child=_forget_executor)
