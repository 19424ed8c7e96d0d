"""Pure choices a handle makes over what a reader asked: the terms a query searches."""

from __future__ import annotations

from datetime import date

from compozy_memory._model.limits import MAX_QUERY_TERMS
from compozy_memory._search.analysis import analyze_query
from compozy_memory._search.timewords import time_terms
from compozy_memory.errors import UsageError

__all__ = ["query_terms", "timed_query"]


def query_terms(query: str | None, key: str, reference: date | None = None) -> list[str]:
    """The terms ``query`` searches, at most ``MAX_QUERY_TERMS`` (see :func:`timed_query`)."""
    return timed_query(query, key, reference)[1]


def timed_query(
    query: str | None, key: str, reference: date | None = None
) -> tuple[str | None, list[str]]:
    """The text an embedder is asked and the terms ``query`` searches, at most
    ``MAX_QUERY_TERMS``. With a ``reference`` day, relative time expressions ("last week")
    leave the text and become the date terms of the days they mean
    (:mod:`~compozy_memory._search.timewords`), after the words' terms and within the cap."""
    if query is None:
        return None, []
    if not isinstance(query, str):
        raise UsageError(f"a query is text, got {type(query).__name__}", key=key)
    if reference is None:
        return query, analyze_query(query)[:MAX_QUERY_TERMS]
    text, dates = time_terms(query, reference)
    words = analyze_query(text)[: MAX_QUERY_TERMS - len(dates)]
    return text, words + [term for term in dates if term not in words]
