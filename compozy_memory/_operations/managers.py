"""The managers' operations: one row a public method of both managers."""

from __future__ import annotations

from compozy_memory._operations.kinds import ManagerOperation

__all__ = ["MANAGER_OPERATIONS"]

MANAGER_OPERATIONS = (
    ManagerOperation(
        "start",
        "",
        "None",
        doc="""Load now what a first append would otherwise load: every memory's token encoder,
the server-side scripts on every primary and the search analyser (:func:`warm`).
``async with`` calls it, and so does the first :meth:`get` (where a failure is left
for the first call to report). Raises when the server cannot be reached.""",
        sync_doc="""Load every memory's token encoder, the scripts on every primary and the search
analyser now (:func:`~compozy_memory.warm_sync`); raises when the server cannot be
reached.""",
        body="""self._started = True
await warm(self.client, counters=self._counters())""",
    ),
    ManagerOperation(
        "get",
        "ref: str | MemoryReference, context: Mapping[str, Any] | None = None",
        "{handle}",
        doc="""The handle for ``ref`` (a memory id, read-write, or a reference) in ``context``.

``context`` holds what key templates read: ``workflow``, ``agent``, ``user``...;
``project.id`` is filled in from the registry.

Counted in ``compozy_memory_config_resolution_total{pattern="direct"}``.
""",
        sync_doc="The handle for ``ref`` in ``context`` (:meth:`MemoryManager.get`).",
        body="""await self._start_once()
return self._looked_up(ref, context)""",
    ),
    ManagerOperation(
        "session",
        "ref: str | MemoryReference, *, agent: str | None = None, session_id: str | None = None, "
        "context: Mapping[str, Any] | None = None",
        "tuple[str, {handle}]",
        doc="""A session's handle: ``ref`` rendered with ``session`` (a new :func:`uuid7` when
``session_id`` is None) and ``agent`` in its context. Returns ``(session_id, handle)``;
the session shows in :meth:`list_sessions` after its first write.""",
        sync_doc="A session's handle and id (:meth:`MemoryManager.session`).",
        body="""sid, values = self._session_context(agent, session_id, context)
return sid, await self.get(ref, values)""",
    ),
    ManagerOperation(
        "list_sessions",
        "project: str | None = None, *, agent: str | None = None, limit: int = 50, "
        "cursor: str | None = None",
        "SessionPage",
        doc="""The project's sessions (or one agent's), most recently active first, with their
created and last-active times, message and token counts; ``cursor`` from the last
page gives the next. One bounded read of the index, whatever the number of sessions.
A handle shared by several agents is indexed under the agent that opened it first.""",
        sync_doc="""The project's sessions, most recently active first
(:meth:`MemoryManager.list_sessions`).""",
        body="""index = self._index_of(project)
await index.flushed()  # this process's own writes are listed
page: SessionPage = await index.transport.drive(
    index.page(agent=agent, limit=limit, cursor=cursor)
)
return page""",
    ),
    ManagerOperation(
        "for_agent",
        "agent: str | Mapping[str, Any], context: Mapping[str, Any] | None = None",
        "list[{handle}]",
        doc="""Handles for every memory of an agent: its id in the project files, or its settings.

Counted in ``compozy_memory_config_resolution_total`` by the configuration level the
settings use (``simple``, ``multi``, ``advanced``, or ``stateless``).""",
        sync_doc="Handles for every memory of an agent (:meth:`MemoryManager.for_agent`).",
        body="""pattern, refs = self._references(agent)
await self._start_once()
return self._handles_for(agent, pattern, refs, context)""",
    ),
)
