"""Dense scores beside BM25: the ``Embedder`` protocol and compact vectors.

Any embedding provider plugs in by implementing :class:`Embedder` (an ``async`` batch call);
a few lines wrap OpenAI, Voyage, fastembed or sentence-transformers. Vectors are stored
quantized: 7-bit integer components as ASCII, one byte a dimension (256 a message for the
256-dimension default model, against 1,024 as float32), and cosine similarity is computed on
the integers. Everything here runs without numpy (used when present), so the package imports
without the ``embeddings`` extra.

A provider in a few lines (OpenAI's async client)::

    class OpenAIEmbedder:
        model, dimensions = "text-embedding-3-small", 1536

        def __init__(self, client: AsyncOpenAI) -> None:
            self.client = client

        async def embed(self, texts, *, query=False):
            reply = await self.client.embeddings.create(model=self.model, input=list(texts))
            return [item.embedding for item in reply.data]
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from compozy_memory._search.documents import message_text
from compozy_memory.errors import ConfigurationError, UsageError

__all__ = [
    "VECTOR_FORMAT",
    "Embedder",
    "cosine",
    "cosines",
    "dense_text",
    "embed_all",
    "quantize",
    "quantized_dimensions",
    "speaker_names",
    "strip_names",
    "unpack",
]

#: Bumped when the byte layout of :func:`quantize` changes: stored vectors of another format
#: are rebuilt, not read. Format 2: 7-bit components as ASCII, no scale (format 1 held a
#: float32 scale and int8 components: binary, which a client that decodes replies cannot read).
VECTOR_FORMAT = 2
#: Components run from -_PEAK to _PEAK, stored as the byte ``component + _OFFSET`` (1..127).
_PEAK = 63
_OFFSET = 64
_ASCII = frozenset(range(1, 128))


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors, a batch per call.

    ``model`` names the model (stored beside the vectors: another model's vectors are never
    compared with this one's) and ``dimensions`` is the length of every vector. ``query`` is
    true when the texts are search queries, for models that embed queries and documents
    differently (e5's "query: " prefix, Voyage's ``input_type``). Return one vector per
    text, in order.
    """

    model: str
    dimensions: int

    async def embed(
        self, texts: Sequence[str], *, query: bool = False
    ) -> Sequence[Sequence[float]]:
        """One vector per text."""
        ...


_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")


def strip_names(text: str, names: Collection[str]) -> str:
    """``text`` without the words in ``names`` (casefolded; a possessive "'s" goes too).

    A static model's vector of a short message is dominated by a rare token such as a
    person's name: "Nice one, Caroline." then sits closer to "What did Caroline adopt?" than
    the answer does. Names are matched by BM25 (speakers are index terms); the dense score is
    left to say what a message is about.
    """
    if not names:
        return text

    def keep(found: re.Match[str]) -> str:
        word = found.group().casefold()
        return "" if word in names or word.removesuffix("'s") in names else found.group()

    return " ".join(_WORD.sub(keep, text).split())


def dense_text(message: Mapping[str, Any], names: Collection[str] = ()) -> str:
    """What is embedded for a message: its text (see :func:`message_text`), with the
    memory's speaker names (casefolded, :func:`speaker_names`) taken out."""
    return strip_names(message_text(message), names)


def speaker_names(messages: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The casefolded ``name`` fields of ``messages``: the words :func:`dense_text` and a
    query's embedding leave out."""
    return frozenset(
        n.casefold() for m in messages if isinstance(n := m.get("name"), str) and n.strip()
    )


def quantize(vector: Sequence[float]) -> bytes:
    """``vector`` as ``len(vector)`` bytes of ASCII: each component of the vector scaled so
    its largest is 63, rounded to an integer in -63..63 and stored as that plus 64.

    A vector's length is irrelevant to cosine similarity, so no scale is kept: the cosine is
    computed on the integers (:func:`cosine`), within about 0.02 of the float value at 256
    dimensions. Text-safe, so a stored vector comes back whole through a client that decodes
    replies as UTF-8. A zero vector stays zero."""
    peak = max((abs(x) for x in vector), default=0.0)
    if not vector or not math.isfinite(math.fsum(x * x for x in vector)) or math.isnan(peak):
        raise UsageError("an embedding must be a non-empty vector of finite numbers")
    if peak == 0.0:
        return bytes([_OFFSET]) * len(vector)
    factor = _PEAK / peak
    return bytes(round(x * factor) + _OFFSET for x in vector)


def unpack(blob: bytes) -> array[int]:
    """The integer components of a :func:`quantize` result; UsageError for bytes that are
    not one (empty, or outside 1..127)."""
    if not blob or not _ASCII.issuperset(blob):
        raise UsageError(f"a stored vector is 1 or more bytes in 1..127, got {blob[:16]!r}")
    return array("b", (b - _OFFSET for b in blob))


def quantized_dimensions(blob: bytes) -> int:
    """How many components a :func:`quantize` result holds."""
    return len(blob)


def cosine(query: array[int], doc: array[int]) -> float:
    """Cosine similarity of two :func:`unpack` results. Vectors of different lengths, or a
    zero vector, score 0."""
    if len(query) != len(doc):
        return 0.0
    norms = math.sqrt(sum(x * x for x in query) * sum(y * y for y in doc))
    return sum(map(int.__mul__, query, doc)) / norms if norms else 0.0


def cosines(query: bytes, docs: Sequence[bytes]) -> list[float]:
    """:func:`cosine` of a stored query vector with each of ``docs``, in order.

    With numpy installed (the ``embeddings`` extra brings it) one integer matrix product,
    about 0.1 ms for 300 candidates of 256 dimensions; else the same sums in pure Python
    (about 40 us a candidate)."""
    if not docs:
        return []
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - exercised only without numpy
        head = unpack(query)
        return [cosine(head, unpack(doc)) for doc in docs]
    same = [len(doc) == len(query) for doc in docs]
    rows = [doc for doc, ok in zip(docs, same, strict=True) if ok]
    out = [0.0] * len(docs)
    if rows:
        vector = np.frombuffer(query, dtype=np.uint8).astype(np.int32) - _OFFSET
        stored = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), len(query))
        matrix = stored.astype(np.int32) - _OFFSET
        norms = np.sqrt((matrix * matrix).sum(axis=1) * float(vector @ vector))
        dots = matrix @ vector
        values = iter(np.divide(dots, norms, out=np.zeros(len(rows)), where=norms > 0).tolist())
        out = [next(values) if ok else 0.0 for ok in same]
    return out


async def embed_all(
    embedder: Embedder, texts: Sequence[str], *, query: bool = False, batch: int = 64
) -> list[bytes]:
    """Quantized vectors of ``texts``, embedded ``batch`` at a time.

    Raises :class:`~compozy_memory.ConfigurationError` when the embedder returns the wrong
    number of vectors or a vector of another length than its ``dimensions``.
    """
    if batch < 1:
        raise UsageError(f"batch must be at least 1, got {batch}")
    out: list[bytes] = []
    for start in range(0, len(texts), batch):
        chunk = texts[start : start + batch]
        vectors = await embedder.embed(chunk, query=query)
        if len(vectors) != len(chunk):
            raise ConfigurationError(
                f"{embedder.model} returned {len(vectors)} vectors for {len(chunk)} texts"
            )
        for vector in vectors:
            if len(vector) != embedder.dimensions:
                raise ConfigurationError(
                    f"{embedder.model} returned a vector of {len(vector)} dimensions, "
                    f"not {embedder.dimensions}"
                )
            out.append(quantize(vector))
    return out
