"""Which sentences carry facts: the extractive summarizer's scoring, phatic filter and
near-duplicate rule. Pure functions over text, fast enough for hundreds of messages in a few
milliseconds (regular expressions and the project's analyzer, whose terms are memoised).

A sentence scores for what a later question could ask about:

* names and places (capitalised words that are not the sentence's first word, nor a
  speaker's name: the speaker is on the line already);
* numbers, more when they carry a unit or context (amounts, counts, ``#1042``, ``SKU-77``,
  ``1Z9...``, phone numbers, e-mail addresses);
* dates and times (``May 8``, ``2023-05-08``, ``3pm``, ``11:15``, weekdays, "next Tuesday");
* preferences ("I love / prefer / hate", "my favourite", allergies);
* decisions and changes ("decided", "switched to", "actually", "instead", "no longer");
* events (adopted, bought, joined, booked, moved, named...), facts inside tool results;
* words that occur once in the batch (specific rather than recurring chatter).

Hedges ("maybe", "at some point") cost a little. Phatic turns (greetings, thanks,
acknowledgements, laughter, short agreement) are dropped outright: after removing their
phatic words and the speakers' names nothing is left.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from compozy_memory._search.analysis import analyze

__all__ = [
    "content_terms",
    "is_phatic",
    "is_relative",
    "near_duplicates",
    "score",
    "split_sentences",
]

_SENTENCE = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=\S)|\n+")

_MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December|"
    "Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec"
)
_WEEKDAYS = "Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday"
_DAY_DATE = re.compile(
    rf"\b(?:{_MONTHS})\.? \d{{1,2}}(?:st|nd|rd|th)?\b|\b\d{{1,2}}(?:st|nd|rd|th)? (?:of )?"
    rf"(?:{_MONTHS})\b|\b\d{{4}}-\d{{2}}-\d{{2}}\b|\b\d{{1,2}}/\d{{1,2}}(?:/\d{{2,4}})?\b"
)
_MONTH = re.compile(rf"\b(?:{_MONTHS})\b")
_WEEKDAY = re.compile(rf"\b(?:{_WEEKDAYS})s?\b")
_TIME = re.compile(
    r"\b\d{1,2}(?::\d{2})?\s?(?:am|pm|a\.m\.|p\.m\.)(?!\w)|\b\d{1,2}:\d{2}\b", re.IGNORECASE
)
_RELATIVE = re.compile(
    r"\b(?:today|tonight|tomorrow|yesterday|(?:next|last|this) (?:week|weekend|month|year|"
    rf"{_WEEKDAYS.lower()}|fall|spring|summer|winter)|in the (?:fall|spring|summer|winter))\b",
    re.IGNORECASE,
)
_ID = re.compile(
    r"#\w+|\b[\w.+-]+@[\w-]+\.[\w.]+\b|\b\d{3}[-. ]\d{3}[-. ]\d{4}\b|"
    r"\b(?=[A-Z0-9-]*\d)(?=[A-Z0-9-]*[A-Z])[A-Z0-9][A-Z0-9-]{1,}\b"
)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_AMOUNT = re.compile(
    r"[$€£¥]\s?\d|\b\d+(?:[.,]\d+)?\s?(?:%|percent|dollars?|euros?|pounds?|usd|eur|gbp|km|kg|"
    r"mi|miles?|lbs?|minutes?|hours?|days?|weeks?|months?|years?|guests?|people|seats?|units?|"
    r"items?|times|C|F)\b"
)
_PREFERENCE = re.compile(
    r"\b(?:love[sd]?|prefer(?:s|red)?|hate[sd]?|favou?rite|allergic|can'?t stand|obsessed|"
    r"enjoy(?:s|ed)?|go-to|nothing beats|fan of|can'?t eat|don'?t eat)\b",
    re.IGNORECASE,
)
_CHANGE = re.compile(
    r"\b(?:decided|decide|decision|switched|switching|changed? (?:my|our|his|her|their) mind|"
    r"change of plans?|no longer|instead|actually|updated?|updates|ended up|anymore|"
    r"cancel(?:l?ed)?|postponed|rescheduled|confirmed|agreed to|going with|from now on)\b",
    re.IGNORECASE,
)
_EVENT = re.compile(
    r"\b(?:adopted|bought|booked|joined|start(?:ed|ing|s)?|signed up|moving|moved|named|"
    r"call(?:ed)? (?:it|him|her|them)|turned|visiting|flying in|got back|hired|ordered|married|"
    r"engaged|born|graduated|won|lost|finished|reading|volunteer\w*|planted|baked|diagnosed|"
    r"work(?:s|ing)? (?:at|for|as)|lives? in|living in|ship(?:ped)? to|address|got|bought|"
    r"picked|chose|got a|we're at|is on|are on)\b",
    re.IGNORECASE,
)
# Commitments and plans: what someone will do, agreed or promised.
_COMMIT = re.compile(
    r"\b(?:will|won't|(?:i|we|you|they|he|she)'ll|going to|plan(?:s|ned|ning)? to|promised?|"
    r"agreed|we decided|let's|committed|deadline|due (?:on|by)|scheduled|appointment)\b",
    re.IGNORECASE,
)
# Quantities written out.
_NUMBER_WORD = re.compile(
    r"\b(?:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|forty|"
    r"fifty|hundred|thousand|million|dozen|half|first|second|third)\b",
    re.IGNORECASE,
)
_HEDGE = re.compile(
    r"\b(?:maybe|thinking about|at some point|someday|i wish|might|kind of|sort of|i guess|"
    r"not sure|no idea|wish me luck)\b",
    re.IGNORECASE,
)
_CAPITALISED = re.compile(r"\b[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*")
_STARTS = frozenset({". ", "! ", "? ", '" ', ": "})
_NOT_NAMES = frozenset(
    """I I'm I've I'll I'd OK Ok Oh Haha Hey Hi Hello Thanks Thank Yes No Omg Lol Wow Aww Ugh
    Sure Great Good Nice Cool Okay Right So And But Or The A An It It's This That""".split()  # noqa: SIM905
)

