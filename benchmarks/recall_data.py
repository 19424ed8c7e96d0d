"""Seeded long conversations with planted facts, for a fact-retention benchmark.

Two kinds of conversation, mixed across a run:

* ``friends``: two people chatting over 15-20 dated sessions spread across months (like the
  LoCoMo dataset), mostly small talk and phatic turns, with facts planted among them;
* ``agent``: a named user and an assistant that calls tools (Anthropic ``tool_use`` /
  ``tool_result`` blocks), where some facts exist only inside tool results.

Each planted fact may come with a question whose answer words must reach the model's context.
Some facts change later (the question asks for the latest value: the evidence is the update);
some answers sit in the reply to the turn that holds the question's words. Unasked facts of
the same shapes are planted too, as distractors. Sizes are approximate (4 characters a token).

Run ``python -m benchmarks.recall_data`` for statistics.
"""

from __future__ import annotations

import json
import random
import string
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, Literal

from benchmarks.datafiles import load, tuples

__all__ = ["Conversation", "Question", "approx_tokens", "generate", "message_text"]

TARGET_TOKENS = 26_000
QUESTIONS_PER_CONVERSATION = 100
CHARS_PER_TOKEN = 4

Kind = Literal["friends", "agent"]


@dataclass(frozen=True)
class Question:
    """A question about one planted fact.

    ``answer_words`` must all appear in the context for the answer to count; they all appear
    in ``messages[evidence_index]``. ``kind`` says how the fact was planted: ``direct``,
    ``reply`` (the answer is the reply to the turn holding the question's words), ``update``
    (a changed fact: the answer is the newest value) or ``tool`` (only in a tool result).
    """

    question: str
    answer_words: tuple[str, ...]
    evidence_index: int
    kind: str


@dataclass
class Conversation:
    """One generated conversation: messages ready to append, and questions about them."""

    conversation_id: str
    kind: Kind
    speakers: tuple[str, str]
    messages: list[dict[str, Any]]
    questions: list[Question]
    session_dates: list[str] = field(default_factory=list)

    def approx_tokens(self) -> int:
        """Approximate size in tokens (4 characters a token)."""
        return sum(approx_tokens(m) for m in self.messages)


def message_text(message: dict[str, Any]) -> str:
    """Everything a model would read of a message, as one string."""
    content = message["content"]
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if block["type"] == "text":
            parts.append(block["text"])
        elif block["type"] == "tool_use":
            parts.append(f"{block['name']} {json.dumps(block['input'])}")
        elif block["type"] == "tool_result":
            parts.append(str(block["content"]))
    return "\n".join(parts)


