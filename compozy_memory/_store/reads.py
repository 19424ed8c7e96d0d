"""What a handle reads for an LLM: the layered context, the window, search, recall.

:class:`ContextReads` is the reading half of a memory's steps
(:class:`~compozy_memory.MemorySteps`, ``memory.steps``), kept apart so each module holds one
job; it reads only the memory's parts (gateway, policy, facts). Its public methods are steps;
the handles' methods of the same names run them (and carry their documentation).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from datetime import UTC, date, datetime
from typing import Literal

from compozy_memory._facts.facts import Facts
from compozy_memory._model.exchanges import whole_exchanges
from compozy_memory._model.limits import (
    MAX_RECALL_IDS,
    MAX_SEARCH_CANDIDATES,
    MAX_SEARCH_LIMIT,
    MOVE_STEP,
    UNBOUNDED_TOKENS,
)
from compozy_memory._model.messages import Message
from compozy_memory._model.policy import MemoryPolicy
from compozy_memory._model.results import (
    ContextLayers,
    Conversation,
    Hits,
    MemoryHealth,
    Snapshot,
)
from compozy_memory._search.dense import Embedder
from compozy_memory._search.documents import KINDS, OTHER_KIND, message_day
from compozy_memory._search.fusion import Fusion
from compozy_memory._search.runtime.hybrid import Ranking, fused_hits, fused_ranking
from compozy_memory._search.runtime.indexer import Indexer
from compozy_memory._search.runtime.searching import bm25_ranking
from compozy_memory._search.runtime.vectors import Vectorizer
from compozy_memory._search.selection import timed_query
from compozy_memory._search.timewords import mentions_time
from compozy_memory._store import transcripts
from compozy_memory._store.handle import Handle
from compozy_memory._wire.effects import ABOUT, RECORDING, Content
from compozy_memory._wire.eviction import (
    eviction_policy,
    eviction_warning,
    index_warning,
    limits_warning,
    server_limits,
)
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.steps import Steps
from compozy_memory.errors import ConcurrentChangeError, ReadOnlyMemoryError, UsageError

__all__ = ["ContextReads"]

_log = logging.getLogger("compozy_memory")

#: Times a paged read starts again because a write changed the memory between its pages.
_READ_ATTEMPTS = 5
#: How far back ``context()`` looks for the newest user turn, its implicit query.
_USER_TURN_LOOKBACK = 8
#: Summaries a search without roles returns beside its messages (``Hits.summaries``).
SUMMARY_HITS = 3
#: The kinds a search without roles returns in its list: every kind but summaries.
MESSAGE_KINDS = sorted({*KINDS.values(), OTHER_KIND} - {KINDS["summary"]})


class ContextReads:
    """The reading half of a memory's steps: the parts it reads are the memory's."""

    gateway: MemoryGateway
    policy: MemoryPolicy
    fact_ops: Facts
    index_ops: Indexer
    embedder: Embedder | None
    fusion: Fusion
    vector_ops: Vectorizer | None
    key: str
    read_only: bool

    memory: Handle

    def read(self, start: int = 0, stop: int = -1) -> Steps[list[Message]]:
        """:meth:`MemoryInstance.read <compozy_memory.MemoryInstance.read>`, as steps."""
        gateway = self.gateway
        for _ in range(_READ_ATTEMPTS):
            page = yield from gateway.read_page(start, stop)
            count, messages = page.count, list(page.messages)
            first = max(count + start, 0) if start < 0 else start
            last = count + stop if stop < 0 else min(stop, count - 1)
            while first + len(messages) <= last:
                more = yield from gateway.read_page(first + len(messages), last)
                if more.version != page.version or not more.messages:
                    break
                messages += more.messages
            else:
                return messages
        raise ConcurrentChangeError(
            f"read: the memory changed between pages {_READ_ATTEMPTS} times", key=self.key
        )

    def conversation(self) -> Steps[Conversation]:
        """:meth:`MemoryInstance.conversation <compozy_memory.MemoryInstance.conversation>`,
        as steps."""
        read = yield from transcripts.read_transcript(self.gateway, include_archived=False)
        return Conversation(
            tuple(Message.model_validate_json(e) for e in read.summaries),
            tuple(Message.model_validate_json(e) for e in read.msgs),
            read.version,
        )

    def snapshot(self, limit: int = MOVE_STEP) -> Steps[Snapshot]:
        """:meth:`MemoryInstance.snapshot <compozy_memory.MemoryInstance.snapshot>`, as steps."""
        if not isinstance(limit, int) or not 1 <= limit <= MOVE_STEP:
            raise UsageError(
                f"snapshot limit must be in [1, {MOVE_STEP}], got {limit!r}", key=self.key
            )
        return (yield from self.gateway.snapshot(limit))

    def recall(self, offset: int = 0, limit: int = 100) -> Steps[list[Message]]:
        """:meth:`MemoryInstance.recall <compozy_memory.MemoryInstance.recall>`, as steps."""
        if not isinstance(offset, int) or not isinstance(limit, int) or offset < 0 or limit <= 0:
            raise UsageError("recall needs offset >= 0 and limit > 0", key=self.key)
        return (yield from self.gateway.archived(offset, limit))

    def export_transcript(
        self, format: Literal["markdown", "jsonl"] = "markdown", *, include_archived: bool = False
    ) -> Steps[str]:
        """:meth:`MemoryInstance.export_transcript
        <compozy_memory.MemoryInstance.export_transcript>`, as steps."""
        if format == "markdown":
            return (
                yield from transcripts.export_markdown(
                    self.memory, include_archived=include_archived
                )
            )
        if format == "jsonl":
            return (yield from transcripts.export_jsonl(self.memory, include_archived=True))
        raise UsageError(f"format is 'markdown' or 'jsonl', got {format!r}", key=self.key)

    def context(
        self,
        max_tokens: int | None = None,
        *,
        query: str | None = None,
        reserve_output: int = 0,
    ) -> Steps[list[Message]]:
        """:meth:`MemoryInstance.context <compozy_memory.MemoryInstance.context>`, as steps."""
        layers = yield from self.context_layers(
            max_tokens, query=query, reserve_output=reserve_output
        )
        return layers.messages

    def len(self) -> Steps[int]:
        """:meth:`MemoryInstance.len <compozy_memory.MemoryInstance.len>`, as steps."""
        return (yield from self.gateway.length())

    def token_count(self) -> Steps[int]:
        """:meth:`MemoryInstance.token_count <compozy_memory.MemoryInstance.token_count>`, as
        steps."""
        return (yield from self.gateway.token_count())

    def health(self) -> Steps[MemoryHealth]:
        """:meth:`MemoryInstance.health <compozy_memory.MemoryInstance.health>`, as steps."""
        health = yield from self.gateway.health()
        policy = yield from eviction_policy()
        warning = eviction_warning(policy, ttl=health.ttl_ms is not None)
        if warning:
            _log.warning("%s: %s", self.key, warning)
        limits = yield from server_limits()
        return dataclasses.replace(
            health,
            eviction_policy=policy,
            eviction_warning=warning,
            server_limits=limits,
            limits_warning=limits_warning(limits),
            index_warning=index_warning(health.unindexed),
        )

    def read_window(
        self, max_tokens: int | None = None, *, max_messages: int | None = None
    ) -> Steps[list[Message]]:
        """:meth:`MemoryInstance.read_window <compozy_memory.MemoryInstance.read_window>`,
        as steps."""
        budget = self._budget("read_window", max_tokens)
        if max_messages is not None and (
            not isinstance(max_messages, int) or isinstance(max_messages, bool) or max_messages < 0
        ):
            raise UsageError(
                f"max_messages must be a non-negative integer, got {max_messages!r}", key=self.key
            )
        if max_messages is None:
            max_messages = self.policy.max_messages
        layers = yield from self.gateway.context(
            budget,
            summary_share=0.0,
            recall_share=0.0,
            backfill=False,
            max_messages=max_messages,
            facts_header=-1,
        )
        return [*layers.pinned, *layers.window]

    def context_layers(
        self,
        max_tokens: int | None = None,
        *,
        query: str | None = None,
        reserve_output: int = 0,
    ) -> Steps[ContextLayers]:
        """:meth:`MemoryInstance.context_layers
        <compozy_memory.MemoryInstance.context_layers>`, as steps."""
        budget = self._budget("context", max_tokens)
        if not isinstance(reserve_output, int) or not 0 <= reserve_output <= budget:
            raise UsageError(
                f"reserve_output must be an integer in [0, {budget}], got {reserve_output!r}",
                key=self.key,
            )
        shares = self.policy.context
        if query is None and shares.implicit_query and shares.recall_share > 0:
            query = yield from self._newest_user_turn()
        text, terms = yield from self._query_terms(query)
        hits: list[int] = []
        tail_from, ranked_in = 0, ""
        limit = self.policy.search.limit
        if terms and limit > 0 and self.policy.search.enabled:
            yield from self._fresh_index()
            # Room for hits the window shows: context.lua takes the best limit of the rest.
            pool = min(MAX_SEARCH_LIMIT, 4 * limit)
            for attempt in range(2):
                if self.embedder is not None:
                    assert query is not None
                    ranking = yield from fused_ranking(
                        self.gateway, self.embedder, self.fusion, text or query, terms, limit=pool
                    )
                    best, summaries, unseen = ranking.best, ranking.summaries, ranking.unindexed
                    tail_from, ranked_in = ranking.tail_from, ranking.incarnation
                else:
                    ranked = yield from bm25_ranking(self.gateway, terms, limit=limit, pool=pool)
                    best, summaries, unseen = ranked.best, ranked.summaries, ranked.unindexed
                    tail_from, ranked_in = ranked.tail_from, ranked.incarnation
                if attempt or not (yield from self._caught_up_past(unseen)):
                    break
            # Summaries have their layer and its share: the recall share is the turns'.
            hits = [doc_id for doc_id, _ in best if doc_id not in summaries]
        layers = yield from self.gateway.context(
            budget - reserve_output,
            summary_share=shares.summary_share,
            recall_share=shares.recall_share,
            backfill=shares.backfill and self._has_token_budget(max_tokens),
            max_messages=self.policy.max_messages,
            hits=hits,
            facts_header=self.fact_ops.header_tokens,
            tail_from=tail_from,
            incarnation=ranked_in,
        )
        recalled = whole_exchanges(layers.recalled)
        return ContextLayers(
            layers.pinned, layers.summaries, recalled, layers.backfill, layers.window, layers.facts
        )

    def search(
        self,
        query: str,
        limit: int = 10,
        *,
        roles: Iterable[str] | None = None,
        since_id: int | None = None,
    ) -> Steps[Hits]:
        """:meth:`MemoryInstance.search <compozy_memory.MemoryInstance.search>`, as steps."""
        if not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
            raise UsageError(
                f"limit must be in [1, {MAX_SEARCH_LIMIT}], got {limit!r}", key=self.key
            )
        if since_id is not None and (not isinstance(since_id, int) or since_id < 0):
            raise UsageError(f"since_id must be an integer >= 0, got {since_id!r}", key=self.key)
        wanted = tuple(roles or ())
        if any(not isinstance(r, str) or not r.isalpha() for r in wanted):
            raise UsageError(f"roles are role names, got {wanted!r}", key=self.key)
        if not self.policy.search.enabled:
            raise UsageError(
                "search is turned off for this memory (its policy's search.enabled): it keeps "
                "no index",
                key=self.key,
            )
        text, terms = yield from self._query_terms(query)
        if not terms:
            return Hits()
        yield from self._fresh_index()
        hits = yield from self._searched(query, text, terms, limit, wanted, since_id)
        if (yield from self._caught_up_past(hits.unindexed)):
            hits = yield from self._searched(query, text, terms, limit, wanted, since_id)
        return hits

    def _searched(
        self,
        query: str,
        text: str | None,
        terms: list[str],
        limit: int,
        wanted: tuple[str, ...],
        since_id: int | None,
    ) -> Steps[Hits]:
        kinds = sorted({KINDS.get(r, OTHER_KIND) for r in wanted})
        # Candidates past the limit stand in for hits the cap dropped since they were
        # indexed, or of other kinds (a filter takes more of them); without roles, summaries
        # are a lane of their own, out of the messages' places.
        pool = min(MAX_SEARCH_CANDIDATES, (12 if kinds else 3) * limit)
        summary_limit = 0 if kinds else SUMMARY_HITS
        fetch_kinds = kinds or MESSAGE_KINDS
        ranked: Steps[Ranking]
        if self.embedder is None:
            ranked = self._bm25(terms, limit, pool, since_id or 0)
        else:
            ranked = fused_ranking(
                self.gateway,
                self.embedder,
                self.fusion,
                text or query,
                terms,
                limit=pool,
                since_id=since_id or 0,
                kinds=kinds,
            )
        searching = fused_hits(
            self.gateway, ranked, limit=limit, kinds=fetch_kinds, summary_limit=summary_limit
        )
        if RECORDING.content:  # opt-in: the query goes on the span
            about = ABOUT.set(Content(query=query))
            try:
                return (yield from searching)
            finally:
                ABOUT.reset(about)
        return (yield from searching)

    def _bm25(self, terms: list[str], limit: int, pool: int, since_id: int) -> Steps[Ranking]:
        ranked = yield from bm25_ranking(
            self.gateway, terms, limit=limit, pool=pool, since_id=since_id
        )
        return Ranking(
            ranked.best,
            ranked.unindexed,
            False,
            ranked.summaries,
            ranked.tail,
            ranked.tail_from,
            ranked.incarnation,
        )

    def recall_messages(self, ids: Iterable[int]) -> Steps[list[Message]]:
        """:meth:`MemoryInstance.recall_messages
        <compozy_memory.MemoryInstance.recall_messages>`, as steps."""
        self.check_writable("recall_messages")
        wanted = list(ids)
        if any(not isinstance(i, int) or isinstance(i, bool) or i < 1 for i in wanted):
            raise UsageError(f"ids are message ids (integers >= 1), got {wanted!r}", key=self.key)
        if len(wanted) > MAX_RECALL_IDS:
            raise UsageError(
                f"at most {MAX_RECALL_IDS} ids go in one recall, got {len(wanted)}", key=self.key
            )
        if not wanted:
            return []
        budget = self.policy.max_tokens or 0
        cap = int(budget * self.policy.context.recall_share) if budget else 0
        return (yield from self.gateway.promote(wanted, cap))

    def clear_recalled(self) -> Steps[int]:
        """:meth:`MemoryInstance.clear_recalled
        <compozy_memory.MemoryInstance.clear_recalled>`, as steps."""
        self.check_writable("clear_recalled")
        return (yield from self.gateway.clear_recalled())

    def _query_terms(self, query: str | None) -> Steps[tuple[str | None, list[str]]]:
        """The text an embedder is asked and the terms ``query`` searches: a relative time
        in it ("last week") leaves the text and becomes date terms, resolved against the day
        of the newest message (read only for such a query)."""
        reference = None
        if isinstance(query, str) and mentions_time(query):
            reference = yield from self._reference_day()
        return timed_query(query, self.key, reference)

    def _reference_day(self) -> Steps[date]:
        """The day "yesterday" and "last week" count from: the newest live message's (its
        ISO ``metadata.date``, else its ``ts``, as its document is dated), so a conversation
        replayed or imported later is asked about its own time; today (UTC) when the memory
        holds no live message."""
        page = yield from self.gateway.read_page(-1, -1)
        for message in page.messages:
            day = message_day(message.metadata, message.ts)
            if day is not None:
                return day
        return datetime.now(UTC).date()

    def _newest_user_turn(self) -> Steps[str | None]:
        """The text of the newest user message among the last few (a tool result, which
        has no text, is passed over), or None."""
        page = yield from self.gateway.read_page(-_USER_TURN_LOOKBACK, -1)
        for message in reversed(page.messages):
            if message.role == "user" and message.priority != 0 and message.text.strip():
                return message.text
        return None

    def _fresh_index(self) -> Steps[None]:
        """Before a query: embed what this handle wrote and has no vector yet (indexing it
        first: a vector is kept for an indexed message). Without an embedder nothing is
        done here: a search ranks the live messages the index has not reached itself."""
        if self.vector_ops is not None and self.vector_ops.dirty and not self.read_only:
            yield from self.index_ops.catch_up(max_steps=4)
            yield from self.vector_ops.catch_up(max_steps=1)

    def _caught_up_past(self, unseen: int) -> Steps[bool]:
        """After a query that left ``unseen`` messages out (past the tail a search reads):
        whether to run it again, a writable handle having indexed (a few bounded steps), so
        a backlog past the tail, whoever left it, is taken by the handles that can write."""
        if unseen <= 0 or self.read_only:
            return False
        yield from self.index_ops.catch_up(max_steps=4)
        return True

    def _has_token_budget(self, max_tokens: int | None) -> bool:
        return max_tokens is not None or self.policy.max_tokens is not None

    def _budget(self, operation: str, max_tokens: int | None) -> int:
        budget = self.policy.max_tokens if max_tokens is None else max_tokens
        if budget is None and self.policy.max_messages is not None:
            budget = UNBOUNDED_TOKENS  # limited by count only: the count caps the window
        if budget is None:
            raise UsageError(
                f"{operation} needs max_tokens, or a policy with max_tokens or max_messages",
                key=self.key,
            )
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
            raise UsageError(
                f"{operation}: max_tokens must be a non-negative integer, got {budget!r}",
                key=self.key,
            )
        return budget

    def check_writable(self, operation: str) -> None:
        """Refuse ``operation`` (:class:`ReadOnlyMemoryError`) on a read-only handle."""
        if self.read_only:
            raise ReadOnlyMemoryError(
                f"{operation} refused: this handle is read-only", key=self.key
            )
