"""Plain settings the planner and flusher take: no YAML types, so they are built by hand in
tests and by the manager from a memory resource."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

__all__ = ["DEFAULT_SUMMARY_TOKENS", "BatchSizes", "Compression", "FlushSettings", "summary_budget"]

#: A summary's budget when nothing sizes it: a memory without a token budget.
DEFAULT_SUMMARY_TOKENS = 500


@dataclass(frozen=True, slots=True)
class BatchSizes:
    normal: int
    warning: int
    critical: int


@dataclass(frozen=True, slots=True)
class Compression:
    """Loom's pressure tiers: how many messages L1 keeps and how much each tier summarises."""

    max_l1_messages: int
    min_l1_messages: int
    warning_threshold_percent: int
    critical_threshold_percent: int
    batch_sizes: BatchSizes


@dataclass(frozen=True, slots=True)
class FlushSettings:
    """What a flush aims for."""

    max_tokens: int
    summarize_threshold: float = 0.8
    summarize_oldest_percent: int = 30
    summary_tokens: int = DEFAULT_SUMMARY_TOKENS
    strategy: Literal["hybrid_summary", "fifo"] = "hybrid_summary"
    priority_limits: Mapping[int, int] = field(default_factory=dict)
    compression: Compression | None = None
    #: A flush reads at most this many of the oldest messages, so its snapshot and commit stay
    #: bounded however far a flooded memory has grown; the totals come from meta.
    snapshot_limit: int = 256
    #: How long a summarizer may take before the flush falls back to the rule-based summary.
    summarizer_deadline: timedelta = timedelta(seconds=60)
    #: Live messages the memory may keep (``max_messages``); None: no count limit. Summaries
    #: live apart from the messages and do not count.
    max_messages: int | None = None

    @property
    def trigger_tokens(self) -> int:
        """Context size at which a flush is due."""
        return int(self.max_tokens * self.summarize_threshold)

    @property
    def trigger_messages(self) -> int | None:
        """Live messages at which a flush is due: ``summarize_threshold`` of ``max_messages``
        (at least 1), or None without a count limit."""
        if self.max_messages is None:
            return None
        return max(1, int(self.max_messages * self.summarize_threshold))

    def over_count(self, count: int) -> bool:
        """Whether ``count`` live messages exceed ``max_messages``."""
        return self.max_messages is not None and count > self.max_messages


def summary_budget(max_tokens: int | None, share: float, wanted: int | None = None) -> int:
    """The tokens a summary may take in a memory of ``max_tokens``: ``wanted`` (when given)
    but never more than ``share`` of the budget nor half of it, since ``context()`` takes a
    summary whole or not at all and would never show a larger one; ``share`` of the budget
    when nothing is wanted. Without a token budget: ``wanted``, or 500."""
    if max_tokens is None:
        return wanted or DEFAULT_SUMMARY_TOKENS
    room = max(1, min(max_tokens // 2, int(max_tokens * share)))
    return room if wanted is None else min(wanted, room)
