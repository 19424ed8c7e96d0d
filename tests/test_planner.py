from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compozy_memory._config.schema import PROFILES, MemoryResource
from compozy_memory._flush.planner import plan_flush
from compozy_memory._flush.settings import FlushSettings
from compozy_memory._manager import (
    DEFAULT_TOKEN_ALLOCATION,
    allocation_category,
    compression_settings,
    flush_settings,
)
from compozy_memory._model.exchanges import exchange_groups
from compozy_memory._model.messages import Message
from compozy_memory._model.results import FlushPlan, Snapshot


def conversation(spec: list[tuple[str, int, int]]) -> list[Message]:
    """Messages from (kind, tokens, priority): kind is user, assistant, call (a tool_use with
    its result right after), anthropic (tool_use/tool_result blocks)."""
    out: list[Message] = []
    for kind, tokens, priority in spec:
        n = len(out) + 1
        if kind == "call":
            out.append(
                Message(
                    role="assistant",
                    content="",
                    id=n,
                    tokens=tokens,
                    priority=priority,
                    tool_calls=[{"id": f"c{n}", "type": "function", "function": {}}],
                )
            )
            out.append(
                Message(
                    role="tool",
                    tool_call_id=f"c{n}",
                    content="r",
                    id=n + 1,
                    tokens=tokens,
                    priority=priority,
                )
            )
        elif kind == "anthropic":
            out.append(
                Message(
                    role="assistant",
                    id=n,
                    tokens=tokens,
                    priority=priority,
                    content=[{"type": "tool_use", "id": f"t{n}", "name": "f"}],
                )
            )
            out.append(
                Message(
                    role="user",
                    id=n + 1,
                    tokens=tokens,
                    priority=priority,
                    content=[{"type": "tool_result", "tool_use_id": f"t{n}"}],
                )
            )
        else:
            out.append(
                Message.model_validate(
                    {"role": kind, "content": "x", "id": n, "tokens": tokens, "priority": priority}
                )
            )
    return out  # fmt: skip


def snapshot(
    messages: list[Message], summaries: tuple[Message, ...] = (), window: int | None = None
) -> Snapshot:
    """A snapshot of ``messages``; with ``window``, bounded to the oldest that many, with the
    totals of all of them, as snapshot.lua returns."""
    by_priority: dict[int, int] = {}
    for m in messages:
        by_priority[m.priority or 0] = by_priority.get(m.priority or 0, 0) + (m.tokens or 0)
    return Snapshot(
        epoch=1,
        last_id=len(messages),
        tokens=sum(m.tokens or 0 for m in messages),
        summary_tokens=sum(s.tokens or 0 for s in summaries),
        summaries=summaries,
        messages=tuple(messages[:window]),
        count=len(messages),
        priority_tokens=by_priority,
    )


def ids(plan: FlushPlan) -> set[int]:
    return set(plan.remove_ids)


def test_nothing_is_due_below_the_threshold() -> None:
    messages = conversation([("user", 10, 2)] * 7)
    plan = plan_flush(snapshot(messages), FlushSettings(max_tokens=100))
    assert plan.empty
    assert plan.context_tokens == 70


def test_the_oldest_share_is_summarised_at_the_threshold() -> None:
    messages = conversation([("user", 10, 2), ("assistant", 10, 2)] * 5)  # 100 tokens
    plan = plan_flush(snapshot(messages), FlushSettings(max_tokens=120, summary_tokens=5))
    assert plan.summarize_ids == (1, 2, 3)  # 30% of 10 messages, oldest first
    assert plan.prefix_ids == (1, 2, 3)
    assert plan.projected_tokens == 100 - 30 + 5


