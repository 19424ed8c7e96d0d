"""The extractive summarizer: the sentences that carry facts, each with who said it and when.

Phatic turns, near-duplicates (the older of two statements sharing most terms) and sentences
said again later (all but the newest occurrence) are dropped; the rest is ranked by
:func:`~compozy_memory._flush.salience.score` for its length and taken while it fits the
budget, then written in conversation order, a line per message part with its speaker, and a
date mark wherever the day changes (the day it was said: ``metadata.date``, else ``ts``), so
"when did ..." keeps an answer. A short answer carries its question along, through every
later fold too.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from compozy_memory._flush.material import (
    Line,
    covered_count,
    is_summary,
    message_date,
    message_parts,
    render_line,
    summary_lines,
)
from compozy_memory._flush.salience import (
    content_terms,
    is_phatic,
    near_duplicates,
    score,
    split_sentences,
)
from compozy_memory._flush.summarizers import fit_text
from compozy_memory._model.exchanges import answered_ids
from compozy_memory._model.messages import Message
from compozy_memory._model.results import Summary
from compozy_memory._model.tokens import TokenCounter
from compozy_memory._search.analysis import analyze

__all__ = ["ExtractiveSummarizer"]

_MIN_SCORE = 1.0
# A short first sentence right after another speaker's question is read as its answer.
_ANSWER_WORDS = 10


@dataclass(slots=True)
class _Unit:
    """A candidate sentence (or a previous summary's line) for an extractive summary."""

    order: int
    group: int  # sentences of one message part share a group and may share a line
    speaker: str | None
    text: str
    day: str | None
    terms: frozenset[str]
    tool_output: bool = False
    folded: bool = False
    question: str = ""  # the question it answers, for a reply
    score: float = 0.0

    @property
    def body(self) -> str:
        return f"{self.text} (re: {self.question})" if self.question else self.text


class ExtractiveSummarizer:
    """The sentences that carry facts, each attributed to its speaker and dated, in order.

    Phatic turns, near-duplicates (the older of two statements sharing most terms) and
    repeated sentences (all but the newest) are dropped; the rest is ranked by
    :func:`salience.score` for its length and taken while it fits ``max_tokens``, then written
    in conversation order, a line per message part with its speaker, and a date mark where
    the day changes."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter

    async def summarize(self, messages: Sequence[Message], *, max_tokens: int) -> Summary:
        units = await _units(messages)
        covered = sum(covered_count(m) for m in messages)
        header = f"Key points from {covered} earlier messages:"
        chosen = self._choose(units, max_tokens - self.counter.count(header) - 1)
        text = _render(header, chosen)
        while chosen and self.counter.count(text) > max_tokens:
            # Merged lines and date marks make the estimate inexact: drop the weakest.
            weakest = min(chosen, key=lambda u: (u.score, u.order))
            chosen = [u for u in chosen if u is not weakest]
            text = _render(header, chosen)
        return Summary(fit_text(text, max_tokens, self.counter), "extractive")

    def _choose(self, units: list[_Unit], budget: int) -> list[_Unit]:
        costs: dict[int, int] = {}

        def cost(unit: _Unit) -> int:
            if unit.order not in costs:
                costs[unit.order] = self.counter.count(f"{unit.speaker}: {unit.body}") + 1
            return costs[unit.order]

        ranked = sorted(
            (u for u in units if u.score >= _MIN_SCORE),
            key=lambda u: (-u.score / math.sqrt(max(8, len(u.body) / 4)), -u.order),
        )
        chosen: list[_Unit] = []
        days: set[str] = set()
        used, misses = 0, 0
        for unit in ranked:
            if budget - used < 4 or misses > 64:
                break
            extra = _DAY_MARK_TOKENS if unit.day is not None and unit.day not in days else 0
            spend = cost(unit) + extra
            if used + spend > budget:
                misses += 1
                continue
            chosen.append(unit)
            used += spend
            if unit.day:
                days.add(unit.day)
        return sorted(chosen, key=lambda u: u.order)


_DAY_MARK_TOKENS = 7  # "[2023-05-08] "


async def _units(messages: Sequence[Message]) -> list[_Unit]:
    names: set[str] = set()
    for message in messages:
        if message.name:
            names.add(message.name.lower())
            names.update(analyze(message.name))
    answered = answered_ids(messages)
    name_set = frozenset(names)
    units: list[_Unit] = []
    tool_names: dict[str, str] = {}
    group = 0
    asked: tuple[str, str] | None = None  # the last wh-question: its speaker and text
    for n, message in enumerate(messages, start=1):
        if n % 32 == 0:
            await asyncio.sleep(0)  # summarising runs beside appends in the same loop
        if is_summary(message):
            for line in summary_lines(message):
                group += 1
                # A kept answer keeps its question, and so its worth, through every fold.
                text, asking = line.text, ""
                if (found := _REPLY.fullmatch(text)) is not None:
                    text, asking = found.group(1), found.group(2)
                terms = content_terms(text) | (content_terms(asking) if asking else set())
                unit = _Unit(len(units), group, line.speaker, text, line.day, frozenset(terms))
                unit.folded, unit.question = True, asking
                units.append(unit)
            asked = None
            continue
        day = message_date(message)
        question, asked = asked, None
        for part in message_parts(message, tool_names):
            if part.kind == "call" and part.call_id in answered:
                continue  # its result, in this batch too, repeats what was asked for
            group += 1
            tool_output = part.kind == "result"
            for sentence in _pieces(part.text, tool_output, name_set):
                unit = _Unit(
                    len(units),
                    group,
                    part.speaker,
                    sentence,
                    day,
                    content_terms(sentence),
                    tool_output,
                )
                if (
                    question is not None
                    and question[0] != part.speaker
                    and part.kind == "text"
                    and len(sentence.split()) <= _ANSWER_WORDS
                ):
                    # A short answer means little without its question: carry it along.
                    unit.question = question[1]
                    unit.terms = unit.terms | content_terms(question[1])
                question = None
                units.append(unit)
                last = sentence
                if part.kind == "text" and last.endswith("?") and _WH.search(last):
                    asked = (part.speaker, last)
    units = _newest_sentences(units)
    # Terms that occur once in the batch make a sentence specific rather than chatter.
    frequency: dict[str, int] = {}
    for unit in units:
        for term in unit.terms:
            frequency[term] = frequency.get(term, 0) + 1
    superseded = near_duplicates([u.terms for u in units])
    kept: list[_Unit] = []
    for i, unit in enumerate(units):
        if i in superseded:
            continue
        rare = sum(1 for t in unit.terms if frequency[t] == 1 and t not in name_set)
        value = score(unit.text, name_set, rare, unit.tool_output)
        if unit.question:
            value += 3.0 + 0.5 * max(0.0, score(unit.question, name_set, 0))
        unit.score = value
        kept.append(unit)
    return kept


def _newest_sentences(units: list[_Unit]) -> list[_Unit]:
    """The units with every sentence that is said again later in the batch taken out (and a
    unit left empty dropped): a repeated sentence (boilerplate, a catchphrase, a restated
    plan) is worth its newest occurrence only."""
    pieces = [[u.text] if u.tool_output else split_sentences(u.text) for u in units]
    last: dict[str, int] = {}
    for i, sentences in enumerate(pieces):
        for sentence in sentences:
            last[" ".join(sentence.casefold().split())] = i
    kept: list[_Unit] = []
    for i, (unit, sentences) in enumerate(zip(units, pieces, strict=True)):
        fresh = [s for s in sentences if last[" ".join(s.casefold().split())] == i]
        if not fresh:
            continue
        if len(fresh) < len(sentences):
            unit.text = " ".join(fresh)
            unit.terms = content_terms(unit.text) | (
                content_terms(unit.question) if unit.question else frozenset()
            )
        kept.append(unit)
    return kept


# A summary line that is a short answer with its question (see ``_Unit.body``).
_REPLY = re.compile(r"(.+?) \(re: (.+)\)")
# A question that wants a specific answer.
_WH = re.compile(r"\b(?:what|which|who|whom|whose|where|when|how|why|remind me)\b", re.I)
# A short message part is kept whole: its sentences lean on each other ("We adopted a dog!
# We named it Rex.").
_WHOLE_WORDS = 30


def _pieces(text: str, tool_output: bool, names: frozenset[str]) -> list[str]:
    """The candidate sentences of a part: a tool's output whole, a short part whole (its
    phatic sentences dropped), a long one sentence by sentence."""
    if tool_output:
        flat = " ".join(text.split())
        return [flat] if flat else []
    sentences = [
        s for s in split_sentences(text) if len(s) > 1 and not is_phatic(s, content_terms(s), names)
    ]
    if sentences and sum(len(s.split()) for s in sentences) <= _WHOLE_WORDS:
        return [" ".join(sentences)]
    return sentences


def _render(header: str, chosen: list[_Unit]) -> str:
    rows = [header]
    marked: str | None = None  # the day of the last date mark written
    previous: _Unit | None = None
    for unit in chosen:
        same_line = (
            previous is not None
            and not unit.folded
            and previous.group == unit.group
            and previous.order + 1 == unit.order
        )
        if same_line:
            rows[-1] += f" {unit.body}"
        else:
            # Who, what and when: a date mark wherever the day changes, so "when did ..." has
            # an answer and "last weekend" a reference; a fold reads a mark as the day of the
            # lines after it, until the next mark.
            with_day = unit.day is not None and unit.day != marked
            rows.append(render_line(Line(unit.speaker, unit.body, unit.day), with_day))
            if with_day:
                marked = unit.day
        previous = unit
    return "\n".join(rows)
