"""What the operations of a memory return: plain, frozen values.

They live apart from the handle and the flusher, so code that reads a result (a metrics
exporter, a test, an adapter) need not import the machinery that made it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from compozy_memory._model.messages import Message

__all__ = [
    "AppendResult",
    "ContextLayers",
    "Conversation",
    "FlushCommit",
    "FlushPlan",
    "FlushResult",
    "Hit",
    "Hits",
    "MemoryHealth",
    "Snapshot",
    "Summary",
    "Tier",
    "Transcript",
    "TrimResult",
]

Tier = Literal["none", "normal", "warning", "critical"]
FlushOutcome = Literal["summarised", "evicted", "nothing", "skipped", "conflicted"]


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What an append or replace stored, and the memory's totals right after it."""

    first_id: int
    last_id: int
    total_tokens: int
    total_count: int
    summary_tokens: int = 0
    max_tokens: int | None = None
    #: True when the dedupe key was already stored: nothing was written by this call, the ids
    #: are those of the first call, the totals are the current ones.
    duplicate: bool = False
    #: The memory's incarnation: it changes when the memory expires and is written again.
    #: Pass it to ``replace(if_last_id=..., if_incarnation=...)``.
    incarnation: str = ""
    #: The memory's version after the write: it names the content, changing with every write
    #: (``<last_id>:<mark>``). Pass it to ``replace(if_version=...)`` for a compare-and-set
    #: that no other write, even one bringing ``last_id`` back to the same number, passes.
    version: str = ""

    @property
    def ids(self) -> range:
        return range(self.first_id, self.last_id + 1)

    @property
    def context_tokens(self) -> int:
        """Tokens of the whole context: live messages and summaries."""
        return self.total_tokens + self.summary_tokens

    @property
    def budget_used(self) -> float | None:
        """Share of the token budget in use (may exceed 1.0 until a flush), or None."""
        return None if self.max_tokens is None else self.context_tokens / self.max_tokens


@dataclass(frozen=True, slots=True)
class TrimResult:
    removed_count: int
    removed_tokens: int
    total_tokens: int
    total_count: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A consistent copy of a memory, as a flush plans from it."""

    epoch: int
    last_id: int
    tokens: int
    summary_tokens: int
    summaries: tuple[Message, ...]
    messages: tuple[Message, ...]
    #: Live messages in the memory; more than ``len(messages)`` when the read was bounded.
    count: int = -1
    #: Token totals of the live messages by priority, from meta (all of them, read or not).
    priority_tokens: Mapping[int, int] | None = None
    #: The memory's incarnation when the snapshot was read.
    incarnation: str = ""
    #: Messages with a smaller id are indexed; only those may move to the archive.
    ix_next: int = 0
    #: The memory's version when the snapshot was read (see ``AppendResult.version``).
    version: str = ""

    @property
    def context_tokens(self) -> int:
        return self.tokens + self.summary_tokens

    @property
    def complete(self) -> bool:
        """Whether ``messages`` holds every live message."""
        return self.count < 0 or len(self.messages) >= self.count


@dataclass(frozen=True, slots=True)
class MemoryHealth:
    """Totals kept in Redis by the scripts, read in one consistent snapshot."""

    token_count: int
    message_count: int
    last_id: int
    priority_tokens: Mapping[int, int]
    priority_counts: Mapping[int, int]
    archived: int
    archive_length: int
    summaries: int
    summary_tokens: int
    trimmed: int
    #: Archived messages brought back into context by the recall tools.
    recalled: int
    #: Messages (live, archived, summaries) in the search index.
    indexed: int
    flush_count: int
    last_flush_ms: int | None
    ttl_ms: int | None
    strategy: str
    max_tokens: int | None
    #: Messages the index has not reached yet: the indexer works them off in the background,
    #: in batches (a search still finds the newest 128 of them, 256 KiB at most, read from
    #: the live list).
    unindexed: int = 0
    #: The memory's data format (meta's ``fmt``; 1 before formats were named).
    data_format: int = 1
    #: Parts of the memory whose keys are gone while meta says they hold something: evicted
    #: or deleted. Every script refuses such a memory (:class:`MemoryEvictedError`);
    #: ``clear()`` repairs it by removing what is left.
    evicted: tuple[str, ...] = ()
    #: The server's ``maxmemory-policy`` (None where this user may not read INFO), and why it
    #: may evict part of this memory, if it may (``noeviction`` is safe; see the README).
    eviction_policy: str | None = None
    eviction_warning: str | None = None
    #: The server settings that bound what a tenant sends by hand, as the server reports them
    #: (``proto-max-bulk-len``, ``client-query-buffer-limit``, ``maxmemory-clients``; empty
    #: where this user may not read them: ``CONFIG GET``), and why they let a tenant send far
    #: more than compozy-memory ever does, if they do (docs/operations.md, "Limits a tenant
    #: cannot raise").
    server_limits: Mapping[str, str] = field(default_factory=dict)
    limits_warning: str | None = None
    #: Why search is falling behind the writes, when ``unindexed`` passed
    #: ``INDEX_BACKLOG_WARNING``: the writers outrun the indexer (docs/operations.md, "An index
    #: backlog" says how to slow them).
    index_warning: str | None = None


@dataclass(frozen=True, slots=True)
class FlushCommit:
    """What ``flush_commit`` changed, and the totals right after it."""

    summary_id: int | None
    removed_count: int
    removed_tokens: int
    total_tokens: int
    total_count: int
    summary_tokens: int

    @property
    def context_tokens(self) -> int:
        return self.total_tokens + self.summary_tokens


@dataclass(frozen=True, slots=True)
class FlushPlan:
    """Exactly which ids a flush removes, and what it expects to find."""

    prefix_ids: tuple[int, ...] = ()
    summarize_ids: tuple[int, ...] = ()
    evict_ids: tuple[int, ...] = ()
    fold_summary_ids: tuple[int, ...] = ()
    tier: Tier = "none"
    context_tokens: int = 0
    projected_tokens: int = 0
    #: The snapshot was bounded and the memory holds more: another round may be needed.
    partial: bool = False
    #: Why an empty plan leaves a memory over its budget, when it does.
    blocked: str | None = None
    #: Live messages after the plan, as of its snapshot (-1: not known).
    projected_count: int = -1

    @property
    def empty(self) -> bool:
        return not (self.summarize_ids or self.evict_ids)

    @property
    def remove_ids(self) -> tuple[int, ...]:
        return tuple(sorted((*self.summarize_ids, *self.evict_ids)))


@dataclass(frozen=True, slots=True)
class Summary:
    """A summarizer's text, the method that made it, and why a fallback was used, if one was."""

    text: str
    method: str
    fallback: str | None = None


