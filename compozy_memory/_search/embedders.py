"""Ready embedders for real models, and the cache every embedding goes through.

* :class:`SentenceTransformerEmbedder`: a sentence-transformers model (``pip install
  'compozy-memory[sentence-transformers]'``), loaded from a local folder or a name the
  Hugging Face cache holds; encoded in batches on a worker thread.
* :class:`OnnxEmbedder`: an ONNX export of a transformer encoder and its ``tokenizer.json``
  (``pip install 'compozy-memory[onnx]'``), files the application provides (nothing is
  downloaded), mean- or CLS-pooled; on a worker thread.
* :class:`OpenAIEmbedder`: any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, Azure,
  vLLM, Ollama, LiteLLM, text-embeddings-inference), over ``httpx``.

Each takes ``batch_size`` (texts a model call or request holds) and ``timeout`` (seconds one
call may take: past it the call raises :class:`TimeoutError`, which a search treats as the
embedder failing: BM25 ranks alone). A local model's work on its thread cannot be stopped;
the deadline only stops the wait.

:func:`embed_shared` is how the library embeds (the vector step and a search's query): a
text already embedded by this embedder in this process is not embedded again, and texts
being embedded by another call (a background catch-up and an explicit ``catch_up()`` read
the same pending messages) are waited for rather than embedded twice.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from compozy_memory._search.dense import Embedder, embed_all
from compozy_memory.errors import ConfigurationError, UsageError

__all__ = [
    "EmbeddingCache",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "embed_shared",
]

_DEFAULT_TIMEOUT = 60.0


def _require(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigurationError(
            f"{module} is not installed: pip install 'compozy-memory[{extra}]'"
        ) from exc


def _check_settings(batch_size: int, timeout: float | None) -> None:
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ConfigurationError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
        raise ConfigurationError(f"timeout must be a number of seconds > 0, got {timeout!r}")


async def _in_threads(
    texts: Sequence[str],
    prefix: str,
    batch_size: int,
    deadline: float | None,
    encode: Callable[[list[str]], list[list[float]]],
) -> list[list[float]]:
    """``texts`` (each after ``prefix``) encoded by a local model in worker threads, a batch
    at a time, under the deadline."""
    batch = [prefix + t for t in texts] if prefix else list(texts)

    async def call(chunk: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(encode, chunk)

    return await _in_batches(batch, batch_size, deadline, call)


async def _in_batches(
    texts: Sequence[str],
    batch_size: int,
    deadline: float | None,
    call: Any,
) -> list[list[float]]:
    """``call(batch)`` (a coroutine) over ``texts`` in batches, the whole within ``deadline``
    seconds."""
    out: list[list[float]] = []

    async def run() -> None:
        for start in range(0, len(texts), batch_size):
            out.extend(await call(list(texts[start : start + batch_size])))

    if deadline is None:
        await run()
    else:
        async with asyncio.timeout(deadline):
            await run()
    return out


class SentenceTransformerEmbedder:
    """A sentence-transformers model, e.g. all-MiniLM-L6-v2 (384 dimensions).

    ``model``: a local folder or a model name (loaded as sentence-transformers loads it: set
    ``HF_HUB_OFFLINE=1`` to forbid downloads), or a ``SentenceTransformer`` already loaded.
    ``query_prefix`` / ``document_prefix`` are put before queries and documents (e5's
    ``"query: "`` and ``"passage: "``). ``name`` labels the stored vectors (default: the
    folder's or model's name): vectors of another label are dropped and made again."""

    def __init__(
        self,
        model: str | Path | Any,
        *,
        name: str | None = None,
        batch_size: int = 64,
        timeout: float | None = _DEFAULT_TIMEOUT,
        device: str | None = "cpu",
        query_prefix: str = "",
        document_prefix: str = "",
    ) -> None:
        _check_settings(batch_size, timeout)
        if isinstance(model, str | Path):
            st = _require("sentence_transformers", "sentence-transformers")
            label = name or Path(str(model)).name or str(model)
            model = st.SentenceTransformer(str(model), device=device)
        else:
            label = name or type(model).__name__
        self._model = model
        get = getattr(model, "get_embedding_dimension", None)
        get = get or model.get_sentence_embedding_dimension
        dimensions = get()
        if not isinstance(dimensions, int) or dimensions < 1:
            raise ConfigurationError(f"{label}: the model does not say its dimensions")
        self.model = label
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.timeout = timeout
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        # A model object is not safe to run from two threads at once.
        self._lock = threading.Lock()

    def _encode(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            vectors = self._model.encode(
                texts, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True
            )
        return [list(map(float, v)) for v in vectors]

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        prefix = self.query_prefix if query else self.document_prefix
        return await _in_threads(texts, prefix, self.batch_size, self.timeout, self._encode)


class OnnxEmbedder:
    """An ONNX transformer encoder: ``model_path`` (the ``.onnx`` file) and ``tokenizer_path``
    (its Hugging Face ``tokenizer.json``), both provided by the application.

    The model takes ``input_ids`` and ``attention_mask`` (and ``token_type_ids`` if it
    declares them, as zeros) and its first output is either token states ``(batch, tokens,
    dim)``, pooled here by ``pooling`` (``"mean"`` over the attention mask, or ``"cls"``: the
    first token), or sentence vectors ``(batch, dim)``. Texts are cut at ``max_length``
    tokens. ``name`` labels the stored vectors (default: the file's name)."""

    def __init__(
        self,
        model_path: str | Path,
        tokenizer_path: str | Path,
        *,
        name: str | None = None,
        pooling: str = "mean",
        max_length: int = 256,
        batch_size: int = 32,
        timeout: float | None = _DEFAULT_TIMEOUT,
        query_prefix: str = "",
        document_prefix: str = "",
        threads: int | None = None,
    ) -> None:
        _check_settings(batch_size, timeout)
        if pooling not in ("mean", "cls"):
            raise ConfigurationError(f"pooling is 'mean' or 'cls', got {pooling!r}")
        if not isinstance(max_length, int) or max_length < 1:
            raise ConfigurationError(f"max_length must be an integer >= 1, got {max_length!r}")
        for path in (model_path, tokenizer_path):
            if not Path(path).is_file():
                raise ConfigurationError(f"no such file: {path}")
        ort = _require("onnxruntime", "onnx")
        tokenizers = _require("tokenizers", "onnx")
        self._np = _require("numpy", "onnx")
        options = ort.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        self._session = ort.InferenceSession(
            str(model_path), options, providers=["CPUExecutionProvider"]
        )
        self._inputs = {i.name for i in self._session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= self._inputs:
            raise ConfigurationError(
                f"{model_path}: the model takes {sorted(self._inputs)}, not input_ids and "
                "attention_mask"
            )
        tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_path))
        tokenizer.enable_truncation(max_length=max_length)
        tokenizer.enable_padding()
        self._tokenizer = tokenizer
        self.pooling = pooling
        self.batch_size = batch_size
        self.timeout = timeout
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self._lock = threading.Lock()
        self.model = name or Path(model_path).name
        self.dimensions = len(self._encode(["dimensions"])[0])

    def _encode(self, texts: list[str]) -> list[list[float]]:
        np = self._np
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        with self._lock:
            output = self._session.run(None, feed)[0]
        if output.ndim == 3:
            if self.pooling == "cls":
                output = output[:, 0, :]
            else:
                weights = mask[:, :, None].astype(output.dtype)
                output = (output * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        if output.ndim != 2 or output.shape[0] != len(texts):
            raise ConfigurationError(
                f"{self.model}: the model's first output has shape {output.shape}, not "
                "(batch, tokens, dim) or (batch, dim)"
            )
        return [list(map(float, row)) for row in output]

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        prefix = self.query_prefix if query else self.document_prefix
        return await _in_threads(texts, prefix, self.batch_size, self.timeout, self._encode)


class OpenAIEmbedder:
    """An OpenAI-compatible embeddings endpoint: ``POST {base_url}/embeddings`` with
    ``{"model", "input": [texts]}``, answered by ``{"data": [{"index", "embedding"}]}``.

    ``api_key`` defaults to ``OPENAI_API_KEY`` (none sent when neither is set: a local
    server). ``dimensions`` is the vectors' length; with ``send_dimensions`` it is also
    asked for (text-embedding-3 models shorten their vectors to it). ``timeout`` bounds one
    call, all its requests together. ``client``: an ``httpx.AsyncClient`` of your own
    (proxies, retries); else one is made per event loop."""

    def __init__(
        self,
        model: str,
        dimensions: int,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        batch_size: int = 256,
        timeout: float | None = 30.0,
        send_dimensions: bool = False,
        query_prefix: str = "",
        document_prefix: str = "",
        client: Any = None,
    ) -> None:
        _check_settings(batch_size, timeout)
        if not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1:
            raise ConfigurationError(f"dimensions must be an integer >= 1, got {dimensions!r}")
        if not model:
            raise ConfigurationError("an embedding model name is needed")
        self._httpx = _require("httpx", "openai-embeddings")
        self.model = model
        self.dimensions = dimensions
        self.url = base_url.rstrip("/") + "/embeddings"
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.batch_size = batch_size
        self.timeout = timeout
        self.send_dimensions = send_dimensions
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self._client = client
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )

    def _http(self) -> Any:
        if self._client is not None:
            return self._client
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = self._httpx.AsyncClient()
        return client

    async def _request(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self.send_dimensions:
            body["dimensions"] = self.dimensions
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        reply = await self._http().post(self.url, json=body, headers=headers, timeout=None)
        reply.raise_for_status()
        data = reply.json().get("data")
        if not isinstance(data, list) or len(data) != len(texts):
            raise ConfigurationError(
                f"{self.url} answered {type(data).__name__} for {len(texts)} texts, not a list "
                "of as many embeddings"
            )
        ordered = sorted(data, key=lambda item: item.get("index", 0))
        return [list(map(float, item["embedding"])) for item in ordered]

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        prefix = self.query_prefix if query else self.document_prefix
        batch = [prefix + t for t in texts] if prefix else list(texts)
        return await _in_batches(batch, self.batch_size, self.timeout, self._request)


# --- each text embedded once --------------------------------------------------------------

_Key = tuple[bool, str]


class EmbeddingCache:
    """The quantized vectors one embedder made in this process, ``max_texts`` at most (the
    least recently used go first), and the texts being embedded right now, which a second
    call waits for instead of embedding them again."""

    def __init__(self, max_texts: int = 8_192) -> None:
        if max_texts < 0:
            raise UsageError(f"max_texts must be >= 0, got {max_texts}")
        self.max_texts = max_texts
        self._done: OrderedDict[_Key, bytes] = OrderedDict()
        self._running: dict[_Key, concurrent.futures.Future[bytes]] = {}
        self._lock = threading.Lock()
        #: Texts embedded by the model through this cache (each a model input).
        self.embedded = 0

    def __len__(self) -> int:
        return len(self._done)

    async def embed(
        self, embedder: Embedder, texts: Sequence[str], *, query: bool = False
    ) -> list[bytes]:
        """Quantized vectors of ``texts`` (:func:`~compozy_memory._search.dense.embed_all`),
        from the cache, from another call embedding them, or embedded here (each distinct
        text once)."""
        keys = [(query, t) for t in texts]
        mine: dict[_Key, concurrent.futures.Future[bytes]] = {}
        waits: dict[_Key, concurrent.futures.Future[bytes]] = {}
        found: dict[_Key, bytes] = {}
        with self._lock:
            for key in keys:
                if key in found or key in mine or key in waits:
                    continue
                blob = self._done.get(key)
                if blob is not None:
                    self._done.move_to_end(key)
                    found[key] = blob
                elif (running := self._running.get(key)) is not None:
                    waits[key] = running
                else:
                    mine[key] = self._running[key] = concurrent.futures.Future()
        if mine:
            todo = list(mine)
            try:
                blobs = await embed_all(embedder, [t for _, t in todo], query=query)
            except BaseException as exc:
                with self._lock:
                    for key, future in mine.items():
                        self._running.pop(key, None)
                        future.set_exception(exc)
                        future.exception()  # retrieved: no "never retrieved" warning
                raise
            with self._lock:
                self.embedded += len(todo)
                for key, blob in zip(todo, blobs, strict=True):
                    self._running.pop(key, None)
                    mine[key].set_result(blob)
                    found[key] = blob
                    if self.max_texts:
                        self._done[key] = blob
                while len(self._done) > self.max_texts:
                    self._done.popitem(last=False)
        for key, future in waits.items():
            found[key] = await asyncio.wrap_future(future)
        return [found[key] for key in keys]


_caches: weakref.WeakKeyDictionary[Any, EmbeddingCache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def cache_of(embedder: Embedder) -> EmbeddingCache | None:
    """The process-wide cache of ``embedder`` (made on first use), or None for an embedder
    that cannot be weakly referenced."""
    with _caches_lock:
        try:
            cache = _caches.get(embedder)
            if cache is None:
                cache = _caches[embedder] = EmbeddingCache()
        except TypeError:
            return None
    return cache


async def embed_shared(
    embedder: Embedder, texts: Sequence[str], *, query: bool = False
) -> list[bytes]:
    """Quantized vectors of ``texts`` through ``embedder``'s cache (:class:`EmbeddingCache`):
    what every memory handle of this process sharing the embedder embeds, each text once."""
    cache = cache_of(embedder)
    if cache is None:
        return await embed_all(embedder, texts, query=query)
    return await cache.embed(embedder, texts, query=query)
