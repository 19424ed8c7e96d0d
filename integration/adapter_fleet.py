"""Running 4 spawned writer processes x 200 appends through one adapter into one session."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from threading import Barrier

WRITERS = 4
APPENDS = 200
#: How long the start line waits for every spawned writer to import its framework and
#: connect: over a minute on a loaded 2-core machine (the line starts the timing, not a
#: deadline of the test).
START_TIMEOUT = 300


@dataclass(frozen=True)
class FleetRun:
    acknowledged: int
    seconds: float  # from the start barrier to the last acknowledgement


async def run_fleet(
    worker: Callable[[str, str, int, int, Barrier], int], url: str, key: str
) -> FleetRun:
    context = multiprocessing.get_context("spawn")
    loop = asyncio.get_running_loop()
    with context.Manager() as manager, ProcessPoolExecutor(WRITERS, mp_context=context) as pool:
        start = manager.Barrier(WRITERS + 1)
        futures = [
            loop.run_in_executor(pool, worker, url, key, w, APPENDS, start) for w in range(WRITERS)
        ]
        await loop.run_in_executor(None, start.wait, START_TIMEOUT)
        began = time.monotonic()
        counts = await asyncio.gather(*futures)
        seconds = time.monotonic() - began
    return FleetRun(sum(counts), seconds)


def tally(pairs: list[tuple[int, int]]) -> tuple[int, int]:
    """(lost, duplicated) among the (writer, seq) pairs read back."""
    expected = {(w, s) for w in range(WRITERS) for s in range(APPENDS)}
    seen = set(pairs)
    return len(expected - seen), len(pairs) - len(seen)


def in_writer_order(pairs: list[tuple[int, int]]) -> bool:
    """Whether each writer's appends are stored in the order it made them."""
    last: dict[int, int] = {}
    for writer, seq in pairs:
        if last.get(writer, -1) >= seq:
            return False
        last[writer] = seq
    return True
