"""Long two-person conversations whose questions are hard for lexical search, with known
evidence turns.

Each conversation is 16-20 dated sessions of chatter with facts planted among it, written
from a :class:`~benchmarks.hard_recall_bank.Bank`. Question kinds:

* ``paraphrase``: the question and the turn that answers it share few words;
* ``neighbour``: the other speaker asks about the fact in the question's words and the
  answer is the short reply after it;
* ``when``: "when did X ...?", answered by the day the fact was said (its ISO date);
* ``month``: "what did X ... in May?", the month narrowing the fact down;
* ``multihop``: "where does X's cousin live?", answered by two turns (the cousin's name,
  then a later turn about that name that never says "cousin");
* ``update``: the fact is corrected in a later session; only the correction is evidence.
* ``relative`` (tuning split only, with ``relative=True``): a question about a fact of the
  last sessions asked with the time it was said relative to the last session's day ("...
  yesterday?", "... last week?", "... two weeks ago?"), as an agent asks at the end of it.

Filler uses the questions' everyday words (jobs, pets, holidays) without answering them, so
a word match alone is a weak signal. Two splits: ``tuning`` (the only one anything is tuned
on) and ``heldout`` (another bank, frozen before any tuning, and other seeds).

Run ``python -m benchmarks.hard_recall_data`` for statistics.
"""

# ruff: noqa: SIM905

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, replace
from datetime import date, timedelta
from typing import Any, Literal

from benchmarks.hard_recall_bank import Bank, Family
from benchmarks.hard_recall_heldout import HELDOUT
from benchmarks.hard_recall_tuning import TUNING
from benchmarks.recall_data import Conversation, Question

__all__ = ["SEEDS", "SPLITS", "HardQuestion", "Split", "evidence_holds_answer", "generate"]

Split = Literal["tuning", "heldout"]
SPLITS: tuple[Split, ...] = ("tuning", "heldout")
BANKS: dict[Split, Bank] = {"tuning": TUNING, "heldout": HELDOUT}
# Different seeds per split as well as different banks.
SEEDS: dict[Split, int] = {"tuning": 11, "heldout": 2027}
_MONTHS = (
    "January February March April May June July August September October November December"
).split()


@dataclass(frozen=True)
class HardQuestion(Question):
    """A :class:`~benchmarks.recall_data.Question` with every turn it needs.

    ``evidence`` holds all the evidence turns (two for ``multihop``); ``evidence_index`` is
    the one holding the answer words (the last). For ``when`` questions the answer word is
    the evidence turn's date, which is in its metadata rather than its text.
    """

    evidence: tuple[int, ...] = ()


@dataclass
class _Unit:
    """Turns to place in one session: ``(speaker, text)``, and the question they answer."""

    turns: list[tuple[int, str]]
    session: int
    answer_turn: int = -1  # which of ``turns`` holds the answer (-1: none asked here)
    question: tuple[str, tuple[str, ...], str] | None = None  # text, answer words, kind
    needs: tuple[_Unit, int] | None = None  # a multi-hop question's first hop
    when: bool = False  # the answer is this unit's date
    placed: list[int] | None = None  # message positions of ``turns`` once placed


