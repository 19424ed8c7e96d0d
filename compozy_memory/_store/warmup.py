"""``warm()``: pay a process's start-up costs before the first append instead of in it.

A fresh process's first append would load the token encoder (reading and building its
ranks: tens of milliseconds), the server-side scripts (a FUNCTION LOAD or an EVAL of the
source after NOSCRIPT), the archive search's stemmer and stop words, and open a connection.
:func:`warm` does all of that up front; :class:`~compozy_memory.MemoryManager` calls it when
it starts (``async with``, :meth:`~compozy_memory.MemoryManager.start`, or its first
``get``). ``benchmarks/bench_append.py`` measures a fresh process's first append with and
without it. :func:`warm_sync` does the same for a blocking client (the sync API), from the
same steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from redis import exceptions as redis_errors

from compozy_memory._io.client_calls import (
    ClientSteps,
    Exec,
    SyncRedisClient,
    arun_client,
    run_client,
)
from compozy_memory._io.delivery import delivery_for
from compozy_memory._io.translate import RedisClient, translate
from compozy_memory._model.policy import MemoryPolicy
from compozy_memory._model.tokens import HeuristicCounter, TokenCounter, default_counter
from compozy_memory._search.analysis import analyze
from compozy_memory._store.core import MemoryCore
from compozy_memory._store.encoding import encode_messages
from compozy_memory._store.instance import MemoryInstance
from compozy_memory._store.sync_instance import SyncMemoryInstance
from compozy_memory._wire.steps import Steps
from compozy_memory.errors import CompozyMemoryError

__all__ = ["warm", "warm_sync"]


async def warm(client: RedisClient, *, counters: Iterable[TokenCounter] | None = None) -> None:
    """Load the encoders of ``counters`` (default: the default counter) in a thread, the
    scripts on every primary of ``client``'s server, and the search analyser; then run one
    append down the whole write path, to a probe memory of the process's own under the
    ``compozy-warm`` project, cleared at once (its ``meta`` key expires within 10 s).
    Idempotent, but each call offers the server the library again: call it once, at start. An
    unreachable server raises :class:`~compozy_memory.BackendError`; a
    user who may not load scripts is left for the first call to meet (an operator may have
    run ``compozy-memory install``)."""
    chosen = list(counters) if counters is not None else [default_counter()]
    loading = asyncio.gather(*(asyncio.to_thread(_warm_counter, c) for c in chosen))
    try:
        reader = MemoryInstance.open(client, project=_PROBE_PROJECT, key="probe", read_only=True)
        await arun_client(_load(client), client)
        await reader.transport.drive(_read(reader))
    finally:
        await loading
    writer = MemoryInstance.open(client, **_writer_options())
    await writer.transport.drive(_rehearse(writer, chosen))


def warm_sync(client: SyncRedisClient, *, counters: Iterable[TokenCounter] | None = None) -> None:
    """:func:`warm` for a blocking client (the encoders load in the calling thread)."""
    chosen = list(counters) if counters is not None else [default_counter()]
    for counter in chosen:
        _warm_counter(counter)
    reader = SyncMemoryInstance.open(client, project=_PROBE_PROJECT, key="probe", read_only=True)
    run_client(_load(client), client)
    reader.transport.drive(_read(reader))
    writer = SyncMemoryInstance.open(client, **_writer_options())
    writer.transport.drive(_rehearse(writer, chosen))


def _load(client: object) -> ClientSteps[None]:
    """The server reached, the scripts loaded."""
    try:
        yield Exec(None, ("PING",))
    except redis_errors.RedisError as exc:
        raise translate(exc, "warm", "warm") from exc
    yield from delivery_for(client).warm("warm")


def _read(reader: MemoryCore) -> Steps[None]:
    """One read down the whole path."""
    # One read through the whole path an append takes (handle, gateway, transport,
    # batcher, delivery, reply), on keys nothing writes; a user confined to other keys
    # is refused, which warms the same path.
    with contextlib.suppress(CompozyMemoryError):
        yield from reader.gateway.health()
    analyze("warm the stemmer and the stop words")


def _rehearse(writer: MemoryCore, chosen: list[TokenCounter]) -> Steps[None]:
    # The first message a process validates, serialises and counts on the loop's own thread
    # pays for lazily built state (validators, tiktoken's per-thread regex, the tick's
    # counting batch): pay it here. (append passes a tuple and append_many the caller's list:
    # the first isinstance check of each against the Mapping ABC walks its registry)
    local = [c for c in chosen if callable(getattr(c, "preload", None))]  # no API calls
    for counter in [_LOCAL, *local]:
        for batch in (
            [{"role": "user", "content": "warm up the encoder"}],
            ({"role": "user", "content": "warm"},),
        ):
            yield from encode_messages(batch, MemoryPolicy(), counter, "warm")
    for counter in local:
        if getattr(counter, "thread_safe", False) is True:
            counter.count("warm up the encoder on this thread")
    # One append down the whole write path and back (the reply, the metrics), to a memory of
    # this process's own that is cleared at once and whose last key expires within seconds.
    # A user who may not write there (ACL, a replica) is refused, which warms most of it.
    with contextlib.suppress(CompozyMemoryError):
        yield from writer.steps.append_many(({"role": "user", "content": "warm"},))
        yield from writer.steps.clear()


def _writer_options() -> dict[str, Any]:
    return {
        "project": _PROBE_PROJECT,
        "key": f"probe:{secrets.token_hex(8)}",
        "policy": MemoryPolicy(ttl=_PROBE_TTL),
        "counter": _LOCAL,
        # Cleared at once: nothing is left to index, and no catch-up outlives the warm-up.
        "background_index": False,
    }


_PROBE_PROJECT = "compozy-warm"
_PROBE_TTL = timedelta(seconds=10)
_LOCAL = HeuristicCounter()


def _warm_counter(counter: TokenCounter) -> None:
    load = getattr(counter, "preload", None)
    if callable(load):
        load()
