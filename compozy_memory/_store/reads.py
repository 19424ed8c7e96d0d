"""What a handle reads for an LLM: the layered context, the window, search, recall.

:class:`ContextReads` is a part of :class:`~compozy_memory.MemoryInstance`, kept apart so
each module holds one job; it reads only what the handle sets up (gateway, policy, facts).
"""

from __future__ import annotations

from collections.abc import Iterable

from compozy_memory import _telemetry
from compozy_memory._model.limits import (
    MAX_RECALL_IDS,
    MAX_SEARCH_LIMIT,
    UNBOUNDED_TOKENS,
)
from compozy_memory._model.messages import Message
from compozy_memory._model.policy import MemoryPolicy
from compozy_memory._model.results import ContextLayers, Conversation, Hits
from compozy_memory._search.analysis import KINDS, OTHER_KIND
from compozy_memory._search.dense import Embedder
from compozy_memory._search.fusion import Fusion
from compozy_memory._store.facts import Facts
from compozy_memory._store.hybrid import fused_hits, fused_ranking
from compozy_memory._store.indexer import Indexer
from compozy_memory._store.selection import query_terms, whole_tool_exchanges
from compozy_memory._store.vectors import Vectorizer
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory.errors import ConcurrentChangeError, ReadOnlyMemoryError, UsageError

__all__ = ["ContextReads"]

#: How far back ``context()`` looks for the newest user turn, its implicit query.
_USER_TURN_LOOKBACK = 8


#: Times a paged read starts again because a write changed the memory between its pages.
_READ_ATTEMPTS = 5