class _Writer:
    def __init__(self, bank: Bank, rng: random.Random, n_sessions: int) -> None:
        self.bank = bank
        self.rng = rng
        self.n_sessions = n_sessions
        names = rng.sample(bank.names, 6)
        self.speakers = (names[0], names[1])
        self.relatives = names[2:]
        self.units: list[_Unit] = []
        self.taken: dict[str, set[str]] = {}  # values in use, per family: answers stay unique
        self._relations: set[tuple[int, str]] = set()
        self._bag: list[str] = []

    def draw(self, key: str, values: tuple[str, ...]) -> str:
        taken = self.taken.setdefault(key, set())
        value = self.rng.choice([v for v in values if v not in taken])
        taken.add(value)
        return value

    def fill(self, template: str, owner: int, **values: str) -> str:
        text = template.format(who=self.speakers[owner], other=self.speakers[1 - owner], **values)
        return text[:1].upper() + text[1:]

    def filler(self, speaker: int) -> str:
        """One or two chatter sentences, drawn without repeats until the bank runs out."""
        picks = []
        for _ in range(2 if self.rng.random() < 0.6 else 1):
            if not self._bag:
                self._bag = list(self.bank.filler)
                self.rng.shuffle(self._bag)
            picks.append(self.fill(self._bag.pop(), speaker))
        return " ".join(picks)

    def plant(self, family: Family, owner: int, value: str, dates: list[date]) -> None:
        rng = self.rng
        ask = rng.random() < 0.85
        correct = bool(family.corrections) and rng.random() < 0.25
        dialogue = bool(family.prompts) and rng.random() < 0.4
        high = self.n_sessions - 1 if not correct else self.n_sessions - 3
        session = rng.randint(0, max(0, high))
        if dialogue:
            prompt = self.fill(rng.choice(family.prompts), owner)  # asked of the owner
            reply = self.fill(rng.choice(family.replies), owner, value=value)
            unit = _Unit([(1 - owner, prompt), (owner, reply)], session, answer_turn=1)
        else:
            said = self.fill(rng.choice(family.says), owner, value=value)
            unit = _Unit([(owner, said)], session, answer_turn=0)
        self.units.append(unit)
        if not ask:
            return
        words = tuple(value.split())
        if correct:
            new = self.draw(family.key, family.values)
            text = self.fill(rng.choice(family.corrections), owner, value=new, old=value)
            later = rng.randint(session + 2, self.n_sessions - 1)
            question = self.fill(rng.choice(family.asks), owner)
            self.units.append(
                _Unit([(owner, text)], later, 0, (question, tuple(new.split()), "update"))
            )
            return
        kinds = ["paraphrase"] * 2 + ["when"] * bool(family.when_asks)
        kinds += ["month"] * bool(family.month_asks)
        kind = "neighbour" if dialogue else rng.choice(kinds)
        if kind == "when":
            unit.question = (self.fill(rng.choice(family.when_asks), owner), (), "when")
            unit.when = True
        elif kind == "month":
            month = _MONTHS[dates[session].month - 1]
            text = self.fill(rng.choice(family.month_asks), owner, month=month)
            unit.question = (text, words, "month")
        else:
            unit.question = (self.fill(rng.choice(family.asks), owner), words, kind)

    def plant_hop(self, person: str) -> None:
        rng, hop = self.rng, self.bank.hop
        owner = rng.randrange(2)
        relation = rng.choice([r for r in hop.relations if (owner, r) not in self._relations])
        self._relations.add((owner, relation))
        attribute = rng.choice(hop.attributes)
        value = self.draw(f"hop:{attribute.says[0]}", attribute.values)
        first = rng.randint(0, self.n_sessions - 3)
        intro = self.fill(rng.choice(hop.intros), owner, relation=relation, person=person)
        intro_unit = _Unit([(owner, intro)], first)
        # Anyone may bring the news about the person later: it never names the relation.
        teller = rng.randrange(2)
        said = self.fill(rng.choice(attribute.says), teller, person=person, value=value)
        question = self.fill(rng.choice(attribute.asks), owner, relation=relation)
        second = _Unit(
            [(teller, said)],
            rng.randint(first + 1, self.n_sessions - 1),
            0,
            (question, tuple(value.split()), "multihop"),
            needs=(intro_unit, 0),
        )
        self.units += [intro_unit, second]


def _dates(rng: random.Random, n_sessions: int) -> list[date]:
    # Within eleven months, so a month name points at one stretch of the conversation.
    day = date(2023, 1, 1) + timedelta(days=rng.randrange(0, 20))
    out = []
    for _ in range(n_sessions):
        out.append(day)
        day += timedelta(days=rng.randint(8, 18))
    return out


def _build(bank: Bank, rng: random.Random, index: int) -> Conversation:
    n_sessions = rng.randint(16, 20)
    dates = _dates(rng, n_sessions)
    writer = _Writer(bank, rng, n_sessions)
    for family in bank.families:
        for owner in (0, 1):
            if rng.random() < 0.85:
                writer.plant(family, owner, writer.draw(family.key, family.values), dates)
    for person in writer.relatives[: rng.randint(2, 4)]:
        writer.plant_hop(person)

    by_session: list[list[_Unit]] = [[] for _ in range(n_sessions)]
    for unit in writer.units:
        by_session[unit.session].append(unit)
    messages: list[dict[str, Any]] = []
    previous = -1

    def emit(speaker: int, text: str, session: int) -> int:
        nonlocal previous
        if speaker == previous:
            # Two turns in a row from one speaker read oddly: let the other react.
            reaction = writer.fill(rng.choice(bank.reactions), speaker)
            emit(1 - speaker, reaction, session)
        messages.append(
            {
                "role": "user",
                "name": writer.speakers[speaker],
                "content": text,
                "metadata": {"session": session + 1, "date": dates[session].isoformat()},
            }
        )
        previous = speaker
        return len(messages) - 1

    for session, units in enumerate(by_session):
        rng.shuffle(units)
        n_turns = max(rng.randint(26, 38), len(units) + 4)
        slots = sorted(rng.sample(range(2, n_turns - 1), len(units)))
        queue = list(zip(slots, units, strict=True))
        speaker = rng.randrange(2)  # who speaks first in an empty conversation
        for turn in range(n_turns):
            if queue and queue[0][0] == turn:
                _, unit = queue.pop(0)
                unit.placed = [emit(who, text, session) for who, text in unit.turns]
                continue
            if previous >= 0:
                speaker = 1 - previous if rng.random() < 0.85 else previous
            emit(speaker, writer.filler(speaker), session)
    questions: list[Question] = []
    for unit in writer.units:
        if unit.question is None or unit.placed is None:
            continue
        text, words, kind = unit.question
        answer = unit.placed[unit.answer_turn]
        evidence: tuple[int, ...] = (answer,)
        if unit.needs is not None:
            first, turn = unit.needs
            assert first.placed is not None
            evidence = (first.placed[turn], answer)
        if unit.when:
            words = (messages[answer]["metadata"]["date"],)
        questions.append(HardQuestion(text, words, answer, kind, evidence))
    questions.sort(key=lambda q: (q.evidence_index, q.question))
    return Conversation(
        f"{bank.name}-{index:02d}",
        "friends",
        writer.speakers,
        messages,
        questions,
        [d.isoformat() for d in dates],
    )


