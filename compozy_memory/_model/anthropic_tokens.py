"""Claude token counts from Anthropic's ``count_tokens`` API, behind a synchronous counter.

Claude's tokenizer is not published, so an exact count needs a network call, and
:class:`~compozy_memory._model.tokens.TokenCounter` is synchronous because appends count on
the event loop's thread. :class:`AnthropicTokenCounter` therefore never waits on the network
in :meth:`~AnthropicTokenCounter.count`:

* a text counted by the API before (cached by its SHA-256, per model) gets the exact count;
* any other text gets a local estimate at once (cl100k, scaled by the ratio of the API's
  counts to cl100k's over every text the API has counted so far), and an API count of it is
  started in the background, so the same text (a system prompt, a retried turn, a summary)
  counts exactly from then on.

Callers that want an exact count before storing a message await :meth:`acount` (or
:meth:`warm` for many texts) and pass the result as ``Message.tokens``, the fast path. Each
API call has a timeout; a failure or a timeout gives the estimate instead, is recorded in
:attr:`fallbacks` and :attr:`last_fallback`, logged, and pauses API calls for
``retry_after`` so that an outage costs no latency.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING

from compozy_memory._model.tokens import TokenCounter, counter_for_encoding

if TYPE_CHECKING:
    import anthropic

__all__ = ["AnthropicTokenCounter"]

log = logging.getLogger("compozy_memory.tokens")

# The learned scale of the estimate stays within these bounds, whatever the API said.
_MIN_RATIO, _MAX_RATIO = 0.5, 2.0
# A one-byte text is one token in any byte-level BPE: the API's count of it, less one, is
# the framing every single-message request adds.
_PROBE = "."


class AnthropicTokenCounter:
    """Exact Claude counts where the API has answered, an estimate everywhere else."""

    def __init__(
        self,
        model: str,
        *,
        timeout: timedelta = timedelta(seconds=2),
        retry_after: timedelta = timedelta(seconds=30),
        estimate: TokenCounter | None = None,
        cache_size: int = 4096,
        max_pending: int = 8,
        api_key: str | None = None,
        base_url: str | None = None,
    ) -> None:
        self.model = model
        self.timeout = timeout.total_seconds()
        self.retry_after = retry_after.total_seconds()
        self.estimate = estimate if estimate is not None else counter_for_encoding("cl100k_base")
        self.cache_size = cache_size
        self.max_pending = max_pending
        #: API calls that failed or timed out, and why the last one did.
        self.fallbacks = 0
        self.last_fallback: str | None = None
        #: Counts answered from the cache, and estimates given in place of an exact count.
        self.exact = 0
        self.estimated = 0
        self.api_calls = 0
        self._api_key = api_key
        self._base_url = base_url
        self._client: anthropic.AsyncAnthropic | None = None
        # Imported now, where a memory is set up: importing the client takes a second or
        # more, which must not fall on the event loop in the middle of an append.
        import anthropic  # noqa: F401

        self._cache: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict[bytes, asyncio.Task[None]] = {}
        self._overhead: int | None = None
        self._quiet_until = 0.0
        self._api_total = 0
        self._local_total = 0

    # -- the synchronous counter ---------------------------------------------------------

    def count(self, text: str) -> int:
        """The cached exact count, else an estimate now and an API count in the background."""
        key, exact = self._known(text)
        if exact is not None:
            return exact
        self.estimated += 1
        self._schedule(text, key)
        return self.estimate_of(text)

    def preload(self) -> None:
        """Load the local estimate's encoding (no API call)."""
        preload = getattr(self.estimate, "preload", None)
        if callable(preload):
            preload()

    def estimate_of(self, text: str) -> int:
        """The local estimate: cl100k's count, scaled by what the API has taught so far."""
        return math.ceil(self.estimate.count(text) * self.ratio)

    @property
    def local(self) -> TokenCounter:
        """A counter that only estimates (scaled as :meth:`estimate_of`) and never calls the
        API: for the many trial counts a summarizer makes of texts it may not keep."""
        return _Estimate(self)

    @property
    def ratio(self) -> float:
        """API tokens per cl100k token over every text the API counted (1.0 before any)."""
        if self._local_total == 0:
            return 1.0
        return min(_MAX_RATIO, max(_MIN_RATIO, self._api_total / self._local_total))

    # -- exact counts, for callers that can wait -----------------------------------------

    async def acount(self, text: str) -> int:
        """The exact count from the API (cached), or the estimate if the API fails or times out."""
        key, exact = self._known(text)
        if exact is not None:
            return exact
        try:
            return await self._fetch(text, key)
        except Exception as exc:
            self._fell_back(exc)
            self.estimated += 1
            return self.estimate_of(text)

    async def warm(self, texts: Iterable[str]) -> None:
        """Count ``texts`` through the API now, so that :meth:`count` knows them exactly."""
        await asyncio.gather(*(self.acount(t) for t in set(texts)))

    async def wait_idle(self) -> None:
        """Wait for the background API counts started by :meth:`count` (for tests, shutdown)."""
        while self._pending:
            await asyncio.gather(*list(self._pending.values()), return_exceptions=True)

    async def aclose(self) -> None:
        for task in list(self._pending.values()):
            task.cancel()
        await self.wait_idle()
        if self._client is not None:
            await self._client.close()
            self._client = None

    # -- internals -----------------------------------------------------------------------

    def _known(self, text: str) -> tuple[bytes, int | None]:
        """The cache key of ``text`` and its exact count if known (0 for no text)."""
        if not text:
            return b"", 0
        key = self._key(text)
        exact = self._cached(key)
        if exact is not None:
            self.exact += 1
        return key, exact

    @property
    def client(self) -> anthropic.AsyncAnthropic:
        """Made on first use: a memory whose counts are all supplied opens no connection."""
        if self._client is None:
            self._client = anthropic_client(self._api_key, self._base_url, self.timeout)
        return self._client

    def _key(self, text: str) -> bytes:
        return hashlib.sha256(f"{self.model}\x00{text}".encode()).digest()

    def _cached(self, key: bytes) -> int | None:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
            return hit

    def _store(self, key: bytes, tokens: int) -> None:
        with self._lock:
            self._cache[key] = tokens
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def _schedule(self, text: str, key: bytes) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no event loop in this thread: nothing can count in the background
        if (
            key in self._pending
            or len(self._pending) >= self.max_pending
            or time.monotonic() < self._quiet_until
        ):
            return
        task = loop.create_task(self._refresh(text, key))
        self._pending[key] = task
        task.add_done_callback(lambda _: self._pending.pop(key, None))

    async def _refresh(self, text: str, key: bytes) -> None:
        try:
            await self._fetch(text, key)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fell_back(exc)

    async def _fetch(self, text: str, key: bytes) -> int:
        if time.monotonic() < self._quiet_until:
            raise _Paused(self.last_fallback)
        client = self.client
        async with asyncio.timeout(self.timeout):
            if self._overhead is None:
                probe = await self._ask(client, _PROBE)
                self._overhead = max(0, probe - 1)
            answer = await self._ask(client, text)
        tokens = max(1, answer - self._overhead)
        self._store(key, tokens)
        with self._lock:
            self._api_total += tokens
            self._local_total += max(1, self.estimate.count(text))
        return tokens

    async def _ask(self, client: anthropic.AsyncAnthropic, text: str) -> int:
        self.api_calls += 1
        response = await client.messages.count_tokens(
            model=self.model, messages=[{"role": "user", "content": text}]
        )
        return int(response.input_tokens)

    def _fell_back(self, error: BaseException) -> None:
        if isinstance(error, _Paused):
            reason = str(error)
        elif isinstance(error, TimeoutError):
            reason = f"timed out after {self.timeout:g}s"
        else:
            reason = f"{type(error).__name__}: {str(error)[:200]}"
        self.fallbacks += 1
        if not isinstance(error, _Paused):
            self.last_fallback = reason
            self._quiet_until = time.monotonic() + self.retry_after
            log.warning(
                "count_tokens for %s failed (%s): local estimates for %gs",
                self.model,
                reason,
                self.retry_after,
            )


class _Estimate:
    def __init__(self, owner: AnthropicTokenCounter) -> None:
        self.owner = owner

    def count(self, text: str) -> int:
        return self.owner.estimate_of(text) if text else 0


class _Paused(Exception):
    """The API failed recently: no call until ``retry_after`` has passed."""

    def __init__(self, reason: str | None) -> None:
        super().__init__(f"paused after a failure ({reason})")


def anthropic_client(
    api_key: str | None, base_url: str | None, timeout: float
) -> anthropic.AsyncAnthropic:
    """An Anthropic client that never retries on its own (callers retry, or fall back, as
    they choose); the key from ``ANTHROPIC_API_KEY`` when none is given."""
    import anthropic

    return anthropic.AsyncAnthropic(
        api_key=api_key or os.environ.get("ANTHROPIC_API_KEY") or "missing-key",
        base_url=base_url,
        timeout=timeout,
        max_retries=0,
    )
