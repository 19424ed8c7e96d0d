"""Reading the search index's segments: a stored bucket, decoded lazily (a search looks up a
few terms in it), or whole (a merge); a block of postings. The layout is described in
:mod:`compozy_memory._search.segments`, which writes it; every field may have been written
raw by a tenant, so every read is bounded by the field's bytes and anything a segment never
holds is a :class:`~compozy_memory.errors.CorruptDataError`."""

from __future__ import annotations

import math
from collections.abc import Iterator
from itertools import accumulate
from operator import add

from compozy_memory._search.segments import (
    BLOCK,
    BLOCKS_MARK,
    LAYOUT,
    MOST_DIGITS,
    Postings,
    TermEntry,
)
from compozy_memory.errors import CorruptDataError

__all__ = ["Bucket", "block_postings", "decode_block", "decode_bucket"]

_TIMES_128 = (128).__mul__


def _read_varint(buf: bytes, at: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        try:
            byte = buf[at]
        except IndexError:
            raise CorruptDataError("a varint runs past the end of an index field") from None
        at += 1
        if byte >= 0x80:
            raise CorruptDataError("an index field holds a byte no segment writes")
        n |= (byte & 0x3F) << shift
        if byte < 0x40:
            return n, at
        shift += 6
        if shift > 60:
            raise CorruptDataError("a varint in an index field is too long")


def _read_fixed(buf: bytes, at: int, n: int, width: int) -> tuple[list[int], int]:
    end = at + n * width
    if end > len(buf) or not 1 <= width <= MOST_DIGITS:
        raise CorruptDataError("postings run past the end of an index field")
    chunk = buf[at:end]
    if width == 1:
        return list(chunk), end
    if width == 2:  # the common case past 127 (a length): C-level iteration
        return list(map(add, chunk[0::2], map(_TIMES_128, chunk[1::2]))), end
    values = []
    for i in range(0, len(chunk), width):
        v = 0
        for d in reversed(chunk[i : i + width]):
            v = v << 7 | d
        values.append(v)
    return values, end


def _decode_run(buf: bytes, at: int, n: int, base: int) -> Postings:
    if n <= 0:
        raise CorruptDataError("a posting list is empty")
    if at + 2 > len(buf):
        raise CorruptDataError("postings run past the end of an index field")
    wd, wtl = buf[at], buf[at + 1]
    first, at = _read_varint(buf, at + 2)
    if n == 1 and wtl in (5, 9):  # one document, tf one digit, length one or two: most terms
        if at + (wtl >> 2) + 1 > len(buf):
            raise CorruptDataError("postings run past the end of an index field")
        length = buf[at + 1] if wtl == 5 else buf[at + 1] | buf[at + 2] << 7
        return Postings([base + first], [buf[at]], [length])
    deltas, at = _read_fixed(buf, at, n - 1, wd)
    tfs, at = _read_fixed(buf, at, n, wtl & 3)
    lengths, at = _read_fixed(buf, at, n, wtl >> 2)
    ids = list(accumulate(deltas, initial=base + first))
    return Postings(ids, tfs, lengths)


def decode_block(buf: bytes, n: int, base: int) -> Postings:
    """Block ``buf`` of ``n`` postings of a segment whose first id is ``base``."""
    return _decode_run(buf, 0, n, base)


class Bucket:
    """One stored bucket, decoded lazily: :meth:`get` finds a term without parsing the
    others."""

    __slots__ = ("_base", "_buf", "_data", "_entries", "_terms")

    def __init__(self, buf: bytes, base: int) -> None:
        if len(buf) < 3 or buf[0] != LAYOUT:
            raise CorruptDataError("an index bucket has an unknown layout")
        size, at = _read_varint(buf, 2)
        text = buf[at : at + size]
        if len(text) != size:
            raise CorruptDataError("an index bucket's terms run past its end")
        self._terms = text.split(b"\n") if size else []
        self._entries, self._data = _read_fixed(buf, at + size, 2 * len(self._terms), buf[1])
        self._buf = buf
        self._base = base

    def __len__(self) -> int:
        return len(self._terms)

    def terms(self) -> Iterator[str]:
        return (_term(t) for t in self._terms)

    def get(self, term: str) -> TermEntry | None:
        key = term.encode()
        lo, hi = 0, len(self._terms)
        while lo < hi:  # terms are sorted: bisect (a bucket holds a few dozen)
            mid = (lo + hi) // 2
            if self._terms[mid] < key:
                lo = mid + 1
            else:
                hi = mid
        if lo == len(self._terms) or self._terms[lo] != key:
            return None
        return self._entry(lo)

    def _entry(self, i: int) -> TermEntry:
        df, end = self._entries[2 * i], self._entries[2 * i + 1]
        start = self._data + (self._entries[2 * i - 1] if i else 0)
        stop = self._data + end
        if stop > len(self._buf) or start >= stop or df <= 0:
            raise CorruptDataError("an index bucket's entries do not match its data")
        # The term's data alone (a copy of its bytes, not of the bucket up to it: decoding
        # every term stays linear in the bucket's size).
        buf = self._buf[start:stop]
        if buf[0] != BLOCKS_MARK:
            return TermEntry(df, _decode_run(buf, 0, df, self._base))
        first, at = _read_varint(buf, 1)
        lasts: list[int] = []
        last = self._base
        for _ in range(math.ceil(df / BLOCK)):
            delta, at = _read_varint(buf, at)
            last += delta
            lasts.append(last)
        return TermEntry(df, None, first, tuple(lasts))

    def lists(
        self, seen: dict[tuple[int, bytes], Postings] | None = None
    ) -> Iterator[tuple[str, Postings | TermEntry]]:
        """Every term in order with its postings, or for a list in blocks its entry (which
        names them). A merge reads whole buckets, so the usual list (one document, an id
        delta of one or two bytes, tf and length of one digit or a length of two) is read here
        in place, with no entry made for it; any other goes through :meth:`get`'s path.
        ``seen``: inline lists read before from buckets of the same segment, by df and bytes
        (a document's rare terms, terms said in the same messages): each read again is the
        same postings, not decoded again, so a caller that changes a list in place copies it
        first."""
        try:
            names = b"\n".join(self._terms).decode().split("\n") if self._terms else []
        except UnicodeDecodeError:
            names = [_term(t) for t in self._terms]  # raises, naming the term
        buf, base, data, entries = self._buf, self._base, self._data, self._entries
        start = data
        for i, name in enumerate(names):
            stop = data + entries[2 * i + 1]
            key = None
            if seen is not None and start < stop <= len(buf):
                key = (entries[2 * i], buf[start:stop])
                p = seen.get(key)
                if p is not None:
                    yield name, p
                    start = stop
                    continue
            size = stop - start
            one = (
                _one_document(buf, start, size)
                if entries[2 * i] == 1 and 5 <= size <= 7 and stop <= len(buf)
                else None
            )
            if one is not None:
                delta, tf, length = one
                p = Postings([base + delta], [tf], [length])
            else:
                entry = self._entry(i)  # (which raises on a range no segment writes)
                if entry.postings is None:
                    yield name, entry
                    start = stop
                    continue
                p = entry.postings
            if seen is not None and key is not None:
                seen[key] = p
            yield name, p
            start = stop


def _one_document(buf: bytes, start: int, size: int) -> tuple[int, int, int] | None:
    """(id delta, tf, length) of the usual one-document run of ``size`` bytes at ``start``
    (an id delta of one or two bytes, a tf of one digit, a length of one or two: what
    :func:`~compozy_memory._search.runs.one_run` writes for most terms), read in place; None
    for any other run, which the general path reads."""
    if buf[start] == BLOCKS_MARK:
        return None
    flag = buf[start + 1]  # widths: tf 1 and length 1 (5), or tf 1 and length 2 (9)
    if flag == 5:
        length_bytes = 1
    elif flag == 9:
        length_bytes = 2
    else:
        return None
    delta_bytes = size - 3 - length_bytes
    low = buf[start + 2]
    if delta_bytes == 1 and low < 0x40:
        delta = low
    elif delta_bytes == 2 and 0x40 <= low < 0x80 and buf[start + 3] < 0x40:
        delta = low & 0x3F | buf[start + 3] << 6
    else:
        return None
    at = start + 2 + delta_bytes
    length = buf[at + 1] if length_bytes == 1 else buf[at + 1] | buf[at + 2] << 7
    return delta, buf[at], length


def _term(raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise CorruptDataError(
            f"an index bucket holds a term that is not UTF-8: {raw[:40]!r}"
        ) from None


def decode_bucket(buf: bytes, base: int) -> Bucket:
    """A stored bucket of a segment whose first id is ``base``."""
    return Bucket(buf, base)


def block_postings(entry: TermEntry, i: int) -> int:
    """How many postings block ``i`` of ``entry``'s blocks holds."""
    return min(BLOCK, entry.df - i * BLOCK)
