from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from compozy_memory._config.schema import (
    PROFILES,
    CompressionConfig,
    MemoryResource,
    format_duration,
    parse_duration,
)
from compozy_memory._model.limits import INDEX_DELAY


def resource(**fields: Any) -> MemoryResource:
    return MemoryResource.model_validate({"id": "m", "max_tokens": 1000, **fields})


def errors(**fields: Any) -> list[str]:
    with pytest.raises(ValidationError) as info:
        resource(**fields)
    return [
        f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}"
        for e in info.value.errors()
    ]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("24h", 86400), ("30m", 1800), ("1h30m", 5400), ("500ms", 0.5), ("10s", 10), (90, 90),
     ("3650d", 3650 * 86400), ("1ms", 0.001)],
)  # fmt: skip
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "text",
    ["24 hours", "h", "", "-5s", "0s", True, [1], float("inf"), float("nan"), 10**400,
     "99999999999d", "9" * 400 + "s", "3651d", timedelta.max, "0.0001ms", 1e-9],
)  # fmt: skip
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_durations_print_as_written() -> None:
    assert [format_duration(parse_duration(t)) for t in ("24h", "1h30m", "500ms", "90s")] == [
        "24h", "1h30m", "500ms", "1m30s",
    ]  # fmt: skip


def test_defaults_follow_the_spec() -> None:
    r = resource()
    assert r.type == "token_based"
    assert r.flushing_strategy.type == "hybrid_summary"
    assert r.flushing_strategy.summarize_threshold == 0.8
    assert r.flushing_strategy.summary_tokens is None  # follows the summary share
    assert r.context.summary_share == 0.5
    assert r.flushing_strategy.summarize_oldest_percent == 30
    assert r.summarizer.type == "extractive"  # our default: it keeps facts (README)
    assert r.compression is None


def test_the_lower_of_ratio_and_max_tokens_wins() -> None:
    assert resource(max_context_ratio=0.5, context_window=10_000).effective_max_tokens == 1000
    assert resource(max_context_ratio=0.05, context_window=10_000).effective_max_tokens == 500
    known = MemoryResource(id="m", max_context_ratio=0.1, model="claude-haiku-4-5")
    assert known.effective_max_tokens == 20_000


def test_policy_carries_budget_ttl_and_priorities() -> None:
    r = resource(
        persistence={"ttl": "24h"},
        priority_blocks=[{"priority": 0, "content_types": ["system_prompt"]}],
    )
    policy = r.policy()
    assert policy.max_tokens == 1000
    assert policy.ttl == timedelta(hours=24)
    assert policy.priority_of("system_prompt") == 0
    assert policy.priority_of("message") == 2


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"max_tokens": None},
            ": a token_based memory needs a budget: set max_tokens or max_context_ratio",
        ),
        (
            {"max_context_ratio": 0.5},
            ": max_context_ratio needs the model's context window: set context_window",
        ),
        (
            {"max_context_ratio": 0.5, "model": "llama-9"},
            ": max_context_ratio needs the model's "
            "context window: set context_window (model 'llama-9' is not one we know)",
        ),
        ({"type": "message_count_based"}, ": a message_count_based memory needs max_messages"),
        (
            {"token_allocation": {"short_term": 0.5, "long_term": 0.2, "system": 0.2}},
            "token_allocation: short_term + long_term + system must be 1, got 0.9 "
            "(0.5 + 0.2 + 0.2)",
        ),
        (
            {
                "priority_blocks": [
                    {"priority": 1, "content_types": ["a"]},
                    {"priority": 1, "content_types": ["b"]},
                ]
            },
            ": priority_blocks: priority 1 appears twice",
        ),
        (
            {
                "priority_blocks": [
                    {"priority": 0, "content_types": ["a"]},
                    {"priority": 2, "content_types": ["a"]},
                ]
            },
            ": priority_blocks: content type 'a' is in priority 0 and 2; give it one priority",
        ),
        (
            {"flushing_strategy": {"summarize_threshold": 1.5}},
            "flushing_strategy.summarize_threshold: Input should be less than or equal to 1",
        ),
        (
            {"persistence": {"ttl": "forever"}},
            "persistence.ttl: 'forever' is not a duration: write e.g. '24h', '30m', '1h30m', "
            "'500ms'",
        ),
        (
            {"summarizer": {"type": "anthropic", "modle": "x"}},
            "summarizer.anthropic.modle: Extra inputs are not permitted",
        ),
        (
            {"summarizer": {"type": "gpt"}},
            "summarizer: Input tag 'gpt' found using 'type' does "
            "not match any of the expected tags: 'rule_based', 'extractive', 'anthropic'",
        ),
        ({"colour": "red"}, "colour: Extra inputs are not permitted"),
        (
            {"id": "has space"},
            "id: String should match pattern '^[a-zA-Z0-9][a-zA-Z0-9_.\\-]{0,127}$'",
        ),
    ],
)
def test_invalid_resources_say_why(fields: dict[str, Any], expected: str) -> None:
    assert errors(**fields) == [expected]


