"""What every section of the report shares: the workload, the statistics and the machine."""

from __future__ import annotations

import os
import platform
import random
import statistics
import sys
from dataclasses import dataclass
from typing import Any

# The reviewer's workload: 64 concurrent sessions, 200 appends each, ~300-token messages.
SESSIONS = 64
MESSAGE_TOKENS = 300
WINDOW_TOKENS = 8_000

_TEXT = (
    "the order arrived damaged and the customer asks whether a refund or a replacement is "
    "faster given that the warehouse in Lyon ships on Tuesdays while returns take ten days "
    "so the agent checks the policy quotes the tracking number and offers store credit as "
    "well as a discount code for the next purchase before closing the ticket politely"
)
_VOCABULARY = tuple(_TEXT.split())


def message_text(session: int, seq: int, words: int = 289) -> str:
    """About 300 o200k tokens of English-like text, different for every (session, seq)."""
    pick = random.Random(session * 1_000_003 + seq)
    body = " ".join(pick.choice(_VOCABULARY) for _ in range(words))
    return f"session {session} turn {seq}: {body}"


def turn(session: int, seq: int) -> dict[str, Any]:
    return {"role": "user" if seq % 2 else "assistant", "content": message_text(session, seq)}


@dataclass(frozen=True)
class Settings:
    """How much work each section does: the full run, or ``--quick`` (seconds, a smoke test)."""

    rounds: int
    appends: int  # per session per round
    sessions: int
    read_sizes: tuple[int, ...]
    reads: int  # per size per round
    flush_seconds: float
    bytes_messages: int
    quick: bool

    @classmethod
    def full(cls) -> Settings:
        return cls(3, 200, SESSIONS, (50, 500, 5_000, 50_000), 100, 3.0, 500, False)

    @classmethod
    def smoke(cls) -> Settings:
        return cls(1, 5, 8, (50, 500), 5, 0.3, 50, True)


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], p: float) -> float:
    """The value at fraction ``p`` of the sorted sample (nearest rank)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def machine(redis_version: str) -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.machine(),
        "redis": redis_version,
        "load_average_at_start": [round(x, 2) for x in load],
    }
