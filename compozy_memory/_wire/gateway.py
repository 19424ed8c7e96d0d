"""The script gateway: one typed method per script of a memory, with the feature slices' calls
it mixes in (search's, facts', the flush's), the only code that builds a memory's KEYS/ARGV.

A :class:`MemoryGateway` is bound to one memory (its keys, its policy, read-only or not) and
one transport. Each method builds its script's KEYS from the names the script's header
declares and its ARGV by name through the script's
:class:`~compozy_memory._wire.contracts.Contract`, yields it as an effect, and decodes the reply
by the names the header's ``REPLY`` line gives (:mod:`compozy_memory._wire.replies`). Each
returns an :class:`~compozy_memory._wire.steps.Op`: ``yield from`` it in other steps, or
``await`` it on an async driver. The handles (``MemoryInstance``, ``SyncMemoryInstance``),
the indexer, the fenced lock and the flusher all go through it, so a script's contract is
written down once, and each of them can be tested against a fake driver. The gateway imports
no I/O and no metrics: what it measures (messages stored by priority, the priority
distribution) it yields as :class:`~compozy_memory._wire.effects.Observe` effects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compozy_memory._facts.calls import FactsCalls
from compozy_memory._flush.calls import FlushCalls
from compozy_memory._model.limits import MAX_READ
from compozy_memory._model.messages import EncodedMessage, Message
from compozy_memory._model.results import (
    AppendResult,
    ContextLayers,
    MemoryHealth,
    Snapshot,
)
from compozy_memory._search.runtime.index_calls import IndexCalls
from compozy_memory._search.runtime.vector_calls import VectorCalls
from compozy_memory._wire import replies
from compozy_memory._wire.effects import Observe, Sleep, raw
from compozy_memory._wire.maintenance import MaintenanceCalls
from compozy_memory._wire.replies import TrimStep
from compozy_memory._wire.scripts import ScriptArg
from compozy_memory._wire.steps import Steps, op
from compozy_memory.errors import ReplicationError

__all__ = ["MemoryGateway", "message_args"]

# Snapshots parse this many messages between pauses (turns of the event loop).
_PARSE_CHUNK = 64


def message_args(messages: Sequence[EncodedMessage]) -> list[ScriptArg]:
    """``messages`` as the append and replace scripts' trailing ARGV: ``tokens priority body``
    for each, in order (their headers' ``messages...``), each body without its opening ``{``:
    the script's envelope puts it back, so the server joins the envelope to the body once
    rather than cutting a copy of the body first."""
    out: list[ScriptArg] = []
    for tokens, priority, body in messages:
        out += (tokens, priority, body[1:])
    return out


class MemoryGateway(MaintenanceCalls, IndexCalls, VectorCalls, FactsCalls, FlushCalls):
    """Every script call of one memory, typed."""

    # -- writes -------------------------------------------------------------------------

    @op
    def append(self, messages: Sequence[EncodedMessage], dedupe_key: str) -> Steps[AppendResult]:
        return (
            yield from self._stored_counted(
                "append",
                {
                    "ttl_ms": self.ttl_ms,
                    "max_tokens": self.policy.max_tokens or 0,
                    "dedupe_key": dedupe_key,
                    "n": len(messages),
                },
                messages,
            )
        )

    @op
    def replace(
        self,
        messages: Sequence[EncodedMessage],
        *,
        if_last_id: int | None,
        if_incarnation: str | None,
        if_version: str | None,
        dedupe_key: str,
    ) -> Steps[AppendResult]:
        """Swap the live messages for ``messages``; ConflictError if a condition fails,
        StepRequiredError past ``MOVE_STEP`` live messages, IndexLagError while one of them
        is not indexed."""
        return (
            yield from self._stored_counted(
                "replace",
                {
                    "ttl_ms": self.ttl_ms,
                    "max_tokens": self.policy.max_tokens or 0,
                    "archive_max": self.policy.archive_max,
                    "if_last_id": -1 if if_last_id is None else if_last_id,
                    "if_incarnation": if_incarnation or "",
                    "if_version": if_version or "",
                    "dedupe_key": dedupe_key,
                    "n": len(messages),
                },
                messages,
            )
        )

    @op
    def trim_step(
        self, keep_messages: int | None, max_tokens: int | None, *, everything: bool = False
    ) -> Steps[TrimStep]:
        """One bounded step of moving the oldest messages to the archive (``lua/trim.lua``)."""
        fields = yield from self._writing(
            "trim",
            {
                "ttl_ms": self.ttl_ms,
                "archive_max": self.policy.archive_max,
                "keep_messages": -1 if keep_messages is None else keep_messages,
                "max_tokens": -1 if max_tokens is None else max_tokens,
                "everything": int(everything),
            },
            self._fields("trim"),
        )
        return replies.trim_step(fields)

    @op
    def clear(self) -> Steps[tuple[int, list[tuple[str, int]]]]:
        """The live messages removed, and the stored results this memory pinned, with how
        many times each."""
        reply = yield from self._writing("clear", {"ttl_ms": self.ttl_ms}, self._fields("clear"))
        pins = [(replies.text(key), int(n)) for key, n in reply["pins"]]
        return int(reply["removed"]), pins

    @op
    def purge(self) -> Steps[tuple[int, int]]:
        """Delete every key of the memory, meta and the lock included (``lua/purge.lua``):
        how many keys there were and the elements they held."""
        reply = yield from self._writing("purge", {}, self._fields("purge"))
        return int(reply["keys"]), int(reply["items"])

    @op
    def note_pin(self, result_key: str) -> Steps[int]:
        """Record that a message of this memory pins ``result_key`` (once more); returns how
        many results the memory pins."""
        self._check_writable("note_pin")
        yield from self._command("pin", raw, "hincrby", self.keys.respins, result_key, 1)
        if self.ttl_ms:
            # Every key of a memory expires at meta's deadline (lua/lib/deltas.lua), this one
            # too; a memory with none yet gets the TTL, and its first write moves them all.
            deadline = yield from self._command("pin", int, "pexpiretime", self.keys.meta)
            if deadline > 0:
                yield from self._command("pin", raw, "pexpireat", self.keys.respins, deadline)
            else:
                yield from self._command("pin", raw, "pexpire", self.keys.respins, self.ttl_ms)
        return (yield from self.pinned_results())

    @op
    def pinned_results(self) -> Steps[int]:
        """How many stored results this memory's messages pin."""
        return (yield from self._command("pin", int, "hlen", self.keys.respins))

    @op
    def pins(self) -> Steps[list[str]]:
        """The keys of the stored results this memory's messages pin (at most
        MAX_RESULT_PINS)."""
        keys = yield from self._command("pin", list, "hkeys", self.keys.respins)
        return [replies.text(k) for k in keys]

    @op
    def expire(self, ttl_ms: int) -> Steps[int]:
        """Set (ttl_ms > 0) or remove (0) the TTL of every key; later writes keep it."""
        existing = yield from self._writing("expire", {"ttl_ms": ttl_ms}, int)
        self.ttl_ms = ttl_ms
        return existing

    @op
    def promote(self, ids: Sequence[int], max_tokens: int) -> Steps[list[Message]]:
        """Bring messages back into context by id; returns those brought back now."""
        reply = yield from self._writing(
            "promote",
            {"ttl_ms": self.ttl_ms, "max_tokens": max_tokens},
            self._fields("promote"),
            list(ids),
        )
        return replies.messages(reply["envelope"])

    @op
    def clear_recalled(self) -> Steps[int]:
        return (yield from self._writing("clear_recalled", {"ttl_ms": self.ttl_ms}, int))

    # -- reads --------------------------------------------------------------------------

    @op
    def read_range(self, start: int, stop: int) -> Steps[list[Message]]:
        """Live messages from index ``start`` to ``stop`` (at most MAX_READ of them)."""
        return (yield from self.read_page(start, stop)).messages

    @op
    def read_page(self, start: int, stop: int) -> Steps[replies.Page]:
        """A page of live messages (at most MAX_READ from ``start``), with the memory's
        length and version when it was read."""
        reply = yield from self._reading(
            "read", {"start": start, "stop": stop}, self._fields("read")
        )
        self.incarnation = replies.text(reply["incarnation"])
        self.version = replies.text(reply["version"])
        return replies.Page(
            replies.messages(reply["envelope"]), int(reply["total_count"]), self.version
        )

    @op
    def context(
        self,
        budget: int,
        *,
        summary_share: float,
        recall_share: float,
        backfill: bool,
        max_messages: int | None,
        hits: Sequence[int] = (),
        facts_header: int = 0,
        tail_from: int = 0,
        incarnation: str = "",
    ) -> Steps[ContextLayers]:
        """The layers of a context within ``budget`` (see ``lua/context.lua``);
        ``facts_header``: the tokens of the facts message without its lines; ``hits``: the
        query's hits as the client ranked them, best first; ``tail_from``: where the live
        tail the client ranked began (0: it ranked none); ``incarnation``: the memory's as
        the hits were ranked ('' for any: hits of another are passed over)."""
        fields = yield from self._reading(
            "context",
            {
                "budget": budget,
                "facts_header": facts_header,
                "summary_share": repr(float(summary_share)),
                "recall_share": repr(float(recall_share)),
                "backfill": int(backfill),
                "max_messages": -1 if max_messages is None else max_messages,
                "limit": self.policy.search.limit,
                "hits": ",".join(str(i) for i in hits),
                "tail_from": tail_from,
                "inc": incarnation,
            },
            self._fields("context"),
        )
        self.incarnation = replies.text(fields["incarnation"])
        self.version = replies.text(fields["version"])
        return replies.context_layers(fields, facts_header)

    @op
    def snapshot(self, limit: int) -> Steps[Snapshot]:
        reply = yield from self._reading("snapshot", {"limit": limit}, self._fields("snapshot"))
        n_summaries = len(reply["summaries"])
        envelopes: list[Message] = []
        raw = [*reply["summaries"], *reply["envelope"]]
        for start in range(0, len(raw), _PARSE_CHUNK):
            envelopes += replies.messages(raw[start : start + _PARSE_CHUNK])
            yield from Sleep(0)  # a large snapshot must not stall other tasks' appends
        count = int(reply["count"])
        if len(envelopes) - n_summaries == count:  # every live message seen: exact counts
            by_priority: dict[int, int] = {}
            for message in envelopes[n_summaries:]:
                if message.priority is not None:
                    by_priority[message.priority] = by_priority.get(message.priority, 0) + 1
            yield from Observe("priority_distribution", (self.memory,), by_priority)
        return Snapshot(
            int(reply["epoch"]),
            int(reply["last_id"]),
            int(reply["tokens"]),
            int(reply["summary_tokens"]),
            tuple(envelopes[:n_summaries]),
            tuple(envelopes[n_summaries:]),
            count,
            {int(p): int(t) for p, t in reply["priorities"]},
            replies.text(reply["incarnation"]),
            int(reply["ix_next"]),
            replies.text(reply["version"]),
        )

    @op
    def health(self) -> Steps[MemoryHealth]:
        reply = yield from self._reading("health", {}, self._fields("health"))
        health = replies.health(reply["fields"], self.policy)
        yield from Observe("priority_distribution", (self.memory,), dict(health.priority_counts))
        return health

    @op
    def archived(self, offset: int, limit: int) -> Steps[list[Message]]:
        """Archived originals from ``offset``, oldest first (a plain LRANGE, at most MAX_READ)."""
        envelopes = yield from self._command(
            "recall",
            replies.messages,
            "lrange",
            self.keys.archive,
            offset,
            offset + min(limit, MAX_READ) - 1,
        )
        return envelopes

    @op
    def length(self) -> Steps[int]:
        return (yield from self._command("len", int, "llen", self.keys.msgs))

    @op
    def token_count(self) -> Steps[int]:
        return (
            yield from self._command("token_count", _int_or_0, "hget", self.keys.meta, "tokens")
        )

    # -- internals ----------------------------------------------------------------------

    def _stored_counted(
        self, name: str, values: dict[str, ScriptArg], messages: Sequence[EncodedMessage]
    ) -> Steps[AppendResult]:
        """Send an append or replace, then ``compozy_memory_messages_total`` by priority (not
        for a duplicate, which stored nothing; a write not acknowledged by replicas was
        stored)."""
        decode = self._fields(name)
        try:
            fields = yield from self._writing(name, values, decode, message_args(messages))
        except ReplicationError as exc:
            stored = self._append_result(decode(exc.result))
            if not stored.duplicate:
                yield Observe("messages", self._labels, _by_priority(messages))
            raise exc.with_result(stored) from exc
        result = self._append_result(fields)
        if not result.duplicate:
            yield Observe("messages", self._labels, _by_priority(messages))
        return result

    def _append_result(self, fields: dict[str, Any]) -> AppendResult:
        self.incarnation = replies.text(fields["incarnation"])
        self.version = replies.text(fields["version"])
        return AppendResult(
            int(fields["first_id"]),
            int(fields["last_id"]),
            int(fields["total_tokens"]),
            int(fields["total_count"]),
            int(fields["summary_tokens"]),
            self.policy.max_tokens,
            bool(int(fields["duplicate"])),
            self.incarnation,
            self.version,
        )


def _by_priority(messages: Sequence[EncodedMessage]) -> dict[int, int]:
    if len(messages) == 1:  # most appends
        return {messages[0].priority: 1}
    counts: dict[int, int] = {}
    for message in messages:
        counts[message.priority] = counts.get(message.priority, 0) + 1
    return counts


def _int_or_0(value: Any) -> int:
    return int(value or 0)
