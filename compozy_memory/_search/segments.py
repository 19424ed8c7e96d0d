"""The search index's segments: immutable, packed, built and merged by clients.

Redis only stores a segment's bytes; every per-posting operation (analysis, encoding, merging,
scoring) runs on the clients, which scale with the fleet, as Lucene's and tantivy's writers do.
A memory's index is a list of segments (``lua/search/lib/segments.lua`` keeps the list in the
``ix:s`` hash beside the segments' fields): each holds the postings of a batch of documents,
or, for a *negative* segment, those of documents removed since (the archive's cap dropped them,
a flush folded a summary). A term's document frequency is the sum over the positive segments
less the negative ones; a merge adds postings with their signs, so a document and its removal
cancel out and leave the merged segment (deletes are tombstones that merges purge).

A segment of generation ``g`` is stored as fields of ``ix:s``:

``g.k``  bucket ``k`` (``0 <= k < buckets``) of its dictionary: the terms whose
         :func:`bucket_of` is ``k``, with their document frequencies and, for short posting
         lists, the postings themselves (a bucket nobody's term falls in is not stored)
``g:j``  postings block ``j`` (``0 <= j < blocks``): :data:`BLOCK` postings of one long list

So a search reads, per segment and query term, one bucket of about :data:`BUCKET_TERMS`
terms, and the blocks of long lists only where it needs them; every field's name follows from
the list entry (generation, buckets, blocks), so a segment is read, merged or deleted without
listing the hash.

Every byte is valid UTF-8 (ASCII but for the terms), so a field comes back whole through a
client that decodes replies as text. Numbers are written in 7-bit digits, least significant
first: *fixed* numbers take ``w`` digits each (``w`` per run), *varints* 6 bits a byte with
0x40 set on every byte but the last. A bucket::

    version (1 byte) | w: digits of each entry number (1 byte) | varint: bytes of the terms
    terms, sorted, separated by b"\\n"
    per term: df, end of its data (fixed, w digits each)
    per term: its data (inline postings, or a reference to its blocks)

A term's data is either its postings (``df <= INLINE``)::

    digits of the id deltas (1..8) | digits of tfs + 4 x digits of lengths (1..3 each)
    varint: first id - the segment's first id
    df - 1 id deltas | df term frequencies | df document lengths      (fixed)

or a reference to ``ceil(df / BLOCK)`` blocks (``df > INLINE``)::

    0x7F | varint: first block | per block: varint, its last id - the previous block's last
                                 (the first: - the segment's first id)

and a block is inline postings of up to :data:`BLOCK` documents. Ids are document (message)
ids, so postings from several segments merge by id.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, pairwise
from operator import add, attrgetter, itemgetter

from compozy_memory.errors import CorruptDataError

__all__ = [
    "BLOCK",
    "BUCKET_TERMS",
    "INLINE",
    "Bucket",
    "Encoded",
    "Postings",
    "Segment",
    "SegmentEntry",
    "TermEntry",
    "block_field",
    "bucket_field",
    "bucket_of",
    "build",
    "decode_block",
    "decode_bucket",
    "encode",
]

#: Terms one bucket holds on average (a segment has ``ceil(terms / BUCKET_TERMS)`` buckets).
BUCKET_TERMS = 32
#: Postings of one block; a list longer than :data:`INLINE` is split into blocks.
BLOCK = 128
INLINE = 128

_VERSION = 1
_BLOCKS = 0x7F
_TIMES_128 = (128).__mul__
_LOW_7 = 0x7F
#: The most digits of a fixed number: ids are below 2 ** 53.
_MOST_DIGITS = 8


@dataclass(slots=True)
class Postings:
    """One term's postings in one segment, by increasing id: document ids, term frequencies,
    document lengths."""

    ids: list[int] = field(default_factory=list)
    tfs: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(slots=True)
class Segment:
    """A segment in memory (being built or merged): ``sign`` 1, or -1 for removed documents'
    postings; ``docs``: its documents' ids."""

    sign: int
    terms: dict[str, Postings]
    docs: list[int]


@dataclass(frozen=True, slots=True)
class SegmentEntry:
    """A segment as the list names it: enough to name its fields and plan merges."""

    gen: int
    sign: int
    docs: int
    first: int
    last: int
    buckets: int
    blocks: int
    size: int

    def fields(self) -> list[str]:
        """The names of every field the segment may have (empty buckets are not stored)."""
        return [bucket_field(self.gen, k) for k in range(self.buckets)] + [
            block_field(self.gen, j) for j in range(self.blocks)
        ]


