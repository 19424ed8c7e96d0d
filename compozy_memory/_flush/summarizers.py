"""Summarizers: turn the oldest messages into one summary within a token budget.

* :class:`RuleBasedSummarizer` (here): the Compozy spec's ``CONVERSATION_SUMMARY:``: the first
  message, a count of the middle, the last two, and in the budget the spec leaves unused the
  middle messages that carry names, dates, numbers and decisions.
* :class:`~compozy_memory._flush.extractive.ExtractiveSummarizer`: the sentences that carry
  facts, each attributed to its speaker, in order, within the budget.
* :class:`~compozy_memory._flush.anthropic_summary.AnthropicSummarizer`: a Claude model's
  updated fact list, with retries, a timeout and an extractive fallback.

:func:`fit_text` cuts any summarizer's text to a token budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from compozy_memory._flush.material import (
    Line,
    covered_count,
    is_summary,
    message_date,
    message_parts,
    render_line,
    speaker_of,
    summary_lines,
)
from compozy_memory._flush.salience import content_terms, is_phatic, score
from compozy_memory._model.messages import Message
from compozy_memory._model.results import Summary
from compozy_memory._model.tokens import TokenCounter
from compozy_memory._search.analysis import analyze

__all__ = ["RuleBasedSummarizer", "Summarizer", "Summary", "fit_text"]


class Summarizer(Protocol):
    """Summarises messages, oldest first, into at most ``max_tokens`` tokens."""

    async def summarize(self, messages: Sequence[Message], *, max_tokens: int) -> Summary: ...


class RuleBasedSummarizer:
    """The Compozy spec's summary: the first message, how many followed, the last two.

    ::

        CONVERSATION_SUMMARY: Initial context: user: My order #1042 arrived damaged.
        ... [27 messages exchanged] ...
        Recent context: user: A refund, please.
        assistant: Done: 59.90 EUR back to your card.

    One row per part (the spec writes them on one line), each message's text on one line
    and cut at ``_RULE_CHARS``, so that a fold can take the rows back unambiguously. Under
    three messages nothing is condensed: the messages are carried whole (the spec returns
    no summary, which the flusher would commit as a blank one). Previous summaries being
    folded in contribute their lines, never their header, and the count is of the original
    messages covered.

    With ``key_facts`` (the default), the budget the spec's rows leave unused holds the
    middle messages that a later question needs, after ``Key facts:`` and before the recent
    context: ranked by :func:`~compozy_memory._flush.salience.score` (names, dates, numbers,
    decisions first, filler never), each cut at ``_RULE_CHARS``, written in order with the
    day they were said where it changes. The count is then of the messages shown nowhere.
    ``key_facts=False`` writes the spec's rows only."""

    def __init__(self, counter: TokenCounter, *, key_facts: bool = True) -> None:
        self.counter = counter
        self.key_facts = key_facts

    async def summarize(self, messages: Sequence[Message], *, max_tokens: int) -> Summary:
        if not messages:
            return Summary("", "rule_based")
        items: list[Line] = []
        tool_names: dict[str, str] = {}
        for message in messages:
            if is_summary(message):
                items += summary_lines(message)
                continue
            parts = message_parts(message, tool_names)
            items.append(
                Line(
                    speaker_of(message),
                    " ".join(" ".join(p.text for p in parts).split()),
                    message_date(message),
                )
            )
        if not items:
            return Summary("", "rule_based")
        covered = sum(covered_count(m) for m in messages)
        if covered < _RULE_MIN_MESSAGES:
            kept, middle = items, 0
        else:
            kept = [items[0], *items[1:][-_RULE_RECENT:]]
            middle = covered - len(kept)
            kept = [_cut(line, _RULE_CHARS) for line in kept]
        texts = [line.text for line in kept]
        text = _rule_text(kept, texts, middle)
        if self.counter.count(text) > max_tokens:
            # Each message gets an equal share of what the framing leaves, so the recent
            # context is never the part cut away, nor the count.
            frame = self.counter.count(_rule_text(kept, [""] * len(kept), middle))
            share = (max_tokens - frame) // len(kept)
            texts = [fit_text(t, share, self.counter) if share > 0 else "" for t in texts]
            text = _rule_text(kept, texts, middle)
        elif self.key_facts and middle > 0:
            between = items[1 : len(items) - _RULE_RECENT]
            text = self._with_facts(between, kept, texts, middle, max_tokens)
        return Summary(fit_text(text, max_tokens, self.counter), "rule_based")

    def _with_facts(
        self, between: list[Line], kept: list[Line], texts: list[str], middle: int, budget: int
    ) -> str:
        """The spec's rows with as many key facts of ``between`` as the budget leaves room
        for, the best first; the spec's rows alone when none fits."""
        text = _rule_text(kept, texts, middle)
        spare = budget - self.counter.count(text) - _FACTS_FRAME
        names: set[str] = set()
        for line in (*kept, *between):
            if line.speaker:
                names.add(line.speaker.lower())
                names.update(analyze(line.speaker))
        known = frozenset(names)
        ranked = sorted(
            (
                (score(line.text, known, 0, plans=True), i)
                for i, line in enumerate(between)
                if not is_phatic(line.text, content_terms(line.text), known)
            ),
            reverse=True,  # the best first; of equals, the newest
        )
        chosen: dict[int, float] = {}
        used, misses = 0, 0
        for value, i in ranked:
            if value < _FACT_MIN_SCORE or spare - used < 8 or misses > 64:
                break
            cost = self.counter.count(render_line(_cut(between[i], _RULE_CHARS), True)) + 1
            if used + cost > spare:
                misses += 1
                continue
            chosen[i] = value
            used += cost
        while chosen:
            facts = [_cut(between[i], _RULE_CHARS) for i in sorted(chosen)]
            with_facts = _rule_text(kept, texts, middle - len(facts), facts)
            if self.counter.count(with_facts) <= budget:
                return with_facts
            del chosen[min(chosen, key=lambda i: (chosen[i], i))]  # the weakest goes
        return text


