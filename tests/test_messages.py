from __future__ import annotations

import json

import pytest

from compozy_memory import InvalidMessageError, Message
from compozy_memory._model.messages import encode_body


def test_body_is_compact_and_leaves_script_fields_out() -> None:
    message = Message(role="user", content="hi", tokens=3, priority=1, id=9, ts=1)
    assert encode_body(message) == b'{"role":"user","content":"hi","type":"message"}'


def test_unicode_is_stored_as_is() -> None:
    body = encode_body(Message(role="user", content="東京 🚀 naïve"))
    assert "東京 🚀 naïve".encode() in body
    assert json.loads(body)["content"] == "東京 🚀 naïve"


def test_lone_surrogates_are_refused() -> None:
    with pytest.raises(InvalidMessageError, match="UTF-8"):
        Message.parse({"role": "user", "content": "a\ud83d"})
    with pytest.raises(InvalidMessageError, match="UTF-8"):  # built without validation
        encode_body(Message.model_construct(role="user", content="a\ud83d"))


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"role": "", "content": "x"}, "role: Input should be"),
        ({"content": "x"}, "role: Field required"),
        ({"role": "user"}, "content: Field required"),
        ({"role": "user", "content": None}, "content"),
        ({"role": "user", "content": [{"text": "no type"}]}, "needs a string 'type'"),
        (
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function"}]},
            "tool call 0 needs a non-empty string 'id'",
        ),
        ({"role": "tool", "content": "42"}, "needs tool_call_id"),
        ({"role": "user", "content": "x", "extra": 1}, "extra: Extra inputs are not permitted"),
        ({"role": "user", "content": "x", "priority": -1}, "priority"),
        ({"role": "user", "content": "x", "type": ""}, "type"),
    ],
)
def test_invalid_messages_say_what_is_wrong(data: dict[str, object], fragment: str) -> None:
    with pytest.raises(InvalidMessageError, match="invalid message") as info:
        Message.parse(data)
    assert fragment in str(info.value)


def test_parse_refuses_non_mappings() -> None:
    with pytest.raises(InvalidMessageError, match="got list"):
        Message.parse([("role", "user")])  # type: ignore[arg-type]


def test_tool_ids_in_both_shapes() -> None:
    anthropic_call = Message(
        role="assistant",
        content=[{"type": "tool_use", "id": "tu_1", "name": "f", "input": {}}],
    )
    anthropic_result = Message(
        role="user", content=[{"type": "tool_result", "tool_use_id": "tu_1", "content": "ok"}]
    )
    openai_call = Message(
        role="assistant",
        content="",
        tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    )
    openai_result = Message(role="tool", tool_call_id="c1", content="ok")
    assert anthropic_call.tool_use_ids == ("tu_1",)
    assert anthropic_result.tool_result_ids == ("tu_1",)
    assert openai_call.tool_use_ids == ("c1",)
    assert openai_result.tool_result_ids == ("c1",)
    assert Message(role="user", content="x").tool_result_ids == ()


def test_text_joins_text_blocks() -> None:
    message = Message(
        role="assistant",
        content=[
            {"type": "text", "text": "a"},
            {"type": "image", "source": {}},
            {"type": "text", "text": "b"},
        ],
    )
    assert message.text == "a\nb"


@pytest.mark.parametrize(
    "data",
    [
        {"role": "user", "content": "x", "metadata": {"\ud800": 1}},
        {"role": "user", "content": "x", "metadata": {"a": {"b": [{"\udfff": "v"}]}}},
        {"role": "user", "content": "x", "metadata": {"a": ["ok", "\ud83d"]}},
        {"role": "user", "content": "a\ud83d"},
        {"role": "user", "content": "x", "name": "bot\ud800"},
        {"role": "user", "content": "x", "type": "t\ud800"},
        {"role": "user", "content": [{"type": "text", "text": "\ud800"}]},
        {"role": "user", "content": [{"type": "text", "text": "x", "\ud800x": 1}]},
        {"role": "tool", "content": "x", "tool_call_id": "c\ud800"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "function": {"arguments": {"\udc80": 1}}}],
        },
    ],
)
def test_lone_surrogates_are_refused_anywhere_in_a_message(data: dict[str, object]) -> None:
    """A key with a lone surrogate used to be stored as U+FFFD: refused before it reaches
    Redis, with where it is."""
    with pytest.raises(InvalidMessageError, match=r"lone surrogate|unable to parse raw data"):
        Message.parse(data)


def test_covers_are_stored_as_ranges_and_old_id_lists_still_read() -> None:
    from compozy_memory._model.messages import encode_body, id_ranges

    assert id_ranges([5, 1, 2, 3, 7, (8, 9), (4, 4)]) == [(1, 5), (7, 9)]
    old = Message.model_validate_json(
        '{"role":"system","content":"s","type":"summary","covers":[1,2,3,5]}'
    )
    assert old.covers == [(1, 3), (5, 5)]
    assert old.covered_ids == [1, 2, 3, 5]
    assert old.covered_count == 4
    # 200,000 contiguous ids take one range, not 200,000 numbers.
    big = Message.model_validate(
        {"role": "system", "content": "s", "covers": list(range(1, 200_001))}
    )
    assert big.covers == [(1, 200_000)]
    assert len(encode_body(big)) < 80
