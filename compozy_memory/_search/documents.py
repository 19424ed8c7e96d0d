"""How one message becomes an index document: its text (content blocks, tool calls and
results flattened), its speaker and its day as terms, its kind, and the argument the indexing
step takes (``lua/search/index_add.lua``). The text itself is analysed by
:mod:`compozy_memory._search.analysis`."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from datetime import date
from functools import lru_cache
from typing import Any, NamedTuple

from compozy_memory._model.limits import MAX_DOC_TERMS
from compozy_memory._model.messages import Message
from compozy_memory._search.analysis import analyze, stem_word

__all__ = [
    "KINDS",
    "MAX_INDEX_TEXT",
    "OTHER_KIND",
    "SUMMARY_TERM",
    "MessageTerms",
    "date_terms",
    "document",
    "document_terms",
    "kind_of",
    "message_day",
    "message_terms",
    "message_text",
]

#: Characters of a message's text the index analyses: the start of a huge tool result says
#: what it is, and the analysis (here) and the indexing step (in Redis) stay bounded.
MAX_INDEX_TEXT = 32_768
#: A document's kind in the index (``lua/lib/docs.lua``), by role; summaries are their own.
KINDS = {"user": 1, "assistant": 2, "system": 3, "tool": 4, "developer": 5, "summary": 6}
OTHER_KIND = 7
#: A term every summary's document holds and no text can make (the analyser never yields
#: "~" but in a capped term's digest, which is hex): a search reads its postings where they
#: meet the candidates to tell summaries from turns.
SUMMARY_TERM = "~summary"
#: The length a summary's document counts as at most (in analysed terms): a long turn's.
SUMMARY_LENGTH = 24

_MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)


def date_terms(day: date) -> list[str]:
    """Terms that let a question about a time find a message from then.

    The month name (stemmed like any word), the year and the ISO date: "in May 2023" and
    "on 2023-05-08" both match a message sent on that day.
    """
    return [stem_word(_MONTHS[day.month - 1]), str(day.year), day.isoformat()]


class MessageTerms(NamedTuple):
    """What one message contributes to the index: term frequencies and document length."""

    tf: Counter[str]
    length: int


def _flatten(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            _flatten(item, out)
    elif isinstance(value, list | tuple):
        for item in value:
            _flatten(item, out)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        out.append(str(value))


def _block_text(block: Any, out: list[str]) -> None:
    if isinstance(block, str):
        out.append(block)
        return
    if not isinstance(block, Mapping):
        return
    kind = block.get("type")
    if kind == "tool_use":
        # The tool's name says what was looked up; the input values say which record
        # (an order id, a city). Keys are schema, the same in every call: left out.
        name = block.get("name")
        if isinstance(name, str):
            out.append(name)
        _flatten(block.get("input"), out)
    elif kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            for item in content:
                _block_text(item, out)
        elif isinstance(content, str):
            out.append(content)
        elif content is not None:
            out.append(json.dumps(content, sort_keys=True))
    else:
        text = block.get("text")
        if isinstance(text, str):
            out.append(text)
        thinking = block.get("thinking")
        if isinstance(thinking, str):
            out.append(thinking)


def message_text(message: Mapping[str, Any]) -> str:
    """The searchable text of a message: string content or text blocks, tool calls' names
    and input values, tool results' content, joined by newlines."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts: list[str] = []
    if isinstance(content, list):
        for block in content:
            _block_text(block, parts)
    return "\n".join(parts)


_MS_PER_DAY = 86_400_000


@lru_cache(maxsize=4096)
def _day_terms(day_number: int) -> tuple[str, ...]:
    return tuple(date_terms(date.fromordinal(_EPOCH_ORDINAL + day_number)))


@lru_cache(maxsize=1024)
def _speaker_terms(speaker: str) -> tuple[str, ...]:
    return tuple(analyze(speaker))


_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


