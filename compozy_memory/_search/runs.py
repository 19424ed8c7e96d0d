"""How the index's segments write numbers and runs of postings: 7-bit digits, fixed widths
and varints, so every byte is ASCII (the layout is described in
:mod:`compozy_memory._search.segments`, which writes buckets and blocks of these runs)."""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from itertools import islice
from operator import sub

__all__ = ["MOST_DIGITS", "digits", "fixed", "one_run", "varint", "write_run"]

#: The most digits of a fixed number: ids are below 2 ** 53.
MOST_DIGITS = 8
#: Values past which :func:`fixed` packs them into lanes of one integer rather than going
#: value by value (measured: about where the two take the same time).
_LANES_FROM = 10
#: A byte's low 7 bits, as a ``bytes.translate`` table.
_LOW_7_OF = bytes(range(128)) * 2
_BIG_ENDIAN = sys.byteorder == "big"


def varint(out: bytearray, n: int) -> None:
    """``n`` (>= 0) in 6 bits a byte, least significant first, 0x40 set on all but the last."""
    while n >= 0x40:
        out.append((n & 0x3F) | 0x40)
        n >>= 6
    out.append(n)


def digits(largest: int) -> int:
    """Digits of 7 bits a fixed number needs to hold ``largest``."""
    return max(1, (largest.bit_length() + 6) // 7)


def fixed(out: bytearray, values: Sequence[int], width: int) -> None:
    """``values`` in ``width`` 7-bit digits each, least significant first."""
    if width == 1:
        out += bytes(values)
        return
    n = len(values)
    if n >= _LANES_FROM and width <= MOST_DIGITS:
        try:
            lanes = array("Q", values)
        except OverflowError:  # a value no segment holds (negative): digit by digit below
            pass
        else:
            # Every value an 8-byte lane of one integer: digit i of every value is then the
            # low byte of each lane of the integer shifted right 7 x i bits (what the next
            # lane shifts in lands above it), masked to 7 bits, in C-level passes, with no
            # Python operation per value (a bucket's entries, a block's postings).
            if _BIG_ENDIAN:  # pragma: no cover - no such machine in CI
                lanes.byteswap()
            raw = bytes(lanes)
            whole = int.from_bytes(raw, "little")
            at = len(out)
            out += bytes(n * width)
            out[at : at + n * width : width] = raw[::8].translate(_LOW_7_OF)
            for i in range(1, width):
                column = (whole >> 7 * i).to_bytes(8 * n, "little")[::8]
                out[at + i : at + n * width : width] = column.translate(_LOW_7_OF)
            return
    for v in values:
        for _ in range(width):
            out.append(v & 0x7F)
            v >>= 7


def _small(out: bytearray, value: int) -> int:
    """``value`` (< 2 ** 21) in as few 7-bit digits as hold it; returns how many."""
    if value < 0x80:
        out.append(value)
        return 1
    if value < 0x4000:
        out += bytes((value & 0x7F, value >> 7))
        return 2
    out += bytes((value & 0x7F, value >> 7 & 0x7F, value >> 14))
    return 3


def one_run(delta: int, tf: int, length: int) -> bytes:
    """The run of one document: its id less the segment's first, tf, length."""
    if 0 <= delta < 0x1000 and 0 <= tf < 0x80 and 0 <= length < 0x4000:  # most: 5 to 7 bytes
        first = (delta,) if delta < 0x40 else (delta & 0x3F | 0x40, delta >> 6)
        if length < 0x80:
            return bytes((1, 5, *first, tf, length))
        return bytes((1, 9, *first, tf, length & 0x7F, length >> 7))
    made = bytearray()
    write_run(made, [delta], [tf], [length], 0)
    return bytes(made)


def write_run(
    out: bytearray, ids: Sequence[int], tfs: Sequence[int], lengths: Sequence[int], base: int
) -> None:
    """Inline postings (ids >= base, increasing)."""
    if len(ids) == 1:  # most terms of a small segment: one document each
        tf, length = tfs[0], lengths[0]
        if tf > 0xFFFF or length > 0xFFFF:
            raise ValueError("term frequencies and lengths are at most 65,535")
        at = len(out)
        out += b"\x01\x00"
        varint(out, ids[0] - base)
        wt = _small(out, tf)
        wl = _small(out, length)
        out[at + 1] = wt | wl << 2
        return
    deltas = list(map(sub, islice(ids, 1, None), ids))
    wd = digits(max(deltas, default=0))
    most_tf, longest = max(tfs), max(lengths)
    wt = digits(most_tf)
    wl = digits(longest)
    if most_tf > 0xFFFF or longest > 0xFFFF:
        raise ValueError("term frequencies and lengths are at most 65,535")
    out.append(wd)
    out.append(wt | wl << 2)
    varint(out, ids[0] - base)
    fixed(out, deltas, wd)
    fixed(out, tfs, wt)
    fixed(out, lengths, wl)