@dataclass(frozen=True, slots=True)
class FlushResult:
    """What a flush did. With several rounds (a bounded snapshot of a flooded memory), the
    plan, summary and the figures derived from them are the last round's."""

    outcome: FlushOutcome
    plan: FlushPlan | None = None
    summary: Summary | None = None
    summary_id: int | None = None
    removed_tokens: int = 0
    context_tokens: int | None = None
    epoch: int | None = None
    rounds: int = 1

    @property
    def committed(self) -> bool:
        """Whether the flush changed the memory."""
        return self.outcome in ("summarised", "evicted") and self.plan is not None

    @property
    def summarized_count(self) -> int:
        """The spec's ``summarized_count``: live messages replaced by the summary, that is
        ``len(plan.summarize_ids)``. Evicted messages and folded summaries are not counted;
        0 when nothing was committed."""
        return len(self.plan.summarize_ids) if self.committed and self.plan else 0

    @property
    def tokens_saved(self) -> int:
        """The spec's ``tokens_saved``: the plan's projection, ``plan.context_tokens -
        plan.projected_tokens``. The projection counts the summary at its whole budget
        (``summary_tokens``) and the summary is never larger, so the commit saved at least
        this much; it is what ``compozy_memory_tokens_saved_total`` adds. (The context
        after the commit is no measure: appends made during the flush are in it.) 0 when
        nothing was committed."""
        if not self.committed or self.plan is None:
            return 0
        return max(0, self.plan.context_tokens - self.plan.projected_tokens)


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: a message, its score (BM25's, or BM25 fused with dense scores
    with an embedder; neighbours included), and the messages next to it (the turn before and
    after), where there are some."""

    id: int
    score: float
    message: Message
    before: Message | None = None
    after: Message | None = None
    #: Where the message is: ``"live"`` (in the conversation), ``"archive"`` (moved out by a
    #: trim, replace or flush) or ``"summary"`` (a summary the conversation still holds).
    where: str = "archive"


class Hits(list[Hit]):
    """Search results, best first, how many messages search could not see yet, and the
    summaries that match (:attr:`summaries`)."""

    #: Messages search could not see: not indexed yet and older than the live tail a search
    #: reads itself (the newest 128, 256 KiB at most: a longer backlog, or an index being
    #: rebuilt); ``0`` when search saw everything.
    unindexed: int = 0
    #: Summaries that match, best first, in a lane of their own (a search without
    #: ``roles``): they never take the place of a message in the list itself.
    summaries: tuple[Hit, ...] = ()


@dataclass(frozen=True, slots=True)
class ContextLayers:
    """A context as ``context()`` assembled it, layer by layer (each oldest first)."""

    pinned: tuple[Message, ...] = ()
    summaries: tuple[Message, ...] = ()
    #: Hits for the query and recalled messages, ordered by id.
    recalled: tuple[Message, ...] = ()
    #: Archived originals shown because every live message fitted with room to spare.
    backfill: tuple[Message, ...] = ()
    window: tuple[Message, ...] = ()
    #: Session facts (the kernel layer): one system message, or none.
    facts: tuple[Message, ...] = ()

    @property
    def messages(self) -> list[Message]:
        """The context in the order an LLM reads it."""
        return [
            *self.pinned,
            *self.facts,
            *self.summaries,
            *self.recalled,
            *self.backfill,
            *self.window,
        ]

    @property
    def tokens(self) -> int:
        return sum(m.tokens or 0 for m in self.messages)


@dataclass(frozen=True, slots=True)
class Transcript:
    """A memory's envelopes as Redis holds them (JSON text), each part oldest first."""

    msgs: tuple[str, ...]
    summaries: tuple[str, ...]
    archive: tuple[str, ...]
    #: The memory's version when it was read (see ``AppendResult.version``).
    version: str = ""


@dataclass(frozen=True, slots=True)
class Conversation:
    """A memory's summaries and live messages, oldest first, from one state of it, and that
    state's version: what ``replace(if_version=...)`` compares against."""

    summaries: tuple[Message, ...]
    messages: tuple[Message, ...]
    version: str
