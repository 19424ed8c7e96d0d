"""Search's runtime: its script calls (mixed into the gateway) and the steps that run them
(the indexer, a query's BM25 ranking, the vector step, a fused search), over the wire and the
pure core of :mod:`compozy_memory._search`; nothing of the store."""
