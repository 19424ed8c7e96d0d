"""The memory handles' operations: one row a public method of both handles."""

from __future__ import annotations

from compozy_memory._operations.kinds import Operation, Span

__all__ = ["HANDLE_OPERATIONS"]

HANDLE_OPERATIONS = (
    Operation(
        "append",
        "message: MessageInput, *, dedupe_key: str | None = None, offload: bool = False, "
        "namespace: Namespace | None = None",
        "AppendResult",
        group="writes",
        doc="""Store one message; Redis assigns its id and timestamp.

With ``offload``, a message larger than the memory's ``max_tokens`` is not refused:
its content goes to :attr:`results` (in ``namespace``, by default the global one) and
the message keeps a short stub (kind, size, first lines) and ``metadata.result_ref``.
""",
        sync_doc="Store one message (:meth:`MemoryInstance.append`).",
    ),
    Operation(
        "append_many",
        "messages: Iterable[MessageInput], *, dedupe_key: str | None = None, "
        "offload: bool = False, namespace: Namespace | None = None",
        "AppendResult",
        group="writes",
        doc="""Store several messages in one atomic step, in order, with consecutive ids.

The append is applied at most once per ``dedupe_key`` (a random key per call when none
is given, which makes the handle's own retries safe). Pass your own, such as the id of
the event being recorded, to make retries across processes safe too: a repeat returns
``duplicate=True`` and writes nothing. A key is remembered until 1,000 more messages
have been appended to the memory; it names one append, and reusing it for other
messages stores nothing.
""",
        sync_doc="Store several messages in one atomic step (:meth:`MemoryInstance.append_many`).",
    ),
    Operation(
        "replace",
        "messages: Iterable[MessageInput], *, if_last_id: int | None = None, "
        "if_incarnation: str | None = None, if_version: str | None = None, "
        "dedupe_key: str | None = None",
        "AppendResult",
        group="writes",
        span=Span("replace", records="messages"),
        doc="""Swap the conversation for ``messages``; the old ones go to the archive.

With ``if_version`` (an :class:`AppendResult`'s or a :class:`Snapshot`'s ``version``)
the swap happens only if nothing was written to the memory since: no append, trim,
flush, replace or clear, even one that brought the last id back to the same number.
With ``if_last_id`` only if no message was appended since the caller saw that id, in
the same incarnation of the memory: ``if_incarnation``, by default the one this
handle last saw (a read or a write through it); a handle that saw none refuses
(:class:`UsageError`) rather than guess. Otherwise :class:`ConflictError` is raised
and nothing changes. ``dedupe_key`` works as for :meth:`append_many`.

A conversation of more than ``MOVE_STEP`` (1,000) live messages is first archived in
bounded steps, its oldest first, then swapped: if the swap's condition then fails, the
messages those steps moved stay in the archive.
""",
        sync_doc="Swap the conversation for ``messages`` (:meth:`MemoryInstance.replace`).",
    ),
    Operation(
        "trim",
        "*, keep_messages: int | None = None, max_tokens: int | None = None",
        "TrimResult",
        group="writes",
        span=Span("trim", count="result.removed_count"),
        doc="""Remove the oldest messages until at most ``keep_messages`` and ``max_tokens`` remain.

Priority 0 messages are never removed. Removed originals go to the archive, at most
``MOVE_STEP`` (1,000) a call to Redis, so a long trim never holds the server; an
interrupted trim has trimmed less, and lost nothing.
""",
        sync_doc="Archive the oldest messages in bounded steps (:meth:`MemoryInstance.trim`).",
    ),
    Operation(
        "clear",
        "",
        "int",
        group="writes",
        span=Span("clear", count="result"),
        doc="""Remove every message, summary, archived original and session fact; return how
many messages were live.

Results the removed messages pinned (``append(..., offload=True)``) are released
after the clear: read first, released once each after. A message appended between
the read and the clear keeps its pin (it ends with the memory's TTL), and a release
that fails is logged, never raised: the clear has happened.""",
        sync_doc="Remove everything of the memory (:meth:`MemoryInstance.clear`).",
    ),
    Operation(
        "set_ttl",
        "ttl: timedelta | float | None",
        "int",
        group="writes",
        doc="""Set (seconds or timedelta) or remove (None) the TTL of every key of the instance.

Later writes through this handle keep the new TTL. Returns how many keys exist.
""",
        sync_doc="Set or remove the TTL of every key (:meth:`MemoryInstance.set_ttl`).",
    ),
    Operation(
        "import_transcript",
        "text: str",
        "int",
        group="writes",
        doc="""Write a JSON Lines transcript (:meth:`export_transcript`) into this memory, which
must be empty, keeping every id and timestamp; returns the live messages.""",
        sync_doc="""Write a JSON Lines transcript into this empty memory
(:meth:`MemoryInstance.import_transcript`).""",
    ),
    Operation(
        "flush",
        "",
        "FlushResult",
        group="writes",
        doc=("Flush now (waiting for nothing: if another replica holds the lock, this one skips)."),
        sync_doc="""Flush now, in this thread (:meth:`MemoryInstance.flush`); the summarizer runs on
the summarizers' event loop thread.""",
    ),
    Operation(
        "read",
        "start: int = 0, stop: int = -1",
        "list[Message]",
        group="reads",
        span=Span("read", found="result"),
        doc="""Messages from index ``start`` to ``stop`` inclusive, oldest first (LRANGE rules).

A range of more than ``MAX_READ`` (1,000) messages is read a page a call, each call
bounded; if a write changes the memory between two pages the read starts again
(:class:`ConcurrentChangeError` after a few tries), so the result is one state of
the memory.""",
        sync_doc=(
            "Messages from ``start`` to ``stop``, paged, one state (:meth:`MemoryInstance.read`)."
        ),
    ),
    Operation(
        "conversation",
        "",
        "Conversation",
        group="reads",
        doc="""The summaries and every live message, from one state of the memory, with its
version: read a page (``MAX_READ``) a call, starting again if a write lands between
two pages. For a compare-and-set edit of the whole conversation:
``replace(kept, if_version=conversation.version)``.""",
        sync_doc="""Summaries and live messages of one state, with its version
(:meth:`MemoryInstance.conversation`).""",
    ),
    Operation(
        "snapshot",
        "limit: int = MOVE_STEP",
        "Snapshot",
        group="reads",
        doc="""Totals, summaries and the oldest live messages until ``limit`` that are not pinned
(at most ``MOVE_STEP``, 1,000), read atomically.

The totals always cover the whole memory, so a bounded snapshot is enough to plan
a flush of a memory far larger than the limit.""",
        sync_doc="""Totals, summaries and the oldest messages, read atomically
(:meth:`MemoryInstance.snapshot`).""",
    ),
    Operation(
        "recall",
        "offset: int = 0, limit: int = 100",
        "list[Message]",
        group="reads",
        span=Span("recall", found="result"),
        doc="Originals removed by trims, replaces and flushes, oldest first.",
        sync_doc="Archived originals, oldest first (:meth:`MemoryInstance.recall`).",
    ),
    Operation(
        "export_transcript",
        "format: Literal['markdown', 'jsonl'] = 'markdown', *, include_archived: bool = False",
        "str",
        group="reads",
        doc="""The memory as Markdown (to read: speakers, times, tool calls folded, summaries
marked) or JSON Lines (to move: :meth:`import_transcript` reads it back with the
same ids, times, priorities and blocks), in one consistent read. JSON Lines always
carry the archived originals, so nothing is lost; Markdown shows them with
``include_archived=True``.""",
        sync_doc="The memory as Markdown or JSON Lines (:meth:`MemoryInstance.export_transcript`).",
    ),
    Operation(
        "read_window",
        "max_tokens: int | None = None, *, max_messages: int | None = None",
        "list[Message]",
        group="reads",
        span=Span("read", found="result"),
        doc="""The pinned messages (priority 0), then the newest others that fit the rest of
``max_tokens`` (default: the policy's budget, none for a memory limited by count
only), and at most ``max_messages`` of them (default: the policy's).

The window is contiguous and ends at the newest message, and holds at most 2,000
messages. A tool result whose call fell outside the window is dropped from its start,
so the window can be sent to an LLM as it is. Raises ContextOverflowError if the
pinned messages alone do not fit.
""",
        sync_doc="Pinned messages, then the newest that fit (:meth:`MemoryInstance.read_window`).",
    ),
    Operation(
        "context",
        "max_tokens: int | None = None, *, query: str | None = None, reserve_output: int = 0",
        "list[Message]",
        group="reads",
        span=Span("context", query=True, found="result"),
        doc="""What to send an LLM, within ``max_tokens - reserve_output`` tokens, in one atomic
read: the pinned messages (system prompt, profile), the rolling summary, messages
recalled by the recall tools and the earlier messages that best answer ``query``
(without one, the newest user turn's text: ``ContextPolicy.implicit_query``), then
the newest messages, and (when all of those fit with room to spare) the newest
archived originals before them. With an embedder the hits are BM25's fused with
dense scores, as :meth:`search` ranks them. See :meth:`context_layers`.

Raises ContextOverflowError if the pinned messages alone exceed the budget.""",
        sync_doc="What to send an LLM within the budget (:meth:`MemoryInstance.context`).",
    ),
    Operation(
        "context_layers",
        "max_tokens: int | None = None, *, query: str | None = None, reserve_output: int = 0",
        "ContextLayers",
        group="reads",
        span=Span("context", query=True, found="result.messages"),
        doc=""":meth:`context`, layer by layer. The shares come from the policy's
:class:`ContextPolicy`; a tool call and its results are never split.

With a ``max_messages`` policy, the recall layer, the backfill and the window together
hold at most that many messages, the newest (the recall layer at most ``recall_share``
of them, as of a token budget); a memory limited by count only has no token limit (and
no backfill, which would then read the whole archive).""",
        sync_doc=":meth:`context`, layer by layer (:meth:`MemoryInstance.context_layers`).",
    ),
    Operation(
        "search",
        "query: str, limit: int = 10, *, roles: Iterable[str] | None = None, "
        "since_id: int | None = None",
        "Hits",
        group="reads",
        span=Span(
            "search", query=True, found="[h.message for h in result], [h.score for h in result]"
        ),
        doc="""The messages that best match ``query`` (BM25 over the memory's index: live
messages, archived ones and summaries, a turn's neighbours counting in its rank),
best first, each with the turns before and after it and where it is
(:attr:`Hit.where`). ``roles`` keeps only messages of those roles (``"summary"`` for
summaries); ``since_id`` only messages with that id or newer.

Messages appended moments ago are found too, from any handle: a search ranks the live
messages the index has not reached yet itself (up to 128 of them). Past those,
:attr:`Hits.unindexed` says how many messages search could not see (what this handle
wrote is indexed first).""",
        sync_doc="The messages that best match ``query`` (:meth:`MemoryInstance.search`).",
    ),
    Operation(
        "recall_messages",
        "ids: Iterable[int]",
        "list[Message]",
        group="reads",
        span=Span("recall_messages", found="result"),
        doc="""Bring archived messages back into context (the recall share of :meth:`context`):
they stay until :meth:`clear_recalled`, or until newer recalls need their room.
Returns the messages brought back now (unknown or already recalled ids are skipped).""",
        sync_doc=(
            "Bring archived messages back into context (:meth:`MemoryInstance.recall_messages`)."
        ),
    ),
    Operation(
        "clear_recalled",
        "",
        "int",
        group="reads",
        doc="Drop every recalled message from the context (they stay in the archive).",
        sync_doc="Drop every recalled message from the context.",
    ),
    Operation(
        "len",
        "",
        "int",
        group="reads",
        doc="Number of live messages.",
        sync_doc="Number of live messages.",
    ),
    Operation(
        "token_count",
        "",
        "int",
        group="reads",
        doc="Exact tokens of the live messages, from the totals the scripts keep.",
        sync_doc="Exact tokens of the live messages, from the totals the scripts keep.",
    ),
    Operation(
        "health",
        "",
        "MemoryHealth",
        group="reads",
        doc="""The memory's totals and sizes in one consistent read, what the indexer has still
to do, the parts whose keys are gone (``evicted``) and the server's eviction policy,
with a warning when it may evict part of this memory (logged too).""",
        sync_doc="Totals, flush and index state, in one read (:meth:`MemoryInstance.health`).",
    ),
)
