"""Redis key layout of a memory instance.

Every key of one instance is ``compozy:<project>:memory:{<key>}:<part>``. The encoded
instance key is the Cluster hash tag, so all parts live in one slot and every multi-key script
is legal on Redis Cluster.

The key text is encoded into the Compozy spec's character set ``[a-zA-Z0-9-_.:]``, but
injectively, unlike the spec's rule (which replaced every run of other characters with ``_``
and so gave ``张伟`` and ``李娜``, or ``user 1`` and ``user/1``, one memory):

* ``a-z A-Z 0-9 - . :`` stay as they are;
* every other character becomes its UTF-8 bytes, each written ``_xHH`` (two lowercase hex
  digits): ``user 1`` is ``user_x201``, ``José`` is ``Jos_xc3_xa9``;
* ``_`` stays ``_``, unless the text after it is ``x`` and two lowercase hex digits, where
  it would read as an escape: then it is escaped itself, ``_x5f`` (``a_x41`` is
  ``a_x5fx41``). So ``user_42`` and ``ticket-9.a_b`` keep their names.

Decoding reads ``_xHH`` as a byte and anything else as itself, which gives back the text
(:func:`decode_key`), so two different texts never share a key. Lone surrogates are encoded
as their three ``surrogatepass`` bytes, so every Python string has a key.

An encoded key longer than 512 characters keeps a 479-character prefix, then ``#`` and 128
bits of the SHA-256 of the *original* text. ``#`` is never in an encoded key, so a shortened
key can never equal one that was short to begin with, and two long keys that share a prefix
differ by their digests. ``{`` and ``}`` are escaped like any other character, so no input
can open or close a hash tag or leave its project's namespace. Inputs do choose their Cluster
slot, since the slot is a function of the key text: see the README.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from compozy_memory.errors import ConfigurationError

__all__ = [
    "MAX_KEY_LENGTH",
    "InstanceKeys",
    "decode_key",
    "encode_key",
    "sanitize_key",
    "validate_project",
]

MAX_KEY_LENGTH = 512
_DIGEST_HEX = 32
# Text that encodes to itself: the spec's characters, with no '_' that reads as an escape.
_PLAIN = re.compile(r"[a-zA-Z0-9\-_.:]*")
_ESCAPE = re.compile(r"_x[0-9a-f]{2}")
# Bytes to escape: outside the set, or a '_' followed by what would read as an escape.
_TO_ESCAPE = re.compile(rb"[^a-zA-Z0-9\-_.:]|_(?=x[0-9a-f]{2})")
_ESCAPE_BYTES = re.compile(rb"_x[0-9a-f]{2}")
_PROJECT = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9\-_.]{0,127}")  # fullmatch: "$" would allow "\n"


def encode_key(raw: str) -> str:
    """``raw`` in ``[a-zA-Z0-9-_.:]``, injectively: see the module's docstring."""
    if _PLAIN.fullmatch(raw) and _ESCAPE.search(raw) is None:
        return raw  # the common case: an identifier
    data = raw.encode("utf-8", "surrogatepass")
    return _TO_ESCAPE.sub(lambda m: b"_x%02x" % m.group()[0], data).decode("ascii")


def decode_key(key: str) -> str:
    """The text :func:`encode_key` encoded as ``key``; ConfigurationError if no text encodes
    to ``key`` (a shortened key keeps only a digest of its text)."""
    if "#" in key:
        raise ConfigurationError(f"key {key!r} was shortened: its text is not recoverable")
    if not _PLAIN.fullmatch(key):
        raise ConfigurationError(
            f"{key!r} is not an encoded key: it has characters outside [a-zA-Z0-9-_.:]"
        )
    data = _ESCAPE_BYTES.sub(lambda m: bytes.fromhex(m.group()[2:].decode()), key.encode())
    try:
        text = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        text = None
    if text is None or encode_key(text) != key:
        raise ConfigurationError(f"{key!r} is not an encoded key: no text encodes to it")
    return text


def sanitize_key(raw: str) -> str:
    """The key part for ``raw``: encoded (:func:`encode_key`), shortened past 512 characters.

    Safe inside ``{...}`` on Redis Cluster, and different for different texts."""
    if not isinstance(raw, str):
        raise ConfigurationError(f"a memory key must be a string, got {type(raw).__name__}")
    if not raw.strip():
        raise ConfigurationError(f"memory key {raw!r} is blank: give it some text")
    encoded = encode_key(raw)
    if len(encoded) <= MAX_KEY_LENGTH:
        return encoded
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_HEX]
    return f"{encoded[: MAX_KEY_LENGTH - _DIGEST_HEX - 1]}#{digest}"


