"""The kinds of rows of the operations' table, and the names that differ between the twins."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ASYNC_ONLY", "SYNC_NAMES", "SYNC_ONLY", "ManagerOperation", "Operation", "Span"]


@dataclass(frozen=True)
class Span:
    """The OpenTelemetry span a handle's method opens around its steps
    (``_telemetry.operation``): the GenAI operation's name, and what goes on it."""

    #: The operation (a key of ``_telemetry.GENAI_OPERATIONS``).
    name: str
    #: A parameter whose length is the records the operation sends (made a list first).
    records: str | None = None
    #: Whether the ``query`` parameter goes on the span (captured content only).
    query: bool = False
    #: What of ``result`` the span counts (``span.count(...)``), as an expression.
    count: str | None = None
    #: What of ``result`` the span reports as the records found (``span.found(...)``).
    found: str | None = None


@dataclass(frozen=True)
class Operation:
    """One public method of both memory handles."""

    #: The method's name, on both handles and on :class:`~compozy_memory.MemorySteps`.
    name: str
    #: Its parameters after ``self``, as Python writes them.
    parameters: str
    #: What it returns (the steps return the same: ``Steps[returns]``).
    returns: str
    #: Which part of the class it is listed in.
    group: Literal["writes", "reads"]
    #: The async handle's docstring (the one the API reference shows).
    doc: str
    #: The sync handle's docstring: what differs, and where the whole story is.
    sync_doc: str
    #: The span the method opens, if any (a single call's span is the driver's).
    span: Span | None = None


@dataclass(frozen=True)
class ManagerOperation:
    """One public method of both managers."""

    name: str
    #: Its parameters after ``self``; ``{handle}`` in them or in ``returns`` is the manager's
    #: handle class (``MemoryInstance``, ``SyncMemoryInstance``).
    parameters: str
    returns: str
    doc: str
    sync_doc: str
    #: The body, in its async form (``await`` where the sync manager blocks).
    body: str


#: A sync method's names for what its async twin awaits, and the async-only protocol methods'
#: sync twins (as unasync renames them).
SYNC_NAMES = {
    "warm": "warm_sync",
    "flushed": "flushed_sync",
    "aclose": "close",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
}

#: Public methods only the async class has, and why.
ASYNC_ONLY = {
    # The blocking twin of an async handle (a sync handle is one already).
    "MemoryInstance": ("to_sync",),
    # get() without awaiting its lazy warm-up: the sync get() is that already.
    "MemoryManager": ("lookup",),
}
#: Public methods only the sync class has.
SYNC_ONLY: dict[str, tuple[str, ...]] = {"SyncMemoryInstance": (), "SyncMemoryManager": ()}
