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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate, pairwise
from operator import attrgetter, itemgetter
from typing import TypeVar

from compozy_memory._search.runs import MOST_DIGITS, digits, fixed, one_run, varint, write_run

__all__ = [
    "BLOCK",
    "BLOCKS_MARK",
    "BUCKET_TERMS",
    "COLUMNS_UPTO",
    "INLINE",
    "LAYOUT",
    "MOST_DIGITS",
    "Encoded",
    "Postings",
    "Segment",
    "SegmentEntry",
    "TermEntry",
    "block_field",
    "bucket_field",
    "bucket_of",
    "build",
    "encode",
    "encode_one",
    "encode_step",
]

#: Terms one bucket holds on average (a segment has ``ceil(terms / BUCKET_TERMS)`` buckets).
BUCKET_TERMS = 32
#: Postings of one block; a list longer than :data:`INLINE` is split into blocks.
BLOCK = 128
INLINE = 128

#: Steps of at most this many documents are encoded by columns (:func:`encode_step`);
#: measured: columns cost 0.75x a build at 2 documents, 0.95x at 10, 1.0x at 16, 1.7x at 48.
COLUMNS_UPTO = 12
#: ... and when they share their terms enough: columns hold a cell per document and term, a
#: build a posting per document's term; past this many cells a posting, a build costs less
#: (short chat turns, whose words are mostly their own).
_SPARSE = 3

#: The layout version a bucket starts with.
LAYOUT = 1
#: A term's data that starts with this byte refers to blocks (no run starts with it).
BLOCKS_MARK = 0x7F
_IDS = attrgetter("ids")
_DF = itemgetter(0)
_RUN = itemgetter(1)
_T = TypeVar("_T")


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


def _utf8(names: list[str]) -> list[bytes]:
    """Each of ``names`` as UTF-8 (in C-level passes), each checked to be no empty term and
    to hold no newline (the byte that separates a bucket's terms)."""
    try:
        raws = list(map(str.encode, names))
        if all(raws) and b"\n" not in b"".join(raws):
            return raws
    except UnicodeEncodeError:
        pass
    for term in names:  # the first term that fails, named (the same error as before the check)
        raw = term.encode()
        if b"\n" in raw or not raw:
            raise ValueError(f"an index term is not empty and holds no newline: {term!r}")
    raise AssertionError("unreachable: a term failed the check above")  # pragma: no cover


def _by_bucket(
    raws: list[bytes], items: list[_T], n_buckets: int
) -> list[tuple[int, list[bytes], list[_T]]]:
    """(bucket, its terms' UTF-8, their items) for each bucket some term falls in, by bucket;
    ``raws`` sorted, so each bucket's terms are too."""
    if n_buckets == 1:
        return [(0, raws, items)] if raws else []
    texts: list[list[bytes]] = [[] for _ in range(n_buckets)]
    values: list[list[_T]] = [[] for _ in range(n_buckets)]
    for raw, k, item in zip(
        raws, map(n_buckets.__rmod__, map(zlib.crc32, raws)), items, strict=True
    ):
        texts[k].append(raw)
        values[k].append(item)
    return [(k, t, v) for k, (t, v) in enumerate(zip(texts, values, strict=True)) if t]


def _bucket(raws: list[bytes], dfs: Iterable[int], runs: list[bytes]) -> bytes:
    entries = [0] * (2 * len(runs))
    entries[0::2] = dfs
    entries[1::2] = accumulate(map(len, runs))
    width = digits(max(entries))
    table = bytearray()
    fixed(table, entries, width)
    return _assembled(raws, width, table, runs)


def _assembled(
    raws: list[bytes], width: int, entries: bytes | bytearray, runs: list[bytes]
) -> bytes:
    text = b"\n".join(raws)
    out = bytearray((LAYOUT, width))
    varint(out, len(text))
    out += text
    out += entries
    out += b"".join(runs)
    return bytes(out)


@lru_cache(maxsize=1024)
def _one_doc_entries(n: int, size: int) -> tuple[int, bytes]:
    """(width, entries) of a bucket of ``n`` lists of one document, ``size`` bytes each: a
    step of one message's, whose runs mostly have one size (its id, length and a tf of one
    digit), so they are the same for every message of as many terms in a bucket."""
    entries = [1] * (2 * n)
    entries[1::2] = range(size, size * n + 1, size)
    width = digits(max(entries))
    table = bytearray()
    fixed(table, entries, width)
    return width, bytes(table)


