"""What the helpers of a memory handle need of it: a Protocol, so they never import the
handle's class (which imports them)."""

from __future__ import annotations

from typing import Protocol

from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.policy import MemoryPolicy
from compozy_memory._model.tokens import TokenCounter
from compozy_memory._store.results_store import ResultStore
from compozy_memory._wire.gateway import MemoryGateway

__all__ = ["Handle"]


class Handle(Protocol):
    """The parts of a memory handle (async or sync) its helpers use."""

    key: str
    keys: InstanceKeys
    read_only: bool
    policy: MemoryPolicy
    counter: TokenCounter
    gateway: MemoryGateway
    result_ops: ResultStore
