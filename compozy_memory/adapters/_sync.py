"""Running the adapters' coroutines from the synchronous methods frameworks require.

A ``redis.asyncio`` client belongs to the event loop its connections were opened on. Sync
calls made where no loop runs go to one private loop, on a daemon thread of this process,
shared by every adapter: so a client used only through sync methods always meets the same
loop. A sync call made while a loop runs in the calling thread would block that loop (and
deadlock if the coroutine needed it), so it raises :class:`~compozy_memory.UsageError` naming
the async method to await instead.

Use one client per style: a client whose connections were opened on your own loop must not be
driven by sync calls as well (their connections would be shared by two loops).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from compozy_memory.errors import UsageError

__all__ = ["run_sync"]

_T = TypeVar("_T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def run_sync(coroutine: Coroutine[Any, Any, _T], *, method: str, instead: str) -> _T:
    """Run ``coroutine`` to completion on the private loop and return its result.

    Raises UsageError, without running it, when called from a thread whose loop is running.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        coroutine.close()
        raise UsageError(
            f"{method} is synchronous and was called inside a running event loop, which it "
            f"would block: await {instead} instead"
        )
    return asyncio.run_coroutine_threadsafe(coroutine, _private_loop()).result()


def _private_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="compozy-memory-sync", daemon=True
            )
            thread.start()
            _loop = loop
        return _loop


def _forget_after_fork() -> None:
    # The loop's thread does not exist in a forked child: start a new one there on demand.
    global _loop, _lock
    _loop = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
