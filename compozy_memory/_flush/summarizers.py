"""Summarizers: turn the oldest messages into one summary within a token budget.

* :class:`RuleBasedSummarizer`: the Compozy spec's ``CONVERSATION_SUMMARY:``: the first
  message, a count of the middle, the last two. Cheap, and it keeps very little.
* :class:`ExtractiveSummarizer`: keeps the sentences that carry facts (numbers, ids, names,
  dates, decisions, open questions) in their original order, within the budget.
* :class:`AnthropicSummarizer`: asks a Claude model (Haiku by default) for key facts,
  decisions and open questions, through the official client. 429s and 5xx are retried with
  backoff (tenacity); the whole call has a timeout; on failure it falls back to extractive
  and says so in :attr:`Summary.fallback`.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from compozy_memory._flush.material import (
    Line,
    covered_count,
    is_header,
    is_summary,
    message_date,
    message_parts,
    render_line,
    speaker_of,
    summary_lines,
    transcript,
)
from compozy_memory._flush.salience import (
    content_terms,
    is_phatic,
    is_relative,
    near_duplicates,
    score,
    split_sentences,
)
from compozy_memory._model.messages import Message
from compozy_memory._model.results import Summary
from compozy_memory._model.tokens import TokenCounter
from compozy_memory._search.analysis import analyze

if TYPE_CHECKING:
    import anthropic

    from compozy_memory._metrics import MemoryMetrics

__all__ = [
    "AnthropicSummarizer",
    "ExtractiveSummarizer",
    "RuleBasedSummarizer",
    "Summarizer",
    "Summary",
    "fit_text",
]


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
    messages covered."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter

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
                Line(speaker_of(message), " ".join(" ".join(p.text for p in parts).split()))
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
        return Summary(fit_text(text, max_tokens, self.counter), "rule_based")


def _rule_text(lines: list[Line], texts: list[str], middle: int) -> str:
    first, *recent = (Line(line.speaker, text) for line, text in zip(lines, texts, strict=True))
    rows = [f"{_RULE_PREFIX}Initial context: {render_line(first, with_day=False)}"]
    if middle > 0:
        rows.append(f"... [{middle} messages exchanged] ...")
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
    def dated(self) -> bool:
        """Whether the line needs its date to be understood (it says when, relatively)."""
        return self.day is not None and is_relative(self.text)

    @property
    def body(self) -> str:
        return f"{self.text} (re: {self.question})" if self.question else self.text


class ExtractiveSummarizer:
    """The sentences that carry facts, each attributed to its speaker, in order.

    Phatic turns and near-duplicates (the older of two statements sharing most terms) are
    dropped; the rest is ranked by :func:`salience.score` for its length and taken while it
    fits ``max_tokens``, then written in conversation order, a line per message part with
    its speaker, and its date where the day changes."""

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
            extra = _DAY_MARK_TOKENS if unit.dated and unit.day not in days else 0
            spend = cost(unit) + extra
            if used + spend > budget:
                misses += 1
                continue
            chosen.append(unit)
            used += spend
            if unit.dated and unit.day:
                days.add(unit.day)
        return sorted(chosen, key=lambda u: u.order)


_DAY_MARK_TOKENS = 7  # "[2023-05-08] "


async def _units(messages: Sequence[Message]) -> list[_Unit]:
    names: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        if message.name:
            names.add(message.name.lower())
            names.update(analyze(message.name))
        answered.update(message.tool_result_ids)
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
                terms = content_terms(line.text)
                units.append(
                    _Unit(len(units), group, line.speaker, line.text, line.day, terms, folded=True)
                )
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
            # A date only where the line needs one to be read ("last weekend", "on Monday");
            # a fold reads a mark as the day of the lines after it, until the next mark.
            with_day = unit.dated and unit.day is not None and unit.day != marked
            rows.append(render_line(Line(unit.speaker, unit.body, unit.day), with_day))
            if with_day:
                marked = unit.day
        previous = unit
    return "\n".join(rows)


_PROMPT = """\
You keep the running summary of a long conversation, so that an assistant can continue it \
without the original messages.

Summary so far (covers {previous_count} earlier messages):
{previous}

New messages (speaker: text, with [date] where the day changes):
{transcript}

