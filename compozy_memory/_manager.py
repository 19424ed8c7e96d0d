"""MemoryManager: from a memory reference and a request's context to a shared instance handle."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from compozy_memory._config.agents import MemoryReference
from compozy_memory._flush.resource_settings import (
    ALLOCATION_OF_CONTENT_TYPE,
    DEFAULT_TOKEN_ALLOCATION,
    allocation_category,
    build_summarizer,
    compression_settings,
    flush_settings,
)
from compozy_memory._io.translate import RedisClient
from compozy_memory._manager_base import ManagerBase
from compozy_memory._store.instance import MemoryInstance
from compozy_memory._store.sessions import SessionPage
from compozy_memory._store.warmup import warm

# The flush settings of a resource lived here first: callers still find them here.
__all__ = [
    "ALLOCATION_OF_CONTENT_TYPE",
    "DEFAULT_TOKEN_ALLOCATION",
    "MemoryManager",
    "allocation_category",
    "build_summarizer",
    "compression_settings",
    "flush_settings",
]

log = logging.getLogger("compozy_memory.manager")

# The first get() warms the manager up (start()), but a slow server must not hold it longer.
_LAZY_START_SECONDS = 2.0


class MemoryManager(ManagerBase[RedisClient, MemoryInstance]):
    """Hands out :class:`MemoryInstance` handles for a project's memories.

    The key of an instance is ``<memory id>:<rendered key template>``, sanitised, so two
    memories never share storage and two agents that resolve the same memory and key share
    one conversation. Read-write handles of memories with a token budget or ``max_messages``
    flush in the background as their resource says (summarizer, thresholds, lock TTL).

    Handles for the same memory, key and mode are shared while anyone holds one, and dropped
    with the last reference: a lookup creates no task, connection pool or counter, and
    nothing accumulates per call.

    Messages without ``tokens`` are counted as each resource's ``tokenizer`` says (cl100k
    when it says nothing), unless ``counter`` is given: then it counts for every memory.
    Local counters are shared per encoding across the process; API counters per model.
    :class:`~compozy_memory.SyncMemoryManager` does the same on redis-py's blocking client.
    """

    _handle_type = MemoryInstance

    def _handle_options(self) -> dict[str, Any]:
        return {"batching": self.batching}

    async def start(self) -> None:
        """Load now what a first append would otherwise load: every memory's token encoder,
        the server-side scripts on every primary and the search analyser (:func:`warm`).
        ``async with`` calls it, and so does the first :meth:`get` (where a failure is left
        for the first call to report). Raises when the server cannot be reached."""
        self._started = True
        await warm(self.client, counters=self._counters())

    async def _start_once(self) -> None:
        if not self._started:
            try:
                async with asyncio.timeout(_LAZY_START_SECONDS):
                    await self.start()
            except Exception as exc:  # best effort: a handle's first call says what is wrong
                log.debug("warming up at the first get failed: %r", exc)

    async def __aenter__(self) -> MemoryManager:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def get(
        self, ref: str | MemoryReference, context: Mapping[str, Any] | None = None
    ) -> MemoryInstance:
        """The handle for ``ref`` (a memory id, read-write, or a reference) in ``context``.

        ``context`` holds what key templates read: ``workflow``, ``agent``, ``user``...;
        ``project.id`` is filled in from the registry.

        Counted in ``compozy_memory_config_resolution_total{pattern="direct"}``.
        """
        await self._start_once()
        return self._looked_up(ref, context)

    def lookup(
        self, ref: str | MemoryReference, context: Mapping[str, Any] | None = None
    ) -> MemoryInstance:
        """:meth:`get` without awaiting, and so without its lazy warm-up: for code that
        cannot await (the adapters' synchronous methods, a factory called from a thread)."""
        return self._looked_up(ref, context)

    async def session(
        self,
        ref: str | MemoryReference,
        *,
        agent: str | None = None,
        session_id: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> tuple[str, MemoryInstance]:
        """A session's handle: ``ref`` rendered with ``session`` (a new :func:`uuid7` when
        ``session_id`` is None) and ``agent`` in its context. Returns ``(session_id, handle)``;
        the session shows in :meth:`list_sessions` after its first write."""
        sid, values = self._session_context(agent, session_id, context)
        return sid, await self.get(ref, values)

    async def list_sessions(
        self,
        project: str | None = None,
        *,
        agent: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> SessionPage:
        """The project's sessions (or one agent's), most recently active first, with their
        created and last-active times, message and token counts; ``cursor`` from the last
        page gives the next. One bounded read of the index, whatever the number of sessions.
        A handle shared by several agents is indexed under the agent that opened it first."""
        index = self._index_of(project)
        await index.flushed()  # this process's own writes are listed
        return await index.page(agent=agent, limit=limit, cursor=cursor)

    async def for_agent(
        self, agent: str | Mapping[str, Any], context: Mapping[str, Any] | None = None
    ) -> list[MemoryInstance]:
        """Handles for every memory of an agent: its id in the project files, or its settings.

        Counted in ``compozy_memory_config_resolution_total`` by the configuration level the
        settings use (``simple``, ``multi``, ``advanced``, or ``stateless``)."""
        pattern, refs = self._references(agent)
        await self._start_once()
        return self._handles_for(agent, pattern, refs, context)

    async def aclose(self) -> None:
        """Stop the background work of every handle the manager gave out (as
        :meth:`MemoryInstance.aclose`), send the session-index entries still pending, and
        close what the manager's summarizers and token counters opened (API clients); the
        Redis client is the caller's to close."""
        for handle in list(self._handles.values()):
            await handle.aclose()
        await self.sessions.flushed()
        for closing in self._closing():
            await closing
