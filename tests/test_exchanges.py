"""The tool-exchange rule (:mod:`compozy_memory._model.exchanges`) on both APIs' shapes."""

from __future__ import annotations

from typing import Any

from compozy_memory._model.exchanges import (
    answered_ids,
    exchange_groups,
    orphan_results,
    partnered,
    pending_calls,
    result_text,
    whole_exchanges,
)
from compozy_memory._model.messages import Message


def call(*ids: str) -> Message:
    calls: list[dict[str, Any]] = [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
    ]
    return Message(role="assistant", content="", tool_calls=calls)


def use(*ids: str) -> Message:
    return Message(
        role="assistant",
        content=[{"type": "tool_use", "id": i, "name": "f", "input": {}} for i in ids],
    )


def tool(call_id: str) -> Message:
    return Message(role="tool", tool_call_id=call_id, content="ok")


def results(*ids: str) -> Message:
    return Message(
        role="user",
        content=[{"type": "tool_result", "tool_use_id": i, "content": "ok"} for i in ids],
    )


def text() -> Message:
    return Message(role="user", content="hi")


CONVERSATION = [
    tool("gone"),  # 0: its call is not here
    text(),  # 1
    call("a1", "a2"),  # 2
    tool("a1"),  # 3
    tool("a2"),  # 4
    use("b1"),  # 5
    results("b1"),  # 6
    use("c1", "c2"),  # 7: c2 is never answered
    results("c1"),  # 8
    call("d1"),  # 9: pending
]


def test_groups_join_a_call_and_every_result_of_it() -> None:
    groups = exchange_groups(CONVERSATION)
    assert groups[2] == groups[3] == groups[4]
    assert groups[5] == groups[6]
    assert groups[7] == groups[8]
    assert len({groups[0], groups[1], groups[2], groups[5], groups[7], groups[9]}) == 6


def test_pending_calls_and_orphan_results_are_per_message() -> None:
    assert answered_ids(CONVERSATION) == {"gone", "a1", "a2", "b1", "c1"}
    pending = pending_calls(CONVERSATION)
    assert pending[7] == ("c2",)
    assert pending[9] == ("d1",)
    assert [i for i, p in enumerate(pending) if p] == [7, 9]
    assert [i for i, o in enumerate(orphan_results(CONVERSATION)) if o] == [0]


def test_whole_exchanges_drop_orphans_and_wholly_unanswered_calls() -> None:
    kept = whole_exchanges(CONVERSATION)
    # The orphan result and the pending call go; a call with one of two results answered stays
    # (a renderer drops its unanswered call).
    assert [CONVERSATION.index(m) for m in kept] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert whole_exchanges(()) == ()


def test_partnered_drops_parts_without_a_partner_and_repeats() -> None:
    blocks = [{"type": "text"}, {"id": "x"}, {"id": "y"}, {"id": "x"}, {"id": "z"}]
    seen: set[str] = {"z"}
    kept, dropped = partnered(blocks, lambda b: b.get("id"), partners={"x", "z"}, seen=seen)
    assert kept == [{"type": "text"}, {"id": "x"}]
    assert dropped
    assert seen == {"x", "z"}
    assert partnered([{"type": "text"}], lambda b: None, set(), set()) == (
        [{"type": "text"}],
        False,
    )


def test_a_result_reads_as_text_whatever_its_content() -> None:
    assert result_text("done") == "done"
    assert result_text([{"type": "text", "text": "a"}, "b", {"type": "image"}]) == "a\nb\n"
    assert result_text({"rows": 2}) == '{"rows": 2}'
    assert result_text(None) == ""
