"""Trim and replace: moves to the archive, in bounded steps, each safe to interrupt.

A trim is a run of ``lua/trim.lua`` calls, each moving at most ``MOVE_STEP`` of the oldest
messages that are not pinned, until the limits hold; between two of them the memory is
consistent (what moved is archived, the totals match), so an interrupted trim has simply
trimmed less. A message moves only once indexed: a step that reaches one the index has not
seen stops there, the indexer catches up, and the trim goes on.

A replace swaps the live messages for new ones in one call (``lua/replace.lua``) when they
are at most ``MOVE_STEP``; a longer conversation first has its oldest messages archived in
steps (pinned ones too: a replace removes everything), leaving half a step for the final
swap. If the swap then fails its condition (``if_last_id``, ``if_version``), those steps
stay done: the messages they moved are in the archive, none is lost.

Both are steps (:mod:`compozy_memory._wire.steps`): the async and the sync handle run the
same loop.
"""

from __future__ import annotations

from compozy_memory._model.limits import MOVE_STEP
from compozy_memory._model.messages import EncodedMessage
from compozy_memory._model.results import AppendResult, TrimResult
from compozy_memory._search.runtime.indexer import Indexer
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.steps import Steps
from compozy_memory.errors import (
    ConcurrentChangeError,
    ConflictError,
    IndexLagError,
    StepRequiredError,
)

__all__ = ["MOVE_RETRIES", "replace_live", "trim_oldest"]

#: Times a replace goes back to archiving or indexing before ConcurrentChangeError (writers
#: kept adding live messages faster than it could move them).
MOVE_RETRIES = 8


def trim_oldest(
    gateway: MemoryGateway,
    indexer: Indexer,
    keep_messages: int | None,
    max_tokens: int | None,
    *,
    everything: bool = False,
) -> Steps[TrimResult]:
    """Archive the oldest messages until the limits hold (pinned ones too if
    ``everything``), a bounded step at a time."""
    moved = moved_tokens = 0
    stalled = 0
    while True:
        step = yield from gateway.trim_step(keep_messages, max_tokens, everything=everything)
        moved += step.moved
        moved_tokens += step.moved_tokens
        if step.status == 0 or (step.status == 1 and step.moved == 0):
            return TrimResult(moved, moved_tokens, step.total_tokens, step.total_count)
        if step.status == 2:
            progress = yield from indexer.catch_up()
            stalled = stalled + 1 if progress.indexed == 0 else 0
            if stalled >= MOVE_RETRIES:
                raise ConcurrentChangeError(
                    f"trim: the messages to move stayed unindexed through {MOVE_RETRIES} catch-ups",
                    key=gateway.name,
                )


def replace_live(
    gateway: MemoryGateway,
    indexer: Indexer,
    messages: list[EncodedMessage],
    *,
    if_last_id: int | None,
    if_incarnation: str,
    if_version: str | None,
    token: str,
) -> Steps[AppendResult]:
    """Swap the live messages for ``messages``, archiving the old ones."""
    for _ in range(MOVE_RETRIES):
        try:
            return (
                yield from gateway.replace(
                    messages,
                    if_last_id=if_last_id,
                    if_incarnation=if_incarnation,
                    if_version=if_version,
                    dedupe_key=token,
                )
            )
        except StepRequiredError:
            # Archive the oldest first, but not for a swap whose condition already fails.
            yield from gateway.read_range(0, 0)
            if if_version and gateway.version != if_version:
                raise ConflictError(
                    f"the memory was written since version {if_version} was read",
                    key=gateway.name,
                ) from None
            if if_incarnation and gateway.incarnation != if_incarnation:
                raise ConflictError(
                    "the memory expired and was written again since it was read",
                    key=gateway.name,
                ) from None
            yield from trim_oldest(gateway, indexer, MOVE_STEP // 2, None, everything=True)
        except IndexLagError:
            yield from indexer.catch_up()
    raise ConcurrentChangeError(
        f"replace: the live messages kept growing or changing through {MOVE_RETRIES} attempts",
        key=gateway.name,
    )
