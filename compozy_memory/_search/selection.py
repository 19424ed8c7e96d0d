"""Pure choices a handle makes over what a reader asked: the terms a query searches."""

from __future__ import annotations

from compozy_memory._search.analysis import analyze_query
from compozy_memory.errors import UsageError

__all__ = ["query_terms"]

# A query longer than this many distinct terms is cut: each term costs a postings read.
_MAX_QUERY_TERMS = 32


def query_terms(query: str | None, key: str) -> list[str]:
    if query is None:
        return []
    if not isinstance(query, str):
        raise UsageError(f"a query is text, got {type(query).__name__}", key=key)
    return analyze_query(query)[:_MAX_QUERY_TERMS]
