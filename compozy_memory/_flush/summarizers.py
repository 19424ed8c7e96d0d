"""Summarizers: turn the oldest messages into one summary within a token budget.

* :class:`RuleBasedSummarizer`: the Compozy spec's: the first message, a count of the middle,
  the last two. Cheap, and it keeps very little.
* :class:`ExtractiveSummarizer`: keeps the sentences that carry facts (numbers, ids, names,
  dates, decisions, open questions) in their original order, within the budget.
* :class:`AnthropicSummarizer`: asks a Claude model (Haiku by default) for key facts,
  decisions and open questions, through the official client. 429s and 5xx are retried with
  backoff (tenacity); the whole call has a timeout; on failure it falls back to extractive
  and says so in :attr:`Summary.fallback`.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from compozy_memory._model.messages import Message
from compozy_memory._model.results import Summary
from compozy_memory._model.tokens import TokenCounter

if TYPE_CHECKING:
    import anthropic

    from compozy_memory._metrics import FlushMetrics

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
    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter

    async def summarize(self, messages: Sequence[Message], *, max_tokens: int) -> Summary:
        if not messages:
            return Summary("", "rule_based")
        head = [messages[0]]
        tail = list(messages[1:])[-2:]
        middle = len(messages) - len(head) - len(tail)
        parts = [f"Earlier conversation ({len(messages)} messages)."]
        parts.append(f"It began with {_line(messages[0])}")
        if middle > 0:
            parts.append(f"{middle} messages followed.")
        parts += [f"Then {_line(m)}" for m in tail]
        return Summary(fit_text(" ".join(parts), max_tokens, self.counter), "rule_based")


_HEADER = re.compile(r"Key points from \d+ earlier messages:")  # a folded summary's own
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_NUMBER = re.compile(r"\d")
_NAME = re.compile(r"(?<!^)(?<![.!?]\s)\b[A-Z][a-z]+")
_ID = re.compile(r"#\w+|\b[A-Z]{2,}-?\d+\b|\$\d")
_DECISION = re.compile(
    r"\b(decided|agreed|approved|confirmed|will|must|need[s]?|refund(ed)?|cancel(led)?|"
    r"deadline|due|because|promised|escalat\w*|schedul\w*)\b",
    re.IGNORECASE,
)


class ExtractiveSummarizer:
    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter

    async def summarize(self, messages: Sequence[Message], *, max_tokens: int) -> Summary:
        scored: list[tuple[float, int, str]] = []
        seen: set[str] = set()
        for n, message in enumerate(messages, start=1):
            if n % 32 == 0:
                await asyncio.sleep(0)  # summarising runs beside appends in the same loop
            for sentence in _SENTENCE.split(_text_of(message)):
                sentence = sentence.strip()
                if len(sentence) < 3 or sentence.lower() in seen or _HEADER.match(sentence):
                    continue
                seen.add(sentence.lower())
                # A folded summary's lines already say who spoke.
                folded = message.content_type == "summary"
                line = sentence if folded else f"{message.role}: {sentence}"
                scored.append((_score(sentence), len(scored), line))
        budget = max_tokens - 8
        chosen: list[tuple[int, str]] = []
        used = 0
        for score, order, line in sorted(scored, key=lambda s: (-s[0], s[1])):
            if score <= 0 and chosen:
                break
            cost = self.counter.count(line) + 1
            if used + cost > budget:
                continue
            chosen.append((order, line))
            used += cost
        body = "\n".join(line for _, line in sorted(chosen))
        covered = sum(m.covered_count for m in messages)
        text = f"Key points from {covered} earlier messages:\n{body}"
        return Summary(fit_text(text, max_tokens, self.counter), "extractive")


def _score(sentence: str) -> float:
    score = 2.0 * min(3, len(_NUMBER.findall(sentence)))
    score += 2.0 * len(_ID.findall(sentence))
    score += 1.0 * min(3, len(_NAME.findall(sentence)))
    score += 2.0 * len(_DECISION.findall(sentence))
    score += 1.5 if sentence.endswith("?") else 0.0
    return score


_PROMPT = (
    "Summarise this earlier part of a conversation so an assistant can continue it without "
    "the original. Keep every concrete fact (names, numbers, ids, dates, amounts), every "
    "decision and commitment, and every open question. Write plain sentences, no preamble, "
    "at most {words} words.\n\n{transcript}"
)


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
        metrics: FlushMetrics | None = None,
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

    async def _ask(self, messages: Sequence[Message], max_tokens: int) -> str:
        transcript = "\n".join(_line(m, limit=2000) for m in messages)
        prompt = _PROMPT.format(words=max(20, int(max_tokens * 0.7)), transcript=transcript)
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait_exponential(multiplier=0.2, max=5.0) + wait_random(0, 0.2),
            retry=retry_if_exception(_retryable),
            reraise=True,
        ):
            with attempt:
                response = await self.client.messages.create(
                    model=self.model,
                    max_tokens=max_tokens,
                    messages=[{"role": "user", "content": prompt}],
                )
        texts = [block.text for block in response.content if block.type == "text"]
        if not texts:
            raise ValueError("the model answered with no text")
        return "\n".join(texts).strip()


def _text_of(message: Message) -> str:
    text = message.text
    if not text and message.tool_calls:
        text = "; ".join(str(c.get("function", c)) for c in message.tool_calls)
    if isinstance(message.content, list):
        for block in message.content:
            if block.get("type") == "tool_result":
                text += f"\n{block.get('content', '')}"
    return text


def _line(message: Message, limit: int = 200) -> str:
    text = " ".join(_text_of(message).split())
    return f"{message.role}: {text[:limit]}{'...' if len(text) > limit else ''}"


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
