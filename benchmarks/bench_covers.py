"""How large a rolling summary's record of what it covers grows: 200,000 messages flushed.

One memory on an embedded Valkey gets rounds of messages (a pinned one now and then, which
stays live between the ranges the summary covers), and is flushed after each round with the
extractive summarizer, as a flusher would. Printed every 20,000 messages: flushes so far,
the summaries (they fold into one past twice ``summary_tokens``), their ``covers`` ranges (in
all, and the most one lists), the JSON size of those ranges against the size exact ranges
would take (one per gap, as summaries recorded before), and the count the summaries say they
stand for (``metadata.covered`` where ranges were merged) against the messages summarised.

Run: ``python -m benchmarks.bench_covers [--messages 200000] [--round 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid

from prometheus_client import CollectorRegistry

from compozy_memory import (
    ExtractiveSummarizer,
    Flusher,
    FlushSettings,
    HeuristicCounter,
    MemoryInstance,
    connect,
)
from compozy_memory._metrics import FlushMetrics
from compozy_memory._model.messages import id_ranges
from compozy_memory.embedded import start_server

COUNTER = HeuristicCounter()
PINNED_EVERY = 25  # rounds


async def run(messages: int, per_round: int, url: str) -> None:
    client = connect(url)
    mem = MemoryInstance.open(client, project="bench-covers", key=uuid.uuid4().hex, counter=COUNTER)
    flusher = Flusher(
        mem.gateway,
        FlushSettings(max_tokens=4 * per_round * 10, summary_tokens=300),
        ExtractiveSummarizer(COUNTER),
        COUNTER,
        metrics=FlushMetrics(CollectorRegistry()),
        background=False,
    )
    summarised: list[int] = []
    flushes = sent = 0
    started = time.perf_counter()
    print(f"{'messages':>9} {'flushes':>8} {'summaries':>9} {'ranges':>7} {'max':>4} "
          f"{'covers B':>9} {'exact B':>8} {'counted':>9} {'summarised':>10} {'s':>6}")  # fmt: skip
    while sent < messages:
        batch: list[dict[str, object]] = [
            {"role": "user", "content": f"turn {sent + i}: order #{sent + i} shipped", "tokens": 10}
            for i in range(per_round)
        ]
        if (sent // per_round) % PINNED_EVERY == 0:
            batch[1] = {"role": "user", "content": f"keep {sent}", "tokens": 5, "priority": 0}
        await mem.append_many(batch)
        sent += per_round
        result = await flusher.flush()
        flushes += 1
        assert result.rounds <= 1, "a flush of several rounds: summarised would miss some"
        if result.plan is not None:
            summarised += result.plan.summarize_ids
        if sent % 20_000 == 0 or sent >= messages:
            summaries = (await mem.snapshot()).summaries
            covers = [s.covers or [] for s in summaries]
            size = sum(len(json.dumps(c, separators=(",", ":"))) for c in covers)
            # What exact ranges, one per gap, would take (what summaries recorded before).
            exact = len(json.dumps(id_ranges(summarised), separators=(",", ":")))
            counted = sum(s.covered_count for s in summaries)
            took = time.perf_counter() - started
            print(f"{sent:>9,} {flushes:>8,} {len(summaries):>9} {sum(map(len, covers)):>7} "
                  f"{max(map(len, covers), default=0):>4} {size:>9,} {exact:>8,} {counted:>9,} "
                  f"{len(summarised):>10,} {took:>6.1f}")  # fmt: skip
    await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--round", type=int, default=200, help="messages between flushes")
    args = parser.parse_args()
    with start_server() as server:
        asyncio.run(run(args.messages, args.round, server.url))


if __name__ == "__main__":
    main()