@dataclass(frozen=True, slots=True)
class Encoded:
    """A segment's fields, named after its generation-to-be: ``b<k>`` and ``p<j>`` suffixes
    (the script that stores it prefixes the generation it allocates)."""

    sign: int
    docs: int
    first: int
    last: int
    buckets: int
    blocks: int
    fields: dict[str, bytes]

    @property
    def size(self) -> int:
        return sum(len(v) for v in self.fields.values())


@dataclass(frozen=True, slots=True)
class TermEntry:
    """A term in a bucket: its document frequency in the segment and either its postings
    (``postings``) or where its blocks are (``first_block`` and each block's last id)."""

    df: int
    postings: Postings | None
    first_block: int = 0
    block_last: tuple[int, ...] = ()


def bucket_of(term: str, buckets: int) -> int:
    """The bucket a term falls in, of ``buckets``: CRC-32 of its UTF-8, modulo."""
    return zlib.crc32(term.encode()) % buckets


def bucket_field(gen: int, k: int) -> str:
    return f"{gen}.{k}"


def block_field(gen: int, j: int) -> str:
    return f"{gen}:{j}"


# -- building ---------------------------------------------------------------------------------


def build(documents: Iterable[tuple[int, Mapping[str, int], int]], *, sign: int = 1) -> Segment:
    """A segment of ``documents``: (id, term -> tf, length), ids unique."""
    rows = sorted(documents, key=itemgetter(0))
    terms: dict[str, Postings] = {}
    docs: list[int] = []
    get = terms.get
    for doc_id, tf, length in rows:
        if docs and docs[-1] == doc_id:
            raise ValueError(f"document {doc_id} is given twice")
        docs.append(doc_id)
        for term, count in tf.items():
            p = get(term)
            if p is None:  # most terms of a step: one document each, made in one call
                terms[term] = Postings([doc_id], [count], [length])
            else:
                p.ids.append(doc_id)
                p.tfs.append(count)
                p.lengths.append(length)
    return Segment(sign, terms, docs)


def _varint(out: bytearray, n: int) -> None:
    while n >= 0x40:
        out.append((n & 0x3F) | 0x40)
        n >>= 6
    out.append(n)