def approx_tokens(message: dict[str, Any]) -> int:
    """Approximate tokens of one message (4 characters a token, at least 1)."""
    return max(1, len(message_text(message)) // CHARS_PER_TOKEN)


# ---------------------------------------------------------------------------------------
# Vocabulary. Invented names keep facts unambiguous; shared everyday words keep BM25 honest.

# The vocabulary, the fact templates and the small talk: benchmarks/recall_data.json.
_DATA = load("recall_data")

_FIRST_NAMES = list(_DATA["first_names"])
_CITIES = list(_DATA["cities"])
_PET_KINDS = list(_DATA["pet_kinds"])
_PET_NAMES = list(_DATA["pet_names"])
_RELATIVES = list(_DATA["relatives"])
_HOBBIES = list(_DATA["hobbies"])
_FAVOURITES = {k: list(v) for k, v in _DATA["favourites"].items()}
_COUNTED = tuples(_DATA["counted"])
_RESTAURANTS = list(_DATA["restaurants"])
_BANDS = list(_DATA["bands"])
_VENUES = list(_DATA["venues"])
_GIFTS = list(_DATA["gifts"])
_JOBS = list(_DATA["jobs"])
_COMPANIES = list(_DATA["companies"])
_CAR_MODELS = list(_DATA["car_models"])
_COLORS = list(_DATA["colors"])
_ALLERGENS = list(_DATA["allergens"])
_EVENTS = list(_DATA["events"])
_PLACES = list(_DATA["places"])
_SPORTS = list(_DATA["sports"])
_PARKS = list(_DATA["parks"])
_BOOKS = list(_DATA["books"])
_AUTHORS = list(_DATA["authors"])
_DIETS = list(_DATA["diets"])
_SIZES = list(_DATA["sizes"])
_ITEMS = list(_DATA["items"])
_STATUSES = list(_DATA["statuses"])
_CARRIERS = list(_DATA["carriers"])
_PLANS = list(_DATA["plans"])
_ROOMS = list(_DATA["rooms"])
_WEEKDAYS = list(_DATA["weekdays"])
_MONTHS = list(_DATA["months"])
_STREETS = list(_DATA["streets"])
_TRIPS = list(_DATA["trips"])
_CONDITIONS = list(_DATA["conditions"])
_SIGHTS = list(_DATA["sights"])


def _draw_number(rng: random.Random, pool: str) -> str:
    """Values that are made up on the spot rather than drawn from a list."""
    if pool in ("n", "n1", "n2"):
        return str(rng.randint(3, 60))
    if pool == "age":
        return str(rng.randint(2, 14))
    if pool == "days":
        return str(rng.randint(3, 16))
    if pool == "day":
        return str(rng.randint(1, 28))
    if pool == "oid":
        return str(rng.randint(1000, 99999))
    if pool == "amt":
        return f"{rng.randint(15, 480)}.{rng.randint(0, 99):02d}"
    if pool == "budget":
        return str(rng.randrange(800, 9000, 50))
    if pool == "trk":
        return "1Z" + "".join(rng.choices(string.ascii_uppercase + string.digits, k=10))
    if pool == "ph":
        return f"555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}"
    if pool == "seats":
        return str(rng.randint(2, 250))
    if pool == "temp":
        return str(rng.randint(-8, 36))
    if pool == "gate":
        return f"{rng.choice('ABCDEF')}{rng.randint(1, 40)}"
    if pool == "seat":
        return f"{rng.randint(1, 38)}{rng.choice('ABCDEF')}"
    if pool == "flight":
        return f"{rng.choice(['TP', 'LH', 'KL', 'AC', 'BA'])}{rng.randint(100, 2999)}"
    if pool == "ref":
        return "".join(rng.choices(string.ascii_uppercase, k=6))
    if pool == "sku":
        return f"SKU-{rng.randint(1000, 9999)}-{rng.choice(['BL', 'GR', 'XL', 'SM'])}"
    if pool == "num":
        return str(rng.randint(2, 250))
    if pool == "time":
        return f"{rng.randint(8, 17)}:{rng.choice(['00', '15', '30', '45'])}"
    raise KeyError(pool)


_POOLS: dict[str, tuple[str, ...]] = {
    "person": tuple(_FIRST_NAMES),
    "city": tuple(_CITIES),
    "kind": tuple(_PET_KINDS),
    "pet": tuple(_PET_NAMES),
    "rel": tuple(_RELATIVES),
    "hobby": tuple(_HOBBIES),
    "restaurant": tuple(_RESTAURANTS),
    "band": tuple(_BANDS),
    "venue": tuple(_VENUES),
    "gift": tuple(_GIFTS),
    "job": tuple(_JOBS),
    "company": tuple(_COMPANIES),
    "model": tuple(_CAR_MODELS),
    "color": tuple(_COLORS),
    "allergen": tuple(_ALLERGENS),
    "event": tuple(_EVENTS),
    "place": tuple(_PLACES),
    "sport": tuple(_SPORTS),
    "park": tuple(_PARKS),
    "book": tuple(_BOOKS),
    "author": tuple(_AUTHORS),
    "diet": tuple(_DIETS),
    "size": tuple(_SIZES),
    "item": tuple(_ITEMS),
    "status": tuple(_STATUSES),
    "carrier": tuple(_CARRIERS),
    "plan": tuple(_PLANS),
    "room": tuple(_ROOMS),
    "weekday": tuple(_WEEKDAYS),
    "month": tuple(_MONTHS),
    "street": tuple(_STREETS),
    "trip": tuple(_TRIPS),
    "cond": tuple(_CONDITIONS),
    "sight": tuple(_SIGHTS),
}


# ---------------------------------------------------------------------------------------
# Fact templates. A turn is (who, text): "o" is the fact's owner, "x" the other speaker;
# in agent conversations "o" is the user, "x" the assistant, "call" a tool_use (text is the
# tool name, args follow) and "result" a tool_result. Placeholders name a pool; a trailing
# digit draws a second value from the same pool (city1, city2).


@dataclass(frozen=True)
class _Turn:
    who: str
    text: str
    args: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class _Fact:
    name: str
    kind: str
    key: str
    turns: tuple[_Turn, ...]
    evidence: int
    questions: tuple[str, ...]
    answer: tuple[str, ...]
    # For a changed fact: the later turns, the index of the evidence among them, and the
    # fills that change.
    update: tuple[_Turn, ...] = ()
    agent: bool = False
    # Facts sharing a slot cannot both be planted for one owner and key (their questions
    # would be ambiguous); ``once`` facts are planted at most once per owner.
    slot: str = ""
    once: bool = False


def _t(who: str, text: str, **args: str) -> _Turn:
    return _Turn(who, text, tuple(args.items()))


def _fact(data: dict[str, Any]) -> _Fact:
    """A fact template from its JSON form."""

    def turns(items: list[dict[str, Any]]) -> tuple[_Turn, ...]:
        return tuple(_Turn(t["who"], t["text"], tuples(t["args"])) for t in items)

    fields = {k: tuples(v) for k, v in data.items()}
    fields["turns"], fields["update"] = turns(data["turns"]), turns(data["update"])
    return _Fact(**fields)


_FRIEND_FACTS: tuple[_Fact, ...] = tuple(_fact(f) for f in _DATA["friend_facts"])

_AGENT_FACTS: tuple[_Fact, ...] = tuple(_fact(f) for f in _DATA["agent_facts"])

# Which fill a template's question needs answered, when it offers several questions: the
# n-th question of these templates asks about the n-th fill listed here.
_QUESTION_ANSWERS: dict[str, tuple[tuple[str, ...], ...]] = tuples(_DATA["question_answers"])

# ---------------------------------------------------------------------------------------
# Small talk. Everyday words on purpose: pets, trips, classes, dinners, orders.

_PHATIC: tuple[str, ...] = tuples(_DATA["phatic"])
_SMALL_TALK = tuples(_DATA["small_talk"])
_FILLS: dict[str, tuple[str, ...]] = tuples(_DATA["fills"])

_AGENT_SMALL = tuples(_DATA["agent_small"])
_AGENT_TOPICS = tuples(_DATA["agent_topics"])
_AGENT_PHATIC = tuples(_DATA["agent_phatic"])


# ---------------------------------------------------------------------------------------
# Assembly.


@dataclass
class _Planned:
    """A fact's turns, ready to place, with the question (if asked) attached to one turn."""

    turns: list[tuple[str, Any]]  # (who, content)
    question: tuple[str, tuple[str, ...], str] | None = None  # text, answer words, kind
    evidence: int = 0
    session_floor: int = 0  # earliest session (for updates)
    session_ceiling: int = 10_000  # latest session (for an update's first version)
    group: int = -1  # an update's two halves share a group


class _Builder:
    def __init__(self, rng: random.Random, kind: Kind, index: int) -> None:
        self.rng = rng
        self.kind = kind
        self.conversation_id = f"{kind}-{index:02d}"
        self._tool_ids = 0
        names = rng.sample(_FIRST_NAMES, 2)
        self.speakers = (names[0], names[1] if kind == "friends" else "assistant")
        self._used_keys: set[tuple[str, str, str]] = set()
        self._shuffled: dict[str, list[str]] = {}

    def draw(self, pool: str) -> str:
        """A value from a pool, without repeats until the pool runs out."""
        if pool not in _POOLS:
            return _draw_number(self.rng, pool)
        bag = self._shuffled.get(pool)
        if not bag:
            bag = list(_POOLS[pool])
            self.rng.shuffle(bag)
            self._shuffled[pool] = bag
        return bag.pop()

    def tool_id(self) -> str:
        self._tool_ids += 1
        return f"toolu_{self.conversation_id.replace('-', '')}_{self._tool_ids:04d}"

    def _fills(self, fact: _Fact, owner: int) -> dict[str, str] | None:
        fills: dict[str, str] = {}
        names = self.speakers
        fills["o"] = names[owner]
        fills["x"] = names[1 - owner]
        if fact.name in ("count", "jars"):
            counted, do, done = self.rng.choice(_COUNTED)
            fills.update(counted=counted, do=do, done=done)
        if fact.key == "fav" or fact.name in ("favourite", "favchange"):
            fav = self.rng.choice(sorted(_FAVOURITES))
            values = self.rng.sample(_FAVOURITES[fav], 2)
            fills.update(fav=fav, favval=values[0], favval1=values[0], favval2=values[1])
        if fact.name == "diet":
            first, second = self.rng.sample(_DIETS, 2)
            fills.update(diet1=first, diet2=second)
        key_value = fills.get(fact.key) or self.draw(fact.key.rstrip("12"))
        fills.setdefault(fact.key, key_value)
        used = (fact.slot or fact.name, names[owner], "" if fact.once else key_value)
        if used in self._used_keys:
            return None
        self._used_keys.add(used)
        texts = [t.text for t in fact.turns + fact.update] + list(fact.questions)
        texts += [v for t in fact.turns + fact.update for _, v in t.args]
        for text in texts:
            for _, name, _, _ in string.Formatter().parse(text):
                if name and name not in fills:
                    fills[name] = self.draw(name.rstrip("12"))
                    if name.endswith("2") and fills[name] == fills.get(name[:-1] + "1"):
                        fills[name] = self.draw(name.rstrip("12"))
        return fills

    def _content(self, turn: _Turn, fills: dict[str, str], call_id: list[str]) -> Any:
        if turn.who == "call":
            call_id[0] = self.tool_id()
            args = {key: value.format(**fills) for key, value in turn.args}
            return [{"type": "tool_use", "id": call_id[0], "name": turn.text, "input": args}]
        if turn.who == "result":
            return [
                {
                    "type": "tool_result",
                    "tool_use_id": call_id[0],
                    "content": turn.text.format(**fills),
                }
            ]
        return turn.text.format(**fills)

    def plan(self, fact: _Fact, ask: bool, group: int) -> list[_Planned] | None:
        owner = self.rng.randrange(2) if self.kind == "friends" else 0
        fills = self._fills(fact, owner)
        if fills is None:
            return None
        call_id = [""]

        def who(turn: _Turn) -> str:
            if turn.who in ("o", "x"):
                return str(owner if turn.who == "o" else 1 - owner)
            return turn.who

        first = _Planned([(who(t), self._content(t, fills, call_id)) for t in fact.turns])
        planned = [first]
        evidence_part, evidence = first, fact.evidence
        if fact.update:
            second = _Planned([(who(t), self._content(t, fills, call_id)) for t in fact.update])
            first.group = second.group = group
            planned.append(second)
            evidence_part, evidence = second, 0
        if ask:
            choice = self.rng.randrange(len(fact.questions))
            answer_fills = _QUESTION_ANSWERS.get(fact.name, (fact.answer,) * 4)[choice]
            words = tuple(w for name in answer_fills for w in fills[name].split())
            evidence_part.question = (fact.questions[choice].format(**fills), words, fact.kind)
            evidence_part.evidence = evidence
        return planned


def _small_talk(builder: _Builder, speaker: int) -> str:
    rng = builder.rng
    x = builder.speakers[1 - speaker]
    if rng.random() < 0.3:
        return rng.choice(_PHATIC).format(x=x)
    sentences = []
    for _ in range(rng.choice((1, 2, 2, 3))):
        template = rng.choice(_SMALL_TALK)
        fills = {
            name: rng.choice(_FILLS[name]) if name in _FILLS else rng.choice(_POOLS[name])
            for _, name, _, _ in string.Formatter().parse(template)
            if name
        }
        sentences.append(template.format(**fills))
    if rng.random() < 0.2:
        sentences.insert(0, rng.choice(("Haha", "Oh", "Honestly", "Ok so", x)) + ",")
    return " ".join(sentences)


def _agent_small_talk(builder: _Builder) -> list[tuple[str, Any]]:
    rng = builder.rng
    if rng.random() < 0.3:
        user, assistant = rng.choice(_AGENT_PHATIC)
        return [("0", user), ("1", assistant)]
    user, assistant = rng.choice(_AGENT_SMALL)
    fills = {
        "dish": rng.choice(_FILLS["dish"]),
        "topic": rng.choice(_AGENT_TOPICS),
        "rel": rng.choice(_RELATIVES),
        "meal": rng.choice(_FILLS["meal"]),
        "color": rng.choice(_COLORS),
        "n": str(rng.randint(5, 40)),
    }
    return [("0", user.format(**fills)), ("1", assistant.format(**fills))]


def _plan_facts(builder: _Builder, n_sessions: int) -> list[_Planned]:
    rng = builder.rng
    facts = _FRIEND_FACTS if builder.kind == "friends" else _AGENT_FACTS
    planned: list[_Planned] = []
    asked = 0
    extra = 0
    group = 0
    attempts = 0
    # About 100 asked facts plus 40% more unasked ones of the same shapes as distractors.
    while (asked < QUESTIONS_PER_CONVERSATION or extra < 40) and attempts < 5000:
        attempts += 1
        fact = rng.choice(facts)
        ask = asked < QUESTIONS_PER_CONVERSATION and (extra >= 40 or rng.random() < 0.72)
        parts = builder.plan(fact, ask, group)
        if parts is None:
            continue
        if len(parts) == 2:
            group += 1
            first_session = rng.randrange(0, max(1, n_sessions // 2))
            parts[0].session_ceiling = first_session
            parts[1].session_floor = first_session + rng.randint(2, max(2, n_sessions // 2))
        planned.extend(parts)
        if ask:
            asked += 1
        else:
            extra += 1
    return planned


def _build(rng: random.Random, kind: Kind, index: int) -> Conversation:
    builder = _Builder(rng, kind, index)
    n_sessions = rng.randint(15, 20)
    day = date(2023, 1, 1) + timedelta(days=rng.randrange(0, 240))
    session_dates: list[date] = []
    for _ in range(n_sessions):
        session_dates.append(day)
        day += timedelta(days=rng.randint(4, 16))

    by_session: list[list[_Planned]] = [[] for _ in range(n_sessions)]
    for part in _plan_facts(builder, n_sessions):
        low = min(part.session_floor, n_sessions - 1)
        high = min(part.session_ceiling, n_sessions - 1)
        by_session[rng.randint(low, max(low, high))].append(part)

    messages: list[dict[str, Any]] = []
    questions: list[Question] = []
    budget = TARGET_TOKENS * CHARS_PER_TOKEN / n_sessions

    def emit(who: str, content: Any, session: int) -> None:
        meta = {"session": session + 1, "date": session_dates[session].isoformat()}
        if who in ("call", "1") and kind == "agent":
            messages.append({"role": "assistant", "content": content, "metadata": meta})
        elif who == "result":
            messages.append({"role": "user", "content": content, "metadata": meta})
        else:
            speaker = int(who)
            message = {
                "role": "user",
                "content": content,
                "name": builder.speakers[speaker],
                "metadata": meta,
            }
            messages.append(message)

    for session in range(n_sessions):
        parts = by_session[session]
        rng.shuffle(parts)
        marks = sorted(rng.uniform(0.05, 0.95) * budget for _ in parts)
        chars = 0.0
        last = 1
        placed = 0
        opener = rng.randrange(2) if kind == "friends" else 0
        units: list[list[tuple[str, Any]]] = []
        if kind == "friends":
            units.append([(str(opener), _small_talk(builder, opener))])
        else:
            name = builder.speakers[0]
            units.append([("0", f"Hi, it's {name} again."), ("1", f"Welcome back, {name}!")])
        while chars < budget or placed < len(parts):
            if placed < len(parts) and chars >= marks[placed]:
                part = parts[placed]
                placed += 1
                units.append([*part.turns, ("q", part)])
            elif kind == "friends":
                speaker = 1 - last if rng.random() < 0.85 else last
                units.append([(str(speaker), _small_talk(builder, speaker))])
                last = speaker
            else:
                units.append(_agent_small_talk(builder))
            for who, content in units[-1]:
                if who != "q":
                    chars += len(message_text({"content": content}))
        units.append(
            [(str(1 - last), rng.choice(("Talk soon!", "Bye!", "Catch you later!")))]
            if kind == "friends"
            else [("0", "That's everything, thanks."), ("1", "Anytime. Talk soon!")]
        )
        previous = ""
        for unit in units:
            positions: list[int] = []
            for who, content in unit:
                if who == "q":
                    assert isinstance(content, _Planned)
                    if content.question is not None:
                        text, words, qkind = content.question
                        evidence = positions[content.evidence]
                        questions.append(Question(text, words, evidence, qkind))
                    continue
                if kind == "friends" and who == previous:
                    # Two turns in a row from one speaker read oddly: let the other react.
                    reaction = rng.choice(_PHATIC).format(x=builder.speakers[int(who)])
                    emit(str(1 - int(who)), reaction, session)
                positions.append(len(messages))
                emit(who, content, session)
                previous = who
    questions.sort(key=lambda q: q.evidence_index)
    return Conversation(
        builder.conversation_id,
        kind,
        builder.speakers,
        messages,
        questions,
        [d.isoformat() for d in session_dates],
    )


def generate(n_conversations: int = 10, seed: int = 0) -> list[Conversation]:
    """``n_conversations`` conversations, alternately ``friends`` and ``agent`` (60/40).

    The same ``seed`` always gives the same conversations.
    """
    conversations = []
    for index in range(n_conversations):
        rng = random.Random(f"{seed}:{index}")
        kind: Kind = "agent" if index % 5 in (1, 3) else "friends"
        conversations.append(_build(rng, kind, index))
    return conversations


def _main() -> None:
    conversations = generate()
    print(f"{'conversation':<14}{'kind':<9}{'messages':>9}{'~tokens':>9}{'questions':>10}  kinds")
    for conv in conversations:
        kinds = Counter(q.kind for q in conv.questions)
        detail = " ".join(f"{k}={v}" for k, v in sorted(kinds.items()))
        print(
            f"{conv.conversation_id:<14}{conv.kind:<9}{len(conv.messages):>9}"
            f"{conv.approx_tokens():>9}{len(conv.questions):>10}  {detail}"
        )


if __name__ == "__main__":
    _main()