def test_priority_zero_and_the_newest_user_turn_are_never_touched() -> None:
    messages = conversation(
        [("user", 50, 0), ("assistant", 50, 2), ("user", 50, 2), ("assistant", 50, 2),
         ("user", 50, 2), ("assistant", 50, 2)]
    )  # fmt: skip
    plan = plan_flush(snapshot(messages), FlushSettings(max_tokens=100, summary_tokens=10))
    assert 1 not in ids(plan)
    assert not ids(plan) & {5, 6}
    assert plan.summarize_ids == (2, 3, 4)  # grown past 30% because 300 tokens > 100 budget


def test_tool_calls_and_results_move_together() -> None:
    messages = conversation([("user", 10, 2), ("call", 10, 2), ("user", 10, 2), ("user", 10, 2)])
    plan = plan_flush(
        snapshot(messages),
        FlushSettings(max_tokens=50, summary_tokens=1, summarize_oldest_percent=40),
    )
    assert plan.summarize_ids == (1, 2, 3)  # 40% of 5 is 2, but the call's result comes along


def test_priority_blocks_evict_lowest_priority_first() -> None:
    messages = conversation(
        [("user", 30, 1), ("user", 30, 3), ("user", 30, 3), ("user", 30, 2), ("user", 30, 3),
         ("user", 5, 2)]
    )  # fmt: skip
    settings_ = FlushSettings(max_tokens=1000, priority_limits={2: 10, 3: 30})
    plan = plan_flush(snapshot(messages), settings_)
    assert plan.evict_ids == (2, 3, 4)  # priority 3 down to 30 tokens, then priority 2
    assert plan.summarize_ids == ()


def test_priority_eviction_never_removes_priority_1() -> None:
    """The spec evicts priorities 2 and up only; a limit on priority 1 does nothing."""
    messages = conversation(
        [("user", 30, 1), ("user", 30, 1), ("user", 30, 3), ("user", 30, 1), ("user", 5, 2)]
    )
    settings_ = FlushSettings(max_tokens=1000, priority_limits={1: 10, 3: 0})
    plan = plan_flush(snapshot(messages), settings_)
    assert plan.evict_ids == (3,)
    assert plan.summarize_ids == ()


def test_allocation_and_block_limits_take_the_lower() -> None:
    resource = MemoryResource.model_validate(
        {
            "id": "m",
            "max_tokens": 1000,
            "priority_blocks": [
                {"priority": 0, "content_types": ["system_prompt"]},
                {"priority": 1, "content_types": ["profile"]},
                {"priority": 2, "content_types": ["message"], "max_tokens": 900},
                {"priority": 3, "content_types": ["historical_messages"], "max_tokens": 150},
            ],
            "token_allocation": {"short_term": 0.7, "long_term": 0.2, "system": 0.1},
        }
    )
    # Priorities 0 and 1 are never evicted: no limit. 2 is short_term (700 < 900); 3 is
    # long_term by its content type (200 > 150).
    assert flush_settings(resource).priority_limits == {2: 700, 3: 150}


def test_allocation_categories_come_from_content_types_as_the_spec_maps_them() -> None:
    blocks = [
        {"priority": 2, "content_types": ["user_profile"]},  # system
        {"priority": 3, "content_types": ["chat", "historical_messages"]},  # long_term
        {"priority": 4, "content_types": ["important_facts"]},  # short_term
        {"priority": 5, "content_types": ["tool_output"]},  # short_term: the default
    ]
    resource = MemoryResource.model_validate(
        {
            "id": "m",
            "max_tokens": 1000,
            "priority_blocks": blocks,
            "token_allocation": {"short_term": 0.5, "long_term": 0.3, "system": 0.2},
        }
    )
    assert flush_settings(resource).priority_limits == {2: 200, 3: 300, 4: 500, 5: 500}
    assert allocation_category(["system_prompt", "historical_messages"]) == "system"


def test_the_spec_default_allocation_applies_when_none_is_given() -> None:
    resource = MemoryResource.model_validate(
        {
            "id": "m",
            "max_tokens": 1000,
            "priority_blocks": [
                {"priority": 2, "content_types": ["recent_context"]},
                {"priority": 3, "content_types": ["historical_messages"]},
                {"priority": 4, "content_types": ["system_prompt"]},
            ],
        }
    )
    assert resource.token_allocation is None
    assert DEFAULT_TOKEN_ALLOCATION.model_dump() == {
        "short_term": 0.7,
        "long_term": 0.2,
        "system": 0.1,
    }
    assert flush_settings(resource).priority_limits == {2: 700, 3: 200, 4: 100}