def test_profiles_match_loom() -> None:
    assert (PROFILES["data_intensive"].max_l1_messages, PROFILES["conversational"].max_l1_messages,
            PROFILES["balanced"].max_l1_messages) == (5, 12, 8)  # fmt: skip
    data = PROFILES["data_intensive"]
    assert (data.warning_threshold_percent, data.critical_threshold_percent) == (50, 70)
    assert (data.batch_sizes.normal, data.batch_sizes.warning, data.batch_sizes.critical) == (
        2, 4, 6,
    )  # fmt: skip
    chat = PROFILES["conversational"]
    assert (chat.warning_threshold_percent, chat.critical_threshold_percent) == (70, 85)
    assert (chat.batch_sizes.normal, chat.batch_sizes.critical) == (4, 8)


def test_compression_precedence_explicit_then_profile_then_balanced() -> None:
    explicit = CompressionConfig(workload_profile="data_intensive", max_l1_messages=9).resolve()
    assert explicit.max_l1_messages == 9
    assert explicit.warning_threshold_percent == 50  # from the profile
    default = CompressionConfig().resolve()
    assert default == PROFILES["balanced"]


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        (
            {"warning_threshold_percent": 90},
            "critical_threshold_percent (75) must be >= warning_threshold_percent (90)",
        ),
        ({"warning_threshold_percent": 0}, "greater than or equal to 1"),
        ({"critical_threshold_percent": 101}, "less than or equal to 100"),
        ({"batch_sizes": {"normal": 0, "warning": 1, "critical": 1}}, "greater than 0"),
        ({"max_l1_messages": 0}, "greater than 0"),
        ({"min_l1_messages": 10}, "min_l1_messages (10) must be <= max_l1_messages (8)"),
    ],
)
def test_compression_validation(fields: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(fragment)):
        CompressionConfig.model_validate(fields)


@pytest.mark.parametrize("bad", ["m\n", "m\r\n", "\nm", "m "])
def test_identifiers_with_a_trailing_newline_are_refused(bad: str) -> None:
    assert errors(id=bad) == [
        "id: String should match pattern '^[a-zA-Z0-9][a-zA-Z0-9_.\\-]{0,127}$'"
    ]
    block = {"priority": 1, "content_types": [bad]}
    assert len(errors(priority_blocks=[block])) == 1


def test_context_and_search_settings_reach_the_policy() -> None:
    policy = resource(
        context={"summary_share": 0.2, "recall_share": 0.5, "backfill": False},
        search={"k1": 1.5, "b": 0.5, "neighbour_weight": 0.3, "limit": 4, "index_delay": "5s"},
    ).policy()
    assert (policy.context.summary_share, policy.context.recall_share) == (0.2, 0.5)
    assert policy.context.backfill is False
    assert (policy.search.k1, policy.search.b, policy.search.limit) == (1.5, 0.5, 4)
    assert policy.search.index_delay == 5.0
    assert resource().policy().search.index_delay == INDEX_DELAY
    for none in (0, 0.0, "0", "0s", "0ms", "0h0m", timedelta(0)):
        assert resource(search={"index_delay": none}).policy().search.index_delay == 0


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("context", {"summary_share": 0.7, "recall_share": 0.5}, "at most 1"),
        ("context", {"sumary_share": 0.2}, "sumary_share"),
        ("search", {"b": 2}, "less than or equal to 1"),
        ("search", {"index_delay": "2h"}, "index_delay must be between 0s and 3600s, got 7200.0s"),
        ("search", {"index_delay": -1}, "a delay is 0 or a duration, not negative"),
        ("search", {"index_delay": timedelta(seconds=-1)}, "a duration must be positive"),
        ("search", {"index_delay": True}, "a duration is text"),
        ("search", {"index_delay": "soon"}, "index_delay"),
    ],
)
def test_bad_context_and_search_settings_are_refused(
    field: str, value: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ValidationError, match=fragment):
        resource(**{field: value})