def _rule_text(lines: list[Line], texts: list[str], middle: int, facts: Sequence[Line] = ()) -> str:
    first, *recent = (Line(line.speaker, text) for line, text in zip(lines, texts, strict=True))
    rows = [f"{_RULE_PREFIX}Initial context: {render_line(first, with_day=False)}"]
    if middle > 0:
        rows.append(f"... [{middle} messages exchanged] ...")
    marked: str | None = None
    for n, fact in enumerate(facts):
        with_day = fact.day is not None and fact.day != marked
        rows.append(("Key facts: " if n == 0 else "") + render_line(fact, with_day))
        marked = fact.day if with_day else marked
    for n, line in enumerate(recent):
        rows.append(("Recent context: " if n == 0 else "") + render_line(line, with_day=False))
    return "\n".join(rows)


def _cut(line: Line, limit: int) -> Line:
    if len(line.text) <= limit:
        return line
    return Line(line.speaker, line.text[:limit] + "...", line.day, line.folded)


_RULE_PREFIX = "CONVERSATION_SUMMARY: "
# The spec's numbers: from three messages on, the first and the last two are kept.
_RULE_MIN_MESSAGES = 3
_RULE_RECENT = 2
_RULE_CHARS = 200
# What a middle message must score to be a key fact: a name, a date, a number or a decision
# (see salience.score); small talk scores below it.
_FACT_MIN_SCORE = 1.5
_FACTS_FRAME = 4  # "Key facts: " and a newline


def fit_text(text: str, max_tokens: int, counter: TokenCounter) -> str:
    """``text`` cut at a word so that it counts at most ``max_tokens``.

    Whatever a summarizer returns (a custom one may return megabytes) costs at most a few
    counts of about ``max_tokens`` tokens: no token is longer than ``_MAX_TOKEN_CHARS``
    characters, so nothing past that many characters a token can be kept anyway."""
    text = text[: max_tokens * _MAX_TOKEN_CHARS]
    if counter.count(text) <= max_tokens:
        return text
    words = text.split(" ")
    low, high = 0, len(words)
    while low < high:
        middle = (low + high + 1) // 2
        if counter.count(" ".join(words[:middle]) + " ...") <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return " ".join(words[:low]) + " ..."


# Longer than any token of the encodings in use (cl100k and o200k top out far below this).
_MAX_TOKEN_CHARS = 64
