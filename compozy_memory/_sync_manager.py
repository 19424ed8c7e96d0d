"""SyncMemoryManager: the manager's handles on redis-py's blocking client, for threads."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from compozy_memory._config.agents import MemoryReference
from compozy_memory._config.registry import MemoryRegistry
from compozy_memory._flush.summarizers import Summarizer
from compozy_memory._io.client_calls import SyncRedisClient
from compozy_memory._io.retry import RetryPolicy
from compozy_memory._manager_base import ManagerBase
from compozy_memory._metrics import MemoryMetrics
from compozy_memory._model.tokens import TokenCounter
from compozy_memory._search.dense import Embedder
from compozy_memory._search.fusion import Fusion
from compozy_memory._store.sessions import SessionPage
from compozy_memory._store.sync_instance import SyncMemoryInstance
from compozy_memory._store.warmup import warm_sync
from compozy_memory._wire.background import run_coroutine

__all__ = ["SyncMemoryManager"]

log = logging.getLogger("compozy_memory.manager")


class SyncMemoryManager(ManagerBase[SyncRedisClient, SyncMemoryInstance]):
    """:class:`~compozy_memory.MemoryManager` for threads: the same memories, keys, policies,
    flushing and session index, handing out :class:`~compozy_memory.SyncMemoryInstance`
    handles on a blocking ``redis.Redis`` or ``redis.cluster.RedisCluster`` client
    (:func:`~compozy_memory.connect_sync`).

    A handle's flushes (and index catch-ups) run on the process's background threads after
    its appends, as an async handle's run in tasks; their summarizers (coroutines) run on one
    event loop a daemon thread keeps for them. Unlike the async manager, the first
    :meth:`get` does not warm up: call :meth:`start` (``with`` does) to load the encoders and
    the scripts before the first append needs them.
    """

    def __init__(
        self,
        registry: MemoryRegistry,
        client: SyncRedisClient,
        *,
        counter: TokenCounter | None = None,
        flushing: bool = True,
        summarizer: Summarizer | None = None,
        metrics: MemoryMetrics | None = None,
        retry: RetryPolicy | None = None,
        embedder: Embedder | None = None,
        fusion: Fusion | None = None,
    ) -> None:
        super().__init__(
            registry,
            client,
            counter=counter,
            batching=False,
            flushing=flushing,
            summarizer=summarizer,
            metrics=metrics,
            retry=retry,
            embedder=embedder,
            fusion=fusion,
        )

    _handle_type = SyncMemoryInstance

    def start(self) -> None:
        """Load every memory's token encoder, the scripts on every primary and the search
        analyser now (:func:`~compozy_memory.warm_sync`); raises when the server cannot be
        reached."""
        self._started = True
        warm_sync(self.client, counters=self._counters())

    def __enter__(self) -> SyncMemoryManager:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def get(
        self, ref: str | MemoryReference, context: Mapping[str, Any] | None = None
    ) -> SyncMemoryInstance:
        """The handle for ``ref`` in ``context`` (:meth:`MemoryManager.get`)."""
        return self._looked_up(ref, context)

    def session(
        self,
        ref: str | MemoryReference,
        *,
        agent: str | None = None,
        session_id: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> tuple[str, SyncMemoryInstance]:
        """A session's handle and id (:meth:`MemoryManager.session`)."""
        sid, values = self._session_context(agent, session_id, context)
        return sid, self.get(ref, values)

    def list_sessions(
        self,
        project: str | None = None,
        *,
        agent: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> SessionPage:
        """The project's sessions, most recently active first
        (:meth:`MemoryManager.list_sessions`)."""
        index = self._index_of(project)
        index.flushed_sync()  # this process's own writes are listed
        return index.transport.drive(index.page(agent=agent, limit=limit, cursor=cursor))  # type: ignore[no-any-return]

    def for_agent(
        self, agent: str | Mapping[str, Any], context: Mapping[str, Any] | None = None
    ) -> list[SyncMemoryInstance]:
        """Handles for every memory of an agent (:meth:`MemoryManager.for_agent`)."""
        pattern, refs = self._references(agent)
        return self._handles_for(agent, pattern, refs, context)

    def close(self) -> None:
        """Stop the background work of every handle the manager gave out (as
        :meth:`SyncMemoryInstance.close`), send the session-index entries still pending, and
        close what the manager's summarizers and token counters opened (API clients, on the
        summarizers' loop); the Redis client is the caller's to close."""
        for handle in list(self._handles.values()):
            handle.close()
        self.sessions.flushed_sync()
        for closing in self._closing():
            run_coroutine(closing)
