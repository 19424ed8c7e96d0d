"""MemoryInstance: one conversation memory in Redis, changed only by atomic scripts."""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import timedelta
from typing import Any, Protocol

from compozy_memory._metrics import MemoryMetrics
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.limits import (
    UNBOUNDED_TOKENS,
)
from compozy_memory._model.messages import Message
from compozy_memory._model.policy import MemoryPolicy
from compozy_memory._model.results import (
    AppendResult,
    ContextLayers,
    FlushResult,
    Hit,
    MemoryHealth,
    Snapshot,
    TrimResult,
)
from compozy_memory._model.tokens import TokenCounter, default_counter
from compozy_memory._store.edits import replace_live, trim_oldest
from compozy_memory._store.encoding import MessageInput, dedupe_token, encode_messages
from compozy_memory._store.selection import (
    query_terms,
    whole_tool_exchanges,
    without_orphan_results,
)
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.retry import RetryPolicy
from compozy_memory._wire.scripts import ScriptArg
from compozy_memory._wire.translate import RedisClient
from compozy_memory._wire.transport import Transport
from compozy_memory.errors import (
    ConfigurationError,
    InvalidMessageError,
    ReadOnlyMemoryError,
    UsageError,
)

__all__ = ["FlushHook", "MemoryInstance", "MessageInput"]


class FlushHook(Protocol):
    """What a handle needs of whatever flushes it (the manager attaches a Flusher)."""

    def notice(self, result: AppendResult) -> None: ...

    async def flush(self) -> FlushResult: ...

    async def wait_idle(self) -> None: ...