def message_day(metadata: object, ts: object) -> date | None:
    """The day a message is dated by in the index: an ISO ``metadata.date`` (the day it was
    said, for a conversation imported or replayed later) before ``ts`` (milliseconds, UTC:
    the day it was appended), as the summaries date their lines; None without either."""
    if isinstance(metadata, Mapping):
        raw = metadata.get("date")
        if isinstance(raw, str):
            try:
                return date.fromisoformat(raw[:10])
            except ValueError:
                pass
    if isinstance(ts, int | float) and not isinstance(ts, bool):
        return date.fromordinal(_EPOCH_ORDINAL + int(ts // _MS_PER_DAY))
    return None


def _message_day_terms(message: Mapping[str, Any]) -> tuple[str, ...]:
    day = message_day(message.get("metadata"), message.get("ts"))
    return () if day is None else _day_terms(day.toordinal() - _EPOCH_ORDINAL)


def message_terms(message: Mapping[str, Any], *, limit: int | None = None) -> MessageTerms:
    """Index terms of one archived message: its text, its speaker and its date.

    The speaker is the ``name`` field, else the role, so "what did Caroline say about ..."
    prefers Caroline's messages; the date comes from an ISO ``metadata.date`` (the day it was
    said), else from ``ts`` (milliseconds, UTC: the day it was appended), so "when ... in May
    2023" can match. Returns term frequencies and
    the document length (the number of terms, repeats included).
    """
    text = message_text(message)
    terms = analyze(text if limit is None else text[:limit])
    speaker = message.get("name") or message.get("role")
    if isinstance(speaker, str):
        terms.extend(_speaker_terms(speaker))
    terms.extend(_message_day_terms(message))
    return MessageTerms(Counter(terms), len(terms))


def document_terms(
    message: Message | Mapping[str, Any], *, kind: int | None = None
) -> MessageTerms:
    """What a stored message contributes to the index: :func:`message_terms` of at most
    ``MAX_INDEX_TEXT`` characters of its text, keeping its ``MAX_DOC_TERMS`` most frequent
    distinct terms (the earliest first among equals); the length counts every analysed term,
    up to 65,535. A summary (``kind`` the summary kind) holds ``SUMMARY_TERM`` too (not
    counted in its length). ``message`` may be the stored envelope as parsed JSON (what the
    indexer reads: no model is built for it)."""
    if isinstance(message, Message):
        data: Mapping[str, Any] = message.model_dump(mode="json", by_alias=True, exclude_none=True)
    else:
        data = message
    tf, length = message_terms(data, limit=MAX_INDEX_TEXT)
    marked = kind == KINDS["summary"]
    most = MAX_DOC_TERMS - 1 if marked else MAX_DOC_TERMS
    if len(tf) > most:
        order = {term: i for i, term in enumerate(tf)}
        kept = sorted(tf, key=lambda term: (-tf[term], order[term]))[:most]
        tf = Counter({term: tf[term] for term in sorted(kept, key=order.__getitem__)})
    if marked:
        tf[SUMMARY_TERM] = 1
        # A summary is many turns' facts in one document: counted at its full length, a
        # few dozen summaries would double the mean length BM25 normalises every turn by
        # (short turns, "Oh, Ravi, that's great!", then outrank the turn that asked).
        # Summaries are ranked in a lane of their own; in the statistics they count as a turn.
        length = min(length, SUMMARY_LENGTH)
    return MessageTerms(tf, min(length, 65_535))


def kind_of(message: Message | Mapping[str, Any]) -> int:
    """The message's kind in the index: its role's, or the summary kind (``message`` may be
    the stored envelope as parsed JSON)."""
    content_type: object
    role: object
    if isinstance(message, Message):
        content_type, role = message.content_type, message.role
    else:
        content_type, role = message.get("type", "message"), message.get("role")
    if content_type == "summary":
        return KINDS["summary"]
    return KINDS.get(role, OTHER_KIND) if isinstance(role, str) else OTHER_KIND


def document(message: Message, *, seq: int = 0, summary: bool = False) -> str:
    """The index's argument for one message (``lua/search/index_add.lua``):
    ``id<TAB>kind<TAB>length<TAB>seq<TAB>term<TAB>tf...``. Terms never hold whitespace, so a
    tab separates them."""
    assert message.id is not None, "messages read from Redis carry their id"
    kind = KINDS["summary"] if summary else kind_of(message)
    tf, length = document_terms(message, kind=kind)
    head = f"{message.id}\t{kind}\t{length}\t{seq}"
    return "\t".join([head, *(f"{term}\t{count}" for term, count in tf.items())])