Write the updated summary: integrate the new messages into the summary so far. Keep every \
concrete fact from both: names, numbers, ids, amounts, dates, places, preferences, every \
decision and commitment, and every open question. When a fact changed, keep only its latest \
value. Write one fact per line, starting with who it is about or who said it, for example \
"Caroline: adopted a beagle named Rex on 2023-05-08". No preamble, no headings, no bullets, \
at most {words} words."""
_PREAMBLE = re.compile(r"^(?:here(?:'s| is)\b.*:|(?:updated )?summary:?)$", re.IGNORECASE)
_BULLET = re.compile(r"^(?:[-*\u2022]|\d+[.)])\s+")


def _retryable(error: BaseException) -> bool:
    import anthropic

    if isinstance(error, anthropic.RateLimitError | anthropic.InternalServerError):
        return True
    return isinstance(error, anthropic.APIStatusError) and error.status_code >= 500


class AnthropicSummarizer:
    """A Claude summary, with retries, a timeout and an extractive fallback."""

    def __init__(
        self,
        counter: TokenCounter,
        *,
        model: str = "claude-haiku-4-5",
        timeout: timedelta = timedelta(seconds=30),
        max_retries: int = 3,
        api_key: str | None = None,
        base_url: str | None = None,
        metrics: MemoryMetrics | None = None,
    ) -> None:
        self.counter = counter
        self.model = model
        self.timeout = timeout.total_seconds()
        self.max_retries = max_retries
        self.metrics = metrics
        self.fallback = ExtractiveSummarizer(counter)
        self._api_key = api_key
        self._base_url = base_url
        self._client: anthropic.AsyncAnthropic | None = None

    @property
    def client(self) -> anthropic.AsyncAnthropic:
        """The API client, made on first use: a memory that never flushes opens no connection."""
        if self._client is None:
            import anthropic

            # Retries are ours (tenacity), so the client must not retry on its own.
            self._client = anthropic.AsyncAnthropic(
                api_key=self._api_key or os.environ.get("ANTHROPIC_API_KEY") or "missing-key",
                base_url=self._base_url,
                timeout=self.timeout,
                max_retries=0,
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def summarize(self, messages: Sequence[Message], *, max_tokens: int) -> Summary:
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.timeout):
                text = await self._ask(messages, max_tokens)
            summary = Summary(fit_text(text, max_tokens, self.counter), "anthropic")
        except Exception as exc:
            reason = _reason(exc, self.timeout)
            if self.metrics is not None:
                self.metrics.summarizer_fallbacks.labels(method="anthropic").inc()
            fallback = await self.fallback.summarize(messages, max_tokens=max_tokens)
            summary = Summary(fallback.text, fallback.method, f"anthropic: {reason}")
        if self.metrics is not None:
            self.metrics.summarizer_seconds.labels(method="anthropic").observe(
                time.monotonic() - started
            )
        return summary

    def prompt(self, messages: Sequence[Message], max_tokens: int) -> str:
        """The request: the previous summaries' lines as the summary so far, the new
        messages as a dated transcript with speaker names."""
        previous = [line for m in messages if is_summary(m) for line in summary_lines(m)]
        previous_count = sum(covered_count(m) for m in messages if is_summary(m))
        fresh = [m for m in messages if not is_summary(m)]
        shown, last_day = [], None
        for line in previous:
            shown.append(render_line(line, with_day=line.day != last_day))
            last_day = line.day or last_day
        return _PROMPT.format(
            previous_count=previous_count,
            previous="\n".join(shown) or "(nothing yet)",
            transcript=transcript(fresh) or "(none)",
            words=max(20, int(max_tokens * 0.7)),
        )

    async def _ask(self, messages: Sequence[Message], max_tokens: int) -> str:
        covered = sum(covered_count(m) for m in messages)
        header = f"Key points from {covered} earlier messages:"
        room = max(1, max_tokens - self.counter.count(header) - 1)
        prompt = self.prompt(messages, room)
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait_exponential(multiplier=0.2, max=5.0) + wait_random(0, 0.2),
            retry=retry_if_exception(_retryable),
            reraise=True,
        ):
            with attempt:
                response = await self.client.messages.create(
                    model=self.model,
                    max_tokens=room,
                    messages=[{"role": "user", "content": prompt}],
                )
        texts = [block.text for block in response.content if block.type == "text"]
        rows = []
        for row in "\n".join(texts).splitlines():
            row = _BULLET.sub("", row.strip())
            if row and not _PREAMBLE.match(row) and not is_header(row):
                rows.append(row)
        if not rows:
            raise ValueError("the model answered with no text")
        return "\n".join([header, *rows])


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


def _reason(error: BaseException, timeout: float) -> str:
    if isinstance(error, TimeoutError):
        return f"timed out after {timeout:g}s"
    return f"{type(error).__name__}: {str(error)[:200]}"
