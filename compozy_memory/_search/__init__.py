"""Search, as one feature: its pure core here (the analyzer that turns text into index terms,
the documents, the packed segments and their merges, BM25 scoring, the ranking of what the
index returns, dense vectors and their fusion), its runtime in :mod:`compozy_memory._search.runtime`
(the indexer, a query's ranking read from Redis, the vector step and their script calls), and
its Lua in ``lua/search/``. The core does no I/O and imports neither the wire nor the store."""
