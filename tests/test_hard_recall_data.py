"""The hard recall benchmark's generator: deterministic, evidence ids right, splits apart."""

from __future__ import annotations

import hashlib
from datetime import date, timedelta
from pathlib import Path

import pytest

from benchmarks import hard_recall_heldout
from benchmarks.hard_recall_data import (
    BANKS,
    SPLITS,
    HardQuestion,
    Split,
    evidence_holds_answer,
    generate,
)
from benchmarks.recall_data import Conversation

# The held-out bank is frozen: nothing may be tuned on it. Changing these digests is changing
# the held-out split, which invalidates every figure measured on it: the data file's, and the
# bank loaded from it (the same bank as when it was a Python literal, digest e9fb55f6...).
HELDOUT_SHA256 = "26a8a5a69f7cc2d7ec4d6347ebc77a268eb00ca49fc5db09a2fdc981079cfa89"
HELDOUT_BANK_SHA256 = "9c2e6cb6a6ce834d133d6ceccee836ef716f72f61b9ea839988b308037aaaccc"
RELATIONS = {r for bank in BANKS.values() for r in bank.hop.relations}


@pytest.fixture(scope="module", params=SPLITS)
def split(request: pytest.FixtureRequest) -> tuple[Split, list[Conversation]]:
    name: Split = request.param
    return name, generate(name, 3)


def test_heldout_bank_is_frozen() -> None:
    data = Path(hard_recall_heldout.__file__).with_suffix(".json").read_bytes()
    assert hashlib.sha256(data).hexdigest() == HELDOUT_SHA256
    loaded = repr(hard_recall_heldout.HELDOUT).encode()
    assert hashlib.sha256(loaded).hexdigest() == HELDOUT_BANK_SHA256


def test_deterministic_and_seeded(split: tuple[Split, list[Conversation]]) -> None:
    name, conversations = split
    assert generate(name, 3) == conversations
    assert generate(name, 1, seed=5)[0].messages != conversations[0].messages
    assert len({c.conversation_id for c in conversations}) == 3


def test_splits_share_no_vocabulary() -> None:
    tuning, heldout = BANKS["tuning"], BANKS["heldout"]
    assert not set(tuning.names) & set(heldout.names)
    assert not set(tuning.filler) & set(heldout.filler)
    values = {v for f in tuning.families for v in f.values}
    values |= {v for a in tuning.hop.attributes for v in a.values}
    assert not values & {v for f in heldout.families for v in f.values}
    assert not values & {v for a in heldout.hop.attributes for v in a.values}
    says = {t for f in tuning.families for t in f.says + f.asks}
    assert not says & {t for f in heldout.families for t in f.says + f.asks}
    for bank in (tuning, heldout):
        # Within a bank, a multi-hop answer never doubles as another fact's answer.
        hop_values = {v for a in bank.hop.attributes for v in a.values}
        assert not hop_values & {v for f in bank.families for v in f.values}
    first = generate("tuning", 1)[0].messages
    assert first != generate("heldout", 1)[0].messages


def test_evidence_ids_hold_the_answers(split: tuple[Split, list[Conversation]]) -> None:
    _, conversations = split
    kinds: set[str] = set()
    for conv in conversations:
        assert 15 <= len(conv.questions) <= 40
        for q in conv.questions:
            assert isinstance(q, HardQuestion)
            kinds.add(q.kind)
            assert q.evidence[-1] == q.evidence_index
            assert all(0 <= e < len(conv.messages) for e in q.evidence)
            assert evidence_holds_answer(conv, q), (conv.conversation_id, q)
    assert kinds == {"paraphrase", "neighbour", "when", "month", "multihop", "update"}


def _text(conv: Conversation, index: int) -> str:
    return str(conv.messages[index]["content"])


def test_each_kind_is_built_as_described(split: tuple[Split, list[Conversation]]) -> None:
    _, conversations = split
    for conv in conversations:
        for q in conv.questions:
            assert isinstance(q, HardQuestion)
            evidence = conv.messages[q.evidence_index]
            if q.kind == "when":
                assert q.answer_words == (evidence["metadata"]["date"],)
            if q.kind == "neighbour":
                # The other speaker asked about it the turn before; the answer is the reply.
                prompt = conv.messages[q.evidence_index - 1]
                assert prompt["name"] != evidence["name"]
                assert _text(conv, q.evidence_index - 1).endswith("?")
                assert evidence["name"] in _text(conv, q.evidence_index - 1)  # asked of them
            if q.kind == "multihop":
                first, second = q.evidence
                assert first < second
                # The second hop names the person, never the relation the question asks by.
                person = _text(conv, second).split()[0]
                relations = [r for r in RELATIONS if f"'s {r} " in q.question]
                assert len(relations) == 1
                assert person in _text(conv, first)
                assert relations[0] in _text(conv, first)
                assert relations[0] not in _text(conv, second)
            if q.kind == "update":
                # An earlier turn said something else; the newest value is the answer.
                later = [
                    i
                    for i, m in enumerate(conv.messages)
                    if i > q.evidence_index and evidence_holds_answer_at(conv, q, i)
                ]
                assert later == []
            if q.kind == "month":
                day = date.fromisoformat(evidence["metadata"]["date"])
                assert day.strftime("%B") in q.question


def evidence_holds_answer_at(conv: Conversation, q: HardQuestion, index: int) -> bool:
    text = _text(conv, index).casefold()
    return all(w.casefold() in text for w in q.answer_words)


def test_relative_questions_are_the_tuning_splits_only_and_say_when() -> None:
    with pytest.raises(ValueError, match="tuning split only"):
        generate("heldout", 1, relative=True)
    plain = generate("tuning", 3)
    conversations = generate("tuning", 3, relative=True)
    relative = 0
    for conv, before in zip(conversations, plain, strict=True):
        # The tuning split's own questions are unchanged; relative ones come beside them.
        assert [q for q in conv.questions if q.kind != "relative"] == before.questions
        reference = date.fromisoformat(conv.session_dates[-1])
        for q in conv.questions:
            if q.kind != "relative":
                continue
            relative += 1
            assert isinstance(q, HardQuestion)
            assert evidence_holds_answer(conv, q)
            said = date.fromisoformat(conv.messages[q.evidence_index]["metadata"]["date"])
            delta = (reference - said).days
            if q.question.endswith(" yesterday?"):
                assert delta == 1
            elif q.question.endswith(" today?"):
                assert delta == 0
            elif q.question.endswith(" last week?"):
                monday = reference - timedelta(days=reference.weekday())
                assert monday - timedelta(days=7) <= said < monday
            elif q.question.endswith(" last month?"):
                assert (said.month % 12) + 1 == reference.month
            else:
                assert q.question.endswith(" ago?"), q.question
    assert relative >= 5
