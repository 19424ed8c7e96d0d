"""The append without a script: the usual append as native commands in a checked transaction.

A script costs the server more than what it does: every call into Lua, every string brought
into it (hashed whole), every nested command. ``lua/append.lua`` does little (read meta,
push, write meta) yet costs the server about 20 times a raw ``RPUSH`` of the same bytes; the
same work as native commands costs a few times one. So the usual append goes as a checked
transaction instead (optimistic concurrency, as redis-py's ``WATCH`` recipe)::

    WATCH msgs meta; HMGET meta ...; LLEN msgs; [PEXPIRETIME meta]; TIME
    MULTI; RPUSH msgs <envelopes>; HSET meta <totals, version, dedupe record>; EXEC

The client does what the script would, from what the first round trip read: the ids, the
envelopes, the totals, the version and the process's dedupe record. ``WATCH`` makes the
second round trip apply only if neither key changed since it was read (another writer, an
eviction, an expiry): then ``EXEC`` applies nothing, and the call goes as the script.

Only the usual append goes this way: one priority (none pinned), a dedupe key the handles
made up (``~<process>:<n>``, above every one recorded), a caller's own key the dedupe set does
not hold, or none; a memory that exists in this release's format with its totals as a script
writes them, its messages' count equal to its list's length, no expiry to move and no sweep
of the dedupe set due. A seal of the process's record or a move of its score goes in the
transaction when the client expected it and read the dedupe set too (:meth:`AppendPlan.expect`).
Anything else, a retry of a write, any input the script would refuse, and every write of a
memory that is not plain goes as the script (:meth:`AppendPlan.writes` returns no commands),
which stays the one definition of the append; the tests check that both leave the same bytes.
So every guarantee of the script holds: at most once (the same dedupe record and set), exact
totals (read under ``WATCH``), the TTL inside the write (a deadline is moved only by the
script), a memory's keys evicted in part refused (the list's length is read under ``WATCH``).

This module is pure: the plan says what to read and what to write (the dedupe record's part
in :mod:`compozy_memory._wire.dedupe_plan`), :mod:`compozy_memory._wire.transaction` makes
several plans' two round trips steps, and the drivers send them on one connection
(:mod:`compozy_memory._io.transactions`: a loop iteration's appends, or one of a thread's).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from compozy_memory._model.limits import (
    DATA_FORMAT,
    DEDUPE_CHUNK,
    DEDUPE_SWEEP,
    DEDUPE_WINDOW,
    MAX_BATCH,
    MAX_CALL_BYTES,
    MAX_DEDUPE_KEY,
    MAX_MESSAGE_BYTES,
    MAX_MESSAGE_TOKENS,
    MAX_PRIORITY,
    MAX_TOTAL,
    TTL_SLACK_PARTS,
)
from compozy_memory._wire.contracts import ScriptArg
from compozy_memory._wire.dedupe_plan import (
    HINT_IDS,
    HINT_WRITES,
    OVERSIZED,
    Hint,
    RecordWrite,
    as_bytes,
    next_record,
)

__all__ = ["MIN_TTL_MS", "AppendPlan"]

#: A memory with a TTL below this goes as the script: the plan checks its deadline a round
#: trip before the write, and keeps away from a deadline due within half its slack (at this
#: TTL, about a second).
MIN_TTL_MS = 60_000

# meta's fmt as the scripts write it, read from a connection that decodes replies or not.
_FORMATS = (str(DATA_FORMAT).encode(), str(DATA_FORMAT))
# A key the handles make up: '~<process>:<n>' (lib/dedupe.lua: dedupe_token).
_PROCESS_KEY = re.compile(rb"~([A-Za-z0-9_-]+):([1-9][0-9]*|0)")


def _number(text: bytes | str | None, limit: int) -> int | None:
    """``text`` (digits as a script writes them: no sign, no leading zero, at most 16) as an
    integer below ``limit``, else None."""
    if text is None or not text.isdigit() or len(text) > 16:  # (bytes: ASCII digits only)
        return None
    if isinstance(text, str):
        if not text.isascii():
            return None
        text = text.encode()
    if text[0] == 48 and len(text) > 1:
        return None
    value = int(text)
    return value if value < limit else None


def _count(value: ScriptArg, limit: int) -> int | None:
    """An argument the client sent as a number (an int, or its digits) below ``limit``."""
    if type(value) is int:
        return value if 0 <= value < limit else None
    return _number(value if isinstance(value, (bytes, str)) else None, limit)


class AppendPlan:
    """One append's transaction, or the reason it goes as the script.

    :meth:`of` checks the call (anything the script would refuse goes as the script);
    :meth:`reads` are the commands of the first round trip (after ``WATCH`` of
    :attr:`watch`); :meth:`writes` the commands between ``MULTI`` and ``EXEC``, or None;
    :meth:`reply` the script's reply from ``EXEC``'s."""

    __slots__ = (
        "_counter",
        "_dedupe",
        "_fields",
        "_hint",
        "_last",
        "_messages",
        "_n",
        "_own",
        "_pc",
        "_priority",
        "_pt",
        "_record",
        "_reply",
        "_total",
        "_ttl_ms",
        "mark",
        "meta",
        "msgs",
        "oversized",
        "process",
        "watch",
        "written",
    )

    def __init__(
        self,
        msgs: str,
        meta: str,
        dedupe: str,
        ttl_ms: int,
        mark: bytes,
        process: bytes | None,
        counter: bytes | None,
        priority: bytes,
        messages: list[tuple[bytes, bytes]],
        total: int,
    ) -> None:
        self.msgs, self.meta, self._dedupe = msgs, meta, dedupe
        #: The keys ``WATCH`` guards: what the plan reads and writes.
        self.watch: tuple[str, ...] = (msgs, meta)
        self.mark = mark
        self._ttl_ms = ttl_ms
        #: The writing process (of a handle's dedupe key), or None.
        self.process = process
        self._counter = counter
        self._hint: Hint | None = None
        #: What the applied write left in the process's record (:class:`Hint`), or None.
        self.written: Hint | None = None
        # A caller's own dedupe key: a member of the dedupe set, looked up there.
        self._own = mark if mark and process is None else None
        if self._own is not None:
            self.watch = (msgs, meta, dedupe)
        self._priority = priority
        self._pt = b"p:" + priority + b":tokens"
        self._pc = b"p:" + priority + b":count"
        self._record = b"w:" + process if process is not None else None
        self._messages = messages
        self._n = len(messages)
        self._total = total
        self._fields: tuple[bytes, ...] = (
            b"inc",
            b"fmt",
            b"imp",
            b"last_id",
            b"tokens",
            b"count",
            b"summary_tokens",
            self._pt,
            self._pc,
        ) + ((self._record,) if self._record is not None else ())
        self._reply: list[Any] = []
        self._last = 0
        #: The process's dedupe record read was longer than any the scripts write (planted):
        #: the read copied it, and the memory's appends should go as the script, which sizes
        #: the record before it reads it (``HSTRLEN``).
        self.oversized = False

    @classmethod
    def of(cls, keys: Sequence[str], args: Sequence[ScriptArg]) -> AppendPlan | None:
        """The plan of an append with these KEYS and ARGV (``lua/append.lua``'s), or None when
        it goes as the script: the checks of ``validate_batch`` (lib/batch.lua), and the
        shapes the plan does not take (a pinned message, several priorities, a short TTL)."""
        if len(args) < 7 or len(keys) < 2:
            return None
        ttl_ms = _count(args[0], MAX_TOTAL)
        max_tokens = _count(args[1], MAX_TOTAL)
        n = _count(args[3], MAX_TOTAL)
        mark = as_bytes(args[2])
        if ttl_ms is None or max_tokens is None or n is None or mark is None:
            return None
        if not 1 <= n <= MAX_BATCH:
            return None
        if (0 < ttl_ms < MIN_TTL_MS) or len(args) != 4 + 3 * n or len(mark) > MAX_DEDUPE_KEY:
            return None
        process = counter = None
        if mark:
            handles = _PROCESS_KEY.fullmatch(mark)
            if handles is not None:
                process, counter = handles.group(1), handles.group(2)
        first = args[5]
        priority_n = _count(first, MAX_PRIORITY + 1)
        if not priority_n:  # (0: a pinned message)
            return None
        priority = b"%d" % priority_n
        messages: list[tuple[bytes, bytes]] = []
        total = size = 0
        for at in range(4, len(args), 3):
            tokens = _count(args[at], MAX_MESSAGE_TOKENS + 1)
            body = args[at + 2]
            if tokens is None or not isinstance(body, bytes) or args[at + 1] != first:
                return None
            if max_tokens and tokens > max_tokens:
                return None
            if body[:1] != b'"' or body[-1:] != b"}" or len(body) + 1 > MAX_MESSAGE_BYTES:
                return None
            size += len(body) + 1
            total += tokens
            messages.append((b"%d" % tokens, body))
        if size > MAX_CALL_BYTES:
            return None
        if len(keys) < 5:
            return None
        return cls(
            keys[0], keys[1], keys[4], ttl_ms, mark, process, counter, priority, messages, total
        )

    def expect(self, hint: Hint | None) -> None:
        """Read the dedupe set too (and guard it) when ``hint`` says this write will seal the
        process's record or move its score."""
        if hint is None or self._record is None:
            return
        # With room for writes the hint missed: the script's (a sweep), other processes'.
        if (
            hint.k + HINT_WRITES >= DEDUPE_CHUNK
            or hint.last_id + self._n + HINT_IDS - hint.z >= DEDUPE_SWEEP
        ):
            self._hint = hint
            self.watch = (self.msgs, self.meta, self._dedupe)

    def reads(self) -> list[tuple[Any, ...]]:
        """The commands of the first round trip, after ``WATCH`` (``TIME`` is the batch's)."""
        out: list[tuple[Any, ...]] = [("HMGET", self.meta, *self._fields), ("LLEN", self.msgs)]
        if self._ttl_ms:
            out.append(("PEXPIRETIME", self.meta))
        hint = self._hint
        if hint is not None and self._record is not None:
            member = b"~" + self._record[2:]
            out += [
                ("ZCARD", self._dedupe),
                ("ZSCORE", self._dedupe, member),
                ("ZSCORE", self._dedupe, member + b"." + hint.seq),
            ]
        elif self._own is not None:
            out += [("ZSCORE", self._dedupe, self._own), ("ZCARD", self._dedupe)]
        return out

    def writes(self, replies: Sequence[Any], time: tuple[bytes, bytes]) -> list[tuple[Any, ...]]:
        """The commands of the transaction, from :meth:`reads`' replies and the server clock
        (:func:`time_texts`); empty when the append must go as the script."""
        if any(isinstance(reply, BaseException) for reply in replies):
            return []
        values = replies[0]
        inc, fmt, imp, last_text, tokens_text, count_text, summary, pt, pc = values[:9]
        if inc is None or fmt not in _FORMATS or imp is not None:
            return []  # a new memory, an evicted meta, an older format, an import
        last_id = _number(last_text, MAX_TOTAL)
        count = _number(count_text, MAX_TOTAL)
        tokens = _number(tokens_text, MAX_TOTAL)
        if last_id is None or count is None or tokens is None or count < 1:
            return []  # totals as no script writes them; an empty list (RPUSH creates it)
        if replies[1] != count:
            return []  # keys evicted in part: the script refuses the write
        p_tokens = 0 if pt is None else _number(pt, MAX_TOTAL)
        p_count = 0 if pc is None else _number(pc, MAX_TOTAL)
        summary_tokens = 0 if summary is None else _number(summary, MAX_TOTAL)
        if p_tokens is None or p_count is None or summary_tokens is None:
            return []
        ms, us = time
        if self._ttl_ms and not self._deadline_holds(replies[2], int(ms)):
            return []
        n = self._n
        first_id, last = last_id + 1, last_id + n
        record: bytes | None = None
        sealed: list[Any] = []
        dedupe: list[tuple[Any, ...]] = []
        if self._record is not None:
            assert self._counter is not None
            done = next_record(
                values[9],
                (self.meta, self._dedupe),
                self._counter,
                self._record,
                (first_id, last),
                replies[-3:] if self._hint is not None else None,
                self._hint,
            )
            if done == OVERSIZED:
                self.oversized = True
            if not isinstance(done, RecordWrite):
                return []
            record, sealed, dedupe = done.record, done.sealed, done.commands
            self.written = done.written
        elif self._own is not None:
            # lib/dedupe.lua, a caller's key: a key the set holds is the script's (a retry,
            # or one past the window, whose score it moves); a new one is added, unless that
            # would create the set (its deadline) or pass its bound (a trim), or a sweep is due
            seen, card = replies[-2:]
            if seen is not None or not isinstance(card, int) or card == 0:
                return []
            if card + 1 > DEDUPE_WINDOW + DEDUPE_SWEEP:
                return []
            if last - last % DEDUPE_SWEEP >= first_id:
                return []
            dedupe = [("ZADD", self._dedupe, last, self._own)]
        last_b = b"%d" % last
        envelopes = []
        for i, (message_tokens, body) in enumerate(self._messages):
            envelopes.append(
                b'{"id":%d,"ts":%s,"tokens":%s,"priority":%s,%s'
                % (first_id + i, ms, message_tokens, self._priority, body)
            )
        ver = last_b + b":" + (self.mark or b"t" + us)
        new_tokens, new_count = tokens + self._total, count + n
        fields: list[Any] = [
            b"last_id",
            last_b,
            b"tokens",
            new_tokens,
            b"count",
            new_count,
            b"ver",
            ver,
            self._pt,
            p_tokens + self._total,
            self._pc,
            p_count + n,
        ]
        if record is not None:
            fields += (*sealed, self._record, record)
        self._last = count + n
        self._reply = [first_id, last, new_tokens, new_count, summary_tokens, 0, inc, ver]
        # In the script's order: the envelopes, the dedupe set's changes, meta.
        return [("RPUSH", self.msgs, *envelopes), *dedupe, ("HSET", self.meta, *fields)]

    def reply(self, applied: Sequence[Any]) -> list[Any] | None:
        """The script's reply from the transaction's (``EXEC``'s, for :meth:`writes`), or
        None if the list's length says it did not apply as planned."""
        if not applied or applied[0] != self._last:
            return None
        return self._reply

    def late(self, elapsed_ms: float) -> bool:
        """Whether the deadline :meth:`writes` checked at the first round trip's server clock
        may be due by the time ``EXEC`` runs: the client took ``elapsed_ms`` from sending the
        reads to sending the writes, more than a quarter of the slack (the check keeps half of
        it; the other quarter is the writes' way to the server). Then the script moves it."""
        return bool(self._ttl_ms) and elapsed_ms > math.ceil(self._ttl_ms / TTL_SLACK_PARTS) // 4

    def _deadline_holds(self, at: Any, now: int) -> bool:
        """Whether the memory's deadline (``PEXPIRETIME``: ``at``) stays where it is for a
        write at ``now`` (lib/deltas.lua: ttl_deadline), with half the slack to spare."""
        if not isinstance(at, int):
            return False
        slack = math.ceil(self._ttl_ms / TTL_SLACK_PARTS)
        return now + self._ttl_ms + slack // 2 <= at <= now + self._ttl_ms + slack