def _digits(largest: int) -> int:
    """Digits of 7 bits a fixed number needs to hold ``largest``."""
    return max(1, (largest.bit_length() + 6) // 7)


def _fixed(out: bytearray, values: Sequence[int], width: int) -> None:
    if width == 1:
        out += bytes(values)
        return
    n = len(values)
    if n < 16:
        for v in values:
            for _ in range(width):
                out.append(v & 0x7F)
                v >>= 7
        return
    # Digit i of every value in one C-level pass (shift, mask), then interleaved: no Python
    # loop per value (a bucket's entries and a block's postings are hundreds of numbers).
    at = len(out)
    out += bytes(n * width)
    for i in range(width):
        shifted = map((7 * i).__rrshift__, values) if i else values
        out[at + i : at + n * width : width] = bytes(map(_LOW_7.__and__, shifted))


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


def _run(
    out: bytearray, ids: Sequence[int], tfs: Sequence[int], lengths: Sequence[int], base: int
) -> None:
    """Inline postings (ids >= base, increasing)."""
    if len(ids) == 1:  # most terms of a small segment: one document each
        tf, length = tfs[0], lengths[0]
        if tf > 0xFFFF or length > 0xFFFF:
            raise ValueError("term frequencies and lengths are at most 65,535")
        at = len(out)
        out += b"\x01\x00"
        _varint(out, ids[0] - base)
        wt = _small(out, tf)
        wl = _small(out, length)
        out[at + 1] = wt | wl << 2
        return
    deltas = [b - a for a, b in pairwise(ids)]
    wd = _digits(max(deltas, default=0))
    wt = _digits(max(tfs))
    wl = _digits(max(lengths))
    if max(tfs) > 0xFFFF or max(lengths) > 0xFFFF:
        raise ValueError("term frequencies and lengths are at most 65,535")
    out.append(wd)
    out.append(wt | wl << 2)
    _varint(out, ids[0] - base)
    _fixed(out, deltas, wd)
    _fixed(out, tfs, wt)
    _fixed(out, lengths, wl)


def encode(segment: Segment) -> Encoded:
    """A segment's fields (``b<k>`` buckets, ``p<j>`` blocks), ready to store."""
    if not segment.docs:
        raise ValueError("a segment holds at least one document")
    base = segment.docs[0]
    names = sorted(segment.terms)
    n_buckets = max(1, math.ceil(len(names) / BUCKET_TERMS))
    grouped: dict[int, list[tuple[str, bytes]]] = {}
    crc32 = zlib.crc32
    for term in names:
        raw = term.encode()
        if b"\n" in raw or not raw:
            raise ValueError(f"an index term is not empty and holds no newline: {term!r}")
        k = crc32(raw) % n_buckets
        group = grouped.get(k)
        if group is None:
            grouped[k] = [(term, raw)]
        else:
            group.append((term, raw))
    fields: dict[str, bytes] = {}
    # A one-document list's bytes follow from (id, tf, length) alone, and a document's terms
    # share its id and length and mostly a tf of 1: made once, then copied.
    singles: dict[tuple[int, int, int], bytes] = {}
    terms = segment.terms

    def data_of(p: Postings) -> bytes:
        ids = p.ids
        df = len(ids)
        if df == 1:
            key = (ids[0], p.tfs[0], p.lengths[0])
            run = singles.get(key)
            if run is None:
                made = bytearray()
                _run(made, ids, p.tfs, p.lengths, base)
                run = singles[key] = bytes(made)
            return run
        made = bytearray()
        if df <= INLINE:
            _run(made, ids, p.tfs, p.lengths, base)
            return bytes(made)
        made.append(_BLOCKS)
        _varint(made, len(fields))  # the first block's number: blocks are the only fields yet
        previous = base
        for at in range(0, df, BLOCK):
            block = bytearray()
            stop = at + BLOCK
            _run(block, ids[at:stop], p.tfs[at:stop], p.lengths[at:stop], base)
            fields[f"p{len(fields)}"] = bytes(block)
            last = ids[min(stop, df) - 1]
            _varint(made, last - previous)
            previous = last
        return bytes(made)

    buckets: dict[str, bytes] = {}
    for k, bucket_terms in sorted(grouped.items()):
        postings = [terms[term] for term, _ in bucket_terms]
        runs = [data_of(p) for p in postings]
        entries = [0] * (2 * len(runs))
        entries[0::2] = map(len, map(attrgetter("ids"), postings))
        entries[1::2] = accumulate(map(len, runs))
        text = b"\n".join([raw for _, raw in bucket_terms])
        width = _digits(max(entries))
        out = bytearray((_VERSION, width))
        _varint(out, len(text))
        out += text
        _fixed(out, entries, width)
        out += b"".join(runs)
        buckets[f"b{k}"] = bytes(out)
    n_blocks = len(fields)
    fields.update(buckets)
    return Encoded(
        segment.sign, len(segment.docs), base, segment.docs[-1], n_buckets, n_blocks, fields
    )


# -- reading ----------------------------------------------------------------------------------


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
    if end > len(buf) or not 1 <= width <= _MOST_DIGITS:
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
        if len(buf) < 3 or buf[0] != _VERSION:
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
        if buf[0] != _BLOCKS:
            return TermEntry(df, _decode_run(buf, 0, df, self._base))
        first, at = _read_varint(buf, 1)
        lasts: list[int] = []
        last = self._base
        for _ in range(math.ceil(df / BLOCK)):
            delta, at = _read_varint(buf, at)
            last += delta
            lasts.append(last)
        return TermEntry(df, None, first, tuple(lasts))

    def entries(self) -> Iterator[tuple[str, TermEntry]]:
        """Every term in order, as :meth:`get` finds it: a merge reads whole buckets, so the
        usual entry (one document, one-byte id delta, tf and length of one digit or a length
        of two) is read here in place; any other goes through :meth:`_entry`."""
        try:
            names = b"\n".join(self._terms).decode().split("\n") if self._terms else []
        except UnicodeDecodeError:
            names = [_term(t) for t in self._terms]  # raises, naming the term
        buf, base, data, entries = self._buf, self._base, self._data, self._entries
        start = data
        for i, name in enumerate(names):
            stop = data + entries[2 * i + 1]
            size = stop - start
            if (
                entries[2 * i] == 1
                and size in (5, 6)
                and stop <= len(buf)
                and buf[start] != _BLOCKS
                and buf[start + 1] == (5 if size == 5 else 9)
                and buf[start + 2] < 0x40
            ):
                length = buf[start + 4] if size == 5 else buf[start + 4] | buf[start + 5] << 7
                yield (
                    name,
                    TermEntry(1, Postings([base + buf[start + 2]], [buf[start + 3]], [length])),
                )
            else:
                yield name, self._entry(i)
            start = stop


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
