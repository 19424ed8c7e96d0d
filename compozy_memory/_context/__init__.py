"""Groundwork for searching a memory's archive: text analysis and BM25 scoring."""