def test_workload_profiles_pick_the_batch_of_the_pressure_tier() -> None:
    messages = conversation([("user", 10, 2)] * 20)  # 200 tokens
    data = PROFILES["data_intensive"]  # 50% / 70%, batches 2 / 4 / 6, keep at least 2
    for budget, tier, batch in ((1000, "normal", 2), (350, "warning", 4), (250, "critical", 6)):
        plan = plan_flush(
            snapshot(messages),
            FlushSettings(
                max_tokens=budget, summary_tokens=1, compression=compression_settings(data)
            ),
        )
        assert (plan.tier, len(plan.summarize_ids)) == (tier, batch), budget


def test_summaries_fold_into_a_rolling_one() -> None:
    old = (
        Message(role="system", type="summary", content="s", id=90, tokens=60, covers=[(1, 1)]),
        Message(role="system", type="summary", content="s", id=91, tokens=60, covers=[(2, 2)]),
    )
    messages = conversation([("user", 50, 2)] * 6)
    plan = plan_flush(snapshot(messages, old), FlushSettings(max_tokens=300, summary_tokens=50))
    assert plan.fold_summary_ids == (90, 91)
    assert plan.projected_tokens <= 300


def test_fifo_evicts_instead_of_summarising() -> None:
    messages = conversation([("user", 10, 2)] * 10)
    plan = plan_flush(snapshot(messages), FlushSettings(max_tokens=100, strategy="fifo"))
    assert plan.summarize_ids == ()
    assert plan.evict_ids == (1, 2, 3)


kinds = st.sampled_from(["user", "assistant", "call", "anthropic"])
specs = st.lists(
    st.tuples(kinds, st.integers(1, 200), st.sampled_from([0, 1, 2, 2, 2, 3])),
    min_size=1,
    max_size=40,
)


