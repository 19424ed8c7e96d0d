"""Dense scores beside BM25: the ``Embedder`` protocol and compact vectors.

Any embedding provider plugs in by implementing :class:`Embedder` (an ``async`` batch call);
a few lines wrap OpenAI, Voyage, fastembed or sentence-transformers. Vectors are stored
quantized: unit-normalised, then int8 with one float32 scale, ``4 + dimensions`` bytes a
message (260 for the 256-dimension default model, against 1,024 as float32), and cosine
similarity is computed on the integers. Everything here runs without numpy (used when
present), so the package imports without the ``embeddings`` extra.

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
import struct
from array import array
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from compozy_memory._search.analysis import message_text
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
#: are rebuilt, not read.
VECTOR_FORMAT = 1
_HEADER = struct.Struct("<f")
_INT8_MAX = 127


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
    """``vector`` as ``4 + len(vector)`` bytes: a float32 scale, then int8 components of the
    unit-normalised vector (``component = int8 * scale``). A zero vector stays zero."""
    norm = math.sqrt(math.fsum(x * x for x in vector))
    if not vector or not math.isfinite(norm):
        raise UsageError("an embedding must be a non-empty vector of finite numbers")
    peak = max(abs(x) for x in vector) / norm if norm else 0.0
    if peak == 0.0:
        return _HEADER.pack(0.0) + bytes(len(vector))
    factor = _INT8_MAX / (peak * norm)
    ints = array("b", (round(x * factor) for x in vector))
    return _HEADER.pack(peak / _INT8_MAX) + ints.tobytes()


def unpack(blob: bytes) -> tuple[float, array[int]]:
    """The scale and the int8 components of a :func:`quantize` result."""
    if len(blob) <= _HEADER.size:
        raise UsageError(f"a stored vector has {len(blob)} bytes, too few to hold one")
    (scale,) = _HEADER.unpack_from(blob)
    ints = array("b")
    ints.frombytes(blob[_HEADER.size :])
    return scale, ints


def quantized_dimensions(blob: bytes) -> int:
    """How many components a :func:`quantize` result holds."""
    return len(blob) - _HEADER.size


def cosine(query: tuple[float, array[int]], doc: tuple[float, array[int]]) -> float:
    """Cosine similarity of two :func:`unpack` results (within about 0.01 of the float32
    value at 256 dimensions). Vectors of different lengths score 0."""
    scale, ints = query
    other_scale, other = doc
    if len(ints) != len(other):
        return 0.0
    return scale * other_scale * sum(map(int.__mul__, ints, other))


def cosines(query: bytes, docs: Sequence[bytes]) -> list[float]:
    """:func:`cosine` of a stored query vector with each of ``docs``, in order.

    With numpy installed (the ``embeddings`` extra brings it) one int8 matrix product, about
    0.1 ms for 300 candidates of 256 dimensions; else the same sums in pure Python (about
    40 us a candidate)."""
    if not docs:
        return []
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - exercised only without numpy
        head = unpack(query)
        return [cosine(head, unpack(doc)) for doc in docs]
    scale, width = _HEADER.unpack_from(query)[0], quantized_dimensions(query)
    same = [len(doc) == len(query) for doc in docs]
    rows = [doc for doc, ok in zip(docs, same, strict=True) if ok]
    out = [0.0] * len(docs)
    if rows:
        matrix = np.frombuffer(b"".join(d[_HEADER.size :] for d in rows), dtype=np.int8)
        vector = np.frombuffer(query, dtype=np.int8, offset=_HEADER.size).astype(np.int32)
        scales = np.array([_HEADER.unpack_from(d)[0] for d in rows], dtype=np.float64)
        dots = matrix.reshape(len(rows), width).astype(np.int32) @ vector
        values = iter((scales * dots * scale).tolist())
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
