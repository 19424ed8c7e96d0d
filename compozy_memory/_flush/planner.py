"""Flush planning: pure functions from a snapshot and settings to a FlushPlan of exact ids.

Rules, in order:

1. Nothing is touched that is priority 0, or the newest user turn, or the messages after it
   while they fit half the budget (and, with ``max_messages``, while they are at most half
   of it; a bounded snapshot does not reach them).
2. A tool call and its results move together (:mod:`compozy_memory._model.exchanges`): they
   are summarised or evicted as one unit, or not at all; a call whose result is not in the
   snapshot stays.
3. Priority blocks over their limit lose their oldest messages to the archive, lowest
   priority first, down to priority 2: as Compozy's memory specification (docs/design.md) says,
   priority eviction never removes priority 0 (critical) or 1 (important); limits given for
   them are ignored here.
   A block's limit is the lower of its ``max_tokens`` and its share of the budget under
   ``token_allocation`` (the share its content types map to: see ``_manager.flush_settings``).
4. Past ``summarize_threshold`` of the budget (or past the profile's ``max_l1_messages``),
   the oldest messages are summarised: ``summarize_oldest_percent`` of the conversation, or,
   with a workload profile, the batch size of the pressure tier (normal, warning, critical),
   keeping ``min_l1_messages``. The selection grows while the projected context would still
   exceed the budget. With ``max_messages``, a flush is also due at ``summarize_threshold``
   of that count, and the selection grows until the live messages left fit ``max_messages``
   (summaries are kept apart from the messages and do not count).
5. When the summaries would take more than twice ``summary_tokens``, they are folded into
   the new one (a rolling summary) and archived.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from compozy_memory._flush.settings import FlushSettings
from compozy_memory._model.exchanges import exchange_groups, pending_calls
from compozy_memory._model.messages import Message
from compozy_memory._model.results import FlushPlan, Snapshot, Tier

__all__ = ["EVICTABLE_PRIORITY", "plan_flush"]

#: Priority eviction removes messages of this priority and above only (the spec's
#: ``for priority := max; priority >= 2; priority--``): 0 is critical, 1 important.
EVICTABLE_PRIORITY = 2


def plan_flush(snapshot: Snapshot, settings: FlushSettings) -> FlushPlan:
    """The plan for ``snapshot``; an empty plan when nothing is due."""
    messages = snapshot.messages
    tokens = [m.tokens or 0 for m in messages]
    groups = exchange_groups(messages)
    members: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    protected = _protected(messages, tokens, settings, complete=snapshot.complete)
    # A call whose result is not in sight (pending, or past a bounded snapshot) stays, or
    # its result would arrive without it.
    for i, unanswered in enumerate(pending_calls(messages)):
        if unanswered:
            protected[i] = True
    # A group is movable only if none of its members is protected.
    movable = [not any(protected[j] for j in members[groups[i]]) for i in range(len(messages))]
    context = snapshot.context_tokens

    evicted: set[int] = set()
    for priority in sorted(settings.priority_limits, reverse=True):
        if priority < EVICTABLE_PRIORITY:
            continue
        limit = settings.priority_limits[priority]
        used = (
            snapshot.priority_tokens.get(priority, 0)
            if snapshot.priority_tokens is not None
            else sum(t for i, t in enumerate(tokens) if messages[i].priority == priority)
        )
        for i, message in enumerate(messages):
            if used <= limit:
                break
            if message.priority != priority or i in evicted or not movable[i]:
                continue
            if any((messages[j].priority or 0) < EVICTABLE_PRIORITY for j in members[groups[i]]):
                continue  # a tool exchange that holds an important message is not evicted
            for j in members[groups[i]]:
                if j not in evicted:
                    evicted.add(j)
                    if messages[j].priority == priority:
                        used -= tokens[j]
    remaining = context - sum(tokens[i] for i in evicted)

    live = (snapshot.count if snapshot.count >= 0 else len(messages)) - len(evicted)
    tier = _tier(remaining, live, settings)
    candidates = [i for i in range(len(messages)) if movable[i] and i not in evicted]
    summary_cost = 0 if settings.strategy == "fifo" else settings.summary_tokens
    fold = snapshot.summaries if _should_fold(snapshot, settings) else ()

    def projected(chosen: set[int]) -> int:
        """Context after removing ``chosen`` and adding at most one summary of them."""
        if not chosen:
            return remaining
        taken = sum(tokens[i] for i in chosen)
        folded = sum(s.tokens or 0 for s in fold)
        # The summary replaces the folded summaries too, and is never larger than all it
        # replaces.
        return remaining - taken - folded + min(summary_cost, taken + folded)

    selected: set[int] = set()
    if tier != "none" and candidates:
        want = _first_batch(live, tier, settings)
        if settings.compression is not None:
            want = min(want, max(0, live - settings.compression.min_l1_messages))
        # One pass: take the oldest candidates (whole tool groups) until there are ``want``
        # of them and the projected context fits the budget.
        taken = 0
        folded = sum(s.tokens or 0 for s in fold)
        for i in candidates:
            if len(selected) >= want and (
                selected
                and remaining - taken - folded + min(summary_cost, taken + folded)
                <= settings.max_tokens
                and not settings.over_count(live - len(selected))
            ):
                break
            if i in selected:
                continue
            for j in members[groups[i]]:
                selected.add(j)
                taken += tokens[j]
    if not selected:
        fold = ()
    if not selected and not evicted:
        blocked = None
        if context > settings.max_tokens or settings.over_count(live):
            pinned = sum(t for t, m in zip(tokens, messages, strict=True) if m.priority == 0)
            over = (
                f"{context} of {settings.max_tokens} tokens"
                if context > settings.max_tokens
                else f"{live} of {settings.max_messages} messages"
            )
            blocked = (
                f"over budget ({over}) with nothing "
                f"removable among the {len(messages)} oldest messages: {pinned} tokens are "
                "pinned (priority 0) and the rest is the newest turn or an unanswered tool call"
            )
        return FlushPlan(
            tier=tier,
            context_tokens=context,
            projected_tokens=context,
            partial=not snapshot.complete,
            blocked=blocked,
            projected_count=live,
        )
    projected_tokens = projected(selected)
    projected_count = live - len(selected)  # ``live`` already leaves out the evicted
    if settings.strategy == "fifo":
        evicted |= selected
        selected = set()
    last = max(evicted | selected)
    return FlushPlan(
        prefix_ids=tuple(_id(m) for m in messages[: last + 1]),
        summarize_ids=tuple(_id(messages[i]) for i in sorted(selected)),
        evict_ids=tuple(_id(messages[i]) for i in sorted(evicted)),
        fold_summary_ids=tuple(_id(s) for s in fold),
        tier=tier,
        context_tokens=context,
        projected_tokens=projected_tokens,
        partial=not snapshot.complete,
        projected_count=projected_count,
    )


def _protected(
    messages: Sequence[Message], tokens: Sequence[int], settings: FlushSettings, *, complete: bool
) -> list[bool]:
    """What no flush may touch: pinned messages, the newest user turn, and (when the snapshot
    reaches the newest message) the live tail after that turn while it fits half the budget.

    The tail is capped so that one question followed by thousands of tool messages can still
    be flushed: older tool exchanges after the question are summarised, the question and the
    newest exchanges stay."""
    protected = [m.priority == 0 for m in messages]
    newest_user = next(
        (
            i
            for i in range(len(messages) - 1, -1, -1)
            if messages[i].role == "user" and not messages[i].tool_result_ids
        ),
        None,
    )
    if newest_user is not None:
        protected[newest_user] = True
    if complete and messages:
        room = settings.max_tokens // 2
        # With a count limit the tail is also at most half of it, so the live messages can
        # always be brought down to max_messages.
        count_room = (
            max(1, settings.max_messages // 2) if settings.max_messages is not None else None
        )
        used = 0
        stop = newest_user if newest_user is not None else 0
        for i in range(len(messages) - 1, stop - 1, -1):
            used += tokens[i]
            tail = len(messages) - i
            over = used > room or (count_room is not None and tail > count_room)
            if over and i < len(messages) - 1:
                break
            protected[i] = True
    return protected


def _tier(tokens: int, live: int, settings: FlushSettings) -> Tier:
    tier = _token_tier(tokens, live, settings)
    trigger = settings.trigger_messages
    if tier == "none" and trigger is not None and live >= trigger:
        return "normal"
    return tier


def _token_tier(tokens: int, live: int, settings: FlushSettings) -> Tier:
    used = 100 * tokens / settings.max_tokens
    compression = settings.compression
    if compression is not None:
        if used >= compression.critical_threshold_percent:
            return "critical"
        if used >= compression.warning_threshold_percent:
            return "warning"
        if live > compression.max_l1_messages or tokens >= settings.trigger_tokens:
            return "normal"
        return "none"
    return "normal" if tokens >= settings.trigger_tokens else "none"


def _first_batch(live: int, tier: Tier, settings: FlushSettings) -> int:
    compression = settings.compression
    if compression is not None:
        sizes = compression.batch_sizes
        return {"normal": sizes.normal, "warning": sizes.warning, "critical": sizes.critical}[
            tier if tier != "none" else "normal"
        ]
    return max(1, math.ceil(live * settings.summarize_oldest_percent / 100))


def _should_fold(snapshot: Snapshot, settings: FlushSettings) -> bool:
    existing = sum(s.tokens or 0 for s in snapshot.summaries)
    return (
        bool(snapshot.summaries)
        and existing + settings.summary_tokens > 2 * settings.summary_tokens
    )


def _id(message: Message) -> int:
    assert message.id is not None, "planned messages come from Redis and carry ids"
    return message.id
