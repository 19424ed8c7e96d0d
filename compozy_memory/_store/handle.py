"""What the helpers of a memory handle need of it, and what a handle needs of the flusher and
the session index attached to it: Protocols, so none of them imports another's class."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.policy import MemoryPolicy
from compozy_memory._model.results import AppendResult, FlushCommit, FlushResult
from compozy_memory._model.tokens import TokenCounter
from compozy_memory._results.store import ResultStore
from compozy_memory._search.runtime.indexer import Indexer
from compozy_memory._wire.effects import Observe
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.steps import Op

__all__ = ["FlushHook", "Handle", "IndexHook"]


class Handle(Protocol):
    """The parts of a memory handle (async or sync) its helpers use."""

    key: str
    keys: InstanceKeys
    read_only: bool
    policy: MemoryPolicy
    counter: TokenCounter
    gateway: MemoryGateway
    result_ops: ResultStore


class IndexHook(Protocol):
    """What a handle tells its session index (the manager attaches one): never waits."""

    def noticed(self, memory: Handle, result: AppendResult) -> None: ...

    def removed(self, memory: Handle, *, last_id: int, messages: int, tokens: int) -> None: ...

    def to_sync(self) -> IndexHook: ...


class FlushHook(Protocol):
    """What a handle needs of whatever flushes it (the manager attaches a Flusher)."""

    def notice(self, result: AppendResult) -> Observe | None: ...

    def flush(self) -> Op[FlushResult]: ...

    async def wait_idle(self) -> None: ...

    def wait_idle_sync(self, timeout: float | None = None) -> bool: ...

    def close(self) -> None: ...

    def twin(
        self,
        gateway: MemoryGateway,
        indexer: Indexer,
        on_commit: Callable[[FlushCommit, int], None] | None,
    ) -> FlushHook: ...
