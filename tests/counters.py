"""Token counters for tests: words counted, and everything the library did with the counter
recorded (the thread of each count and preload, each batch).

Counting words makes every expected count obvious in a test (``len(text.split())``); a text
holding ``refuse`` has no count (``MissingTokenCountError`` whose message is the text), so a
test can place a failure on one text of a batch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from compozy_memory.errors import MissingTokenCountError

REFUSE = "refuse"


class WordCounter:
    """Counts words one text at a time.

    ``thread_safe``: whether the library may count with it in a worker thread. ``delay``:
    seconds each count sleeps (releasing the GIL, as tiktoken's encoding does).
    """

    def __init__(self, *, thread_safe: bool = True, delay: float = 0.0) -> None:
        self.thread_safe = thread_safe
        self.delay = delay
        #: The thread of each text counted, and of each ``preload``.
        self.threads: list[str] = []
        self.preloaded_in: list[str] = []
        self._lock = threading.Lock()

    def preload(self) -> None:
        self.preloaded_in.append(threading.current_thread().name)

    def count(self, text: str) -> int:
        with self._lock:
            self.threads.append(threading.current_thread().name)
        if self.delay:
            time.sleep(self.delay)
        if REFUSE in text:
            raise MissingTokenCountError(text)
        return len(text.split())


class BatchWordCounter(WordCounter):
    """A :class:`WordCounter` that also counts many texts in one call (``count_many``, as
    rs-bpe does), recording each batch as ``(thread, size)``; a refused text fails its batch."""

    def __init__(self, *, thread_safe: bool = False, delay: float = 0.0) -> None:
        super().__init__(thread_safe=thread_safe, delay=delay)
        self.batches: list[tuple[str, int]] = []

    def count(self, text: str) -> int:
        return self.count_many([text])[0]

    def count_many(self, texts: Sequence[str]) -> list[int]:
        self.batches.append((threading.current_thread().name, len(texts)))
        return [WordCounter.count(self, text) for text in texts]