_SMALL = ("no", "one", "two", "three", "four", "five", "six")


def _relative_phrase(day: date, reference: date) -> str | None:
    """How someone on ``reference`` says ``day``, or None when it is too far back."""
    delta = (reference - day).days
    monday = reference - timedelta(days=reference.weekday())
    if delta == 0:
        return "today"
    if delta == 1:
        return "yesterday"
    if delta < 7:
        return f"{_SMALL[delta]} days ago"
    if monday - timedelta(days=7) <= day < monday:
        return "last week"
    weeks = round(delta / 7)
    if 2 <= weeks <= 3 and abs(delta - 7 * weeks) <= 3:
        return f"{_SMALL[weeks]} weeks ago"
    if (reference.year * 12 + reference.month) - (day.year * 12 + day.month) == 1:
        return "last month"
    return None


def _with_relative(conversation: Conversation) -> Conversation:
    """``conversation`` with a ``relative`` question beside each question about one turn
    said within about a month of its last session's day: the same question, asked with
    when the turn was said as the last session's day puts it."""
    reference = date.fromisoformat(conversation.session_dates[-1])
    added: list[Question] = []
    for q in conversation.questions:
        if not isinstance(q, HardQuestion) or q.kind not in ("paraphrase", "neighbour"):
            continue
        said = date.fromisoformat(conversation.messages[q.evidence_index]["metadata"]["date"])
        phrase = _relative_phrase(said, reference)
        if phrase is not None:
            text = f"{q.question.rstrip('?')} {phrase}?"
            added.append(replace(q, question=text, kind="relative"))
    questions = sorted(
        [*conversation.questions, *added], key=lambda q: (q.evidence_index, q.question)
    )
    return replace(conversation, questions=questions)


def generate(
    split: Split, n_conversations: int = 10, seed: int | None = None, *, relative: bool = False
) -> list[Conversation]:
    """``n_conversations`` conversations of ``split``; the same arguments always give the
    same conversations. ``seed`` defaults to the split's own (``SEEDS``). ``relative`` adds
    the ``relative`` questions (the tuning split only: the held-out split is frozen)."""
    if relative and split != "tuning":
        raise ValueError("relative-time questions are in the tuning split only")
    bank = BANKS[split]
    base = SEEDS[split] if seed is None else seed
    conversations = [
        _build(bank, random.Random(f"{split}:{base}:{index}"), index)
        for index in range(n_conversations)
    ]
    return [_with_relative(c) for c in conversations] if relative else conversations


def evidence_holds_answer(conversation: Conversation, question: Question) -> bool:
    """Whether every answer word is in the evidence turn's text (or, for ``when``, is its
    date)."""
    message = conversation.messages[question.evidence_index]
    if question.kind == "when":
        return question.answer_words == (message["metadata"]["date"],)
    text = str(message["content"]).casefold()
    return all(word.casefold() in text for word in question.answer_words)


def _main() -> None:
    for split in SPLITS:
        conversations = generate(split)
        kinds = Counter(q.kind for c in conversations for q in c.questions)
        n_messages = sum(len(c.messages) for c in conversations)
        tokens = sum(c.approx_tokens() for c in conversations) // len(conversations)
        print(
            f"{split}: {len(conversations)} conversations, {n_messages} messages "
            f"(~{tokens} tokens each), {sum(kinds.values())} questions: "
            + " ".join(f"{k}={v}" for k, v in sorted(kinds.items()))
        )


if __name__ == "__main__":
    _main()
