"""What keeping a message searchable costs the client's CPU (printed only; no server).

The index is built and merged by clients (``compozy_memory._search``): a step analyses new
messages and encodes them as a segment; merges later read segments back, join them and encode
the result, in tiers (``_search/merging.py``), so each message is rewritten a few times in its
life. This prints, per message, in CPU microseconds of this process (best of ``--repeat``):

1. analysis alone (what any client-side search must do: tokenise, stem), the baseline;
2. a step's segment (analysis, build, encode) at 1, 10 and 100 messages a step;
3. a tier merge of 8 segments (decode, merge, encode), per message it rewrites;
4. the merge policy's rewrites per message over a memory's life (a simulation of
   ``plan_merge``) for 1, 3 and 10 messages a step, and what they cost at (3)'s rate.

Two corpora: the support-chat messages of ``bench_append`` (~300 tokens, a small vocabulary)
and the turns of the hard recall benchmark's tuning split (short, varied chat turns).

Each pass meets text as a running writer does: the analyser memoises each chunk of text it
has seen, so before every pass its memo holds only a warm-up corpus of the same kind (the
words, not the measured texts' own numbers and names; a repeat over the same texts would find
those too, and flatter the memo).

Run: ``python -m benchmarks.bench_index_cpu [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from benchmarks.bench_append import texts
from benchmarks.hard_recall_data import generate
from compozy_memory._search.analysis import _state, analyze
from compozy_memory._search.merging import merged_segment, plan_merge, step_segments
from compozy_memory._search.segments import Encoded, SegmentEntry, block_field, bucket_field

Item = tuple[str, int, dict[str, Any]]
SMALL, LARGE = 2_000, 100_000


def corpora() -> dict[str, list[dict[str, Any]]]:
    chat = [
        {"role": "user" if i % 2 else "assistant", "content": t, "ts": 1_764_000_000_000 + i}
        for i, t in enumerate(texts(random.Random(7), 2_000))
    ]
    turns = _turns()
    return {"support chat, ~300 tokens": chat, "hard recall turns": turns[:4_000]}


def warm_ups() -> dict[str, list[str]]:
    """Texts of the same kinds as :func:`corpora`'s, none of them the same: what the
    analyser has seen before each measured pass (see :func:`best`)."""
    return {
        "support chat, ~300 tokens": texts(random.Random(8), 2_000),
        "hard recall turns": [str(m["content"]) for m in _turns()[4_000:8_000]],
    }


def _turns() -> list[dict[str, Any]]:
    return [dict(m) for c in generate("tuning", 20) for m in c.messages]


def best(repeat: int, work: Callable[[], object], seen: list[str] | None = None) -> float:
    """The least CPU of ``repeat`` passes of ``work``. The analyser memoises the terms of each
    chunk of text it has seen (per thread): before each pass that memo is emptied and filled
    with ``seen`` alone, so a pass meets the words of its kind of text as a running writer
    does, but not the measured texts' own numbers and names (a repeat would find them all,
    and flatter whatever the memo serves)."""
    times = []
    for _ in range(repeat):
        if seen is not None:
            _state.chunks.clear()
            _state.stems.clear()
            for text in seen:
                analyze(text)
        started = time.process_time()
        work()
        times.append(time.process_time() - started)
    return min(times)


def items(messages: list[dict[str, Any]]) -> list[Item]:
    return [("m", i + 1, {**m, "id": i + 1}) for i, m in enumerate(messages)]


def stored(gen: int, enc: Encoded) -> tuple[SegmentEntry, dict[str, bytes]]:
    entry = SegmentEntry(gen, enc.sign, enc.docs, enc.first, enc.last, enc.buckets, enc.blocks, 0)
    values = {}
    for name, value in enc.fields.items():
        k = int(name[1:])
        values[bucket_field(gen, k) if name[0] == "b" else block_field(gen, k)] = value
    return entry, values


def analysed(indexed: list[Item]) -> None:
    for _, _, m in indexed:
        analyze(str(m["content"]))


def stepped(batches: list[list[Item]]) -> None:
    for batch in batches:
        step_segments(batch, [])


def segment(batch: list[Item]) -> Encoded:
    built = step_segments(batch, [])[1]
    assert built is not None
    return built


Group = tuple[list[SegmentEntry], dict[str, bytes | None]]


def merged(groups: list[Group]) -> None:
    for entries, values in groups:
        merged_segment(entries, values)


def rewrites(step: int, total: int) -> tuple[float, float]:
    """Messages rewritten by merges per message appended, ``step`` messages a step, and the
    segments a search reads on average (after each step's merges)."""
    segments: list[SegmentEntry] = []
    gen = rewritten = listed = steps = 0
    first = 1
    while first <= total:
        n = min(step, total - first + 1)
        gen += 1
        segments.append(SegmentEntry(gen, 1, n, first, first + n - 1, 1, 0, n))
        first += n
        for _ in range(4):  # _MERGES_PER_CATCH_UP
            plan = plan_merge(segments)
            if not plan:
                break
            docs = sum(s.docs for s in plan)
            rewritten += docs
            gen += 1
            lo, hi = min(s.first for s in plan), max(s.last for s in plan)
            segments = [s for s in segments if s not in plan]
            segments.append(SegmentEntry(gen, 1, docs, lo, hi, 1, 0, docs))
        listed += len(segments)
        steps += 1
    return rewritten / total, listed / steps


def main(args: argparse.Namespace) -> None:
    print(f"client CPU µs a message, best of {args.repeat}\n")
    print(
        "| corpus | analysis alone | step of 1 | step of 10 | step of 100 "
        "| merge 8x10 | merge 8x100 |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    merge_rate: dict[str, float] = {}
    seen = warm_ups()
    for name, messages in corpora().items():
        indexed = items(messages)
        n = len(indexed)
        row = [best(args.repeat, partial(analysed, indexed), seen[name])]
        for step in (1, 10, 100):
            batches = [indexed[i : i + step] for i in range(0, n, step)]
            row.append(best(args.repeat, partial(stepped, batches), seen[name]))
        for size in (10, 100):
            groups: list[Group] = []
            for at in range(0, n - 8 * size + 1, 8 * size):
                parts = [
                    stored(j + 1, segment(indexed[at + j * size : at + (j + 1) * size]))
                    for j in range(8)
                ]
                values: dict[str, bytes | None] = {}
                for _, v in parts:
                    values.update(v)
                groups.append(([e for e, _ in parts], values))
            rewritten = len(groups) * 8 * size
            row.append(best(args.repeat, partial(merged, groups)) / rewritten * n)
        merge_rate[name] = row[-1] / n * 1e6
        print(f"| {name} | " + " | ".join(f"{t / n * 1e6:.0f}" for t in row) + " |")
    print(
        f"\n| messages a step | rewrites a message (segments a search reads), {SMALL:,} "
        f"in a memory | {LARGE:,} | merge µs a message over its life ({LARGE:,}), by corpus |"
    )
    print("| ---: | ---: | ---: | --- |")
    for step in (1, 3, 10):
        (small, small_segs), (large, large_segs) = rewrites(step, SMALL), rewrites(step, LARGE)
        life = ", ".join(f"{rate * large:,.0f}" for rate in merge_rate.values())
        print(
            f"| {step} | {small:.1f} ({small_segs:.0f}) | {large:.1f} ({large_segs:.0f}) | {life} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    main(parser.parse_args())