def encode(segment: Segment) -> Encoded:
    """A segment's fields (``b<k>`` buckets, ``p<j>`` blocks), ready to store."""
    if not segment.docs:
        raise ValueError("a segment holds at least one document")
    base = segment.docs[0]
    terms = segment.terms
    names = sorted(terms)
    raws = _utf8(names)
    n_buckets = max(1, math.ceil(len(names) / BUCKET_TERMS))
    fields: dict[str, bytes] = {}
    # A run's bytes (a short list's, or a block's) follow from its postings alone, and
    # terms said together share them: a document's terms share its id and length and mostly
    # a tf of 1, and in a conversation many terms come in the same messages (a day's date
    # terms, a speaker's name in every one of its turns). Each distinct run is made once.
    runs: dict[object, bytes] = {}

    def run_of(ids: list[int], tfs: list[int], lengths: list[int]) -> bytes:
        key = (tuple(ids), tuple(tfs), tuple(lengths))
        run = runs.get(key)
        if run is None:
            made = bytearray()
            write_run(made, ids, tfs, lengths, base)
            run = runs[key] = bytes(made)
        return run

    def data_of(p: Postings) -> bytes:
        ids = p.ids
        df = len(ids)
        if df == 1:
            one = (ids[0], p.tfs[0], p.lengths[0])
            run = runs.get(one)
            if run is None:
                run = runs[one] = one_run(one[0] - base, one[1], one[2])
            return run
        if df <= INLINE:
            return run_of(ids, p.tfs, p.lengths)
        made = bytearray((BLOCKS_MARK,))
        varint(made, len(fields))  # the first block's number: blocks are the only fields yet
        previous = base
        for at in range(0, df, BLOCK):
            stop = at + BLOCK
            fields[f"p{len(fields)}"] = run_of(ids[at:stop], p.tfs[at:stop], p.lengths[at:stop])
            last = ids[min(stop, df) - 1]
            varint(made, last - previous)
            previous = last
        return bytes(made)

    buckets: dict[str, bytes] = {}
    # Bucket by bucket, term by term: the order blocks are numbered in.
    for k, bucket_raws, postings in _by_bucket(
        raws, list(map(terms.__getitem__, names)), n_buckets
    ):
        data = list(map(data_of, postings))
        buckets[f"b{k}"] = _bucket(bucket_raws, map(len, map(_IDS, postings)), data)
    n_blocks = len(fields)
    fields.update(buckets)
    return Encoded(
        segment.sign, len(segment.docs), base, segment.docs[-1], n_buckets, n_blocks, fields
    )


def encode_one(doc_id: int, tf: Mapping[str, int], length: int, *, sign: int = 1) -> Encoded:
    """``encode(build([(doc_id, tf, length)], sign=sign))`` without building the segment: a
    step of one message, the usual one (a conversation's messages come seconds apart). Every
    list holds one document, so a term's data depends on its tf alone: made once per tf, and
    every term's is picked in C-level passes."""
    names = sorted(tf)
    raws = _utf8(names)
    n_buckets = max(1, math.ceil(len(names) / BUCKET_TERMS))
    by_tf = {count: one_run(0, count, length) for count in dict.fromkeys(tf.values())}
    data = list(map(by_tf.__getitem__, map(tf.__getitem__, names)))
    sizes = set(map(len, by_tf.values()))
    fields: dict[str, bytes] = {}
    for k, bucket_raws, runs in _by_bucket(raws, data, n_buckets):
        if len(sizes) == 1:
            width, entries = _one_doc_entries(len(runs), len(runs[0]))
            fields[f"b{k}"] = _assembled(bucket_raws, width, entries, runs)
        else:
            fields[f"b{k}"] = _bucket(bucket_raws, [1] * len(runs), runs)
    return Encoded(sign, 1, doc_id, doc_id, n_buckets, 0, fields)


def encode_step(
    documents: Iterable[tuple[int, Mapping[str, int], int]], *, sign: int = 1
) -> Encoded:
    """``encode(build(documents, sign=sign))`` without building the segment: a step's own
    segment, of the few documents just analysed (a conversation's last messages).

    No postings object is made. Each term's postings are a *column*: its tf in each document
    or None, looked up in C-level passes; a term's run and document frequency follow from its
    column alone, and within a step few columns are distinct (every document's one-off terms
    share one, terms said in the same messages share theirs), so each distinct column's run is
    made once. The collector sees a list a document, not four containers a term. Columns
    cost a lookup per document and term, so a step of more than :data:`COLUMNS_UPTO`
    documents (a catch-up), or of documents that share few terms, is built and encoded as any
    segment."""
    rows = sorted(documents, key=itemgetter(0))
    if len(rows) <= 1:
        if not rows:
            raise ValueError("a segment holds at least one document")
        return encode_one(*rows[0], sign=sign)
    if len(rows) > COLUMNS_UPTO:
        return encode(build(rows, sign=sign))
    maps = [row[1] for row in rows]
    distinct = set().union(*maps)
    if len(rows) * len(distinct) > _SPARSE * sum(map(len, maps)):
        return encode(build(rows, sign=sign))  # few terms shared: building costs less
    ids = [row[0] for row in rows]
    for a, b in pairwise(ids):
        if a == b:
            raise ValueError(f"document {a} is given twice")
    names = sorted(distinct)
    lengths = [row[2] for row in rows]
    columns = list(zip(*[list(map(m.get, names)) for m in maps], strict=True))
    base = ids[0]
    made: dict[tuple[int | None, ...], tuple[int, bytes]] = {}
    for column in set(columns):
        present = [i for i, tf in enumerate(column) if tf is not None]
        if len(present) == 1:
            i = present[0]
            made[column] = (1, one_run(ids[i] - base, column[i], lengths[i]))
            continue
        run = bytearray()
        write_run(
            run,
            [ids[i] for i in present],
            [column[i] for i in present],
            [lengths[i] for i in present],
            base,
        )
        made[column] = (len(present), bytes(run))
    raws = _utf8(names)
    n_buckets = max(1, math.ceil(len(names) / BUCKET_TERMS))
    fields: dict[str, bytes] = {}
    for k, bucket_raws, items in _by_bucket(raws, list(map(made.__getitem__, columns)), n_buckets):
        fields[f"b{k}"] = _bucket(bucket_raws, map(_DF, items), list(map(_RUN, items)))
    return Encoded(sign, len(rows), base, ids[-1], n_buckets, 0, fields)
