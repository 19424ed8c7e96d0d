"""``warm()``: pay a process's start-up costs before the first append instead of in it.

A fresh process's first append would load the token encoder (reading and building its
ranks: tens of milliseconds), the server-side scripts (a FUNCTION LOAD or an EVAL of the
source after NOSCRIPT), the archive search's stemmer and stop words, and open a connection.
:func:`warm` does all of that up front; :class:`~compozy_memory.MemoryManager` calls it when
it starts (``async with``, :meth:`~compozy_memory.MemoryManager.start`, or its first
``get``). ``benchmarks/bench_append.py`` measures a fresh process's first append with and
without it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from redis import exceptions as redis_errors

from compozy_memory._model.tokens import TokenCounter, default_counter
from compozy_memory._search.analysis import analyze
from compozy_memory._wire.delivery import delivery_for
from compozy_memory._wire.translate import RedisClient, translate

__all__ = ["warm"]


async def warm(client: RedisClient, *, counters: Iterable[TokenCounter] | None = None) -> None:
    """Load the encoders of ``counters`` (default: the default counter) in a thread, the
    scripts on every primary of ``client``'s server, and the search analyser. Idempotent and
    cheap once done. An unreachable server raises :class:`~compozy_memory.BackendError`; a
    user who may not load scripts is left for the first call to meet (an operator may have
    run ``compozy-memory install``)."""
    chosen = list(counters) if counters is not None else [default_counter()]
    loading = asyncio.gather(*(asyncio.to_thread(_warm_counter, c) for c in chosen))
    try:
        try:
            await client.ping()
        except redis_errors.RedisError as exc:
            raise translate(exc, "warm", "warm") from exc
        await delivery_for(client).warm("warm")
    finally:
        await loading
    analyze("warm the stemmer and the stop words")


def _warm_counter(counter: TokenCounter) -> None:
    load = getattr(counter, "preload", None)
    if callable(load):
        load()
