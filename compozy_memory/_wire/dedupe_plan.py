"""A process's dedupe record as a transaction writes it: the client's half of lib/dedupe.lua.

A handle's dedupe keys (``~<process>:<n>``) are remembered in meta field ``w:<process>``
(``lib/dedupe.lua``: a header ``<hi>:<z>:<seq>:<k>``, then the newest writes). The usual
append (:mod:`compozy_memory._wire.optimistic`) extends the record itself; this module makes
the record it writes, the chunk it seals, and the dedupe set's changes, exactly as the
function would, or says the write is the function's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from compozy_memory._model.limits import (
    DEDUPE_CHUNK,
    DEDUPE_CHUNKS,
    DEDUPE_SWEEP,
    DEDUPE_WINDOW,
    MAX_META_FIELD_BYTES,
)
from compozy_memory._wire.contracts import ScriptArg

__all__ = [
    "HINT_IDS",
    "HINT_WRITES",
    "OVERSIZED",
    "Hint",
    "RecordWrite",
    "above",
    "as_bytes",
    "next_record",
]

# A process's dedupe record's header: '<hi>:<z>:<seq>:<k>'.
_RECORD_HEAD = re.compile(rb"([0-9]+):([0-9]+):([0-9]+):([0-9]+)")
# The last id of a record's newest entry (lib/dedupe.lua: ':(%d+)$').
_NEWEST = re.compile(rb":([0-9]+)\Z")
#: A record longer than any the scripts write (planted): the memory's appends are the
#: function's, which sizes the record before it reads it (``HSTRLEN``).
OVERSIZED: Final = "oversized"
Oversized = Literal["oversized"]


#: How many writes of the process, and how many ids, a hint may have missed: a plan reads the
#: dedupe set from that far before a seal or a move of the score.
HINT_WRITES = 2
HINT_IDS = 8


@dataclass(frozen=True, slots=True)
class Hint:
    """What a client's last transaction to a memory left in its process's dedupe record: its
    entries (``k``), its score (``z``), its next chunk (``seq``) and the memory's last id. The
    next plan reads the dedupe set too when they say its write will seal the record or move
    the score (the script's work otherwise); a wrong hint only sends a write to the script."""

    k: int
    z: int
    seq: bytes
    last_id: int


@dataclass(frozen=True, slots=True)
class RecordWrite:
    """What a write does to its process's dedupe record: the record, the fields of the chunk
    it seals (meta's, field and value, or none), the dedupe set's changes (commands, in the
    function's order), and the hint it leaves."""

    record: bytes
    sealed: list[Any]
    commands: list[tuple[Any, ...]]
    written: Hint


def as_bytes(value: ScriptArg) -> bytes | None:
    """``value`` as the server receives it, or None for a value the plan does not take."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, int) and not isinstance(value, bool):
        return b"%d" % value
    return None


def above(a: bytes, b: bytes) -> bool:
    """Whether counter ``a`` is a larger number than ``b`` (digits without leading zeros)."""
    return len(a) > len(b) if len(a) != len(b) else a > b


def next_record(
    stored: Any,
    keys: tuple[str, str],
    counter: bytes,
    field: bytes,
    ids: tuple[int, int],
    zset: Sequence[Any] | None,
    hint: Hint | None,
) -> RecordWrite | Oversized | None:
    """The process's dedupe record after this write (lib/dedupe.lua: dedupe_record), the
    meta fields of a chunk it seals, and the dedupe set's changes (``keys``: meta and the
    dedupe set; ``ids``: the write's first and last; ``field``: the record's, ``w:<process>``);
    :data:`OVERSIZED` for a record longer than the scripts write; or None when the write
    must go as the script: a process with no record yet, a record of an earlier release
    or one too long, a key not above every one recorded (a retry), ids crossing a
    multiple of DEDUPE_SWEEP (a sweep), or a seal or a move of the score the dedupe set
    was not read for (``zset``: its ZCARD, the process's score, the hinted chunk's), or
    that would create the set, grow it past its bound or meet a chunk already there."""
    meta, dedupe_key = keys
    first_id, last_id = ids
    text = None if stored is None else as_bytes(stored)
    if text is None:
        return None
    if len(text) > MAX_META_FIELD_BYTES:
        return OVERSIZED
    head = _RECORD_HEAD.match(text)
    if head is None:
        return None
    hi, z_text, seq, k_text = head.groups()
    if not above(counter, hi):
        return None
    if len(z_text) > 16 or len(k_text) > 16 or len(seq) > 16:
        # (planted: no script writes such a count; past 4300 digits int() raises)
        return None
    if last_id - last_id % DEDUPE_SWEEP >= first_id:
        return None
    z, k = int(z_text), int(k_text)
    entries = text[head.end() :]
    member = b"~" + field[2:]
    sealed: list[Any] = []
    dedupe: list[tuple[Any, ...]] = []
    if k >= DEDUPE_CHUNK:
        newest_match = _NEWEST.search(entries)
        newest_text = newest_match.group(1) if newest_match else b"0"
        if len(newest_text) > 16:
            return None
        newest = int(newest_text)
        if newest >= last_id - DEDUPE_WINDOW:
            # dedupe_add of a new member: the set there, not past its bound after it
            if zset is None or hint is None or hint.seq != seq or zset[2] is not None:
                return None
            card = zset[0]
            if not isinstance(card, int) or card == 0:
                return None
            if card + 1 > DEDUPE_WINDOW + DEDUPE_SWEEP:
                return None
            sealed = [field + b"." + seq, entries]
            dedupe.append(("ZADD", dedupe_key, newest, member + b"." + seq))
            number = int(seq)
            if number >= DEDUPE_CHUNKS:
                dropped = b"%d" % (number - DEDUPE_CHUNKS)
                dedupe.append(("HDEL", meta, field + b"." + dropped))
                dedupe.append(("ZREM", dedupe_key, member + b"." + dropped))
            seq = b"%d" % (number + 1)
        k, entries = 0, b""
    if last_id - z >= DEDUPE_SWEEP:
        # dedupe_add of the process's member, there already: its score moves, no more
        if zset is None or zset[1] is None:
            return None
        dedupe.append(("ZADD", dedupe_key, last_id, member))
        z, z_text = last_id, b"%d" % last_id
    record = b"%s:%s:%s:%d%s,%s:%d" % (counter, z_text, seq, k + 1, entries, counter, last_id)
    return RecordWrite(record, sealed, dedupe, Hint(k + 1, z, seq, last_id))
