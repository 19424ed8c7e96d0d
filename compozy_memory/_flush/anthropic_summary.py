"""The Anthropic summarizer: a Claude model's updated fact list, through the official client.

The previous summary and the new turns go in; one fact per line comes out. 429s and 5xx are
retried with backoff (tenacity); the whole call has a timeout; on failure it falls back to
the extractive summarizer and says so in :attr:`Summary.fallback`.
"""

from __future__ import annotations

import asyncio
import re
import time
import weakref
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from compozy_memory._flush.extractive import ExtractiveSummarizer
from compozy_memory._flush.material import (
    covered_count,
    is_header,
    is_summary,
    render_line,
    summary_lines,
    transcript,
)
from compozy_memory._flush.summarizers import fit_text
from compozy_memory._model.anthropic_tokens import anthropic_client
from compozy_memory._model.messages import Message
from compozy_memory._model.results import Summary
from compozy_memory._model.tokens import TokenCounter

if TYPE_CHECKING:
    import anthropic

    from compozy_memory._metrics import MemoryMetrics

__all__ = ["AnthropicSummarizer"]

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
        # One API client per event loop (an async client's connections belong to the loop
        # that opened them): an async handle's flushes and a sync one's (on the summarizers'
        # loop) may share this summarizer.
        self._clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, anthropic.AsyncAnthropic
        ] = weakref.WeakKeyDictionary()

    @property
    def client(self) -> anthropic.AsyncAnthropic:
        """The API client of the running loop, made on first use: a memory that never flushes
        opens no connection."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            # Retries are ours (tenacity), so the client must not retry on its own.
            client = anthropic_client(self._api_key, self._base_url, self.timeout)
            self._clients[loop] = client
        return client

    async def aclose(self) -> None:
        """Close the running loop's API client (the others' loops close theirs' transports)."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()

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


def _reason(error: BaseException, timeout: float) -> str:
    if isinstance(error, TimeoutError):
        return f"timed out after {timeout:g}s"
    return f"{type(error).__name__}: {str(error)[:200]}"
