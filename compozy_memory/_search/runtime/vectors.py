"""The vector step: keeps a memory's dense vectors caught up with its index, off the write
path, in bounded steps (with an :class:`~compozy_memory.Embedder` only).

Like the indexer, it runs in the background after this handle's writes. It asks Redis which
indexed messages have no vector yet (``lua/search/vec_pending.lua``: at most
``VECTOR_STEP_DOCS``, by id, live, summaries and archived alike), embeds their text here without
the memory's speaker names (:func:`~compozy_memory._search.dense.dense_text`), and stores the
quantized vectors (``lua/search/vec_apply.lua``), checked against where the step stood when it
read, so replicas can race: one step wins, the others read again. Vectors of the archive's
dropped messages go with them (``lua/lib/archive.lua``); vectors of another model are dropped
and made again (``lua/search/vec_reset.lua``): a memory holds one model's vectors.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compozy_memory._model.limits import (
    MAX_SPEAKER_NAMES,
    MAX_TERM_BYTES,
    MAX_VECTOR_BYTES,
    VECTOR_STEP_BYTES,
    VECTOR_STEP_DOCS,
)
from compozy_memory._search.dense import VECTOR_FORMAT, Embedder, dense_text
from compozy_memory._search.embedders import embed_shared
from compozy_memory._search.runtime.indexer import Indexer
from compozy_memory._search.runtime.vector_calls import VectorPending
from compozy_memory._wire.background import Backgrounded, Debounced
from compozy_memory._wire.effects import Await
from compozy_memory._wire.gateway import MemoryGateway
from compozy_memory._wire.steps import Steps, is_sync, op
from compozy_memory.errors import CompozyMemoryError, ConfigurationError, EmbedderError

__all__ = [
    "QUERY_EMBED_DEADLINE",
    "STEP_EMBED_DEADLINE",
    "VectorProgress",
    "Vectorizer",
    "embed",
    "embed_deadline",
    "model_id",
    "speakers",
]

log = logging.getLogger("compozy_memory.vectors")

#: Bytes of envelopes one pending read returns (at least one envelope, whatever its size).
_READ_BYTES = 1024 * 1024
#: Characters of a message's text that are embedded (a static model averages them; a remote
#: one would cut them at its own input limit).
_EMBED_CHARS = 8_000
#: How long an embedder may take (seconds): a search's query (a user waits; past it search
#: ranks by BM25 alone), and a vector step's batch (in the background; past it the step
#: raises EmbedderError and writes nothing). An embedder's own ``timeout`` attribute, when it
#: has one, replaces both.
QUERY_EMBED_DEADLINE = 2.0
STEP_EMBED_DEADLINE = 30.0


def embed_deadline(embedder: Embedder, *, query: bool) -> float:
    """How long ``embedder`` may take to embed a query (``query``) or a step's batch."""
    own = getattr(embedder, "timeout", None)
    if isinstance(own, (int, float)) and not isinstance(own, bool) and own > 0:
        return float(own)
    return QUERY_EMBED_DEADLINE if query else STEP_EMBED_DEADLINE


def embed(embedder: Embedder, texts: Sequence[str], *, query: bool = False) -> Await[list[bytes]]:
    """The effect of embedding ``texts`` with ``embedder`` (quantized) within its deadline
    (:func:`embed_deadline`; TimeoutError past it): a coroutine, awaited on an event loop, run
    on the summarizers' loop from a thread. Through the embedder's cache
    (:func:`~compozy_memory._search.embedders.embed_shared`): a text this process embedded
    with it, or is embedding, is not embedded again."""
    return Await(
        lambda: embed_shared(embedder, texts, query=query), embed_deadline(embedder, query=query)
    )


@dataclass(frozen=True, slots=True)
class VectorProgress:
    """Where a memory's vectors stand after :meth:`Vectorizer.catch_up`."""

    #: Steps written by this call.
    steps: int
    #: Messages this call embedded.
    embedded: int
    #: False when the call stopped (``max_steps``) before every indexed message had a vector.
    caught_up: bool


def model_id(embedder: Embedder) -> str:
    """What the stored vectors are labelled with: the model, its dimensions and the vector
    format, at most ``MAX_TERM_BYTES`` bytes (a longer name keeps a prefix and a digest)."""
    label = f"{embedder.model}/{embedder.dimensions}/v{VECTOR_FORMAT}"
    data = label.encode()
    if len(data) <= MAX_TERM_BYTES:
        return label
    digest = hashlib.blake2b(data, digest_size=8).hexdigest()
    return data[: MAX_TERM_BYTES - 17].decode("utf-8", "ignore") + "#" + digest


def speakers(names: frozenset[str] | set[str]) -> list[str]:
    """Names that can be kept beside the vectors (no tab, at most ``MAX_TERM_BYTES``), sorted."""
    return sorted(n for n in names if n and "\t" not in n and len(n.encode()) <= MAX_TERM_BYTES)


