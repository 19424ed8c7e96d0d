from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compozy_memory import Message
from compozy_memory._context.render import to_anthropic, to_openai


def use(call_id: str, name: str = "lookup") -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": {"q": call_id}}


def result(call_id: str, text: str = "found") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": text}


def openai_call(call_id: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"q": 1}'},
    }


# -- examples ---------------------------------------------------------------------------------


def test_anthropic_takes_system_and_summaries_apart_and_merges_same_role_turns() -> None:
    system, body = to_anthropic(
        [
            Message(role="system", content="Be brief."),
            Message.model_validate(
                {"role": "system", "type": "summary", "content": "Key points:\nAna: #1042"}
            ),
            Message(role="user", name="Ana", content="Where is my order?"),
            Message(role="user", name="Ana", content="It is #1042."),
            Message(role="assistant", content="", tool_calls=[openai_call("c1")]),
            Message(role="tool", tool_call_id="c1", content="shipped with UPS"),
            Message(role="assistant", content="It shipped with UPS."),
        ]
    )
    assert system == "Be brief.\n\nKey points:\nAna: #1042"
    assert [m["role"] for m in body] == ["user", "assistant", "user", "assistant"]
    assert [b["text"] for b in body[0]["content"]] == ["Where is my order?", "It is #1042."]
    assert body[1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "lookup", "input": {"q": 1}}
    ]
    assert body[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "shipped with UPS"}
    ]


def test_openai_converts_anthropic_blocks_and_puts_instructions_first() -> None:
    out = to_openai(
        [
            Message(role="user", content="hi"),
            Message(role="developer", content="Use tools."),
            Message(role="assistant", content=[{"type": "text", "text": "Looking."}, use("t1")]),
            Message(role="user", content=[result("t1"), {"type": "text", "text": "thanks"}]),
        ]
    )
    assert out[0] == {"role": "developer", "content": "Use tools."}
    assert out[2]["tool_calls"][0]["id"] == "t1"
    assert out[2]["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"q": "t1"}'}
    assert out[3] == {"role": "tool", "tool_call_id": "t1", "content": "found"}
    assert out[4] == {"role": "user", "content": [{"type": "text", "text": "thanks"}]}


def test_a_window_cut_inside_tool_calls_drops_the_orphans() -> None:
    window = [
        Message(role="user", content=[result("gone")]),  # its call fell out of the window
        Message(role="assistant", content="Anything else?"),
        Message(role="user", content="Check order 7."),
        Message(role="assistant", content=[use("pending")]),  # not answered yet
    ]
    _, body = to_anthropic(window)
    assert body == [
        {"role": "assistant", "content": [{"type": "text", "text": "Anything else?"}]},
        {"role": "user", "content": [{"type": "text", "text": "Check order 7."}]},
    ]
    assert to_openai(window) == [
        {"role": "assistant", "content": "Anything else?"},
        {"role": "user", "content": "Check order 7."},
    ]


# -- structural properties ----------------------------------------------------------------------

ROLES = st.sampled_from(["system", "developer", "user", "assistant", "summary"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("text"), ROLES, st.sampled_from(["hi", "", "order #7", "  "])),
        st.tuples(st.just("call"), st.sampled_from(["openai", "anthropic"]), st.integers(1, 3)),
        st.tuples(st.just("result"), st.sampled_from(["openai", "anthropic"]), st.integers(-1, 6)),
    ),
    max_size=25,
)


def build(ops: list[tuple[str, Any, Any]]) -> list[Message]:
    """Messages from ops; results answer earlier calls by index (-1: an unknown call)."""
    messages: list[Message] = []
    calls: list[str] = []
    for kind, style, arg in ops:
        if kind == "text":
            role = "system" if style == "summary" else style
            content_type = "summary" if style == "summary" else "message"
            messages.append(
                Message.model_validate({"role": role, "content": arg, "type": content_type})
            )
        elif kind == "call":
            ids = [f"c{len(calls) + k}" for k in range(arg)]
            calls += ids
            if style == "openai":
                messages.append(
                    Message(role="assistant", content="", tool_calls=[openai_call(i) for i in ids])
                )
            else:
                messages.append(Message(role="assistant", content=[use(i) for i in ids]))
        else:
            call_id = calls[arg] if 0 <= arg < len(calls) else "unknown"
            if style == "openai":
                messages.append(Message(role="tool", tool_call_id=call_id, content="r"))
            else:
                messages.append(Message(role="user", content=[result(call_id)]))
    return messages


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_anthropic_requests_are_always_well_formed(ops: list[tuple[str, Any, Any]]) -> None:
    system, body = to_anthropic(build(ops))
    assert system is None or system.strip()
    previous_calls: set[str] = set()
    for i, message in enumerate(body):
        assert message["role"] in ("user", "assistant")
        if i:
            assert message["role"] != body[i - 1]["role"]  # turns alternate
        blocks = message["content"]
        assert blocks
        kinds = [b["type"] for b in blocks]
        for block in blocks:
            if block["type"] == "text":
                assert block["text"].strip()
        if message["role"] == "assistant":
            assert "tool_result" not in kinds
            calls = {b["id"] for b in blocks if b["type"] == "tool_use"}
            following = body[i + 1]["content"] if i + 1 < len(body) else []
            answered = {b["tool_use_id"] for b in following if b["type"] == "tool_result"}
            assert calls <= answered  # every call is answered in the next turn
            previous_calls = calls
        else:
            assert "tool_use" not in kinds
            results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
            assert set(results) <= previous_calls  # every result follows its call
            assert len(results) == len(set(results))
            assert kinds == sorted(kinds, key=lambda k: k != "tool_result")  # results first
            previous_calls = set()


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_openai_requests_are_always_well_formed(ops: list[tuple[str, Any, Any]]) -> None:
    out = to_openai(build(ops))
    roles = [m["role"] for m in out]
    instructions = [r in ("system", "developer") for r in roles]
    assert instructions == sorted(instructions, reverse=True)  # instructions first
    pending: set[str] = set()
    open_calls: set[str] = set()
    for message in out:
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_calls  # answers the preceding call
            open_calls.discard(message["tool_call_id"])
            pending.discard(message["tool_call_id"])
            continue
        assert not pending  # every call was answered before anything else
        open_calls = set()
        if message["role"] == "assistant":
            assert message.get("content") is not None or message.get("tool_calls")
            ids = [c["id"] for c in message.get("tool_calls", [])]
            assert len(ids) == len(set(ids))
            pending = open_calls = set(ids)
    assert not pending
