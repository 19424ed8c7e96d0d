"""The event loop a sync handle's summarizers run on.

Summarizers are coroutines (:class:`~compozy_memory.Summarizer`), and a sync handle's flush
still has to run one: :func:`run_coroutine` runs it on one event loop that a daemon thread of
the process keeps for that alone (so an async API client a summarizer keeps, such as
Anthropic's, always meets the loop it was made on). Nothing else of the sync API touches an
event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_coroutine"]

T = TypeVar("T")

_lock = threading.Lock()
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
    global _loop, _lock
    _loop, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