class MemoryInstance:
    """An async handle on one memory instance.

    Works with ``redis.asyncio.Redis`` and ``redis.asyncio.RedisCluster`` alike, decoding
    responses or not. Every write is one script call, so concurrent replicas never overwrite
    one another; a read-only handle raises :class:`ReadOnlyMemoryError` before any write
    reaches Redis. On a standalone client, calls made by many handles in the same event-loop
    iteration go out as one pipeline; ``batching=False`` sends each call on its own.

    Calls that meet an unreachable server are retried within ``retry``; every call is safe to
    repeat, appends included.
    """

    def __init__(
        self,
        client: RedisClient,
        keys: InstanceKeys,
        *,
        policy: MemoryPolicy | None = None,
        counter: TokenCounter | None = None,
        read_only: bool = False,
        batching: bool = True,
        retry: RetryPolicy | None = None,
        memory_id: str = "memory",
        metrics: MemoryMetrics | None = None,
    ) -> None:
        self.client = client
        self.keys = keys
        self.policy = policy or MemoryPolicy()
        self.counter = counter if counter is not None else default_counter()
        self.read_only = read_only
        #: The instance's key prefix, named in errors and logs.
        self.key = keys.prefix
        #: The memory resource id metrics and logs are labelled with (the manager's).
        self.memory_id = memory_id
        transport = Transport(
            client,
            retry=retry,
            wait=self.policy.wait,
            batching=batching,
            key=self.key,
            memory=memory_id,
            metrics=metrics,
        )
        #: How long calls keep trying when Redis is unreachable.
        self.retry = transport.retry
        #: Every script call of this memory goes through the gateway.
        self.gateway = MemoryGateway(
            transport,
            keys,
            self.policy,
            read_only=read_only,
            memory=memory_id,
            metrics=transport.metrics,
        )
        self._flusher: FlushHook | None = None

    @classmethod
    def open(cls, client: RedisClient, *, project: str, key: str, **options: Any) -> MemoryInstance:
        """A handle on ``key`` (encoded) in ``project``'s namespace."""
        return cls(client, InstanceKeys.build(project, key), **options)

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "read-write"
        return f"<MemoryInstance {self.keys.prefix} {mode}>"

    # -- writes -------------------------------------------------------------------------

    async def append(self, message: MessageInput, *, dedupe_key: str | None = None) -> AppendResult:
        """Store one message; Redis assigns its id and timestamp."""
        return await self.append_many((message,), dedupe_key=dedupe_key)

    async def append_many(
        self, messages: Iterable[MessageInput], *, dedupe_key: str | None = None
    ) -> AppendResult:
        """Store several messages in one atomic step, in order, with consecutive ids.

        The append is applied at most once per ``dedupe_key`` (a random key per call when none
        is given, which makes the handle's own retries safe). Pass your own, such as the id of
        the event being recorded, to make retries across processes safe too: a repeat returns
        ``duplicate=True`` and writes nothing. A key is remembered until 1,000 more messages
        have been appended to the memory; it names one append, and reusing it for other
        messages stores nothing.
        """
        self._check_writable("append")
        token = self._dedupe_token(dedupe_key)
        args = self._encode(messages)
        if not args:
            raise InvalidMessageError("append_many needs at least one message", key=self.key)
        result = await self.gateway.append(args, token)
        if self._flusher is not None:
            self._flusher.notice(result)
        return result

    async def replace(
        self,
        messages: Iterable[MessageInput],
        *,
        if_last_id: int | None = None,
        if_incarnation: str | None = None,
        dedupe_key: str | None = None,
    ) -> AppendResult:
        """Swap the conversation for ``messages``; the old ones go to the archive.

        With ``if_last_id`` the swap happens only if no message was appended since the caller
        saw that id, in the same incarnation of the memory: ``if_incarnation`` (from an
        :class:`AppendResult`), by default the one this handle last saw. Otherwise
        :class:`ConflictError` is raised and nothing changes. ``dedupe_key`` works as for
        :meth:`append_many`.
        """
        self._check_writable("replace")
        if if_last_id is not None and (not isinstance(if_last_id, int) or if_last_id < 0):
            raise UsageError(
                f"if_last_id must be an integer >= 0, got {if_last_id!r}", key=self.key
            )
        token = self._dedupe_token(dedupe_key)
        args = self._encode(messages)
        incarnation = if_incarnation if if_incarnation is not None else self.gateway.incarnation
        return await replace_live(
            self.gateway, args, if_last_id=if_last_id, if_incarnation=incarnation, token=token
        )

    async def trim(
        self, *, keep_messages: int | None = None, max_tokens: int | None = None
    ) -> TrimResult:
        """Remove the oldest messages until at most ``keep_messages`` and ``max_tokens`` remain.

        Priority 0 messages are never removed. Removed originals go to the archive.
        """
        self._check_writable("trim")
        for name, value in (("keep_messages", keep_messages), ("max_tokens", max_tokens)):
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise UsageError(
                    f"{name} must be a non-negative integer, got {value!r}", key=self.key
                )
        return await trim_oldest(self.gateway, keep_messages, max_tokens)

    async def clear(self) -> int:
        """Remove every message, summary and archived original; return how many were live."""
        self._check_writable("clear")
        return await self.gateway.clear()

    async def set_ttl(self, ttl: timedelta | float | None) -> int:
        """Set (seconds or timedelta) or remove (None) the TTL of every key of the instance.

        Later writes through this handle keep the new TTL. Returns how many keys exist.
        """
        self._check_writable("set_ttl")
        if ttl is None:
            return await self.gateway.expire(0)
        if isinstance(ttl, timedelta):
            seconds = ttl.total_seconds()
        elif isinstance(ttl, (int, float)) and not isinstance(ttl, bool):
            seconds = float(ttl)
        else:
            raise UsageError(f"ttl must be seconds or a timedelta, got {ttl!r}", key=self.key)
        if not math.isfinite(seconds) or seconds <= 0 or seconds > _MAX_TTL_SECONDS:
            raise UsageError(
                f"ttl must be positive and at most {_MAX_TTL_SECONDS // 86400 // 365} years, "
                f"got {ttl!r}",
                key=self.key,
            )
        return await self.gateway.expire(max(1, int(seconds * 1000)))

    # -- reads --------------------------------------------------------------------------

    async def read(self, start: int = 0, stop: int = -1) -> list[Message]:
        """Messages from index ``start`` to ``stop`` inclusive, oldest first (LRANGE rules)."""
        return await self.gateway.read_range(start, stop)

    async def read_window(
        self, max_tokens: int | None = None, *, max_messages: int | None = None
    ) -> list[Message]:
        """The pinned messages (priority 0), then the newest others that fit the rest of
        ``max_tokens`` (default: the policy's budget, none for a memory limited by count
        only), and at most ``max_messages`` of them (default: the policy's).

        The window is contiguous and ends at the newest message. A tool result whose call
        fell outside the window is dropped from its start, so the window can be sent to an
        LLM as it is. Raises ContextOverflowError if the pinned messages alone do not fit.
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
            budget, summary_share=0.0, recall_share=0.0, backfill=False
        )
        window = list(layers.window)
        if max_messages is not None:
            window = window[len(window) - max_messages :] if max_messages else []
        return [*layers.pinned, *without_orphan_results(window)]

    async def context(
        self,
        max_tokens: int | None = None,
        *,
        query: str | None = None,
        reserve_output: int = 0,
    ) -> list[Message]:
        """What to send an LLM, within ``max_tokens - reserve_output`` tokens, in one atomic
        read: the pinned messages (system prompt, profile), the rolling summary, messages
        recalled by the recall tools and the archived messages that best answer ``query``,
        then the newest messages, and (when all of those fit with room to spare) the newest
        archived originals before them. See :meth:`context_layers`.

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

        With a ``max_messages`` policy, the backfill and window together hold at most that
        many messages, the newest; a memory limited by count only has no token limit (and
        no backfill, which would then read the whole archive)."""
        budget = self._budget("context", max_tokens)
        if not isinstance(reserve_output, int) or not 0 <= reserve_output <= budget:
            raise UsageError(
                f"reserve_output must be an integer in [0, {budget}], got {reserve_output!r}",
                key=self.key,
            )
        shares = self.policy.context
        layers = await self.gateway.context(
            budget - reserve_output,
            summary_share=shares.summary_share,
            recall_share=shares.recall_share,
            backfill=shares.backfill and self._has_token_budget(max_tokens),
            terms=query_terms(query, self.key),
        )
        recalled = whole_tool_exchanges(layers.recalled)
        older = without_orphan_results([*layers.backfill, *layers.window])
        cap = self.policy.max_messages
        if cap is not None and len(older) > cap:
            older = without_orphan_results(older[len(older) - cap :])
        backfill = tuple(older[: max(0, len(older) - len(layers.window))])
        window = tuple(older[len(backfill) :])
        return ContextLayers(layers.pinned, layers.summaries, recalled, backfill, window)

    async def search(
        self,
        query: str,
        limit: int = 10,
        *,
        roles: Iterable[str] | None = None,
        since_id: int | None = None,
    ) -> list[Hit]:
        """The archived messages that best match ``query`` (BM25 over the archive's index,
        a turn's neighbours counting in its rank), best first, each with the turns before
        and after it. ``roles`` keeps only messages of those roles; ``since_id`` only
        messages with that id or newer."""
        if not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise UsageError(f"limit must be in [1, 1000], got {limit!r}", key=self.key)
        if since_id is not None and (not isinstance(since_id, int) or since_id < 0):
            raise UsageError(f"since_id must be an integer >= 0, got {since_id!r}", key=self.key)
        wanted = tuple(roles or ())
        if any(not isinstance(r, str) or not r.isalpha() for r in wanted):
            raise UsageError(f"roles are role names, got {wanted!r}", key=self.key)
        terms = query_terms(query, self.key)
        if not terms:
            return []
        return await self.gateway.search(terms, limit=limit, since_id=since_id or 0, roles=wanted)

    async def recall_messages(self, ids: Iterable[int]) -> list[Message]:
        """Bring archived messages back into context (the recall share of :meth:`context`):
        they stay until :meth:`clear_recalled`, or until newer recalls need their room.
        Returns the messages brought back now (unknown or already recalled ids are skipped)."""
        self._check_writable("recall_messages")
        wanted = list(ids)
        if any(not isinstance(i, int) or isinstance(i, bool) or i < 1 for i in wanted):
            raise UsageError(f"ids are message ids (integers >= 1), got {wanted!r}", key=self.key)
        if not wanted:
            return []
        budget = self.policy.max_tokens or 0
        cap = int(budget * self.policy.context.recall_share) if budget else 0
        return await self.gateway.promote(wanted, cap)

    async def clear_recalled(self) -> int:
        """Drop every recalled message from the context (they stay in the archive)."""
        self._check_writable("clear_recalled")
        return await self.gateway.clear_recalled()

    async def snapshot(self, limit: int = 0) -> Snapshot:
        """Totals, summaries and the oldest ``limit`` live messages (0: all), read atomically.

        The totals always cover the whole memory, so a bounded snapshot is enough to plan
        a flush of a memory far larger than the limit."""
        return await self.gateway.snapshot(limit)

    async def recall(self, offset: int = 0, limit: int = 100) -> list[Message]:
        """Originals removed by trims, replaces and flushes, oldest first."""
        if not isinstance(offset, int) or not isinstance(limit, int) or offset < 0 or limit <= 0:
            raise UsageError("recall needs offset >= 0 and limit > 0", key=self.key)
        return await self.gateway.archived(offset, limit)

    def attach_flusher(self, flusher: FlushHook) -> None:
        """Flush in the background once appends pass the flusher's threshold."""
        self._check_writable("attach_flusher")
        self._flusher = flusher

    @property
    def flusher(self) -> FlushHook | None:
        return self._flusher

    async def flush(self) -> FlushResult:
        """Flush now (waiting for nothing: if another replica holds the lock, this one skips)."""
        self._check_writable("flush")
        if self._flusher is None:
            raise ConfigurationError(
                "this memory has no flusher: open it through MemoryManager or attach one",
                key=self.key,
            )
        return await self._flusher.flush()

    async def len(self) -> int:
        """Number of live messages."""
        return await self.gateway.length()

    async def token_count(self) -> int:
        """Exact tokens of the live messages, from the totals the scripts keep."""
        return await self.gateway.token_count()

    async def health(self) -> MemoryHealth:
        return await self.gateway.health()

    # -- internals ----------------------------------------------------------------------

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

    def _dedupe_token(self, dedupe_key: str | None) -> str:
        return dedupe_token(dedupe_key, self.key)

    def _encode(self, messages: Iterable[MessageInput]) -> list[ScriptArg]:
        return encode_messages(messages, self.policy, self.counter, self.key)


# Redis takes PEXPIRE values up to 2**63 ms, but a TTL past a century is a mistake, not a plan.
_MAX_TTL_SECONDS = 100 * 365 * 86400
