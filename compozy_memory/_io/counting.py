"""Token counts for a tick's appends: counted together, at the end of the tick.

Exact counting costs about as much per message as the write itself. A replica serving many
conversations makes many appends in one event-loop iteration, and their texts are gathered
and counted in one go when the iteration ends, by one of two roads:

- **On the loop**, for a counter that counts many texts at once but holds the GIL (the
  default ``rs-bpe`` engine, ``count_many``): a thread would add hops and save nothing,
  while counting a tick's texts back to back keeps the encoder's tables in the CPU cache
  (``benchmarks/bench_append.py`` compares it with counting each text as its append asks).
- **On a worker thread**, for counters that are safe there (``thread_safe = True``: the
  ``tiktoken`` engine, and a :class:`CachedCounter` around it): tiktoken gives up the GIL
  while it encodes, so the loop goes on sending and reading other calls. The texts go in
  jobs of about ``CHUNK_CHARS`` characters, each counted in one encode, so the first callers
  go on to write while the rest are counted; a small tick (under ``INLINE_CHARS``) and texts
  a :class:`CachedCounter` remembers are counted on the loop (a hop would cost more).

Any other counter (the heuristic, supplied counts) counts at once. A counter's error reaches
only the caller whose text raised it, and a caller cancelled while waiting is skipped.

This is how the async driver performs :class:`~compozy_memory._wire.effects.Count`, the
effect the encoding steps yield; a sync handle has no tick to gather, and its driver counts
the texts at once in the caller's thread (:func:`count_all`).
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from compozy_memory._model.tokens import TokenCounter
from compozy_memory._wire.effects import Counted

__all__ = ["CHUNK_CHARS", "INLINE_CHARS", "count_all", "count_texts"]

#: A batch with fewer characters than this is counted on the event loop (~1,000 tokens).
INLINE_CHARS = 4_000


async def count_texts(counter: TokenCounter, texts: Sequence[str]) -> list[Counted]:
    """Each text's count, or the exception counting it raised, in order."""
    if not texts:
        return []
    in_thread = getattr(counter, "thread_safe", False) is True
    if not in_thread:
        if not callable(getattr(counter, "count_many", None)):
            return count_all(counter, texts)  # microseconds: no reason to wait for the tick
        return await _tick_batcher(asyncio.get_running_loop()).submit(counter, list(texts))
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


def count_all(counter: TokenCounter, texts: Sequence[str]) -> list[Counted]:
    """Each text's count, or the exception counting it raised, in order, counted now."""
    count_many = getattr(counter, "count_many", None)
    if callable(count_many) and len(texts) > 1:
        counted: list[Counted] | None
        try:
            counted = list(count_many(texts))
        except Exception:  # one text raised: count one by one, so only its caller hears it
            counted = None
        if counted is not None and len(counted) == len(texts):
            return counted
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
        here = [r for r in live if getattr(r[0], "thread_safe", False) is not True]
        away = [r for r in live if getattr(r[0], "thread_safe", False) is True]
        if sum(len(text) for _, texts, _ in away for text in texts) < INLINE_CHARS:
            here, away = live, []
        if here:
            _deliver(here, _count_requests([(counter, texts) for counter, texts, _ in here]))
        chunks = _chunks(away) if away else []
        for index, chunk in enumerate(chunks):
            try:
                job = self.loop.run_in_executor(
                    _executor(), _count_requests, [(counter, texts) for counter, texts, _ in chunk]
                )
            except RuntimeError:  # the threads refuse work (the interpreter is exiting)
                rest = [request for later in chunks[index:] for request in later]
                _deliver(rest, _count_requests([(counter, texts) for counter, texts, _ in rest]))
                return
            job.add_done_callback(functools.partial(_finish, chunk))


#: A worker job counts about this many characters, so the first callers go on to write
#: while the rest are counted.
CHUNK_CHARS = 12_000


def _chunks(requests: list[_Request]) -> list[list[_Request]]:
    out: list[list[_Request]] = [[]]
    size = 0
    for request in requests:
        if size >= CHUNK_CHARS:
            out.append([])
            size = 0
        out[-1].append(request)
        size += sum(len(text) for text in request[1])
    return out


def _count_requests(requests: list[tuple[TokenCounter, list[str]]]) -> list[list[Counted]]:
    """Every request's counts, each counter's texts counted in one call."""
    by_counter: dict[int, tuple[TokenCounter, list[str]]] = {}
    for counter, texts in requests:
        by_counter.setdefault(id(counter), (counter, []))[1].extend(texts)
    counted = {key: iter(count_all(*request)) for key, request in by_counter.items()}
    return [[next(counted[id(counter)]) for _ in texts] for counter, texts in requests]


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