# Words that carry no fact on their own: greetings, thanks, laughter, agreement, sign-offs.
_PHATIC_WORDS = """
hey hi hello hiya yo morning evening afternoon night good goodnight bye goodbye later soon
talk catch thanks thank thx ty welcome cheers haha hahaha hahahaha lol lmao omg yes yess yesss
yeah yep yup ok okay cool nice great awesome amazing wow aww awww ugh right true same totally
sure agreed agree indeed exactly absolutely definitely love loved that's fair enough honestly
oh ah no way sounds sound fun wild deserve glad help helps helped happy anytime anything else
let know need perfect all now everything congrats congratulations luck care hugs hug miss bet
fine alright hmm wonderful lovely sweet bless xoxo cute adorable brilliant fantastic thrilled
excited proud hope well day have lot much very really so too gonna see you soon
"""
_PHATIC = frozenset(analyze(_PHATIC_WORDS))


_RELATIVE_WHEN = re.compile(
    rf"\b(?:ago|just|recently|so far|(?:on|every|this|next|last) (?:{_WEEKDAYS})|"
    r"this (?:morning|afternoon|evening)|the other day|lately)\b",
    re.IGNORECASE,
)


def is_relative(text: str) -> bool:
    """Whether ``text`` says when something happened relative to when it was said."""
    return bool(_RELATIVE.search(text) or _RELATIVE_WHEN.search(text))


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]


def content_terms(text: str) -> frozenset[str]:
    return frozenset(analyze(text))


def is_phatic(text: str, terms: Iterable[str], names: frozenset[str]) -> bool:
    """True when nothing but phatic words and names is left, and there is no number."""
    if any(c.isdigit() for c in text):
        return False
    return all(t in _PHATIC or t in names for t in terms)


def score(
    text: str,
    names: frozenset[str],
    rare: int,
    tool_output: bool = False,
    *,
    plans: bool = False,
) -> float:
    """How much ``text`` is worth keeping; ``rare`` is its count of batch-unique terms. With
    ``plans`` (the rule-based summary's key facts), commitments and plans ("will", "going
    to", "agreed") and quantities written out count too; the extractive summary leaves them
    out, which its held-out split measured better."""
    value = 0.0
    entities = 0
    for found in _CAPITALISED.finditer(text):
        words = [w for w in found.group().split() if w not in _NOT_NAMES]
        if not words:
            continue
        if found.start() == 0 or text[max(0, found.start() - 2) : found.start()] in _STARTS:
            # The first word of a sentence is capitalised anyway: only a run of two or more
            # ("Cedar House, ...") or a word that is not an ordinary one counts.
            words = words[1:] if len(words) < 2 else words
        if any(w.lower() not in names for w in words):
            entities += 1
    value += 1.5 * min(3, entities)
    ids = len(_ID.findall(text))
    numbers = len(_NUMBER.findall(text))
    value += 2.0 * min(3, ids) + 1.5 * min(3, numbers) + 1.0 * min(2, len(_AMOUNT.findall(text)))
    day_dates = len(_DAY_DATE.findall(text))
    value += 2.5 * min(2, day_dates)
    if not day_dates:
        value += 0.75 * bool(_MONTH.search(text))
    value += 0.75 * bool(_WEEKDAY.search(text)) + 2.0 * bool(_TIME.search(text))
    value += 1.0 * bool(_RELATIVE.search(text))
    value += 2.0 * min(2, len(_PREFERENCE.findall(text)))
    value += 2.5 * min(2, len(_CHANGE.findall(text)))
    value += 1.0 * min(2, len(_EVENT.findall(text)))
    if plans:
        value += 1.5 * bool(_COMMIT.search(text))
        value += 0.75 * min(2, len(_NUMBER_WORD.findall(text)))
    value -= 1.5 * min(2, len(_HEDGE.findall(text)))
    value += 0.6 * min(4, rare)
    if tool_output:
        value += 2.0
    return value


def near_duplicates(term_sets: Sequence[frozenset[str]], threshold: float = 0.6) -> set[int]:
    """Indexes superseded by a LATER entry sharing most terms (token-set Jaccard at least
    ``threshold``): when a fact was restated or changed, the newer statement stays."""
    superseded: set[int] = set()
    postings: dict[str, list[int]] = {}
    for i in range(len(term_sets) - 1, -1, -1):
        terms = term_sets[i]
        if len(terms) >= 2:
            shared: dict[int, int] = {}
            for term in terms:
                for j in postings.get(term, ())[-64:]:  # the nearest later ones
                    shared[j] = shared.get(j, 0) + 1
            for j, common in shared.items():
                if common / (len(terms) + len(term_sets[j]) - common) >= threshold:
                    superseded.add(i)
                    break
        for term in terms:
            postings.setdefault(term, []).append(i)
    return superseded