@pytest.mark.slow
@settings(max_examples=400)
@given(
    spec=specs,
    budget=st.integers(50, 4000),
    threshold=st.sampled_from([0.5, 0.8, 1.0]),
    percent=st.integers(1, 100),
    summary_tokens=st.integers(1, 300),
    limits=st.dictionaries(st.sampled_from([1, 2, 3]), st.integers(0, 500), max_size=2),
    profile=st.sampled_from([None, "data_intensive", "conversational", "balanced"]),
    strategy=st.sampled_from(["hybrid_summary", "fifo"]),
    window=st.one_of(st.none(), st.integers(1, 40)),
    max_messages=st.one_of(st.none(), st.integers(1, 30)),
)
def test_plans_keep_every_rule(
    spec: list[tuple[str, int, int]],
    budget: int,
    threshold: float,
    percent: int,
    summary_tokens: int,
    limits: dict[int, int],
    profile: str | None,
    strategy: Any,
    window: int | None,
    max_messages: int | None,
) -> None:
    messages = conversation(spec)
    config = FlushSettings(
        max_tokens=budget,
        summarize_threshold=threshold,
        summarize_oldest_percent=percent,
        summary_tokens=summary_tokens,
        strategy=strategy,
        priority_limits=limits,
        compression=compression_settings(PROFILES[profile]) if profile else None,
        max_messages=max_messages,
    )
    seen = snapshot(messages, window=window)
    plan = plan_flush(seen, config)
    assert plan.partial == (not seen.complete)
    removed = ids(plan)
    by_id = {m.id: m for m in messages}
    # Priority 0 is never touched; nor is the newest user turn, nor the tail after it that
    # fits half the budget.
    assert all(by_id[i].priority != 0 for i in removed)
    kept = protected_ids(seen, budget, max_messages)
    assert not removed & kept
    # A tool call and its results are removed together, and the same way, or not at all.
    groups = exchange_groups(messages)
    for g in set(groups):
        members = {messages[i].id for i, x in enumerate(groups) if x == g}
        assert (
            members <= set(plan.summarize_ids)
            or members <= set(plan.evict_ids)
            or not (members & removed)
        )
    # The commit can check exactly what the plan saw, and a bounded plan saw only its window.
    assert plan.prefix_ids == tuple(m.id for m in messages[: len(plan.prefix_ids)])
    assert len(plan.prefix_ids) <= len(seen.messages)
    assert removed <= set(plan.prefix_ids)
    assert not set(plan.summarize_ids) & set(plan.evict_ids)
    if strategy == "fifo":
        assert plan.summarize_ids == ()
    else:
        # Only priority eviction evicts here, and it never takes priority 0 or 1.
        assert all((by_id[i].priority or 0) >= 2 for i in plan.evict_ids)
    # The plan knows how many live messages it leaves.
    assert plan.projected_count == len(messages) - len(removed)
    # A count limit makes a flush due at the threshold of it (counted after priority eviction).
    if (
        max_messages is not None
        and not limits
        and seen.count >= max(1, int(max_messages * threshold))
    ):
        assert plan.tier != "none"
    # Over budget (tokens or count) after the plan only when nothing more could be moved (a
    # profile's min_l1_messages may keep some on purpose).
    over_count = max_messages is not None and plan.projected_count > max_messages
    if (
        (plan.projected_tokens > budget or over_count)
        and plan.tier != "none"
        and profile is None
        and not plan.partial
    ):
        left = [
            m.id
            for m in messages
            if m.id not in removed
            and m in seen.messages
            and _whole_group_movable(m.id or 0, list(seen.messages), kept)
        ]
        assert left == []
    if plan.empty:
        assert plan.projected_tokens == plan.context_tokens


def _whole_group_movable(message_id: int, shown: list[Message], kept: set[int]) -> bool:
    groups = exchange_groups(shown)
    index = next(i for i, m in enumerate(shown) if m.id == message_id)
    members = [shown[i] for i, g in enumerate(groups) if g == groups[index]]
    answered = {c for m in shown for c in m.tool_result_ids}
    return all(
        (m.id or 0) not in kept and all(c in answered for c in m.tool_use_ids) for m in members
    )


