"""A summary's ``covers``: at most MAX_COVER_RANGES ranges, holding every id it replaced and,
while it can, no live message (pure functions; the flushes on real engines are in
integration/test_flush_bounded.py)."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from compozy_memory import Message
from compozy_memory._flush.coverage import MAX_COVER_RANGES, bounded_ranges
from compozy_memory._model.messages import id_ranges

ids = st.sets(st.integers(1, 2_000), min_size=1, max_size=400)


@given(ids, st.sets(st.integers(1, 2_000), max_size=40))
def test_bounded_ranges_hold_every_id_and_avoid_live_ones_while_they_can(
    covered: set[int], live: set[int]
) -> None:
    live -= covered
    exact = id_ranges(covered)
    bounded = bounded_ranges(exact, live)
    assert len(bounded) <= MAX_COVER_RANGES
    assert bounded == id_ranges(bounded)  # sorted, disjoint, not adjacent
    spans = [range(a, b + 1) for a, b in bounded]
    assert all(any(i in r for r in spans) for i in covered)
    live_gaps = sum(
        1 for (_, low), (high, _) in pairwise(exact)
        if any(low < i < high for i in live)
    )  # fmt: skip
    if live_gaps < MAX_COVER_RANGES:
        assert not any(i in r for r in spans for i in live)
    if len(exact) <= MAX_COVER_RANGES:
        assert bounded == exact


def test_the_narrowest_gaps_without_live_messages_are_bridged_first() -> None:
    exact = [(1, 1), (3, 3), (10, 10), (12, 12)]  # gaps: {2}, 4..9, {11}
    assert bounded_ranges(exact, [], cap=3) == [(1, 3), (10, 10), (12, 12)]
    assert bounded_ranges(exact, [2], cap=3) == [(1, 1), (3, 3), (10, 12)]
    assert bounded_ranges(exact, [2, 11], cap=3) == [(1, 1), (3, 10), (12, 12)]
    # Ids above what the flush saw may be live: those gaps are bridged last.
    assert bounded_ranges(exact, [], open_above=10, cap=3) == [(1, 3), (10, 10), (12, 12)]
    assert bounded_ranges(exact, [2], open_above=9, cap=3) == [(1, 1), (3, 10), (12, 12)]


def test_a_merged_summary_counts_what_its_metadata_says() -> None:
    summary = Message.model_validate(
        {
            "role": "system",
            "type": "summary",
            "content": "s",
            "covers": [(1, 100)],
            "metadata": {"covered": 90},
        }
    )
    assert summary.covered_count == 90
    plain = summary.model_copy(update={"metadata": None})
    assert plain.covered_count == 100
