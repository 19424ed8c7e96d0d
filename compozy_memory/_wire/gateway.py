"""The script gateway: one typed method per Lua script, the only code that builds KEYS/ARGV.

A :class:`MemoryGateway` is bound to one memory (its keys, its policy, read-only or not) and
one :class:`~compozy_memory._wire.transport.Transport`. Each method builds its script's KEYS
from the names the script's header declares and its ARGV by name through the script's
:class:`~compozy_memory._wire.scripts.Contract`, sends it, and decodes the reply into a result
type. The handle (``MemoryInstance``), the fenced lock and the flusher all go through it, so a
script's contract is written down once, and each of them can be tested against a fake
transport.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from compozy_memory._metrics import MemoryMetrics, default_metrics
from compozy_memory._model.facts import parse_stored
from compozy_memory._model.keys import InstanceKeys
from compozy_memory._model.messages import Message
from compozy_memory._model.policy import MemoryPolicy
from compozy_memory._model.results import (
    AppendResult,
    ContextLayers,
    FlushCommit,
    FlushPlan,
    Hit,
    MemoryHealth,
    Snapshot,
    Transcript,
    TrimResult,
)
from compozy_memory._wire import replies
from compozy_memory._wire.scripts import ScriptArg, script
from compozy_memory._wire.transport import ScriptTransport
from compozy_memory.errors import ReadOnlyMemoryError, ReplicationError

__all__ = ["MemoryGateway", "ScriptTransport"]

# Snapshots parse this many messages between yields to the event loop.
_PARSE_CHUNK = 64


class MemoryGateway:
    """Every script call of one memory, typed."""

    def __init__(
        self,
        transport: ScriptTransport,
        keys: InstanceKeys,
        policy: MemoryPolicy,
        *,
        read_only: bool = False,
        memory: str = "memory",
        metrics: MemoryMetrics | None = None,
    ) -> None:
        self.transport = transport
        self.keys = keys
        self.policy = policy
        self.read_only = read_only
        #: The TTL every write sets, in milliseconds (0: none); ``expire`` changes it.
        self.ttl_ms = policy.ttl_ms
        #: The memory's key prefix, named in errors and logs.
        self.name = keys.prefix
        #: The incarnation the last reply named: what a compare-and-set without one expects.
        self.incarnation = ""
        #: The memory resource id metrics are labelled with (never the key: cardinality).
        self.memory = memory
        self.metrics = metrics or default_metrics()
        # Each script's KEYS for this memory, built once: ten f-strings per call otherwise.
        self._keys_of: dict[str, list[str]] = {}

    # -- writes -------------------------------------------------------------------------

    async def append(self, messages: Sequence[ScriptArg], dedupe_key: str) -> AppendResult:
        """``messages``: (tokens, priority, body) triples, flattened."""
        return await self._stored_counted(
            "append",
            {
                "ttl_ms": self.ttl_ms,
                "max_tokens": self.policy.max_tokens or 0,
                "dedupe_key": dedupe_key,
                "n": len(messages) // 3,
            },
            messages,
        )

    async def replace(
        self,
        messages: Sequence[ScriptArg],
        *,
        old_ids: Sequence[int],
        old_terms: Sequence[str],
        if_last_id: int | None,
        if_incarnation: str | None,
        dedupe_key: str,
    ) -> AppendResult:
        """Swap the live messages the caller read (``old_ids``, with their index terms) for
        ``messages``; ConcurrentChangeError if the live messages are not those any more."""
        return await self._stored_counted(
            "replace",
            {
                "ttl_ms": self.ttl_ms,
                "max_tokens": self.policy.max_tokens or 0,
                "archive_max": self.policy.archive_max,
                "if_last_id": -1 if if_last_id is None else if_last_id,
                "if_incarnation": if_incarnation or "",
                "dedupe_key": dedupe_key,
                "n_old": len(old_ids),
                "n": len(messages) // 3,
            },
            [*old_ids, *old_terms, *messages],
        )

    async def trim(
        self, prefix_ids: Sequence[int], remove_ids: Sequence[int], terms: Sequence[str]
    ) -> TrimResult:
        """Archive ``remove_ids`` (ascending, with their index terms) if the oldest live
        messages are still ``prefix_ids``; ConcurrentChangeError otherwise."""
        reply = await self._write(
            "trim",
            {
                "ttl_ms": self.ttl_ms,
                "archive_max": self.policy.archive_max,
                "prefix_len": len(prefix_ids),
                "n_remove": len(remove_ids),
            },
            [*prefix_ids, *remove_ids, *terms],
        )
        self.metrics.trims.labels(memory=self.memory, strategy="oldest").inc()
        return TrimResult(*(int(v) for v in reply))

    async def clear(self) -> tuple[int, list[str]]:
        """The live messages removed, and the envelopes that referred to stored results."""
        reply = await self._write("clear", {"ttl_ms": self.ttl_ms})
        return int(reply[0]), [replies.text(e) for e in reply[1:]]

    async def note_pins(self, n: int) -> None:
        """Count results pinned by this memory's messages, so a clear knows to look."""
        await self.transport.command(
            "pinned", "hincrby", self.keys.meta, "pinned", n, key=self.name
        )

    async def expire(self, ttl_ms: int) -> int:
        """Set (ttl_ms > 0) or remove (0) the TTL of every key; later writes keep it."""
        existing = int(await self._write("expire", {"ttl_ms": ttl_ms}))
        self.ttl_ms = ttl_ms
        return existing

    async def flush_commit(
        self,
        *,
        epoch: int,
        incarnation: str,
        plan: FlushPlan,
        summary_body: bytes,
        summary_tokens: int,
        terms: Sequence[str],
    ) -> FlushCommit:
        """Apply ``plan`` (see ``lua/flush_commit.lua``); ``terms`` index each of
        ``plan.remove_ids`` in the archive. A commit that was applied but not acknowledged by
        replicas raises ReplicationError with its FlushCommit."""
        try:
            reply = await self._write(
                "flush_commit",
                {
                    "ttl_ms": self.ttl_ms,
                    "archive_max": self.policy.archive_max,
                    "epoch": epoch,
                    "incarnation": incarnation,
                    "prefix_len": len(plan.prefix_ids),
                    "n_remove": len(plan.remove_ids),
                    "n_fold": len(plan.fold_summary_ids),
                    "summary_tokens": summary_tokens,
                    "summary_body": summary_body,
                },
                [*plan.prefix_ids, *plan.remove_ids, *plan.fold_summary_ids, *terms],
            )
        except ReplicationError as exc:
            raise exc.with_result(replies.flush_commit(exc.result)) from exc
        return replies.flush_commit(reply)

    async def lock_acquire(self, token: str, lease_ms: int) -> tuple[int, str]:
        """``(epoch, incarnation)``; epoch 0 when another holder has the lock."""
        reply = await self._write(
            "lock_acquire", {"token": token, "lease_ms": lease_ms, "ttl_ms": self.ttl_ms}
        )
        return int(reply[0]), replies.text(reply[1])

    async def lock_refresh(self, token: str, lease_ms: int) -> bool:
        return bool(await self._write("lock_refresh", {"token": token, "lease_ms": lease_ms}))

    async def lock_release(self, token: str) -> bool:
        return bool(await self._write("lock_release", {"token": token}))

    async def promote(self, ids: Sequence[int], max_tokens: int) -> list[Message]:
        """Bring archived messages back into context; returns those brought back now."""
        reply = await self._write(
            "promote", {"ttl_ms": self.ttl_ms, "max_tokens": max_tokens}, list(ids)
        )
        return [Message.model_validate_json(env) for env in reply[1:]]

    async def clear_recalled(self) -> int:
        return int(await self._write("clear_recalled", {"ttl_ms": self.ttl_ms}))

    async def facts_set(self, facts: Sequence[ScriptArg], cap: int) -> tuple[int, list[str]]:
        """``facts``: (key, tokens, value) triples, flattened; returns the number of facts
        kept and the keys the cap evicted."""
        reply = await self._write(
            "facts_set", {"ttl_ms": self.ttl_ms, "cap": cap, "n": len(facts) // 3}, facts
        )
        return int(reply[0]), [replies.text(k) for k in reply[1:]]

    async def facts_delete(self, keys: Sequence[ScriptArg]) -> int:
        return int(await self._write("facts_delete", {"ttl_ms": self.ttl_ms}, keys))

    async def facts_items(self) -> list[tuple[str, int, str]]:
        """Every fact as (key, tokens, value), least recently set first."""
        reply = await self._read("facts_items", {})
        out = []
        for i in range(0, len(reply), 2):
            tokens, value = parse_stored(reply[i + 1])
            out.append((replies.text(reply[i]), tokens, value))
        return out

    async def fact(self, key: bytes) -> str | None:
        """One fact's value (a plain HGET), or None."""
        stored = await self.transport.command(
            "facts_get", "hget", self.keys.facts, key, key=self.name
        )
        return None if stored is None else parse_stored(stored)[1]

    async def import_envelopes(self, transcript: Transcript, terms: Sequence[str]) -> int:
        """Write a transcript's envelopes into an empty memory (``lua/import.lua``); returns
        the live messages. ConflictError if the memory is not empty."""
        items: list[ScriptArg] = [*transcript.msgs, *transcript.summaries]
        for env, doc in zip(transcript.archive, terms, strict=True):
            items += [env, doc]
        reply = await self._write(
            "import",
            {
                "ttl_ms": self.ttl_ms,
                "archive_max": self.policy.archive_max,
                "n_msgs": len(transcript.msgs),
                "n_summaries": len(transcript.summaries),
                "n_archive": len(transcript.archive),
            },
            items,
        )
        return int(reply[0])

    # -- reads --------------------------------------------------------------------------

    async def transcript(self, include_archive: bool) -> Transcript:
        """Every envelope of the memory as text, in one consistent read."""
        reply = await self._read("transcript", {"include_archive": int(include_archive)})
        return replies.transcript(reply)

    async def read_range(self, start: int, stop: int) -> list[Message]:
        reply = await self._read("read", {"start": start, "stop": stop})
        return [Message.model_validate_json(env) for env in reply[3:]]

    async def context(
        self,
        budget: int,
        *,
        summary_share: float,
        recall_share: float,
        backfill: bool,
        terms: Sequence[str] = (),
        facts_header: int = 0,
    ) -> ContextLayers:
        """The layers of a context within ``budget`` (see ``lua/context.lua``);
        ``facts_header``: the tokens of the facts message without its lines."""
        search = self.policy.search
        reply = await self._read(
            "context",
            {
                "budget": budget,
                "facts_header": facts_header,
                "summary_share": repr(float(summary_share)),
                "recall_share": repr(float(recall_share)),
                "backfill": int(backfill),
                "limit": search.limit,
                "k1": repr(search.k1),
                "b": repr(search.b),
                "neighbour_weight": repr(search.neighbour_weight),
            },
            terms,
        )
        return replies.context_layers(reply, facts_header)

    async def search(
        self,
        terms: Sequence[str],
        *,
        limit: int,
        since_id: int = 0,
        roles: Sequence[str] = (),
    ) -> list[Hit]:
        """The best ``limit`` archived messages for ``terms`` (analysed query terms)."""
        search = self.policy.search
        reply = await self._read(
            "search",
            {
                "limit": limit,
                "k1": repr(search.k1),
                "b": repr(search.b),
                "neighbour_weight": repr(search.neighbour_weight),
                "since_id": since_id,
                "roles": ",".join(roles),
            },
            terms,
        )
        return replies.hits(reply)

    async def snapshot(self, limit: int) -> Snapshot:
        reply = await self._read("snapshot", {"limit": limit})
        epoch, last_id, tokens, summary_tokens, count = (int(v) for v in reply[:5])
        incarnation = replies.text(reply[5])
        n_priorities = int(reply[6])
        at = 7 + 2 * n_priorities
        priority_tokens = {int(reply[i]): int(reply[i + 1]) for i in range(7, at, 2)}
        n_summaries = int(reply[at])
        envelopes: list[Message] = []
        for start in range(at + 1, len(reply), _PARSE_CHUNK):
            chunk = reply[start : start + _PARSE_CHUNK]
            envelopes += [Message.model_validate_json(e) for e in chunk]
            await asyncio.sleep(0)  # a large memory must not stall other tasks' appends
        if len(envelopes) - n_summaries == count:  # every live message seen: exact counts
            by_priority: dict[int, int] = {}
            for message in envelopes[n_summaries:]:
                if message.priority is not None:
                    by_priority[message.priority] = by_priority.get(message.priority, 0) + 1
            self.metrics.set_priority_distribution(self.memory, by_priority)
        return Snapshot(
            epoch,
            last_id,
            tokens,
            summary_tokens,
            tuple(envelopes[:n_summaries]),
            tuple(envelopes[n_summaries:]),
            count,
            priority_tokens,
            incarnation,
        )

    async def health(self) -> MemoryHealth:
        reply = await self._read("health", {})
        health = replies.health(reply, self.policy)
        self.metrics.set_priority_distribution(self.memory, dict(health.priority_counts))
        return health

    async def archived(self, offset: int, limit: int) -> list[Message]:
        """Archived originals from ``offset``, oldest first (a plain LRANGE)."""
        envelopes = await self.transport.command(
            "recall", "lrange", self.keys.archive, offset, offset + limit - 1, key=self.name
        )
        return [Message.model_validate_json(e) for e in envelopes]

    async def length(self) -> int:
        return int(await self.transport.command("len", "llen", self.keys.msgs, key=self.name))

    async def token_count(self) -> int:
        value = await self.transport.command(
            "token_count", "hget", self.keys.meta, "tokens", key=self.name
        )
        return int(value or 0)

    # -- internals ----------------------------------------------------------------------

    async def _stored_counted(
        self, name: str, values: dict[str, ScriptArg], messages: Sequence[ScriptArg]
    ) -> AppendResult:
        """``_stored``, then ``compozy_memory_messages_total`` by priority (not for a
        duplicate, which stored nothing; a write not acknowledged by replicas was stored)."""
        try:
            result = await self._stored(name, values, messages)
        except ReplicationError as exc:
            if isinstance(exc.result, AppendResult) and not exc.result.duplicate:
                self.metrics.count_messages(self.memory, messages[1::3])
            raise
        if not result.duplicate:
            self.metrics.count_messages(self.memory, messages[1::3])
        return result

    async def _stored(
        self, name: str, values: dict[str, ScriptArg], messages: Sequence[ScriptArg]
    ) -> AppendResult:
        try:
            reply = await self._write(name, values, messages)
        except ReplicationError as exc:
            raise exc.with_result(self._append_result(exc.result)) from exc
        return self._append_result(reply)

    async def _write(
        self, name: str, values: dict[str, ScriptArg], rest: Sequence[ScriptArg] = ()
    ) -> Any:
        if self.read_only:
            raise ReadOnlyMemoryError(f"{name} refused: this handle is read-only", key=self.name)
        return await self._send(name, values, rest, write=name in _WAITED)

    async def _read(
        self, name: str, values: dict[str, ScriptArg], rest: Sequence[ScriptArg] = ()
    ) -> Any:
        return await self._send(name, values, rest, write=False)

    async def _send(
        self, name: str, values: dict[str, ScriptArg], rest: Sequence[ScriptArg], *, write: bool
    ) -> Any:
        code = script(name)
        contract = code.contract
        keys = self._keys_of.get(name)
        if keys is None:
            keys = self._keys_of[name] = [getattr(self.keys, part) for part in contract.keys]
        # Text goes as UTF-8 whatever encoding the client is set up with, as bodies do.
        args = [a.encode() if isinstance(a, str) else a for a in contract.argv_for(values, rest)]
        return await self.transport.run(code, keys, args, key=self.name, write=write)

    def _append_result(self, reply: Any) -> AppendResult:
        first, last, tokens, count, summary_tokens, duplicate = (int(v) for v in reply[:6])
        self.incarnation = replies.text(reply[6])
        return AppendResult(
            first,
            last,
            tokens,
            count,
            summary_tokens,
            self.policy.max_tokens,
            bool(duplicate),
            self.incarnation,
        )


# Scripts that change the memory: with a WaitPolicy each is followed by WAIT or WAITAOF, and
# so is the lock's acquisition, whose fencing epoch must survive a failover (FencedLock hands
# out no lease the replicas did not acknowledge). Refresh and release are not: a lease is
# short-lived, and fenced by that epoch.
_WAITED = frozenset(
    {
        "append",
        "replace",
        "trim",
        "clear",
        "expire",
        "flush_commit",
        "lock_acquire",
        "promote",
        "clear_recalled",
        "facts_set",
        "facts_delete",
        "import",
    }
)