class Vectorizer(Backgrounded):
    """Keeps one memory's vectors caught up; a memory handle configured with an embedder owns
    one (``memory.vectors``).

    :meth:`catch_up` is steps: ``await`` it on an async handle's vectorizer; a
    :class:`~compozy_memory.SyncMemoryInstance` runs it itself."""

    def __init__(
        self,
        gateway: MemoryGateway,
        embedder: Embedder,
        indexer: Indexer,
        *,
        name: str = "memory",
        debounce: float = 0.05,
        background: bool = True,
    ) -> None:
        dimensions = embedder.dimensions
        if not isinstance(dimensions, int) or not 1 <= dimensions <= MAX_VECTOR_BYTES:
            raise ConfigurationError(
                f"{embedder.model}: an embedder's dimensions are 1 to {MAX_VECTOR_BYTES}, got "
                f"{dimensions!r}"
            )
        self.gateway = gateway
        self.embedder = embedder
        self.indexer = indexer
        #: Messages one step embeds: as many as fit VECTOR_STEP_BYTES of vectors.
        self.step_docs = max(1, min(VECTOR_STEP_DOCS, VECTOR_STEP_BYTES // dimensions))
        self.name = name
        self.debounce = debounce
        #: False: writes never start a catch-up; only :meth:`catch_up` does.
        self.background = background
        #: What the stored vectors are labelled with (:func:`model_id`).
        self.model = model_id(embedder)
        #: A write of this handle left messages without a vector.
        self.dirty = False
        self._job = Debounced(
            sync=is_sync(gateway.transport),
            work_async=self._catch_up_async,
            work_sync=self._catch_up_sync,
            debounce=debounce,
        )

    @property
    def transport(self) -> Any:
        return self.gateway.transport

    # -- background trigger ---------------------------------------------------------------

    def notice(self) -> None:
        """A write made messages to embed: catch up soon, in the background, once the
        indexer has indexed them."""
        self.dirty = True
        if not self.background or self.gateway.read_only:
            return
        self._job.fire()

    async def _catch_up_async(self) -> None:
        await self.indexer.wait_idle()
        try:
            await self.catch_up()
        except Exception as exc:
            self._failed(exc)

    def _catch_up_sync(self) -> None:
        try:
            # Index first (a race with the indexer's own run is safe: steps are checked);
            # waiting for it on a pool thread could wait on a job queued behind this one.
            if self.indexer.dirty:
                self.transport.drive(self.indexer.catch_up())
            self.transport.drive(self.catch_up())
        except Exception as exc:
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        """Log a background catch-up's failure: the next write tries again."""
        what = "embedding %s failed"
        if not isinstance(exc, CompozyMemoryError):  # a provider's own (network, quota)
            what = "the embedder failed on %s"
        log.error(what, self.gateway.name, exc_info=exc, extra={"memory": self.name})

    # -- steps ------------------------------------------------------------------------------

    @op
    def catch_up(self, *, max_steps: int | None = None) -> Steps[VectorProgress]:
        """Embed what the index holds without a vector, a step at a time, until nothing is
        left (or ``max_steps`` steps were written). Vectors of another model are dropped
        first."""
        steps = embedded = 0
        caught_up = False
        while max_steps is None or steps < max_steps:
            pending = yield from self.gateway.vec_pending(self.step_docs, _READ_BYTES)
            if pending.model and pending.model != self.model:
                yield from self.gateway.vec_reset(self.model)
                log.info(
                    "vectors of %s (%s) dropped to be made again with %s",
                    self.gateway.name,
                    pending.model,
                    self.model,
                    extra={"memory": self.name},
                )
                continue
            if pending.idle:
                caught_up = True
                break
            done = yield from self._step(pending)
            steps += 1
            embedded += done or 0
        self.dirty = not caught_up
        return VectorProgress(steps, embedded, caught_up)

    def _step(self, pending: VectorPending) -> Steps[int | None]:
        known = set(pending.names)
        found = {m.name.casefold() for m in pending.messages if m.name and m.name.strip()}
        new = speakers(found - known)[: max(0, MAX_SPEAKER_NAMES - len(known))]
        names = frozenset(known | set(new))
        texts = [
            dense_text(m.model_dump(mode="json", include={"content"}), names)[:_EMBED_CHARS]
            for m in pending.messages
        ]
        try:
            blobs = (yield from embed(self.embedder, texts)) if texts else []
        except CompozyMemoryError:
            raise
        except Exception as exc:  # the provider's own failure, or its deadline
            raise EmbedderError(
                f"{self.embedder.model}: embedding {len(texts)} messages failed "
                f"({type(exc).__name__}: {exc}); nothing was stored",
                key=self.gateway.name,
            ) from exc
        applied = yield from self.gateway.vec_apply(
            pending,
            model=self.model,
            upto=pending.upto,
            names=new,
            vectors=[(m.id or 0, b) for m, b in zip(pending.messages, blobs, strict=True)],
        )
        return len(blobs) if applied.applied else None