def protected_ids(seen: Snapshot, budget: int, max_messages: int | None = None) -> set[int]:
    """The planner's protection rule, written out: pinned messages, the newest user turn, and
    (when the snapshot reaches the newest message) the tail after it within half the budget
    and, with a count limit, at most half of it, always including the newest message."""
    shown = list(seen.messages)
    out = {m.id or 0 for m in shown if m.priority == 0}
    users = [i for i, m in enumerate(shown) if m.role == "user" and not m.tool_result_ids]
    if users:
        out.add(shown[users[-1]].id or 0)
    if seen.complete and shown:
        used = 0
        for i in range(len(shown) - 1, (users[-1] if users else 0) - 1, -1):
            used += shown[i].tokens or 0
            too_many = max_messages is not None and len(shown) - i > max(1, max_messages // 2)
            if (used > budget // 2 or too_many) and i < len(shown) - 1:
                break
            out.add(shown[i].id or 0)
    return out


def test_one_question_then_thousands_of_tool_messages_can_still_be_flushed() -> None:
    """The tail after the newest user turn is protected only while it fits half the budget."""
    messages = [Message(role="user", content="audit every order", id=1, tokens=10, priority=2)]
    for n in range(1000):
        call_id = f"call_{n}"
        messages.append(
            Message(
                role="assistant",
                content=[{"type": "tool_use", "id": call_id, "name": "get", "input": {}}],
                id=2 + 2 * n,
                tokens=20,
                priority=2,
            )
        )
        messages.append(
            Message(
                role="user",
                content=[{"type": "tool_result", "tool_use_id": call_id, "content": "ok"}],
                id=3 + 2 * n,
                tokens=20,
                priority=2,
            )
        )
    plan = plan_flush(snapshot(messages), FlushSettings(max_tokens=3000, summary_tokens=200))
    assert not plan.empty
    assert 1 not in ids(plan)  # the question stays
    assert messages[-1].id not in ids(plan)  # so does the newest exchange
    assert plan.projected_tokens <= 3000


def test_an_over_budget_memory_with_nothing_removable_says_why() -> None:
    messages = [
        Message(role="system", content="rules", id=i, tokens=100, priority=0) for i in range(1, 40)
    ]
    plan = plan_flush(snapshot(messages), FlushSettings(max_tokens=1000))
    assert plan.empty
    assert plan.blocked is not None
    assert "pinned" in plan.blocked


def test_max_messages_flushes_until_the_live_count_fits() -> None:
    """Count only: a huge token budget, ``max_messages`` 10, reached at 80%."""
    messages = conversation([("user", 10, 2)] * 30)
    config = FlushSettings(max_tokens=10**12, max_messages=10, summary_tokens=50)
    assert config.trigger_messages == 8
    plan = plan_flush(snapshot(messages), config)
    assert plan.tier == "normal"
    assert plan.projected_count <= 10
    assert plan.summarize_ids == tuple(range(1, 31 - plan.projected_count))
    assert 30 not in ids(plan)  # the newest user turn stays
    below = plan_flush(snapshot(conversation([("user", 10, 2)] * 7)), config)
    assert below.empty
    assert below.tier == "none"
    assert below.projected_count == 7
    fifo = plan_flush(snapshot(messages), dataclasses.replace(config, strategy="fifo"))
    assert fifo.summarize_ids == ()
    assert fifo.projected_count <= 10


def test_a_memory_with_both_limits_honours_both() -> None:
    messages = conversation([("user", 10, 2)] * 30)  # 300 tokens, well under 1000
    by_count = plan_flush(snapshot(messages), FlushSettings(max_tokens=1000, max_messages=20))
    assert by_count.projected_count <= 20
    assert by_count.projected_tokens <= 1000
    heavy = conversation([("user", 100, 2)] * 12)  # 1200 tokens, 12 messages
    by_tokens = plan_flush(
        snapshot(heavy), FlushSettings(max_tokens=1000, max_messages=20, summary_tokens=50)
    )
    assert by_tokens.projected_tokens <= 1000
    assert not by_tokens.empty


def test_a_long_tail_after_the_question_does_not_block_the_count() -> None:
    """One question and 40 answers: the tail kept is at most half of max_messages."""
    messages = conversation([("user", 5, 2)] + [("assistant", 5, 2)] * 40)
    plan = plan_flush(snapshot(messages), FlushSettings(max_tokens=10**12, max_messages=10))
    assert 1 not in ids(plan)  # the question stays
    assert plan.projected_count <= 10


@pytest.mark.parametrize(
    ("max_tokens", "context", "strategy", "summary_tokens"),
    [
        (4000, {}, {}, 2000),  # the default share (0.5) of the budget
        (4000, {"summary_share": 0.3}, {}, 1200),  # follows the share
        (4000, {"summary_share": 0.3}, {"summary_tokens": 500}, 500),  # asked for less
        (4000, {"summary_share": 0.3}, {"summary_tokens": 3000}, 1200),  # never past the share
        (4000, {"summary_share": 0.6, "recall_share": 0.2}, {}, 2000),  # nor half the budget
        (120, {}, {}, 60),
    ],
)
def test_a_summary_gets_the_room_context_gives_summaries(
    max_tokens: int, context: dict[str, float], strategy: dict[str, int], summary_tokens: int
) -> None:
    resource = MemoryResource.model_validate(
        {"id": "m", "max_tokens": max_tokens, "context": context, "flushing_strategy": strategy}
    )
    assert flush_settings(resource).summary_tokens == summary_tokens