class ContextReads:
    """The reading half of a memory handle."""

    gateway: MemoryGateway
    policy: MemoryPolicy
    facts: Facts
    indexer: Indexer
    embedder: Embedder | None
    fusion: Fusion
    vectors: Vectorizer | None
    key: str
    read_only: bool

    async def read(self, start: int = 0, stop: int = -1) -> list[Message]:
        """Messages from index ``start`` to ``stop`` inclusive, oldest first (LRANGE rules).

        A range of more than ``MAX_READ`` (1,000) messages is read a page a call, each call
        bounded; if a write changes the memory between two pages the read starts again
        (:class:`ConcurrentChangeError` after a few tries), so the result is one state of
        the memory."""
        for _ in range(_READ_ATTEMPTS):
            page = await self.gateway.read_page(start, stop)
            count, messages = page.count, list(page.messages)
            first = max(count + start, 0) if start < 0 else start
            last = count + stop if stop < 0 else min(stop, count - 1)
            while first + len(messages) <= last:
                more = await self.gateway.read_page(first + len(messages), last)
                if more.version != page.version or not more.messages:
                    break
                messages += more.messages
            else:
                return messages
        raise ConcurrentChangeError(
            f"read: the memory changed between pages {_READ_ATTEMPTS} times", key=self.key
        )

    async def conversation(self) -> Conversation:
        """The summaries and every live message, from one state of the memory, with its
        version: read a page (``MAX_READ``) a call, starting again if a write lands between
        two pages. For a compare-and-set edit of the whole conversation:
        ``replace(kept, if_version=conversation.version)``."""
        from compozy_memory._store import transcripts

        read = await transcripts.read_transcript(self.gateway, include_archived=False)
        return Conversation(
            tuple(Message.model_validate_json(e) for e in read.summaries),
            tuple(Message.model_validate_json(e) for e in read.msgs),
            read.version,
        )

    async def read_window(
        self, max_tokens: int | None = None, *, max_messages: int | None = None
    ) -> list[Message]:
        """The pinned messages (priority 0), then the newest others that fit the rest of
        ``max_tokens`` (default: the policy's budget, none for a memory limited by count
        only), and at most ``max_messages`` of them (default: the policy's).

        The window is contiguous and ends at the newest message, and holds at most 2,000
        messages. A tool result whose call fell outside the window is dropped from its start,
        so the window can be sent to an LLM as it is. Raises ContextOverflowError if the
        pinned messages alone do not fit.
        """
        budget = self._budget("read_window", max_tokens)
        if max_messages is not None and (
            not isinstance(max_messages, int) or isinstance(max_messages, bool) or max_messages < 0
        ):
            raise UsageError(
                f"max_messages must be a non-negative integer, got {max_messages!r}", key=self.key
            )
        if max_messages is None:
            max_messages = self.policy.max_messages
        layers = await self.gateway.context(
            budget,
            summary_share=0.0,
            recall_share=0.0,
            backfill=False,
            max_messages=max_messages,
            facts_header=-1,
        )
        return [*layers.pinned, *layers.window]

    async def context(
        self,
        max_tokens: int | None = None,
        *,
        query: str | None = None,
        reserve_output: int = 0,
    ) -> list[Message]:
        """What to send an LLM, within ``max_tokens - reserve_output`` tokens, in one atomic
        read: the pinned messages (system prompt, profile), the rolling summary, messages
        recalled by the recall tools and the earlier messages that best answer ``query``
        (without one, the newest user turn's text: ``ContextPolicy.implicit_query``), then
        the newest messages, and (when all of those fit with room to spare) the newest
        archived originals before them. With an embedder the hits are BM25's fused with
        dense scores, as :meth:`search` ranks them. See :meth:`context_layers`.

        Raises ContextOverflowError if the pinned messages alone exceed the budget."""
        return (
            await self.context_layers(max_tokens, query=query, reserve_output=reserve_output)
        ).messages

    async def context_layers(
        self,
        max_tokens: int | None = None,
        *,
        query: str | None = None,
        reserve_output: int = 0,
    ) -> ContextLayers:
        """:meth:`context`, layer by layer. The shares come from the policy's
        :class:`ContextPolicy`; a tool call and its results are never split.

        With a ``max_messages`` policy, the recall layer, the backfill and the window together
        hold at most that many messages, the newest (the recall layer at most ``recall_share``
        of them, as of a token budget); a memory limited by count only has no token limit (and
        no backfill, which would then read the whole archive)."""
        budget = self._budget("context", max_tokens)
        if not isinstance(reserve_output, int) or not 0 <= reserve_output <= budget:
            raise UsageError(
                f"reserve_output must be an integer in [0, {budget}], got {reserve_output!r}",
                key=self.key,
            )
        shares = self.policy.context
        if query is None and shares.implicit_query and shares.recall_share > 0:
            query = await self._newest_user_turn()
        terms = query_terms(query, self.key)
        hits: list[int] = []
        if terms:
            await self._fresh_index()
        if terms and self.embedder is not None and self.policy.search.limit > 0:
            assert query is not None
            ranking = await fused_ranking(
                self.gateway,
                self.embedder,
                self.fusion,
                query,
                terms,
                limit=self.policy.search.limit,
            )
            hits, terms = [doc_id for doc_id, _ in ranking.best], []
        layers = await self.gateway.context(
            budget - reserve_output,
            summary_share=shares.summary_share,
            recall_share=shares.recall_share,
            backfill=shares.backfill and self._has_token_budget(max_tokens),
            max_messages=self.policy.max_messages,
            terms=terms,
            hits=hits,
            facts_header=self.facts.header_tokens,
        )
        recalled = whole_tool_exchanges(layers.recalled)
        return ContextLayers(
            layers.pinned, layers.summaries, recalled, layers.backfill, layers.window, layers.facts
        )

    async def search(
        self,
        query: str,
        limit: int = 10,
        *,
        roles: Iterable[str] | None = None,
        since_id: int | None = None,
    ) -> Hits:
        """The messages that best match ``query`` (BM25 over the memory's index: live
        messages, archived ones and summaries, a turn's neighbours counting in its rank),
        best first, each with the turns before and after it and where it is
        (:attr:`Hit.where`). ``roles`` keeps only messages of those roles (``"summary"`` for
        summaries); ``since_id`` only messages with that id or newer.

        Messages appended moments ago may not be indexed yet: what this handle wrote is
        indexed before the search runs, and :attr:`Hits.unindexed` says how many messages
        (other replicas' newest) search could not see."""
        if not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
            raise UsageError(
                f"limit must be in [1, {MAX_SEARCH_LIMIT}], got {limit!r}", key=self.key
            )
        if since_id is not None and (not isinstance(since_id, int) or since_id < 0):
            raise UsageError(f"since_id must be an integer >= 0, got {since_id!r}", key=self.key)
        wanted = tuple(roles or ())
        if any(not isinstance(r, str) or not r.isalpha() for r in wanted):
            raise UsageError(f"roles are role names, got {wanted!r}", key=self.key)
        terms = query_terms(query, self.key)
        if not terms:
            return Hits()
        await self._fresh_index()
        kinds = sorted({KINDS.get(r, OTHER_KIND) for r in wanted})

        async def ranked() -> Hits:
            if self.embedder is None:
                return await self.gateway.search(
                    terms, limit=limit, since_id=since_id or 0, kinds=kinds
                )
            return await fused_hits(
                self.gateway,
                self.embedder,
                self.fusion,
                query,
                terms,
                limit=limit,
                since_id=since_id or 0,
                kinds=kinds,
            )

        if _telemetry.capturing():  # opt-in: the query goes on the span
            with _telemetry.content(query=query):
                return await ranked()
        return await ranked()

    async def recall_messages(self, ids: Iterable[int]) -> list[Message]:
        """Bring archived messages back into context (the recall share of :meth:`context`):
        they stay until :meth:`clear_recalled`, or until newer recalls need their room.
        Returns the messages brought back now (unknown or already recalled ids are skipped)."""
        self._check_writable("recall_messages")
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
        return await self.gateway.promote(wanted, cap)

    async def clear_recalled(self) -> int:
        """Drop every recalled message from the context (they stay in the archive)."""
        self._check_writable("clear_recalled")
        return await self.gateway.clear_recalled()

    async def _newest_user_turn(self) -> str | None:
        """The text of the newest user message among the last few (a tool result, which
        has no text, is passed over), or None."""
        page = await self.gateway.read_page(-_USER_TURN_LOOKBACK, -1)
        for message in reversed(page.messages):
            if message.role == "user" and message.priority != 0 and message.text.strip():
                return message.text
        return None

    async def _fresh_index(self) -> None:
        """Before a query: index (and embed) what this handle wrote and the index has not
        seen (a few bounded steps; the background indexer and vector step do the rest)."""
        if self.indexer.dirty and not self.read_only:
            await self.indexer.catch_up(max_steps=4)
        if self.vectors is not None and self.vectors.dirty and not self.read_only:
            await self.vectors.catch_up(max_steps=1)

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

    def _check_writable(self, operation: str) -> None:
        if self.read_only:
            raise ReadOnlyMemoryError(
                f"{operation} refused: this handle is read-only", key=self.key
            )
