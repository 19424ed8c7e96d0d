"""MemoryInstance: one conversation memory in Redis, changed only by atomic scripts."""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, Literal, Protocol

from compozy_memory._model.facts import check_fact, header_tokens, line_tokens
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.limits import MAX_BATCH, MAX_DEDUPE_KEY, MAX_FACTS, MAX_MESSAGE_TOKENS
from compozy_memory._model.messages import Message, encode_body
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
from compozy_memory._model.tokens import TokenCounter, count_message, default_counter
from compozy_memory._search.analysis import analyze_query, message_index_terms
from compozy_memory._store.results_store import DataRef, Namespace, ResultStore
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.retry import RetryPolicy
from compozy_memory._wire.scripts import ScriptArg
from compozy_memory._wire.translate import RedisClient
from compozy_memory._wire.transport import Transport
from compozy_memory.errors import (
    CompozyMemoryError,
    ConcurrentChangeError,
    ConfigurationError,
    InvalidMessageError,
    MessageTooLargeError,
    ReadOnlyMemoryError,
    UsageError,
)

__all__ = ["Facts", "FlushHook", "IndexHook", "MemoryInstance", "MessageInput"]

_log = logging.getLogger("compozy_memory")

MessageInput = Message | Mapping[str, Any]


IndexHook = Callable[["MemoryInstance", AppendResult], Awaitable[None]]


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
        results: ResultStore | None = None,
    ) -> None:
        self.client = client
        self.keys = keys
        self.policy = policy or MemoryPolicy()
        self.counter = counter if counter is not None else default_counter()
        self.read_only = read_only
        #: The instance's key prefix, named in errors and logs.
        self.key = keys.prefix
        transport = Transport(
            client, retry=retry, wait=self.policy.wait, batching=batching, key=self.key
        )
        #: How long calls keep trying when Redis is unreachable.
        self.retry = transport.retry
        #: Every script call of this memory goes through the gateway.
        self.gateway = MemoryGateway(transport, keys, self.policy, read_only=read_only)
        #: Session facts (the kernel layer of :meth:`context`): ``await memory.facts.set(...)``.
        self.facts = Facts(self)
        #: Where ``append(..., offload=True)`` stores large results, and the recall tools
        #: load them from. By default a store that sees only the project's global namespace:
        #: give one opened for your agent (``ResultStore(..., agent=...)``) to keep them apart.
        self.results = results or ResultStore(client, keys.project, transport=transport)
        self._flusher: FlushHook | None = None
        self._index: IndexHook | None = None

    @classmethod
    def open(cls, client: RedisClient, *, project: str, key: str, **options: Any) -> MemoryInstance:
        """A handle on ``key`` (encoded) in ``project``'s namespace."""
        return cls(client, InstanceKeys.build(project, key), **options)

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "read-write"
        return f"<MemoryInstance {self.keys.prefix} {mode}>"

    # -- writes -------------------------------------------------------------------------

    async def append(
        self,
        message: MessageInput,
        *,
        dedupe_key: str | None = None,
        offload: bool = False,
        namespace: Namespace | None = None,
    ) -> AppendResult:
        """Store one message; Redis assigns its id and timestamp.

        With ``offload``, a message larger than the memory's ``max_tokens`` is not refused:
        its content goes to :attr:`results` (in ``namespace``, by default the global one) and
        the message keeps a short stub (kind, size, first lines) and ``metadata.result_ref``.
        """
        return await self.append_many(
            (message,), dedupe_key=dedupe_key, offload=offload, namespace=namespace
        )

    async def append_many(
        self,
        messages: Iterable[MessageInput],
        *,
        dedupe_key: str | None = None,
        offload: bool = False,
        namespace: Namespace | None = None,
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
        if offload:
            messages = await self._offloaded(messages, namespace or Namespace.global_())
        args = self._encode(messages)
        if not args:
            raise InvalidMessageError("append_many needs at least one message", key=self.key)
        result = await self.gateway.append(args, token)
        if self._flusher is not None:
            self._flusher.notice(result)
        if self._index is not None:
            await self._index(self, result)
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
        for _ in range(_MOVED_RETRIES):
            # The replaced messages go to the archive's index: read and analyse them, and let
            # the script check they are still the live ones.
            live = await self.gateway.read_range(0, -1)
            try:
                result = await self.gateway.replace(
                    args,
                    old_ids=[_id(m) for m in live],
                    old_terms=[message_index_terms(m) for m in live],
                    if_last_id=if_last_id,
                    if_incarnation=incarnation,
                    dedupe_key=token,
                )
            except ConcurrentChangeError:
                continue
            if self._index is not None:
                await self._index(self, result)
            return result
        raise ConcurrentChangeError(
            f"replace: the messages kept changing through {_MOVED_RETRIES} attempts",
            key=self.key,
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
        for _ in range(_MOVED_RETRIES):
            live = await self.gateway.read_range(0, -1)
            chosen = _to_trim(live, keep_messages, max_tokens)
            if not chosen:
                return TrimResult(0, 0, sum(m.tokens or 0 for m in live), len(live))
            last = _id(chosen[-1])
            prefix = [_id(m) for m in live if _id(m) <= last]
            try:
                return await self.gateway.trim(
                    prefix, [_id(m) for m in chosen], [message_index_terms(m) for m in chosen]
                )
            except ConcurrentChangeError:
                continue
        raise ConcurrentChangeError(
            f"trim: the messages kept changing through {_MOVED_RETRIES} attempts", key=self.key
        )

    async def clear(self) -> int:
        """Remove every message, summary, archived original and session fact; return how
        many messages were live.

        Results the removed messages pinned (``append(..., offload=True)``) are released
        after the clear: read first, released once each after. A message appended between
        the read and the clear keeps its pin (it ends with the memory's TTL), and a release
        that fails is logged, never raised: the clear has happened."""
        self._check_writable("clear")
        refs = await self._pinned_results()
        removed = await self.gateway.clear()
        for ref in refs:
            try:
                await self.results.release(ref)
            except CompozyMemoryError as exc:
                _log.warning(
                    "result %s not released after clearing %s: %s", ref.token, self.key, exc
                )
        return removed

    async def _pinned_results(self) -> list[DataRef]:
        transcript = await self.gateway.transcript(True)
        refs = []
        for env in (*transcript.msgs, *transcript.archive):
            if '"result_ref"' not in env:
                continue  # the common case: no JSON parsing
            raw = (Message.model_validate_json(env).metadata or {}).get("result_ref")
            try:
                ref = DataRef.from_json(raw)
            except UsageError:
                continue
            if self.results.visible(ref.namespace):
                refs.append(ref)
        return refs

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
        ``max_tokens`` (default: the policy's budget), and at most ``max_messages`` of them.

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
        layers = await self.gateway.context(
            budget, summary_share=0.0, recall_share=0.0, backfill=False, facts_header=-1
        )
        window = list(layers.window)
        if max_messages is not None:
            window = window[len(window) - max_messages :] if max_messages else []
        return [*layers.pinned, *_without_orphan_results(window)]

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
        :class:`ContextPolicy`; a tool call and its results are never split."""
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
            backfill=shares.backfill,
            terms=_query_terms(query, self.key),
            facts_header=self.facts.header_tokens,
        )
        recalled = _whole_tool_exchanges(layers.recalled)
        older = _without_orphan_results([*layers.backfill, *layers.window])
        backfill = tuple(older[: max(0, len(older) - len(layers.window))])
        window = tuple(older[len(backfill) :])
        return ContextLayers(
            layers.pinned, layers.summaries, recalled, backfill, window, layers.facts
        )

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
        terms = _query_terms(query, self.key)
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

    async def export_transcript(
        self, format: Literal["markdown", "jsonl"] = "markdown", *, include_archived: bool = False
    ) -> str:
        """The memory as Markdown (to read: speakers, times, tool calls folded, summaries
        marked) or JSON Lines (to move: :meth:`import_transcript` reads it back with the
        same ids, times, priorities and blocks), in one consistent read. JSON Lines always
        carry the archived originals, so nothing is lost; Markdown shows them with
        ``include_archived=True``."""
        from compozy_memory._store import transcripts

        if format == "markdown":
            return await transcripts.export_markdown(self, include_archived=include_archived)
        if format == "jsonl":
            return await transcripts.export_jsonl(self, include_archived=True)
        raise UsageError(f"format is 'markdown' or 'jsonl', got {format!r}", key=self.key)

    async def import_transcript(self, text: str) -> int:
        """Write a JSON Lines transcript (:meth:`export_transcript`) into this memory, which
        must be empty, keeping every id and timestamp; returns the live messages."""
        self._check_writable("import_transcript")
        from compozy_memory._store import transcripts

        return await transcripts.import_transcript(self, text)

    def attach_index(self, hook: IndexHook | None) -> None:
        """Called after every append and replace (the manager's session index); a hook
        never raises: the write has happened."""
        self._index = hook

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

    def _budget(self, operation: str, max_tokens: int | None) -> int:
        budget = self.policy.max_tokens if max_tokens is None else max_tokens
        if budget is None:
            raise UsageError(
                f"{operation} needs max_tokens, or a policy with max_tokens", key=self.key
            )
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
            raise UsageError(
                f"{operation}: max_tokens must be a non-negative integer, got {budget!r}",
                key=self.key,
            )
        return budget

    def _dedupe_token(self, dedupe_key: str | None) -> str:
        if dedupe_key is None:
            return _next_token()
        if (
            not isinstance(dedupe_key, str)
            or not dedupe_key
            or len(dedupe_key.encode("utf-8", "surrogatepass")) > MAX_DEDUPE_KEY
        ):
            raise InvalidMessageError(
                f"dedupe_key must be a non-empty string of at most {MAX_DEDUPE_KEY} bytes, "
                f"got {dedupe_key!r:.80}",
                key=self.key,
            )
        try:
            dedupe_key.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidMessageError(
                "dedupe_key is not valid UTF-8 text (lone surrogate)", key=self.key
            ) from None
        return dedupe_key

    def _check_writable(self, operation: str) -> None:
        if self.read_only:
            raise ReadOnlyMemoryError(
                f"{operation} refused: this handle is read-only", key=self.key
            )

    async def _offloaded(
        self, messages: Iterable[MessageInput], namespace: Namespace
    ) -> list[MessageInput]:
        """``messages`` with each one over the budget replaced by a stub and a reference."""
        if isinstance(messages, (Message, Mapping, str, bytes)):
            return [messages]  # _encode refuses it with the usual error
        limit = self.policy.max_tokens
        out: list[MessageInput] = []
        for raw in messages:
            try:
                message = Message.parse(dict(raw) if isinstance(raw, Mapping) else raw)
            except InvalidMessageError:
                out.append(raw)  # _encode reports it with its position
                continue
            if limit is None or count_message(message, self.counter) <= limit:
                out.append(message)
                continue
            out.append(await self._stub(message, namespace))
        return out

    async def _stub(self, message: Message, namespace: Namespace) -> Message:
        if isinstance(message.content, str):
            payload, kind, preview = message.content, "text", message.content
        else:
            payload = json.dumps(message.content, ensure_ascii=False, separators=(",", ":"))
            kind = "json"
            preview = "\n".join(
                _result_text(b.get("content"))
                if b.get("type") == "tool_result"
                else str(b.get("text", ""))
                for b in message.content
            )
        ttl = self.gateway.ttl_ms
        ref = await self.results.store_result(
            payload,
            namespace=namespace,
            kind=kind,
            pin=True,
            pin_ttl=timedelta(milliseconds=ttl) if ttl else None,
        )
        lines = [line[:_STUB_LINE] for line in preview.splitlines()[:_STUB_LINES]]
        stub = (
            f"[stored result {ref.token}: {kind}, {ref.size} bytes, "
            f"{len(preview.splitlines())} lines; the load_result tool reads it]\n"
            + "\n".join(lines)
        )
        content: str | list[dict[str, Any]]
        if isinstance(message.content, str):
            content = stub
        else:
            kept: list[dict[str, Any]] = [b for b in message.content if b.get("type") == "tool_use"]
            results = [
                {"type": "tool_result", "tool_use_id": b.get("tool_use_id"), "content": stub}
                for b in message.content
                if b.get("type") == "tool_result"
            ]
            content = [*kept, *results] or [{"type": "text", "text": stub}]
        metadata = {**(message.metadata or {}), "result_ref": ref.to_json()}
        return Message.model_validate(
            {
                **message.model_dump(by_alias=True, exclude_none=True),
                "content": content,
                "metadata": metadata,
                "tokens": None,
            }
        )

    def _encode(self, messages: Iterable[MessageInput]) -> list[ScriptArg]:
        """Validate, count and serialise every message before anything is sent."""
        if isinstance(messages, (Message, Mapping, str, bytes)):
            raise InvalidMessageError(
                "append_many and replace take a list of messages, not a single message",
                key=self.key,
            )
        args: list[ScriptArg] = []
        limit = self.policy.max_tokens
        for position, raw in enumerate(messages, start=1):
            if position > MAX_BATCH:
                raise InvalidMessageError(
                    f"at most {MAX_BATCH} messages go in one call", key=self.key
                )
            try:
                message = Message.parse(dict(raw) if isinstance(raw, Mapping) else raw)
                body = encode_body(message)
                tokens = count_message(message, self.counter)
            except InvalidMessageError as exc:
                raise type(exc)(f"message {position}: {exc}", key=self.key) from None
            if tokens > MAX_MESSAGE_TOKENS:
                raise InvalidMessageError(
                    f"message {position} claims {tokens} tokens; a message counts at most "
                    f"{MAX_MESSAGE_TOKENS}",
                    key=self.key,
                )
            if limit is not None and tokens > limit:
                raise MessageTooLargeError(
                    f"message {position} has {tokens} tokens, more than the memory's "
                    f"max_tokens of {limit}",
                    key=self.key,
                )
            priority = (
                message.priority
                if message.priority is not None
                else self.policy.priority_of(message.content_type)
            )
            args += [tokens, priority, body]
        return args


class Facts:
    """A memory's session facts: a capped key-value map (``policy.facts_max``, 200 by
    default) in the memory's slot, with its TTL. Setting a key again moves it to the newest
    end; past the cap the least recently set go first. :meth:`MemoryInstance.context` shows
    them after the pinned messages as one system message."""

    def __init__(self, memory: MemoryInstance) -> None:
        self._memory = memory
        self._header: int | None = None

    @property
    def header_tokens(self) -> int:
        if self._header is None:
            self._header = header_tokens(self._memory.counter)
        return self._header

    async def set(
        self, key: str | Mapping[str, str] | None = None, value: str | None = None, /, **more: str
    ) -> list[str]:
        """Set one fact (``set("name", "Ada")``) or many (a mapping, or keywords), atomically;
        returns the keys the cap evicted."""
        memory = self._memory
        memory._check_writable("facts.set")
        pairs: dict[str, object] = {}
        if isinstance(key, Mapping):
            if value is not None:
                raise UsageError("facts.set takes a mapping or a key and a value", key=memory.key)
            pairs.update(key)
        elif key is not None:
            if value is None:
                raise InvalidMessageError(f"fact {key!r:.80} needs a value", key=memory.key)
            pairs[key] = value
        pairs.update(more)
        if not pairs:
            raise UsageError("facts.set needs at least one fact", key=memory.key)
        if len(pairs) > MAX_FACTS:
            raise UsageError(f"at most {MAX_FACTS} facts go in one call", key=memory.key)
        args: list[ScriptArg] = []
        for k, v in pairs.items():
            raw_key, raw_value = check_fact(k, v, where=memory.key)
            text_key, text_value = raw_key.decode(), raw_value.decode()
            args += [raw_key, line_tokens(text_key, text_value, memory.counter), raw_value]
        _, evicted = await memory.gateway.facts_set(args, memory.policy.facts_max)
        return evicted

    async def get(self, key: str) -> str | None:
        raw_key, _ = check_fact(key, "", where=self._memory.key)
        return await self._memory.gateway.fact(raw_key)

    async def delete(self, *keys: str) -> int:
        """Remove facts; returns how many existed."""
        self._memory._check_writable("facts.delete")
        raw = [check_fact(k, "", where=self._memory.key)[0] for k in keys]
        if not raw:
            return 0
        return await self._memory.gateway.facts_delete(raw)

    async def items(self) -> list[tuple[str, str]]:
        """Every fact as (key, value), least recently set first."""
        return [(k, v) for k, _, v in await self._memory.gateway.facts_items()]


# A stub shows at most this many lines of its result, each cut to this many characters.
_STUB_LINES = 5
_STUB_LINE = 160


def _result_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) if isinstance(c, dict) else str(c) for c in content)
    return "" if content is None else json.dumps(content)


# A trim or replace reads the live messages, then writes if they are still the same: retried
# this many times when a flush or another trim moved them in between.
_MOVED_RETRIES = 5


def _id(message: Message) -> int:
    assert message.id is not None, "messages read from Redis carry their id"
    return message.id


def _to_trim(live: list[Message], keep: int | None, max_tokens: int | None) -> list[Message]:
    """The oldest messages that are not pinned, until at most ``keep`` messages and
    ``max_tokens`` tokens remain."""
    count, tokens = len(live), sum(m.tokens or 0 for m in live)
    chosen: list[Message] = []
    for message in live:
        if (keep is None or count <= keep) and (max_tokens is None or tokens <= max_tokens):
            break
        if message.priority == 0:
            continue
        chosen.append(message)
        count -= 1
        tokens -= message.tokens or 0
    return chosen


def _query_terms(query: str | None, key: str) -> list[str]:
    if query is None:
        return []
    if not isinstance(query, str):
        raise UsageError(f"a query is text, got {type(query).__name__}", key=key)
    return analyze_query(query)[:_MAX_QUERY_TERMS]


# A query longer than this many distinct terms is cut: each term costs a postings read.
_MAX_QUERY_TERMS = 32


def _whole_tool_exchanges(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """Drop tool results whose call is not there, and calls none of whose results are."""
    calls = {c for m in messages for c in m.tool_use_ids}
    results = {c for m in messages for c in m.tool_result_ids}
    return tuple(
        m
        for m in messages
        if all(c in calls for c in m.tool_result_ids)
        and (not m.tool_use_ids or any(c in results for c in m.tool_use_ids))
    )


# Redis takes PEXPIRE values up to 2**63 ms, but a TTL past a century is a mistake, not a plan.
_MAX_TTL_SECONDS = 100 * 365 * 86400


class _Tokens:
    """Dedupe keys for calls that pass none: a random per-process prefix (96 bits, drawn
    again in a forked child) and a counter, cheaper than fresh randomness per call."""

    def __init__(self) -> None:
        self.reset()
        os.register_at_fork(after_in_child=self.reset)

    def reset(self) -> None:
        self.prefix = "~" + secrets.token_urlsafe(12) + ":"
        self.counter = itertools.count()

    def __call__(self) -> str:
        return f"{self.prefix}{next(self.counter)}"


_next_token = _Tokens()


def _without_orphan_results(window: list[Message]) -> list[Message]:
    # A window is a suffix of the conversation, so a tool result can only have lost its call
    # at the window's start.
    start = 0
    while start < len(window) and window[start].tool_result_ids:
        start += 1
    return window[start:] if start else window
