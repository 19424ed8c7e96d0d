"""The recall benchmark's generated conversations."""

from __future__ import annotations

import json

import pytest

from benchmarks.recall_data import (
    TARGET_TOKENS,
    Conversation,
    approx_tokens,
    generate,
    message_text,
)


@pytest.fixture(scope="module")
def conversations() -> list[Conversation]:
    return generate(n_conversations=10, seed=0)


def test_deterministic_per_seed(conversations: list[Conversation]) -> None:
    assert generate(n_conversations=2, seed=0) == conversations[:2]
    other = generate(n_conversations=2, seed=1)
    assert [c.messages for c in other] != [c.messages for c in conversations[:2]]


def test_sizes_and_kinds(conversations: list[Conversation]) -> None:
    assert {c.kind for c in conversations} == {"friends", "agent"}
    for conv in conversations:
        assert 0.9 * TARGET_TOKENS <= conv.approx_tokens() <= 1.15 * TARGET_TOKENS
        assert sum(approx_tokens(m) for m in conv.messages) == conv.approx_tokens()
        assert 90 <= len(conv.questions) <= 110
        assert 15 <= len(conv.session_dates) <= 20
        assert conv.session_dates == sorted(conv.session_dates)


def test_every_answer_is_in_its_evidence(conversations: list[Conversation]) -> None:
    for conv in conversations:
        for q in conv.questions:
            assert 0 <= q.evidence_index < len(conv.messages)
            evidence = message_text(conv.messages[q.evidence_index]).casefold()
            assert q.answer_words
            for word in q.answer_words:
                assert word.casefold() in evidence, (conv.conversation_id, q)


def test_questions_cover_the_hard_kinds(conversations: list[Conversation]) -> None:
    kinds = {q.kind for c in conversations for q in c.questions}
    assert {"direct", "reply", "update", "tool"} <= kinds
    for conv in conversations:
        for q in conv.questions:
            if q.kind == "reply":
                # The turn before holds the question's words; the answer is in the reply.
                before = message_text(conv.messages[q.evidence_index - 1]).casefold()
                assert not all(w.casefold() in before for w in q.answer_words)
            if q.kind == "tool":
                content = conv.messages[q.evidence_index]["content"]
                assert content[0]["type"] == "tool_result"


def test_updates_come_after_the_first_version(conversations: list[Conversation]) -> None:
    seen = 0
    for conv in conversations:
        for q in conv.questions:
            if q.kind != "update":
                continue
            seen += 1
            evidence = conv.messages[q.evidence_index]
            # The first version is planted at least two sessions earlier, by the same person.
            assert evidence["metadata"]["session"] >= 3
            earlier = [
                m
                for m in conv.messages[: q.evidence_index]
                if m["metadata"]["session"] <= evidence["metadata"]["session"] - 2
                and m.get("name") == evidence.get("name")
            ]
            assert earlier
    assert seen >= 20


def test_messages_are_ready_to_append(conversations: list[Conversation]) -> None:
    for conv in conversations:
        json.dumps(conv.messages)
        previous_role = ""
        pending_tool: str | None = None
        for message in conv.messages:
            assert message["role"] in ("user", "assistant")
            assert {"session", "date"} <= set(message["metadata"])
            content = message["content"]
            if isinstance(content, str):
                assert content
                if message["role"] == "user":
                    assert message["name"] in conv.speakers
            else:
                block = content[0]
                if block["type"] == "tool_use":
                    assert message["role"] == "assistant"
                    pending_tool = block["id"]
                else:
                    assert block["type"] == "tool_result"
                    assert block["tool_use_id"] == pending_tool
                    assert "name" not in message
                    pending_tool = None
            if conv.kind == "agent":
                assert message["role"] != previous_role
            previous_role = message["role"]
