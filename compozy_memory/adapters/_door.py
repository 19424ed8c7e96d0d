"""How an adapter reaches its memory from any caller: async or sync, on any loop or thread.

Frameworks call an adapter's async methods on event loops of their own choosing (a new loop
per ``Runner.run_sync`` call, a thread's loop for LlamaIndex's sync wrappers) and its sync
methods anywhere, inside a running loop included. A ``redis.asyncio`` client belongs to the
loop its connections were opened on, so a :class:`Door` holds the memory twice:

* its async handle (:class:`~compozy_memory.MemoryInstance`), used natively by async methods
  on the loop its client belongs to (a client no call has used yet belongs to the loop the
  adapter was made in, if one was running: a loop made for one call and closed after, as
  ``Runner.run_sync`` makes, never takes a client and leaves its connections behind);
* its sync twin (:meth:`~compozy_memory.MemoryInstance.to_sync`, or the
  :class:`~compozy_memory.SyncMemoryInstance` the adapter was given), used by sync methods in
  the calling thread, and by async methods on any other loop through ``asyncio.to_thread``.

Either way the same steps run (:mod:`compozy_memory._wire.steps`): what an adapter does is
written once, as steps over the handle (:class:`~compozy_memory._store.core.MemoryCore`). No
private event loop is involved.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import TypeVar

from compozy_memory._store.core import MemoryCore
from compozy_memory._store.instance import MemoryInstance
from compozy_memory._store.sync_instance import SyncMemoryInstance
from compozy_memory._wire.steps import Steps

__all__ = ["AnyMemory", "Door", "running_loop"]

T = TypeVar("T")

#: What an adapter is built on: an async handle or a sync one.
AnyMemory = MemoryInstance | SyncMemoryInstance


class Door:
    """One memory, as an async handle (if there is one) and a sync one. ``home`` is the loop
    the adapter was made in (see :func:`running_loop`), which an unused client joins."""

    __slots__ = ("home", "memory")

    def __init__(
        self, memory: AnyMemory, home: weakref.ref[asyncio.AbstractEventLoop] | None = None
    ) -> None:
        self.memory = memory
        self.home = home

    def sync(self) -> SyncMemoryInstance:
        memory = self.memory
        return memory if isinstance(memory, SyncMemoryInstance) else memory.to_sync()

    def call(self, steps: Callable[[MemoryCore], Steps[T]]) -> T:
        """Run ``steps`` on the sync handle, in this thread (a running loop waits)."""
        handle = self.sync()
        return handle.transport.drive(steps(handle))

    async def acall(self, steps: Callable[[MemoryCore], Steps[T]]) -> T:
        """Run ``steps`` on the async handle if its client belongs to the running loop, else
        on the sync handle in a worker thread."""
        memory = self.memory
        if isinstance(memory, MemoryInstance):
            claim = self.home is not None and self.home() is asyncio.get_running_loop()
            if memory.transport.serves_running_loop(claim=claim):
                return await memory.transport.drive(steps(memory))
        return await asyncio.to_thread(self.call, steps)


def running_loop() -> weakref.ref[asyncio.AbstractEventLoop] | None:
    """The running loop (weakly), or None: where an adapter is being made."""
    try:
        return weakref.ref(asyncio.get_running_loop())
    except RuntimeError:
        return None
