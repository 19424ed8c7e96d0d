"""Segment fields a tenant wrote raw (``HSET`` on its own ``ix:s``), decoded by the clients
that search and merge them: every one is refused with CorruptDataError, in time linear in its
bytes (compozy_memory._search.segments, compozy_memory._search.merging)."""

from __future__ import annotations

import gc
import time
from collections import Counter

import pytest

from compozy_memory._search.merging import decode_segment, merged_segment
from compozy_memory._search.runs import fixed, varint
from compozy_memory._search.segments import SegmentEntry, build, encode
from compozy_memory.errors import CorruptDataError


def _bucket(terms: list[bytes], runs: list[bytes]) -> bytes:
    """A bucket of ``terms``, each with its inline postings ``runs`` (as encode() lays them
    out), df 1 each."""
    text = b"\n".join(terms)
    data = bytearray()
    entries: list[int] = []
    for run in runs:
        data += run
        entries += (1, len(data))
    width = 3
    out = bytearray((1, width))
    varint(out, len(text))
    out += text
    fixed(out, entries, width)
    return bytes(out + data)


#: One document (id: the segment's first), tf 1, length 1: wd 1, tf and length one digit.
ONE = b"\x01\x05\x00\x01\x01"


def _entry(size: int, gen: int = 1) -> SegmentEntry:
    return SegmentEntry(gen, 1, 1, 1, 1, 1, 0, size)


def test_a_term_that_is_not_utf8_is_a_typed_error() -> None:
    raw = _bucket([b"ok", b"\xff\xfe"], [ONE, ONE])
    with pytest.raises(CorruptDataError):
        decode_segment(_entry(len(raw)), {"1.0": raw})


@pytest.mark.parametrize(
    ("terms", "runs"),
    [
        ([b"big"], [b"\x01\x07\x00" + bytes((0x7F, 0x7F, 0x7F, 1))]),  # tf 2 ** 21 - 1
        ([b"", b"ok"], [ONE, ONE]),  # an empty term
    ],
    ids=["tf-past-65535", "empty-term"],
)
def test_a_merge_of_values_no_segment_holds_is_a_typed_error(
    terms: list[bytes], runs: list[bytes]
) -> None:
    raw = _bucket(terms, runs)
    other = encode(build([(10, Counter({"zz": 1}), 1)]))
    values: dict[str, bytes | None] = {"1.0": raw, "2.0": other.fields["b0"]}
    with pytest.raises(CorruptDataError):
        merged_segment([_entry(len(raw)), SegmentEntry(2, 1, 1, 10, 10, 1, 0, 9)], values)


def test_a_bucket_of_many_terms_decodes_in_time_linear_in_its_bytes() -> None:
    def seconds(n: int) -> float:
        raw = _bucket([b"t%d" % i for i in range(n)], [ONE] * n)
        # The decode's own work: CPython's collector, run as the decode allocates, adds time
        # that grows with everything alive, not with what this reads.
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            segment = decode_segment(_entry(len(raw)), {"1.0": raw})
            took = time.perf_counter() - start
        finally:
            gc.enable()
        assert len(segment.terms) == n
        return took

    small = min(seconds(5_000) for _ in range(3))
    large = min(seconds(40_000) for _ in range(2))
    # Linear: about 8 times; quadratic: about 64 (measured 30 before the fix).
    assert large < 16 * small, (small, large)
