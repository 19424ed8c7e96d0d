"""The offline default :class:`~compozy_memory._search.dense.Embedder`: a static embedding
table, averaged over a text's tokens.

A static model has no network to run: a token's vector is a row of a table, a text's vector
the mean of its tokens' rows, so embedding costs tens of microseconds a message on one core
and needs no GPU, no torch and no download. The default table is WordLlama's 256-dimension
``l2_supercat`` model (MIT licence), whose weights and tokenizer ship inside the
``wordllama`` wheel: ``pip install 'compozy-memory[embeddings]'``. Its files are read
directly (``safetensors`` and ``tokenizers``), without importing ``wordllama`` itself.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compozy_memory.errors import ConfigurationError

__all__ = ["StaticEmbedder", "default_model_files"]

_WEIGHTS = "weights/l2_supercat_256.safetensors"
_TOKENIZER = "tokenizers/l2_supercat_tokenizer_config.json"
_INSTALL = "pip install 'compozy-memory[embeddings]'"
# Batches this small run on the event loop: a thread hop would cost more than the work.
_INLINE_TEXTS = 8


def default_model_files() -> tuple[Path, Path]:
    """The bundled WordLlama weights and tokenizer; ``ConfigurationError`` naming the extra
    to install when they are missing."""
    spec = importlib.util.find_spec("wordllama")
    roots = list(spec.submodule_search_locations or ()) if spec else []
    for root in map(Path, roots):
        weights, tokenizer = root / _WEIGHTS, root / _TOKENIZER
        if weights.is_file() and tokenizer.is_file():
            return weights, tokenizer
    raise ConfigurationError(f"the offline embedding model is not installed: {_INSTALL}")


class StaticEmbedder:
    """Mean of token vectors from a static table (the default: WordLlama, 256 dimensions).

    ``StaticEmbedder()`` loads the bundled default; ``StaticEmbedder(weights, tokenizer)``
    any table in a safetensors file (one 2-D tensor, a row per token id) with its Hugging
    Face ``tokenizer.json``. Vectors are not normalised (the quantizer does that).
    """

    def __init__(
        self, weights: str | Path | None = None, tokenizer: str | Path | None = None
    ) -> None:
        try:
            import numpy as np
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - exercised only without the extra
            raise ConfigurationError(
                f"StaticEmbedder needs numpy, safetensors and tokenizers: {_INSTALL}"
            ) from exc
        if weights is None or tokenizer is None:
            weights, tokenizer = default_model_files()
        tensors = load_file(str(weights))
        if len(tensors) != 1:
            raise ConfigurationError(f"{weights} must hold one embedding table, not {len(tensors)}")
        table = next(iter(tensors.values()))
        if table.ndim != 2:
            raise ConfigurationError(f"{weights} holds a {table.ndim}-D tensor, not a table")
        self._np: Any = np
        self._table: Any = np.ascontiguousarray(table, dtype=np.float32)
        self._tokenizer: Any = Tokenizer.from_file(str(tokenizer))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        self.model = f"static:{Path(weights).stem}"
        self.dimensions = int(self._table.shape[1])

    def embed_now(self, texts: Sequence[str]) -> list[list[float]]:
        """The vectors of ``texts``, computed on the calling thread."""
        np = self._np
        rows = self._table.shape[0]
        out: list[list[float]] = []
        for encoding in self._tokenizer.encode_batch(list(texts), add_special_tokens=False):
            ids = [i for i in encoding.ids if 0 <= i < rows]
            if ids:
                out.append(self._table[np.asarray(ids)].mean(axis=0).tolist())
            else:
                out.append([0.0] * self.dimensions)
        return out

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        """The vectors of ``texts`` (queries and documents alike), off the event loop for
        batches of more than a few texts."""
        del query  # a static model embeds queries and documents the same way
        if len(texts) <= _INLINE_TEXTS:
            return self.embed_now(texts)
        return await asyncio.to_thread(self.embed_now, texts)