def validate_project(project: str) -> str:
    """Return ``project`` if it is a valid project id, else raise ConfigurationError."""
    if not isinstance(project, str) or not _PROJECT.fullmatch(project):
        raise ConfigurationError(
            f"project id {project!r} is invalid: use 1-128 letters, digits, '-', '_' or '.', "
            "starting with a letter or digit"
        )
    return project


@dataclass(frozen=True, slots=True)
class InstanceKeys:
    """The Redis keys of one memory instance, all in one Cluster slot."""

    project: str
    key: str

    @classmethod
    def build(cls, project: str, raw_key: str) -> InstanceKeys:
        """Encode ``raw_key`` (:func:`sanitize_key`) and place it in ``project``'s namespace."""
        return cls(validate_project(project), sanitize_key(raw_key))

    @property
    def prefix(self) -> str:
        return f"compozy:{self.project}:memory:{{{self.key}}}"

    @property
    def msgs(self) -> str:
        return f"{self.prefix}:msgs"

    @property
    def meta(self) -> str:
        return f"{self.prefix}:meta"

    @property
    def archive(self) -> str:
        return f"{self.prefix}:archive"

    @property
    def summaries(self) -> str:
        return f"{self.prefix}:summaries"

    @property
    def dedupe(self) -> str:
        """Sorted set of recent append/replace dedupe keys, scored by the last id each got."""
        return f"{self.prefix}:dedupe"

    @property
    def recalled(self) -> str:
        """Archived messages the recall tools brought back into context."""
        return f"{self.prefix}:recalled"

    @property
    def ixseg(self) -> str:
        """The index's segments: a HASH of their list and their fields
        (``lua/search/lib/segments.lua``, :mod:`compozy_memory._search.segments`)."""
        return f"{self.prefix}:ix:s"

    @property
    def ixdocs(self) -> str:
        """The index's document records: a HASH of fixed-size record blocks by id
        (``lua/lib/docs.lua``)."""
        return f"{self.prefix}:ix:d"

    @property
    def ixgone(self) -> str:
        """Envelopes the archive's cap dropped whose terms the indexer has yet to take out of
        the document frequencies: a LIST."""
        return f"{self.prefix}:ix:gone"

    @property
    def ixvec(self) -> str:
        """Dense vectors of indexed messages (with an ``Embedder``): a HASH of message id ->
        quantized vector (``compozy_memory._search.dense``)."""
        return f"{self.prefix}:ix:v"

    @property
    def legacy_ixpost(self) -> str:
        """The index postings of data format 1 (a ZSET): deleted when the index is rebuilt."""
        return f"{self.prefix}:ix:post"

    @property
    def legacy_ixdocs(self) -> str:
        """The index documents of data format 1 (a HASH): deleted when the index is rebuilt."""
        return f"{self.prefix}:ix:docs"

    @property
    def legacy_ixp(self) -> str:
        """The index postings of data format 2 (a HASH of term -> packed postings): deleted
        when the index is rebuilt."""
        return f"{self.prefix}:ix:p"

    @property
    def facts(self) -> str:
        """Session facts (the kernel layer): a HASH of fact key -> value."""
        return f"{self.prefix}:facts"

    @property
    def factord(self) -> str:
        """The facts' order: a ZSET of fact keys scored by when each was last set (a counter
        in meta), so the oldest is evicted first and setting a key moves it to the end."""
        return f"{self.prefix}:factord"

    @property
    def respins(self) -> str:
        """The stored results this memory's messages pin: a HASH of result key -> pins, so a
        clear releases exactly what this memory pinned, once."""
        return f"{self.prefix}:respins"

    @property
    def lock(self) -> str:
        return f"{self.prefix}:lock"

    @property
    def data(self) -> tuple[str, ...]:
        """Every key holding the memory's data (all but the lock), in the scripts' key order."""
        return (
            self.msgs,
            self.meta,
            self.archive,
            self.summaries,
            self.dedupe,
            self.recalled,
            self.ixseg,
            self.ixdocs,
            self.ixgone,
            self.ixvec,
            self.facts,
            self.factord,
            self.respins,
        )
