"""What a summary records about the messages it replaced: a bounded list of id ranges.

A rolling summary folds the previous one in at every flush, and every flush leaves a gap in
the ids it covers (the previous summary's own id, a pinned message kept live, an evicted
tool result), so exact ranges would grow by one or more a flush: 16 KB of ``covers`` after
200,000 messages. A summary keeps at most :data:`MAX_COVER_RANGES` ranges instead: past that,
neighbouring ranges merge across the narrowest gaps, those holding no live message first.

So ``covers`` is a bound, not a list: every id the summary replaced lies in one of its ranges,
and no live message does while fewer than :data:`MAX_COVER_RANGES` gaps hold one; a range
may also span ids that were never messages of its own (earlier summaries, evicted messages).
When the ranges were merged, ``metadata.covered`` holds the exact number of messages the
summary stands for (:attr:`Message.covered_count` reads it).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence

from compozy_memory._flush.material import covered_count
from compozy_memory._model.messages import Message, id_ranges
from compozy_memory._model.results import FlushPlan, Snapshot

__all__ = ["MAX_COVER_RANGES", "bounded_ranges", "summary_coverage"]

#: The most ``[first, last]`` ranges one summary lists (about 400 bytes of JSON at most).
MAX_COVER_RANGES = 16


def bounded_ranges(
    ranges: Sequence[tuple[int, int]],
    live: Iterable[int],
    *,
    open_above: int | None = None,
    cap: int = MAX_COVER_RANGES,
) -> list[tuple[int, int]]:
    """``ranges`` (sorted, disjoint) merged into at most ``cap``: across the narrowest gaps
    holding none of the ``live`` ids (nor any id above ``open_above``, when more live
    messages may be there unseen) first, then across the narrowest others."""
    if len(ranges) <= cap:
        return list(ranges)
    kept = sorted(live)

    def holds_live(gap: int) -> bool:
        low, high = ranges[gap][1], ranges[gap + 1][0]  # the gap is low+1 .. high-1
        if open_above is not None and high - 1 > open_above:
            return True
        at = bisect_right(kept, low)
        return at < len(kept) and kept[at] < high

    gaps = sorted(
        range(len(ranges) - 1),
        key=lambda g: (holds_live(g), ranges[g + 1][0] - ranges[g][1], g),
    )
    bridged = set(gaps[: len(ranges) - cap])
    merged: list[tuple[int, int]] = [ranges[0]]
    for gap in range(len(ranges) - 1):
        following = ranges[gap + 1]
        if gap in bridged:
            merged[-1] = (merged[-1][0], following[1])
        else:
            merged.append(following)
    return merged


def summary_coverage(
    snapshot: Snapshot, plan: FlushPlan, folded: Sequence[Message]
) -> tuple[list[tuple[int, int]], int | None]:
    """The ranges a new summary lists, and the exact count of what it covers when the ranges
    span more ids than that (None when they are exact)."""
    exact = id_ranges([*(r for s in folded for r in s.covers or ()), *plan.summarize_ids])
    count = sum(covered_count(s) for s in folded) + len(plan.summarize_ids)
    removed = set(plan.remove_ids)
    live = [m.id for m in snapshot.messages if m.id is not None and m.id not in removed]
    seen = [m.id for m in snapshot.messages if m.id is not None]
    open_above = None if snapshot.complete or not seen else max(seen)
    ranges = bounded_ranges(exact, live, open_above=open_above)
    spanned = sum(last - first + 1 for first, last in ranges)
    return ranges, (count if spanned != count else None)
